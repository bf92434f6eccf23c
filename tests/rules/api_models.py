"""What each rendered resource asks of the AWS APIs, checked against botocore's service models.

The mocks echo the program's inputs, so nothing in a mocked run says whether AWS would take them. This
module translates every rendered resource into the requests the provider sends to create and configure it
(pulumi-aws bridges terraform-provider-aws, so the mapping follows internal/service/<service>/<resource>.go
there) and validates each request against the installed botocore service model
(botocore/data/<service>/<version>/service-2.json): string lengths and patterns, enums, numeric ranges,
list and map sizes, members that do not exist and required members that are missing.

- Limits the models state only in their documentation text are declared in DOCUMENTED, each with the
  sentence that states it; a test checks that the installed model still says so.
- Physical names Pulumi generates (autonaming: the logical name, "-", 7 random characters) are checked
  like names mlfleet sets, and against pulumi-aws's own cap on autonames (AUTONAME_MAXLEN).
- Values the mocks invented (ids, ARNs, URLs: Recorded.generated) stand for what AWS assigns in a real
  run: they are checked for their type only.
- Every input a resource sets must be read by its translation or skipped with a reason, so a new
  property cannot slip past the checks; a resource type without a translation fails, unless UNMAPPED
  says why it sends no request.
"""

from __future__ import annotations

import base64
import functools
import inspect
import io
import json
import re
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import botocore.session
import pulumi
import pulumi_aws
import regex
from pulumi_harness import ACCOUNT_ID, ROOT, Recorded, Rendering

# --- the owners' data ---------------------------------------------------------------------------------


@functools.cache
def service_model(service: str):
    return botocore.session.get_session().get_service_model(service)


def input_shape(service: str, operation: str):
    return service_model(service).operation_model(operation).input_shape


def shape_at(service: str, operation: str, path: str):
    """The shape of a member path like "Targets[].Id" in an operation's input."""
    shape = input_shape(service, operation)
    for part in filter(None, re.split(r"\.|(?=\[\])", path)):
        shape = shape.member if part == "[]" else shape.members[part]
    return shape


def documentation(service: str, operation: str, path: str) -> str:
    """A member's documentation as plain text (the model stores HTML); a map entry's is its map's."""
    text = shape_at(service, operation, re.sub(r"\{[^}]*\}$", "", path)).documentation or ""
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", text)).replace("&amp;", "&").strip()


# Java regular expressions in the models spell supplementary characters as UTF-16 surrogate pairs.
_SURROGATE_RANGE = r"\uD800\uDC00-\uDBFF\uDFFF"


@functools.cache
def compiled(pattern: str) -> regex.Pattern:
    """A model's pattern for `regex` (which knows \\p{L}); AWS matches the whole value."""
    return regex.compile(pattern.replace(_SURROGATE_RANGE, r"\U00010000-\U0010FFFF"))


# The cap pulumi-aws puts on the names it generates: provider/resource_overrides.go (AutoName(..., maxlen))
# and provider/autonaming.go (255 for every other resource with an input `name`). Longer, and
# NewUniqueName (pulumi/pulumi sdk/go/common/resource/resource_id.go) fails the preview.
AUTONAME_MAXLEN = {
    ("aws:iam/role:Role", "name"): 64,
    ("aws:cloudwatch/eventRule:EventRule", "name"): 64,
    ("aws:cloudwatch/eventTarget:EventTarget", "targetId"): 255,
    ("aws:lambda/permission:Permission", "statementId"): 100,
    ("aws:lambda/function:Function", "name"): 64,
    ("aws:sqs/queue:Queue", "name"): 80,
    ("aws:sns/topic:Topic", "name"): 80,
}
DEFAULT_AUTONAME_MAXLEN = 255
AUTONAME_SUFFIX = "-a1b2c3d"  # the separator and 7 random characters


@dataclass(frozen=True)
class Documented:
    """A limit a model states in its documentation only; `phrase` must appear in the member's documentation
    (and so must every value of `enum`)."""

    service: str
    operation: str
    path: str
    phrase: str
    pattern: str | None = None
    max_bytes: int | None = None
    minimum: int | None = None
    maximum: int | None = None
    enum: tuple[Any, ...] | None = None
    max_items: int | None = None
    # A predicate for rules no field above expresses, and what it expects (for the message).
    accepts: Callable[[Any], bool] | None = None
    expectation: str = ""

    def applies(self, service: str, operation: str, path: str) -> bool:
        return (service, operation) == (self.service, self.operation) and _generic(path) == self.path


# Valid characters of security group names, descriptions and rule descriptions (the EC2 model's text).
_EC2_TEXT = r"[a-zA-Z0-9 ._\-:/()#,@\[\]+=&;{}!$*]"
_NAME_255 = r"[A-Za-z0-9_-]{1,255}"
_UP_TO_255 = "Up to 255 letters (uppercase and lowercase), numbers, underscores, and hyphens are allowed"
_ASG = ("autoscaling", "CreateAutoScalingGroup")
_DISTRIBUTION = "MixedInstancesPolicy.InstancesDistribution"


def _retention_days() -> tuple[int, ...]:
    text = documentation("logs", "PutRetentionPolicy", "retentionInDays")
    listed = text.split("Possible values are:", 1)[1].split(".", 1)[0]
    return tuple(int(n) for n in re.findall(r"\d+", listed))


def _group_metrics() -> tuple[str, ...]:
    return tuple(re.findall(r"\b(?:Group|WarmPool)\w+", documentation("autoscaling", "EnableMetricsCollection", "Metrics")))


def _alarm_period(seconds: Any) -> bool:
    return seconds in (10, 20, 30) or (isinstance(seconds, int) and seconds > 0 and seconds % 60 == 0)


_PERIOD = {"phrase": "Valid values are 10, 20, 30, and any multiple of 60", "accepts": _alarm_period,
           "expectation": "10, 20, 30 or a multiple of 60"}
_HEALTH_CHECKS = "(EC2|EBS|ELB|VPC_LATTICE)"

