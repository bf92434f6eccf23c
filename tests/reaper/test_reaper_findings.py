"""The reaper's findings of issue 13, each against moto with the run that failed before the fix.

The reaper runs in a fleet region (us-west-2) while the job ledger, which holds the placement lease, is
in the home region (us-east-1), as deployed. Where moto differs from AWS: tests/reaper/test_reaper_moto.py
and tests/removal/world.py.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone

import boto3
import pytest
from botocore.exceptions import ClientError
from removal.world import inject, on_call, throttle
from reaper.test_reaper_moto import ASG, HOME, SETTINGS, TABLE, build_world, put_utilisation, start_task_on, summaries

from lambdas.common import lease
from lambdas.common.aws import reset_clients
from lambdas.reaper.handler import Settings, run
from lambdas.removal import execute

FLEET = "us-west-2"
REFUSAL = ("Currently, desiredSize equals minSize (2). Terminating instance without replacement will violate group's "
           "min size constraint. Either set shouldDecrementDesiredCapacity flag to false or lower group's min size.")


@pytest.fixture
def fleet_region(fleet_aws, monkeypatch):
    monkeypatch.setenv("AWS_DEFAULT_REGION", FLEET)  # the function's own region, as Lambda sets it
    reset_clients()  # clients made for the default region belong to the region the test sets
    yield
    reset_clients()


def idle_world(min_size: int = 0, fleet_size: int = 3, standalone: int = 2) -> dict:
    """fleet[0] idle, the rest busy on CPU; every standalone machine idle. Returns the settings and the
    times of a first run (marks) and a second one past the grace period (acts)."""
    world = build_world(fleet_size=fleet_size, standalone=standalone, min_size=min_size, region=FLEET)
    now = datetime.now(timezone.utc) + timedelta(hours=3)
    later = now + timedelta(minutes=35)
    for at in (now, later):
        for n, instance_id in enumerate(world["fleet"]):
            put_utilisation(instance_id, at, cpu=2 if n == 0 else 55, gpu=0, region=FLEET)
        for instance_id in world["standalone"]:
            put_utilisation(instance_id, at, cpu=1, gpu=1, asg=None, region=FLEET)
    settings = Settings(**{**SETTINGS.__dict__, "alert_topic_arn": world["topic"]})
    return {**world, "settings": settings, "now": now, "later": later, "idle": world["fleet"][0]}


def group() -> dict:
    return boto3.client("autoscaling", FLEET).describe_auto_scaling_groups(AutoScalingGroupNames=[ASG])[
        "AutoScalingGroups"][0]


def container_status(instance_id: str) -> str:
    ecs = boto3.client("ecs", FLEET)
    arns = ecs.list_container_instances(cluster=SETTINGS.cluster_name)["containerInstanceArns"]
    described = ecs.describe_container_instances(cluster=SETTINGS.cluster_name, containerInstances=arns)
    return {ci["ec2InstanceId"]: ci["status"] for ci in described["containerInstances"]}[instance_id]


def state_of(instance_id: str) -> str:
    return boto3.client("ec2", FLEET).describe_instances(InstanceIds=[instance_id])["Reservations"][0][
        "Instances"][0]["State"]["Name"]


def test_group_at_its_minimum_is_never_drained_and_the_run_goes_on(fleet_region):
    """Before: the reaper drained the idle machine of a group at its minimum; AWS refused the terminate
    (moto does not), the survivor stayed DRAINING, and the run raised before stopping the standalone
    machines or notifying. Now validation drops it before any write."""
    w = idle_world(min_size=3)
    run(w["settings"], w["now"])
    result = run(w["settings"], w["later"])
    assert group()["DesiredCapacity"] == 3 and container_status(w["idle"]) == "ACTIVE"
    assert all(state_of(i) in ("stopping", "stopped") for i in w["standalone"])
    assert result["decisions"]["reap-fleet"] == [w["idle"]]
    assert "group at its minimum" in result["not_removed"][w["idle"]]
    assert any("group at its minimum" in summary for summary in summaries(w, FLEET))


def test_a_terminate_refused_by_aws_re_activates_the_survivor_and_the_run_goes_on(fleet_region):
    """moto does not refuse a terminate at the minimum; AWS does. Injected: the group reaches its
    minimum between the validation and the terminate (another removal, a raised minimum)."""
    w = idle_world(min_size=0)
    run(w["settings"], w["now"])
    inject("autoscaling", "TerminateInstanceInAutoScalingGroup",
           lambda op: ClientError({"Error": {"Code": "ValidationError", "Message": REFUSAL}}, op), region=FLEET)
    result = run(w["settings"], w["later"])
    assert container_status(w["idle"]) == "ACTIVE", "the survivor is not left DRAINING"
    assert result["terminated"] == [] and "desiredSize equals minSize" in result["kept"][w["idle"]]
    assert "mlfleet:removing" not in {t["Key"] for t in boto3.client("ec2", FLEET).describe_instances(
        InstanceIds=[w["idle"]])["Reservations"][0]["Instances"][0]["Tags"]}
    assert all(state_of(i) in ("stopping", "stopped") for i in w["standalone"])
    assert any("Kept after the drain" in summary for summary in summaries(w, FLEET))


def test_race_a_task_placed_between_the_read_and_the_drain_is_not_killed(fleet_region):
    """Before: the reaper read the machine idle, a job started on it, the reaper drained and terminated
    it. Now it re-checks after draining, under the placement lease, and re-activates it."""
    w = idle_world()
    run(w["settings"], w["now"])
    on_call("ecs", "UpdateContainerInstancesState", lambda params: start_task_on(w["idle"], region=FLEET),
            region=FLEET)
    result = run(w["settings"], w["later"])
    assert w["idle"] in {i["InstanceId"] for i in group()["Instances"]}, "the machine with a task was terminated"
    assert container_status(w["idle"]) == "ACTIVE"
    assert result["terminated"] == [] and "gained work" in result["kept"][w["idle"]]


def test_one_machine_s_failure_never_stops_the_others_the_stops_or_the_summary(fleet_region):
    w = idle_world()
    first, second = w["standalone"]
    inject("ec2", "CreateTags", throttle, region=FLEET, times=2, when=lambda p: p.get("Resources") != [first])
    run(w["settings"], w["now"])  # marking: the batch and `second` alone fail; `first` is marked
    run(w["settings"], w["now"] + timedelta(minutes=1))  # the mark missed is written now
    inject("ec2", "StopInstances", throttle, region=FLEET, times=2, when=lambda p: p.get("InstanceIds") != [second])
    result = run(w["settings"], w["later"])
    assert state_of(second) in ("stopping", "stopped") and state_of(first) == "running"
    assert result["terminated"] == [w["idle"]]
    assert "ThrottlingException" in result["failed"][first]
    assert any("Failed (retried next run)" in summary for summary in summaries(w, FLEET))


def test_a_run_that_cannot_take_the_lease_leaves_its_removals_to_the_next_run(fleet_region):
    w = idle_world()
    run(w["settings"], w["now"])
    dynamodb = boto3.client("dynamodb", HOME)
    held = lease.acquire(dynamodb, TABLE, "scheduler:placing", now=time.time(), run_seconds=60)
    result = run(w["settings"], w["later"])
    assert container_status(w["idle"]) == "ACTIVE" and group()["DesiredCapacity"] == 3
    assert "placement lease held by scheduler:placing" in result["not_removed"][w["idle"]]
    assert all(state_of(i) in ("stopping", "stopped") for i in w["standalone"])
    lease.release(dynamodb, TABLE, held.lease)
    assert run(w["settings"], w["later"])["terminated"] == [w["idle"]]  # the next run, lease free


def test_the_reaper_releases_the_lease_it_took(fleet_region):
    w = idle_world()
    run(w["settings"], w["now"])
    run(w["settings"], w["later"])
    item = boto3.client("dynamodb", HOME).get_item(TableName=TABLE, Key={"job_id": {"S": lease.LEASE_KEY}})
    assert "Item" not in item, "a scheduler run would wait for the lease to expire"


def test_a_dry_run_reports_what_the_protocol_would_drop_and_changes_nothing(fleet_region):
    w = idle_world(min_size=3)
    settings = Settings(**{**w["settings"].__dict__, "dry_run": True})
    result = run(settings, w["now"])
    assert result["decisions"]["mark"]
    result = run(settings, w["later"])  # nothing was marked: still marking in a dry run
    assert container_status(w["idle"]) == "ACTIVE" and group()["DesiredCapacity"] == 3
    assert all(state_of(i) == "running" for i in w["standalone"])


def test_an_error_the_protocol_could_not_foresee_still_leaves_the_stops_and_the_summary(fleet_region, monkeypatch):
    w = idle_world()
    run(w["settings"], w["now"])

    def broken(*args, **kwargs):
        raise KeyError("containerInstances")  # e.g. an answer shaped unlike the API model

    monkeypatch.setattr(execute, "remove", broken)
    result = run(w["settings"], w["later"])
    assert all(state_of(i) in ("stopping", "stopped") for i in w["standalone"])
    assert "removal failed: KeyError" in result["not_removed"][w["idle"]]
    assert any("Not removed this run" in summary for summary in summaries(w, FLEET))
