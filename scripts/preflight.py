"""Check what a Make target needs before it does anything, and say how to get what is missing.

    python3 scripts/preflight.py python          # Python 3.11+ (before the virtualenv is made)
    python3 scripts/preflight.py test            # shellcheck, Python 3.11+
    python3 scripts/preflight.py deploy dev      # the Pulumi CLI, the state passphrase, AWS credentials

Every problem is reported at once, each with the command that installs or sets what is missing; the
exit status is 2 when anything is missing, so `make` stops before it creates a venv or a state folder.
Standard library only (boto3 is used for the credentials check when it is importable), so it runs with
the system Python before the project's virtualenv exists.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MIN_PYTHON = (3, 11)
PULUMI_MAJOR = 3

INSTALL_PULUMI = "curl -fsSL https://get.pulumi.com | sh   (or: brew install pulumi/tap/pulumi)"
INSTALL_SHELLCHECK = "apt-get install shellcheck   (or: brew install shellcheck)"
SET_PASSPHRASE = ("export PULUMI_CONFIG_PASSPHRASE=...   (or PULUMI_CONFIG_PASSPHRASE_FILE=<file>); keep it: "
                  "it encrypts this stack's secrets in the local state")
SET_CREDENTIALS = "aws sso login --profile <profile> && export AWS_PROFILE=<profile>   (or export AWS_ACCESS_KEY_ID/...)"

def check_python(version: Sequence[int] = tuple(sys.version_info[:2])) -> list[str]:
    if tuple(version) < MIN_PYTHON:
        found = ".".join(map(str, version))
        return [f"Python {MIN_PYTHON[0]}.{MIN_PYTHON[1]}+ is needed, this is {found}: install a newer one and run "
                f"`make PYTHON=python3.{MIN_PYTHON[1]} ...`"]
    return []


def check_shellcheck(which: Callable[[str], str | None] = shutil.which) -> list[str]:
    return [] if which("shellcheck") else [f"shellcheck is missing (the tests lint every shell script): {INSTALL_SHELLCHECK}"]


def pulumi_major(version_text: str) -> int | None:
    match = re.search(r"v?(\d+)\.\d+\.\d+", version_text)
    return int(match.group(1)) if match else None


def check_pulumi(which: Callable[[str], str | None] = shutil.which, version: Callable[[str], str] | None = None) -> list[str]:
    path = which("pulumi")
    if not path:
        return [f"the Pulumi CLI is missing: {INSTALL_PULUMI}"]
    text = (version or _pulumi_version)(path)
    major = pulumi_major(text)
    if major != PULUMI_MAJOR:
        return [f"Pulumi CLI {PULUMI_MAJOR}.x is needed, `pulumi version` says {text.strip()!r}: {INSTALL_PULUMI}"]
    return []


def _pulumi_version(path: str) -> str:
    try:
        return subprocess.run([path, "version"], capture_output=True, text=True, timeout=30, check=False).stdout
    except (OSError, subprocess.TimeoutExpired) as error:
        return str(error)


def stack_file(stack: str) -> Path:
    return ROOT / "stacks" / f"Pulumi.{stack}.yaml"


def check_stack(stack: str) -> list[str]:
    if not re.fullmatch(r"[a-z][a-z0-9-]{1,17}", stack or ""):
        return [f"STACK={stack!r} is not a stack name: make <target> STACK=dev|staging|prod"]
    if not stack_file(stack).is_file():
        known = sorted(p.name[len("Pulumi."):-len(".yaml")] for p in (ROOT / "stacks").glob("Pulumi.*.yaml"))
        return [f"there is no stacks/Pulumi.{stack}.yaml (stacks: {', '.join(known)}); README, 'Add an environment'"]
    return []


def _secrets_provider(stack: str) -> str | None:
    """The stack file's `secretsprovider:` (awskms://..., hashivault://...), if it names one."""
    path = stack_file(stack)
    if not path.is_file():
        return None
    match = re.search(r"^secretsprovider:\s*(\S+)", path.read_text(), re.MULTILINE)
    return match.group(1) if match else None


