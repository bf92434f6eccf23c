"""A fleet's instance refresh stops on its boot alarm (auto rollback on), and the alarm watches the series the scheduler
publishes (components/compute/boot_alarm.py, lambdas/scheduler/boot_health.py; the publishing itself is tested
against moto in tests/jobs/test_boot_metric.py)."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import botocore.session
import pytest
from pulumi_harness import COMPONENT_TAGS, committed_rendering, render_in_region

from components.compute import GpuSpotFleet, GpuSpotFleetArgs
from components.compute.boot_alarm import boot_alarm_name
from components.compute.fleet import fleet_group_name
from components.config import FleetConfig
from lambdas.jobs.fleets import parse_fleets
from lambdas.scheduler import boot_health

ASG = "aws:autoscaling/group:Group"
ALARM = "aws:cloudwatch/metricAlarm:MetricAlarm"
FUNCTION = "aws:lambda/function:Function"


ASG_MODEL = botocore.session.get_session().get_service_model("autoscaling")

def fleet_rendering(region: str = "us-west-2"):
    fleet = FleetConfig.model_validate({"maxInstances": 6})
    return render_in_region(lambda opts: {"asg": GpuSpotFleet("gpu1", GpuSpotFleetArgs(
        region=region, environment="test", fleet_name="gpu1", fleet=fleet, cluster_name="mlfleet-test",
        vpc_id="vpc-0abc1234", subnet_ids=["subnet-0aaa1111"], image_id="ami-0fedcba9876543210",
        root_volume_gib=250, tags=COMPONENT_TAGS), opts=opts).asg_name}, region=region)


def boot_alarms(rendering) -> list:
    return [a for a in rendering.of_type(ALARM) if a.inputs.get("metricName") == boot_health.METRIC]


def test_the_refresh_stops_on_the_fleet_s_boot_alarm_without_a_rollback_that_would_relaunch_the_new_image():
    rendering = fleet_rendering()
    (asg,) = rendering.of_type(ASG)
    (alarm,) = boot_alarms(rendering)
    preferences = asg.inputs["instanceRefresh"]["preferences"]
    # No auto rollback: the provider saves the new version before the refresh starts, so a rollback would
    # relaunch the new image (terraform-provider-aws#34189; the comment in components/compute/fleet.py).
    assert "autoRollback" not in preferences
    assert preferences["alarmSpecification"] == {"alarms": [alarm.inputs["name"]]}
    assert alarm.inputs["name"] == boot_alarm_name("test", "gpu1")
    # A numbered launch-template version: a new image shows in the preview and starts the refresh.
    version = asg.inputs["mixedInstancesPolicy"]["launchTemplate"]["launchTemplateSpecification"]["version"]
    assert version.isdigit()
    # The other preferences as before.
    assert preferences["skipMatching"] is True and preferences["scaleInProtectedInstances"] == "Refresh"


def test_the_boot_alarm_fires_on_one_machine_degraded_at_boot_and_never_on_missing_data():
    (alarm,) = boot_alarms(fleet_rendering())
    inputs = alarm.inputs
    assert inputs["namespace"] == boot_health.NAMESPACE and inputs["metricName"] == boot_health.METRIC
    assert inputs["dimensions"] == boot_health.dimensions("test", "us-west-2", "gpu1", fleet_group_name("test", "gpu1"))
    assert (inputs["comparisonOperator"], inputs["threshold"]) == ("GreaterThanOrEqualToThreshold", 1)
    assert inputs["evaluationPeriods"] == inputs["datapointsToAlarm"] == 1 and inputs["period"] in (60, 300)
    assert inputs["statistic"] == "Maximum" and inputs["treatMissingData"] == "notBreaching"


def test_the_boot_alarm_is_in_the_fleet_s_region():
    rendering = fleet_rendering("eu-west-1")
    (alarm,) = boot_alarms(rendering)
    (asg,) = rendering.of_type(ASG)
    assert alarm.provider == asg.provider and "eu-west-1" in alarm.provider


@pytest.mark.parametrize("stack", ["dev", "staging", "prod"])
def test_every_fleet_s_alarm_watches_the_series_the_scheduler_publishes_for_it(stack):
    """What the scheduler publishes for the FLEETS the program gives it, datum by datum, is what each fleet's
    alarm watches, in the fleet's region, and each group's refresh names its own fleet's alarm."""
    rendering = committed_rendering(stack)
    (scheduler,) = [f for f in rendering.of_type(FUNCTION) if f.inputs["handler"] == "lambdas.scheduler.handler.handler"]
    variables = scheduler.inputs["environment"]["variables"]
    fleets = parse_fleets(variables["FLEETS"])
    data = boot_health.metric_data(variables["ENVIRONMENT"], fleets, {}, datetime.now(timezone.utc))
    published = {json.dumps({d["Name"]: d["Value"] for d in datum["Dimensions"]}, sort_keys=True) for datum in data}
    alarms = boot_alarms(rendering)
    watched = {json.dumps(a.inputs["dimensions"], sort_keys=True) for a in alarms}
    assert len(fleets) == len(alarms) and published == watched
    for alarm in alarms:
        assert alarm.inputs["dimensions"][boot_health.REGION] in alarm.provider
    for group in rendering.of_type(ASG):
        fleet = next(f for f in fleets if f.asg_name == group.inputs["name"])
        assert group.inputs["instanceRefresh"]["preferences"]["alarmSpecification"] == {
            "alarms": [boot_alarm_name(variables["ENVIRONMENT"], fleet.fleet)]}
        # What StartInstanceRefresh accepts (botocore's autoscaling model: AlarmSpecification.Alarms, "up to 10
        # alarms", each name a string of 1 to 255 characters).
        alarms_shape = ASG_MODEL.shape_for("AlarmSpecification").members["Alarms"]
        names = group.inputs["instanceRefresh"]["preferences"]["alarmSpecification"]["alarms"]
        assert len(names) <= 10 and "up to 10 alarms" in alarms_shape.documentation
        assert all(alarms_shape.member.metadata["min"] <= len(n) <= alarms_shape.member.metadata["max"] for n in names)


