"""The checkpoint contract against moto: every attempt of a job gets the same MLFLEET_CHECKPOINT_URI in its
StartTask overrides, a requeued job goes back to the region of its checkpoint, and the spot notice reaches
the job's task as a StopTask (SIGTERM, then the container's stopTimeout).

Where moto differs from AWS: container instances have no GPUs (counted from the catalog minus tasks);
an instance the group launches never joins the cluster by itself (the test registers it, as the ECS agent
would); StopTask marks the task's desiredStatus STOPPED at once and nothing runs, so no SIGTERM is sent
and no stopTimeout elapses (the ECS agent does both on a real instance: ContainerDefinition.stopTimeout,
botocore's ecs model); and the interruption warning is an event the test sends.
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime, timedelta, timezone

import boto3
import pytest
import ecs_agent
from conftest import (ASG, CLUSTER, HOME, build_fleet, checkpoint_bucket, event_settings, fleets_json, open_admission,
                      scheduler_settings)

from lambdas.common.catalog import load_catalog
from lambdas.common.settings import SettingsError
from lambdas.job_events.handler import handle as job_event
from lambdas.jobs import ledger as L
from lambdas.jobs.spec import assign_ids, parse_spec
from lambdas.scheduler.handler import run

NOW = datetime(2026, 11, 22, 12, tzinfo=timezone.utc)
WEST = "us-west-2"
SUBMISSION = "sub-20261122120000-c0ffee"


def two_regions() -> str:
    """The gpu1 fleet in the home region and in us-west-2, as fleets_document renders it."""
    return json.dumps([*json.loads(fleets_json(region=HOME)), *json.loads(fleets_json(region=WEST))])


def queue_jobs(home: dict, count: int, start: int = 0) -> list[str]:
    spec = parse_spec({"image": "ghcr.io/team/train:1", "command": ["python", "train.py"], "gpus": 4, "vcpus": 1,
                       "memory_mib": 1024}, fleet_regions=(HOME, WEST), catalog=load_catalog(), default_max_attempts=3)
    jobs = assign_ids(SUBMISSION, [spec] * (start + count))[start:]
    ledger = L.Ledger(boto3.client("dynamodb", HOME), home["table"])
    for job in jobs:
        assert ledger.put_new(L.new_record(job, NOW.timestamp()))
    return [job.job_id for job in jobs]


def schedule(home: dict, minutes: int) -> dict:
    return run(scheduler_settings(home, fleets=two_regions()), lambda: 170_000, now=NOW + timedelta(minutes=minutes))


def tasks_of(job_id: str, region: str) -> list[dict]:
    ecs = boto3.client("ecs", region)
    arns = ecs.list_tasks(cluster=CLUSTER, startedBy=job_id)["taskArns"]
    return ecs.describe_tasks(cluster=CLUSTER, tasks=arns)["tasks"] if arns else []


def environment_of(task: dict) -> dict[str, str]:
    (override,) = task["overrides"]["containerOverrides"]
    return {v["name"]: v["value"] for v in override["environment"]}


def desired(region: str) -> int:
    group = boto3.client("autoscaling", region).describe_auto_scaling_groups(AutoScalingGroupNames=[ASG])
    return group["AutoScalingGroups"][0]["DesiredCapacity"]


def interruption(instance_id: str, region: str) -> dict:
    return {"detail-type": "EC2 Spot Instance Interruption Warning", "source": "aws.ec2", "region": region,
            "time": (NOW + timedelta(minutes=3)).isoformat(), "detail": {"instance-id": instance_id,
                                                                         "instance-action": "terminate"}}


def grow(region: str) -> str:
    """One more instance in the region's group (moto launches it at once); returns its id."""
    autoscaling = boto3.client("autoscaling", region)
    before = {m["InstanceId"] for m in autoscaling.describe_auto_scaling_groups(
        AutoScalingGroupNames=[ASG])["AutoScalingGroups"][0]["Instances"]}
    autoscaling.set_desired_capacity(AutoScalingGroupName=ASG, DesiredCapacity=desired(region) + 1)
    group = autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=[ASG])["AutoScalingGroups"][0]
    (new,) = [m["InstanceId"] for m in group["Instances"] if m["InstanceId"] not in before]
    return new


def join(region: str, instance_id: str) -> str:
    """Register an instance with the region's cluster, as the ECS agent does after boot."""
    return ecs_agent.register(boto3.client("ecs", region), CLUSTER, instance_id, region)["containerInstanceArn"]


@pytest.fixture
def regions(home):
    east = build_fleet(size=1, max_size=3, region=HOME)  # one g5.12xlarge (4 GPUs) in the home region
    west = build_fleet(size=0, max_size=3, region=WEST)  # an empty group in us-west-2
    open_admission()
    return home, east, west


