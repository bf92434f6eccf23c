"""Every request the stacks would send passes botocore's service models (tests/rules/api_models.py).

Each check is also shown failing on a deliberately broken copy of a rendered resource.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Callable

import api_models
import pytest
from longest import ENVIRONMENT, every_region_priced, fleet_names, longest_config, longest_regions
from rule_stacks import RULE_STACKS
from pulumi_harness import Recorded, Rendering

from components.config import ConfigError, model, parse_stack_config


@pytest.mark.parametrize("stack", RULE_STACKS)
def test_every_request_of_a_stack_passes_the_models(renderings, stack):
    problems = api_models.check(renderings[stack])
    assert not problems, "\n".join(map(str, problems))


def test_every_request_passes_at_the_longest_names_and_largest_counts(longest_rendering):
    problems = api_models.check(longest_rendering)
    assert not problems, "\n".join(map(str, problems))


def test_the_longest_rendering_is_really_at_the_edge():
    assert len(ENVIRONMENT) == 18 and len(fleet_names(1)[0]) == 12
    assert {len(r) for r in longest_regions(model.MAX_REGIONS)} == {max(len(r) for r in longest_regions(1))}


def test_every_declared_type_has_a_mapping():
    declared = api_models.declared_types()
    assert declared, "found no resource declarations in components/"
    unmapped = declared - set(api_models.TRANSLATIONS) - set(api_models.UNMAPPED)
    assert not unmapped, f"add a translation to tests/rules/api_models.py for {sorted(unmapped)}"


def test_every_rendered_type_has_a_mapping(renderings, longest_rendering):
    rendered = {r.type for rendering in [*renderings.values(), longest_rendering] for r in rendering.resources
                if r.type.startswith(("aws:", "pulumi:providers:"))}
    assert rendered <= set(api_models.TRANSLATIONS) | set(api_models.UNMAPPED)


# --- the config refuses what AWS would refuse -------------------------------------------------------------

def _edge_config(**changes):
    counts = {"regions": model.MAX_REGIONS, "fleets": model.MAX_FLEET_REGIONS, "types_per_fleet": 5,
              "tags": model.MAX_COST_ALLOCATION_TAGS}
    counts.update(changes)
    return longest_config(**counts)


@pytest.fixture(scope="module")
def every_region(tmp_path_factory):
    with every_region_priced(tmp_path_factory.mktemp("catalog")):
        yield


def test_the_edge_itself_is_valid(every_region):
    stack, values = _edge_config()
    assert parse_stack_config(values, stack).environment == ENVIRONMENT


@pytest.mark.parametrize(("change", "message"), [
    ({"regions": model.MAX_REGIONS + 1, "fleets": model.MAX_REGIONS + 1}, "mlfleet:regions: 9 regions, at most 8"),
    ({"regions": 4, "fleets": model.MAX_FLEET_REGIONS + 1}, "mlfleet:fleets: 9 fleet-region pairs, at most 8"),
    ({"types_per_fleet": 6}, "mlfleet:fleets: 48 instance types over the fleet-region pairs, at most 40"),
    ({"tags": model.MAX_COST_ALLOCATION_TAGS + 1}, f"mlfleet:costAllocationTags: Dictionary should have at most {model.MAX_COST_ALLOCATION_TAGS} items"),
], ids=["regions", "fleet-region-pairs", "instance-types", "tags"])
def test_one_more_is_refused_with_the_key_and_the_limit(every_region, change, message):
    stack, values = _edge_config(**change)
    with pytest.raises(ConfigError) as refused:
        parse_stack_config(values, stack)
    assert message in str(refused.value)


def test_a_longer_environment_name_is_refused(every_region):
    _, values = _edge_config()
    with pytest.raises(ConfigError, match="stack name 'longest-envxxxxxxxx' must be 2-18 characters"):
        parse_stack_config(values, ENVIRONMENT + "x")


def test_a_longer_fleet_name_is_refused(every_region):
    stack, values = _edge_config()
    fleets = json.loads(values["mlfleet:fleets"])
    name, fleet = next(iter(fleets.items()))
    values["mlfleet:fleets"] = json.dumps({name + "x": fleet})
    with pytest.raises(ConfigError, match=r"mlfleet:fleets\.gpuaaaaaaaaax"):
        parse_stack_config(values, stack)


# --- each check fails on a broken copy ------------------------------------------------------------------

def _broken(rendering: Rendering, select: Callable[[Recorded], bool], change: Callable[[Recorded], None]) -> list[str]:
    """The problems of the selected resources after `change` (on copies; the fixture stays intact)."""
    resources = [copy.deepcopy(r) if select(r) else r for r in rendering.resources]
    chosen = [r for r in resources if select(r)]
    assert chosen, "the selection matches no resource"
    for recorded in chosen:
        change(recorded)
    broken = dataclasses.replace(rendering, resources=resources)
    return [str(p) for p in api_models.check(broken, only={r.name for r in chosen})]


def _of_type(type_token: str, first: bool = True):
    seen = []

    def select(r: Recorded) -> bool:
        if r.type != type_token or (first and seen and seen[0] != r.name):
            return False
        seen.append(r.name)
        return True
    return select


def _set(key: str, value):
    return lambda r: r.inputs.__setitem__(key, value)


def _assert_one_problem(problems: list[str], *fragments: str):
    assert problems, "the broken copy passed"
    assert any(all(f in p for f in fragments) for p in problems), "\n".join(problems)


@pytest.fixture(scope="module")
def prod(stack_renderings):
    return stack_renderings["prod"]


def test_an_over_long_queue_name_fails(prod):
    _assert_one_problem(_broken(prod, _of_type("aws:sqs/queue:Queue"), _set("name", "q" * 81)),
                        "sqs:CreateQueue QueueName", "A queue name can have up to 80 characters")


def test_an_over_long_generated_role_name_fails(prod):
    def rename(r):
        r.name += "-" + "x" * 40
    problems = _broken(prod, _of_type("aws:iam/role:Role"), rename)
    _assert_one_problem(problems, "iam:CreateRole RoleName", "longer than the maximum 64")
    _assert_one_problem(problems, "autonamed 'name'", "pulumi-aws generates at most 64")


def test_an_over_long_event_target_id_fails(prod):
    def rename(r):
        r.name += "-" + "x" * 40
    _assert_one_problem(_broken(prod, _of_type("aws:cloudwatch/eventTarget:EventTarget"), rename),
                        "events:PutTargets Targets[0].Id", "longer than the maximum 64")


def test_a_wrong_model_enum_fails(prod):
    def change(r):
        r.inputs["metadataOptions"] = {**r.inputs["metadataOptions"], "httpTokens": "sometimes"}
    _assert_one_problem(_broken(prod, _of_type("aws:ec2/launchTemplate:LaunchTemplate"), change),
                        "MetadataOptions.HttpTokens", "'sometimes' is not one of ['optional', 'required']")


def test_a_wrong_documented_enum_fails(prod):
    def change(r):
        r.inputs["mixedInstancesPolicy"] = copy.deepcopy(r.inputs["mixedInstancesPolicy"])
        r.inputs["mixedInstancesPolicy"]["instancesDistribution"]["spotAllocationStrategy"] = "cheapest"
    _assert_one_problem(_broken(prod, _of_type("aws:autoscaling/group:Group"), change),
                        "SpotAllocationStrategy", "'cheapest' is not one of")


def test_an_instance_type_ec2_does_not_know_fails(prod):
    def change(r):
        r.inputs["mixedInstancesPolicy"] = copy.deepcopy(r.inputs["mixedInstancesPolicy"])
        r.inputs["mixedInstancesPolicy"]["launchTemplate"]["overrides"][0]["instanceType"] = "g9.huge"
    _assert_one_problem(_broken(prod, _of_type("aws:autoscaling/group:Group"), change),
                        "Overrides[0].InstanceType", "'g9.huge' is not one of the")


def _alarm_with_period(resource) -> bool:
    return resource.type == "aws:cloudwatch/metricAlarm:MetricAlarm" and "period" in resource.inputs


@pytest.mark.parametrize(("type_token", "key", "value", "fragments"), [
    ("aws:lambda/function:Function", "memorySize", 64.0, ("lambda:CreateFunction MemorySize", "64 is below the minimum 128")),
    ("aws:lambda/function:Function", "timeout", 0.0, ("lambda:CreateFunction Timeout", "0 is below the minimum 1")),
    ("aws:kms/key:Key", "deletionWindowInDays", 3.0, ("kms:ScheduleKeyDeletion PendingWindowInDays", "3 is outside 7..30")),
    ("aws:cloudwatch/logGroup:LogGroup", "retentionInDays", 45.0, ("logs:PutRetentionPolicy", "45 is not one of")),
    ("aws:sqs/queue:Queue", "messageRetentionSeconds", 30.0, ("Attributes{MessageRetentionPeriod}", "30 is outside 60..1209600")),
    ("aws:cloudwatch/metricAlarm:MetricAlarm", "period", 90.0, ("cloudwatch:PutMetricAlarm Period", "10, 20, 30 or a multiple of 60")),
], ids=["lambda-memory", "lambda-timeout", "kms-window", "log-retention", "queue-retention", "alarm-period"])
def test_an_out_of_range_number_fails(prod, type_token, key, value, fragments):
    select = _alarm_with_period if type_token == "aws:cloudwatch/metricAlarm:MetricAlarm" else _of_type(type_token)
    _assert_one_problem(_broken(prod, select, _set(key, value)), *fragments)


def test_a_string_outside_its_pattern_fails(prod):
    _assert_one_problem(_broken(prod, _of_type("aws:iam/role:Role"), _set("description", "arrow \u2192 outside Latin-1")),
                        "iam:CreateRole Description", "does not match the pattern")
    _assert_one_problem(_broken(prod, _of_type("aws:ecs/taskDefinition:TaskDefinition"), _set("family", "mlfleet prod")),
                        "ecs:RegisterTaskDefinition family", "does not match")


def test_too_many_list_items_fail(prod):
    _assert_one_problem(_broken(prod, _of_type("aws:lambda/function:Function"), _set("architectures", ["arm64", "x86_64"])),
                        "Architectures", "has 2 items, more than the maximum 1")
    _assert_one_problem(_broken(prod, _alarm_with_period, _set("alarmActions", [f"arn:aws:sns:us-east-1:123456789012:t{i}" for i in range(6)])),
                        "AlarmActions", "has 6 items, more than the maximum 5")


def test_a_misspelt_container_key_fails(prod):
    def change(r):
        definitions = json.loads(r.inputs["containerDefinitions"])
        definitions[0]["stopTimeOut"] = definitions[0].pop("stopTimeout")
        r.inputs["containerDefinitions"] = json.dumps(definitions)
    _assert_one_problem(_broken(prod, _of_type("aws:ecs/taskDefinition:TaskDefinition"), change),
                        "containerDefinitions[0].stopTimeOut", "is not a member of ContainerDefinition")


def test_a_missing_required_member_fails(prod):
    _assert_one_problem(_broken(prod, _of_type("aws:iam/role:Role"), lambda r: r.inputs.__setitem__("assumeRolePolicy", None)),
                        "AssumeRolePolicyDocument", "is required by CreateRoleRequest")


def test_a_value_of_the_wrong_type_fails(prod):
    def change(r):
        r.inputs["blockDeviceMappings"] = copy.deepcopy(r.inputs["blockDeviceMappings"])
        r.inputs["blockDeviceMappings"][0]["ebs"]["encrypted"] = "yes"
    _assert_one_problem(_broken(prod, _of_type("aws:ec2/launchTemplate:LaunchTemplate"), change),
                        "Ebs.Encrypted", "must be a boolean, got 'yes'")


def test_an_input_without_an_api_member_fails(prod):
    _assert_one_problem(_broken(prod, _of_type("aws:sqs/queue:Queue"), _set("fifoQueue", True)),
                        "input 'fifoQueue'", "not mapped to any API member")


def test_a_type_without_a_mapping_fails(prod):
    def retype(r):
        r.type = "aws:example/widget:Widget"
    _assert_one_problem(_broken(prod, _of_type("aws:sqs/queue:Queue"), retype), "no API mapping")


def test_values_aws_assigns_are_exempt_but_the_same_text_chosen_by_us_is_not(prod):
    function = next(r for r in prod.resources if r.type == "aws:lambda/function:Function")
    assert function.inputs["role"] in api_models.references(prod)  # the mock's role ARN, not AWS's format
    assert not api_models.check(prod, only={function.name})

    def chosen(r):  # the same text as a value mlfleet wrote itself
        r.inputs["role"] = r.inputs["role"] + "-chosen"
    _assert_one_problem(_broken(prod, lambda r: r.name == function.name, chosen), "lambda:CreateFunction Role",
                        "does not match the pattern")


# --- the rules' sources ---------------------------------------------------------------------------------

@pytest.mark.parametrize("rule", api_models.DOCUMENTED, ids=lambda r: f"{r.service}.{r.operation}.{r.path}")
def test_each_documented_limit_is_stated_by_the_installed_model(rule):
    text = api_models.documentation(rule.service, rule.operation, rule.path.removesuffix("[]"))
    assert rule.phrase in text, f"the model no longer says {rule.phrase!r}: {text[:300]}"
    for value in rule.enum or ():
        assert str(value) in text, f"{value!r} is not in the documentation of {rule.path}"
    if rule.pattern:
        api_models.compiled(rule.pattern)


def _patterns(shape, seen: set) -> list[str]:
    if shape.name in seen:
        return []
    seen.add(shape.name)
    found = [shape.metadata["pattern"]] if "pattern" in shape.metadata else []
    children = {"structure": lambda: shape.members.values(), "list": lambda: [shape.member],
                "map": lambda: [shape.key, shape.value]}.get(shape.type_name, list)()
    for child in children:
        found += _patterns(child, seen)
    return found


def test_every_pattern_of_the_operations_used_compiles(prod):
    operations = {(c.service, c.operation) for c in api_models.translate(prod).calls}
    patterns = {p for service, operation in operations for p in _patterns(api_models.input_shape(service, operation), set())}
    assert patterns
    for pattern in patterns:
        api_models.compiled(pattern)


def test_the_checkpoint_buckets_break_where_s3_would_refuse(prod):
    """The S3 translations (the checkpoint buckets) fail on what S3's model refuses."""
    _assert_one_problem(_broken(prod, _of_type("aws:s3/bucket:Bucket"), _set("bucketNamespace", "regional")),
                        "s3:CreateBucket BucketNamespace", "'regional' is not one of ['account-regional', 'global']")
    _assert_one_problem(_broken(prod, _of_type("aws:s3/bucketOwnershipControls:BucketOwnershipControls"),
                                _set("rule", {"objectOwnership": "Owner"})),
                        "OwnershipControls.Rules[0].ObjectOwnership", "'Owner' is not one of")
    _assert_one_problem(_broken(prod, _of_type(
        "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration"),
        _set("rules", [{"applyServerSideEncryptionByDefault": {"sseAlgorithm": "AES128"}}])),
        "Rules[0].ApplyServerSideEncryptionByDefault.SSEAlgorithm", "'AES128' is not one of")

    def lifecycle(r):
        (rule,) = r.inputs["rules"]
        r.inputs["rules"] = [{**rule, "status": "On", "filter": {"prefixes": "jobs/"}}]
    problems = _broken(prod, _of_type("aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration"), lifecycle)
    _assert_one_problem(problems, "LifecycleConfiguration.Rules[0].Status", "'On' is not one of")
    _assert_one_problem(problems, "Rules[0].Filter.Prefixes", "is not a member of LifecycleRuleFilter")
