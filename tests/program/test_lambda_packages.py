"""Each function's archive runs on its own: its handler imports with nothing but the archive's files and
what the Lambda Python runtime itself provides.

The other tests import from the repository with the venv's packages (pydantic, yaml, pulumi, hypothesis, ...)
all present; only this test would see a function that imports a module its archive leaves out, or a
third-party package the runtime does not have (it would fail at its first invocation in AWS).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from components.functions.python_function import PROJECT_ROOT, RUNTIME, package_files

FUNCTIONS = sorted(p.parent.name for p in (PROJECT_ROOT / "lambdas").glob("*/handler.py"))

# What the Lambda Python runtime has besides the standard library: the AWS SDK for Python. "The Python runtime
# includes the SDK for Python (Boto3)" (AWS Lambda developer guide, "Building Lambda functions with Python"),
# which brings botocore and their dependencies (jmespath, python-dateutil, six, s3transfer, urllib3). Nothing
# else of the venv (pydantic, yaml, pulumi, ...) is there, so the archive is imported in an interpreter that
# cannot see the venv's site-packages.
RUNTIME_DISTRIBUTIONS = ("boto3",)


def _runtime_modules() -> dict[str, Path]:
    """The top-level modules of boto3 and its dependencies, followed through the installed distributions'
    requirements (extras left out), each located with importlib in the venv: {module name: path}."""
    providers = importlib.metadata.packages_distributions()
    distributions: set[str] = set()
    todo = list(RUNTIME_DISTRIBUTIONS)
    while todo:
        name = re.split(r"[\s<>=!~;(\[]", todo.pop(), maxsplit=1)[0].lower().replace("_", "-")
        if name in distributions:
            continue
        distributions.add(name)
        todo += [r for r in importlib.metadata.requires(name) or () if "extra ==" not in r]
    modules: dict[str, Path] = {}
    for module, owners in providers.items():
        if not {o.lower().replace("_", "-") for o in owners} & distributions or module.startswith("_"):
            continue
        spec = importlib.util.find_spec(module)
        assert spec is not None and spec.origin, module
        if spec.submodule_search_locations:  # a package: its folder
            (location,) = spec.submodule_search_locations
            modules[module] = Path(location)
        else:  # a single-file module (six.py)
            modules[module] = Path(spec.origin)
    return modules


@pytest.fixture(scope="module")
def runtime_packages(tmp_path_factory) -> Path:
    """A folder holding only symlinks to the SDK's modules: the runtime's packages, nothing else."""
    folder = tmp_path_factory.mktemp("runtime")
    modules = _runtime_modules()
    assert {"boto3", "botocore"} <= modules.keys(), modules
    for name, path in modules.items():
        (folder / path.name).symlink_to(path, target_is_directory=path.is_dir())
    return folder


CHECK = """
import sys
sys.path[:0] = [{archive!r}, {runtime!r}]
assert not any("site-packages" in p for p in sys.path[2:]), sys.path
import lambdas.{function}.handler as h
assert callable(h.handler), "handler is not callable"
"""


def _runtime_interpreter() -> str | None:
    """An interpreter of the Lambda runtime's Python version (RUNTIME, python3.13), where this machine has one:
    on PATH, or built by pyenv (whose shim on PATH refuses a version that is not selected). None otherwise."""
    version = RUNTIME.removeprefix("python")
    root = Path(os.environ.get("PYENV_ROOT", "~/.pyenv")).expanduser()
    candidates = [shutil.which(f"python{version}"), *sorted(map(str, root.glob(f"versions/{version}*/bin/python{version}")))]
    for candidate in filter(None, candidates):
        probe = subprocess.run([candidate, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                               capture_output=True, text=True, timeout=30)
        if probe.returncode == 0 and probe.stdout.strip() == version:
            return candidate
    return None


RUNTIME_INTERPRETER = _runtime_interpreter()


@pytest.mark.parametrize("interpreter", [
    pytest.param(sys.executable, id="venv"),
    # The runtime's own version: a module the standard library dropped since the venv's (PEP 594's dead
    # batteries went in 3.13) or syntax it refuses is only seen there.
    pytest.param(RUNTIME_INTERPRETER, id=RUNTIME, marks=pytest.mark.skipif(
        RUNTIME_INTERPRETER is None, reason=f"no {RUNTIME} interpreter on this machine (PATH, pyenv)")),
])
@pytest.mark.parametrize("function", FUNCTIONS)
def test_handler_imports_from_its_archive_and_the_runtime_alone(function, interpreter, tmp_path, runtime_packages):
    archive = tmp_path / "task"
    for path in package_files(function):
        (archive / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(PROJECT_ROOT / path, archive / path)
    # -I: no PYTHON* variables, no user site, not the script's folder on sys.path; -S: no site module, so no
    # site-packages of the venv. sys.path is the unpacked archive (Lambda's /var/task, also the cwd), the SDK,
    # and the standard library.
    code = CHECK.format(archive=str(archive), runtime=str(runtime_packages), function=function)
    result = subprocess.run([interpreter, "-I", "-S", "-c", code], cwd=archive, capture_output=True,
                            text=True, env={"PATH": "/usr/bin:/bin"}, timeout=60)
    assert result.returncode == 0, result.stderr


def test_the_scheduler_archive_carries_the_jobs_package():
    files = package_files("scheduler")
    assert "lambdas/jobs/ledger.py" in files and "lambdas/common/catalog.py" in files
    assert not any(f.startswith("lambdas/reaper/") for f in files) and not any(f.startswith("lambdas/jobs/cli/") for f in files)
