"""Small helpers every component uses, so children are declared the same way everywhere."""

from __future__ import annotations

import json
from collections.abc import Mapping

import pulumi


def child(parent: pulumi.Resource, **options) -> pulumi.ResourceOptions:
    """Options for a component's child. Built explicitly, never merged over the caller's opts: a
    merged `parent` from the caller would win and detach the child from its component."""
    return pulumi.ResourceOptions(parent=parent, **options)


def invoke(parent: pulumi.Resource) -> pulumi.InvokeOptions:
    """Invoke options that reach the region's provider through the parent component."""
    return pulumi.InvokeOptions(parent=parent)


def asg_tags(tags: Mapping[str, str]) -> list[dict]:
    """ASG tags propagate to instances at launch (provider default tags do not reach them)."""
    return [{"key": key, "value": value, "propagate_at_launch": True} for key, value in sorted(tags.items())]


def assume_role_policy(*services: str) -> str:
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Effect": "Allow",
                    "Principal": {"Service": list(services) if len(services) > 1 else services[0]},
                    "Action": "sts:AssumeRole",
                }
            ],
        }
    )


def managed_policy(name: str) -> str:
    """ARN of an AWS managed policy. Commercial partition: every region in regions.py is in it."""
    return f"arn:aws:iam::aws:policy/{name}"
