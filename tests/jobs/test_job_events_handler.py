"""The job-events handler's edges: what it drops, what it ignores, what makes Lambda deliver an event again."""

from __future__ import annotations

import json

import pytest
from conftest import ACCOUNT, CLUSTER, ENV, HOME, aws_client, build_fleet, checkpoint_bucket, fleets_json

from lambdas.common.catalog import load_catalog
from lambdas.job_events import handler as job_events
from lambdas.jobs import ledger as L
from lambdas.jobs.spec import assign_ids, parse_spec

NOW_ISO = "2026-11-22T12:00:00Z"


def settings(home, account_id: str = "") -> job_events.Settings:
    return job_events.Settings(environment=ENV, jobs_table=home["table"], jobs_queue_url=home["queue"],
                               jobs_dlq_url=home["dlq"], fleets=fleets_json(), rebalance_timeout_minutes=30,
                               notify_email_topic_arn="arn:aws:sns:us-east-1:123456789012:mlfleet-dev-job-notifications",
                               account_id=account_id)


@pytest.mark.parametrize("event, fragment", [
    (None, "is not an object"),
    ({"detail-type": "ECS Task State Change", "region": HOME, "detail": "x"}, "detail='x' is not a JSON object"),
    ({"detail-type": "ECS Task State Change", "region": HOME, "detail": {"clusterArn": 5}}, "clusterArn='5' is not a string"),
    ({"detail-type": "EC2 Spot Instance Interruption Warning", "region": HOME, "time": "yesterday",
      "detail": {"instance-id": "i-0123456789abcdef0"}}, "event.time='yesterday': not an ISO-8601 time"),
    ({"detail-type": "Scheduled Event"}, "event.time is missing"),
])
def test_a_malformed_event_is_dropped_with_its_reason(aws, event, fragment):
    result = job_events.handle(event, settings({"table": "t", "queue": "q", "dlq": "d"}))
    assert fragment in result["rejected"]


def test_an_event_from_a_region_without_fleets_is_ignored(home):
    event = {"detail-type": "EC2 Spot Instance Interruption Warning", "region": "ap-south-2", "time": NOW_ISO,
             "detail": {"instance-id": "i-0123456789abcdef0"}}
    assert job_events.handle(event, settings(home)) == {"ignored": "region ap-south-2"}


def test_an_item_that_fails_makes_lambda_deliver_the_event_again_after_the_others(home, faults):
    build_fleet(size=1)
    event = {"detail-type": "EC2 Instance Rebalance Recommendation", "region": HOME, "time": NOW_ISO,
             "detail": {"instance-id": "i-0123456789abcdef0"}}
    with faults.active(("ec2", "DescribeInstances"), "throttle"), pytest.raises(job_events.RetryLater, match="RequestLimitExceeded"):
        job_events.handle(event, settings(home))
    assert job_events.handle(event, settings(home)) == {"tagged": False, "errors": 0}  # not an instance of ours


def test_an_undecodable_record_on_an_interrupted_instance_is_quarantined_and_the_others_are_requeued(home):
    """Issue 13: one ledger item the code cannot decode made every read of RUNNING jobs raise, so no
    interruption was handled for any job. Now the interruption requeues the jobs it can read and
    quarantines the one it cannot; nothing makes Lambda deliver the event again."""
    (instance_id, arn), = build_fleet(size=1).items()
    spec = parse_spec({"image": "ghcr.io/team/train:1", "command": ["python", "train.py"], "gpus": 1, "vcpus": 1,
                       "memory_mib": 1024}, fleet_regions=(HOME,), catalog=load_catalog(), default_max_attempts=3)
    submission = "sub-20261122110000-abcdef"
    good, broken = (job.job_id for job in assign_ids(submission, [spec, spec]))
    ledger = L.Ledger(aws_client("dynamodb", HOME), home["table"])
    ecs = aws_client("ecs", HOME)
    task = ecs.start_task(cluster=CLUSTER, taskDefinition=f"mlfleet-{ENV}-gpu-job", containerInstances=[arn],
                          startedBy=good)["tasks"][0]["taskArn"]
    record = L.new_record(assign_ids(submission, [spec, spec])[0], 1.0)
    placement = L.Placement(HOME, "gpu1", CLUSTER, arn, instance_id, "g5.12xlarge", task)
    assert ledger.put_new(L.JobRecord(**{**vars(record), "state": L.RUNNING, "attempt": 1, "runs": 1,
                                         "placement": placement}))
    # A RUNNING item without its spec on the same instance (a hand edit, an older writer).
    aws_client("dynamodb", HOME).put_item(TableName=home["table"], Item={
        "job_id": {"S": broken}, "submission_id": {"S": submission}, "index": {"N": "1"}, "state": {"S": L.RUNNING},
        "attempt": {"N": "1"}, "submitted_at": {"N": "1"}, "updated_at": {"N": "1"}, "version": {"N": "0"},
        "placement": {"M": {"instance_id": {"S": instance_id}}}})
    event = {"detail-type": "EC2 Spot Instance Interruption Warning", "region": HOME, "time": NOW_ISO,
             "detail": {"instance-id": instance_id, "instance-action": "terminate"}}

    result = job_events.handle(event, settings(home))

    assert result["errors"] == 0 and [d["job_id"] for d in result["decisions"]] == [good]
    requeued = ledger.get(good)
    assert (requeued.state, requeued.attempt) == (L.QUEUED, 1)
    with pytest.raises(L.UndecodableRecord) as parked:
        ledger.get(broken)
    assert parked.value.bad.quarantined
    (quarantined,) = ledger.quarantined()
    assert (quarantined.job_id, quarantined.by, quarantined.previous_state) == (broken, "job-events", L.RUNNING)
    sent = aws_client("sqs", HOME).receive_message(QueueUrl=home["queue"], MaxNumberOfMessages=10)["Messages"]
    assert [json.loads(m["Body"]) for m in sent] == [{"job_id": good, "attempt": 1}]
    assert ecs.describe_tasks(cluster=CLUSTER, tasks=[task])["tasks"][0]["desiredStatus"] == "STOPPED"


