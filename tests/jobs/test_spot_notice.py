"""The 2-minute spot notice reaches the job as SIGTERM with time to save, end to end:

  EC2 "Spot Instance Interruption Warning" -> (forwarded to the home region) job-events -> drain the
  container instance and StopTask every job task on it -> the ECS agent sends SIGTERM and waits the
  container's stopTimeout (110 s) before SIGKILL -> the job saves its checkpoint and exits.

Each link is checked against what its owner says: botocore's ecs model (the API reference text) for what
draining and stopTimeout do, moto for the calls job-events makes; what the stacks set (stopTimeout,
ECS_CONTAINER_STOP_TIMEOUT, ECS_ENABLE_SPOT_INSTANCE_DRAINING) is checked on the renderings in
tests/program/test_checkpoint_buckets.py.

Where moto differs from AWS: StopTask only marks the task STOPPED (no agent, no SIGTERM, no wait); the
agent's own spot draining (ECS_ENABLE_SPOT_INSTANCE_DRAINING, which polls the instance metadata for the
notice) has no counterpart; the warning is an event the test sends.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

import boto3
import botocore.session
from conftest import CLUSTER, FAMILY, HOME, build_fleet, event_settings

from components.compute.cluster import JOB_STOP_TIMEOUT_SECONDS
from lambdas.job_events import decide as D
from lambdas.job_events.handler import PERMISSIONS
from lambdas.job_events.handler import handle as job_event
from lambdas.jobs import ledger as L
from lambdas.jobs.spec import JobSpec
from lambdas.scheduler.actions import TaskDefinitions

# "A Spot Instance interruption notice is a warning that is issued two minutes before Amazon EC2 stops or
# terminates your Spot Instance." (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/spot-instance-termination-notices.html)
NOTICE_SECONDS = 120


def ecs_doc(shape: str, member: str | None = None, operation: str | None = None) -> str:
    model = botocore.session.get_session().get_service_model("ecs")
    text = (model.operation_model(operation).documentation if operation
            else model.shape_for(shape).members[member].documentation)
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", text))


def test_draining_alone_never_stops_a_job_so_job_events_stops_its_tasks():
    # The owner's word: a drain leaves standalone tasks (StartTask, as the scheduler starts jobs) running,
    # whether job-events or the ECS agent's spot draining sets it.
    assert ("Any PENDING or RUNNING tasks that do not belong to a service aren't affected. You must wait for them "
            "to finish or stop them manually.") in ecs_doc("", operation="UpdateContainerInstancesState")
    # So job-events stops them itself, and may.
    assert any("ecs:StopTask" in p.actions for p in PERMISSIONS)
    spec = JobSpec(image="i", command=(), gpus=1, vcpus=1, memory_mib=1, max_attempts=3)
    running = [L.JobRecord(job_id=f"sub-20261122120000-abcdef-0000{n}", submission_id="sub-20261122120000-abcdef",
                           index=n, state=L.RUNNING, attempt=1, runs=1, start_failures=0, submitted_at=0, updated_at=0,
                           spec=spec, placement=L.Placement("us-east-1", "gpu1", CLUSTER, "ci", instance, "g5.12xlarge",
                                                            f"task-{n}"))
               for n, instance in enumerate(("i-notice", "i-notice", "i-other"))]
    decisions = D.decide_interruption("i-notice", running)
    assert [d.stop_task for d in decisions] == ["task-0", "task-1"]


def test_the_job_container_waits_its_stop_timeout_after_sigterm_within_the_notice():
    # On EC2, the container's stopTimeout applies; ECS_CONTAINER_STOP_TIMEOUT only where a container sets
    # none (the stacks set both to JOB_STOP_TIMEOUT_SECONDS: tests/program/test_checkpoint_buckets.py).
    doc = ecs_doc("ContainerDefinition", "stopTimeout")
    assert ("For tasks that use the EC2 launch type, if the stopTimeout parameter isn't specified, the value set for "
            "the Amazon ECS container agent configuration variable ECS_CONTAINER_STOP_TIMEOUT is used.") in doc
    assert JOB_STOP_TIMEOUT_SECONDS < NOTICE_SECONDS


def test_per_image_revisions_keep_the_stop_timeout(home):
    build_fleet(size=0)
    ecs = boto3.client("ecs", HOME)
    ecs.register_task_definition(family=FAMILY, containerDefinitions=[
        {**ecs.describe_task_definition(taskDefinition=FAMILY)["taskDefinition"]["containerDefinitions"][0],
         "stopTimeout": JOB_STOP_TIMEOUT_SECONDS}])
    arn = TaskDefinitions(ecs).arn_for(FAMILY, "ghcr.io/team/train:7")
    (container,) = ecs.describe_task_definition(taskDefinition=arn)["taskDefinition"]["containerDefinitions"]
    assert (container["image"], container["stopTimeout"]) == ("ghcr.io/team/train:7", JOB_STOP_TIMEOUT_SECONDS)


def test_the_notice_drains_the_machine_and_stops_only_its_jobs_tasks(home):
    (busy_id, busy_arn), (other_id, other_arn) = sorted(build_fleet(size=2).items())
    ecs = boto3.client("ecs", HOME)
    ledger = L.Ledger(boto3.client("dynamodb", HOME), home["table"])
    spec = JobSpec(image="i", command=(), gpus=1, vcpus=1, memory_mib=64, max_attempts=3)
    tasks = {}
    for n, (instance_id, arn) in enumerate(((busy_id, busy_arn), (other_id, other_arn))):
        job_id = f"sub-20261122120000-abcdef-0000{n}"
        (task,) = ecs.start_task(cluster=CLUSTER, taskDefinition=FAMILY, containerInstances=[arn], startedBy=job_id,
                                 overrides={"containerOverrides": [{"name": "job", "environment": [
                                     {"name": "MLFLEET_ATTEMPT", "value": "1"}]}]})["tasks"]
        tasks[instance_id] = task["taskArn"]
        ledger.put_new(L.JobRecord(job_id=job_id, submission_id="sub-20261122120000-abcdef", index=n, state=L.RUNNING,
                                   attempt=1, runs=1, start_failures=0, submitted_at=0.0, updated_at=0.0, spec=spec,
                                   placement=L.Placement(HOME, "gpu1", CLUSTER, arn, instance_id, "g5.12xlarge",
                                                         task["taskArn"])))
    now = datetime(2026, 11, 22, 12, tzinfo=timezone.utc)
    event = {"detail-type": D.INTERRUPTION, "source": "aws.ec2", "region": HOME, "time": now.isoformat(),
             "detail": {"instance-id": busy_id, "instance-action": "terminate"}}
    settings = event_settings(home)
    job_event(event, settings, now=now + timedelta(seconds=5))

    instances = ecs.describe_container_instances(cluster=CLUSTER, containerInstances=[busy_arn, other_arn])
    assert {ci["ec2InstanceId"]: ci["status"] for ci in instances["containerInstances"]} == {
        busy_id: "DRAINING", other_id: "ACTIVE"}
    described = {t["taskArn"]: t for t in ecs.describe_tasks(cluster=CLUSTER, tasks=list(tasks.values()))["tasks"]}
    assert described[tasks[busy_id]]["desiredStatus"] == "STOPPED"
    assert "spot interruption" in described[tasks[busy_id]]["stoppedReason"]
    assert described[tasks[other_id]]["desiredStatus"] == "RUNNING"
