"""At a spot notice, the group's replacement of the reclaimed instance is kept or declined
(lambdas/job_events/replacements.py), end to end through the job-events handler, in moto.

Where moto differs from AWS: DetachInstances never refuses (AWS refuses a detach that would take the
group below its minimum, with a ValidationError): the refusal is injected. moto removes the
`aws:autoscaling:groupName` tag from a detached instance; the scheduler does not rely on that tag either
way (it names a detached instance's fleet by its ECS attribute, tests/jobs/test_scheduler_io.py).
"""

from __future__ import annotations

from datetime import datetime, timezone

import boto3
import pytest
from botocore.exceptions import ClientError
from conftest import ASG, CLUSTER, ENV, FAMILY, FLEET_TYPE, HOME, build_fleet, event_settings, two_fleets_json

from lambdas.common import tags as tag_keys
from lambdas.job_events import decide as D
from lambdas.job_events import replacements
from lambdas.job_events.handler import RetryLater
from lambdas.job_events.handler import handle as job_event
from lambdas.jobs import ledger as L
from lambdas.jobs.spec import JobSpec

NOW = datetime(2026, 11, 22, 12, tzinfo=timezone.utc)
SUBMISSION = "sub-20261122120000-abcdef"
# The stack's fleets: the group under test (4-GPU g5 boxes) and a fleet of one-T4 boxes.
FLEETS = two_fleets_json()
SMALL_JOB = JobSpec(image="i", command=(), gpus=1, vcpus=2, memory_mib=8192, max_attempts=3)
# Four GPUs and 40 vCPUs: only the g5 group holds it.
BIG_JOB = JobSpec(image="i", command=(), gpus=4, vcpus=40, memory_mib=100_000, max_attempts=3)


def run_jobs(home, instance_id: str, container_arn: str, specs) -> list[str]:
    ecs, ledger = boto3.client("ecs", HOME), L.Ledger(boto3.client("dynamodb", HOME), home["table"])
    job_ids = []
    for n, spec in enumerate(specs):
        job_id = f"{SUBMISSION}-{n:05d}"
        (task,) = ecs.start_task(cluster=CLUSTER, taskDefinition=FAMILY, containerInstances=[container_arn],
                                 startedBy=job_id)["tasks"]
        ledger.put_new(L.JobRecord(job_id=job_id, submission_id=SUBMISSION, index=n, state=L.RUNNING, attempt=1,
                                   runs=1, start_failures=0, submitted_at=0.0, updated_at=0.0, spec=spec,
                                   placement=L.Placement(HOME, "gpu1", CLUSTER, container_arn, instance_id, FLEET_TYPE,
                                                         task["taskArn"])))
        job_ids.append(job_id)
    return job_ids


def notice(instance_id: str) -> dict:
    return {"detail-type": D.INTERRUPTION, "source": "aws.ec2", "region": HOME, "time": NOW.isoformat(),
            "detail": {"instance-id": instance_id, "instance-action": "terminate"}}


def group() -> dict:
    return boto3.client("autoscaling", HOME).describe_auto_scaling_groups(
        AutoScalingGroupNames=[ASG])["AutoScalingGroups"][0]


def instance_tags(instance_id: str) -> dict:
    (reservation,) = boto3.client("ec2", HOME).describe_instances(InstanceIds=[instance_id])["Reservations"]
    return {t["Key"]: t["Value"] for t in reservation["Instances"][0].get("Tags", [])}


@pytest.mark.parametrize(("specs", "declined"), [
    ([SMALL_JOB, SMALL_JOB], True),  # $0.41/h bought alone against a g5 box's $2-4/h
    ([BIG_JOB], False),  # only a box of the group holds it
    ([], True),  # it ran nothing: its replacement would buy for no one
], ids=["small-jobs", "a-job-only-the-group-holds", "ran-nothing"])
def test_the_notice_declines_a_replacement_dearer_than_buying_for_its_jobs(home, specs, declined):
    (reclaimed, arn), (other, _) = sorted(build_fleet(size=2).items())
    run_jobs(home, reclaimed, arn, specs)
    job_event(notice(reclaimed), event_settings(home, FLEETS), now=NOW)

    members = {i["InstanceId"] for i in group()["Instances"]}
    assert (reclaimed not in members) is declined and other in members
    assert group()["DesiredCapacity"] == (1 if declined else 2)
    assert (tag_keys.DETACHED_AT in instance_tags(reclaimed)) is declined
    ledger = L.Ledger(boto3.client("dynamodb", HOME), home["table"])
    assert not ledger.by_state(L.RUNNING)
    assert len(ledger.by_state(L.QUEUED)) == len(specs)  # every job requeued either way


