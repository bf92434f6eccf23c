"""What a Make target would run, read from `make -n` (which runs nothing), and one of its lines run on its own
with a chosen PATH, so that a recipe's checks and commands are tested without the tools they call."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]


def dry_run(*arguments: str) -> str:
    """The commands `make -n <arguments>` prints from the repository root. make is what runs the suite
    (`make test`), so it is there."""
    assert shutil.which("make"), "make is not installed: the tests run through it (make test)"
    result = subprocess.run(["make", "--no-print-directory", "-n", *arguments], capture_output=True, text=True,
                            cwd=ROOT)
    assert result.returncode == 0, result.stderr
    return result.stdout


def line_with(commands: str, marker: str) -> str:
    """The one line of `make -n` output that contains marker."""
    (line,) = [line for line in commands.splitlines() if marker in line]
    return line


def run_line(commands: str, marker: str, path: str, **environment: str) -> subprocess.CompletedProcess:
    """Run the one line of `make -n` output that contains marker with bash, from the repository root, with PATH
    set to path and nothing else in the environment but `environment`."""
    return subprocess.run(["bash", "-c", line_with(commands, marker)], capture_output=True, text=True,
                          env={"PATH": path, **environment}, cwd=ROOT)
