"""The first run: Make checks what each target needs before it does anything (scripts/preflight.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
import preflight  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def no_tool(_name: str) -> None:
    return None


def test_a_missing_pulumi_cli_names_the_install_command():
    assert preflight.check_pulumi(which=no_tool) == [f"the Pulumi CLI is missing: {preflight.INSTALL_PULUMI}"]


@pytest.mark.parametrize("version, ok", [("v3.200.0\n", True), ("3.141.0", True), ("v2.25.2", False), ("", False)])
def test_the_pulumi_cli_must_be_version_3(version, ok):
    problems = preflight.check_pulumi(which=lambda name: "/usr/local/bin/pulumi", version=lambda path: version)
    assert (problems == []) is ok
    if not ok:
        assert "Pulumi CLI 3.x is needed" in problems[0] and repr(version.strip()) in problems[0]


def test_missing_shellcheck_names_the_install_command():
    assert "apt-get install shellcheck" in preflight.check_shellcheck(which=no_tool)[0]
    assert preflight.check_shellcheck(which=lambda name: "/usr/bin/shellcheck") == []


def test_old_python_is_refused_with_the_version_found():
    assert "this is 3.9" in preflight.check_python((3, 9))[0]
    assert preflight.check_python((3, 11)) == preflight.check_python((3, 13)) == []


def test_the_file_backend_needs_a_passphrase(tmp_path):
    assert "no passphrase" in preflight.check_passphrase("dev", environ={})[0]
    assert preflight.check_passphrase("dev", environ={"PULUMI_CONFIG_PASSPHRASE": "x"}) == []
    missing = str(tmp_path / "nope")
    assert "does not exist" in preflight.check_passphrase("dev", environ={"PULUMI_CONFIG_PASSPHRASE_FILE": missing})[0]
    (tmp_path / "pass").write_text("x")
    assert preflight.check_passphrase("dev", environ={"PULUMI_CONFIG_PASSPHRASE_FILE": str(tmp_path / "pass")}) == []


def test_a_stack_with_a_kms_secrets_provider_needs_no_passphrase(tmp_path, monkeypatch):
    (tmp_path / "stacks").mkdir()
    (tmp_path / "stacks" / "Pulumi.kms.yaml").write_text("secretsprovider: awskms://alias/pulumi\nconfig: {}\n")
    monkeypatch.setattr(preflight, "ROOT", tmp_path)
    assert preflight.check_passphrase("kms", environ={}) == []


def test_pulumi_cloud_keeps_the_secrets_unless_the_stack_was_made_with_a_passphrase(tmp_path, monkeypatch):
    (tmp_path / "stacks").mkdir()
    (tmp_path / "stacks" / "Pulumi.dev.yaml").write_text("config: {}\n")
    monkeypatch.setattr(preflight, "ROOT", tmp_path)
    cloud = {"PULUMI_BACKEND_URL": "https://api.pulumi.com"}
    assert preflight.check_passphrase("dev", environ=cloud) == []
    assert "no passphrase" in preflight.check_passphrase("dev", environ={"PULUMI_BACKEND_URL": "s3://state/mlfleet"})[0]
    (tmp_path / "stacks" / "Pulumi.dev.yaml").write_text("encryptionsalt: v1:abc\nconfig: {}\n")
    assert "no passphrase" in preflight.check_passphrase("dev", environ=cloud)[0]


def test_credentials_missing_or_broken():
    assert "no AWS credentials found" in preflight.check_credentials(resolver=lambda: None)[0]
    assert "ProfileNotFound" in preflight.check_credentials(resolver=lambda: "ProfileNotFound: the config profile (x)")[0]
    assert preflight.check_credentials(resolver=lambda: object()) == []


def test_an_unknown_stack_lists_the_stacks_there_are():
    problem = preflight.check_stack("nope")[0]
    assert "no stacks/Pulumi.nope.yaml" in problem and "dev, prod, staging" in problem
    assert "not a stack name" in preflight.check_stack("Dev;rm")[0]


def _make(*args: str, path: str, env_extra: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    env = {"PATH": path, "HOME": os.environ.get("HOME", "/root"), **(env_extra or {})}
    return subprocess.run(["make", "--no-print-directory", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120, check=False)


def _tools_path(tmp_path: Path, *tools: str) -> str:
    """A PATH holding only make, python3 and the named tools (fakes, for pulumi), so the real machine's
    tools neither help nor hurt."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # The interpreter itself, not a version manager's shim (a pyenv shim needs pyenv on PATH).
    (bin_dir / "python3").symlink_to(Path(sys.executable).resolve())
    for tool in ("make", "sh", "bash", "mkdir"):
        real = shutil.which(tool)
        if real:
            (bin_dir / tool).symlink_to(real)
    for tool in tools:
        fake = bin_dir / tool
        fake.write_text("#!/bin/sh\necho v3.200.0\n")
        fake.chmod(0o755)
    return str(bin_dir)


