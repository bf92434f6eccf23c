"""A job that fails or is quarantined reaches the dead-letter queue at least once, whatever its send meets.

The race each test guards against: the ledger write that moves a job to FAILED (or QUARANTINED) applies,
then the SendMessage to the dead-letter queue fails (throttled here; a timeout of the function between the
two is the same case). Before lambdas/jobs/dead_letters.py, nothing sent it again: a redelivered event or
the next run found the job already FAILED. Now the message was owed before the write, and the next
scheduler run past the grace sends it, once, with the job's id and reason.
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone

import pytest
from botocore.exceptions import ClientError
from conftest import CLUSTER, ENV, FAMILY, HOME, aws_client, build_fleet, fleets_json, open_admission, scheduler_settings
from faults import error_response

from lambdas.common.aws import client
from lambdas.common.catalog import load_catalog
from lambdas.job_events import handler as job_events
from lambdas.jobs import ledger as L
from lambdas.jobs.dead_letters import GRACE_SECONDS, DeadLetters
from lambdas.jobs.quarantine import Quarantine
from lambdas.jobs.spec import assign_ids, parse_spec
from lambdas.scheduler import handler as scheduler

NOW = datetime(2026, 11, 22, 12, tzinfo=timezone.utc)
SUB = "sub-20261122115000-0a0b0c"


@pytest.fixture
def world(home, faults):
    instances = build_fleet(size=1)
    open_admission()
    aws_client("sns", HOME).create_topic(Name=f"mlfleet-{ENV}-alerts")
    return home, faults, instances


def ledger() -> L.Ledger:
    return L.Ledger(aws_client("dynamodb", HOME), f"mlfleet-{ENV}-jobs")


def outbox(home) -> DeadLetters:
    return DeadLetters.of(ledger(), aws_client("sqs", HOME), home["dlq"])


def spec(max_attempts: int = 3):
    return parse_spec({"image": "ghcr.io/team/train:1", "command": ["python", "train.py"], "gpus": 1, "vcpus": 1,
                       "memory_mib": 1024}, fleet_regions=(HOME,), catalog=load_catalog(),
                      default_max_attempts=max_attempts)


def take_dead_letters(home) -> list[dict]:
    """The messages in the dead-letter queue now, each deleted once read."""
    sqs, found = aws_client("sqs", HOME), []
    while got := sqs.receive_message(QueueUrl=home["dlq"], MaxNumberOfMessages=10).get("Messages", []):
        for message in got:
            found.append(json.loads(message["Body"]))
            sqs.delete_message(QueueUrl=home["dlq"], ReceiptHandle=message["ReceiptHandle"])
    return found


def run_scheduler(home, minutes: float) -> dict:
    return scheduler.run(scheduler_settings(home), lambda: 170_000, now=NOW + timedelta(minutes=minutes))


# Each path dead-letters one job (the first call) and is then delivered or run again (the replay);
# each returns the job id and the reason its message carries.

def _fail_in_job_events(home, instances) -> tuple[str, str, callable]:
    """The last of a job's two attempts ends in a spot interruption: the job-events function fails it."""
    (instance_id, arn), = instances.items()
    (job,) = assign_ids(SUB, [spec(max_attempts=2)])
    task = aws_client("ecs", HOME).start_task(cluster=CLUSTER, taskDefinition=FAMILY, containerInstances=[arn],
                                              startedBy=job.job_id)["tasks"][0]["taskArn"]
    record = L.new_record(job, NOW.timestamp() - 3600)
    assert ledger().put_new(L.JobRecord(**{**vars(record), "state": L.RUNNING, "attempt": 1, "runs": 2,
                                           "placement": L.Placement(HOME, "gpu1", CLUSTER, arn, instance_id,
                                                                    "g5.12xlarge", task)}))
    event = {"detail-type": "ECS Task State Change", "source": "aws.ecs", "region": HOME,
             "time": NOW.isoformat().replace("+00:00", "Z"),
             "detail": {"clusterArn": f"arn:aws:ecs:{HOME}:123456789012:cluster/{CLUSTER}", "taskArn": task,
                        "startedBy": job.job_id, "lastStatus": "STOPPED", "desiredStatus": "STOPPED",
                        "stopCode": "SpotInterruption", "stoppedReason": "Your Spot Task was interrupted.",
                        "containers": [{"name": "job", "exitCode": 143}],
                        "overrides": {"containerOverrides": [{"name": "job", "environment": [
                            {"name": "MLFLEET_ATTEMPT", "value": "1"}]}]}}}
    settings = job_events.Settings(
        environment=ENV, jobs_table=home["table"], jobs_queue_url=home["queue"], jobs_dlq_url=home["dlq"],
        fleets=fleets_json(), rebalance_timeout_minutes=30,
        notify_email_topic_arn=f"arn:aws:sns:{HOME}:123456789012:mlfleet-{ENV}-job-notifications")

    def deliver():
        return job_events.handle(event, settings, now=NOW)["errors"]

    return job.job_id, "attempts exhausted (2 of 2)", deliver


def _fail_in_scheduler(home, faults) -> tuple[str, str, callable]:
    """ECS refuses the job's StartTask for good: the scheduler fails it (starting.fail_job)."""
    (job,) = assign_ids(SUB, [spec()])
    assert ledger().put_new(L.new_record(job, NOW.timestamp() - 600))
    faults.stubs[("ecs", "StartTask")] = lambda params: error_response(
        "ecs", "InvalidParameterException", "Container Overrides length must be at most 8192")

    def deliver():
        return len(run_scheduler(home, 0)["errors"])

    return job.job_id, "Container Overrides length must be at most 8192", deliver


