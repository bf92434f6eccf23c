"""Each rule with compliant and non-compliant resources (plain data, camelCase as Pulumi gives it)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

import rules
from rules import UNKNOWN, Resource, UnknownValue

TAGS = {"mlfleet:environment": "dev", "mlfleet:managed-by": "pulumi"}


def res(type_token, logical_name="r", region="us-east-1", default_tags=None, **props):
    return Resource(type=type_token, name=logical_name, props=props, region=region, default_tags=default_tags or {})


def launch_template(**overrides):
    props = {
        "metadataOptions": {"httpTokens": "required", "httpEndpoint": "enabled"},
        "blockDeviceMappings": [{"deviceName": "/dev/xvda", "ebs": {"encrypted": "true", "volumeType": "gp3"}}],
        "networkInterfaces": [{"associatePublicIpAddress": "false", "deviceIndex": 0}],
        "tags": TAGS,
    }
    props.update(overrides)
    return res(rules.LAUNCH_TEMPLATE, **props)


def asg(name="mlfleet-dev-gpu1", region="us-east-1", environment="dev", max_size=4, base=0, above=0, **overrides):
    props = {
        "name": name,
        "maxSize": max_size,
        "minSize": 0,
        "mixedInstancesPolicy": {"instancesDistribution": {
            "onDemandBaseCapacity": base, "onDemandPercentageAboveBaseCapacity": above}},
        "tags": [{"key": "mlfleet:environment", "value": environment, "propagateAtLaunch": True},
                 {"key": "mlfleet:managed-by", "value": "pulumi", "propagateAtLaunch": True}],
    }
    props.update(overrides)
    return res(rules.ASG, logical_name=f"{name}-asg", region=region, **props)


# --- resource rules ----------------------------------------------------------------------------------

@pytest.mark.parametrize("resource, violations", [
    (launch_template(), 0),
    (launch_template(metadataOptions={"httpTokens": "optional"}), 1),
    (launch_template(metadataOptions={}), 1),
    (res(rules.LAUNCH_TEMPLATE), 1),  # no metadataOptions: AWS defaults to IMDSv1 + v2
    (res(rules.INSTANCE, metadataOptions={"httpTokens": "required"}), 0),
    (res(rules.INSTANCE), 1),
    (res(rules.SUBNET), 0),  # not a machine
])
def test_imdsv2_required(resource, violations):
    assert len(rules.imdsv2_required(resource)) == violations


@pytest.mark.parametrize("resource, violations", [
    (launch_template(), 0),
    (launch_template(blockDeviceMappings=[{"deviceName": "/dev/xvda", "ebs": {"encrypted": True}}]), 0),
    (launch_template(blockDeviceMappings=[{"deviceName": "/dev/xvda", "ebs": {"encrypted": "false"}}]), 1),
    (launch_template(blockDeviceMappings=[{"deviceName": "/dev/xvda", "ebs": {"volumeSize": 200}}]), 1),
    (launch_template(blockDeviceMappings=[]), 1),  # the AMI's snapshot decides: not declared encrypted
    (launch_template(blockDeviceMappings=[{"deviceName": "/dev/sdb", "noDevice": ""}]), 1),
    (launch_template(blockDeviceMappings=[{"deviceName": "/dev/xvda", "ebs": {"encrypted": "true"}},
                                          {"deviceName": "/dev/sdb", "ebs": {"encrypted": "false"}}]), 1),
    (res(rules.INSTANCE, rootBlockDevice={"encrypted": True}), 0),
    (res(rules.INSTANCE, rootBlockDevice={"encrypted": True}, ebsBlockDevices=[{"encrypted": False}]), 1),
    (res(rules.INSTANCE), 1),
])
def test_volumes_encrypted(resource, violations):
    assert len(rules.volumes_encrypted(resource)) == violations


@pytest.mark.parametrize("resource, violations", [
    (launch_template(), 0),
    (launch_template(networkInterfaces=[]), 0),
    (launch_template(networkInterfaces=[{"associatePublicIpAddress": "true"}]), 1),
    (launch_template(networkInterfaces=[{"associatePublicIpAddress": True}]), 1),
    (res(rules.SUBNET, mapPublicIpOnLaunch=False), 0),
    (res(rules.SUBNET), 0),  # AWS default for a new subnet is false
    (res(rules.SUBNET, mapPublicIpOnLaunch=True), 1),
    (res(rules.INSTANCE, associatePublicIpAddress=True), 1),
    (res(rules.INSTANCE, associatePublicIpAddress=False), 0),
])
def test_no_public_ips(resource, violations):
    assert len(rules.no_public_ips(resource)) == violations


@pytest.mark.parametrize("rule, resource, violations", [
    (rules.topics_encrypted, res(rules.SNS_TOPIC, kmsMasterKeyId="arn:aws:kms:us-east-1:1:key/k"), 0),
    (rules.topics_encrypted, res(rules.SNS_TOPIC, kmsMasterKeyId=UNKNOWN), 0),  # key created in this update
    (rules.topics_encrypted, res(rules.SNS_TOPIC), 1),
    (rules.topics_encrypted, res(rules.SNS_TOPIC, kmsMasterKeyId=""), 1),
    (rules.queues_encrypted, res(rules.SQS_QUEUE, kmsMasterKeyId="alias/aws/sqs"), 0),
    (rules.queues_encrypted, res(rules.SQS_QUEUE, sqsManagedSseEnabled=True), 0),
    (rules.queues_encrypted, res(rules.SQS_QUEUE, sqsManagedSseEnabled=False), 1),
    (rules.queues_encrypted, res(rules.SQS_QUEUE), 1),
    (rules.tables_encrypted_with_kms, res(rules.DYNAMODB_TABLE, serverSideEncryption={"enabled": True}), 0),
    (rules.tables_encrypted_with_kms,
     res(rules.DYNAMODB_TABLE, serverSideEncryption={"enabled": True, "kmsKeyArn": "arn:aws:kms:us-east-1:1:key/k"}), 0),
    (rules.tables_encrypted_with_kms, res(rules.DYNAMODB_TABLE, serverSideEncryption={"enabled": False}), 1),
    (rules.tables_encrypted_with_kms, res(rules.DYNAMODB_TABLE), 1),  # AWS-owned key
])
def test_encryption_at_rest(rule, resource, violations):
    assert len(rule(resource)) == violations


@pytest.mark.parametrize("max_size, ceiling, violations", [
    (4, 64, 0), (64, 64, 0), (65, 64, 1), (0, 64, 1), (-1, 64, 1), (None, 64, 1), (24, 10, 1), (4.0, 4, 0),
])
def test_fleet_capped(max_size, ceiling, violations):
    assert len(rules.fleet_capped(asg(max_size=max_size), ceiling=ceiling)) == violations


def test_fleet_cap_unknown_during_preview_is_reported_as_unknown_not_as_a_violation():
    with pytest.raises(UnknownValue, match="maxSize"):
        rules.fleet_capped(asg(max_size=UNKNOWN))


def fleet_group(fleet_tag="gpu4", name="mlfleet-prod-gpu4", max_size=12):
    """A prod fleet group as the program declares it: tagged mlfleet:fleet (unless fleet_tag is None), named."""
    tags = asg(environment="prod").props["tags"]
    if fleet_tag is not None:
        tags = [*tags, {"key": "mlfleet:fleet", "value": fleet_tag, "propagateAtLaunch": True}]
    return asg(name=name, environment="prod", max_size=max_size, tags=tags)


PROD_CAPS = {"gpu1": 24, "gpu4": 6, "gpu8": 2}


@pytest.mark.parametrize("group, violations", [
    (fleet_group(), 1),  # above gpu4's 6, below gpu1's 24 and the ceiling
    (fleet_group(max_size=6), 0),
    (fleet_group(fleet_tag=None), 1),  # the tag lost: the name still says gpu4
    (fleet_group(name="custom-name"), 1),  # renamed: the tag still says gpu4
    (fleet_group(name=None), 1),  # no name (Pulumi would generate one): the tag
    (fleet_group(fleet_tag="gpu1", name="mlfleet-prod-gpu4"), 1),  # tag and name disagree: the lower cap
    (fleet_group(fleet_tag="gpu1", name="mlfleet-prod-gpu1"), 0),
    (fleet_group(fleet_tag="gpu1", name="mlfleet-my-env-2-gpu1"), 0),  # hyphens in the environment
    (fleet_group(fleet_tag=None, name="custom-name", max_size=24), 0),  # no listed fleet: the ceiling
    (fleet_group(fleet_tag="gpu9", name="mlfleet-prod-gpu9", max_size=25), 1),
])
def test_each_fleet_group_is_held_to_its_own_fleets_cap(group, violations):
    assert len(rules.fleet_capped(group, ceiling=24, fleet_ceilings=PROD_CAPS)) == violations


def test_a_group_above_its_fleets_cap_names_the_fleet_and_where_the_cap_comes_from():
    (message,) = rules.fleet_capped(fleet_group(), ceiling=24, fleet_ceilings=PROD_CAPS)
    assert message.startswith("maxSize is 12, above the cap of fleet gpu4, 6 (fleetCeilings: its maxInstances in "
                               "stacks/Pulumi.<env>.yaml")


def test_a_fleet_unknown_during_preview_is_reported_as_unknown_only_when_fleets_are_listed():
    group = fleet_group(fleet_tag=UNKNOWN)
    with pytest.raises(UnknownValue, match="mlfleet:fleet"):
        rules.fleet_capped(group, ceiling=24, fleet_ceilings=PROD_CAPS)
    assert rules.fleet_capped(group, ceiling=24) == []


@given(st.integers(min_value=-10, max_value=200), st.integers(min_value=1, max_value=100))
def test_fleet_cap_holds_exactly_within_one_to_ceiling(max_size, ceiling):
    assert (rules.fleet_capped(asg(max_size=max_size), ceiling=ceiling) == []) == (1 <= max_size <= ceiling)


@pytest.mark.parametrize("resource, violations", [
    (res(rules.SNS_TOPIC, tags=TAGS), 0),
    (res(rules.SNS_TOPIC, default_tags=TAGS), 0),  # provider default tags, as the real provider applies them
    (res(rules.SNS_TOPIC, tagsAll=TAGS), 0),  # what a real preview shows once default tags are merged
    (res(rules.SNS_TOPIC, tags={"mlfleet:environment": "dev"}), 1),
    (res(rules.SNS_TOPIC, tags={"mlfleet:environment": "dev", "mlfleet:managed-by": "terraform"}), 1),
    (res(rules.SNS_TOPIC), 2),  # taggable type without any tag
    (res("aws:iam/rolePolicyAttachment:RolePolicyAttachment"), 0),  # not taggable
    (res("aws:some/new:Thing", tags={}), 2),  # unlisted, but it has tags: checked
    (asg(), 0),
    (asg(tags=[]), 2),
    # Default tags do not reach ASGs: the ASG's own tag list must carry them.
    (Resource(rules.ASG, "a", {"name": "a", "tags": []}, "us-east-1", TAGS), 2),
])
def test_required_tags(resource, violations):
    assert len(rules.required_tags(resource)) == violations


@pytest.mark.parametrize("environment, base, above, violations", [
    ("dev", 0, 0, 0), ("dev", 1, 0, 1), ("dev", 0, 10, 1), ("prod", 1, 10, 0), ("staging", 0, 50, 0),
])
def test_dev_fleets_run_on_spot(environment, base, above, violations):
    assert len(rules.dev_without_on_demand(asg(environment=environment, base=base, above=above))) == violations


def test_provider_default_tags_accepts_json_text_and_objects():
    assert rules.provider_default_tags({"defaultTags": '{"tags": {"a": "b"}}'}) == {"a": "b"}
    assert rules.provider_default_tags({"defaultTags": {"tags": {"a": "b"}}}) == {"a": "b"}
    assert rules.provider_default_tags({"region": "us-east-1"}) == {}


# --- stack rules -------------------------------------------------------------------------------------

def idle_alarm(asg_name, region="us-east-1", in_queries=True):
    metric = {"namespace": "AWS/EC2", "metricName": "CPUUtilization",
              "dimensions": {"AutoScalingGroupName": asg_name}}
    props = ({"metricQueries": [{"id": "cpu", "metric": metric, "returnData": True}]} if in_queries
             else {"dimensions": {"AutoScalingGroupName": asg_name}})
    return res(rules.METRIC_ALARM, logical_name=f"{asg_name}-idle", region=region, tags=TAGS, **props)


def reaper(environment="dev", region="us-east-1"):
    return res(rules.LAMBDA_FUNCTION, logical_name=f"reaper-{region}", region=region, name=f"mlfleet-{environment}-reaper")


@pytest.mark.parametrize("resources, uncovered", [
    ([asg(), idle_alarm("mlfleet-dev-gpu1")], 0),
    ([asg(), idle_alarm("mlfleet-dev-gpu1", in_queries=False)], 0),
    ([asg()], 1),
    ([asg(), idle_alarm("mlfleet-dev-gpu1", region="us-west-2")], 1),  # alarms see their own region only
    ([asg(), idle_alarm("mlfleet-dev-gpu10")], 1),  # a different fleet's name is not a match
    ([asg(), asg(name="mlfleet-dev-gpu4"), idle_alarm("mlfleet-dev-gpu1")], 1),
    ([asg(), res(rules.METRIC_ALARM, metricQueries=[{"id": "e", "expression":
        "SEARCH('{AWS/EC2,AutoScalingGroupName} AutoScalingGroupName=\"mlfleet-dev-gpu1\"', 'Average', 300)"}])], 0),
    ([idle_alarm("mlfleet-dev-gpu1")], 0),  # no fleet, nothing to cover
])
def test_fleets_have_idle_alarms(resources, uncovered):
    assert len(rules.fleets_have_idle_alarms(resources)) == uncovered


@pytest.mark.parametrize("resources, unreaped", [
    ([asg(), reaper()], 0),
    ([asg()], 1),
    ([asg(), reaper(region="us-west-2")], 1),
    ([asg(), reaper(environment="prod")], 1),
    ([asg(), asg(name="mlfleet-dev-gpu1w", region="us-west-2"), reaper()], 1),
    ([asg(tags=[]), reaper()], 1),  # no environment tag: the reaper's name cannot be known
])
def test_fleets_have_reapers(resources, unreaped):
    assert len(rules.fleets_have_reapers(resources)) == unreaped


def notification(kind, threshold, threshold_type="PERCENTAGE", subscribers=("ml-infra@example.com",)):
    return {"notificationType": kind, "threshold": threshold, "thresholdType": threshold_type,
            "comparisonOperator": "GREATER_THAN", "subscriberEmailAddresses": list(subscribers)}


QUARTERS = [notification("ACTUAL", p) for p in (25, 50, 75, 100)]


def budget(notifications):
    return res(rules.BUDGET, logical_name="budget", tags=TAGS, notifications=notifications, budgetType="COST")


@pytest.mark.parametrize("resources, violations", [
    ([budget([*QUARTERS, notification("FORECASTED", 100)])], 0),
    ([budget([*QUARTERS, notification("ACTUAL", 90), notification("FORECASTED", 80)])], 0),
    ([], 1),
    ([budget(QUARTERS)], 1),  # no forecast alert
    ([budget([*QUARTERS[:3], notification("FORECASTED", 100)])], 1),  # no 100% alert
    ([budget([*QUARTERS[:3], notification("ACTUAL", 100, "ABSOLUTE_VALUE"), notification("FORECASTED", 100)])], 1),
    ([budget([*QUARTERS[:3], notification("ACTUAL", 100, subscribers=()), notification("FORECASTED", 100)])], 1),
    ([budget([*QUARTERS, notification("FORECASTED", 100, subscribers=())])], 1),
    ([budget(QUARTERS), budget([*QUARTERS, notification("FORECASTED", 100)])], 0),  # one complete budget is enough
])
def test_environment_has_budget(resources, violations):
    assert len(rules.environment_has_budget(resources)) == violations


def test_budget_percents_are_configurable():
    tenths = [notification("ACTUAL", p) for p in (10, 20, 30)] + [notification("FORECASTED", 100)]
    assert rules.environment_has_budget([budget(tenths)], actual_percents=(10, 20, 30)) == []
    assert len(rules.environment_has_budget([budget(tenths)])) == 1


@given(st.dictionaries(st.from_regex(r"[a-z][a-z0-9]{0,11}", fullmatch=True), st.integers(1, 1000), min_size=1),
       st.data())
def test_a_fleet_group_passes_exactly_up_to_its_own_fleets_cap(caps, data):
    fleet = data.draw(st.sampled_from(sorted(caps)))
    max_size = data.draw(st.integers(1, 1001))
    group = fleet_group(fleet_tag=fleet, name=f"mlfleet-prod-{fleet}", max_size=max_size)
    assert (rules.fleet_capped(group, ceiling=max(caps.values()), fleet_ceilings=caps) == []) == (max_size <= caps[fleet])