def _running_job(home, started_at: float, runs: int = 2) -> tuple[L.Ledger, str, str, str]:
    """A job RUNNING on the fleet's one machine since `started_at` (its RUNNING reason), with `runs` of its
    2 attempts used, and its task."""
    (instance_id, arn), = build_fleet(size=1).items()
    spec = parse_spec({"image": "ghcr.io/team/train:1", "command": ["python", "train.py"], "gpus": 1, "vcpus": 1,
                       "memory_mib": 1024, "checkpoint_interval_minutes": 30}, fleet_regions=(HOME,),
                      catalog=load_catalog(), default_max_attempts=2)
    (job,) = assign_ids("sub-20261122110000-abcdef", [spec])
    task = aws_client("ecs", HOME).start_task(cluster=CLUSTER, taskDefinition=f"mlfleet-{ENV}-gpu-job",
                                              containerInstances=[arn], startedBy=job.job_id)["tasks"][0]["taskArn"]
    record = L.new_record(job, started_at - 60)
    ledger = L.Ledger(aws_client("dynamodb", HOME), home["table"])
    assert ledger.put_new(L.JobRecord(**{
        **vars(record), "state": L.RUNNING, "attempt": 1, "runs": runs, "placement": L.Placement(
            HOME, "gpu1", CLUSTER, arn, instance_id, "g5.12xlarge", task),
        "reasons": ({"state": L.RUNNING, "at": started_at, "reason": "task running"},)}))
    return ledger, job.job_id, task, instance_id


def _spot_stop(job_id: str, task: str) -> dict:
    return {"detail-type": "ECS Task State Change", "source": "aws.ecs", "region": HOME, "time": NOW_ISO,
            "detail": {"clusterArn": f"arn:aws:ecs:{HOME}:123456789012:cluster/{CLUSTER}", "taskArn": task,
                       "startedBy": job_id, "lastStatus": "STOPPED", "desiredStatus": "STOPPED",
                       "stopCode": "SpotInterruption", "stoppedReason": "Your Spot Task was interrupted.",
                       "containers": [{"name": "job", "exitCode": 143}],
                       "overrides": {"containerOverrides": [{"name": "job", "environment": [
                           {"name": "MLFLEET_ATTEMPT", "value": "1"}]}]}}}


@pytest.mark.parametrize("saved_in_run, runs, state", [(True, 0, L.QUEUED), (False, 2, L.FAILED)],
                         ids=["checkpoint-in-the-run", "no-checkpoint-in-the-run"])
def test_a_spot_stop_after_a_checkpoint_in_the_run_uses_no_attempt(home, saved_in_run, runs, state):
    """The job's last attempt (2 of 2) ends in a spot interruption. It saved under its checkpoint location
    (the bucket the stack names in the region it ran in) during the run: requeued with its attempts back.
    Without a save since the run started (moto stamps objects with the wall clock, so the run starts after
    it or before it), the attempt counts and the job is dead-lettered."""
    import time

    wall = time.time()
    ledger, job_id, task, _ = _running_job(home, started_at=wall - 3600 if saved_in_run else wall + 3600)
    s3 = aws_client("s3", HOME)
    s3.create_bucket(Bucket=checkpoint_bucket())
    s3.put_object(Bucket=checkpoint_bucket(), Key=f"jobs/{job_id}/latest.pt", Body=b"state")
    # Another job's newer checkpoint is not this job's.
    s3.put_object(Bucket=checkpoint_bucket(), Key=f"jobs/{job_id}0/latest.pt", Body=b"state")

    job_events.handle(_spot_stop(job_id, task), settings(home, account_id=ACCOUNT))

    record = ledger.get(job_id)
    assert (record.state, record.runs) == (state, runs), record.last_reason
    assert ("attempts given back: checkpoint saved at" in record.last_reason) is saved_in_run


