"""Read a stack's Pulumi config into the StackConfig model, or fail with one readable error."""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping
from typing import Any

import pulumi
from pydantic import ValidationError

from .model import StackConfig, stack_keys

PROJECT = "mlfleet"


class ConfigError(ValueError):
    """The stack configuration is invalid. The message names every bad key and value."""


def _decode(raw: Any) -> Any:
    """Pulumi hands config values over as strings; objects and arrays arrive as JSON text."""
    if isinstance(raw, str) and raw[:1] in ("[", "{"):
        try:
            return json.loads(raw)
        except json.JSONDecodeError:
            return raw
    return raw


# Where the two derived fields come from, for error messages.
_DERIVED_KEYS = {"environment": "stack name", "homeRegion": "aws:region"}


def _format_location(loc: tuple[Any, ...]) -> str:
    head, *rest = loc or ("(stack)",)
    key = _DERIVED_KEYS.get(str(head), f"{PROJECT}:{head}")
    for part in rest:
        key += f"[{part}]" if isinstance(part, int) else f".{part}"
    return key


def _format_errors(error: ValidationError) -> list[str]:
    problems = error.errors(include_url=False)
    # A list whose item failed also reports "too short" once the item is dropped: say it once.
    failed_items = {tuple(p["loc"][:-1]) for p in problems if p["loc"] and isinstance(p["loc"][-1], int)}
    lines = []
    for problem in problems:
        loc = tuple(problem["loc"])
        kind = problem["type"]
        if kind == "too_short" and loc in failed_items:
            continue
        if kind == "extra_forbidden":
            known = stack_keys() if len(loc) == 1 else ()
            hint = difflib.get_close_matches(str(loc[-1]), known, n=1)
            lines.append(f"{_format_location(loc)}: unknown key" + (f" (did you mean {PROJECT}:{hint[0]}?)" if hint else ""))
        elif kind == "missing":
            lines.append(f"{_format_location(loc)}: required key is not set")
        elif kind == "value_error":
            # Our own validators name the value in their message already.
            message = problem["msg"].removeprefix("Value error, ")
            lines.append(f"{_format_location(loc)}: {message}" if loc else message)
        else:
            lines.append(f"{_format_location(loc)}: {problem['msg']} (got {problem.get('input')!r})")
    return lines


def parse_stack_config(values: Mapping[str, Any], stack: str) -> StackConfig:
    """Validate raw config (`{"mlfleet:regions": '["us-east-1"]', "aws:region": "us-east-1"}`).

    Keys outside the `mlfleet:` namespace belong to providers and Pulumi itself and are left alone,
    except `aws:region`, the home region.
    """
    document: dict[str, Any] = {"environment": stack}
    home = values.get("aws:region")
    if home is not None:
        document["homeRegion"] = home
    for key, raw in values.items():
        namespace, _, name = key.partition(":")
        if namespace != PROJECT:
            continue
        name = name.removeprefix("config:")  # the pre-3.0 key form "mlfleet:config:regions"
        document[name] = _decode(raw)
    try:
        return StackConfig.model_validate(document)
    except ValidationError as error:
        lines = _format_errors(error)
        raise ConfigError(
            f"stack {stack!r} has {len(lines)} configuration error(s):\n  - " + "\n  - ".join(lines)
        ) from None


def load_stack_config() -> StackConfig:
    """The running stack's config. Raises ConfigError before any resource is declared."""
    values: dict[str, Any] = dict(pulumi.runtime.config.get_config_env())
    values.update(pulumi.runtime.config.CONFIG.get())
    return parse_stack_config(values, pulumi.get_stack())
