"""From submission to placement, through a spot interruption, a twice-delivered message and a spent
budget, against moto, with the real functions: the mlfleet command's submit, the scheduler's run, the
job-events handler and the budget guard.

Where moto differs from AWS: container instances register 4 vCPUs and 7,482 MiB whatever their type
(the scenario's jobs are sized within that), and have no GPUs (the scheduler counts them from the
catalog minus the tasks, so the scenario is set by the GPUs tasks ask for); an instance the group
launches never joins the cluster by itself (the test registers it, as the ECS agent would); a stopped
task stays listed as RUNNING with desiredStatus STOPPED; spot interruptions are events the test sends.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import boto3
import pytest
import ecs_agent
from conftest import ASG, CLUSTER, ENV, FAMILY, HOME, build_fleet, fleets_json, open_admission, scheduler_settings

from lambdas.budget_guard.handler import Settings as GuardSettings
from lambdas.budget_guard.handler import handler as budget_guard
from lambdas.common import admission
from lambdas.job_events.handler import Settings as EventSettings
from lambdas.job_events.handler import handle as job_event
from lambdas.jobs import cli
from lambdas.jobs import ledger as L
from lambdas.scheduler.handler import run as run_scheduler

NOW = datetime(2026, 11, 22, 12, tzinfo=timezone.utc)
IMAGE = "ghcr.io/team/train:3"
OVER_BUDGET = """Budget Name: mlfleet-dev
Budget Type: Cost
Budgeted Amount: $1,500.00
Alert Type: ACTUAL
Alert Threshold: > $1,500.00
ACTUAL Amount: $1,523.41
"""


@pytest.fixture
def world(home):
    instances = build_fleet(size=2, max_size=6)  # two g5.12xlarge: 4 GPUs each
    open_admission()
    boto3.client("sns", HOME).create_topic(Name=f"mlfleet-{ENV}-alerts")
    service = cli.JobService(ENV, HOME, home["queue"], home["table"], f"mlfleet-{ENV}-scheduler",
                             cli.parse_fleets(fleets_json()), 3, f"/mlfleet/{ENV}/jobs")
    return home, service, instances


def scheduler(home, minutes: int) -> dict:
    return run_scheduler(scheduler_settings(home), lambda: 170_000, now=NOW + timedelta(minutes=minutes))


def ledger() -> L.Ledger:
    return L.Ledger(boto3.client("dynamodb", HOME), f"mlfleet-{ENV}-jobs")


def occupy(container_instance: str, gpus: int) -> None:
    """Another workload's task holding GPUs on a machine."""
    boto3.client("ecs", HOME).start_task(
        cluster=CLUSTER, taskDefinition=FAMILY, containerInstances=[container_instance], startedBy="other",
        overrides={"containerOverrides": [{"name": "job", "resourceRequirements": [{"type": "GPU", "value": str(gpus)}]}]})


def tasks_of(job_id: str) -> list[dict]:
    ecs = boto3.client("ecs", HOME)
    arns = ecs.list_tasks(cluster=CLUSTER, startedBy=job_id)["taskArns"]
    return ecs.describe_tasks(cluster=CLUSTER, tasks=arns)["tasks"] if arns else []


def attempt_of(task: dict) -> int:
    env = task["overrides"]["containerOverrides"][0]["environment"]
    return int(next(v["value"] for v in env if v["name"] == "MLFLEET_ATTEMPT"))


def interruption(instance_id: str) -> dict:
    return {"detail-type": "EC2 Spot Instance Interruption Warning", "source": "aws.ec2", "region": HOME,
            "time": (NOW + timedelta(minutes=3)).isoformat(), "detail": {"instance-id": instance_id,
                                                                         "instance-action": "terminate"}}


def event_settings(home) -> EventSettings:
    return EventSettings(environment=ENV, jobs_table=home["table"], jobs_queue_url=home["queue"],
                         jobs_dlq_url=home["dlq"], fleets=fleets_json(), rebalance_timeout_minutes=30,
                         notify_email_topic_arn=f"arn:aws:sns:{HOME}:123456789012:mlfleet-{ENV}-job-notifications")


def join_new_instances(known) -> str:
    """Register the group's new instances with ECS (the agent's job in AWS); returns the new instance id."""
    group = boto3.client("autoscaling", HOME).describe_auto_scaling_groups(AutoScalingGroupNames=[ASG])
    (new,) = [m["InstanceId"] for m in group["AutoScalingGroups"][0]["Instances"]
              if m["InstanceId"] not in known and not m["LifecycleState"].startswith("Terminat")]
    ecs_agent.register(boto3.client("ecs", HOME), CLUSTER, new, HOME)
    return new


