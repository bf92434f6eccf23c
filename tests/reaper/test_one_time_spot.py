"""An idle standalone Spot Instance of a one-time Spot request is terminated, not stopped, after the same idle
window and grace as a stop: EC2 refuses StopInstances for it (UnsupportedOperation; EC2 User Guide, "Stop a
Spot Instance"), and before this the reaper listed it as failed every run and it ran idle for ever.

Where moto differs from AWS (see also test_reaper_moto.py and tests/removal/world.py):
- moto stops a Spot Instance of a one-time request; AWS refuses with UnsupportedOperation. The tests make
  the function's StopInstances refuse such an instance the way AWS does (`refuse_like_aws`): before moto
  sees the call, for a call naming one, the whole call (AWS refuses the whole request too).
- moto reports no SpotInstanceRequestId on a Spot Instance; the reaper finds its request by the
  `instance-id` filter of DescribeSpotInstanceRequests, which moto answers as AWS does.
- moto terminates at once: the instance is `terminated` (AWS: `shutting-down` first).
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import boto3
import pytest
from alert_delivery import published
from botocore.exceptions import ClientError
from iam_conditions import allows
from removal.world import decisions, inject, throttle
from reaper.test_reaper_moto import REGION, SETTINGS, build_world, put_utilisation, summaries

from lambdas.common.permissions import statements
from lambdas.reaper import actions
from lambdas.reaper.handler import Settings, run

SPEC = {"ImageId": "ami-12c6146b", "InstanceType": "g5.xlarge"}
ENV_TAG = [{"Key": "mlfleet:environment", "Value": "dev"}]


def spot(kind: str) -> str:
    ec2 = boto3.client("ec2", REGION)
    (request,) = ec2.request_spot_instances(InstanceCount=1, Type=kind, LaunchSpecification=SPEC)[
        "SpotInstanceRequests"]
    ec2.create_tags(Resources=[request["InstanceId"]], Tags=ENV_TAG)
    return request["InstanceId"]


def state_of(instance_id: str) -> str:
    return boto3.client("ec2", REGION).describe_instances(InstanceIds=[instance_id])["Reservations"][0][
        "Instances"][0]["State"]["Name"]


def refuse_like_aws(unstoppable: set[str], *, on_demand: bool = False) -> list[dict]:
    """The function's StopInstances refuses a call naming one of `unstoppable`, as AWS does for a Spot
    Instance of a one-time request (moto stops it). Returns the refused calls' parameters."""
    def refusal(operation: str) -> ClientError:
        why = ("the instance does not have an 'ebs' root device type and cannot be stopped" if on_demand else
               "You can't stop the Spot Instance because it is associated with a one-time Spot Instance request. "
               "You can only stop Spot Instances associated with persistent Spot Instance requests.")
        return ClientError({"Error": {"Code": "UnsupportedOperation", "Message": why}}, operation)

    return inject("ec2", "StopInstances", refusal, region=REGION, times=100,
                  when=lambda params: bool(unstoppable & set(params.get("InstanceIds", []))))


@pytest.fixture
def machines(fleet_aws):
    """One idle machine of each kind, no fleet member idle: on-demand, persistent Spot, one-time Spot."""
    world = build_world(fleet_size=1, standalone=1)
    (on_demand,) = world["standalone"]
    persistent, one_time = spot("persistent"), spot("one-time")
    now = datetime.now(timezone.utc) + timedelta(hours=3)
    later = now + timedelta(minutes=35)
    for at in (now, later):
        put_utilisation(world["fleet"][0], at, cpu=55, gpu=0)
        for instance_id in (on_demand, persistent, one_time):
            put_utilisation(instance_id, at, cpu=1, gpu=1, asg=None)
    settings = Settings(**{**SETTINGS.__dict__, "alert_topic_arn": world["topic"]})
    return {**world, "settings": settings, "now": now, "later": later, "on_demand": on_demand,
            "persistent": persistent, "one_time": one_time}


