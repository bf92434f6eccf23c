"""Rules of the AWS services and the provider that no API model carries, applied to a rendered stack.

Each rule is a function that returns its findings (one line each, naming the resource and the value) and
cites where AWS or the provider states it. The rules read the rendering only: values the mocks invented
(ids, ARNs: Recorded.generated) are followed to the resources they stand for.
"""

from __future__ import annotations

import fnmatch
import ipaddress
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import api_models
from pulumi_harness import Recorded, Rendering

# --- the rendering, with the lookups the rules need ---------------------------------------------------------


class Stack:
    def __init__(self, rendering: Rendering):
        self.rendering = rendering
        self.resources = rendering.resources
        self._calls: dict[str, list[api_models.ApiCall]] | None = None
        self._by_value: dict[str, Recorded] = {}
        for resource in self.resources:
            for value in resource.generated.values():
                if isinstance(value, str):
                    self._by_value.setdefault(value, resource)

    def of_type(self, *types: str) -> list[Recorded]:
        return [r for r in self.resources if r.type in types]

    def referenced(self, value: Any) -> Recorded | None:
        """The resource a value stands for (its id, ARN, URL or generated name), if any."""
        return self._by_value.get(value) if isinstance(value, str) else None

    def region(self, resource: Recorded) -> str:
        """Where the resource lives: pulumi-aws 7's per-resource `region`, else its provider's region."""
        if resource.inputs.get("region"):
            return resource.inputs["region"]
        return (resource.provider or "").split("::")[-2].removeprefix("aws-")

    def calls(self, resource: Recorded) -> list[api_models.ApiCall]:
        """The requests the provider sends for the resource (tests/rules/api_models.py)."""
        if self._calls is None:
            self._calls = {}
            for call in api_models.translate(self.rendering).calls:
                self._calls.setdefault(call.resource, []).append(call)
        return self._calls.get(resource.name, [])


def _arn_region(arn: str) -> str:
    return arn.split(":")[3] if arn.count(":") >= 5 else ""


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def _list(value: Any) -> list:
    return value if isinstance(value, list) else [value]


# --- rules -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rule:
    id: str
    statement: str
    source: str
    check: Callable[[Stack], list[str]]


RULES: list[Rule] = []


def rule(rule_id: str, source: str):
    """Register a rule; its docstring is the statement."""
    def register(check: Callable[[Stack], Iterator[str]]) -> Callable:
        RULES.append(Rule(rule_id, " ".join((check.__doc__ or "").split()), source, lambda stack: list(check(stack))))
        return check
    return register


def rule_by_id(rule_id: str) -> Rule:
    return next(r for r in RULES if r.id == rule_id)


# Arguments the provider declares as sets (terraform-provider-aws, internal/service/...). A plugin-framework
# set refuses a duplicate element ("Duplicate Set Element", pulumi/pulumi-terraform-bridge#924); an SDKv2 set
# merges duplicates, so the program and the state disagree on every preview.
@dataclass(frozen=True)
class SetArgument:
    type: str
    path: str  # into the Pulumi inputs; "[]" steps into each list item
    source: str
    framework: bool = False


SET_ARGUMENTS = (
    SetArgument("aws:chatbot/slackChannelConfiguration:SlackChannelConfiguration", "snsTopicArns",
                "chatbot/slack_channel_configuration.go (schema.SetAttribute)", framework=True),
    *(SetArgument("aws:autoscaling/group:Group", path, "autoscaling/group.go (schema.TypeSet)")
      for path in ("vpcZoneIdentifiers", "enabledMetrics", "suspendedProcesses", "tags")),
    SetArgument("aws:ecr/repositoryCreationTemplate:RepositoryCreationTemplate", "appliedFors",
                "ecr/repository_creation_template.go (schema.TypeSet)"),
    *(SetArgument("aws:ec2/securityGroup:SecurityGroup", path, "ec2/vpc_security_group.go (schema.TypeSet)")
      for path in ("ingress", "egress")),
    *(SetArgument("aws:ec2/vpcEndpoint:VpcEndpoint", path, "ec2/vpc_endpoint.go (schema.TypeSet)")
      for path in ("subnetIds", "securityGroupIds", "routeTableIds")),
    SetArgument("aws:ec2/launchTemplate:LaunchTemplate", "networkInterfaces[].securityGroups",
                "ec2/ec2_launch_template.go (schema.TypeSet)"),
    SetArgument("aws:ecs/taskDefinition:TaskDefinition", "requiresCompatibilities", "ecs/task_definition.go (schema.TypeSet)"),
    SetArgument("aws:ecs/cluster:Cluster", "settings", "ecs/cluster.go (schema.TypeSet)"),
    *(SetArgument("aws:cloudwatch/metricAlarm:MetricAlarm", path, "cloudwatch/metric_alarm.go (schema.TypeSet)")
      for path in ("alarmActions", "okActions", "insufficientDataActions", "metricQueries")),
    *(SetArgument("aws:dynamodb/table:Table", path, "dynamodb/table.go (schema.TypeSet)")
      for path in ("attributes", "globalSecondaryIndexes")),
    *(SetArgument("aws:budgets/budget:Budget", path, "budgets/budget.go (schema.TypeSet)")
      for path in ("costFilters", "notifications", "notifications[].subscriberEmailAddresses",
                   "notifications[].subscriberSnsTopicArns")),
)