def test_make_up_without_the_pulumi_cli_stops_before_creating_the_state_folder(tmp_path):
    state = tmp_path / "state"
    result = _make("up", "STACK=dev", f"PULUMI_BACKEND_URL=file://{state}", "PYTHON=python3",
                   path=_tools_path(tmp_path))
    assert result.returncode != 0
    assert "the Pulumi CLI is missing: curl -fsSL https://get.pulumi.com | sh" in result.stderr
    assert not state.exists()


def test_make_up_without_a_passphrase_says_how_to_set_it(tmp_path):
    state = tmp_path / "state"
    result = _make("up", "STACK=dev", f"PULUMI_BACKEND_URL=file://{state}", "PYTHON=python3",
                   path=_tools_path(tmp_path, "pulumi"), env_extra={"AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "y"})
    assert result.returncode != 0
    assert "PULUMI_CONFIG_PASSPHRASE" in result.stderr and "Pulumi CLI is missing" not in result.stderr
    assert not state.exists()


def test_make_test_without_shellcheck_stops_before_installing_anything(tmp_path):
    result = _make("test", "PYTHON=python3", "VENV=" + str(tmp_path / "venv"), path=_tools_path(tmp_path))
    assert result.returncode != 0
    assert "shellcheck is missing" in result.stderr
    assert not (tmp_path / "venv").exists()


def test_the_venv_is_installed_once_and_refreshed_only_when_requirements_change(tmp_path):
    venv = tmp_path / "venv"

    def planned() -> str:
        return subprocess.run(["make", "-n", "--no-print-directory", "venv", f"VENV={venv}"], cwd=ROOT,
                              capture_output=True, text=True, check=True).stdout

    assert "pip install --quiet -r requirements-dev.txt" in planned()  # no venv yet: install
    (venv).mkdir()
    stamp = venv / ".installed"
    stamp.touch()
    assert "pip install" not in planned()  # installed after the requirements last changed: nothing to do
    old = (ROOT / "requirements.txt").stat().st_mtime - 60
    os.utime(stamp, (old, old))
    assert "pip install --quiet -r requirements-dev.txt" in planned()  # a requirements file is newer: refresh


def test_make_test_runs_the_linter_pyproject_configures_from_the_venv_it_installs(tmp_path):
    venv = tmp_path / "venv"
    planned = subprocess.run(["make", "-n", "--no-print-directory", "test", f"VENV={venv}"], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout.splitlines()
    assert f"{venv}/bin/ruff check ." in planned
    assert planned.index(f"{venv}/bin/ruff check .") < planned.index(f"{venv}/bin/python -m pytest -n auto --dist worksteal")
    pinned = [line for line in (ROOT / "requirements-dev.txt").read_text().splitlines() if line.startswith("ruff")]
    assert len(pinned) == 1 and pinned[0].startswith("ruff==")
    assert "[tool.ruff.lint]" in (ROOT / "pyproject.toml").read_text()