@pytest.mark.parametrize("function", ["scheduler", "reaper", "job_events"])
def test_a_role_s_policy_states_each_grant_once(function):
    """Room for the scheduler's PutMetricData under IAM's 10,240 characters (tests/rules iam-policy-sizes, the
    longest names): a permission two modules declare, each with its reason, is one statement."""
    from components.functions.python_function import covers, declared_permissions

    declared = declared_permissions(function)
    assert not [(a, b) for i, a in enumerate(declared) for b in declared[i + 1:] if covers(a, b)]
    if function == "scheduler":
        assert any("cloudwatch:PutMetricData" in p.actions and p.condition == {
            "StringEquals": {"cloudwatch:namespace": boot_health.NAMESPACE}} for p in declared)


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_a_refresh_the_boot_alarm_stops_is_told_to_the_region_s_alert_topic(stack):
    """A refresh that fails says nothing by itself: the boot alarm tells its own region's alert topic (an alarm
    acts only on a topic in its region; tests/rules, alarm-actions-in-region, checks every alarm's)."""
    from pulumi_harness import _region_of

    rendering = committed_rendering(stack)
    alarms = boot_alarms(rendering)
    assert alarms
    for alarm in alarms:
        region = _region_of(alarm.provider)
        (action,) = alarm.inputs["alarmActions"]
        # The home region's fleets share the environment's topic; every other region has its own.
        topic = action.removeprefix(f"arn:aws:sns:{region}:123456789012:")
        assert topic in (f"mlfleet-{stack}-alerts", f"mlfleet-{stack}-alerts-{region}"), (alarm.name, action)
