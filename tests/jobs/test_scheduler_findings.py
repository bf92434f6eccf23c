"""One bad record, message or answer never stops the scheduler: each finding of issue 13, against moto.

Each test sets up the one bad thing next to good work and checks that the run completes, the good work
goes on, and the bad item ends somewhere visible with its reason (quarantined, failed, or left for the
redrive policy), never retried forever.

Where moto differs from AWS: it accepts a partition key longer than DynamoDB's 2,048 bytes, so the test
of oversized job ids has GetItem refuse such keys as DynamoDB does ("ValidationException: One or more
parameter values were invalid: Size of hashkey has exceeded the maximum size limit of 2048 bytes").
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest
from conftest import (
    CLUSTER, ENV, FAMILY, HOME, aws_client, build_fleet, event_settings, job_service_value, open_admission,
    publish_job_service, run_mlfleet, scheduler_settings,
)
from faults import KINDS, error_response
from iam_conditions import allows

from components.functions.python_function import declared_permissions

from lambdas.common.catalog import load_catalog
from lambdas.common.permissions import statements
from lambdas.job_events import handler as job_events
from lambdas.jobs import cli
from lambdas.jobs import ledger as L
from lambdas.jobs.quarantine import ALERT_STATE_KEY, AlertState, Quarantine
from lambdas.jobs.spec import OVERRIDES_LIMIT, Job, SpecError, assign_ids, parse_spec
from lambdas.scheduler import handler as scheduler
from lambdas.scheduler import requests as scheduler_requests
from lambdas.scheduler import starting

NOW = datetime(2026, 11, 22, 12, tzinfo=timezone.utc)
SUB = "sub-20261122115000-0a0b0c"


@pytest.fixture
def world(home, faults):
    instances = build_fleet(size=1)  # one g5.12xlarge: 4 GPUs
    open_admission()
    aws_client("sns", HOME).create_topic(Name=f"mlfleet-{ENV}-alerts")
    return home, faults, instances


def spec(**extra):
    return parse_spec({"image": "ghcr.io/team/train:1", "command": ["python", "train.py"], "gpus": 1, "vcpus": 1,
                       "memory_mib": 1024, **extra}, fleet_regions=(HOME,), catalog=load_catalog(), default_max_attempts=3)


def ledger() -> L.Ledger:
    return L.Ledger(aws_client("dynamodb", HOME), f"mlfleet-{ENV}-jobs")


def queue_jobs(count: int, first: int = 0, **extra) -> list[str]:
    jobs = assign_ids(SUB, [spec(**extra)] * (first + count))[first:]
    for n, job in enumerate(jobs):
        assert ledger().put_new(L.new_record(job, (NOW - timedelta(minutes=10)).timestamp() + first + n))
    return [job.job_id for job in jobs]


def run(home, minutes: float = 0) -> dict:
    return scheduler.run(scheduler_settings(home), lambda: 170_000, now=NOW + timedelta(minutes=minutes))


def dead_letters(home) -> dict[str, str]:
    sqs = aws_client("sqs", HOME)
    got = sqs.receive_message(QueueUrl=home["dlq"], MaxNumberOfMessages=10).get("Messages", [])
    return {json.loads(m["Body"])["job_id"]: json.loads(m["Body"])["reason"] for m in got}


def put_raw(job_id: str, **attributes) -> None:
    item = {"job_id": {"S": job_id}, "submission_id": {"S": SUB}, "index": {"N": "0"}, "state": {"S": L.QUEUED},
            "attempt": {"N": "0"}, "submitted_at": {"N": str((NOW - timedelta(hours=1)).timestamp())},
            "updated_at": {"N": str(NOW.timestamp())}, "version": {"N": "0"}, **attributes}
    aws_client("dynamodb", HOME).put_item(TableName=f"mlfleet-{ENV}-jobs", Item={k: v for k, v in item.items() if v})


def test_an_undecodable_record_is_quarantined_once_and_blocks_nobody(world, caplog):
    home, faults, _ = world
    broken = f"{SUB}-00099"
    put_raw(broken)  # no spec: what a hand edit or an older writer leaves
    good = queue_jobs(2)
    aws_client("sqs", HOME).send_message(QueueUrl=home["queue"], MessageBody=json.dumps({"job_id": broken, "attempt": 0}))

    first = run(home)

    assert sorted(first["started"]) == good and first["quarantined"] == [broken] and first["errors"] == []
    with pytest.raises(L.UndecodableRecord) as error:
        ledger().get(broken)
    assert error.value.bad.quarantined
    (parked,) = ledger().quarantined()
    assert (parked.job_id, parked.previous_state, parked.by, parked.alerted) == (broken, L.QUEUED, "scheduler", True)
    assert parked.error == "field 'spec' is missing" and parked.document["attempt"] == 0  # the item kept as it was
    assert dead_letters(home) == {broken: "quarantined: field 'spec' is missing"}
    alerts = [p for p in faults.carried_out("sns", "Publish") if "quarantined" in p["Subject"]]
    assert len(alerts) == 1 and broken in alerts[0]["Message"] and f"mlfleet -e {ENV} quarantine" in alerts[0]["Message"]
    # The next run reads nothing of it, tells nobody again, and a late message naming it is deleted.
    aws_client("sqs", HOME).send_message(QueueUrl=home["queue"], MessageBody=json.dumps({"job_id": broken, "attempt": 0}))
    caplog.clear()
    second = run(home, 1)
    assert second["errors"] == [] and second["quarantined"] == []
    assert '"decision": "quarantined-job-message"' in caplog.text
    assert len([p for p in faults.carried_out("sns", "Publish") if "quarantined" in p["Subject"]]) == 1
    assert aws_client("sqs", HOME).get_queue_attributes(QueueUrl=home["queue"], AttributeNames=[
        "ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"])["Attributes"] == {
        "ApproximateNumberOfMessages": "0", "ApproximateNumberOfMessagesNotVisible": "0"}


def quarantined_reads(faults) -> int:
    """Queries of every quarantined record (the by-state index's QUARANTINED partition) that took effect."""
    return len([p for p in faults.carried_out("dynamodb", "Query")
                if p.get("ExpressionAttributeValues", {}).get(":state") == {"S": L.QUARANTINED}])


def quarantine_alerts(faults) -> list[dict]:
    return [p for p in faults.carried_out("sns", "Publish") if "quarantined" in p["Subject"]]


def test_quarantined_records_are_read_only_when_one_may_be_untold(world, caplog):
    """Finding the untold quarantined jobs reads every quarantined record, which stay until someone deletes
    them: a run reads them only after a quarantine, or an hour after the last look (quarantine.AlertState)."""
    home, faults, _ = world
    put_raw(f"{SUB}-00099")
    run(home)  # quarantines it: looks and tells
    assert quarantined_reads(faults) == 1 and len(quarantine_alerts(faults)) == 1
    run(home, 1)  # looks once more: the index may not have shown a job quarantined a moment before
    assert quarantined_reads(faults) == 2
    for minute in (2, 3, 60):
        assert run(home, minute)["errors"] == []
    assert quarantined_reads(faults) == 2, "nothing untold: one small item a run, no quarantined record read"
    caplog.clear()
    run(home, 61)
    assert quarantined_reads(faults) == 3 and '"why": "the hourly look' in caplog.text
    assert len(quarantine_alerts(faults)) == 1, "nobody told twice"


def test_a_quarantine_by_job_events_is_told_by_the_scheduler_s_next_run(world):
    home, faults, _ = world
    run(home)  # the first look: nothing quarantined
    broken = f"{SUB}-00077"
    put_raw(broken)
    led = ledger()
    led.by_state(L.QUEUED)
    assert Quarantine(led, aws_client("sqs", HOME), home["dlq"], by="job-events").item(led.undecodable[0],
                                                                                        (NOW + timedelta(minutes=1)).timestamp())
    run(home, 2)
    (alert,) = quarantine_alerts(faults)
    assert broken in alert["Message"] and quarantined_reads(faults) == 2
    run(home, 3)
    assert quarantined_reads(faults) == 2 and len(quarantine_alerts(faults)) == 1


def test_a_job_the_index_does_not_show_yet_is_told_by_the_next_run(world):
    """The by-state index is eventually consistent: the look right after a quarantine may not find the job
    (moto's index never lags: the first look's answer is made empty)."""
    home, faults, _ = world
    broken = f"{SUB}-00055"
    put_raw(broken)
    looks = []

    def index_lags_once(params):
        if params.get("ExpressionAttributeValues", {}).get(":state") == {"S": L.QUARANTINED} and not looks:
            looks.append(params)
            return {"Items": [], "Count": 0, "ScannedCount": 0}
        return None

    faults.stubs[("dynamodb", "Query")] = index_lags_once
    assert run(home)["quarantined"] == [broken] and looks and quarantine_alerts(faults) == []
    run(home, 1)
    (alert,) = quarantine_alerts(faults)
    assert broken in alert["Message"]


def test_a_job_quarantined_without_its_note_is_told_at_the_hourly_look(world):
    """The writer died between the quarantine and its note (or the note failed): told within the hour."""
    home, faults, _ = world
    run(home)
    broken = f"{SUB}-00066"
    put_raw(broken)
    led = ledger()
    led.by_state(L.QUEUED)
    assert led.quarantine(led.undecodable[0].item, "field 'spec' is missing", (NOW + timedelta(minutes=1)).timestamp(),
                          "job-events")  # no note
    run(home, 30)
    assert quarantine_alerts(faults) == []
    run(home, 60)
    (alert,) = quarantine_alerts(faults)
    assert broken in alert["Message"]


def test_a_quarantine_noted_during_a_look_is_looked_at_again_next_run(world):
    home, _, _ = world
    led = ledger()
    run(home)
    state = AlertState.read(led)
    assert state.checked_at == NOW.timestamp() and state.noted_at is None
    AlertState.note(led, NOW.timestamp() + 30)  # job-events, during the scheduler's look
    state.looked(led, NOW.timestamp() + 31)  # the look that read before the note: refused, the note kept
    assert AlertState.read(led).why_look(NOW.timestamp() + 60, quarantined_now=False) == (
        "a quarantine was noted since the last look")


def test_an_unreadable_alert_state_means_every_quarantined_record_is_read(world):
    home, faults, _ = world
    run(home)
    faults.stubs[("dynamodb", "GetItem")] = lambda params: (
        error_response("dynamodb", "ProvisionedThroughputExceededException", "slow down")
        if params.get("Key", {}).get("job_id") == {"S": ALERT_STATE_KEY} else None)
    run(home, 1)
    assert quarantined_reads(faults) == 2


@pytest.mark.parametrize("function", ["scheduler", "job_events"])
def test_both_quarantining_functions_may_read_and_write_the_alert_state_item(function):
    """AlertState uses the GetItem and UpdateItem on the table each function declares already; should either be
    narrowed to job keys (dynamodb:LeadingKeys), this fails before a deployment leaves notes unwritten."""
    policy = statements(declared_permissions(function), account="123456789012", region=HOME, environment=ENV)
    table = f"arn:aws:dynamodb:{HOME}:123456789012:table/mlfleet-{ENV}-jobs"
    for action in ("dynamodb:GetItem", "dynamodb:UpdateItem"):
        assert allows(policy, action, table, {"dynamodb:LeadingKeys": [ALERT_STATE_KEY]}), (function, action)


def test_a_record_mended_meanwhile_is_not_quarantined(world):
    home, _, _ = world
    broken = f"{SUB}-00042"
    put_raw(broken)
    led = ledger()
    assert led.by_state(L.QUEUED) == [] and [b.job_id for b in led.undecodable] == [broken]
    put_raw(broken, version={"N": "1"}, spec={"M": {}})  # someone rewrote it between the read and the quarantine
    assert led.quarantine(led.undecodable[0].item, "x", NOW.timestamp(), "test") is False
    assert ledger().quarantined() == []


def test_the_command_line_shows_quarantined_jobs(world):
    home, _, _ = world
    put_raw(f"{SUB}-00007", spec={"M": {"image": {"S": "x"}}})
    run(home)
    publish_job_service(job_service_value(queueUrl=home["queue"], deadLetterQueueUrl=home["dlq"]))
    code, out, _ = run_mlfleet("quarantine")
    assert code == 0 and out[0].split() == ["JOB", "QUARANTINED", "BY", "WAS", "REASON"]
    (row,) = [line for line in out if f"{SUB}-00007" in line]
    assert "scheduler" in row and "QUEUED" in row and "KeyError" in row and "field 'command'" not in row
    code, out, _ = run_mlfleet("quarantine", "--json")
    (parked,) = json.loads("\n".join(out))
    assert (parked["job_id"], parked["by"], parked["previous_state"]) == (f"{SUB}-00007", "scheduler", "QUEUED")
    code, _, err = run_mlfleet("list", "--state", "quarantined")
    assert code != 0 and "mlfleet quarantine" in err[0]
    code, _, err = run_mlfleet("status", f"{SUB}-00007")
    assert code != 0 and "cannot be read from the ledger" in err[0] and "mlfleet quarantine" in err[0]


def test_a_starting_job_whose_cluster_is_gone_is_released(world):
    home, _, instances = world
    (job_id,) = queue_jobs(1)
    (instance_id, arn), = instances.items()
    gone = L.Placement(HOME, "gpu1", "mlfleet-deleted", arn, instance_id, "g5.12xlarge")
    ledger().transition(job_id, L.STARTING, expect_states=[L.QUEUED], expect_attempt=0, reason="claimed",
                        now=(NOW - timedelta(minutes=10)).timestamp(), attempt=1, placement=gone)

    summary = run(home)

    assert summary["errors"] == [] and summary["recovered"] == 1
    record = ledger().get(job_id)
    assert record.start_failures == 1 and record.state == L.RUNNING and record.placement.cluster == CLUSTER


def largest_command(job_id: str) -> int:
    """The longest command argument a queued record of `job_id` can hold under DynamoDB's 400 KB (moto
    applies the limit); found by bisection, the probe record removed again."""
    low, high = 300_000, 409_600
    while high - low > 1:
        middle = (low + high) // 2
        (job,) = assign_ids(SUB, [spec(command=["x" * middle])])[:1]
        record = L.new_record(Job(job_id, SUB, 0, job.spec), NOW.timestamp())
        try:
            aws_client("dynamodb", HOME).put_item(TableName=f"mlfleet-{ENV}-jobs", Item=L.encode(record))
            low = middle
        except aws_client("dynamodb", HOME).exceptions.ClientError:
            high = middle
    aws_client("dynamodb", HOME).delete_item(TableName=f"mlfleet-{ENV}-jobs", Key={"job_id": {"S": job_id}})
    return low


def test_a_claim_dynamodb_refuses_quarantines_that_job_and_the_one_behind_it_starts(world):
    home, _, _ = world
    # An item 250 bytes under DynamoDB's 400 KB: the claim's placement and reason (~350 bytes) push it
    # over; the quarantine's note (~150 bytes) still fits.
    big = f"{SUB}-00000"
    filler = largest_command(big) - 250
    assert queue_jobs(1, command=["x" * filler]) == [big]
    (small,) = queue_jobs(1, first=1)

    summary = run(home)

    assert summary["started"] == [small] and summary["quarantined"] == [big] and summary["errors"] == []
    (parked,) = ledger().quarantined()
    assert parked.job_id == big and parked.error.startswith("claim refused: ValidationException")
    assert "maximum allowed size" in parked.error and parked.previous_state == L.QUEUED
    assert dead_letters(home)[big].startswith("quarantined: claim refused")
    assert run(home, 1)["errors"] == []  # and it is not tried again


@pytest.mark.parametrize("body", ["[" * 100_000, json.dumps({"job_id": "x" * 3_000, "attempt": 0}),
                                  json.dumps({"job_id": f"{SUB}-00001" + "9" * 3_000, "attempt": 0})])
def test_hostile_messages_are_left_for_the_redrive_policy_and_the_run_goes_on(world, body):
    home, faults, _ = world
    # DynamoDB refuses a partition key over 2,048 bytes; moto does not (see the module doc).
    faults.stubs[("dynamodb", "GetItem")] = _refuse_long_keys
    good = queue_jobs(2)
    sqs = aws_client("sqs", HOME)
    sqs.send_message(QueueUrl=home["queue"], MessageBody=body)
    sqs.send_message(QueueUrl=home["queue"], MessageBody=json.dumps({"job_id": good[0], "attempt": 0}))

    summary = run(home)

    assert summary["malformed"] == 1 and sorted(summary["started"]) == good and summary["errors"] == []


def _refuse_long_keys(params: dict):
    if len(params["Key"]["job_id"]["S"].encode()) > 2048:
        return error_response("dynamodb", "ValidationException", "One or more parameter values were invalid: Size of "
                              "hashkey has exceeded the maximum size limit of 2048 bytes")
    return None


def test_a_read_timeout_on_start_task_leaves_the_claim_to_the_recovery_and_starts_the_job_once(world):
    home, faults, _ = world
    jobs = queue_jobs(2)
    with faults.active(("ecs", "StartTask"), "timeout"):  # ECS started the task; its answer was lost
        first = run(home)
    assert first["errors"] == [] and first["started"] == [] and sorted(first["start_failed"]) == jobs
    assert {ledger().get(j).state for j in jobs} == {L.STARTING}
    assert run(home, 1)["started"] == []  # within the grace period nothing is started again

    later = run(home, starting.STARTING_GRACE.seconds / 60 + 1)

    assert later["recovered"] == 2 and later["errors"] == []
    ecs = aws_client("ecs", HOME)
    for job_id in jobs:
        record = ledger().get(job_id)
        (task,) = ecs.describe_tasks(cluster=CLUSTER, tasks=ecs.list_tasks(cluster=CLUSTER, startedBy=job_id)["taskArns"])["tasks"]
        assert (record.state, record.attempt, record.placement.task_arn) == (L.RUNNING, 1, task["taskArn"])


def test_a_throttled_start_task_is_released_uncounted_and_started_next_run(world):
    home, faults, _ = world
    (job_id,) = queue_jobs(1)
    with faults.active(("ecs", "StartTask"), "throttle"):
        first = run(home)
    record = ledger().get(job_id)
    assert first["errors"] == [] and (record.state, record.start_failures) == (L.QUEUED, 0)
    assert run(home, 1)["started"] == [job_id]


def test_a_job_ecs_refuses_for_its_overrides_fails_at_once(world):
    home, faults, _ = world
    (job_id,) = queue_jobs(1)
    # ECS's own refusal of a job whose overrides it counts differently from us.
    faults.stubs[("ecs", "StartTask")] = lambda params: error_response(
        "ecs", "InvalidParameterException", "Container Overrides length must be at most 8192")
    summary = run(home)
    record = ledger().get(job_id)
    assert summary["errors"] == [] and record.state == L.FAILED and record.start_failures == 1
    assert "Container Overrides length must be at most 8192" in record.last_reason
    assert "Container Overrides length" in dead_letters(home)[job_id]


def test_a_record_whose_overrides_are_over_the_limit_fails_without_calling_ecs(world):
    home, faults, _ = world
    (job_id,) = queue_jobs(1, command=["python", "-c", "x" * OVERRIDES_LIMIT])  # written before the check existed
    summary = run(home)
    record = ledger().get(job_id)
    assert summary["errors"] == [] and record.state == L.FAILED
    assert f"over ECS's limit of {OVERRIDES_LIMIT:,}" in record.last_reason
    assert ("ecs", "StartTask") not in faults.calls


def test_the_command_line_refuses_a_command_over_the_overrides_limit_before_writing_anything(world):
    home, _, _ = world
    service = cli.JobService(ENV, HOME, home["queue"], home["table"], f"mlfleet-{ENV}-scheduler",
                             cli.parse_fleets(scheduler_settings(home).fleets), 3, f"/mlfleet/{ENV}/jobs")
    document = {"image": "ghcr.io/team/train:1", "gpus": 1, "vcpus": 1, "memory_mib": 1024,
                "command": ["python", "train.py", "--config", "y" * 8_000]}
    with pytest.raises(SpecError, match=r"job 0: command and environment make 8,[0-9]{3} characters of ECS container "
                                        r"overrides, more than ECS's limit of 8,192"):
        cli.submit(service, document)
    assert aws_client("dynamodb", HOME).scan(TableName=home["table"])["Count"] == 0
    assert aws_client("sqs", HOME).get_queue_attributes(QueueUrl=home["queue"], AttributeNames=[
        "ApproximateNumberOfMessages"])["Attributes"]["ApproximateNumberOfMessages"] == "0"
    # A sweep names the jobs that are too long, and only those.
    with pytest.raises(SpecError) as error:
        cli.submit(service, {**document, "command": ["python", "{arg}"]}, sweep={"arg": ["short", "z" * 8_200]})
    assert error.value.problems[0].startswith("job 1:") and len(error.value.problems) == 1


def test_a_started_task_is_never_started_again_when_its_claim_write_times_out(world):
    """The claim's answer is lost after DynamoDB wrote it: the job is STARTING without a task, and the
    recovery releases it (no task found) for a start of its own, once."""
    home, faults, _ = world
    (job_id,) = queue_jobs(1)
    with faults.active(("dynamodb", "PutItem"), "timeout"):
        first = run(home)
    assert [e["decision"] for e in first["errors"]] == ["start-failed-unexpectedly"]
    assert ledger().get(job_id).state == L.STARTING
    later = run(home, starting.STARTING_GRACE.seconds / 60 + 1)
    record = ledger().get(job_id)
    assert later["started"] == [job_id] and (record.state, record.attempt, record.start_failures) == (L.RUNNING, 2, 1)
    ecs = aws_client("ecs", HOME)
    assert len(ecs.list_tasks(cluster=CLUSTER, startedBy=job_id)["taskArns"]) == 1
    assert FAMILY in ecs.describe_tasks(cluster=CLUSTER, tasks=[record.placement.task_arn])["tasks"][0]["taskDefinitionArn"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_job_cancelled_while_starting_has_its_task_stopped_even_when_the_stop_fails(world, kind):
    """The user cancels between the claim and StartTask's answer: the scheduler stops the task it started.
    When that StopTask throttles, is refused or its answer is lost, the run goes on (one error, named) and
    the task's RUNNING event makes the job-events function stop it: the cancelled job runs nowhere."""
    home, faults, _ = world
    (job_id,) = queue_jobs(1)
    other = queue_jobs(1, first=1)[0]

    def cancel_meanwhile(params: dict) -> None:
        if params.get("startedBy") == job_id:
            assert ledger().cancel(ledger().get(job_id), reason="cancelled by ana", now=NOW.timestamp()).applied
        return None  # moto starts the task

    faults.stubs[("ecs", "StartTask")] = cancel_meanwhile
    with faults.active(("ecs", "StopTask"), kind):
        first = run(home)
    assert ("ecs", "StopTask") in {op for op, _ in faults.injected}
    assert [(e["decision"], e["job_id"]) for e in first["errors"]] == [("stop-cancelled-failed", job_id)]
    assert sorted(first["started"]) == sorted([job_id, other])  # both tasks were started
    ecs = aws_client("ecs", HOME)
    (task,) = ecs.describe_tasks(cluster=CLUSTER, tasks=ecs.list_tasks(cluster=CLUSTER, startedBy=job_id)["taskArns"])[
        "tasks"]
    # ECS's event for the task, as EventBridge brings it to the job-events function.
    event = {"detail-type": "ECS Task State Change", "source": "aws.ecs", "region": HOME, "time": NOW.isoformat(),
             "detail": {"clusterArn": task["clusterArn"], "taskArn": task["taskArn"], "startedBy": job_id,
                        "lastStatus": "RUNNING", "desiredStatus": task["desiredStatus"],
                        "overrides": task["overrides"], "containers": [{"name": "job"}]}}
    job_events.handle(event, event_settings(home), now=NOW)

    assert ledger().get(job_id).state == L.CANCELLED and ledger().get(other).state == L.RUNNING
    (task,) = ecs.describe_tasks(cluster=CLUSTER, tasks=[task["taskArn"]])["tasks"]
    assert task["desiredStatus"] == "STOPPED"
    assert run(home, 1)["errors"] == []


def test_a_record_whose_spec_the_planner_cannot_use_is_quarantined_and_blocks_nobody(world):
    """A hand edit left an instance_type_pattern that is not a regular expression: before, the planner's
    re.compile raised in every run and nothing started anywhere; now the record fails to decode."""
    home, _, _ = world
    (bad,) = queue_jobs(1)
    item = aws_client("dynamodb", HOME).get_item(TableName=home["table"], Key={"job_id": {"S": bad}})["Item"]
    item["spec"]["M"]["instance_type_pattern"] = {"S": "g5.(12"}
    aws_client("dynamodb", HOME).put_item(TableName=home["table"], Item=item)
    good = queue_jobs(1, first=1)

    summary = run(home)

    assert summary["errors"] == [] and summary["started"] == good and summary["quarantined"] == [bad]
    (parked,) = ledger().quarantined()
    assert "spec.instance_type_pattern='g5.(12' is not a regular expression" in parked.error


def test_a_job_request_that_fails_unforeseen_quarantines_that_job_alone(world, monkeypatch):
    """Defence in depth: whatever one decodable record makes the planner's request raise (a value no check
    foresaw), that job is quarantined and the others are planned."""
    home, _, _ = world
    bad, *good = queue_jobs(3)
    real = scheduler_requests.job_request

    def request(record, *args, **kwargs):
        if record.job_id == bad:
            raise OverflowError("a value no check foresaw")
        return real(record, *args, **kwargs)

    monkeypatch.setattr(scheduler_requests, "job_request", request)
    summary = run(home)
    assert summary["errors"] == [] and sorted(summary["started"]) == good and summary["quarantined"] == [bad]
    (parked,) = ledger().quarantined()
    assert parked.error == "cannot be planned: OverflowError: a value no check foresaw"


def test_a_plan_that_fails_unforeseen_leaves_the_rest_of_the_run(world, monkeypatch):
    """The plan as a whole raising is one error of the run: the quarantine of unreadable records, its alert
    and the deletion of the messages the ledger reflects still happen."""
    home, faults, _ = world
    (queued,) = queue_jobs(1)
    broken = f"{SUB}-00099"
    put_raw(broken)
    aws_client("sqs", HOME).send_message(QueueUrl=home["queue"], MessageBody=json.dumps({"job_id": queued, "attempt": 0}))
    real = scheduler.plan
    monkeypatch.setattr(scheduler, "plan", lambda *a, **k: (_ for _ in ()).throw(ZeroDivisionError("unforeseen")))

    summary = run(home)

    assert [e["decision"] for e in summary["errors"]] == ["place-and-scale-failed"]
    assert summary["quarantined"] == [broken] and summary["started"] == []
    assert [p for p in faults.carried_out("sns", "Publish") if "quarantined" in p["Subject"]]
    assert aws_client("sqs", HOME).get_queue_attributes(QueueUrl=home["queue"], AttributeNames=[
        "ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"])["Attributes"] == {
        "ApproximateNumberOfMessages": "0", "ApproximateNumberOfMessagesNotVisible": "0"}
    monkeypatch.setattr(scheduler, "plan", real)
    assert run(home, 1)["started"] == [queued]


@pytest.mark.parametrize("value, expected", [("3", 3), ("0", 0), ("²", None), ("٣", None), ("", None), ("-1", None)])
def test_a_task_s_attempt_is_read_only_from_ascii_digits(value, expected):
    """A task's MLFLEET_ATTEMPT that str.isdigit() takes but int() refuses ("²") or reads otherwise ("٣")
    is no attempt, not a ValueError that stops the run's look at the task."""
    task = {"overrides": {"containerOverrides": [{"environment": [{"name": "MLFLEET_ATTEMPT", "value": value}]}]}}
    assert starting.task_attempt(task) == expected