def test_every_attempt_gets_the_same_uri_and_returns_to_the_region_of_its_checkpoint(regions):
    home, east, _ = regions
    ((east_id, east_arn),) = east.items()
    (job_id,) = queue_jobs(home, 1)
    ledger = L.Ledger(boto3.client("dynamodb", HOME), home["table"])
    uri = f"s3://{checkpoint_bucket(HOME)}/jobs/{job_id}/"

    assert schedule(home, 0)["started"] == [job_id]
    (task,) = tasks_of(job_id, HOME)
    assert task["containerInstanceArn"] == east_arn
    assert environment_of(task) == {"MLFLEET_JOB_ID": job_id, "MLFLEET_ATTEMPT": "1", "MLFLEET_CHECKPOINT_URI": uri}

    # The spot notice: job-events drains the machine and stops the job's task (its SIGTERM); the job is requeued.
    events = event_settings(home, two_regions())
    (decision,) = job_event(interruption(east_id, HOME), events, now=NOW + timedelta(minutes=3))["decisions"]
    assert decision["applied"] and decision["stopped_task"] == task["taskArn"]
    (stopped,) = tasks_of(job_id, HOME)
    assert stopped["desiredStatus"] == "STOPPED"
    record = ledger.get(job_id)
    assert (record.state, record.attempt, record.runs, record.placement.region) == (L.QUEUED, 1, 1, HOME)

    # us-west-2 gets a free machine; the home region has none. A new job takes the west machine; the
    # requeued one waits for its region instead of restarting from zero where its checkpoint is out of reach.
    west_arn = join(WEST, grow(WEST))
    (fresh,) = queue_jobs(home, 1, start=1)
    west_before = desired(WEST)
    second = schedule(home, 4)
    assert second["started"] == [fresh] and job_id not in second["started"]
    assert tasks_of(fresh, WEST)[0]["containerInstanceArn"] == west_arn
    assert environment_of(tasks_of(fresh, WEST)[0])["MLFLEET_CHECKPOINT_URI"] == f"s3://{checkpoint_bucket(WEST)}/jobs/{fresh}/"
    assert tasks_of(job_id, WEST) == [] and ledger.get(job_id).state == L.QUEUED
    assert desired(WEST) == west_before  # nothing bought in the wrong region for it either

    # AWS takes the reclaimed machine; its replacement joins the home region's cluster: the job resumes there.
    boto3.client("autoscaling", HOME).terminate_instance_in_auto_scaling_group(InstanceId=east_id,
                                                                              ShouldDecrementDesiredCapacity=False)
    boto3.client("ecs", HOME).deregister_container_instance(cluster=CLUSTER, containerInstance=east_arn, force=True)
    group = boto3.client("autoscaling", HOME).describe_auto_scaling_groups(AutoScalingGroupNames=[ASG])["AutoScalingGroups"][0]
    (replacement,) = [m["InstanceId"] for m in group["Instances"]
                      if m["InstanceId"] != east_id and not m["LifecycleState"].startswith("Terminat")]
    new_arn = join(HOME, replacement)
    assert schedule(home, 8)["started"] == [job_id]
    resumed = [t for t in tasks_of(job_id, HOME) if t["desiredStatus"] == "RUNNING"]
    assert [t["containerInstanceArn"] for t in resumed] == [new_arn]
    assert environment_of(resumed[0]) == {"MLFLEET_JOB_ID": job_id, "MLFLEET_ATTEMPT": "2", "MLFLEET_CHECKPOINT_URI": uri}
    record = ledger.get(job_id)
    assert (record.state, record.attempt, record.runs, record.placement.region) == (L.RUNNING, 2, 2, HOME)


def test_a_job_whose_region_left_the_stack_starts_afresh_elsewhere(regions):
    home, east, _ = regions
    (job_id,) = queue_jobs(home, 1)
    ledger = L.Ledger(boto3.client("dynamodb", HOME), home["table"])
    ((east_id, _),) = east.items()
    assert schedule(home, 0)["started"] == [job_id]
    events = event_settings(home, two_regions())
    job_event(interruption(east_id, HOME), events, now=NOW + timedelta(minutes=3))

    # The stack drops the home region's fleet (and with it that region's bucket): us-west-2 takes the job.
    join(WEST, grow(WEST))
    settings = scheduler_settings(home, fleets=fleets_json(region=WEST))
    assert run(settings, lambda: 170_000, now=NOW + timedelta(minutes=5))["started"] == [job_id]
    (task,) = tasks_of(job_id, WEST)
    assert environment_of(task)["MLFLEET_CHECKPOINT_URI"] == f"s3://{checkpoint_bucket(WEST)}/jobs/{job_id}/"
    assert ledger.get(job_id).placement.region == WEST


def test_the_scheduler_refuses_an_account_id_that_is_not_one(home):
    for bad in ("", "12345678901", "1234567890123", "acct-1234567"):
        with pytest.raises(SettingsError, match=f"ACCOUNT_ID={bad!r}: expected the 12-digit AWS account id"):
            replace(scheduler_settings(home), account_id=bad)
