"""The job-events function against any event it may receive, built from a valid one by perturbing it at
any depth: a key dropped, a value replaced by any JSON (None, a number past what DynamoDB stores, huge or
unusual text), a value wrapped in a list, an unknown detail-type, records added to a stream batch.

The promise (lambdas/job_events/handler.py, docs/jobs.md): an event that cannot be read is dropped with one
`bad-event` line whose error names the key and its bad value, having touched nothing; any other event is
acted on, and nothing it carries fails for good (RetryLater is for a failure that may pass: none in moto).
So for each perturbed event the handler's answer is one of:
  - rejected: named key and value in the answer and in the log line; the ledger, the queues and the
    instance as they were;
  - ignored (a detail-type or region it does not handle): logged, nothing touched;
  - acted on: the job of a stop is moved on from RUNNING (never left RUNNING with its task stopped), the
    job of an interrupted instance is requeued, a job-event line logged.
A stream batch's readable records are acted on whatever else the batch holds.

tests/jobs/test_properties.py checks that no shape makes the handler raise; this file checks what it does.
HYPOTHESIS_PROFILE=ci runs few examples; EVENT_EXAMPLES=N runs N (tests/perturbation.py).
"""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest
from conftest import CLUSTER, ENV, HOME, aws_client, build_fleet, fleets_json
from hypothesis import example, given
from hypothesis import strategies as st
from perturbation import Lines, any_json, budget, perturbed

from lambdas.common.catalog import load_catalog
from lambdas.job_events import decide as D
from lambdas.job_events import handler as job_events
from lambdas.jobs import ledger as L
from lambdas.jobs.spec import assign_ids, parse_spec

NOW = datetime(2026, 11, 22, 12, tzinfo=timezone.utc)
SUB = "sub-20261122110000-f0e1d2"
VALUES = any_json("Z", "2026-02-30T00:00:00Z", "9999-12-31T23:59:59Z", "0001-01-01T00:00:00+23:59",
                  "i-0123456789abcdef0", "\u0663", "1")


# --- the world: a fleet of one instance, one job RUNNING there -----------------------------------------------

@pytest.fixture
def lines():
    with Lines() as logged:
        yield logged


def event_settings(home) -> job_events.Settings:
    return job_events.Settings(environment=ENV, jobs_table=home["table"], jobs_queue_url=home["queue"],
                               jobs_dlq_url=home["dlq"], fleets=fleets_json(), rebalance_timeout_minutes=30,
                               notify_email_topic_arn=f"arn:aws:sns:{HOME}:123456789012:mlfleet-{ENV}-job-notifications")


@pytest.fixture
def world(home):
    """One instance in the fleet, one job RUNNING on it (attempt 1 of 3) with its task; returns what a test
    restores between examples."""
    (instance_id, arn), = build_fleet(size=1).items()
    spec = parse_spec({"image": "img:1", "command": ["run"], "gpus": 1, "vcpus": 1, "memory_mib": 1024},
                      fleet_regions=(HOME,), catalog=load_catalog(), default_max_attempts=3)
    (job,) = assign_ids(SUB, [spec])
    task = aws_client("ecs", HOME).start_task(cluster=CLUSTER, taskDefinition=f"mlfleet-{ENV}-gpu-job",
                                              containerInstances=[arn], startedBy=job.job_id)["tasks"][0]["taskArn"]
    placement = L.Placement(HOME, "gpu1", CLUSTER, arn, instance_id, "g5.12xlarge", task, "spot", 2.0,
                            NOW.timestamp() - 3600)
    record = L.JobRecord(**{**vars(L.new_record(job, NOW.timestamp() - 4000)), "state": L.RUNNING, "attempt": 1,
                            "runs": 1, "placement": placement})
    item = L.encode(record)
    aws_client("dynamodb", HOME).put_item(TableName=home["table"], Item=item)
    return {**home, "job_id": job.job_id, "item": item, "instance_id": instance_id, "arn": arn, "task": task}


def restore(world) -> None:
    dynamodb, sqs = aws_client("dynamodb", HOME), aws_client("sqs", HOME)
    dynamodb.put_item(TableName=world["table"], Item=world["item"])
    dynamodb.delete_item(TableName=world["table"], Key={"job_id": {"S": "#outbox/dead-letters"}})
    for url in (world["queue"], world["dlq"]):  # (PurgeQueue takes one call a minute)
        while messages := sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages"):
            sqs.delete_message_batch(QueueUrl=url, Entries=[{"Id": str(n), "ReceiptHandle": m["ReceiptHandle"]}
                                                            for n, m in enumerate(messages)])