def _quarantine(home) -> tuple[str, str, callable]:
    """A record without its spec: quarantined (Quarantine.item, as the scheduler and job-events do)."""
    job_id = f"{SUB}-00042"
    aws_client("dynamodb", HOME).put_item(TableName=home["table"], Item={
        "job_id": {"S": job_id}, "submission_id": {"S": SUB}, "index": {"N": "42"}, "state": {"S": L.QUEUED},
        "attempt": {"N": "0"}, "submitted_at": {"N": "1"}, "updated_at": {"N": "1"}, "version": {"N": "0"}})

    def deliver():
        functions_ledger = L.Ledger(client("dynamodb"), home["table"])
        try:
            functions_ledger.get(job_id)
        except L.UndecodableRecord as error:
            assert Quarantine(functions_ledger, client("sqs"), home["dlq"], by="scheduler").item(error.bad, NOW.timestamp())
        return 0

    return job_id, "quarantined: field 'spec' is missing", deliver


def _path(name: str, world):
    home, faults, instances = world
    if name == "job-events":
        return _fail_in_job_events(home, instances)
    if name == "scheduler":
        return _fail_in_scheduler(home, faults)
    return _quarantine(home)


PATHS = ["job-events", "scheduler", "quarantine"]


@contextmanager
def _noting(errors):
    """Note (not raise) one of `errors` escaping the block, so the test goes on to show what follows."""
    escaped: list[str] = []
    try:
        yield escaped
    except errors as error:
        escaped.append(f"{type(error).__name__}: {error}")


@pytest.mark.parametrize("path", PATHS)
def test_a_dead_letter_whose_send_failed_is_sent_once_by_a_later_scheduler_run(world, path):
    home, faults, _ = world
    job_id, reason, deliver = _path(path, world)
    failed_send = (job_events.RetryLater, ClientError)  # what the code before the outbox let escape
    with faults.active(("sqs", "SendMessage"), "throttle", when=lambda params: params.get("QueueUrl") == home["dlq"]):
        with _noting(failed_send) as escaped:
            errors = deliver()
    assert faults.injected and take_dead_letters(home) == []
    deliver()  # the event delivered again, the next run: the job has moved on, nothing to send from here
    assert take_dead_letters(home) == []

    # Within the grace the debt's writer may still be at work: the sweep leaves it.
    run_scheduler(home, GRACE_SECONDS / 60 - 1)
    assert take_dead_letters(home) == []
    later = run_scheduler(home, GRACE_SECONDS / 60 + 1)

    (message,) = take_dead_letters(home)
    assert message["job_id"] == job_id and reason in message["reason"]
    assert later["dead_lettered"] == [job_id] and later["errors"] == []
    assert outbox(home).owed() == []
    run_scheduler(home, GRACE_SECONDS / 60 + 2)
    assert take_dead_letters(home) == []
    # The failed send was owed, not an error of the event or the run (nothing for Lambda to retry).
    assert not escaped and errors == 0, escaped


@pytest.mark.parametrize("path", PATHS)
def test_a_dead_letter_sent_at_once_is_sent_once_and_nothing_stays_owed(world, path):
    home, _, _ = world
    job_id, reason, deliver = _path(path, world)
    assert deliver() == 0
    (message,) = take_dead_letters(home)
    assert message["job_id"] == job_id and reason in message["reason"]
    assert outbox(home).owed() == []
    run_scheduler(home, GRACE_SECONDS / 60 + 1)
    assert take_dead_letters(home) == []


def test_a_debt_whose_ledger_write_never_applied_is_cleared_unsent(world):
    """A writer that noted its debt and died before its write (or lost the write to another writer and
    died before clearing): once past the grace the job is not FAILED, so nothing is sent."""
    home, _, _ = world
    (job,) = assign_ids(SUB, [spec()])
    assert ledger().put_new(L.new_record(job, NOW.timestamp()))
    outbox(home).owe(job.job_id, L.FAILED, 1, NOW.timestamp())
    assert outbox(home).sweep(NOW.timestamp() + GRACE_SECONDS + 1) == []
    assert outbox(home).owed() == [] and take_dead_letters(home) == []
    assert ledger().get(job.job_id).state == L.QUEUED


def test_a_losing_writer_never_clears_the_winners_debt(world):
    """Two writers owe the same job's message; the one whose write did not apply clears only its own debt,
    so the winner's failed send is still made by the sweep."""
    home, _, _ = world
    (job,) = assign_ids(SUB, [spec()])
    record = L.new_record(job, NOW.timestamp())
    assert ledger().put_new(L.JobRecord(**{**vars(record), "state": L.FAILED,
                                           "reasons": ({"at": 1.0, "attempt": 1, "state": L.FAILED, "reason": "boom"},)}))
    winner, loser = (outbox(home).owe(job.job_id, L.FAILED, 1, NOW.timestamp()) for _ in range(2))
    outbox(home).settle(loser, applied=False, reason="boom")
    assert [d.name for d in outbox(home).owed()] == [winner.name]
    assert outbox(home).sweep(NOW.timestamp() + GRACE_SECONDS + 1) == [job.job_id]
    assert take_dead_letters(home) == [{"job_id": job.job_id, "reason": "boom", "attempts": 1}]