DOCUMENTED = (
    Documented("sqs", "CreateQueue", "QueueName", "A queue name can have up to 80 characters",
               pattern=r"[A-Za-z0-9_-]{1,80}"),
    *(Documented("sqs", "CreateQueue", f"Attributes{{{name}}}", f"{name} – ", minimum=low, maximum=high)
      for name, low, high in (("DelaySeconds", 0, 900), ("MaximumMessageSize", 1024, 1048576),
                              ("MessageRetentionPeriod", 60, 1209600), ("VisibilityTimeout", 0, 43200))),
    Documented("sns", "CreateTopic", "Name", "must be between 1 and 256 characters long", pattern=r"[A-Za-z0-9_-]{1,256}"),
    Documented("sns", "Subscribe", "Protocol", "Supported protocols include:",
               enum=("http", "https", "email", "email-json", "sms", "sqs", "application", "lambda", "firehose")),
    Documented("lambda", "CreateFunction", "FunctionName", "it is limited to 64 characters in length",
               pattern=r"[a-zA-Z0-9_-]{1,64}"),
    Documented("logs", "PutRetentionPolicy", "retentionInDays", "Possible values are:", enum=_retention_days()),
    Documented("ecs", "CreateCluster", "clusterName", _UP_TO_255, pattern=_NAME_255),
    Documented("ecs", "RegisterTaskDefinition", "family", _UP_TO_255, pattern=_NAME_255),
    Documented("ecs", "RegisterTaskDefinition", "containerDefinitions[].name", _UP_TO_255, pattern=_NAME_255),
    Documented("ecs", "RegisterTaskDefinition", "tags", "Maximum number of tags per resource - 50", max_items=50),
    Documented("ec2", "CreateSecurityGroup", "GroupName", "Up to 255 characters in length. Can't start with sg-.",
               pattern=rf"(?!sg-){_EC2_TEXT}{{1,255}}"),
    Documented("ec2", "CreateSecurityGroup", "Description", "Up to 255 characters in length",
               pattern=rf"{_EC2_TEXT}{{0,255}}"),
    *(Documented("ec2", operation, "IpPermissions[].IpRanges[].Description", "Up to 255 characters in length",
                 pattern=rf"{_EC2_TEXT}{{0,255}}")
      for operation in ("AuthorizeSecurityGroupIngress", "AuthorizeSecurityGroupEgress")),
    Documented("ec2", "CreateLaunchTemplate", "LaunchTemplateData.MetadataOptions.HttpPutResponseHopLimit",
               "Possible values: Integers from 1 to 64", minimum=1, maximum=64),
    # The model carries base64 text; the limit is on the script itself (checked decoded).
    Documented("ec2", "CreateLaunchTemplate", "LaunchTemplateData.UserData", "User data is limited to 16 KB",
               accepts=lambda text: len(base64.b64decode(text)) <= 16 * 1024, expectation="at most 16 KiB once decoded"),
    Documented("cloudwatch", "PutDashboard", "DashboardName",
               'The maximum length is 255, and valid characters are A-Z, a-z, 0-9, "-", and "_"', pattern=_NAME_255),
    Documented("cloudwatch", "PutMetricAlarm", "TreatMissingData", "Valid Values: breaching | notBreaching | ignore | missing",
               enum=("breaching", "notBreaching", "ignore", "missing")),
    Documented("cloudwatch", "PutMetricAlarm", "Period", **_PERIOD),
    Documented("cloudwatch", "PutMetricAlarm", "Metrics[].MetricStat.Period",
               "the period can be 1, 5, 10, 20, 30, 60, or any multiple of 60",
               accepts=lambda s: s in (1, 5) or _alarm_period(s), expectation="1, 5, 10, 20, 30 or a multiple of 60"),
    Documented("ssm", "PutParameter", "Value", "Standard parameters have a value limit of 4 KB", max_bytes=4096),
    Documented("kms", "ScheduleKeyDeletion", "PendingWindowInDays", "it must be between 7 and 30, inclusive",
               minimum=7, maximum=30),
    Documented("dynamodb", "CreateTable", "GlobalSecondaryIndexes", "(the maximum is 20)", max_items=20),
    Documented(*_ASG, f"{_DISTRIBUTION}.SpotAllocationStrategy", "The following lists the valid values:",
               enum=("capacity-optimized", "capacity-optimized-prioritized", "lowest-price", "price-capacity-optimized")),
    Documented(*_ASG, f"{_DISTRIBUTION}.OnDemandAllocationStrategy", "The following lists the valid values:",
               enum=("lowest-price", "prioritized")),
    Documented(*_ASG, f"{_DISTRIBUTION}.OnDemandPercentageAboveBaseCapacity",
               "Controls the percentages of On-Demand Instances and Spot Instances", minimum=0, maximum=100),
    Documented(*_ASG, "HealthCheckType", "The valid values are EC2, EBS, ELB, and VPC_LATTICE",
               pattern=rf"{_HEALTH_CHECKS}(,{_HEALTH_CHECKS})*"),
    Documented("autoscaling", "SuspendProcesses", "ScalingProcesses[]", "One or more of the following processes:",
               enum=("Launch", "Terminate", "AddToLoadBalancer", "AlarmNotification", "AZRebalance", "HealthCheck",
                     "InstanceRefresh", "ReplaceUnhealthy", "ScheduledActions")),
    Documented("autoscaling", "EnableMetricsCollection", "Granularity", "The only valid value is 1Minute", enum=("1Minute",)),
    Documented("autoscaling", "EnableMetricsCollection", "Metrics[]", "You can specify one or more of the following metrics:",
               enum=_group_metrics()),
)

# Members whose values belong to another model's enum (service, shape).
ENUM_FROM = {
    ("autoscaling", "CreateAutoScalingGroup", "MixedInstancesPolicy.LaunchTemplate.Overrides[].InstanceType"):
        ("ec2", "InstanceType"),
}

# Rendered types that send no AWS request, with the reason.
UNMAPPED = {
    "pulumi:providers:aws": "a provider configures the engine's plugin (region, default tags); it sends no request of its own",
}


# --- requests -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ApiCall:
    resource: str  # the Pulumi resource name
    type: str
    service: str
    operation: str
    params: dict[str, Any]

    @property
    def label(self) -> str:
        return f"{self.service}:{self.operation}"


@dataclass(frozen=True)
class Problem:
    resource: str
    where: str
    message: str

    def __str__(self) -> str:
        return f"{self.resource}: {self.where}: {self.message}"


class Resource:
    """A rendered resource as a translation reads it: every input it reads is marked as used."""

    def __init__(self, recorded: Recorded, default_tags: dict[str, str]):
        self.name = recorded.name
        self.type = recorded.type
        self.inputs = recorded.inputs
        self.default_tags = default_tags
        self.used: set[str] = set()
        self.autonames: list[tuple[str, str]] = []

    def get(self, key: str, default: Any = None) -> Any:
        self.used.add(key)
        return self.inputs.get(key, default)

    def __getitem__(self, key: str) -> Any:
        self.used.add(key)
        return self.inputs[key]

    def skip(self, *keys: str) -> None:
        """Inputs that configure Pulumi or the provider rather than an API member (the caller says why)."""
        self.used.update(keys)

    def physical_name(self, key: str = "name") -> str:
        """The name mlfleet sets, or the one Pulumi generates from the logical name."""
        if self.get(key) is not None:
            return self.inputs[key]
        generated = self.name + AUTONAME_SUFFIX
        self.autonames.append((key, generated))
        return generated

    def tags(self) -> dict[str, str]:
        """What the provider sends: its default tags merged with the resource's own (tags_all)."""
        return {**self.default_tags, **(self.get("tags") or {})}


Translation = Callable[[Resource], list[tuple[str, str, dict[str, Any]]]]
TRANSLATIONS: dict[str, Translation] = {}


def translates(type_token: str):
    def register(function: Translation) -> Translation:
        TRANSLATIONS[type_token] = function
        return function
    return register


