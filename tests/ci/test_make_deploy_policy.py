"""`make preview` and `make up` run the policy pack's mandatory rules with the config derived from the stack file,
as CI does (mk/policy.mk pulumi_with_policy_pack, docs/ci.md): read from `make -n`, which runs nothing, and the
pulumi line run on its own with a stand-in `pulumi` that keeps what it was given."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest
from make_recipes import dry_run, line_with, run_line
from scripts.policy_config import stack_pack_config

# A stand-in for the Pulumi CLI: records its arguments and a copy of the file given to --policy-pack-config.
FAKE_PULUMI = """#!/bin/bash
printf '%s\\n' "$@" > "$RECORD/args"
while [ $# -gt 0 ]; do
  if [ "$1" = --policy-pack-config ]; then echo "$2" > "$RECORD/config-path"; cp "$2" "$RECORD/config.json"; fi
  shift
done
"""
COMMANDS = {"preview": ["preview", "--diff"], "up": ["up"]}


def pulumi_words(commands: str) -> list[str]:
    """The words of the pulumi command on the line that writes the pack's config."""
    line = line_with(commands, "scripts/policy_config.py")
    return shlex.split(line[line.rindex("pulumi "):])


@pytest.mark.parametrize("target", COMMANDS)
def test_make_passes_the_pack_and_the_config_derived_from_the_stack_file(target):
    """Regression: only CI and `make policy-preview` passed `--policy-pack policy`, so `make up`, the command the
    README gives for a deploy, applied what the mandatory rules refuse (a fleet group above its cap, an
    unencrypted volume) and `make preview` did not show it."""
    commands = dry_run(target, "STACK=dev")
    line = line_with(commands, "scripts/policy_config.py")
    assert 'venv/bin/python scripts/policy_config.py dev > "$config"' in line
    assert line.startswith("set -euo pipefail; config=$(mktemp); trap 'rm -f \"$config\"' EXIT;")
    words = pulumi_words(commands)
    assert words[:len(COMMANDS[target]) + 1] == ["pulumi", *COMMANDS[target]]
    assert words[len(COMMANDS[target]) + 1:] == ["--stack", "dev", "--policy-pack", "policy",
                                                "--policy-pack-config", "$config"]
    # The usage and the preflight first; then the virtualenvs the pack and the config script run in.
    lines = commands.splitlines()
    order = [next(i for i, text in enumerate(lines) if marker in text)
             for marker in ("scripts/preflight.py deploy dev", "policy-deps", "pip install --quiet -r policy/requirements.txt",
                            "scripts/policy_config.py")]
    assert order == sorted(order)


def test_policy_preview_is_the_same_preview():
    assert pulumi_words(dry_run("policy-preview", "STACK=dev")) == pulumi_words(dry_run("preview", "STACK=dev"))


@pytest.fixture
def fake_pulumi(tmp_path):
    bin_dir, record = tmp_path / "bin", tmp_path / "record"
    bin_dir.mkdir()
    record.mkdir()
    (bin_dir / "pulumi").write_text(FAKE_PULUMI)
    (bin_dir / "pulumi").chmod(0o755)
    return bin_dir, record


def run_pulumi_line(target: str, stack: str, bin_dir: Path, record: Path):
    # The config script runs with this interpreter's virtualenv, which has the program's dependencies.
    python_bin = Path(sys.executable).parent  # the virtualenv's bin: $(BIN) of the Makefile, which has `python`
    commands = dry_run(target, f"STACK={stack}", f"BIN={python_bin}")
    return run_line(commands, "scripts/policy_config.py", f"{bin_dir}:/usr/bin:/bin",
                    RECORD=str(record), TMPDIR=str(record))


@pytest.mark.parametrize("target", COMMANDS)
def test_pulumi_gets_the_stacks_config_in_a_file_removed_after(target, fake_pulumi):
    bin_dir, record = fake_pulumi
    result = run_pulumi_line(target, "prod", bin_dir, record)
    assert result.returncode == 0, result.stderr
    assert json.loads((record / "config.json").read_text()) == stack_pack_config("prod")
    assert (record / "args").read_text().split()[-2:] == ["--policy-pack-config",
                                                         (record / "config-path").read_text().strip()]
    assert not Path((record / "config-path").read_text().strip()).exists()


def test_a_stack_without_config_stops_before_pulumi(fake_pulumi):
    bin_dir, record = fake_pulumi
    result = run_pulumi_line("up", "qa", bin_dir, record)
    assert result.returncode == 2 and "no stack file stacks/Pulumi.qa.yaml" in result.stderr
    assert not (record / "args").exists()
    assert [p.name for p in record.iterdir()] == []  # the temporary file is gone too