def _lists_at(value: Any, path: str) -> Iterator[list]:
    head, _, rest = path.partition(".")
    if head.endswith("[]"):
        for item in value.get(head[:-2]) or [] if isinstance(value, dict) else []:
            yield from _lists_at(item, rest)
    elif isinstance(value, dict) and isinstance(value.get(head), list):
        if rest:
            raise ValueError(f"{path}: only the last step may be a set")
        yield value[head]


@rule("set-arguments-distinct",
      "https://github.com/hashicorp/terraform-provider-aws (internal/service/<service>/<resource>.go, set types); "
      "https://github.com/pulumi/pulumi-terraform-bridge/issues/924")
def _sets_hold_distinct_elements(stack: Stack):
    """Arguments the provider declares as sets list each element once."""
    for argument in SET_ARGUMENTS:
        for resource in stack.of_type(argument.type):
            for elements in _lists_at(resource.inputs, argument.path):
                canonical = [json.dumps(e, sort_keys=True) for e in elements]
                repeated = sorted({e for e in canonical if canonical.count(e) > 1})
                if repeated:
                    effect = ("the preview fails: Duplicate Set Element" if argument.framework
                              else "the provider merges them, so every preview shows a diff")
                    yield f"{resource.name}: {argument.path} lists {repeated} more than once ({effect}; {argument.source})"


# --- queues ---------------------------------------------------------------------------------------------

SQS_DEFAULT_VISIBILITY_SECONDS = 30  # CreateQueue's documented default
SQS_DEFAULT_RETENTION_SECONDS = 345600


def _redrive_target(stack: Stack, queue: Recorded) -> tuple[dict | None, Recorded | None]:
    policy = _json(queue.inputs.get("redrivePolicy"))
    return (policy, stack.referenced(policy.get("deadLetterTargetArn"))) if policy else (None, None)


@rule("dead-letter-queue-retention",
      "https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-dead-letter-queues.html")
def _dead_letter_queue_keeps_messages_as_long(stack: Stack):
    """A dead-letter queue keeps messages at least as long as its source queue: a message's age counts
    from its first enqueue, so a shorter retention on the dead-letter queue drops it sooner."""
    for queue in stack.of_type("aws:sqs/queue:Queue"):
        _, target = _redrive_target(stack, queue)
        if target is None:
            continue
        source = queue.inputs.get("messageRetentionSeconds", SQS_DEFAULT_RETENTION_SECONDS)
        kept = target.inputs.get("messageRetentionSeconds", SQS_DEFAULT_RETENTION_SECONDS)
        if kept < source:
            yield f"{target.name}: keeps messages {kept:.0f} s, less than its source {queue.name} ({source:.0f} s)"


@rule("redrive-policy",
      "botocore sqs CreateQueue Attributes documentation (RedrivePolicy); "
      "https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-configure-dead-letter-queue.html")
def _redrive_policy_names_a_queue_of_its_region(stack: Stack):
    """A redrive policy targets a queue of the same region, after 1 to 1,000 receives."""
    for queue in stack.of_type("aws:sqs/queue:Queue"):
        policy, target = _redrive_target(stack, queue)
        if policy is None:
            continue
        if target is None or target.type != "aws:sqs/queue:Queue":
            yield f"{queue.name}: deadLetterTargetArn {policy.get('deadLetterTargetArn')!r} is not a queue of this stack"
        elif stack.region(target) != stack.region(queue):
            yield f"{queue.name}: its dead-letter queue {target.name} is in {stack.region(target)}, not {stack.region(queue)}"
        receives = policy.get("maxReceiveCount")
        if not isinstance(receives, int) or not 1 <= receives <= 1000:
            yield f"{queue.name}: maxReceiveCount {receives!r} is not 1 to 1,000"


@rule("redrive-allow-policy",
      "botocore sqs CreateQueue Attributes documentation (RedriveAllowPolicy: 'You can specify up to 10 source queue ARNs')")
def _redrive_allow_policy_names_the_sources(stack: Stack):
    """A dead-letter queue's redrive allow policy lets in the queues that redrive to it, and names at most 10."""
    allowed: dict[str, dict] = {}
    for policy in stack.of_type("aws:sqs/redriveAllowPolicy:RedriveAllowPolicy"):
        dead_letters = stack.referenced(policy.inputs["queueUrl"])
        document = _json(policy.inputs["redriveAllowPolicy"])
        if dead_letters is not None:
            allowed[dead_letters.name] = document
        if len(document.get("sourceQueueArns", [])) > 10:
            yield f"{policy.name}: names {len(document['sourceQueueArns'])} source queues, more than 10"
    for queue in stack.of_type("aws:sqs/queue:Queue"):
        _, target = _redrive_target(stack, queue)
        document = allowed.get(target.name) if target is not None else None
        if document is None:
            continue
        permission = document.get("redrivePermission", "allowAll")
        sources = {getattr(stack.referenced(arn), "name", arn) for arn in document.get("sourceQueueArns", [])}
        if permission == "denyAll" or (permission == "byQueue" and queue.name not in sources):
            yield f"{target.name}: its redrive allow policy ({permission}) does not let in its source {queue.name}"


