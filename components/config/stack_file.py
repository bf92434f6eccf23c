"""Read a stack file (stacks/Pulumi.<env>.yaml) for mlfleet's own tools (Make targets, tests, checks).

Pulumi reads the stack file for the program; our tools read it directly. A YAML syntax error becomes
one StackFileError naming the file, line and column, never a scanner traceback. This module needs
PyYAML only (no pydantic, no pulumi), so Make targets can load it with the system Python.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent.parent
STACKS_DIR = ROOT / "stacks"


class StackFileError(ValueError):
    """A stack file is missing, is not valid YAML, or is not a mapping with a `config:` mapping."""


def stack_path(stack: str) -> Path:
    return STACKS_DIR / f"Pulumi.{stack}.yaml"


def _shown(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def parse_yaml(path: Path, *, compose: bool = False, loader: type = yaml.SafeLoader) -> Any:
    """The YAML document at `path` (its node graph with `compose`), or one StackFileError."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise StackFileError(f"no file {_shown(path)}") from None
    try:
        return yaml.compose(text, Loader=loader) if compose else yaml.load(text, Loader=loader)
    except yaml.MarkedYAMLError as error:
        mark, started = error.problem_mark or error.context_mark, error.context_mark
        where = f"{_shown(path)}:{mark.line + 1}:{mark.column + 1}" if mark else _shown(path)
        context = ""
        if error.context:
            context = f" ({error.context}"
            if started and started is not mark:
                context += f" that starts at line {started.line + 1}, column {started.column + 1}"
            context += ")"
        raise StackFileError(f"{where}: not valid YAML: {error.problem or error.context}{context}") from None
    except yaml.YAMLError as error:
        raise StackFileError(f"{_shown(path)}: not valid YAML: {error}") from None


def read_stack_file(path: Path) -> dict[str, Any]:
    """A stack file's `config:` mapping, keys as written (`aws:region`, `mlfleet:regions`, ...)."""
    if not path.is_file():
        raise StackFileError(f"no stack file {_shown(path)}")
    document = parse_yaml(path) or {}
    config = document.get("config") if isinstance(document, dict) else None
    if not isinstance(config, dict):
        raise StackFileError(f"{_shown(path)}: a stack file is a mapping whose `config:` maps keys to values")
    return config
