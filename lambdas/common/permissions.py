"""IAM permissions declared next to the code that needs them.

Each Lambda module lists what its AWS calls need as `PERMISSIONS = (Permission(...), ...)`; the Pulumi
component that deploys the function turns the list into its role policy (components/functions), so the
policy is derived from one place and a new call without a permission fails review, not production.

Resource patterns may use {partition}, {region}, {account} and {environment}; `tag_scoped=True`
adds the condition `aws:ResourceTag/mlfleet:environment == <environment>` (destructive actions on EC2
instances and Auto Scaling groups are always tag-scoped).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Permission:
    actions: tuple[str, ...]
    resources: tuple[str, ...] = ("*",)
    tag_scoped: bool = False
    why: str = ""

    def __post_init__(self) -> None:
        for action in self.actions:
            service, _, name = action.partition(":")
            if not service or not name or service != service.lower():
                raise ValueError(f"IAM action {action!r} is not of the form service:Action")


def needs(*actions: str, resources: tuple[str, ...] = ("*",), tag_scoped: bool = False, why: str = "") -> Permission:
    return Permission(actions=tuple(actions), resources=resources, tag_scoped=tag_scoped, why=why)