def test_a_notice_delivered_again_decrements_the_desired_capacity_once(home):
    (reclaimed, arn), _ = sorted(build_fleet(size=2).items())
    run_jobs(home, reclaimed, arn, [SMALL_JOB])
    for _ in range(3):
        job_event(notice(reclaimed), event_settings(home, FLEETS), now=NOW)
    assert group()["DesiredCapacity"] == 1 and reclaimed not in {i["InstanceId"] for i in group()["Instances"]}


def test_a_notice_delivered_again_after_the_requeue_declines_once_and_loses_no_job(home, monkeypatch):
    """The race: the first delivery requeues the job, tags the instance and fails to detach it (throttled);
    the ledger then holds the job QUEUED, no longer RUNNING there. The second delivery reads no job running
    there and declines: the planner buys for the queued job (safe, whatever it needs). The desired capacity
    is decremented once, and the job is queued once."""
    (reclaimed, arn), _ = sorted(build_fleet(size=2).items())
    (job_id,) = run_jobs(home, reclaimed, arn, [SMALL_JOB])
    autoscaling = replacements.client("autoscaling", HOME)
    throttled = ClientError({"Error": {"Code": "Throttling", "Message": "Rate exceeded"}}, "DetachInstances")
    with monkeypatch.context() as patch:
        patch.setattr(autoscaling, "detach_instances", lambda **kw: (_ for _ in ()).throw(throttled))
        with pytest.raises(RetryLater, match="replacement-failed"):  # Lambda delivers the event again
            job_event(notice(reclaimed), event_settings(home, FLEETS), now=NOW)
    assert reclaimed in {i["InstanceId"] for i in group()["Instances"]}
    ledger = L.Ledger(boto3.client("dynamodb", HOME), home["table"])
    assert ledger.get(job_id).state == L.QUEUED and tag_keys.DETACHED_AT in instance_tags(reclaimed)
    job_event(notice(reclaimed), event_settings(home, FLEETS), now=NOW)
    assert reclaimed not in {i["InstanceId"] for i in group()["Instances"]} and group()["DesiredCapacity"] == 1
    assert [r.job_id for r in ledger.by_state(L.QUEUED)] == [job_id] and ledger.get(job_id).attempt == 1


def test_a_refused_detach_keeps_the_replacement_and_removes_the_mark(home, monkeypatch):
    """AWS refuses a detach below the group's minimum (moto does not: injected)."""
    (reclaimed, arn), _ = sorted(build_fleet(size=2).items())
    run_jobs(home, reclaimed, arn, [SMALL_JOB])
    autoscaling = replacements.client("autoscaling", HOME)
    refusal = ClientError({"Error": {"Code": "ValidationError", "Message": "below the group's minimum"}},
                          "DetachInstances")
    monkeypatch.setattr(autoscaling, "detach_instances", lambda **kw: (_ for _ in ()).throw(refusal))
    ledger = L.Ledger(boto3.client("dynamodb", HOME), home["table"])
    outcome = replacements.settle(reclaimed, HOME, ledger.by_state(L.RUNNING), FLEETS, ENV, NOW)
    assert outcome["replacement"] == "kept"
    assert tag_keys.DETACHED_AT not in instance_tags(reclaimed)
    assert group()["DesiredCapacity"] == 2


def test_an_instance_of_another_environment_or_outside_the_groups_is_left_alone(home):
    (reclaimed, _), _ = sorted(build_fleet(size=2).items())
    ec2 = boto3.client("ec2", HOME)
    ec2.create_tags(Resources=[reclaimed], Tags=[{"Key": tag_keys.ENVIRONMENT, "Value": "prod"}])
    assert replacements.settle(reclaimed, HOME, [], FLEETS, ENV, NOW)["replacement"] == "left"
    (stray,) = [i["InstanceId"] for i in ec2.run_instances(ImageId="ami-12c6146b", InstanceType=FLEET_TYPE, MinCount=1,
                                                          MaxCount=1)["Instances"]]
    ec2.create_tags(Resources=[stray], Tags=[{"Key": tag_keys.ENVIRONMENT, "Value": ENV}])
    assert replacements.settle(stray, HOME, [], FLEETS, ENV, NOW)["replacement"] == "left"
    assert replacements.settle("i-0123456789abcdef0", HOME, [], FLEETS, ENV, NOW)["replacement"] == "left"
    assert group()["DesiredCapacity"] == 2


def test_the_detach_is_scoped_to_the_environment_and_nothing_here_terminates():
    """The spot market ends a detached instance (replacements.py cites the EC2 User Guide); a terminate
    scoped by a tag this role writes would scope nothing (tests/rules/test_iam_lint.py, tag-write)."""
    by_action = {a: p for p in replacements.PERMISSIONS for a in p.actions}
    assert by_action["autoscaling:DetachInstances"].tag_scoped
    assert by_action["ec2:CreateTags"].tag_keys == (tag_keys.DETACHED_AT,)
    assert not any(a.endswith(("TerminateInstances", "TerminateInstanceInAutoScalingGroup")) for a in by_action)
