"""The service rules no model carries hold on every stack (tests/rules/service_rules.py).

Every rule runs on the committed stacks, on a stack made by README's "Add an environment" steps and on the
stack at the longest names and largest counts; each is shown failing on a deliberately broken copy.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import json
import re
from collections.abc import Callable

import api_models
import pulumi_aws
import pytest
import service_rules
from rule_stacks import RULE_STACKS
from pulumi_harness import Recorded, Rendering
from service_rules import RULES, Stack, rule_by_id

RENDERINGS = (*RULE_STACKS, "longest")


@pytest.fixture(scope="module")
def stacks(renderings, longest_rendering) -> dict[str, Stack]:
    return {name: Stack(r) for name, r in {**renderings, "longest": longest_rendering}.items()}


@pytest.mark.parametrize("stack", RENDERINGS)
@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.id)
def test_rule_holds(stacks, rule, stack):
    findings = list(rule.check(stacks[stack]))
    assert not findings, f"{rule.statement}\nsource: {rule.source}\n" + "\n".join(findings)


def test_every_rule_cites_its_source():
    for rule in RULES:
        assert rule.statement and rule.source, rule.id
        assert "https://" in rule.source or "botocore" in rule.source or "pulumi_aws" in rule.source, rule.id
    assert len({r.id for r in RULES}) == len(RULES)


def _doc(service: str, operation: str, path: str | None = None) -> str:
    if path:
        return api_models.documentation(service, operation, path)
    text = api_models.service_model(service).operation_model(operation).documentation or ""
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", text))


# Rules taken from text installed here: the sentence must still be there.
INSTALLED_SOURCES = [
    ("alarm-evaluation-window", lambda: _doc("cloudwatch", "PutMetricAlarm", "Period"),
     "Period multiplied by EvaluationPeriods can't be more than 604,800 seconds"),
    ("alarm-evaluation-window", lambda: _doc("cloudwatch", "PutMetricAlarm", "Period"),
     "the total evaluation period can't be longer than one day (86,400 seconds)"),
    ("event-targets", lambda: _doc("events", "PutTargets"), "Each rule can have up to five (5) targets"),
    ("lambda-reserved-concurrency", lambda: _doc("lambda", "PutFunctionConcurrency"),
     "leave at least 100 simultaneous executions unreserved"),
    ("redrive-allow-policy", lambda: _doc("sqs", "CreateQueue", "Attributes"), "You can specify up to 10 source queue ARNs"),
    ("redrive-policy", lambda: _doc("sqs", "CreateQueue", "Attributes"), "deadLetterTargetArn"),
    ("ecs-task-definition", lambda: _doc("ecs", "RegisterTaskDefinition", "containerDefinitions[].memoryReservation"),
     "memory must be greater than memoryReservation"),
    ("event-pattern-size", lambda: pulumi_aws.cloudwatch.EventRuleArgs.event_pattern.fget.__doc__ or "",
     "The event pattern size is 2048 by default"),
    ("visibility-covers-consumers", lambda: _doc("sqs", "CreateQueue", "Attributes"), "VisibilityTimeout – "),
    ("roles-detach-before-delete", lambda: _doc("iam", "DeleteRole"),
     "you must delete the items attached to the role manually, or the deletion fails"),
    ("roles-detach-before-delete", lambda: pulumi_aws.iam.Role.force_detach_policies.fget.__doc__ or "",
     "Whether to force detaching any policies the role has before destroying it. Defaults to `false`."),
    ("cost-allocation-tag-is-an-account-step",
     lambda: inspect.getsource(pulumi_aws.costexplorer.cost_allocation_tag),
     "it can take up to 24 hours for the tag keys to appear on Cost Allocation tag page for activation"),
]


@pytest.mark.parametrize("type_token", sorted(service_rules.UNIQUE_NAMES))
def test_each_unique_name_is_what_the_installed_model_says(type_token):
    """The creating call declares the name-taken error, or documents that it returns or rewrites the
    existing resource."""
    unique = service_rules.UNIQUE_NAMES[type_token]
    operation = api_models.service_model(unique.service).operation_model(unique.operation)
    errors = {e.name for e in operation.error_shapes}
    assert unique.evidence in errors or unique.evidence in _doc(unique.service, unique.operation)


@pytest.mark.parametrize(("rule_id", "text", "phrase"), INSTALLED_SOURCES, ids=[s[0] for s in INSTALLED_SOURCES])
def test_installed_sources_still_state_the_rule(rule_id, text, phrase):
    assert rule_by_id(rule_id)
    assert phrase in " ".join(text().split())


# --- each rule fails on a broken copy ----------------------------------------------------------------------

def _findings(rendering: Rendering, rule_id: str, change: Callable[[list[Recorded]], None]) -> list[str]:
    """The rule's findings on a copy of the rendering after `change` (which edits the copied resources)."""
    resources = copy.deepcopy(rendering.resources)
    change(resources)
    return rule_by_id(rule_id).check(Stack(dataclasses.replace(rendering, resources=resources)))


