"""What a policy of the pack receives when the Pulumi CLI runs it with `--policy-pack-config FILE`.

pulumi/pulumi pkg/resource/analyzer/config.go: parsePolicyPackConfig reads the file (a policy's name to its
properties); ReconcilePolicyPackConfig starts from each property's schema `default` (createConfigWithDefaults),
lays the file's properties over them (applyConfig), then validates each policy's result against its schema
(validatePolicyPackConfig, gojsonschema over {"type": "object", "properties": ...}). A name the pack has no
policy for is applied to nothing and never validated, so a misspelt name is silently ignored.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
from policy_config import pack_config, stack_pack_config  # noqa: E402,F401 - after the sys.path line above

# The schema keywords the pack's config schemas use, which schema_problems checks as gojsonschema does.
KEYWORDS = {"type", "minimum", "items", "additionalProperties", "default", "description"}


def policy_config(policy, file_config: dict | None) -> dict[str, Any]:
    """The config `policy` gets: its schema's defaults, then the file's properties for it."""
    schema = policy.config_schema.properties if policy.config_schema else {}
    config = {name: spec["default"] for name, spec in schema.items() if "default" in spec}
    config.update((file_config or {}).get(policy.name, {}))
    return config


def schema_problems(policy, config: dict[str, Any]) -> list[str]:
    """What the CLI's validation would refuse in `config` for `policy` (the keywords in KEYWORDS only)."""
    schema = policy.config_schema.properties if policy.config_schema else {}
    problems = []
    for name, value in config.items():
        if name in schema:
            problems += [f"{policy.name}.{name}: {p}" for p in _value_problems(schema[name], value)]
    return problems


def _value_problems(spec: dict, value: Any) -> list[str]:
    unknown = set(spec) - KEYWORDS
    if unknown:
        return [f"schema keywords {sorted(unknown)} are not checked here"]
    kind = spec.get("type")
    if kind == "integer" and (isinstance(value, bool) or not isinstance(value, int)):
        return [f"{value!r} is not an integer"]
    if kind == "array":
        if not isinstance(value, list):
            return [f"{value!r} is not an array"]
        return [problem for item in value for problem in _value_problems(spec.get("items", {}), item)]
    if kind == "object":
        if not isinstance(value, dict):
            return [f"{value!r} is not an object"]
        extra = spec.get("additionalProperties", {})
        if not isinstance(extra, dict):
            return ["additionalProperties other than a schema is not checked here"]
        return [f"{key}: {problem}" for key, item in value.items() for problem in _value_problems(extra, item)]
    if "minimum" in spec and value < spec["minimum"]:
        return [f"{value!r} is below the minimum {spec['minimum']}"]
    return []
