"""The `config:` block of Pulumi.yaml, generated from the config model (defaults live in the model only).

The Pulumi CLI treats a project-namespace key declared without `default` (or `value`) as required: a
stack that does not set it stops with "Stack 'dev' is missing configuration value ..." (pulumi/pulumi
sdk/go/common/workspace/config.go, mergeConfig). So each stack key is declared as follows:
- the model requires it: declared without default, so Pulumi itself names it when a stack omits it;
- the model has a default: declared with that default; Pulumi fills it in and the program receives
  the value the model would have used;
- the model's default is None (unset means "derive it" or "not used"): not declared at all. Pulumi has
  no null default (`default: null` decodes to nil, which mergeConfig counts as no default), so a
  declaration would make the key required. The model still validates it, and unknown keys fail there.
Pulumi types keys as string, integer, boolean or array with `items` (pulumi/pulumi
sdk/go/common/workspace/project.json, `simpleConfigType`); object-valued keys are declared without a
type, which the CLI accepts and does not check (config.go, validateStackConfigValues checks only
explicitly typed keys). The model checks them.

    python scripts/render_config.py          # rewrite Pulumi.yaml's config block (and docs/configuration.md)
    python scripts/render_config.py --check  # exit 1 if either is stale
"""

from __future__ import annotations

import typing
from typing import Any

import yaml
from pydantic.fields import FieldInfo

from .model import DERIVED_FIELDS, StackConfig, inner_type

# Everything from this line on is rewritten by scripts/render_config.py.
MARKER = "# Generated from components/config/model.py by scripts/render_config.py: do not edit below."

_SCALARS = {bool: "boolean", int: "integer", str: "string"}


def pulumi_type(annotation: Any) -> dict[str, Any]:
    """`{"type": ..., "items": ...}` for a model annotation; `{}` for an object (Pulumi has no object type)."""
    annotation = inner_type(annotation)
    origin = typing.get_origin(annotation)
    if origin is dict:
        return {}
    if origin is tuple:
        item = pulumi_type(typing.get_args(annotation)[0])
        if "type" not in item:
            raise TypeError(f"{annotation}: Pulumi arrays need a typed `items`")
        return {"type": "array", "items": item}
    return {"type": _SCALARS[annotation]}


def _plain(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _stack_fields() -> dict[str, FieldInfo]:
    return {f.alias: f for name, f in StackConfig.model_fields.items() if name not in DERIVED_FIELDS}


def undeclared_keys() -> tuple[str, ...]:
    """Stack keys whose model default is None: declaring them would make Pulumi require them."""
    return tuple(key for key, f in _stack_fields().items()
                 if not f.is_required() and f.get_default(call_default_factory=True) is None)


def required_keys() -> tuple[str, ...]:
    return tuple(key for key, f in _stack_fields().items() if f.is_required())


def declarations() -> dict[str, dict[str, Any]]:
    """Pulumi.yaml's `config:` block: every stack key except the undeclared ones, in model order."""
    declared = {}
    for key, field in _stack_fields().items():
        if key in undeclared_keys():
            continue
        if not field.description:
            raise ValueError(f"mlfleet:{key} has no description in components/config/model.py")
        declaration = {**pulumi_type(field.annotation), "description": field.description}
        if not field.is_required():
            declaration["default"] = _plain(field.get_default(call_default_factory=True))
        declared[key] = declaration
    return declared


def _comment(text: str) -> str:
    return "\n".join(f"# {line}".rstrip() for line in text.splitlines())


class _Dumper(yaml.SafeDumper):
    """Mappings in block style, lists of defaults on one line (`default: [25, 50, 75, 100]`)."""


_Dumper.add_representer(
    list, lambda dumper, data: dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=True))
_Dumper.add_representer(
    dict, lambda dumper, data: dumper.represent_mapping("tag:yaml.org,2002:map", data, flow_style=False))


def render_config_block() -> str:
    fields = _stack_fields()
    required = ", ".join(required_keys())
    unset = "\n".join(f"  mlfleet:{key}: {fields[key].description}" for key in undeclared_keys())
    header = _comment(
        "Every stack key with its type, description and the model's default. Keys without a default are\n"
        f"required; Pulumi names them when a stack leaves them out: {required}.\n"
        "Object-valued keys have no `type` (Pulumi has none for objects); the model validates them.\n"
        "Keys that are unset by default are not declared (a declaration without default would make them\n"
        f"required); a stack may set them, and the model validates them:\n{unset}"
    )
    body = yaml.dump({"config": declarations()}, Dumper=_Dumper, sort_keys=False, width=1000, allow_unicode=True)
    return f"{MARKER}\n{header}\n{body}"


def render_pulumi_yaml(current: str) -> str:
    """`current` (Pulumi.yaml's text) with everything from the generated-block line on rewritten."""
    start = current.find("\n" + MARKER.split(" by ")[0])
    if start < 0:
        raise ValueError(f"Pulumi.yaml has no line {MARKER!r} to generate the config block after")
    return current[:start + 1] + render_config_block()
