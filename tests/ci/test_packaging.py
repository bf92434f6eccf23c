"""`pip install .` installs the mlfleet command as the package `mlfleet`, never a top-level `lambdas`.

The files are laid out by setuptools itself (its build_py step, which is what a wheel holds) from a copy of
pyproject.toml and lambdas/, and then imported with `lambdas` made unimportable, so that an absolute
`from lambdas...` left in any installed module, or a package the command needs but pyproject.toml does not
list, fails here.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())

# Runs in a copy of the project: setuptools reads pyproject.toml there and writes the installed layout.
BUILD = """
import sys
from setuptools.dist import Distribution
dist = Distribution({"script_name": "setup.py"})
dist.parse_config_files()
command = dist.get_command_obj("build_py")
command.build_lib = sys.argv[1]
dist.run_command("build_py")
"""

# Runs against the installed layout only: `lambdas` cannot be imported, as in a user's site-packages.
IMPORT_ALL = """
import importlib, pkgutil, sys
sys.modules["lambdas"] = None
sys.path.insert(0, sys.argv[1])
import mlfleet
for module in pkgutil.walk_packages(mlfleet.__path__, "mlfleet."):
    if not module.name.endswith(".__main__"):  # `python -m mlfleet.jobs.cli` runs the command
        importlib.import_module(module.name)
"""

RUN_COMMAND = """
import importlib, sys
sys.modules["lambdas"] = None
sys.path.insert(0, sys.argv[1])
module, _, function = sys.argv[2].partition(":")
sys.exit(getattr(importlib.import_module(module), function)(sys.argv[3:]))
"""


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    source = tmp_path_factory.mktemp("source")
    shutil.copy(ROOT / "pyproject.toml", source)
    shutil.copytree(ROOT / "lambdas", source / "lambdas", ignore=shutil.ignore_patterns("__pycache__"))
    site = tmp_path_factory.mktemp("site-packages")
    subprocess.run([sys.executable, "-W", "ignore", "-c", BUILD, str(site)], cwd=source, check=True,
                   capture_output=True, text=True, timeout=120)
    return site


def test_the_only_top_level_package_is_mlfleet_with_the_catalog_data(installed):
    assert sorted(p.name for p in installed.iterdir()) == ["mlfleet"]
    assert (installed / "mlfleet" / "common" / "data" / "instance_catalog.json").is_file()
    assert (installed / "mlfleet" / "common" / "data" / "interruption_rates.json").is_file()
    # The functions' own folders are not the command's: they stay out.
    shipped = {p.parent.relative_to(installed).as_posix() for p in installed.rglob("__init__.py")}
    assert not shipped & {"mlfleet/reaper", "mlfleet/budget_guard", "mlfleet/job_events"}


def test_every_installed_module_imports_without_a_lambdas_package(installed):
    result = subprocess.run([sys.executable, "-c", IMPORT_ALL, str(installed)], cwd="/", capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr


def test_the_console_script_runs_from_the_installed_package(installed):
    entry = PYPROJECT["project"]["scripts"]["mlfleet"]
    assert entry.startswith("mlfleet.")
    policy = subprocess.run([sys.executable, "-c", RUN_COMMAND, str(installed), entry, "-e", "dev", "--region",
                             "us-east-1", "policy", "--account", "123456789012"], cwd="/", capture_output=True,
                            text=True, timeout=120)
    assert policy.returncode == 0 and policy.stdout.startswith("{\n") and policy.stderr == "", policy.stderr
    missing = subprocess.run([sys.executable, "-c", RUN_COMMAND, str(installed), entry, "submit", "--dry-run",
                              "--stack", "dev", "-f", "no-such-spec.yaml"], cwd="/", capture_output=True, text=True,
                             timeout=120)
    assert (missing.returncode, missing.stdout) == (2, "")
    assert missing.stderr.startswith("mlfleet: spec file no-such-spec.yaml: no such file"), missing.stderr

