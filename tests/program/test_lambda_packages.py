"""Each function's archive runs on its own: its handler imports with nothing but the archive's files.

The other tests import from the repository, where every package is present; only this test would see
a function that imports a package its archive leaves out (it would fail at its first invocation in AWS).
"""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from components.functions.python_function import PROJECT_ROOT, package_files

FUNCTIONS = sorted(p.parent.name for p in (PROJECT_ROOT / "lambdas").glob("*/handler.py"))


@pytest.mark.parametrize("function", FUNCTIONS)
def test_handler_imports_from_its_archive_alone(function, tmp_path):
    for path in package_files(function):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(PROJECT_ROOT / path, tmp_path / path)
    # -P: the script's directory is not put on sys.path; cwd is the unpacked archive, as in Lambda's /var/task.
    result = subprocess.run([sys.executable, "-P", "-c", f"import sys; sys.path.insert(0, '.'); "
                             f"import lambdas.{function}.handler as h; assert callable(h.handler)"],
                            cwd=tmp_path, capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stderr


def test_the_scheduler_archive_carries_the_jobs_package():
    files = package_files("scheduler")
    assert "lambdas/jobs/ledger.py" in files and "lambdas/common/catalog.py" in files
    assert not any(f.startswith("lambdas/reaper/") for f in files) and not any(f.startswith("lambdas/jobs/cli/") for f in files)