def _uses_passphrase_salt(stack: str) -> bool:
    """`encryptionsalt:` in the stack file: the stack was created with the passphrase provider."""
    path = stack_file(stack)
    return path.is_file() and re.search(r"^encryptionsalt:", path.read_text(), re.MULTILINE) is not None


def check_passphrase(stack: str, environ: Mapping[str, str] = os.environ) -> list[str]:
    """The passphrase secrets provider (the default of the file and cloud-storage backends) needs a passphrase;
    another provider named in the stack file does not, nor Pulumi Cloud's own (an https:// backend's default,
    unless the stack was created with a passphrase). Pulumi would otherwise prompt, or fail in CI."""
    provider = _secrets_provider(stack)
    if provider and not provider.startswith("passphrase"):
        return []
    backend = environ.get("PULUMI_BACKEND_URL", "")
    if not provider and backend.startswith(("https://", "http://")) and not _uses_passphrase_salt(stack):
        return []
    if environ.get("PULUMI_CONFIG_PASSPHRASE"):
        return []
    passphrase_file = environ.get("PULUMI_CONFIG_PASSPHRASE_FILE")
    if passphrase_file:
        if Path(passphrase_file).is_file():
            return []
        return [f"PULUMI_CONFIG_PASSPHRASE_FILE={passphrase_file!r} does not exist: {SET_PASSPHRASE}"]
    return [f"no passphrase for the secrets of stack {stack!r}: {SET_PASSPHRASE}"]


def check_credentials(environ: Mapping[str, str] = os.environ, resolver: Callable[[], object] | None = None) -> list[str]:
    """AWS credentials resolvable by the SDK Pulumi's AWS provider uses the same chain as."""
    found = (resolver or _resolve_credentials)()
    if found is None:
        return [f"no AWS credentials found: {SET_CREDENTIALS}"]
    if isinstance(found, str):
        return [f"AWS credentials: {found}: {SET_CREDENTIALS}"]
    return []


def _resolve_credentials() -> object:
    """boto3's credential chain (env, profile, SSO, container, instance metadata with a 1 s timeout);
    without boto3, the places that chain reads first. Returns None when none is found, a str on error."""
    os.environ.setdefault("AWS_METADATA_SERVICE_TIMEOUT", "1")
    os.environ.setdefault("AWS_METADATA_SERVICE_NUM_ATTEMPTS", "1")
    try:
        import boto3  # noqa: PLC0415 - optional: the system Python may not have it
    except ImportError:
        keys = ("AWS_ACCESS_KEY_ID", "AWS_PROFILE", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_FULL_URI")
        files = (Path.home() / ".aws" / "credentials", Path.home() / ".aws" / "config")
        return True if any(os.environ.get(k) for k in keys) or any(f.is_file() for f in files) else None
    try:
        return boto3.Session().get_credentials()
    except Exception as error:  # a broken profile or SSO cache: say what the SDK said
        return f"{type(error).__name__}: {error}"


def problems_for(target: str, stack: str | None = None) -> list[str]:
    if target == "python":
        return check_python()
    if target == "test":
        return check_python() + check_shellcheck()
    if target == "deploy":
        problems = check_stack(stack or "")
        if problems:
            return problems
        return check_pulumi() + check_passphrase(stack) + check_credentials()
    raise ValueError(f"unknown preflight target {target!r}")


def main(argv: Sequence[str]) -> int:
    if not argv or argv[0] not in ("python", "test", "deploy") or len(argv) != (2 if argv[0] == "deploy" else 1):
        print("usage: python3 scripts/preflight.py python | test | deploy STACK", file=sys.stderr)
        return 2
    problems = problems_for(argv[0], argv[1] if len(argv) > 1 else None)
    if problems:
        what = {"python": "the virtualenv", "test": "the tests"}.get(argv[0], f"stack {argv[-1]!r}")
        print(f"Before {what} can run, {len(problems)} thing(s) are missing:", file=sys.stderr)
        for problem in problems:
            print(f"  - {problem}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