def _statements(document: Any) -> list[dict]:
    document = _json(document) or {}
    return _list(document.get("Statement", []))


def _function_policies(stack: Stack, function: Recorded) -> list[dict]:
    """The statements of the inline policies of a function's role."""
    role = stack.referenced(function.inputs.get("role"))
    if role is None:
        return []
    return [s for p in stack.of_type("aws:iam/rolePolicy:RolePolicy") if stack.referenced(p.inputs.get("role")) is role
            for s in _statements(p.inputs.get("policy"))]


def _grants(statement: dict, action: str, resource_arn: str) -> bool:
    if statement.get("Effect") != "Allow":
        return False
    actions = [a.lower() for a in _list(statement.get("Action", []))]
    resources = _list(statement.get("Resource", []))
    return (any(fnmatch.fnmatch(action.lower(), a) for a in actions)
            and any(fnmatch.fnmatchcase(resource_arn, r) for r in resources))


@rule("visibility-covers-consumers",
      "https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-visibility-timeout.html")
def _visibility_timeout_covers_each_consumer(stack: Stack):
    """A source queue hides a received message for at least as long as any function that receives from it
    may run; otherwise the message is delivered again while the first run still works on it."""
    for queue in stack.of_type("aws:sqs/queue:Queue"):
        if not queue.inputs.get("redrivePolicy"):
            continue
        visibility = queue.inputs.get("visibilityTimeoutSeconds", SQS_DEFAULT_VISIBILITY_SECONDS)
        for function in stack.of_type("aws:lambda/function:Function"):
            if not any(_grants(s, "sqs:ReceiveMessage", queue.generated.get("arn", "")) for s in _function_policies(stack, function)):
                continue
            timeout = function.inputs.get("timeout", 3)
            if timeout > visibility:
                yield f"{queue.name}: visibility timeout {visibility:.0f} s is shorter than {function.name}'s timeout {timeout:.0f} s"


# --- alarms, billing, budgets -----------------------------------------------------------------------------

BILLING_REGION = "us-east-1"


@rule("billing-metrics-in-us-east-1",
      "https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/monitor_estimated_charges_with_cloudwatch.html")
def _billing_alarms_in_us_east_1(stack: Stack):
    """AWS/Billing metrics exist only in us-east-1, so alarms on them are declared there."""
    for alarm in stack.of_type("aws:cloudwatch/metricAlarm:MetricAlarm"):
        namespaces = {alarm.inputs.get("namespace")} | {
            (q.get("metric") or {}).get("namespace") for q in alarm.inputs.get("metricQueries") or []}
        if "AWS/Billing" in namespaces and stack.region(alarm) != BILLING_REGION:
            yield f"{alarm.name}: alarms on AWS/Billing in {stack.region(alarm)}, where the metric does not exist"


@rule("cost-allocation-tag-is-an-account-step",
      "https://docs.aws.amazon.com/awsaccountbilling/latest/aboutv2/activating-tags.html; "
      "https://docs.aws.amazon.com/awsaccountbilling/latest/aboutv2/custom-tags.html; "
      "pulumi_aws costexplorer.CostAllocationTag documentation ('it can take up to 24 hours')")
def _no_cost_allocation_tag_activation(stack: Stack):
    """No stack activates a cost allocation tag: AWS lists a tag key for activation only once it appears in
    billing data ("up to 24 hours" after the first tagged resource), and only the management account of an
    organization (or an account in none) may activate it, so the first `pulumi up` of a new account, or any
    `up` from a member account, would fail. It is a one-time account step (make cost-tag)."""
    for activation in stack.of_type("aws:costexplorer/costAllocationTag:CostAllocationTag"):
        yield f"{activation.name}: activates {activation.inputs.get('tagKey')!r} during `pulumi up`"


@rule("alarm-actions-in-region",
      "https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/AlarmThatSendsEmail.html#alarms-and-actions")
def _alarm_actions_in_the_alarm_region(stack: Stack):
    """An alarm notifies SNS topics and invokes functions of its own region."""
    for alarm in stack.of_type("aws:cloudwatch/metricAlarm:MetricAlarm"):
        for key in ("alarmActions", "okActions", "insufficientDataActions"):
            for action in alarm.inputs.get(key) or []:
                if _arn_region(action) != stack.region(alarm):
                    yield f"{alarm.name}: {key} {action} is not in the alarm's region {stack.region(alarm)}"


@rule("alarm-evaluation-window",
      "botocore cloudwatch PutMetricAlarm Period documentation ('Period multiplied by EvaluationPeriods can't be "
      "more than 604,800 seconds ... less than one hour ... one day (86,400 seconds)')")
