"""mlfleet's guardrails as pure functions over plain data: a resource is its type, name, region, input
properties (camelCase, as Pulumi gives them) and its provider's default tags. No Pulumi, no AWS here;
policy/pack.py adapts CrossGuard's arguments to these values, and the tests call the functions directly.

A resource rule returns the list of what is wrong with one resource (empty: compliant). A stack rule
returns (message, resource or None) pairs for the whole stack (one environment).

During `pulumi preview` some inputs are not known yet (an ARN of a key created in the same update).
They arrive as UNKNOWN. A rule that only needs to know a value is *set* counts UNKNOWN as set (the key
ARN will exist); a rule that needs the value itself raises UnknownValue, which CrossGuard reports as
"cannot run during preview"; at `pulumi up` every input is known and the rule runs for real.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

ENVIRONMENT_TAG = "mlfleet:environment"
MANAGED_BY_TAG = "mlfleet:managed-by"
MANAGED_BY = "pulumi"
FLEET_TAG = "mlfleet:fleet"
# A fleet group's name, mlfleet-<env>-<fleet> (components/compute/fleet.py fleet_group_name): a fleet name is
# 1-12 lowercase letters and digits, no hyphen (components/config/model.py FLEET_NAME).
FLEET_GROUP_NAME = re.compile(r"^mlfleet-.+-([a-z][a-z0-9]{0,11})$")

ASG = "aws:autoscaling/group:Group"
LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
INSTANCE = "aws:ec2/instance:Instance"
SUBNET = "aws:ec2/subnet:Subnet"
SNS_TOPIC = "aws:sns/topic:Topic"
SQS_QUEUE = "aws:sqs/queue:Queue"
DYNAMODB_TABLE = "aws:dynamodb/table:Table"
METRIC_ALARM = "aws:cloudwatch/metricAlarm:MetricAlarm"
LAMBDA_FUNCTION = "aws:lambda/function:Function"
BUDGET = "aws:budgets/budget:Budget"

# Resource types mlfleet declares (or is about to) that carry AWS tags, checked against pulumi_aws's
# inputs by tests/policy/test_taggable_types.py. A resource of another type is checked when it has tags.
TAGGABLE_TYPES = frozenset({
    ASG, LAUNCH_TEMPLATE, INSTANCE, SUBNET, SNS_TOPIC, SQS_QUEUE, DYNAMODB_TABLE, METRIC_ALARM,
    LAMBDA_FUNCTION, BUDGET,
    "aws:cloudwatch/eventRule:EventRule",
    "aws:cloudwatch/logGroup:LogGroup",
    "aws:chatbot/slackChannelConfiguration:SlackChannelConfiguration",
    "aws:ec2/eip:Eip",
    "aws:ec2/internetGateway:InternetGateway",
    "aws:ec2/natGateway:NatGateway",
    "aws:ec2/routeTable:RouteTable",
    "aws:ec2/securityGroup:SecurityGroup",
    "aws:ec2/defaultSecurityGroup:DefaultSecurityGroup",
    "aws:ec2/vpc:Vpc",
    "aws:ec2/vpcEndpoint:VpcEndpoint",
    "aws:ecs/capacityProvider:CapacityProvider",
    "aws:ecs/cluster:Cluster",
    "aws:ecs/taskDefinition:TaskDefinition",
    "aws:iam/instanceProfile:InstanceProfile",
    "aws:iam/role:Role",
    "aws:kms/key:Key",
    "aws:lambda/eventSourceMapping:EventSourceMapping",
    "aws:s3/bucket:Bucket",
    "aws:ssm/parameter:Parameter",
})

# Defaults for a run without the stack's config. CI, `make up` and `make preview` pass the stack's own values
# (scripts/policy_config.py): the config model accepts up to 1000 instances per fleet and any increasing
# budgetAlertPercents with 100, which these would refuse.
DEFAULT_MAX_SIZE_CEILING = 64
QUARTER_PERCENTS = (25, 50, 75, 100)


class Unknown:
    """A value Pulumi does not know yet during preview."""

    def __repr__(self) -> str:
        return "UNKNOWN"


UNKNOWN = Unknown()


class UnknownValue(Exception):
    """A rule needs a value that is unknown during preview; `path` names the property."""

    def __init__(self, path: str) -> None:
        super().__init__(f"{path} is not known during preview")
        self.path = path


@dataclass(frozen=True)
class Resource:
    type: str
    name: str
    props: Mapping[str, Any]
    region: str | None = None
    default_tags: Mapping[str, str] = field(default_factory=dict)  # the provider's defaultTags.tags
    urn: str = ""


StackViolation = tuple[str, Resource | None]


# --- value helpers -----------------------------------------------------------------------------------

def _known(value: Any, path: str) -> Any:
    if isinstance(value, Unknown):
        raise UnknownValue(path)
    return value


def _is_true(value: Any, path: str) -> bool:
    """pulumi_aws types some booleans as strings (launch template `encrypted`): accept both."""
    value = _known(value, path)
    return value is True or (isinstance(value, str) and value.lower() == "true")


def _is_set(value: Any) -> bool:
    return isinstance(value, Unknown) or (value is not None and value != "")


def _number(value: Any, path: str) -> float | None:
    value = _known(value, path)
    if value is None or isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _items(value: Any, path: str) -> list[Any]:
    value = _known(value, path)
    return list(value) if isinstance(value, Sequence) and not isinstance(value, str) else []


def _mapping(value: Any, path: str) -> Mapping[str, Any]:
    value = _known(value, path)
    return value if isinstance(value, Mapping) else {}


# --- resource rules (mandatory) ----------------------------------------------------------------------

def imdsv2_required(resource: Resource) -> list[str]:
    """Launch templates and instances accept only IMDSv2 (session tokens) on the metadata service."""
    if resource.type not in (LAUNCH_TEMPLATE, INSTANCE):
        return []
    options = _mapping(resource.props.get("metadataOptions"), "metadataOptions")
    tokens = _known(options.get("httpTokens"), "metadataOptions.httpTokens")
    if tokens != "required":
        return [f"metadataOptions.httpTokens is {tokens!r}; set it to 'required' (IMDSv2 only)"]
    return []


def volumes_encrypted(resource: Resource) -> list[str]:
    """Every EBS volume a launch template or instance declares is encrypted, and the root one is declared."""
    problems = []
    if resource.type == LAUNCH_TEMPLATE:
        mappings = _items(resource.props.get("blockDeviceMappings"), "blockDeviceMappings")
        ebs_mappings = [(i, m["ebs"]) for i, m in enumerate(mappings) if isinstance(m, Mapping) and m.get("ebs")]
        if not ebs_mappings:
            problems.append("declares no EBS block device mapping, so the root volume's encryption depends on the "
                            "AMI's snapshot; declare it with ebs.encrypted = true")
        for i, ebs in ebs_mappings:
            if not _is_true(ebs.get("encrypted"), f"blockDeviceMappings[{i}].ebs.encrypted"):
                problems.append(f"blockDeviceMappings[{i}].ebs.encrypted is {ebs.get('encrypted')!r}; set it to true")
    elif resource.type == INSTANCE:
        root = _mapping(resource.props.get("rootBlockDevice"), "rootBlockDevice")
        if not _is_true(root.get("encrypted"), "rootBlockDevice.encrypted"):
            problems.append("rootBlockDevice.encrypted is not true")
        for i, ebs in enumerate(_items(resource.props.get("ebsBlockDevices"), "ebsBlockDevices")):
            if not _is_true(ebs.get("encrypted"), f"ebsBlockDevices[{i}].encrypted"):
                problems.append(f"ebsBlockDevices[{i}].encrypted is not true")
    return problems


def no_public_ips(resource: Resource) -> list[str]:
    """Nothing gets a public IP address: instances sit in private subnets and leave through NAT or endpoints."""
    problems = []
    if resource.type == LAUNCH_TEMPLATE:
        interfaces = _items(resource.props.get("networkInterfaces"), "networkInterfaces")
        for i, interface in enumerate(interfaces):
            path = f"networkInterfaces[{i}].associatePublicIpAddress"
            if _is_true(interface.get("associatePublicIpAddress"), path):
                problems.append(f"{path} is true")
    elif resource.type == INSTANCE:
        if _is_true(resource.props.get("associatePublicIpAddress"), "associatePublicIpAddress"):
            problems.append("associatePublicIpAddress is true")
    elif resource.type == SUBNET:
        if _is_true(resource.props.get("mapPublicIpOnLaunch"), "mapPublicIpOnLaunch"):
            problems.append("mapPublicIpOnLaunch is true: instances launched here would get public addresses")
    return problems


def topics_encrypted(resource: Resource) -> list[str]:
    """SNS topics are encrypted with a KMS key (alerts can carry instance ids and spend figures)."""
    if resource.type == SNS_TOPIC and not _is_set(resource.props.get("kmsMasterKeyId")):
        return ["kmsMasterKeyId is not set; encrypt the topic with a KMS key"]
    return []


def queues_encrypted(resource: Resource) -> list[str]:
    """SQS queues are encrypted: a KMS key, or SQS-managed server-side encryption."""
    if resource.type != SQS_QUEUE:
        return []
    if _is_set(resource.props.get("kmsMasterKeyId")):
        return []
    if _is_true(resource.props.get("sqsManagedSseEnabled"), "sqsManagedSseEnabled"):
        return []
    return ["neither kmsMasterKeyId nor sqsManagedSseEnabled = true is set; encrypt the queue"]


def tables_encrypted_with_kms(resource: Resource) -> list[str]:
    """DynamoDB tables use KMS encryption (the aws/dynamodb key or a customer key), not the AWS-owned key.

    Every table is encrypted at rest; with the default AWS-owned key nobody can audit or revoke access
    through the key. serverSideEncryption.enabled = true makes every use of the key visible in
    CloudTrail and lets a key policy cut off the ledger, for no monthly key fee with the managed key.
    """
    if resource.type != DYNAMODB_TABLE:
        return []
    sse = _mapping(resource.props.get("serverSideEncryption"), "serverSideEncryption")
    if not _is_true(sse.get("enabled"), "serverSideEncryption.enabled"):
        return ["serverSideEncryption.enabled is not true; the table would use the AWS-owned key, which "
                "CloudTrail cannot audit and no key policy can revoke"]
    return []


def fleets_named_by(resource: Resource) -> set[str]:
    """The fleets a fleet group says it belongs to: its mlfleet:fleet tag, and the fleet its name ends with.

    The program tags every fleet group with its fleet (mlfleet:fleet, the value the instances and the Lambdas
    read) and names it mlfleet-<env>-<fleet> (components/compute/fleet.py fleet_group_name; a fleet name has no
    hyphen, so the name's last segment is the fleet whatever the environment). The tag is the identity; the
    name counts too, so that a group that lost its tag, or whose tag and name disagree, is not loosened.
    """
    fleets = set()
    tag = effective_tags(resource).get(FLEET_TAG)
    if tag is not None:
        fleets.add(str(_known(tag, f"tags.{FLEET_TAG}")))
    name = _known(resource.props.get("name"), "name")
    match = FLEET_GROUP_NAME.match(name) if isinstance(name, str) else None
    if match:
        fleets.add(match.group(1))
    return fleets


def fleet_capped(resource: Resource, ceiling: int = DEFAULT_MAX_SIZE_CEILING,
                 fleet_ceilings: Mapping[str, int] | None = None) -> list[str]:
    """Every fleet ASG has a hard cap: maxSize set, above zero, and at most its fleet's cap.

    The config CI and make pass (scripts/policy_config.py) holds each fleet's maxInstances from the stack file
    (`fleetCeilings`), so no group declares more than the reviewed stack file allows its own fleet. A group
    of no listed fleet is held to `ceiling` (the stack's largest maxInstances, 64 without the stack's config).
    """
    if resource.type != ASG:
        return []
    max_size = _number(resource.props.get("maxSize"), "maxSize")
    if max_size is None:
        return ["maxSize is not set"]
    if max_size <= 0:
        return [f"maxSize is {max_size:g}; a fleet needs a cap above 0 (remove the fleet instead)"]
    # Without listed fleets the group's fleet does not matter and is not read (a preview with unknown tags
    # still checks the ceiling).
    caps = {fleet: fleet_ceilings[fleet] for fleet in fleets_named_by(resource) if fleet in fleet_ceilings} \
        if fleet_ceilings else {}
    if caps:
        fleet = min(caps, key=lambda name: (caps[name], name))
        if max_size > caps[fleet]:
            return [f"maxSize is {max_size:g}, above the cap of fleet {fleet}, {caps[fleet]} (fleetCeilings: its "
                    "maxInstances in stacks/Pulumi.<env>.yaml, in the config `make up`, `make preview` and CI pass, "
                    "from scripts/policy_config.py; docs/ci.md)"]
        return []
    if max_size > ceiling:
        return [f"maxSize is {max_size:g}, above the policy ceiling of {ceiling} (maxSizeCeiling, for a group of no "
                "listed fleet: the stack's largest mlfleet:fleets maxInstances in the config `make up`, `make "
                "preview` and CI pass, from scripts/policy_config.py; docs/ci.md)"]
    return []


def effective_tags(resource: Resource) -> dict[str, Any]:
    """The tags AWS will put on the resource: provider default tags, then tagsAll, then its own tags.

    ASG tags are a list of {key, value, propagateAtLaunch}, and the AWS provider does not apply default
    tags to ASGs, so an ASG has only its own list.
    """
    if resource.type == ASG:
        entries = _items(resource.props.get("tags"), "tags")
        return {e.get("key"): e.get("value") for e in entries if isinstance(e, Mapping)}
    tags: dict[str, Any] = dict(resource.default_tags)
    tags.update(_mapping(resource.props.get("tagsAll"), "tagsAll"))
    tags.update(_mapping(resource.props.get("tags"), "tags"))
    return tags


def required_tags(resource: Resource) -> list[str]:
    """Taggable resources carry mlfleet:environment and mlfleet:managed-by=pulumi."""
    if resource.type not in TAGGABLE_TYPES and "tags" not in resource.props:
        return []
    tags = effective_tags(resource)
    problems = []
    if not _is_set(tags.get(ENVIRONMENT_TAG)):
        problems.append(f"tag {ENVIRONMENT_TAG} is missing")
    managed_by = tags.get(MANAGED_BY_TAG)
    if not isinstance(managed_by, Unknown) and managed_by != MANAGED_BY:
        problems.append(f"tag {MANAGED_BY_TAG} is {managed_by!r}, expected {MANAGED_BY!r}")
    return problems


# --- resource rules (advisory) -----------------------------------------------------------------------

def dev_without_on_demand(resource: Resource) -> list[str]:
    """dev fleets run on spot only: on-demand capacity there costs 2-3x for work that can wait."""
    if resource.type != ASG or effective_tags(resource).get(ENVIRONMENT_TAG) != "dev":
        return []
    policy = _mapping(resource.props.get("mixedInstancesPolicy"), "mixedInstancesPolicy")
    distribution = _mapping(policy.get("instancesDistribution"), "mixedInstancesPolicy.instancesDistribution")
    base = _number(distribution.get("onDemandBaseCapacity"), "instancesDistribution.onDemandBaseCapacity") or 0
    above = _number(distribution.get("onDemandPercentageAboveBaseCapacity"),
                    "instancesDistribution.onDemandPercentageAboveBaseCapacity") or 0
    if base > 0 or above > 0:
        return [f"dev fleet buys on-demand capacity (base {base:g}, {above:g}% above base); dev should run on spot"]
    return []


# --- stack rules (mandatory) -------------------------------------------------------------------------

def _asg_name(asg: Resource) -> str:
    return str(_known(asg.props.get("name"), f"{asg.name}.name") or asg.name)


def _referenced_names(alarm: Resource) -> tuple[set[str], list[str]]:
    """Dimension values and metric-math expressions of an alarm, top-level and in its metric queries."""
    values: set[str] = set()
    expressions: list[str] = []
    dimension_sets = [_mapping(alarm.props.get("dimensions"), f"{alarm.name}.dimensions")]
    for i, query in enumerate(_items(alarm.props.get("metricQueries"), f"{alarm.name}.metricQueries")):
        query = _mapping(query, f"{alarm.name}.metricQueries[{i}]")
        metric = _mapping(query.get("metric"), f"{alarm.name}.metricQueries[{i}].metric")
        dimension_sets.append(_mapping(metric.get("dimensions"), f"{alarm.name}.metricQueries[{i}].metric.dimensions"))
        expression = _known(query.get("expression"), f"{alarm.name}.metricQueries[{i}].expression")
        if isinstance(expression, str):
            expressions.append(expression)
    for dimensions in dimension_sets:
        for key, value in dimensions.items():
            values.add(str(_known(value, f"{alarm.name}.dimensions.{key}")))
    return values, expressions


def _alarm_covers(alarm: Resource, asg_name: str) -> bool:
    values, expressions = _referenced_names(alarm)
    quoted = re.compile(r"""["']""" + re.escape(asg_name) + r"""["']""")
    return asg_name in values or any(quoted.search(e) for e in expressions)


def fleets_have_idle_alarms(resources: Iterable[Resource]) -> list[StackViolation]:
    """Every ASG is watched by a CloudWatch alarm in its own region whose metrics name the ASG."""
    resources = list(resources)
    alarms = [r for r in resources if r.type == METRIC_ALARM]
    violations: list[StackViolation] = []
    for asg in (r for r in resources if r.type == ASG):
        name = _asg_name(asg)
        if not any(a.region == asg.region and _alarm_covers(a, name) for a in alarms):
            violations.append((f"fleet ASG {name} ({asg.region}) has no idle alarm in its region whose metric "
                               f"queries name it (expected one like mlfleet-<env>-<fleet>-idle)", asg))
    return violations


def fleets_have_reapers(resources: Iterable[Resource]) -> list[StackViolation]:
    """Every region with a fleet ASG runs the environment's reaper function (mlfleet-<env>-reaper)."""
    resources = list(resources)
    functions = {(f.region, _known(f.props.get("name"), f"{f.name}.name"))
                 for f in resources if f.type == LAMBDA_FUNCTION}
    violations: list[StackViolation] = []
    for asg in (r for r in resources if r.type == ASG):
        environment = effective_tags(asg).get(ENVIRONMENT_TAG)
        if not _is_set(environment):
            violations.append((f"fleet ASG {_asg_name(asg)} has no {ENVIRONMENT_TAG} tag, so its reaper "
                               "cannot be found", asg))
            continue
        expected = f"mlfleet-{_known(environment, f'{asg.name}.tags')}-reaper"
        if (asg.region, expected) not in functions:
            violations.append((f"fleet ASG {_asg_name(asg)} ({asg.region}) has no reaper: no Lambda function "
                               f"{expected} in {asg.region}", asg))
    return violations


def _notification_percent(notification: Mapping[str, Any]) -> float | None:
    if _known(notification.get("thresholdType"), "notifications.thresholdType") != "PERCENTAGE":
        return None
    return _number(notification.get("threshold"), "notifications.threshold")


def _has_subscriber(notification: Mapping[str, Any]) -> bool:
    return any(_items(notification.get(key), f"notifications.{key}")
               for key in ("subscriberEmailAddresses", "subscriberSnsTopicArns"))


def budget_problems(budget: Resource, actual_percents: Sequence[int] = QUARTER_PERCENTS) -> list[str]:
    """What a budget lacks: an ACTUAL alert at each percent and a FORECASTED one, each with a subscriber."""
    notifications = _items(budget.props.get("notifications"), "notifications")
    actual = set()
    forecasted = False
    for notification in notifications:
        if not isinstance(notification, Mapping) or not _has_subscriber(notification):
            continue
        kind = _known(notification.get("notificationType"), "notifications.notificationType")
        if kind == "FORECASTED":
            forecasted = True
        elif kind == "ACTUAL":
            percent = _notification_percent(notification)
            if percent is not None:
                actual.add(percent)
    problems = []
    missing = [p for p in actual_percents if float(p) not in actual]
    if missing:
        problems.append("no ACTUAL percentage notification with a subscriber at " + ", ".join(f"{p}%" for p in missing))
    if not forecasted:
        problems.append("no FORECASTED notification with a subscriber")
    return problems


def environment_has_budget(resources: Iterable[Resource],
                           actual_percents: Sequence[int] = QUARTER_PERCENTS) -> list[StackViolation]:
    """The environment has a budget that alerts at each configured percent of actual spend and on the forecast.

    The percents CI passes are the stack's budgetAlertPercents (scripts/policy_config.py); the default, each
    quarter, is the model's default and is for a run without the stack's config only.
    """
    budgets = [r for r in resources if r.type == BUDGET]
    if not budgets:
        return [("the environment declares no aws:budgets/budget:Budget", None)]
    reports = [(budget, budget_problems(budget, actual_percents)) for budget in budgets]
    if any(not problems for _, problems in reports):
        return []
    return [(f"budget {budget.name}: {'; '.join(problems)}", budget) for budget, problems in reports]


# --- provider data -----------------------------------------------------------------------------------

def provider_default_tags(provider_props: Mapping[str, Any]) -> dict[str, str]:
    """An aws provider's defaultTags.tags; provider inputs arrive JSON-encoded as strings, or as objects."""
    default_tags = provider_props.get("defaultTags")
    if isinstance(default_tags, str):
        try:
            default_tags = json.loads(default_tags)
        except json.JSONDecodeError:
            return {}
    if not isinstance(default_tags, Mapping):
        return {}
    tags = default_tags.get("tags")
    return dict(tags) if isinstance(tags, Mapping) else {}