def _one(resources: list[Recorded], type_token: str, name_part: str = "") -> Recorded:
    return next(r for r in resources if r.type == type_token and name_part in r.name)


def _by(name: str, resources: list[Recorded]) -> Recorded:
    return next(r for r in resources if r.name == name)


QUEUE, LT, ASG, ALARM = "aws:sqs/queue:Queue", "aws:ec2/launchTemplate:LaunchTemplate", "aws:autoscaling/group:Group", \
    "aws:cloudwatch/metricAlarm:MetricAlarm"


def _pop(type_token: str, key: str, name_part: str = ""):
    def change(resources):
        _one(resources, type_token, name_part).inputs.pop(key)
    return change


def _same_topic_name(resources):
    """Two topics of one region under one name, as a stack with its home outside us-east-1 had them."""
    other = next(r for r in resources if r.type == "aws:sns/topic:Topic" and "us-east-1" in (r.provider or "")
                 and r.inputs["name"] != "mlfleet-prod-alerts")
    other.inputs["name"] = "mlfleet-prod-alerts"


def _activate_cost_tag(resources):
    """The stack as it was: the cost allocation tag activated by a resource of the stack."""
    budget = _one(resources, "aws:budgets/budget:Budget")
    resources.append(Recorded("aws:costexplorer/costAllocationTag:CostAllocationTag", "dev-cost-tag",
                              {"tagKey": "mlfleet:environment", "status": "Active"}, budget.provider))


def _duplicate_topic(resources):
    channel = _one(resources, "aws:chatbot/slackChannelConfiguration:SlackChannelConfiguration")
    channel.inputs["snsTopicArns"] = [*channel.inputs["snsTopicArns"], channel.inputs["snsTopicArns"][0]]


def _duplicate_subnet(resources):
    endpoint = next(r for r in resources if r.type == "aws:ec2/vpcEndpoint:VpcEndpoint" and r.inputs.get("subnetIds"))
    endpoint.inputs["subnetIds"] = [*endpoint.inputs["subnetIds"], endpoint.inputs["subnetIds"][0]]


def _set(type_token: str, key: str, value, name_part: str = ""):
    def change(resources):
        _one(resources, type_token, name_part).inputs[key] = value
    return change


def _edit_json(type_token: str, key: str, edit: Callable[[object], None], name_part: str = ""):
    def change(resources):
        resource = _one(resources, type_token, name_part)
        document = json.loads(resource.inputs[key])
        edit(document)
        resource.inputs[key] = json.dumps(document)
    return change


def _container(edit):
    def apply(definitions):
        edit(definitions[0])
    return _edit_json("aws:ecs/taskDefinition:TaskDefinition", "containerDefinitions", apply)


def _move_to(type_token: str, region: str, name_part: str = ""):
    def change(resources):
        resource = _one(resources, type_token, name_part)
        home = resource.provider.split("::")[-2]
        resource.provider = resource.provider.replace(home, f"aws-{region}")
    return change


def _alarm_action_elsewhere(resources):
    # By its region: the order the mocks record resources in across regions is not the program's.
    alarm = _one(resources, ALARM, "-us-east-1-reaper-gpu1-idle")
    alarm.inputs["alarmActions"] = [alarm.inputs["alarmActions"][0].replace(":us-east-1:", ":eu-west-1:")]