def _alarm_evaluation_window(stack: Stack):
    """An alarm evaluates at most one day of periods shorter than an hour (seven days otherwise), and needs
    no more breaching datapoints than it evaluates."""
    for alarm in stack.of_type("aws:cloudwatch/metricAlarm:MetricAlarm"):
        periods = alarm.inputs.get("evaluationPeriods", 1)
        lengths = [alarm.inputs["period"]] if alarm.inputs.get("period") else [
            (q.get("metric") or {}).get("period") for q in alarm.inputs.get("metricQueries") or [] if q.get("metric")]
        for period in filter(None, lengths):
            limit = 86400 if period < 3600 else 604800
            if period * periods > limit:
                yield f"{alarm.name}: {periods:.0f} periods of {period:.0f} s span {period * periods:.0f} s, more than {limit}"
        if alarm.inputs.get("datapointsToAlarm", 0) > periods:
            yield f"{alarm.name}: datapointsToAlarm {alarm.inputs['datapointsToAlarm']:.0f} exceeds evaluationPeriods {periods:.0f}"


@rule("budget-notifications",
      "https://docs.aws.amazon.com/aws-cost-management/latest/APIReference/API_budgets_NotificationWithSubscribers.html; "
      "https://docs.aws.amazon.com/cost-management/latest/userguide/budgets-managing-costs.html")
def _budget_notifications(stack: Stack):
    """A budget has at most 10 notifications; each has one to 10 e-mail subscribers and at most one SNS topic."""
    for budget in stack.of_type("aws:budgets/budget:Budget"):
        notifications = budget.inputs.get("notifications") or []
        if len(notifications) > 10:
            yield f"{budget.name}: {len(notifications)} notifications, more than 10"
        for index, notification in enumerate(notifications):
            emails = notification.get("subscriberEmailAddresses") or []
            topics = notification.get("subscriberSnsTopicArns") or []
            if len(emails) > 10 or len(topics) > 1 or not emails + topics:
                yield f"{budget.name}: notification {index} has {len(emails)} e-mail and {len(topics)} SNS subscribers"


# --- events and functions ---------------------------------------------------------------------------------


@rule("event-targets",
      "botocore events PutTargets documentation ('Each rule can have up to five (5) targets'); "
      "https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-cross-region.html")
def _event_targets(stack: Stack):
    """A rule has at most five targets; a target in another region is an event bus, sent to with a role."""
    per_rule: dict[str, int] = {}
    for target in stack.of_type("aws:cloudwatch/eventTarget:EventTarget"):
        rule_resource = stack.referenced(target.inputs.get("rule"))
        key = rule_resource.name if rule_resource else target.inputs.get("rule")
        per_rule[key] = per_rule.get(key, 0) + 1
        arn, region = target.inputs.get("arn", ""), stack.region(target)
        if _arn_region(arn) != region:
            if ":event-bus/" not in arn:
                yield f"{target.name}: {arn} is in another region than its rule ({region}) and is not an event bus"
            elif not target.inputs.get("roleArn"):
                yield f"{target.name}: sends to the event bus {arn} in another region without a role"
    for name, count in per_rule.items():
        if count > 5:
            yield f"{name}: {count} targets, more than 5"


@rule("event-pattern-size",
      "pulumi_aws.cloudwatch.EventRule event_pattern docstring ('The event pattern size is 2048 by default'); "
      "https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-quota.html")
def _event_pattern_size(stack: Stack):
    """An event pattern is at most 2,048 characters (the default quota; the model allows 4,096 after an increase)."""
    for event_rule in stack.of_type("aws:cloudwatch/eventRule:EventRule"):
        pattern = event_rule.inputs.get("eventPattern") or ""
        if len(pattern) > 2048:
            yield f"{event_rule.name}: event pattern of {len(pattern)} characters, more than 2,048"


@rule("lambda-reserved-concurrency",
      "botocore lambda PutFunctionConcurrency documentation ('leave at least 100 simultaneous executions "
      "unreserved'); https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html")
def _no_reserved_concurrency(stack: Stack):
    """No function reserves concurrency: a new account's concurrency quota can be 10, and any reservation
    takes it below the unreserved minimum, so the deployment fails there."""
    for function in stack.of_type("aws:lambda/function:Function"):
        reserved = function.inputs.get("reservedConcurrentExecutions")
        if reserved is not None and reserved >= 0:
            yield f"{function.name}: reserved concurrency {reserved:.0f}"


LAMBDA_ENVIRONMENT_BYTES = 4096
LAMBDA_ZIP_BYTES = 50 * 1024 * 1024


@rule("lambda-environment-size", "https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html")
def _lambda_environment_size(stack: Stack):
    """A function's environment variables take at most 4 KB together (measured as their JSON, as Lambda's
    error message shows them)."""
    for function in stack.of_type("aws:lambda/function:Function"):
        variables = (function.inputs.get("environment") or {}).get("variables") or {}
        size = len(json.dumps(variables, separators=(",", ":")).encode())
        if size > LAMBDA_ENVIRONMENT_BYTES:
            yield f"{function.name}: environment of {size} bytes, more than {LAMBDA_ENVIRONMENT_BYTES}"


