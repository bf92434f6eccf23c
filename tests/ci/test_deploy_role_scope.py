"""docs/ci.md limits each environment's deploy role to its IAM roles and instance profiles by name. The
patterns must cover every role and instance profile the program declares, or the first `pulumi up` from
CI stops with AccessDenied on iam:CreateRole. They are checked here against every committed stack's
rendered resources (tests/snapshots).

Pulumi auto-names a resource without an explicit name from its logical name plus a random suffix
(https://www.pulumi.com/docs/iac/concepts/resources/names/), under its `path` when it has one.
"""

from __future__ import annotations

import fnmatch
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STACKS = ("dev", "staging", "prod")
DOC = (ROOT / "docs" / "ci.md").read_text()
ROLE_PATTERNS = ("role/{env}-*", "role/mlfleet/{env}/*")
PROFILE_PATTERNS = ("instance-profile/{env}-*",)
SUFFIX = "-0a1b2c3"  # stands for auto-naming's random suffix


def _physical(resource: dict) -> str:
    """The name IAM will know it by, with its path: explicit, or auto-named from a prefix or the logical name."""
    inputs = resource.get("inputs") or {}
    if inputs.get("name"):
        name = inputs["name"]
    elif inputs.get("namePrefix"):
        name = inputs["namePrefix"] + SUFFIX
    else:
        name = resource["name"] + SUFFIX
    return (inputs.get("path") or "/").lstrip("/") + name


@pytest.mark.parametrize("stack", STACKS)
def test_every_role_and_instance_profile_is_within_the_documented_patterns(stack):
    resources = json.loads((ROOT / "tests" / "snapshots" / f"{stack}.json").read_text())
    checked = 0
    for resource in resources:
        kind = {"aws:iam/role:Role": ("role", ROLE_PATTERNS),
                "aws:iam/instanceProfile:InstanceProfile": ("instance-profile", PROFILE_PATTERNS)}.get(resource["type"])
        if kind is None:
            continue
        prefix, patterns = kind
        resource_path = f"{prefix}/{_physical(resource)}"
        assert any(fnmatch.fnmatchcase(resource_path, p.format(env=stack)) for p in patterns), \
            f"{resource['type']} {resource['name']} ({resource_path}) is outside docs/ci.md's {patterns}"
        checked += 1
    assert checked >= 2


def test_the_doc_names_the_patterns():
    for pattern in (*ROLE_PATTERNS, *PROFILE_PATTERNS):
        assert f"arn:aws:iam::<account>:{pattern.format(env='<env>')}" in DOC, pattern