def untouched(world) -> bool:
    item = aws_client("dynamodb", HOME).get_item(TableName=world["table"], Key={"job_id": {"S": world["job_id"]}})["Item"]
    sent = aws_client("sqs", HOME).receive_message(QueueUrl=world["queue"], MaxNumberOfMessages=10,
                                                   VisibilityTimeout=0).get("Messages", [])
    return item == world["item"] and not sent


def names_the_key(error: str, event) -> bool:
    """The error names a key of the event (as `where.key`) or says the event itself is not an object."""
    return error.startswith("EventError: ") and (" is not an object" in error or any(
        f"{where}.{key}" in error for where in ("event", "detail") for key in
        ("detail-type", "detail", "region", "time", "instance-id", "clusterArn", "taskArn", "lastStatus",
         "stoppedAt", "overrides", "containers")))


def check(event, world, lines) -> dict:
    """Run the handler on `event` and check the promise for the answer it gave; returns the answer."""
    del lines[:]
    result = job_events.handle(event, event_settings(world), now=NOW)
    if "rejected" in result:
        assert names_the_key(result["rejected"], event), result
        assert [line["decision"] for line in lines] == ["bad-event"] and lines[0]["error"] == result["rejected"]
        assert untouched(world)
    elif "ignored" in result:
        assert [line["decision"] for line in lines] == ["ignore-event"] and untouched(world)
    else:
        assert result["errors"] == 0, result
    return result


# --- ECS task state changes ----------------------------------------------------------------------------------

def stop_event(world, exit_code=0) -> dict:
    return {"version": "0", "id": "e1", "detail-type": D.TASK_STATE_CHANGE, "source": "aws.ecs", "account": "123456789012",
            "time": "2026-11-22T12:00:00Z", "region": HOME, "resources": [world["task"]], "detail": {
                "clusterArn": f"arn:aws:ecs:{HOME}:123456789012:cluster/{CLUSTER}", "taskArn": world["task"],
                "containerInstanceArn": world["arn"], "startedBy": world["job_id"], "lastStatus": "STOPPED",
                "desiredStatus": "STOPPED", "stopCode": "EssentialContainerExited",
                "stoppedReason": "Essential container in task exited", "stoppedAt": "2026-11-22T12:00:00.000Z",
                "containers": [{"name": "job", "lastStatus": "STOPPED", "exitCode": exit_code}],
                "overrides": {"containerOverrides": [{"name": "job", "environment": [
                    {"name": "MLFLEET_ATTEMPT", "value": "1"}]}]}}}


VALID_STOP = stop_event({"task": "TASK", "arn": "CI", "job_id": "JOB"})


def bind(event, world):
    """The template's placeholders replaced by the world's task, container instance and job."""
    text = json.dumps(event)
    for placeholder, value in (("TASK", world["task"]), ("CI", world["arn"]), ("JOB", world["job_id"])):
        text = text.replace(f'"{placeholder}"', json.dumps(value))
    return json.loads(text)


@budget(ci=25)
@given(event=perturbed(VALID_STOP, VALUES))
@example(event={**VALID_STOP, "detail": {**VALID_STOP["detail"], "containers": [{"name": "job", "exitCode": 10**40}]}})
@example(event={**VALID_STOP, "detail": {**VALID_STOP["detail"], "stoppedReason": "x" * 500_000}})
def test_a_task_stop_is_acted_on_or_rejected_naming_the_key_and_never_leaves_the_job_running(world, lines, event):
    restore(world)
    result = check(bind(event, world), world, lines)
    if "decisions" in result:
        (decision,) = result["decisions"]
        assert [line["decision"] for line in lines if line["decision"] == "job-event"] == ["job-event"]
        containers = event.get("detail", {}).get("containers") if isinstance(event.get("detail"), dict) else None
        unreadable = [n for n, c in enumerate(containers if isinstance(containers, list) else [])
                      if isinstance(c, dict) and c.get("exitCode") is not None and not (
                          type(c["exitCode"]) is int and -2**31 <= c["exitCode"] < 2**31)]
        if decision["job_id"] == world["job_id"]:  # the job's own task: an exit code it could not read is named
            assert [line["error"].split("=")[0] for line in lines if line["decision"] == "event-value-unread"] == [
                f"detail.containers[{n}].exitCode" for n in unreadable]
        record = L.Ledger(aws_client("dynamodb", HOME), world["table"]).get(world["job_id"])
        # A stop of the job's current task that the handler read moved it on; any other one changed nothing.
        assert (record.state != L.RUNNING) == bool(decision["applied"]), (decision, record.state)