@rule("lambda-package-size", "https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html")
def _lambda_package_size(stack: Stack):
    """A function's zip uploaded directly is at most 50 MB."""
    for function in stack.of_type("aws:lambda/function:Function"):
        for call in stack.calls(function):
            if call.operation == "CreateFunction" and isinstance(call.params["Code"].get("ZipFile"), bytes):
                size = len(call.params["Code"]["ZipFile"])
                if size > LAMBDA_ZIP_BYTES:
                    yield f"{function.name}: package of {size} bytes, more than {LAMBDA_ZIP_BYTES}"


def _function_of(stack: Stack, reference: str, region: str) -> Recorded | None:
    """The function an ARN stands for, or the one of that name in `region` (names repeat across regions)."""
    found = stack.referenced(reference)
    if found is None:
        found = next((f for f in stack.of_type("aws:lambda/function:Function")
                      if f.inputs.get("name") == reference and stack.region(f) == region), None)
    return found if found is not None and found.type == "aws:lambda/function:Function" else None


def _permitted(stack: Stack, function: Recorded, principal: str, source_arn: str) -> bool:
    return any(_function_of(stack, p.inputs.get("function"), stack.region(p)) is function
               and p.inputs.get("principal") == principal
               and p.inputs.get("sourceArn") == source_arn and p.inputs.get("action") == "lambda:InvokeFunction"
               for p in stack.of_type("aws:lambda/permission:Permission"))


@rule("lambda-invoke-permissions",
      "https://docs.aws.amazon.com/lambda/latest/dg/access-control-resource-based.html; "
      "https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/AlarmThatSendsEmail.html#alarms-and-actions")
def _every_invoker_is_permitted(stack: Stack):
    """Every alarm, event rule and SNS topic that invokes a function has the function's permission for
    that service and that source."""
    invocations = []
    for alarm in stack.of_type("aws:cloudwatch/metricAlarm:MetricAlarm"):
        invocations += [(a, "lambda.alarms.cloudwatch.amazonaws.com", alarm.generated.get("arn"), alarm)
                        for a in alarm.inputs.get("alarmActions") or []]
    for target in stack.of_type("aws:cloudwatch/eventTarget:EventTarget"):
        event_rule = stack.referenced(target.inputs.get("rule"))
        invocations.append((target.inputs.get("arn"), "events.amazonaws.com",
                            event_rule.generated.get("arn") if event_rule else None, target))
    for subscription in stack.of_type("aws:sns/topicSubscription:TopicSubscription"):
        if subscription.inputs.get("protocol") == "lambda":
            invocations.append((subscription.inputs.get("endpoint"), "sns.amazonaws.com", subscription.inputs.get("topic"),
                                subscription))
    for invoked, principal, source, by in invocations:
        function = _function_of(stack, invoked, stack.region(by))
        if function is not None and not _permitted(stack, function, principal, source):
            yield f"{by.name}: invokes {function.name} without a permission for {principal} from {source}"


# --- ECS and Auto Scaling ---------------------------------------------------------------------------------

SPOT_NOTICE_SECONDS = 120


@rule("ecs-task-definition",
      "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/spot-instance-termination-notices.html; "
      "https://docs.aws.amazon.com/AmazonECS/latest/developerguide/ecs-gpu.html; "
      "https://docs.aws.amazon.com/AmazonECS/latest/developerguide/using_awslogs.html; "
      "botocore ecs ContainerDefinition memoryReservation documentation")
def _ecs_task_definitions(stack: Stack):
    """A container stops within the spot two-minute notice; GPU tasks run on EC2 only; memory, when set, is
    above memoryReservation; awslogs writes to a log group the stack declares in the task's region."""
    groups = {(stack.region(g), g.inputs.get("name")) for g in stack.of_type("aws:cloudwatch/logGroup:LogGroup")}
    for task in stack.of_type("aws:ecs/taskDefinition:TaskDefinition"):
        region = stack.region(task)
        for container in _json(task.inputs.get("containerDefinitions")) or []:
            name = f"{task.name} container {container.get('name')!r}"
            if container.get("stopTimeout", 30) > SPOT_NOTICE_SECONDS:
                yield f"{name}: stopTimeout {container['stopTimeout']} s outlasts the {SPOT_NOTICE_SECONDS} s spot notice"
            gpu = any(r.get("type") == "GPU" for r in container.get("resourceRequirements") or [])
            if gpu and set(task.inputs.get("requiresCompatibilities") or ["EC2"]) - {"EC2", "EXTERNAL"}:
                yield f"{name}: asks for GPUs but the task may run on {task.inputs['requiresCompatibilities']}"
            if container.get("memory") is not None and container.get("memoryReservation") is not None \
                    and container["memory"] <= container["memoryReservation"]:
                yield f"{name}: memory {container['memory']} is not above memoryReservation {container['memoryReservation']}"
            logs = container.get("logConfiguration") or {}
            if logs.get("logDriver") == "awslogs":
                options = logs.get("options") or {}
                if options.get("awslogs-region") != region:
                    yield f"{name}: awslogs-region {options.get('awslogs-region')!r} is not the task's region {region}"
                if (region, options.get("awslogs-group")) not in groups:
                    yield f"{name}: awslogs-group {options.get('awslogs-group')!r} is not a log group of {region}"


