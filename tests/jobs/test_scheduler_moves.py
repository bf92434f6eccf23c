"""Moving a checkpointing job off a machine far dearer than it needs (planning/moves.py), end to end against
moto: the scheduler run stops its task with the move reason (lambdas/scheduler/moving.py), and the job-events
function, given the task's stop, requeues it without counting an attempt.

Where moto differs from AWS: moto reports the group's instances as on-demand (no InstanceLifecycle), so the
scheduler prices the fleet's g5.12xlarge at its on-demand price, against the small fleet's g4dn.xlarge bought
for the job; in AWS both would be spot, and the move happens where the spot prices differ as much (the
planner's rule is tested on prices in tests/scheduler/test_moves.py). moto's StopTask keeps the reason as the
task's stoppedReason, as ECS does; the EventBridge event ECS would send is built here from the task.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import boto3
from conftest import CLUSTER, ENV, HOME, aws_client, build_fleet, open_admission, two_fleets_json
from test_job_events_handler import settings as event_settings
from test_scheduler_release_inputs import run_held

from lambdas.common.catalog import load_catalog
from lambdas.job_events import handler as job_events
from lambdas.jobs import ledger as L
from lambdas.jobs.checkpoints import MOVED_REASON
from lambdas.jobs.spec import assign_ids, parse_spec


def running_job(home, now: datetime, checkpoint_minutes: int | None) -> tuple[L.Ledger, str, str]:
    """A one-GPU job RUNNING for five hours on the fleet's one g5.12xlarge, and its task."""
    (instance_id, arn), = build_fleet(size=1).items()
    document = {"image": "ghcr.io/team/train:1", "command": ["python", "train.py"], "gpus": 1, "vcpus": 1,
                "memory_mib": 4096}
    if checkpoint_minutes is not None:
        document["checkpoint_interval_minutes"] = checkpoint_minutes
    spec = parse_spec(document, fleet_regions=(HOME,), catalog=load_catalog(), default_max_attempts=2)
    (job,) = assign_ids("sub-20261122110000-abcdef", [spec])
    task = aws_client("ecs", HOME).start_task(cluster=CLUSTER, taskDefinition=f"mlfleet-{ENV}-gpu-job",
                                              containerInstances=[arn], startedBy=job.job_id)["tasks"][0]["taskArn"]
    started = (now - timedelta(hours=5)).timestamp()
    ledger = L.Ledger(aws_client("dynamodb", HOME), home["table"])
    record = L.new_record(job, started - 60)
    assert ledger.put_new(L.JobRecord(**{
        **vars(record), "state": L.RUNNING, "attempt": 1, "runs": 1, "placement": L.Placement(
            HOME, "gpu1", CLUSTER, arn, instance_id, "g5.12xlarge", task),
        "reasons": ({"state": L.RUNNING, "at": started, "reason": "task running"},)}))
    return ledger, job.job_id, task


def stopped_event(job_id: str, task: str) -> dict:
    """The "ECS Task State Change" ECS sends for the stopped task, from what DescribeTasks says of it."""
    described = boto3.client("ecs", HOME).describe_tasks(cluster=CLUSTER, tasks=[task])["tasks"][0]
    return {"detail-type": "ECS Task State Change", "source": "aws.ecs", "region": HOME,
            "time": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "detail": {"clusterArn": f"arn:aws:ecs:{HOME}:123456789012:cluster/{CLUSTER}", "taskArn": task,
                       "startedBy": job_id, "lastStatus": "STOPPED", "desiredStatus": "STOPPED",
                       "stopCode": "UserInitiated", "stoppedReason": described["stoppedReason"],
                       "containers": [{"name": "job", "exitCode": 143}],
                       "overrides": {"containerOverrides": [{"name": "job", "environment": [
                           {"name": "MLFLEET_ATTEMPT", "value": "1"}]}]}}}


def test_a_checkpointing_job_is_moved_and_requeued_with_its_attempt_not_counted(aws, home):
    now = datetime.now(timezone.utc) + timedelta(minutes=2)
    open_admission()
    ledger, job_id, task = running_job(home, now, checkpoint_minutes=30)

    summary = run_held(home, now, fleets=two_fleets_json())

    assert summary.get("jobs_moved") == 1, summary["errors"]
    described = boto3.client("ecs", HOME).describe_tasks(cluster=CLUSTER, tasks=[task])["tasks"][0]
    assert described["desiredStatus"] == "STOPPED" and described["stoppedReason"].startswith(MOVED_REASON)
    # Until the task has stopped, the ledger holds the job RUNNING: no second attempt can start beside it.
    assert ledger.get(job_id).state == L.RUNNING

    job_events.handle(stopped_event(job_id, task), event_settings(home))
    record = ledger.get(job_id)
    assert (record.state, record.runs, record.attempt) == (L.QUEUED, 1, 1), record.last_reason
    sent = aws_client("sqs", HOME).receive_message(QueueUrl=home["queue"], MaxNumberOfMessages=10)["Messages"]
    assert len(sent) == 1 and job_id in sent[0]["Body"]


def test_a_job_without_checkpoints_is_never_moved(aws, home):
    now = datetime.now(timezone.utc) + timedelta(minutes=2)
    open_admission()
    ledger, job_id, task = running_job(home, now, checkpoint_minutes=None)
    summary = run_held(home, now, fleets=two_fleets_json())
    assert not summary.get("jobs_moved")
    described = boto3.client("ecs", HOME).describe_tasks(cluster=CLUSTER, tasks=[task])["tasks"][0]
    assert described["desiredStatus"] == "RUNNING" and ledger.get(job_id).state == L.RUNNING