def _remove_permission(name_part: str):
    def change(resources):
        resources.remove(_one(resources, "aws:lambda/permission:Permission", name_part))
    return change


def _copies(type_token: str, name_part: str, count: int):
    """Add `count` copies of a resource (under new names)."""
    def change(resources):
        original = _one(resources, type_token, name_part)
        for index in range(count):
            twin = copy.deepcopy(original)
            twin.name = f"{original.name}-{index}"
            resources.append(twin)
    return change


def _target_without_role(resources):
    _one(resources, "aws:cloudwatch/eventTarget:EventTarget", "to-home").inputs.pop("roleArn")


def _lambda_target_elsewhere(resources):
    # Whichever region's reaper the mocks recorded first (their order follows the program's outputs resolving):
    # its function's ARN moved to a region the stack does not use.
    target = _one(resources, "aws:cloudwatch/eventTarget:EventTarget", "reaper-schedule-target")
    arn = target.inputs["arn"].split(":")
    target.inputs["arn"] = ":".join([*arn[:3], "eu-west-1", *arn[4:]])


def _eleven_emails(resources):
    budget = _one(resources, "aws:budgets/budget:Budget")
    budget.inputs["notifications"][0]["subscriberEmailAddresses"] = [f"a{i}@example.com" for i in range(11)]


def _eleven_notifications(resources):
    budget = _one(resources, "aws:budgets/budget:Budget")
    budget.inputs["notifications"] = [dict(budget.inputs["notifications"][0], threshold=float(t)) for t in range(11)]


def _many_tags(resources):
    role = _one(resources, "aws:iam/role:Role")
    role.inputs["tags"] = {**role.inputs["tags"], **{f"t{i}": "v" for i in range(50)}}


def _big_inline_policy(resources):
    policy = _one(resources, "aws:iam/rolePolicy:RolePolicy", "scheduler")
    document = json.loads(policy.inputs["policy"])
    document["Statement"].append({"Effect": "Allow", "Action": "s3:GetObject",
                                  "Resource": [f"arn:aws:s3:::bucket-{i:05d}/*" for i in range(400)]})
    policy.inputs["policy"] = json.dumps(document)


def _key_without_cloudwatch(resources):
    key = _one(resources, "aws:kms/key:Key", "home-alerts-key")
    document = json.loads(key.inputs["policy"])
    for statement in document["Statement"]:
        principal = statement.get("Principal", {})
        if isinstance(principal, dict) and "Service" in principal:
            principal["Service"] = [s for s in principal["Service"] if s != "cloudwatch.amazonaws.com"]
    key.inputs["policy"] = json.dumps(document)


def _subnet_outside(resources):
    _one(resources, "aws:ec2/subnet:Subnet").inputs["cidrBlock"] = "10.99.0.0/19"


def _subnets_overlap(resources):
    subnets = [r for r in resources if r.type == "aws:ec2/subnet:Subnet" and "us-east-1" in r.name]
    subnets[1].inputs["cidrBlock"] = subnets[0].inputs["cidrBlock"]


def _unused_attribute(resources):
    table = _one(resources, "aws:dynamodb/table:Table")
    table.inputs["attributes"] = [*table.inputs["attributes"], {"name": "owner", "type": "S"}]


def _dlq_denies_the_source(resources):
    policy = _one(resources, "aws:sqs/redriveAllowPolicy:RedriveAllowPolicy")
    policy.inputs["redriveAllowPolicy"] = json.dumps(
        {"redrivePermission": "byQueue", "sourceQueueArns": ["arn:aws:sqs:us-east-1:123456789012:someone-else"]})


def _redrive_to(edit):
    def change(resources):
        queue = next(r for r in resources if r.type == QUEUE and r.inputs.get("redrivePolicy"))
        policy = json.loads(queue.inputs["redrivePolicy"])
        edit(policy)
        queue.inputs["redrivePolicy"] = json.dumps(policy)
    return change