# --- spot interruption warnings and rebalance recommendations -----------------------------------------------

VALID_NOTICE = {"version": "0", "id": "e2", "detail-type": D.INTERRUPTION, "source": "aws.ec2",
                "account": "123456789012", "time": "2026-11-22T12:00:00Z", "region": HOME, "resources": ["INSTANCE"],
                "detail": {"instance-id": "INSTANCE", "instance-action": "terminate"}}


@budget(ci=12)
@given(event=st.one_of(perturbed(VALID_NOTICE, VALUES), perturbed({**VALID_NOTICE, "detail-type": D.REBALANCE}, VALUES)))
def test_a_spot_notice_requeues_the_instances_job_or_is_rejected_naming_the_key(world, lines, event):
    restore(world)
    event = json.loads(json.dumps(event).replace('"INSTANCE"', json.dumps(world["instance_id"])))
    result = check(event, world, lines)
    ecs = aws_client("ecs", HOME)
    if result.get("decisions"):
        (decision,) = result["decisions"]
        record = L.Ledger(aws_client("dynamodb", HOME), world["table"]).get(world["job_id"])
        assert decision["applied"] and record.state == L.QUEUED and record.attempt == 1
        # The instance is ACTIVE again for the next example (the notice drained it).
        ecs.update_container_instances_state(cluster=CLUSTER, containerInstances=[world["arn"]], status="ACTIVE")


# --- the ledger's stream: a batch mixing good and bad records ------------------------------------------------

@pytest.fixture
def stream_world(home):
    """A submission of one job that asked to be told by e-mail, its job CANCELLED: its stream record."""
    aws_client("sns", HOME).create_topic(Name=f"mlfleet-{ENV}-job-notifications")
    spec = parse_spec({"image": "img:1", "command": ["run"], "gpus": 1, "vcpus": 1, "memory_mib": 1024,
                       "notify": ["ana@example.com"]}, fleet_regions=(HOME,), catalog=load_catalog(),
                      default_max_attempts=3, notify_channels=("email",))
    (job,) = assign_ids(SUB, [spec])
    led = L.Ledger(aws_client("dynamodb", HOME), home["table"])
    led.put_new(L.new_record(job, NOW.timestamp()))
    led.transition(job.job_id, L.CANCELLED, expect_states=[L.QUEUED], expect_attempt=0, reason="cancelled by ana",
                   now=NOW.timestamp())
    item = aws_client("dynamodb", HOME).get_item(TableName=home["table"], Key={"job_id": {"S": job.job_id}})["Item"]
    record = {"eventID": "1", "eventName": "MODIFY", "eventVersion": "1.1", "eventSource": "aws:dynamodb",
              "awsRegion": HOME, "eventSourceARN": f"arn:aws:dynamodb:{HOME}:123456789012:table/{home['table']}/stream/x",
              "dynamodb": {"Keys": {"job_id": {"S": job.job_id}}, "NewImage": item, "SequenceNumber": "1",
                           "SizeBytes": 100, "StreamViewType": "NEW_IMAGE"}}
    return {**home, "job_id": job.job_id, "item": item, "record": record}


@budget(ci=12)
@given(data=st.data())
def test_a_stream_batch_announces_each_ended_submission_whatever_else_it_holds(stream_world, lines, data):
    """The good record of a batch is announced (once: the first job's mark) however the other records of
    the batch are broken, wherever the good one stands; each record skipped is logged."""
    world = stream_world
    aws_client("dynamodb", HOME).put_item(TableName=world["table"], Item=world["item"])  # not announced yet
    bad = data.draw(st.lists(perturbed(world["record"], VALUES), min_size=1, max_size=3))
    batch = [*bad]
    batch.insert(data.draw(st.integers(0, len(bad))), world["record"])
    del lines[:]
    result = job_events.handler({"Records": batch}, settings=event_settings(world))
    assert result["submissions"][SUB] == "announced", result
    for line in lines:  # each record passed over names itself and its bad key
        if line["decision"] == "stream-record-skipped":
            assert line["error"].startswith(f"Records[{line['record']}]"), line
    item = aws_client("dynamodb", HOME).get_item(TableName=world["table"], Key={"job_id": {"S": world["job_id"]}})["Item"]
    assert item["notified"] == {"L": [{"S": "email"}]}
