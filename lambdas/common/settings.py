"""Read a Lambda's environment into a frozen dataclass, failing once with every problem named."""

from __future__ import annotations

import dataclasses
import os
import typing
from collections.abc import Mapping


class SettingsError(ValueError):
    """A function's environment is missing a variable or holds a value of the wrong type."""


def _convert(name: str, raw: str, kind: typing.Any) -> typing.Any:
    optional = [k for k in typing.get_args(kind) if k is not type(None)]
    if type(None) in typing.get_args(kind) and len(optional) == 1:
        kind = optional[0]  # `int | None`: a variable that is set holds an int; unset is the field's default
    if kind is bool:
        lowered = raw.strip().lower()
        if lowered in ("true", "1", "yes"):
            return True
        if lowered in ("false", "0", "no"):
            return False
        raise SettingsError(f"environment variable {name}={raw!r} is not a boolean (true/false)")
    if kind in (int, float):
        try:
            return kind(raw)
        except ValueError:
            raise SettingsError(f"environment variable {name}={raw!r} is not a{'n' if kind is int else ''} {kind.__name__}") from None
    if kind == tuple[str, ...]:
        return tuple(part.strip() for part in raw.split(",") if part.strip())
    return raw


def from_env(cls, environ: Mapping[str, str] | None = None):
    """Build dataclass `cls` from environment variables named like its fields, upper-cased.

    Fields with defaults are optional; every missing required variable is listed in one error.
    """
    environ = os.environ if environ is None else environ
    hints = typing.get_type_hints(cls)
    values, missing = {}, []
    for field in dataclasses.fields(cls):
        name = field.name.upper()
        if name in environ:
            values[field.name] = _convert(name, environ[name], hints[field.name])
        elif field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            missing.append(name)
    if missing:
        raise SettingsError(f"{cls.__name__}: missing environment variable(s): {', '.join(missing)}")
    return cls(**values)