def test_an_idle_one_time_spot_machine_is_terminated_after_the_grace_and_the_others_stopped(machines, caplog):
    """Before: all three were stopped; AWS refused the one-time Spot Instance's stop, the run listed it as
    failed, and it ran idle for ever. Now its request type is read up front and it is terminated."""
    m = machines
    refused = refuse_like_aws({m["one_time"]})
    first = run(m["settings"], m["now"])
    assert sorted(first["decisions"]["mark"]) == sorted([m["on_demand"], m["persistent"], m["one_time"]])
    assert state_of(m["one_time"]) == "running", "marked first, acted on after the grace only"

    result = run(m["settings"], m["later"])
    assert result["failed"] == {}
    assert result["decisions"]["terminate-standalone"] == [m["one_time"]]
    assert sorted(result["decisions"]["stop-standalone"]) == sorted([m["on_demand"], m["persistent"]])
    assert state_of(m["one_time"]) in ("shutting-down", "terminated")
    assert state_of(m["on_demand"]) in ("stopping", "stopped") and state_of(m["persistent"]) in ("stopping", "stopped")
    assert refused == [], "decided up front: no stop is even tried for it"
    (line,) = [d for d in decisions(caplog) if d["decision"] == "terminate-standalone"]
    assert line["instance_id"] == m["one_time"] and "one-time request" in line["reason"]
    assert "cannot be stopped" in line["reason"] and "would not survive a Spot interruption" in line["reason"]
    summary = summaries(m)[-1]
    assert "Terminated (standalone Spot Instance EC2 cannot stop: one-time Spot request)" in summary
    assert f"{m['one_time']} (standalone): " in summary and "Failed" not in summary
    subject, _ = published(m["topic"])[-1]
    assert subject == "mlfleet dev reaper: 0 marked idle, 3 reaped"


def test_a_one_time_spot_machine_whose_request_cannot_be_read_is_terminated_when_ec2_refuses_its_stop(machines,
                                                                                                     caplog):
    m = machines
    run(m["settings"], m["now"])
    inject("ec2", "DescribeSpotInstanceRequests", throttle, region=REGION)
    refused = refuse_like_aws({m["one_time"]})
    result = run(m["settings"], m["later"])
    assert len(refused) == 2, "the batch, then the machine alone"
    assert result["failed"] == {}
    assert result["decisions"]["terminate-standalone"] == [m["one_time"]]
    assert state_of(m["one_time"]) in ("shutting-down", "terminated")
    assert state_of(m["persistent"]) in ("stopping", "stopped"), "stopped: its stop is not refused"
    logged = [d for d in decisions(caplog) if d.get("instance_id") == m["one_time"]]
    assert [d["decision"] for d in logged][-2:] == ["stop-standalone", "terminate-standalone"]
    assert "EC2 refused to stop this Spot Instance (UnsupportedOperation" in logged[-1]["reason"]
    assert any(d.get("step") == "read-spot-requests" for d in decisions(caplog))


def tags_of(instance_id: str) -> dict[str, str]:
    described = boto3.client("ec2", REGION).describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0]
    return {t["Key"]: t["Value"] for t in described.get("Tags", [])}


def test_an_on_demand_machine_ec2_cannot_stop_is_reported_never_terminated(machines):
    m = machines
    run(m["settings"], m["now"])
    refuse_like_aws({m["on_demand"]}, on_demand=True)
    result = run(m["settings"], m["later"])
    assert state_of(m["on_demand"]) == "running"
    assert result["decisions"]["left-running"] == [m["on_demand"]] and m["on_demand"] not in result["failed"]
    assert m["on_demand"] not in result["decisions"].get("terminate-standalone", [])
    assert tags_of(m["on_demand"])["mlfleet:stop-refused-at"] == m["later"].isoformat()
    (summary,) = [s for s in summaries(m) if "Left running idle" in s]
    assert m["on_demand"] in summary and "UnsupportedOperation" in summary and "reported again" in summary


def test_an_on_demand_machine_ec2_cannot_stop_is_reported_once_a_day_not_every_run(machines):
    """Before, its refusal was a failure "retried next run": a stop refused and a summary mailed every run."""
    m = machines
    run(m["settings"], m["now"])
    refused_calls = refuse_like_aws({m["on_demand"]}, on_demand=True)
    run(m["settings"], m["later"])
    tried = len(refused_calls)  # the batch's stop, and the machine's own (one by one, after a batch fails)
    assert tried and len(summaries(m)) == 2  # the mark's, and the refusal's
    for at in (m["later"] + timedelta(minutes=15), m["later"] + timedelta(hours=23)):
        put_utilisation(m["on_demand"], at, cpu=1, gpu=1, asg=None)
        put_utilisation(m["fleet"][0], at, cpu=55, gpu=0)
        result = run(m["settings"], at)
        assert result["decisions"]["left-running"] == [m["on_demand"]] and result["failed"] == {}
    assert len(refused_calls) == tried, "no stop tried again within the day"
    assert [s for s in summaries(m) if m["on_demand"] in s] == [], "nothing mailed about it within the day"
    a_day_on = m["later"] + timedelta(hours=24, minutes=5)
    put_utilisation(m["on_demand"], a_day_on, cpu=1, gpu=1, asg=None)
    put_utilisation(m["fleet"][0], a_day_on, cpu=55, gpu=0)
    result = run(m["settings"], a_day_on)
    assert len(refused_calls) > tried and result["decisions"]["left-running"] == [m["on_demand"]]
    assert tags_of(m["on_demand"])["mlfleet:stop-refused-at"] == a_day_on.isoformat()
    assert any(m["on_demand"] in s and "Left running idle" in s for s in summaries(m)), "reported again a day on"