def _compact(value: Any) -> Any:
    """Drop unset (None) members, as the provider does not send them."""
    if isinstance(value, dict):
        return {k: _compact(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_compact(v) for v in value]
    return value


def _number(value: Any) -> Any:
    """The wire format carries every number as a float; integral ones go to the API as integers."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _numbers(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_numbers(v) for v in value]
    return _number(value)


def _pascal(value: Any) -> Any:
    """Pulumi's nested camelCase keys as the API's PascalCase members, where the two map one to one."""
    if isinstance(value, dict):
        return {k[:1].upper() + k[1:]: _pascal(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_pascal(v) for v in value]
    return _number(value)


def _bool_text(value: Any) -> Any:
    """Some provider arguments are strings that the provider parses as booleans ("true"/"false")."""
    return {"true": True, "false": False}.get(value, value) if isinstance(value, str) else value


def _int_text(value: Any) -> Any:
    """Some provider arguments are strings that the provider parses as integers."""
    return int(value) if isinstance(value, str) and value.isdigit() else _number(value)


def _tag_list(tags: dict[str, str], key: str = "Key", value: str = "Value") -> list[dict] | None:
    return [{key: k, value: v} for k, v in sorted(tags.items())] or None


def _tag_specs(tags: dict[str, str], resource_type: str) -> list[dict] | None:
    listed = _tag_list(tags)
    return [{"ResourceType": resource_type, "Tags": listed}] if listed else None


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


# --- translations, one per resource type (terraform-provider-aws internal/service/<service>/...) ----------


@translates("aws:autoscaling/group:Group")
def _autoscaling_group(r: Resource):
    name = r.physical_name()
    mixed = _pascal(r.get("mixedInstancesPolicy"))
    refresh = r.get("instanceRefresh")
    preferences = _pascal(refresh.get("preferences")) if refresh else None
    if preferences and "InstanceWarmup" in preferences:
        preferences["InstanceWarmup"] = _int_text(preferences["InstanceWarmup"])
    calls = [("autoscaling", "CreateAutoScalingGroup", {
        "AutoScalingGroupName": name,
        "MinSize": _number(r["minSize"]),
        "MaxSize": _number(r["maxSize"]),
        "DesiredCapacity": _number(r.get("desiredCapacity")),
        "VPCZoneIdentifier": ",".join(r.get("vpcZoneIdentifiers") or []) or None,
        "CapacityRebalance": r.get("capacityRebalance"),
        "NewInstancesProtectedFromScaleIn": r.get("protectFromScaleIn"),
        "HealthCheckType": r.get("healthCheckType"),
        "HealthCheckGracePeriod": _number(r.get("healthCheckGracePeriod")),
        "MixedInstancesPolicy": mixed,
        "Tags": [{"Key": t["key"], "Value": t["value"], "PropagateAtLaunch": t["propagateAtLaunch"],
                  "ResourceId": name, "ResourceType": "auto-scaling-group"} for t in r.get("tags") or []] or None,
    })]
    if r.get("enabledMetrics"):
        calls.append(("autoscaling", "EnableMetricsCollection", {
            "AutoScalingGroupName": name, "Metrics": r["enabledMetrics"], "Granularity": r.get("metricsGranularity", "1Minute")}))
    if refresh:
        calls.append(("autoscaling", "StartInstanceRefresh", {
            "AutoScalingGroupName": name, "Strategy": refresh.get("strategy"), "Preferences": preferences}))
    if r.get("suspendedProcesses"):
        calls.append(("autoscaling", "SuspendProcesses", {"AutoScalingGroupName": name, "ScalingProcesses": r["suspendedProcesses"]}))
    calls.append(("autoscaling", "DeleteAutoScalingGroup", {"AutoScalingGroupName": name, "ForceDelete": r.get("forceDelete")}))
    r.skip("waitForCapacityTimeout")  # how long the provider itself polls the group after a change, no request member
    return calls


@translates("aws:budgets/budget:Budget")
def _budget(r: Resource):
    name = r.physical_name()
    calls = [("budgets", "CreateBudget", {
        "AccountId": ACCOUNT_ID,
        "Budget": {
            "BudgetName": name,
            "BudgetType": r["budgetType"],
            "TimeUnit": r["timeUnit"],
            "BudgetLimit": {"Amount": r["limitAmount"], "Unit": r["limitUnit"]},
            "CostFilters": {f["name"]: f["values"] for f in r.get("costFilters") or []} or None,
            "CostTypes": _pascal(r.get("costTypes")),
        },
        "ResourceTags": _tag_list(r.tags()),
    })]
    # The provider creates each notification with its own request (budget.go createBudgetNotifications).
    for notification in r.get("notifications") or []:
        subscribers = [{"SubscriptionType": "EMAIL", "Address": a} for a in notification.get("subscriberEmailAddresses", [])]
        subscribers += [{"SubscriptionType": "SNS", "Address": a} for a in notification.get("subscriberSnsTopicArns", [])]
        calls.append(("budgets", "CreateNotification", {
            "AccountId": ACCOUNT_ID,
            "BudgetName": name,
            "Notification": {"NotificationType": notification["notificationType"],
                             "ComparisonOperator": notification["comparisonOperator"],
                             "Threshold": notification["threshold"], "ThresholdType": notification.get("thresholdType")},
            "Subscribers": subscribers,
        }))
    return calls


@translates("aws:chatbot/slackChannelConfiguration:SlackChannelConfiguration")
def _slack_channel(r: Resource):
    r.skip("region")  # pulumi-aws 7's per-resource region: which endpoint gets the request, not a member of it
    return [("chatbot", "CreateSlackChannelConfiguration", {
        "ConfigurationName": r["configurationName"],
        "SlackTeamId": r["slackTeamId"],
        "SlackChannelId": r["slackChannelId"],
        "IamRoleArn": r["iamRoleArn"],
        "SnsTopicArns": r.get("snsTopicArns"),
        "GuardrailPolicyArns": r.get("guardrailPolicyArns"),
        "LoggingLevel": r.get("loggingLevel"),
        "UserAuthorizationRequired": r.get("userAuthorizationRequired"),
        "Tags": _tag_list(r.tags(), "TagKey", "TagValue"),
    })]


@translates("aws:cloudwatch/dashboard:Dashboard")
def _dashboard(r: Resource):
    return [("cloudwatch", "PutDashboard", {"DashboardName": r["dashboardName"], "DashboardBody": r["dashboardBody"]})]


@translates("aws:cloudwatch/eventRule:EventRule")
def _event_rule(r: Resource):
    return [("events", "PutRule", {
        "Name": r.physical_name(),
        "ScheduleExpression": r.get("scheduleExpression"),
        "EventPattern": r.get("eventPattern"),
        "Description": r.get("description"),
        "State": r.get("state"),
        "Tags": _tag_list(r.tags()),
    })]


@translates("aws:cloudwatch/eventTarget:EventTarget")
def _event_target(r: Resource):
    return [("events", "PutTargets", {
        "Rule": r["rule"],
        "Targets": [{"Id": r.physical_name("targetId"), "Arn": r["arn"], "RoleArn": r.get("roleArn"),
                     "Input": r.get("input")}],
    })]


@translates("aws:cloudwatch/logGroup:LogGroup")
def _log_group(r: Resource):
    name = r.physical_name()
    calls = [("logs", "CreateLogGroup", {"logGroupName": name, "tags": r.tags() or None})]
    if r.get("retentionInDays") is not None:
        calls.append(("logs", "PutRetentionPolicy", {"logGroupName": name, "retentionInDays": _number(r["retentionInDays"])}))
    return calls


def _metric_query(query: dict) -> dict:
    stat = query.get("metric")
    return {
        "Id": query["id"],
        "Expression": query.get("expression"),
        "Label": query.get("label"),
        "ReturnData": query.get("returnData"),
        "Period": _number(query.get("period")),
        "MetricStat": {
            "Metric": {"Namespace": stat["namespace"], "MetricName": stat["metricName"],
                       "Dimensions": [{"Name": k, "Value": v} for k, v in sorted((stat.get("dimensions") or {}).items())] or None},
            "Period": _number(stat["period"]),
            "Stat": stat["stat"],
        } if stat else None,
    }


@translates("aws:cloudwatch/metricAlarm:MetricAlarm")
def _metric_alarm(r: Resource):
    return [("cloudwatch", "PutMetricAlarm", {
        "AlarmName": r.physical_name(),
        "AlarmDescription": r.get("alarmDescription"),
        "ActionsEnabled": r.get("actionsEnabled"),
        "AlarmActions": r.get("alarmActions"),
        "OKActions": r.get("okActions"),
        "InsufficientDataActions": r.get("insufficientDataActions"),
        "Namespace": r.get("namespace"),
        "MetricName": r.get("metricName"),
        "Statistic": r.get("statistic"),
        "Dimensions": [{"Name": k, "Value": v} for k, v in sorted((r.get("dimensions") or {}).items())] or None,
        "Period": _number(r.get("period")),
        "EvaluationPeriods": _number(r["evaluationPeriods"]),
        "DatapointsToAlarm": _number(r.get("datapointsToAlarm")),
        "Threshold": r.get("threshold"),
        "ComparisonOperator": r["comparisonOperator"],
        "TreatMissingData": r.get("treatMissingData"),
        "Metrics": [_metric_query(q) for q in r.get("metricQueries") or []] or None,
        "Tags": _tag_list(r.tags()),
    })]


@translates("aws:dynamodb/table:Table")
def _dynamodb_table(r: Resource):
    name = r.physical_name()

    def keys(hash_key: str, range_key: str | None) -> list[dict]:
        return [{"AttributeName": hash_key, "KeyType": "HASH"}] + (
            [{"AttributeName": range_key, "KeyType": "RANGE"}] if range_key else [])

    calls = [("dynamodb", "CreateTable", {
        "TableName": name,
        "AttributeDefinitions": [{"AttributeName": a["name"], "AttributeType": a["type"]} for a in r["attributes"]],
        "KeySchema": keys(r["hashKey"], r.get("rangeKey")),
        "BillingMode": r.get("billingMode"),
        "GlobalSecondaryIndexes": [{
            "IndexName": index["name"],
            "KeySchema": keys(index["hashKey"], index.get("rangeKey")),
            "Projection": {"ProjectionType": index["projectionType"], "NonKeyAttributes": index.get("nonKeyAttributes")},
        } for index in r.get("globalSecondaryIndexes") or []] or None,
        "SSESpecification": _pascal(r.get("serverSideEncryption")),
        "StreamSpecification": {"StreamEnabled": r["streamEnabled"], "StreamViewType": r.get("streamViewType")}
        if r.get("streamEnabled") is not None else None,
        "DeletionProtectionEnabled": r.get("deletionProtectionEnabled"),
        "Tags": _tag_list(r.tags()),
    })]
    if r.get("pointInTimeRecovery") is not None:
        calls.append(("dynamodb", "UpdateContinuousBackups", {
            "TableName": name,
            "PointInTimeRecoverySpecification": {"PointInTimeRecoveryEnabled": r["pointInTimeRecovery"]["enabled"]}}))
    return calls


@translates("aws:ec2/defaultSecurityGroup:DefaultSecurityGroup")
def _default_security_group(r: Resource):
    # Adopts the VPC's default group: the provider revokes its rules and tags it; it creates nothing.
    r.skip("vpcId")
    calls = [("ec2", "CreateTags", {"Resources": [f"{r.name}-id"], "Tags": _tag_list(r.tags())})]
    for direction in ("ingress", "egress"):
        if r.get(direction):
            operation = "AuthorizeSecurityGroupIngress" if direction == "ingress" else "AuthorizeSecurityGroupEgress"
            calls.append(("ec2", operation, {"GroupId": f"{r.name}-id", "IpPermissions": _ip_permissions(r.get(direction))}))
    return calls


@translates("aws:ec2/eip:Eip")
def _eip(r: Resource):
    return [("ec2", "AllocateAddress", {"Domain": r.get("domain"), "TagSpecifications": _tag_specs(r.tags(), "elastic-ip")})]


@translates("aws:ec2/internetGateway:InternetGateway")
def _internet_gateway(r: Resource):
    return [
        ("ec2", "CreateInternetGateway", {"TagSpecifications": _tag_specs(r.tags(), "internet-gateway")}),
        ("ec2", "AttachInternetGateway", {"InternetGatewayId": f"{r.name}-id", "VpcId": r["vpcId"]}),
    ]


@translates("aws:ec2/launchTemplate:LaunchTemplate")
def _launch_template(r: Resource):
    r.skip("updateDefaultVersion")  # the provider's ModifyLaunchTemplate call carries only the version number
    user_data = r.get("userData")
    data = {
        "ImageId": r.get("imageId"),
        "IamInstanceProfile": _pascal(r.get("iamInstanceProfile")),
        "UserData": user_data,
        "MetadataOptions": _pascal(r.get("metadataOptions")),
        "BlockDeviceMappings": [{
            "DeviceName": mapping["deviceName"],
            "Ebs": {k[:1].upper() + k[1:]: _bool_text(_number(v)) for k, v in mapping.get("ebs", {}).items()},
        } for mapping in r.get("blockDeviceMappings") or []] or None,
        "NetworkInterfaces": [{
            "DeviceIndex": _number(nic.get("deviceIndex")),
            "AssociatePublicIpAddress": _bool_text(nic.get("associatePublicIpAddress")),
            "DeleteOnTermination": _bool_text(nic.get("deleteOnTermination")),
            "Groups": nic.get("securityGroups"),
            "SubnetId": nic.get("subnetId"),
        } for nic in r.get("networkInterfaces") or []] or None,
        "TagSpecifications": [{"ResourceType": spec["resourceType"], "Tags": _tag_list(spec.get("tags") or {})}
                              for spec in r.get("tagSpecifications") or []] or None,
    }
    return [("ec2", "CreateLaunchTemplate", {
        "LaunchTemplateName": r.physical_name(),
        "VersionDescription": r.get("description"),
        "LaunchTemplateData": data,
        "TagSpecifications": _tag_specs(r.tags(), "launch-template"),
    })]


@translates("aws:ec2/natGateway:NatGateway")
def _nat_gateway(r: Resource):
    return [("ec2", "CreateNatGateway", {
        "AllocationId": r.get("allocationId"), "SubnetId": r["subnetId"], "ConnectivityType": r.get("connectivityType"),
        "TagSpecifications": _tag_specs(r.tags(), "natgateway")})]


@translates("aws:ec2/route:Route")
def _route(r: Resource):
    return [("ec2", "CreateRoute", {
        "RouteTableId": r["routeTableId"], "DestinationCidrBlock": r.get("destinationCidrBlock"),
        "GatewayId": r.get("gatewayId"), "NatGatewayId": r.get("natGatewayId")})]


@translates("aws:ec2/routeTable:RouteTable")
def _route_table(r: Resource):
    return [("ec2", "CreateRouteTable", {"VpcId": r["vpcId"], "TagSpecifications": _tag_specs(r.tags(), "route-table")})]


@translates("aws:ec2/routeTableAssociation:RouteTableAssociation")
def _route_table_association(r: Resource):
    return [("ec2", "AssociateRouteTable", {"RouteTableId": r["routeTableId"], "SubnetId": r.get("subnetId")})]


def _ip_permissions(rules: Iterable[dict]) -> list[dict]:
    return [{
        "IpProtocol": rule["protocol"],
        "FromPort": _number(rule.get("fromPort")),
        "ToPort": _number(rule.get("toPort")),
        "IpRanges": [{"CidrIp": cidr, "Description": rule.get("description")} for cidr in rule.get("cidrBlocks") or []] or None,
        "UserIdGroupPairs": [{"GroupId": group, "Description": rule.get("description")}
                             for group in rule.get("securityGroups") or []] or None,
    } for rule in rules]


@translates("aws:ec2/securityGroup:SecurityGroup")
def _security_group(r: Resource):
    group = f"{r.name}-id"
    calls = [("ec2", "CreateSecurityGroup", {
        "GroupName": r.physical_name(),
        # The provider's default when none is set (pulumi-aws resource_overrides.go: managedByPulumi).
        "Description": r.get("description") or "Managed by Pulumi",
        "VpcId": r.get("vpcId"),
        "TagSpecifications": _tag_specs(r.tags(), "security-group"),
    })]
    if r.get("ingress"):
        calls.append(("ec2", "AuthorizeSecurityGroupIngress", {"GroupId": group, "IpPermissions": _ip_permissions(r["ingress"])}))
    if r.get("egress"):
        calls.append(("ec2", "AuthorizeSecurityGroupEgress", {"GroupId": group, "IpPermissions": _ip_permissions(r["egress"])}))
    return calls


@translates("aws:ec2/subnet:Subnet")
def _subnet(r: Resource):
    calls = [("ec2", "CreateSubnet", {
        "VpcId": r["vpcId"], "CidrBlock": r.get("cidrBlock"), "AvailabilityZone": r.get("availabilityZone"),
        "TagSpecifications": _tag_specs(r.tags(), "subnet")})]
    if r.get("mapPublicIpOnLaunch") is not None:
        calls.append(("ec2", "ModifySubnetAttribute", {
            "SubnetId": f"{r.name}-id", "MapPublicIpOnLaunch": {"Value": r["mapPublicIpOnLaunch"]}}))
    return calls


@translates("aws:ec2/vpc:Vpc")
def _vpc(r: Resource):
    calls = [("ec2", "CreateVpc", {"CidrBlock": r.get("cidrBlock"), "TagSpecifications": _tag_specs(r.tags(), "vpc")})]
    # ModifyVpcAttribute takes one attribute per request.
    for key, member in (("enableDnsSupport", "EnableDnsSupport"), ("enableDnsHostnames", "EnableDnsHostnames")):
        if r.get(key) is not None:
            calls.append(("ec2", "ModifyVpcAttribute", {"VpcId": f"{r.name}-id", member: {"Value": r[key]}}))
    return calls


@translates("aws:ec2/vpcEndpoint:VpcEndpoint")
def _vpc_endpoint(r: Resource):
    return [("ec2", "CreateVpcEndpoint", {
        "VpcId": r["vpcId"], "ServiceName": r["serviceName"], "VpcEndpointType": r.get("vpcEndpointType"),
        "PrivateDnsEnabled": r.get("privateDnsEnabled"), "SubnetIds": r.get("subnetIds"),
        "SecurityGroupIds": r.get("securityGroupIds"), "RouteTableIds": r.get("routeTableIds"),
        "PolicyDocument": r.get("policy"), "TagSpecifications": _tag_specs(r.tags(), "vpc-endpoint")})]


@translates("aws:ecr/pullThroughCacheRule:PullThroughCacheRule")
def _ecr_pull_through_cache_rule(r: Resource):
    return [("ecr", "CreatePullThroughCacheRule", {
        "ecrRepositoryPrefix": r["ecrRepositoryPrefix"],
        "upstreamRegistryUrl": r["upstreamRegistryUrl"],
        "upstreamRepositoryPrefix": r.get("upstreamRepositoryPrefix"),
        "credentialArn": r.get("credentialArn"),
        "customRoleArn": r.get("customRoleArn"),
    })]


@translates("aws:ecr/repositoryCreationTemplate:RepositoryCreationTemplate")
def _ecr_repository_creation_template(r: Resource):
    # The provider sends the one encryption block as the API's single structure (same member names).
    encryption = (r.get("encryptionConfigurations") or [None])[0]
    return [("ecr", "CreateRepositoryCreationTemplate", {
        "prefix": r["prefix"],
        "description": r.get("description"),
        "appliedFor": r.get("appliedFors"),
        "encryptionConfiguration": encryption,
        "imageTagMutability": r.get("imageTagMutability"),
        "repositoryPolicy": r.get("repositoryPolicy"),
        "lifecyclePolicy": r.get("lifecyclePolicy"),
        "customRoleArn": r.get("customRoleArn"),
        "resourceTags": _tag_list(r.get("resourceTags") or {}),
    })]


@translates("aws:ecs/cluster:Cluster")
def _ecs_cluster(r: Resource):
    return [("ecs", "CreateCluster", {
        "clusterName": r.physical_name(),
        "settings": r.get("settings"),
        "tags": _tag_list(r.tags(), "key", "value"),
    })]


@translates("aws:ecs/taskDefinition:TaskDefinition")
def _ecs_task_definition(r: Resource):
    # container_definitions is the API's JSON: the provider unmarshals it into ContainerDefinition values.
    return [("ecs", "RegisterTaskDefinition", {
        "family": r["family"],
        "networkMode": r.get("networkMode"),
        "requiresCompatibilities": r.get("requiresCompatibilities"),
        "executionRoleArn": r.get("executionRoleArn"),
        "taskRoleArn": r.get("taskRoleArn"),
        "cpu": r.get("cpu"),
        "memory": r.get("memory"),
        "containerDefinitions": _json(r["containerDefinitions"]),
        "tags": _tag_list(r.tags(), "key", "value"),
    })]


@translates("aws:iam/instanceProfile:InstanceProfile")
def _instance_profile(r: Resource):
    name = r.physical_name()
    calls = [("iam", "CreateInstanceProfile", {"InstanceProfileName": name, "Path": r.get("path"),
                                               "Tags": _tag_list(r.tags())})]
    if r.get("role"):
        calls.append(("iam", "AddRoleToInstanceProfile", {"InstanceProfileName": name, "RoleName": r["role"]}))
    return calls


@translates("aws:iam/role:Role")
def _iam_role(r: Resource):
    r.skip("forceDetachPolicies")  # the provider detaches policies itself before DeleteRole
    return [("iam", "CreateRole", {
        "RoleName": r.physical_name(),
        "Path": r.get("path"),
        "AssumeRolePolicyDocument": r["assumeRolePolicy"],
        "Description": r.get("description"),
        "MaxSessionDuration": _number(r.get("maxSessionDuration")),
        "PermissionsBoundary": r.get("permissionsBoundary"),
        "Tags": _tag_list(r.tags()),
    })]


@translates("aws:iam/rolePolicy:RolePolicy")
def _role_policy(r: Resource):
    return [("iam", "PutRolePolicy", {"RoleName": r["role"], "PolicyName": r.physical_name(), "PolicyDocument": r["policy"]})]


@translates("aws:iam/rolePolicyAttachment:RolePolicyAttachment")
def _role_policy_attachment(r: Resource):
    return [("iam", "AttachRolePolicy", {"RoleName": r["role"], "PolicyArn": r["policyArn"]})]


@translates("aws:kms/key:Key")
def _kms_key(r: Resource):
    key = f"{r.name}-id"
    calls = [("kms", "CreateKey", {
        "Description": r.get("description"), "Policy": r.get("policy"), "KeyUsage": r.get("keyUsage"),
        "Tags": _tag_list(r.tags(), "TagKey", "TagValue")})]
    if r.get("enableKeyRotation"):
        calls.append(("kms", "EnableKeyRotation", {"KeyId": key, "RotationPeriodInDays": _number(r.get("rotationPeriodInDays"))}))
    # On `pulumi destroy` the key is scheduled for deletion with this waiting period.
    calls.append(("kms", "ScheduleKeyDeletion", {"KeyId": key, "PendingWindowInDays": _number(r.get("deletionWindowInDays"))}))
    return calls


def _zip(archive: pulumi.AssetArchive) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as bundle:
        for path, asset in sorted(archive.assets.items()):
            bundle.write(ROOT / asset.path, path)
    return buffer.getvalue()


@translates("aws:lambda/function:Function")
def _lambda_function(r: Resource):
    name = r.physical_name()
    code = r.get("code")
    calls = [("lambda", "CreateFunction", {
        "FunctionName": name,
        "Runtime": r.get("runtime"),
        "Role": r["role"],
        "Handler": r.get("handler"),
        "Code": {"ZipFile": _zip(code) if isinstance(code, pulumi.AssetArchive) else code},
        "Description": r.get("description"),
        "Timeout": _number(r.get("timeout")),
        "MemorySize": _number(r.get("memorySize")),
        "Architectures": r.get("architectures"),
        "Environment": _pascal_keys(r.get("environment"), {"variables": "Variables"}),
        "Tags": r.tags() or None,
    })]
    if r.get("reservedConcurrentExecutions") is not None:
        calls.append(("lambda", "PutFunctionConcurrency", {
            "FunctionName": name, "ReservedConcurrentExecutions": _number(r["reservedConcurrentExecutions"])}))
    return calls


def _pascal_keys(value: dict | None, names: dict[str, str]) -> dict | None:
    """Rename a block's top-level keys only (the values, such as environment variables, stay as given)."""
    return {names.get(k, k): v for k, v in value.items()} if value else None


@translates("aws:lambda/eventSourceMapping:EventSourceMapping")
def _lambda_event_source_mapping(r: Resource):
    filters = (r.get("filterCriteria") or {}).get("filters")
    return [("lambda", "CreateEventSourceMapping", {
        "EventSourceArn": r["eventSourceArn"],
        "FunctionName": r["functionName"],
        "StartingPosition": r.get("startingPosition"),
        "BatchSize": _number(r.get("batchSize")),
        "MaximumBatchingWindowInSeconds": _number(r.get("maximumBatchingWindowInSeconds")),
        "BisectBatchOnFunctionError": r.get("bisectBatchOnFunctionError"),
        "MaximumRetryAttempts": _number(r.get("maximumRetryAttempts")),
        "FilterCriteria": {"Filters": [{"Pattern": f["pattern"]} for f in filters]} if filters else None,
        "Tags": r.tags() or None,
    })]


# internal/service/lambda/function_event_invoke_config.go: one PutFunctionEventInvokeConfig.
@translates("aws:lambda/functionEventInvokeConfig:FunctionEventInvokeConfig")
def _lambda_function_event_invoke_config(r: Resource):
    destinations = r.get("destinationConfig") or {}
    return [("lambda", "PutFunctionEventInvokeConfig", {
        "FunctionName": r["functionName"],
        "Qualifier": r.get("qualifier"),
        "MaximumRetryAttempts": _number(r.get("maximumRetryAttempts")),
        "MaximumEventAgeInSeconds": _number(r.get("maximumEventAgeInSeconds")),
        "DestinationConfig": {
            key: {"Destination": destinations[name]["destination"]}
            for name, key in (("onSuccess", "OnSuccess"), ("onFailure", "OnFailure")) if destinations.get(name)
        } or None,
    })]


@translates("aws:lambda/permission:Permission")
def _lambda_permission(r: Resource):
    return [("lambda", "AddPermission", {
        "FunctionName": r["function"],
        "StatementId": r.physical_name("statementId"),
        "Action": r["action"],
        "Principal": r["principal"],
        "SourceArn": r.get("sourceArn"),
        "SourceAccount": r.get("sourceAccount"),
    })]


# S3 (internal/service/s3/bucket.go and one file per bucket configuration resource): the bucket is one
# CreateBucket, its tags one PutBucketTagging; each configuration resource is the one Put* call it wraps.
@translates("aws:s3/bucket:Bucket")
def _s3_bucket(r: Resource):
    r.skip("forceDestroy")  # the provider empties the bucket itself before DeleteBucket
    name = r["bucket"]
    calls = [("s3", "CreateBucket", {"Bucket": name, "BucketNamespace": r.get("bucketNamespace")})]
    if r.tags():
        calls.append(("s3", "PutBucketTagging", {"Bucket": name, "Tagging": {"TagSet": _tag_list(r.tags())}}))
    return calls


@translates("aws:s3/bucketOwnershipControls:BucketOwnershipControls")
def _s3_ownership_controls(r: Resource):
    return [("s3", "PutBucketOwnershipControls", {"Bucket": r["bucket"], "OwnershipControls": {
        "Rules": [{"ObjectOwnership": r["rule"]["objectOwnership"]}]}})]


@translates("aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock")
def _s3_public_access_block(r: Resource):
    return [("s3", "PutPublicAccessBlock", {"Bucket": r["bucket"], "PublicAccessBlockConfiguration": {
        "BlockPublicAcls": r.get("blockPublicAcls"), "BlockPublicPolicy": r.get("blockPublicPolicy"),
        "IgnorePublicAcls": r.get("ignorePublicAcls"), "RestrictPublicBuckets": r.get("restrictPublicBuckets")}})]


@translates("aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration")
def _s3_encryption(r: Resource):
    rules = [{"ApplyServerSideEncryptionByDefault": {
                  "SSEAlgorithm": rule["applyServerSideEncryptionByDefault"]["sseAlgorithm"],
                  "KMSMasterKeyID": rule["applyServerSideEncryptionByDefault"].get("kmsMasterKeyId")},
              "BucketKeyEnabled": rule.get("bucketKeyEnabled")} for rule in r["rules"]]
    return [("s3", "PutBucketEncryption", {"Bucket": r["bucket"], "ServerSideEncryptionConfiguration": {"Rules": rules}})]


def _lifecycle_rule(rule: dict) -> dict:
    expiration = rule.get("expiration") or {}
    abort = rule.get("abortIncompleteMultipartUpload") or {}
    return {
        "ID": rule["id"], "Status": rule["status"], "Filter": _pascal(rule.get("filter")),
        "Expiration": _pascal(expiration) or None,
        "AbortIncompleteMultipartUpload": _pascal(abort) or None,
    }


@translates("aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration")
def _s3_lifecycle(r: Resource):
    return [("s3", "PutBucketLifecycleConfiguration", {
        "Bucket": r["bucket"], "LifecycleConfiguration": {"Rules": [_lifecycle_rule(rule) for rule in r["rules"]]},
        "TransitionDefaultMinimumObjectSize": r.get("transitionDefaultMinimumObjectSize")})]


@translates("aws:s3/bucketPolicy:BucketPolicy")
def _s3_bucket_policy(r: Resource):
    return [("s3", "PutBucketPolicy", {"Bucket": r["bucket"], "Policy": r["policy"]})]


@translates("aws:sns/topic:Topic")
def _sns_topic(r: Resource):
    attributes = {"KmsMasterKeyId": r.get("kmsMasterKeyId"), "Policy": r.get("policy")}
    return [("sns", "CreateTopic", {
        "Name": r.physical_name(),
        "Attributes": {k: v for k, v in attributes.items() if v is not None} or None,
        "Tags": _tag_list(r.tags()),
    })]


@translates("aws:sns/topicPolicy:TopicPolicy")
def _sns_topic_policy(r: Resource):
    return [("sns", "SetTopicAttributes", {"TopicArn": r["arn"], "AttributeName": "Policy", "AttributeValue": r["policy"]})]


@translates("aws:sns/topicSubscription:TopicSubscription")
def _sns_subscription(r: Resource):
    return [("sns", "Subscribe", {"TopicArn": r["topic"], "Protocol": r["protocol"], "Endpoint": r.get("endpoint")})]


# SQS attributes travel as strings (CreateQueue Attributes: map of QueueAttributeName to String).
_QUEUE_ATTRIBUTES = {
    "messageRetentionSeconds": "MessageRetentionPeriod",
    "visibilityTimeoutSeconds": "VisibilityTimeout",
    "delaySeconds": "DelaySeconds",
    "maxMessageSize": "MaximumMessageSize",
    "receiveWaitTimeSeconds": "ReceiveMessageWaitTimeSeconds",
    "redrivePolicy": "RedrivePolicy",
    "sqsManagedSseEnabled": "SqsManagedSseEnabled",
    "kmsMasterKeyId": "KmsMasterKeyId",
    "policy": "Policy",
}


def _attribute_text(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    return str(_number(value))


@translates("aws:sqs/queue:Queue")
def _sqs_queue(r: Resource):
    attributes = {member: _attribute_text(r.get(key)) for key, member in _QUEUE_ATTRIBUTES.items() if r.get(key) is not None}
    return [("sqs", "CreateQueue", {"QueueName": r.physical_name(), "Attributes": attributes or None, "tags": r.tags() or None})]


@translates("aws:sqs/redriveAllowPolicy:RedriveAllowPolicy")
def _sqs_redrive_allow_policy(r: Resource):
    return [("sqs", "SetQueueAttributes", {"QueueUrl": r["queueUrl"], "Attributes": {"RedriveAllowPolicy": r["redriveAllowPolicy"]}})]


@translates("aws:ssm/parameter:Parameter")
def _ssm_parameter(r: Resource):
    value = r.get("insecureValue") if r.get("insecureValue") is not None else r.get("value")
    return [("ssm", "PutParameter", {
        "Name": r.physical_name(), "Description": r.get("description"), "Value": value, "Type": r.get("type"),
        "Tier": r.get("tier"), "Tags": _tag_list(r.tags())})]


# --- validation ---------------------------------------------------------------------------------------


def _generic(path: str) -> str:
    return re.sub(r"\[\d+\]", "[]", path)


def _type_name(value: Any) -> str:
    return type(value).__name__


class Validator:
    """Walks a request against its operation's input shape and collects the problems."""

    def __init__(self, call: ApiCall, references: frozenset[str]):
        self.call = call
        self.references = references
        self.problems: list[Problem] = []

    def fail(self, path: str, message: str) -> None:
        self.problems.append(Problem(self.call.resource, f"{self.call.label} {path or '(request)'}", message))

    def run(self) -> list[Problem]:
        self.check(input_shape(self.call.service, self.call.operation), _compact(self.call.params), "")
        return self.problems

    def check(self, shape, value: Any, path: str) -> None:
        kind = shape.type_name
        if kind == "structure":
            self._structure(shape, value, path)
        elif kind == "list":
            self._sized(shape, value, path, list)
            for index, item in enumerate(value if isinstance(value, list) else []):
                self.check(shape.member, item, f"{path}[{index}]")
        elif kind == "map":
            self._sized(shape, value, path, dict)
            for key, item in (value.items() if isinstance(value, dict) else []):
                self.check(shape.key, key, f"{path}{{key {key!r}}}")
                self.check(shape.value, item, f"{path}{{{key}}}")
        elif kind == "string":
            self._string(shape, value, path)
        elif kind in ("integer", "long", "float", "double"):
            self._number(shape, value, path)
        elif kind == "boolean" and not isinstance(value, bool):
            self.fail(path, f"must be a boolean, got {value!r}")
        elif kind == "blob" and not isinstance(value, (bytes, str)):
            self.fail(path, f"must be binary data, got {_type_name(value)}")
        self._documented(value, path)

    def _structure(self, shape, value: Any, path: str) -> None:
        if not isinstance(value, dict):
            self.fail(path, f"must be a structure ({shape.name}), got {value!r}")
            return
        for key, item in value.items():
            if key not in shape.members:
                self.fail(f"{path}.{key}".lstrip("."), f"is not a member of {shape.name} (members: {sorted(shape.members)})")
            else:
                self.check(shape.members[key], item, f"{path}.{key}".lstrip("."))
        for key in shape.required_members:
            if key not in value:
                self.fail(f"{path}.{key}".lstrip("."), f"is required by {shape.name}")

    def _sized(self, shape, value: Any, path: str, kind: type) -> None:
        if not isinstance(value, kind):
            self.fail(path, f"must be a {kind.__name__}, got {value!r}")
            return
        low, high = shape.metadata.get("min"), shape.metadata.get("max")
        if low is not None and len(value) < low:
            self.fail(path, f"has {len(value)} items, fewer than the minimum {low}")
        if high is not None and len(value) > high:
            self.fail(path, f"has {len(value)} items, more than the maximum {high}")

    def _string(self, shape, value: Any, path: str) -> None:
        if not isinstance(value, str):
            self.fail(path, f"must be a string, got {value!r}")
            return
        if value in self.references:
            return  # AWS assigns it in a real run
        enum = shape.enum or self._enum_from(path)
        if enum and value not in enum:
            listed = sorted(enum) if len(enum) <= 12 else f"the {len(enum)} values of the model's enum"
            self.fail(path, f"{value!r} is not one of {listed}")
        low, high = shape.metadata.get("min"), shape.metadata.get("max")
        if low is not None and len(value) < low:
            self.fail(path, f"{value!r} is shorter than the minimum length {low}")
        if high is not None and len(value) > high:
            self.fail(path, f"is {len(value)} characters, longer than the maximum {high}: {value[:80]!r}")
        pattern = shape.metadata.get("pattern")
        if pattern and not compiled(pattern).fullmatch(value):
            self.fail(path, f"{value[:120]!r} does not match the pattern {pattern}")

    def _enum_from(self, path: str) -> list[str] | None:
        owner = ENUM_FROM.get((self.call.service, self.call.operation, _generic(path)))
        return service_model(owner[0]).shape_for(owner[1]).enum if owner else None

    def _number(self, shape, value: Any, path: str) -> None:
        integral = shape.type_name in ("integer", "long")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or (integral and not float(value).is_integer()):
            self.fail(path, f"must be {'an integer' if integral else 'a number'}, got {value!r}")
            return
        low, high = shape.metadata.get("min"), shape.metadata.get("max")
        if low is not None and value < low:
            self.fail(path, f"{value} is below the minimum {low}")
        if high is not None and value > high:
            self.fail(path, f"{value} is above the maximum {high}")

    def _documented(self, value: Any, path: str) -> None:
        if isinstance(value, str) and value in self.references:
            return
        for rule in _documented_for(self.call.service, self.call.operation):
            if rule.applies(self.call.service, self.call.operation, path):
                problem = _breaks(rule, value)
                if problem:
                    self.fail(path, f"{problem} (the model's documentation: {rule.phrase!r})")


@functools.cache
def _documented_for(service: str, operation: str) -> tuple[Documented, ...]:
    return tuple(rule for rule in DOCUMENTED if (rule.service, rule.operation) == (service, operation))


def _breaks(rule: Documented, value: Any) -> str | None:
    """What is wrong with `value` under a documented rule, or None."""
    number = int(value) if isinstance(value, str) and value.isdigit() else value
    if rule.pattern and isinstance(value, str) and not compiled(rule.pattern).fullmatch(value):
        return f"{value[:120]!r} does not match {rule.pattern}"
    if rule.max_bytes and isinstance(value, str) and len(value.encode()) > rule.max_bytes:
        return f"is {len(value.encode())} bytes, more than {rule.max_bytes}"
    if rule.enum and value not in rule.enum:
        return f"{value!r} is not one of {list(rule.enum)}"
    if rule.max_items is not None and isinstance(value, list) and len(value) > rule.max_items:
        return f"has {len(value)} items, more than {rule.max_items}"
    numeric = isinstance(number, (int, float)) and not isinstance(number, bool)
    if numeric and ((rule.minimum is not None and number < rule.minimum) or
                    (rule.maximum is not None and number > rule.maximum)):
        return f"{number} is outside {rule.minimum}..{rule.maximum}"
    if rule.accepts and not rule.accepts(value):
        return f"{str(value)[:80]!r} is not {rule.expectation}"
    return None


# --- the whole rendering ------------------------------------------------------------------------------


@dataclass
class Checked:
    calls: list[ApiCall] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)


def references(rendering: Rendering) -> frozenset[str]:
    """Everything the mocks invented: ids, ARNs, URLs, and names Pulumi would generate."""
    return frozenset(v for r in rendering.resources for v in r.generated.values() if isinstance(v, str))


def _default_tags(rendering: Rendering) -> dict[str, dict[str, str]]:
    """Provider reference (its URN and id) -> the default tags it adds to every taggable resource."""
    tags = {}
    for provider in rendering.of_type("pulumi:providers:aws"):
        document = _json(provider.inputs.get("defaultTags") or "{}")
        tags[provider.name] = dict(document.get("tags") or {})
    return tags


def _provider_name(reference: str | None) -> str | None:
    return reference.split("::")[-2] if reference else None


@functools.cache
def _takes_default_tags(type_token: str) -> bool:
    """Resources with `tags_all` get the provider's default tags; the others (ASG tag blocks) do not."""
    module, kind = _pulumi_class_location(type_token)
    return hasattr(getattr(module, kind, None), "tags_all")


def _pulumi_class_location(type_token: str):
    _, module_and_kind, kind = type_token.split(":")
    module = module_and_kind.split("/")[0]
    module = {"lambda": "lambda_"}.get(module, module)
    return getattr(pulumi_aws, module), kind


def translate(rendering: Rendering, only: Iterable[str] | None = None) -> Checked:
    """Every request the rendered stack would send (or only the named resources'), and the problems found
    translating them."""
    checked = Checked()
    tags = _default_tags(rendering)
    selected = set(only) if only is not None else None
    for recorded in rendering.resources:
        if selected is not None and recorded.name not in selected:
            continue
        if not recorded.type.startswith("aws:"):
            if recorded.type.startswith("pulumi:") and recorded.type not in UNMAPPED:
                checked.problems.append(Problem(recorded.name, recorded.type, "no translation and no reason in UNMAPPED"))
            continue
        translation = TRANSLATIONS.get(recorded.type)
        if translation is None:
            checked.problems.append(Problem(recorded.name, recorded.type,
                                            "no API mapping: add a translation to tests/rules/api_models.py"))
            continue
        defaults = tags.get(_provider_name(recorded.provider), {}) if _takes_default_tags(recorded.type) else {}
        resource = Resource(recorded, defaults)
        for service, operation, params in translation(resource):
            checked.calls.append(ApiCall(recorded.name, recorded.type, service, operation, _numbers(_compact(params))))
        for key in sorted(set(recorded.inputs) - resource.used):
            checked.problems.append(Problem(recorded.name, f"{recorded.type} input {key!r}",
                                            "not mapped to any API member: map it or skip it with a reason"))
        for key, generated in resource.autonames:
            limit = AUTONAME_MAXLEN.get((recorded.type, key), DEFAULT_AUTONAME_MAXLEN)
            if len(generated) > limit:
                checked.problems.append(Problem(recorded.name, f"{recorded.type} autonamed {key!r}",
                                                f"Pulumi's name {generated!r} is {len(generated)} characters; "
                                                f"pulumi-aws generates at most {limit}"))
    return checked


def check(rendering: Rendering, only: Iterable[str] | None = None) -> list[Problem]:
    """Every problem in the requests a rendered stack would send (empty when AWS would take them all);
    `only` names the resources to check (references still come from the whole rendering)."""
    checked = translate(rendering, only)
    known = references(rendering)
    for call in checked.calls:
        checked.problems.extend(Validator(call, known).run())
    return checked.problems


def declared_types() -> set[str]:
    """Every pulumi_aws resource type the program's source declares (`aws.<module>.<Class>(`)."""
    found = set()
    for path in (ROOT / "components").rglob("*.py"):
        for module, kind in re.findall(r"\baws\.(\w+)\.([A-Z]\w*)\(", path.read_text()):
            cls = getattr(getattr(pulumi_aws, module), kind)
            if isinstance(cls, type) and issubclass(cls, pulumi.CustomResource):
                found.add(re.search(r"'(aws:[\w/]+:\w+)'", inspect.getsource(cls._internal_init)).group(1))
    return found
