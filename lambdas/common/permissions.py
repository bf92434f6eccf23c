"""IAM permissions declared next to the code that needs them.

Each Lambda module lists what its AWS calls need as `PERMISSIONS = (Permission(...), ...)`; the Pulumi
component that deploys the function turns the list into its role policy (components/functions), so the
policy is derived from one place and a new call without a permission fails review, not production.

Resource patterns may use {partition}, {region}, {account} and {environment}; `tag_scoped=True`
adds the condition `aws:ResourceTag/mlfleet:environment == <environment>` (destructive actions on EC2
instances and Auto Scaling groups are always tag-scoped).

Tag writes name the tag keys they write (`tag_keys`): the condition `ForAllValues:StringEquals
aws:TagKeys` lets the request carry those keys only, so a function that may tag this environment's
machines can never rewrite the tags that scope it (`mlfleet:environment`) or protect a machine
(`mlfleet:keep-alive`). `Null aws:TagKeys = false` goes with it: ForAllValues is true for a request with
no tag keys at all, and EC2's DeleteTags without tags deletes every tag of the resource
(https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_condition-single-vs-multi-valued-context-keys.html).
`tag_values` (a StringLike pattern) bounds the values written with `aws:RequestTag/<key>` (with
several keys, each one the request writes: StringLikeIfExists).
The IAM lint (tests/rules/iam_lint.py) checks every rendered statement against the IAM reference.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from .tags import ENVIRONMENT as ENVIRONMENT_TAG

# Actions that write tags: a permission granting any of them must say which tag keys it writes.
TAG_WRITES = frozenset({"ec2:CreateTags", "ec2:DeleteTags", "autoscaling:CreateOrUpdateTags", "autoscaling:DeleteTags"})

@dataclass(frozen=True)
class Permission:
    actions: tuple[str, ...]
    resources: tuple[str, ...] = ("*",)
    tag_scoped: bool = False
    why: str = ""
    # An IAM Condition block, with the same placeholders as resources, e.g.
    # {"StringLike": {"kms:ViaService": "sns.*.amazonaws.com"}}.
    condition: Mapping[str, Mapping[str, str | Sequence[str]]] = field(default_factory=dict)
    # The only tag keys the request may carry (tag writes must declare them), and a StringLike pattern
    # every value written must match.
    tag_keys: tuple[str, ...] = ()
    tag_values: str | None = None

    def __post_init__(self) -> None:
        for action in self.actions:
            service, _, name = action.partition(":")
            if not service or not name or service != service.lower():
                raise ValueError(f"IAM action {action!r} is not of the form service:Action")
        if TAG_WRITES & set(self.actions) and not self.tag_keys:
            raise ValueError(f"{', '.join(sorted(TAG_WRITES & set(self.actions)))}: name the tag keys written (tag_keys)")
        if self.tag_values is not None and not self.tag_keys:
            raise ValueError("tag_values bounds the values of tag_keys: name the keys")


def needs(*actions: str, resources: tuple[str, ...] = ("*",), tag_scoped: bool = False, why: str = "",
          condition: Mapping[str, Mapping[str, str | Sequence[str]]] | None = None, tag_keys: Sequence[str] = (),
          tag_values: str | None = None) -> Permission:
    return Permission(actions=tuple(actions), resources=resources, tag_scoped=tag_scoped, why=why,
                      condition=dict(condition or {}), tag_keys=tuple(tag_keys), tag_values=tag_values)


# The values mlfleet's tag writes carry: ISO-8601 times (datetime.isoformat), e.g. 2026-11-23T09:30:00+00:00.
ISO_8601_TIME = "????-??-??T??:??:??*"

# mlfleet's topics are encrypted with customer-managed keys (components/alerts): publishing needs the
# key too, but only when SNS uses it on the function's behalf, and only the environment's own keys (each
# carries the environment tag; KMS authorizes both actions on the key with aws:ResourceTag, the IAM
# reference for AWS KMS).
PUBLISH_TO_ENCRYPTED_TOPICS = needs(
    "kms:GenerateDataKey*", "kms:Decrypt",
    resources=("arn:{partition}:kms:*:{account}:key/*",),
    tag_scoped=True,
    condition={"StringLike": {"kms:ViaService": "sns.*.amazonaws.com"}},
    why="publish to the environment's KMS-encrypted SNS topics",
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
        if permission.tag_keys:
            condition.setdefault("ForAllValues:StringEquals", {})["aws:TagKeys"] = sorted(permission.tag_keys)
            condition.setdefault("Null", {})["aws:TagKeys"] = "false"
        if permission.tag_values is not None:
            # A key missing from the request makes StringLike false ("Condition operators", IAM User Guide), so
            # with several keys, a request writing one of them is bounded by ...IfExists; ForAllValues and
            # Null above still ask for at least one key and no other.
            operator = "StringLike" if len(permission.tag_keys) == 1 else "StringLikeIfExists"
            for key in sorted(permission.tag_keys):
                condition.setdefault(operator, {})[f"aws:RequestTag/{key}"] = permission.tag_values
        if condition:
            statement["Condition"] = condition
        rendered.append(statement)
    return rendered
