"""The job-events handler's edges: what it drops, what it ignores, what makes Lambda deliver an event again."""

from __future__ import annotations

import json

import pytest
from conftest import CLUSTER, ENV, HOME, aws_client, build_fleet, fleets_json

from lambdas.common.catalog import load_catalog
from lambdas.job_events import handler as job_events
from lambdas.jobs import ledger as L
from lambdas.jobs.spec import assign_ids, parse_spec

NOW_ISO = "2026-11-22T12:00:00Z"


def settings(home) -> job_events.Settings:
    return job_events.Settings(environment=ENV, jobs_table=home["table"], jobs_queue_url=home["queue"],
                               jobs_dlq_url=home["dlq"], fleets=fleets_json(), rebalance_timeout_minutes=30,
                               notify_email_topic_arn="arn:aws:sns:us-east-1:123456789012:mlfleet-dev-job-notifications")


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