@rule("asg-hard-cap",
      "https://docs.aws.amazon.com/autoscaling/ec2/userguide/ec2-auto-scaling-capacity-rebalancing.html; "
      "https://docs.aws.amazon.com/autoscaling/ec2/userguide/instance-refresh-overview.html")
def _asg_caps_hold(stack: Stack):
    """max_size is a hard cap: no Capacity Rebalancing (it may launch replacements above max_size before it
    terminates the instances at risk); min <= max; the on-demand base fits under max; an instance refresh keeps
    min healthy <= max healthy."""
    for group in stack.of_type("aws:autoscaling/group:Group"):
        if group.inputs.get("capacityRebalance"):
            yield f"{group.name}: capacity_rebalance may launch above max_size ({group.inputs.get('maxSize'):.0f})"
        low, high = group.inputs.get("minSize", 0), group.inputs.get("maxSize", 0)
        if low > high:
            yield f"{group.name}: min_size {low:.0f} above max_size {high:.0f}"
        distribution = ((group.inputs.get("mixedInstancesPolicy") or {}).get("instancesDistribution") or {})
        if distribution.get("onDemandBaseCapacity", 0) > high:
            yield f"{group.name}: on-demand base {distribution['onDemandBaseCapacity']:.0f} above max_size {high:.0f}"
        preferences = (group.inputs.get("instanceRefresh") or {}).get("preferences") or {}
        if preferences.get("minHealthyPercentage", 90) > preferences.get("maxHealthyPercentage", 100):
            yield f"{group.name}: instance refresh min healthy above max healthy"


# --- names ---------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class UniqueName:
    """A type whose name identifies one resource in its scope ("region", "account", or "global"), and what
    the creating call does with a name that is taken: `evidence` is an error the call declares, or a phrase of
    its documentation, in the installed botocore model."""
    input: str
    scope: str
    service: str
    operation: str
    evidence: str


UNIQUE_NAMES = {
    "aws:autoscaling/group:Group": UniqueName("name", "region", "autoscaling", "CreateAutoScalingGroup",
                                              "AlreadyExistsFault"),
    "aws:budgets/budget:Budget": UniqueName("name", "account", "budgets", "CreateBudget", "DuplicateRecordException"),
    "aws:cloudwatch/logGroup:LogGroup": UniqueName("name", "region", "logs", "CreateLogGroup",
                                                   "ResourceAlreadyExistsException"),
    "aws:cloudwatch/metricAlarm:MetricAlarm": UniqueName("name", "region", "cloudwatch", "PutMetricAlarm",
                                                         "Creates or updates an alarm"),
    "aws:dynamodb/table:Table": UniqueName("name", "region", "dynamodb", "CreateTable", "ResourceInUseException"),
    "aws:lambda/function:Function": UniqueName("name", "region", "lambda", "CreateFunction", "ResourceConflictException"),
    "aws:s3/bucket:Bucket": UniqueName("bucket", "global", "s3", "CreateBucket", "BucketAlreadyOwnedByYou"),
    "aws:sns/topic:Topic": UniqueName("name", "region", "sns", "CreateTopic",
                                      "if the requester already owns a topic with the specified name, that topic's "
                                      "ARN is returned without creating a new topic"),
    "aws:sqs/queue:Queue": UniqueName("name", "region", "sqs", "CreateQueue", "QueueNameExists"),
    "aws:ssm/parameter:Parameter": UniqueName("name", "region", "ssm", "PutParameter", "ParameterAlreadyExists"),
    "aws:ecr/pullThroughCacheRule:PullThroughCacheRule": UniqueName(
        "ecrRepositoryPrefix", "region", "ecr", "CreatePullThroughCacheRule", "PullThroughCacheRuleAlreadyExistsException"),
    "aws:ecr/repositoryCreationTemplate:RepositoryCreationTemplate": UniqueName(
        "prefix", "region", "ecr", "CreateRepositoryCreationTemplate", "TemplateAlreadyExistsException"),
}


@rule("one-resource-per-name", "botocore: the creating call of each type in UNIQUE_NAMES (its name-taken error, or "
                               "SNS CreateTopic's and CloudWatch PutMetricAlarm's create-or-return documentation)")
