"""IAM permissions declared next to the code that needs them.

Each Lambda module lists what its AWS calls need as `PERMISSIONS = (Permission(...), ...)`; the Pulumi
component that deploys the function turns the list into its role policy (components/functions), so the
policy is derived from one place and a new call without a permission fails review, not production.

Resource patterns may use {partition}, {region}, {account} and {environment}; `tag_scoped=True`
adds the condition `aws:ResourceTag/mlfleet:environment == <environment>` (destructive actions on EC2
instances and Auto Scaling groups are always tag-scoped).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from lambdas.common.tags import ENVIRONMENT as ENVIRONMENT_TAG


@dataclass(frozen=True)
class Permission:
    actions: tuple[str, ...]
    resources: tuple[str, ...] = ("*",)
    tag_scoped: bool = False
    why: str = ""
    # An IAM Condition block, with the same placeholders as resources, e.g.
    # {"StringLike": {"kms:ViaService": "sns.*.amazonaws.com"}}.
    condition: Mapping[str, Mapping[str, str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for action in self.actions:
            service, _, name = action.partition(":")
            if not service or not name or service != service.lower():
                raise ValueError(f"IAM action {action!r} is not of the form service:Action")


def needs(*actions: str, resources: tuple[str, ...] = ("*",), tag_scoped: bool = False, why: str = "",
          condition: Mapping[str, Mapping[str, str]] | None = None) -> Permission:
    return Permission(actions=tuple(actions), resources=resources, tag_scoped=tag_scoped, why=why,
                      condition=dict(condition or {}))


# mlfleet's topics are encrypted with customer-managed keys (components/alerts): publishing needs the
# key too, but only when SNS uses it on the function's behalf.
PUBLISH_TO_ENCRYPTED_TOPICS = needs(
    "kms:GenerateDataKey*", "kms:Decrypt",
    resources=("arn:{partition}:kms:*:{account}:key/*",),
    condition={"StringLike": {"kms:ViaService": "sns.*.amazonaws.com"}},
    why="publish to mlfleet's KMS-encrypted SNS topics",
)


def statements(permissions: Sequence[Permission], *, account: str, region: str, environment: str,
               partition: str = "aws") -> list[dict]:
    """IAM policy statements for `permissions`, placeholders filled, tag-scoped ones conditioned."""
    values = {"partition": partition, "account": account, "region": region, "environment": environment}

    def fill(value):
        return [item.format(**values) for item in value] if isinstance(value, (list, tuple)) else value.format(**values)

    rendered = []
    for index, permission in enumerate(permissions):
        statement: dict = {
            "Sid": f"Needs{index}",
            "Effect": "Allow",
            "Action": sorted(permission.actions),
            "Resource": [resource.format(**values) for resource in permission.resources],
        }
        condition = {op: {key: fill(value) for key, value in tests.items()}
                     for op, tests in permission.condition.items()}
        if permission.tag_scoped:
            condition.setdefault("StringEquals", {})[f"aws:ResourceTag/{ENVIRONMENT_TAG}"] = environment
        if condition:
            statement["Condition"] = condition
        rendered.append(statement)
    return rendered
