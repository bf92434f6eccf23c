"""A machine its group or EC2 is taking away gets no job, though ECS still calls it ACTIVE
(lambdas/scheduler/state.py, "Machines leaving").

Where moto differs from AWS: its Auto Scaling groups never show a member Terminating or in Standby (it removes a
terminated member at once), and its instances never linger shutting-down with the agent still registered. The
tests rewrite the group's and the instance's answers to the states AWS shows while that happens (faults.amends).
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from conftest import ENV, HOME, aws_client, build_fleet, fleets_json, open_admission, scheduler_settings
from test_degraded_machines import ledger, queue_jobs

from lambdas.common.catalog import load_catalog
from lambdas.jobs import ledger as L
from lambdas.jobs.fleets import parse_fleets
from lambdas.scheduler import handler as scheduler
from lambdas.scheduler import state

NOW = datetime(2026, 11, 22, 12, tzinfo=timezone.utc)


@pytest.fixture
def world(home, faults):
    instances = build_fleet(size=1)  # one g5.12xlarge, registered as a healthy GPU agent does
    open_admission()
    aws_client("sns", HOME).create_topic(Name=f"mlfleet-{ENV}-alerts")
    return home, faults, instances


def lifecycle(faults, instance_id: str, lifecycle_state: str) -> None:
    def amend(params, parsed):
        for group in parsed.get("AutoScalingGroups", []):
            for member in group.get("Instances", []):
                if member["InstanceId"] == instance_id:
                    member["LifecycleState"] = lifecycle_state
    faults.amends[("autoscaling", "DescribeAutoScalingGroups")] = amend


def instance_state(faults, instance_id: str, name: str) -> None:
    def amend(params, parsed):
        for reservation in parsed.get("Reservations", []):
            for instance in reservation["Instances"]:
                if instance["InstanceId"] == instance_id:
                    instance["State"] = {"Code": 32, "Name": name}
    faults.amends[("ec2", "DescribeInstances")] = amend


def read() -> state.RegionView:
    return state.read_region(HOME, parse_fleets(fleets_json()), load_catalog(), {}, NOW)


@pytest.mark.parametrize(("group_says", "ec2_says"), [
    ("Terminating:Wait", None),  # a lifecycle hook holds it (an hour by default)
    ("Terminating", None),  # a scale-in or health replacement, the agent not yet gone
    ("Detaching", None),
    ("EnteringStandby", None),
    ("Standby", None),
    (None, "shutting-down"),  # the spot market or a user ended it; the agent deregisters when it stops
    (None, "stopping"),
])
def test_no_job_is_placed_on_a_machine_that_is_leaving(world, group_says, ec2_says):
    """Regression: the scheduler placed jobs on any ACTIVE container instance of a group member, also one its
    group was terminating: the job died with the machine, an attempt spent."""
    home, faults, instances = world
    (machine,) = instances
    if group_says:
        lifecycle(faults, machine, group_says)
    if ec2_says:
        instance_state(faults, machine, ec2_says)
    (job_id,) = queue_jobs(1)

    (view,) = read().machines
    summary = scheduler.run(scheduler_settings(home), lambda: 170_000, now=NOW)

    assert view.draining and (read().fleets[0].current_instances == 0)
    assert summary["started"] == [] and ledger().get(job_id).state == L.QUEUED
    assert faults.carried_out("ecs", "StartTask") == []


def test_a_machine_in_service_and_running_is_used(world):
    home, _, instances = world
    (machine,) = instances
    (job_id,) = queue_jobs(1)

    assert not read().machines[0].draining
    assert scheduler.run(scheduler_settings(home), lambda: 170_000, now=NOW + timedelta(seconds=1))["started"] == [job_id]


@pytest.mark.parametrize(("group_says", "ec2_says", "leaving"), [
    ("InService", "running", ""),
    ("Pending", "running", ""),
    ("Pending:Wait", "running", ""),
    ("Pending:Proceed", "pending", ""),
    (None, None, ""),  # not read: judged by ECS's status alone, as before
    ("InService", None, ""),
    ("Terminating:Wait", "running", "its Auto Scaling group has it Terminating:Wait"),
    ("Terminating:Proceed", "running", "its Auto Scaling group has it Terminating:Proceed"),
    ("Warmed:Running", "running", "its Auto Scaling group has it Warmed:Running"),
    ("Detached", "running", "its Auto Scaling group has it Detached"),
    ("InService", "stopped", "its EC2 instance is stopped"),
])
def test_which_machines_are_leaving(group_says, ec2_says, leaving):
    assert state.leaving_reason(group_says, ec2_says) == leaving