def _distribution(key, value):
    def change(resources):
        group = _one(resources, ASG)
        group.inputs["mixedInstancesPolicy"]["instancesDistribution"][key] = value
    return change


def _refresh(key, value):
    def change(resources):
        _one(resources, ASG).inputs["instanceRefresh"]["preferences"][key] = value
    return change


BROKEN = [
    ("set-arguments-distinct", "prod", _duplicate_topic, "Duplicate Set Element"),
    ("set-arguments-distinct", "prod", _duplicate_subnet, "the provider merges them"),
    ("dead-letter-queue-retention", "prod", _set(QUEUE, "messageRetentionSeconds", 3600.0, "dlq"),
     "keeps messages 3600 s, less than its source"),
    ("redrive-policy", "prod", _redrive_to(lambda p: p.update(maxReceiveCount=0)), "maxReceiveCount 0 is not 1 to 1,000"),
    ("redrive-policy", "prod", _redrive_to(lambda p: p.update(deadLetterTargetArn="arn:aws:sqs:us-east-1:123456789012:gone")),
     "is not a queue of this stack"),
    ("redrive-allow-policy", "prod", _dlq_denies_the_source, "does not let in its source"),
    ("visibility-covers-consumers", "prod", _set(QUEUE, "visibilityTimeoutSeconds", 60.0, "queue"),
     "shorter than prod-jobs-scheduler-function's timeout 180 s"),
    ("billing-metrics-in-us-east-1", "staging", _move_to(ALARM, "us-west-2", "estimated-charges"),
     "alarms on AWS/Billing in us-west-2"),
    ("one-resource-per-name", "prod", _same_topic_name, "aws:sns/topic:Topic 'mlfleet-prod-alerts' in us-east-1"),
    ("roles-detach-before-delete", "prod", _pop("aws:iam/role:Role", "forceDetachPolicies", "-job"),
     "no force_detach_policies"),
    ("cost-allocation-tag-is-an-account-step", "dev", _activate_cost_tag,
     "dev-cost-tag: activates 'mlfleet:environment' during `pulumi up`"),
    ("alarm-actions-in-region", "prod", _alarm_action_elsewhere, "is not in the alarm's region us-east-1"),
    ("alarm-evaluation-window", "prod", _set(ALARM, "evaluationPeriods", 289.0, "-idle"), "more than 86400"),
    ("alarm-evaluation-window", "prod", _set(ALARM, "datapointsToAlarm", 400.0, "-idle"), "exceeds evaluationPeriods"),
    ("budget-notifications", "prod", _eleven_emails, "has 11 e-mail and 1 SNS subscribers"),
    ("budget-notifications", "prod", _eleven_notifications, "11 notifications, more than 10"),
    ("event-targets", "prod", _copies("aws:cloudwatch/eventTarget:EventTarget", "reaper-schedule-target", 5),
     "6 targets, more than 5"),
    ("event-targets", "prod", _target_without_role, "in another region without a role"),
    ("event-targets", "prod", _lambda_target_elsewhere, "is not an event bus"),
    ("event-pattern-size", "prod", _set("aws:cloudwatch/eventRule:EventRule", "eventPattern", "{" + " " * 2048 + "}", "ecs"),
     "event pattern of 2050 characters"),
    ("lambda-reserved-concurrency", "prod", _set("aws:lambda/function:Function", "reservedConcurrentExecutions", 5.0, "budget"),
     "prod-home-budget-guard-function: reserved concurrency 5"),
    ("lambda-environment-size", "prod", _set("aws:lambda/function:Function", "environment",
                                             {"variables": {"BIG": "x" * 4096}}, "budget"), "more than 4096"),
    ("lambda-invoke-permissions", "prod", _remove_permission("us-west-2-reaper-gpu8-from-alarm"),
     "without a permission for lambda.alarms.cloudwatch.amazonaws.com"),
    ("lambda-invoke-permissions", "prod", _remove_permission("budget-guard-from-sns"), "for sns.amazonaws.com"),
    ("ecs-task-definition", "prod", _container(lambda c: c.update(stopTimeout=121)), "outlasts the 120 s spot notice"),
    ("ecs-task-definition", "prod", _set("aws:ecs/taskDefinition:TaskDefinition", "requiresCompatibilities", ["FARGATE"]),
     "asks for GPUs but the task may run on ['FARGATE']"),
    ("ecs-task-definition", "prod", _container(lambda c: c.update(memory=4096)), "is not above memoryReservation"),
    ("ecs-task-definition", "prod", _container(lambda c: c["logConfiguration"]["options"].update({"awslogs-region": "eu-west-1"})),
     "is not the task's region"),
    ("ecs-task-definition", "prod", _container(lambda c: c["logConfiguration"]["options"].update({"awslogs-group": "/nowhere"})),
     "is not a log group of"),
    ("asg-hard-cap", "prod", _set(ASG, "capacityRebalance", True, "gpu1"), "capacity_rebalance may launch above max_size"),
    ("asg-hard-cap", "prod", _set(ASG, "minSize", 30.0, "gpu1"), "min_size 30 above max_size 24"),
    ("asg-hard-cap", "prod", _distribution("onDemandBaseCapacity", 25.0), "on-demand base 25 above max_size"),
    ("asg-hard-cap", "prod", _refresh("minHealthyPercentage", 110.0), "min healthy above max healthy"),
    ("tags-per-resource", "prod", _many_tags, "tags, more than 50"),
    ("tags-per-resource", "prod", _set("aws:iam/role:Role", "tags", {"aws:owner": "x"}), "reserved prefix aws:"),
    ("iam-policy-sizes", "prod", _set("aws:iam/role:Role", "assumeRolePolicy", json.dumps({"Sid": "x" * 2100})),
     "trust policy of"),
    ("iam-policy-sizes", "prod", _big_inline_policy, "more than 10,240"),
    ("iam-policy-sizes", "prod", _copies("aws:iam/rolePolicyAttachment:RolePolicyAttachment", "gpu1-instance", 11),
     "managed policies, more than 10"),
    ("kms-key-policy-size", "prod", _set("aws:kms/key:Key", "policy", json.dumps({"Sid": "x" * 33000})), "more than 32 KB"),
    ("encrypted-topic-publishers", "prod", _key_without_cloudwatch, "cloudwatch.amazonaws.com publishes to it"),
    ("private-dns-needs-vpc-dns", "prod", _set("aws:ec2/vpc:Vpc", "enableDnsHostnames", False),
     "lacks DNS resolution or DNS hostnames"),
    ("subnets-inside-their-vpc", "prod", _subnet_outside, "is outside"),
    ("subnets-inside-their-vpc", "prod", _subnets_overlap, "overlap"),
    ("subnets-inside-their-vpc", "prod", _set("aws:ec2/subnet:Subnet", "cidrBlock", "10.80.0.0/29"), "is not /16 to /28"),
    ("dynamodb-key-attributes", "prod", _unused_attribute, "defines ['owner'] but no key uses them"),
    ("dynamodb-key-attributes", "prod", _set("aws:dynamodb/table:Table", "hashKey", "jobId"), "keys use ['jobId'] without"),
]


@pytest.mark.parametrize(("rule_id", "stack", "change", "fragment"), BROKEN,
                         ids=[f"{b[0]}-{i}" for i, b in enumerate(BROKEN)])
def test_each_rule_fails_on_a_broken_copy(stack_renderings, rule_id, stack, change, fragment):
    findings = _findings(stack_renderings[stack], rule_id, change)
    assert any(fragment in f for f in findings), f"expected {fragment!r} in {findings}"


def test_every_rule_has_a_broken_copy():
    assert {b[0] for b in BROKEN} | {"lambda-package-size"} == {r.id for r in RULES}


def test_package_size_is_measured(stack_renderings, monkeypatch):
    # A 50 MB package cannot be built cheaply here: lower the limit instead, so the measurement shows.
    monkeypatch.setattr(service_rules, "LAMBDA_ZIP_BYTES", 1024)
    findings = rule_by_id("lambda-package-size").check(Stack(stack_renderings["dev"]))
    assert findings and all("more than 1024" in f for f in findings)