def _one_resource_per_name(stack: Stack):
    """Two resources of a stack never take the same name of a type in its scope: AWS refuses the second
    creation, or hands it the first resource (SNS returns the existing topic, PutMetricAlarm overwrites the
    alarm), so two Pulumi resources would own one AWS resource and fight over it."""
    seen: dict[tuple[str, str, str], str] = {}
    for type_token, unique in UNIQUE_NAMES.items():
        for resource in stack.of_type(type_token):
            name = resource.inputs.get(unique.input)
            if not isinstance(name, str):
                continue  # autonamed: unique by construction
            scope = stack.region(resource) if unique.scope == "region" else unique.scope
            first = seen.setdefault((type_token, scope, name), resource.name)
            if first != resource.name:
                yield (f"{first}, {resource.name}: both {type_token} {name!r} in {scope} "
                       f"({unique.service}:{unique.operation}: {unique.evidence})")


# --- tags, policies, keys -----------------------------------------------------------------------------------

MAX_TAGS = 50


def _tag_sets(stack: Stack, resource: Recorded) -> Iterator[tuple[str, dict]]:
    """(where, tags) for each set of tags a resource writes, with the provider's default tags merged in."""
    for call in stack.calls(resource):
        params = call.params
        for key in ("Tags", "tags", "ResourceTags"):
            tags = params.get(key)
            if isinstance(tags, dict):
                yield f"{call.label} {key}", tags
            elif isinstance(tags, list):
                yield f"{call.label} {key}", {t.get("Key", t.get("key", t.get("TagKey"))): t.get("Value", t.get("value", t.get("TagValue"))) for t in tags}
        for spec in params.get("TagSpecifications") or (params.get("LaunchTemplateData") or {}).get("TagSpecifications") or []:
            yield f"{call.label} TagSpecifications {spec['ResourceType']}", {t["Key"]: t["Value"] for t in spec.get("Tags") or []}


@rule("tags-per-resource", "https://docs.aws.amazon.com/tag-editor/latest/userguide/best-practices-and-strats.html")
def _tag_limits(stack: Stack):
    """A resource carries at most 50 user tags, none with the reserved aws: prefix."""
    for resource in stack.resources:
        if not resource.type.startswith("aws:"):
            continue
        for where, tags in _tag_sets(stack, resource):
            if len(tags) > MAX_TAGS:
                yield f"{resource.name}: {where} has {len(tags)} tags, more than {MAX_TAGS}"
            reserved = sorted(k for k in tags if str(k).lower().startswith("aws:"))
            if reserved:
                yield f"{resource.name}: {where} uses the reserved prefix aws: in {reserved}"


@rule("roles-detach-before-delete",
      "botocore iam DeleteRole documentation ('you must delete the items attached to the role manually, or the "
      "deletion fails'; DeleteConflictException); pulumi_aws iam.Role force_detach_policies ('Defaults to `false`')")
def _roles_detach_before_delete(stack: Stack):
    """Every role force-detaches policies before it is deleted: a policy a team attached by hand makes
    DeleteRole fail with DeleteConflict, and `pulumi destroy` stops there."""
    for role in stack.of_type("aws:iam/role:Role"):
        if role.inputs.get("forceDetachPolicies") is not True:
            yield f"{role.name}: no force_detach_policies, so DeleteRole fails while a policy is attached"


def _policy_characters(document: str) -> int:
    """IAM counts a policy's characters without white space."""
    return len(re.sub(r"\s", "", document))


@rule("iam-policy-sizes", "https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_iam-quotas.html")
def _iam_policy_sizes(stack: Stack):
    """A role's trust policy is at most 2,048 characters, its inline policies together at most 10,240, and it
    has at most 10 managed policies (the default quota)."""
    for role in stack.of_type("aws:iam/role:Role"):
        trust = _policy_characters(role.inputs.get("assumeRolePolicy") or "")
        if trust > 2048:
            yield f"{role.name}: trust policy of {trust} characters, more than 2,048"
        inline = sum(_policy_characters(p.inputs.get("policy") or "") for p in stack.of_type("aws:iam/rolePolicy:RolePolicy")
                     if stack.referenced(p.inputs.get("role")) is role)
        if inline > 10240:
            yield f"{role.name}: inline policies of {inline} characters together, more than 10,240"
        managed = [a for a in stack.of_type("aws:iam/rolePolicyAttachment:RolePolicyAttachment")
                   if stack.referenced(a.inputs.get("role")) is role]
        if len(managed) > 10:
            yield f"{role.name}: {len(managed)} managed policies, more than 10"


@rule("kms-key-policy-size", "https://docs.aws.amazon.com/kms/latest/developerguide/resource-limits.html")
def _kms_key_policy_size(stack: Stack):
    """A KMS key policy is at most 32 KB."""
    for key in stack.of_type("aws:kms/key:Key"):
        size = len((key.inputs.get("policy") or "").encode())
        if size > 32 * 1024:
            yield f"{key.name}: key policy of {size} bytes, more than 32 KB"


