"""rules.TAGGABLE_TYPES agrees with pulumi_aws: each listed type has a `tags` input, and every resource
type the stacks declare that has a `tags` input is listed (so a new taggable type cannot slip past the
required-tags rule by declaring no tags)."""

from __future__ import annotations

import importlib

import pytest

import rules
from pulumi_harness import STACKS, committed_rendering


def has_tags_input(type_token: str) -> bool:
    """'aws:ec2/launchTemplate:LaunchTemplate' -> pulumi_aws.ec2.LaunchTemplateArgs has `tags`."""
    _, module_path, class_name = type_token.split(":")
    module = module_path.split("/")[0]
    module = {"lambda": "lambda_"}.get(module, module)  # `lambda` is a Python keyword
    return hasattr(getattr(importlib.import_module(f"pulumi_aws.{module}"), f"{class_name}Args"), "tags")


@pytest.mark.parametrize("type_token", sorted(rules.TAGGABLE_TYPES))
def test_listed_type_is_taggable_in_pulumi_aws(type_token):
    assert has_tags_input(type_token)


def test_every_taggable_type_the_stacks_declare_is_listed():
    declared = {r.type for stack in STACKS for r in committed_rendering(stack).resources if r.type.startswith("aws:")}
    unlisted = sorted(t for t in declared - rules.TAGGABLE_TYPES if has_tags_input(t))
    assert unlisted == []