def test_a_sweep_is_placed_interrupted_requeued_and_placed_again_without_a_double_start(world):
    home, service, instances = world
    (busy_id, busy_arn), (free_id, free_arn) = sorted(instances.items())
    occupy(busy_arn, 3)  # the first machine has 1 GPU left, the second all 4

    sweep = cli.submit(service, {"image": IMAGE, "gpus": 2, "vcpus": 1, "memory_mib": 2048,
                                 "command": ["python", "train.py", "--lr", "{lr}"]}, sweep={"lr": ["0.1", "0.01"]})
    single = cli.submit(service, {"image": IMAGE, "gpus": 1, "vcpus": 1, "memory_mib": 2048, "command": ["eval"]})
    first = scheduler(home, 0)

    # The 2-GPU jobs fit only the free machine; the 1-GPU job goes to the fuller one, which it fills.
    assert sorted(first["started"]) == sorted([*sweep.job_ids, *single.job_ids]) and first["scaled"] == []
    for job_id in sweep.job_ids:
        record = ledger().get(job_id)
        assert record.state == L.RUNNING and record.placement.instance_id == free_id and record.placement.task_arn
        (task,) = tasks_of(job_id)
        assert task["containerInstanceArn"] == free_arn and attempt_of(task) == 1
        assert task["overrides"]["containerOverrides"][0]["command"][-1] in ("0.1", "0.01")
    assert ledger().get(single.job_ids[0]).placement.instance_id == busy_id

    # The free machine is reclaimed: drained, its tasks stopped, its jobs back in the queue, attempt counted.
    decisions = job_event(interruption(free_id), event_settings(home), now=NOW + timedelta(minutes=3))["decisions"]
    assert sorted(d["job_id"] for d in decisions) == sorted(sweep.job_ids) and all(d["applied"] for d in decisions)
    ecs = boto3.client("ecs", HOME)
    described = ecs.describe_container_instances(cluster=CLUSTER, containerInstances=[free_arn])["containerInstances"]
    assert described[0]["status"] == "DRAINING"
    assert all(t["desiredStatus"] == "STOPPED" for j in sweep.job_ids for t in tasks_of(j))
    for job_id in sweep.job_ids:
        record = ledger().get(job_id)
        assert (record.state, record.attempt, record.runs) == (L.QUEUED, 1, 1)
    sqs = boto3.client("sqs", HOME)
    # Deliver one of the requeue messages a second time.
    sqs.send_message(QueueUrl=home["queue"], MessageBody=json.dumps({"job_id": sweep.job_ids[0], "attempt": 1}))

    # Nothing else can hold 2 GPUs, and the group will replace the reclaimed instance: the jobs wait for the
    # replacement instead of buying another instance, run after run.
    second = scheduler(home, 4)
    assert second["started"] == [] and second["scaled"] == []
    waiting = {r.job_id: r.last_reason for r in ledger().by_state(L.QUEUED)}
    assert set(waiting) == set(sweep.job_ids)
    # Two minutes after the notice AWS takes the instance; the group launches its replacement (moto does
    # neither by itself) and ECS deregisters the old one.
    boto3.client("autoscaling", HOME).terminate_instance_in_auto_scaling_group(
        InstanceId=free_id, ShouldDecrementDesiredCapacity=False)
    ecs.deregister_container_instance(cluster=CLUSTER, containerInstance=free_arn, force=True)
    assert scheduler(home, 6)["scaled"] == []
    new_id = join_new_instances([*instances, free_id])
    third = scheduler(home, 8)
    assert sorted(third["started"]) == sorted(sweep.job_ids)
    for job_id in sweep.job_ids:
        record = ledger().get(job_id)
        assert record.state == L.RUNNING and record.placement.instance_id == new_id and record.runs == 2
        running = [t for t in tasks_of(job_id) if t["desiredStatus"] == "RUNNING"]
        assert [attempt_of(t) for t in running] == [2]  # the duplicate message started nothing more

    # The same message delivered yet again, now that the job runs: dropped as a duplicate, no task started.
    sqs.send_message(QueueUrl=home["queue"], MessageBody=json.dumps({"job_id": sweep.job_ids[0], "attempt": 1}))
    fourth = scheduler(home, 9)
    assert fourth["duplicates"] == 1 and fourth["started"] == []
    assert len(tasks_of(sweep.job_ids[0])) == 2  # the interrupted attempt's and the running one
    assert sqs.get_queue_attributes(QueueUrl=home["queue"], AttributeNames=["ApproximateNumberOfMessages"])[
        "Attributes"]["ApproximateNumberOfMessages"] == "0"


def test_over_budget_notification_stops_admission_and_the_scheduler_starts_nothing(world, capsys):
    home, service, instances = world
    submission = cli.submit(service, {"image": IMAGE, "gpus": 1, "vcpus": 1, "memory_mib": 1024,
                                      "command": ["x", "--seed", "{seed}"]}, sweep={"seed": ["1", "2", "3"]})
    guard = GuardSettings(environment=ENV, home_region=HOME,
                          alert_topic_arn=f"arn:aws:sns:{HOME}:123456789012:mlfleet-{ENV}-alerts")
    budget_guard({"Records": [{"EventSource": "aws:sns", "Sns": {"Message": OVER_BUDGET, "TopicArn": guard.budget_topic_arn}}]},
                 settings=guard)

    closed = scheduler(home, 0)
    assert closed["admission"] == admission.CLOSED and closed["started"] == [] and closed["scaled"] == []
    assert {ledger().get(j).state for j in submission.job_ids} == {L.QUEUED}  # nothing lost
    assert boto3.client("autoscaling", HOME).describe_auto_scaling_groups(AutoScalingGroupNames=[ASG])[
        "AutoScalingGroups"][0]["DesiredCapacity"] == 2

    assert admission.main(["open", "--environment", ENV, "--region", HOME, "--reason", "budget raised"]) == 0
    reopened = scheduler(home, 1)
    assert sorted(reopened["started"]) == sorted(submission.job_ids)