def _publishers(stack: Stack, topic: Recorded) -> set[str]:
    """The AWS services that publish to a topic: alarms, budgets and event rules that name it."""
    arn = topic.generated.get("arn")
    services = set()
    for alarm in stack.of_type("aws:cloudwatch/metricAlarm:MetricAlarm"):
        if arn in (alarm.inputs.get("alarmActions") or []) + (alarm.inputs.get("okActions") or []):
            services.add("cloudwatch.amazonaws.com")
    for budget in stack.of_type("aws:budgets/budget:Budget"):
        if any(arn in (n.get("subscriberSnsTopicArns") or []) for n in budget.inputs.get("notifications") or []):
            services.add("budgets.amazonaws.com")
    for target in stack.of_type("aws:cloudwatch/eventTarget:EventTarget"):
        if target.inputs.get("arn") == arn:
            services.add("events.amazonaws.com")
    return services


def _key_grants_service(policy: Any, service: str) -> bool:
    needed = ("kms:Decrypt", "kms:GenerateDataKey")
    for statement in _statements(policy):
        principals = statement.get("Principal") or {}
        services = _list(principals.get("Service", [])) if isinstance(principals, dict) else []
        actions = _list(statement.get("Action", []))
        if statement.get("Effect") == "Allow" and service in services and all(
                any(fnmatch.fnmatch(n, a) for a in actions) for n in needed):
            return True
    return False


@rule("encrypted-topic-publishers", "https://docs.aws.amazon.com/sns/latest/dg/sns-key-management.html")
def _encrypted_topics_let_their_publishers_encrypt(stack: Stack):
    """An SNS topic encrypted with a customer managed key receives from an AWS service only if the key policy
    grants that service kms:GenerateDataKey* and kms:Decrypt."""
    for topic in stack.of_type("aws:sns/topic:Topic"):
        key = stack.referenced(topic.inputs.get("kmsMasterKeyId"))
        if key is None:
            continue
        for service in sorted(_publishers(stack, topic)):
            if not _key_grants_service(key.inputs.get("policy"), service):
                yield f"{topic.name}: {service} publishes to it, but the key {key.name} does not let it encrypt"


# --- networks ---------------------------------------------------------------------------------------------


@rule("private-dns-needs-vpc-dns", "https://docs.aws.amazon.com/vpc/latest/privatelink/create-interface-endpoint.html")
def _private_dns_needs_vpc_dns(stack: Stack):
    """An interface endpoint with private DNS needs DNS resolution and DNS hostnames on its VPC."""
    for endpoint in stack.of_type("aws:ec2/vpcEndpoint:VpcEndpoint"):
        vpc = stack.referenced(endpoint.inputs.get("vpcId"))
        if not endpoint.inputs.get("privateDnsEnabled") or vpc is None:
            continue
        # CreateVpc's defaults: DNS resolution on, DNS hostnames off.
        if not (vpc.inputs.get("enableDnsSupport", True) and vpc.inputs.get("enableDnsHostnames", False)):
            yield f"{endpoint.name}: private DNS in {vpc.name}, which lacks DNS resolution or DNS hostnames"


@rule("subnets-inside-their-vpc", "https://docs.aws.amazon.com/vpc/latest/userguide/subnet-sizing.html")
def _subnets_inside_their_vpc(stack: Stack):
    """Subnets are /16 to /28 blocks inside their VPC's CIDR and do not overlap."""
    by_vpc: dict[str, list[tuple[Recorded, Any]]] = {}
    for subnet in stack.of_type("aws:ec2/subnet:Subnet"):
        vpc = stack.referenced(subnet.inputs.get("vpcId"))
        block = ipaddress.ip_network(subnet.inputs["cidrBlock"])
        if not 16 <= block.prefixlen <= 28:
            yield f"{subnet.name}: {block} is not /16 to /28"
        if vpc is not None:
            if not block.subnet_of(ipaddress.ip_network(vpc.inputs["cidrBlock"])):
                yield f"{subnet.name}: {block} is outside {vpc.name} ({vpc.inputs['cidrBlock']})"
            by_vpc.setdefault(vpc.name, []).append((subnet, block))
    for subnets in by_vpc.values():
        for index, (first, a) in enumerate(subnets):
            for second, b in subnets[index + 1:]:
                if a.overlaps(b):
                    yield f"{first.name} and {second.name}: {a} and {b} overlap"


@rule("dynamodb-key-attributes", "https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_CreateTable.html")
def _dynamodb_attributes_are_keys(stack: Stack):
    """A table defines exactly the attributes its keys and its indexes' keys use."""
    for table in stack.of_type("aws:dynamodb/table:Table"):
        defined = {a["name"] for a in table.inputs.get("attributes") or []}
        used = {table.inputs.get("hashKey"), table.inputs.get("rangeKey")}
        for index in table.inputs.get("globalSecondaryIndexes") or []:
            used |= {index.get("hashKey"), index.get("rangeKey")}
        used.discard(None)
        if defined - used:
            yield f"{table.name}: defines {sorted(defined - used)} but no key uses them"
        if used - defined:
            yield f"{table.name}: keys use {sorted(used - defined)} without a definition"


def check(rendering: Rendering) -> dict[str, list[str]]:
    """Every rule's findings for a rendered stack (rule id -> findings)."""
    stack = Stack(rendering)
    return {r.id: r.check(stack) for r in RULES}