def test_a_machine_left_running_that_is_busy_again_loses_its_mark_and_its_refusal(machines):
    m = machines
    run(m["settings"], m["now"])
    refuse_like_aws({m["on_demand"]}, on_demand=True)
    run(m["settings"], m["later"])
    busy = m["later"] + timedelta(minutes=15)
    put_utilisation(m["on_demand"], busy, cpu=80, gpu=1, asg=None)
    put_utilisation(m["fleet"][0], busy, cpu=55, gpu=0)
    result = run(m["settings"], busy)
    assert m["on_demand"] in result["decisions"]["unmark"]
    assert not {"mlfleet:idle-since", "mlfleet:stop-refused-at"} & set(tags_of(m["on_demand"]))


def test_a_refusal_that_cannot_be_noted_is_a_failure_tried_and_reported_again_next_run(machines):
    m = machines
    run(m["settings"], m["now"])
    refuse_like_aws({m["on_demand"]}, on_demand=True)
    inject("ec2", "CreateTags", throttle, region=REGION, times=10,
           when=lambda params: params.get("Tags", [{}])[0].get("Key") == "mlfleet:stop-refused-at")
    result = run(m["settings"], m["later"])
    assert "the refusal could not be noted" in result["failed"][m["on_demand"]]
    assert "mlfleet:stop-refused-at" not in tags_of(m["on_demand"]) and state_of(m["on_demand"]) == "running"
    assert any("Failed (retried next run)" in s and m["on_demand"] in s for s in summaries(m))


def test_a_dry_run_names_the_machine_it_would_terminate_and_changes_nothing(machines):
    m = machines
    run(m["settings"], m["now"])  # a real run marks
    dry = Settings(**{**m["settings"].__dict__, "dry_run": True})
    result = run(dry, m["later"])
    assert result["decisions"]["terminate-standalone"] == [m["one_time"]]
    assert all(state_of(i) == "running" for i in (m["on_demand"], m["persistent"], m["one_time"]))
    summary = summaries(m)[-1]
    assert "Terminated (standalone Spot Instance EC2 cannot stop: one-time Spot request) [DRY RUN: not done]" in summary


def test_the_action_cap_counts_the_termination(machines):
    m = machines
    run(m["settings"], m["now"])
    capped = Settings(**{**m["settings"].__dict__, "max_actions_per_run": 1})
    result = run(capped, m["later"])
    acted = result["decisions"].get("terminate-standalone", []) + result["decisions"].get("stop-standalone", [])
    assert len(acted) == 1 and len(result["decisions"]["spare"]) == 2


@pytest.mark.parametrize(("key", "value", "allowed"), [
    ("mlfleet:idle-since", "2026-11-22T12:00:00+00:00", True),
    ("mlfleet:stop-refused-at", "2026-11-22T12:00:00+00:00", True),
    ("mlfleet:stop-refused-at", "never", False),
    ("mlfleet:keep-alive", "2026-11-22T12:00:00+00:00", False),
], ids=["the-idle-mark", "the-refusal", "not-a-time", "another-key"])
def test_each_tag_the_reaper_writes_alone_is_one_its_policy_allows(key, value, allowed):
    """The reaper's CreateTags names two keys and bounds their values; each write carries one of them. Evaluated
    as IAM does (tests/iam_conditions.py): a StringLike on a key the request does not carry is false, so both
    bounds as StringLike would refuse every idle mark."""
    policy = statements(actions.PERMISSIONS, account="123456789012", region=REGION, environment="dev")
    context = {"aws:TagKeys": [key], f"aws:RequestTag/{key}": value, "aws:ResourceTag/mlfleet:environment": "dev"}
    instance = f"arn:aws:ec2:{REGION}:123456789012:instance/i-0abc"
    assert allows(policy, "ec2:CreateTags", instance, context) is allowed