def test_without_the_account_or_the_bucket_every_interruption_uses_an_attempt(home):
    """No ACCOUNT_ID (an older stack), or a bucket that cannot be read: the attempt counts, as before the rule."""
    ledger, job_id, task, _ = _running_job(home, started_at=1.0)
    job_events.handle(_spot_stop(job_id, task), settings(home))
    assert (ledger.get(job_id).state, ledger.get(job_id).runs) == (L.FAILED, 2)


def test_an_unreadable_checkpoint_bucket_counts_the_attempt(home):
    ledger, job_id, task, _ = _running_job(home, started_at=1.0)  # no bucket: S3 answers NoSuchBucket
    job_events.handle(_spot_stop(job_id, task), settings(home, account_id=ACCOUNT))
    assert (ledger.get(job_id).state, ledger.get(job_id).runs) == (L.FAILED, 2)


def test_a_listing_of_an_unexpected_shape_counts_the_attempt_and_the_interruption_is_still_handled(home, monkeypatch):
    """Issue 13's rule for the new read: whatever the checkpoint listing raises, the job is requeued or
    dead-lettered as without the rule, and the event is not retried for it."""
    ledger, job_id, task, instance_id = _running_job(home, started_at=1.0)

    class Broken:
        def get_paginator(self, name):
            raise KeyError("LastModified")

    real_client = job_events.client
    monkeypatch.setattr(job_events, "client", lambda service, region=None: Broken() if service == "s3"
                        else real_client(service, region))
    event = {"detail-type": "EC2 Spot Instance Interruption Warning", "region": HOME, "time": NOW_ISO,
             "detail": {"instance-id": instance_id, "instance-action": "terminate"}}
    result = job_events.handle(event, settings(home, account_id=ACCOUNT))
    assert result["errors"] == 0
    assert (ledger.get(job_id).state, ledger.get(job_id).runs) == (L.FAILED, 2)


@pytest.mark.parametrize("exit_code", [143, 0], ids=["sigterm", "exit-0-after-saving"])
def test_the_stop_of_a_task_at_a_spot_notice_requeues_its_job_when_the_notice_could_not(home, faults, exit_code):
    """The race: the notice stops every job task on the instance (found from ECS), also the task of a job
    it could not requeue (its ledger write throttled; or a job the ledger's index did not list yet). ECS
    then reports that task STOPPED (stop code UserInitiated, the notice's reason) while the ledger still
    holds the run. It was judged by its exit code: 143 from SIGTERM FAILED and dead-lettered the job
    (not in retry_on_exit_codes), 0 marked it SUCCEEDED unfinished. The machine ended that run: the job
    goes back to the queue, once, and the notice's delivery again changes nothing."""
    ledger, job_id, task, instance_id = _running_job(home, started_at=1.0, runs=1)
    notice = {"detail-type": "EC2 Spot Instance Interruption Warning", "region": HOME, "time": NOW_ISO,
              "detail": {"instance-id": instance_id, "instance-action": "terminate"}}
    with faults.active(("dynamodb", "PutItem"), "throttle"), pytest.raises(job_events.RetryLater):
        job_events.handle(notice, settings(home))
    ecs = aws_client("ecs", HOME)
    (stopped,) = ecs.describe_tasks(cluster=CLUSTER, tasks=[task])["tasks"]
    assert (stopped["desiredStatus"], ledger.get(job_id).state) == ("STOPPED", L.RUNNING)

    stop = _spot_stop(job_id, task)
    stop["detail"].update(stopCode="UserInitiated", stoppedReason=stopped["stoppedReason"],
                          containers=[{"name": "job", "exitCode": exit_code}])
    job_events.handle(stop, settings(home))
    job_events.handle(notice, settings(home))  # Lambda's retry of the notice

    record = ledger.get(job_id)
    assert (record.state, record.attempt, record.runs) == (L.QUEUED, 1, 1), record.last_reason
    assert record.last_reason.startswith(f"spot interruption of {instance_id}")
    sqs = aws_client("sqs", HOME)
    sent = sqs.receive_message(QueueUrl=home["queue"], MaxNumberOfMessages=10)["Messages"]
    assert [json.loads(m["Body"]) for m in sent] == [{"job_id": job_id, "attempt": 1}]
    assert "Messages" not in sqs.receive_message(QueueUrl=home["dlq"], MaxNumberOfMessages=10)
