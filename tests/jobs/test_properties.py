"""Property tests over every event and message shape the handlers accept, and malformed variants of each:
job messages and invocation payloads (scheduler), EventBridge EC2 and ECS events, the scheduled check and
the ledger's stream batches (job events), SNS budget records (budget guard), invocation payloads (reaper:
the schedule's, an alarm's, anything else), and the decision log every handler writes. No exception
escapes a handler for any input; well-formed inputs still act.

The handlers run against moto with a small world set up once per test; hypothesis draws the inputs.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest
from conftest import CLUSTER, ENV, HOME, aws_client, build_fleet, fleets_json, open_admission, scheduler_settings
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lambdas.budget_guard import handler as guard
from lambdas.budget_guard.budget_message import parse_budget_message, refusal
from lambdas.common import admission
from lambdas.common.catalog import load_catalog
from lambdas.common.lease import LEASE_KEY
from lambdas.common.logs import log_decision
from lambdas.job_events import decide as D
from lambdas.job_events import handler as job_events
from lambdas.jobs import ledger as L
from lambdas.jobs.queue import JobMessage, MessageError, parse_message
from lambdas.jobs.quarantine import Quarantine
from lambdas.jobs.spec import assign_ids, parse_spec
from lambdas.reaper.handler import trigger_of
from lambdas.scheduler import handler as scheduler
from lambdas.scheduler.requests import job_request
from lambdas.scheduler.planning import Fleet, Limits, Machine, plan
from lambdas.scheduler.state import Received

NOW = datetime(2026, 11, 22, 12, tzinfo=timezone.utc)
SUB = "sub-20261122110000-abcabc"
CLUSTER_ARN = f"arn:aws:ecs:{HOME}:123456789012:cluster/{CLUSTER}"
TASK_ARN = f"arn:aws:ecs:{HOME}:123456789012:task/{CLUSTER}/0123456789abcdef"
MOTO = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

json_leaf = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=30))
json_value = st.recursive(json_leaf, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                               st.dictionaries(st.text(max_size=12), inner, max_size=4)),
                          max_leaves=20)
job_ids = st.one_of(st.integers(0, 99_999).map(lambda n: f"{SUB}-{n:05d}"), st.text(max_size=40),
                    st.integers(2_000, 5_000).map(lambda n: "x" * n))
deep = st.integers(1_000, 50_000).map(lambda depth: "[" * depth + "]" * depth)


def mutations(document: dict) -> st.SearchStrategy:
    """The document with one key dropped, one value replaced by any JSON, or nested inside junk."""
    keys = sorted(document)
    return st.one_of(
        st.sampled_from(keys).map(lambda k: {x: v for x, v in document.items() if x != k}),
        st.tuples(st.sampled_from(keys), json_value).map(lambda kv: {**document, kv[0]: kv[1]}),
        json_value,
        st.just([document]),
    )


def spec():
    return parse_spec({"image": "img:1", "command": ["run"], "gpus": 1, "vcpus": 1, "memory_mib": 1024},
                      fleet_regions=(HOME,), catalog=load_catalog(), default_max_attempts=3)


def ledger() -> L.Ledger:
    return L.Ledger(aws_client("dynamodb", HOME), f"mlfleet-{ENV}-jobs")


# --- job messages --------------------------------------------------------------------------------------

@given(st.one_of(st.text(), json_value.map(json.dumps), deep,
                 st.builds(lambda j, a: json.dumps({"job_id": j, "attempt": a}), job_ids, json_value)))
def test_a_message_body_parses_or_is_refused_never_anything_else(body):
    try:
        message = parse_message(body)
    except MessageError:
        return
    assert isinstance(message, JobMessage) and message.attempt >= 0 and len(message.job_id) == len(f"{SUB}-00000")


@MOTO
@given(bodies=st.lists(st.one_of(st.text(max_size=50), json_value.map(json.dumps), deep,
                                 st.builds(lambda j, a: json.dumps({"job_id": j, "attempt": a}), job_ids,
                                           st.integers(-2, 3))), max_size=6))
def test_the_scheduler_triages_any_messages_and_deletes_those_the_ledger_reflects(home, bodies):
    known = assign_ids(SUB, [spec()])[0]
    led = ledger()
    led.put_new(L.new_record(known, NOW.timestamp()))
    received = []
    for n, body in enumerate([*bodies, json.dumps({"job_id": known.job_id, "attempt": 0})]):
        try:
            received.append(Received(f"r{n}", parse_message(body)))
        except MessageError as error:
            received.append(Received(f"r{n}", None, str(error)))
    summary = {"malformed": 0, "duplicates": 0, "quarantined": [], "errors": []}
    deleted = scheduler.triage_messages(received, led, Quarantine(led, aws_client("sqs", HOME), home["dlq"], "test"),
                                        NOW.timestamp(), summary)
    assert f"r{len(bodies)}" in deleted  # the well-formed message of the queued job
    assert summary["malformed"] == sum(r.message is None for r in received) and summary["errors"] == []


# --- job events ----------------------------------------------------------------------------------------

def task_event(job_id: str, attempt, last: str, exit_code, stop_code: str) -> dict:
    return {"version": "0", "detail-type": D.TASK_STATE_CHANGE, "source": "aws.ecs", "region": HOME,
            "time": NOW.isoformat(), "detail": {
                "clusterArn": CLUSTER_ARN, "taskArn": TASK_ARN, "startedBy": job_id, "lastStatus": last,
                "desiredStatus": "STOPPED" if last == "STOPPED" else "RUNNING", "stopCode": stop_code,
                "containers": [{"name": "job", "exitCode": exit_code}],
                "overrides": {"containerOverrides": [{"name": "job", "environment": [
                    {"name": "MLFLEET_ATTEMPT", "value": str(attempt)}]}]}}}


def instance_event(kind: str, instance_id: str, time: str) -> dict:
    return {"detail-type": kind, "source": "aws.ec2", "region": HOME, "time": time,
            "detail": {"instance-id": instance_id, "instance-action": "terminate"}}


times = st.one_of(st.datetimes(timezones=st.just(timezone.utc)).map(datetime.isoformat),
                  st.datetimes().map(datetime.isoformat), st.text(max_size=25))
task_events = st.builds(task_event, job_ids, st.one_of(st.integers(0, 3), st.text(max_size=3)),
                        st.sampled_from(["PROVISIONING", "PENDING", "RUNNING", "STOPPED"]),
                        st.one_of(st.none(), st.integers(-1, 255)),
                        st.sampled_from(["EssentialContainerExited", "SpotInterruption", "TerminationNotice", "UserInitiated", ""]))
instance_events = st.builds(instance_event, st.sampled_from([D.INTERRUPTION, D.REBALANCE]),
                            st.one_of(st.just("i-0123456789abcdef0"), st.text(max_size=20)), times)
scheduled = st.builds(lambda t: {"detail-type": D.SCHEDULED, "source": "aws.events", "region": HOME, "time": t,
                                 "detail": {}}, times)
any_event = st.one_of(task_events, instance_events, scheduled).flatmap(lambda e: st.one_of(st.just(e), mutations(e)))


def nested(depth: int) -> list:
    value: list = []
    for _ in range(depth):
        value = [value]
    return value


# Lambda hands the handler decoded JSON; Python objects nested deeper than the interpreter's recursion
# limit are possible (str() of one raises RecursionError).
any_event = st.one_of(any_event, json_value, st.integers(2_000, 20_000).map(nested),
                      st.integers(2_000, 20_000).map(lambda d: {"detail-type": D.TASK_STATE_CHANGE, "region": HOME,
                                                                "detail": {"startedBy": nested(d)}}))


def event_settings(home) -> job_events.Settings:
    return job_events.Settings(environment=ENV, jobs_table=home["table"], jobs_queue_url=home["queue"],
                               jobs_dlq_url=home["dlq"], fleets=fleets_json(), rebalance_timeout_minutes=30,
                               notify_email_topic_arn="arn:aws:sns:us-east-1:123456789012:mlfleet-dev-job-notifications")


@pytest.fixture
def fleet(home):
    build_fleet(size=1)
    return home


@MOTO
@given(event=any_event)
def test_no_event_shape_makes_the_job_events_handler_raise(fleet, event):
    result = job_events.handle(event, event_settings(fleet), now=NOW)
    assert isinstance(result, dict) and result.get("errors", 0) == 0


@settings(MOTO, max_examples=25)
@given(exit_code=st.one_of(st.none(), st.integers(0, 255)),
       stop_code=st.sampled_from(["EssentialContainerExited", "SpotInterruption", "TaskFailedToStart"]),
       runs=st.integers(1, 3))
def test_a_well_formed_stop_of_a_running_job_always_moves_it_on(home, exit_code, stop_code, runs):
    job = assign_ids(SUB, [spec()])[0]
    placement = L.Placement(HOME, "gpu1", CLUSTER, "arn:ci", "i-1", "g5.xlarge", TASK_ARN)
    record = L.JobRecord(**{**vars(L.new_record(job, NOW.timestamp())), "state": L.RUNNING, "attempt": 1,
                            "runs": runs, "placement": placement})
    led = ledger()
    led.dynamodb.delete_item(TableName=led.table, Key={"job_id": {"S": job.job_id}})
    assert led.put_new(record)
    result = job_events.handle(task_event(job.job_id, 1, "STOPPED", exit_code, stop_code), event_settings(home), now=NOW)
    after = led.get(job.job_id)
    assert result["decisions"][0]["applied"] and after.state in (L.SUCCEEDED, L.QUEUED, L.FAILED)
    spot = stop_code in D.SPOT_STOP_CODES
    assert (after.state == L.SUCCEEDED) == (exit_code == 0 and not spot)
    # The retry rules (decide.py): an exit code the spec does not list fails at once; a spot stop or a
    # run without an exit code is retried while attempts remain.
    not_retried = not spot and exit_code not in (0, None)
    assert (after.state == L.FAILED) == (not_retried or (exit_code != 0 or spot) and runs == 3)


# --- SNS budget records --------------------------------------------------------------------------------

GUARD = guard.Settings(environment=ENV, home_region=HOME, alert_topic_arn=f"arn:aws:sns:{HOME}:123456789012:mlfleet-{ENV}-alerts")
amounts = st.decimals(min_value=1, max_value=10**7, places=2).map(lambda d: f"${d:,}")


def budget_text(amount: str, budgeted: str, preamble: str) -> str:
    return (f"{preamble}\nBudget Name: mlfleet-{ENV}\nBudget Type: Cost\nBudgeted Amount: {budgeted}\n"
            f"Alert Type: ACTUAL\nAlert Threshold: > {budgeted}\nACTUAL Amount: {amount}\n")


def record(message, topic=GUARD.budget_topic_arn, subject="AWS Budgets: mlfleet-dev has exceeded your alert threshold"):
    return {"EventSource": "aws:sns", "EventVersion": "1.0",
            "Sns": {"Type": "Notification", "TopicArn": topic, "Subject": subject, "Message": message}}


valid_records = st.builds(record, st.builds(budget_text, amounts, amounts, st.text(max_size=80)))
junk_records = st.one_of(json_value, valid_records.flatmap(mutations),
                         st.builds(record, st.text(max_size=200)),
                         st.builds(record, st.builds(budget_text, amounts, amounts, st.just("")),
                                   st.text(max_size=60)))


@pytest.fixture
def guard_world(aws):
    aws_client("sns", HOME).create_topic(Name=f"mlfleet-{ENV}-alerts")


def acts_on(record) -> bool:
    """The oracle: a record from the environment's budget topic reading as its ACTUAL notification."""
    sns = record.get("Sns") if isinstance(record, dict) else None
    if not isinstance(sns, dict) or sns.get("TopicArn") != GUARD.budget_topic_arn or not isinstance(sns.get("Message"), str):
        return False
    return refusal(parse_budget_message(sns["Message"]), ENV) is None


@MOTO
@given(junk=st.lists(junk_records, max_size=4), event_shape=st.sampled_from(["records", "bare", "list"]))
def test_any_sns_event_closes_admission_exactly_when_it_carries_a_budget_record(guard_world, junk, event_shape):
    open_admission()
    event = {"records": {"Records": junk}, "bare": junk[0] if junk else None, "list": junk}[event_shape]
    result = guard.handler(event, settings=GUARD)
    should_close = event_shape == "records" and any(acts_on(r) for r in junk)
    assert result["closed"] is should_close
    assert admission.read_admission(aws_client("ssm", HOME), ENV).is_open is not should_close


@MOTO
@given(valid=valid_records, junk=st.lists(junk_records, max_size=3), position=st.integers(0, 3))
def test_a_budget_record_closes_admission_whatever_surrounds_it(guard_world, valid, junk, position):
    open_admission()
    records = [*junk]
    records.insert(min(position, len(records)), valid)
    assert guard.handler({"Records": records}, settings=GUARD)["closed"] is True
    assert not admission.read_admission(aws_client("ssm", HOME), ENV).is_open


def test_the_property_strategies_produce_both_kinds(home):
    """The strategies above reach well-formed and malformed inputs (so the properties are not vacuous)."""
    assert D.parse_event(task_event(f"{SUB}-00001", 1, "STOPPED", 0, "EssentialContainerExited")).job_id
    assert isinstance(D.parse_event(instance_event(D.INTERRUPTION, "i-0123456789abcdef0", NOW.isoformat())), D.InstanceEvent)
    with pytest.raises(D.EventError):
        D.parse_event({"detail-type": D.TASK_STATE_CHANGE, "region": HOME, "detail": []})
    assert timedelta(0) <= NOW - D.parse_event({"detail-type": D.SCHEDULED, "time": "2026-11-22T12:00:00"}).time


# --- the ledger's stream of ended jobs (job events) ------------------------------------------------------

def ended_job_record(home) -> dict:
    """The stream record of a job that ended, whose submission asked to be told (one address)."""
    job = assign_ids(SUB, [parse_spec({"image": "img:1", "command": ["run"], "gpus": 1, "vcpus": 1, "memory_mib": 1024,
                                       "notify": ["ana@example.com"]}, fleet_regions=(HOME,), catalog=load_catalog(),
                                      default_max_attempts=3, notify_channels=("email",))])[0]
    led = ledger()
    if led.get(job.job_id) is None:
        led.put_new(L.new_record(job, NOW.timestamp()))
        led.transition(job.job_id, L.CANCELLED, expect_states=[L.QUEUED], expect_attempt=0, reason="cancelled by ana",
                       now=NOW.timestamp())
    image = aws_client("dynamodb", HOME).get_item(TableName=home["table"], Key={"job_id": {"S": job.job_id}})["Item"]
    return {"eventID": "1", "eventName": "MODIFY", "eventSource": "aws:dynamodb", "awsRegion": HOME,
            "dynamodb": {"Keys": {"job_id": {"S": job.job_id}}, "NewImage": image, "StreamViewType": "NEW_IMAGE"}}


def stream_record_mutations(record: dict) -> st.SearchStrategy:
    """The record with its stream part or its new image broken (a key dropped, a value replaced), or junk."""
    return st.one_of(
        st.just(record),
        mutations(record["dynamodb"]).map(lambda d: {**record, "dynamodb": d}),
        mutations(record["dynamodb"]["NewImage"]).map(lambda image: {**record, "dynamodb": {
            **record["dynamodb"], "NewImage": image}}),
        json_value.map(lambda junk: {"eventSource": "aws:dynamodb", "dynamodb": junk}),
    )


@pytest.fixture
def stream_world(home):
    aws_client("sns", HOME).create_topic(Name=f"mlfleet-{ENV}-job-notifications")
    return home, ended_job_record(home)


@MOTO
@given(data=st.data())
def test_no_stream_batch_makes_the_job_events_handler_raise_and_an_ended_submission_is_announced_once(stream_world,
                                                                                                       data):
    """Any batch of stream records (each well-formed or broken): the handler routes it as a stream batch,
    never raises (nothing failed at AWS, so no retry is asked for), and announces the submission of a
    readable record exactly once, however many batches carry it."""
    home, record = stream_world
    batch = data.draw(st.lists(stream_record_mutations(record), min_size=1, max_size=4))
    led = ledger()
    job_id = record["dynamodb"]["Keys"]["job_id"]["S"]
    announced_before = led.get(job_id).notified == ("email",)
    result = job_events.handler({"Records": batch}, settings=event_settings(home))
    assert set(result) == {"submissions"}
    readable = any(r == record for r in batch)
    if readable:
        expected = "already announced" if announced_before else "announced"
        assert result["submissions"] == {SUB: expected}
        assert led.get(job_id).notified == ("email",)


# --- the scheduler's and the reaper's invocations ----------------------------------------------------------

scheduler_events = st.one_of(
    st.just({"source": "aws.events", "detail-type": "Scheduled Event", "detail": {}}),
    st.builds(lambda s: {"trigger": "submit", "submission_id": s}, st.text(max_size=40)),
    json_value, st.dictionaries(st.sampled_from(["source", "trigger", "detail"]), json_value, max_size=3),
    st.integers(2_000, 10_000).map(lambda d: {"source": nested(d), "trigger": nested(d)}),
)


@settings(MOTO, max_examples=15)
@given(event=scheduler_events)
def test_any_invocation_payload_runs_the_scheduler_and_gives_the_lease_back(home, event):
    """The schedule's event, the command's, or anything someone allowed to invoke it sends: one run, no
    error, the queued job started (once), the placement lease given back."""
    build = not aws_client("ecs", HOME).list_clusters()["clusterArns"]
    if build:
        build_fleet(size=1)
        open_admission()
        known = assign_ids(SUB, [spec()])[0]
        ledger().put_new(L.new_record(known, NOW.timestamp()))
    summary = scheduler.handler(event, None, settings=scheduler_settings(home), now=NOW)
    assert summary["errors"] == [] and summary["started"] == ([f"{SUB}-00000"] if build else [])
    assert "Item" not in aws_client("dynamodb", HOME).get_item(TableName=home["table"], Key={"job_id": {"S": LEASE_KEY}})


reaper_events = st.one_of(
    st.just({"source": "aws.events", "detail-type": "Scheduled Event", "detail": {}}),
    st.builds(lambda arn: {"source": "aws.cloudwatch", "alarmArn": arn, "alarmData": {"state": {"value": "ALARM"}}},
              st.one_of(st.text(max_size=60), json_value)),
    json_value, st.integers(2_000, 10_000).map(nested),
    st.dictionaries(st.sampled_from(["source", "detail-type", "alarmArn", "alarmData"]), json_value, max_size=4),
)


@given(event=reaper_events)
def test_any_invocation_payload_names_the_reapers_trigger(event):
    trigger = trigger_of(event)
    assert trigger in ("schedule", "manual") or trigger.startswith("alarm ")
    if isinstance(event, dict) and event.get("detail-type") == "Scheduled Event" and event.get("source") != "aws.cloudwatch":
        assert trigger == "schedule"


@given(fields=st.dictionaries(st.text(max_size=10), st.one_of(json_value, st.integers(2_000, 10_000).map(nested),
                                                              st.just({1: "a", "b": 2})), max_size=3))
def test_a_decision_is_logged_whatever_its_fields_hold(fields):
    assert log_decision("property", **fields)["decision"] == "property"


# --- ledger records: whatever a hand edit or an older writer leaves -----------------------------------------

# Numbers DynamoDB stores (at most 38 significant digits, exponents -130 to 125).
storable = st.floats(-1, 1e12, allow_nan=False).filter(lambda x: x == 0 or abs(x) > 1e-100)
SPEC_VALUES = {
    "instance_type_pattern": st.one_of(st.none(), st.sampled_from(["(", "[", "g5\\..*", "*", "a{99999999999}"]),
                                       st.text(max_size=8)),
    "lifecycle": st.one_of(st.none(), st.sampled_from(["spot", "on-demand", "weird"]), st.text(max_size=5)),
    "regions": st.lists(st.sampled_from([HOME, "us-west-2", "mars-1", ""]), max_size=2),
    "gpus": st.integers(-1, 10**9), "vcpus": st.one_of(st.integers(-1, 10**6), storable),
    "memory_mib": st.integers(-1, 10**12), "max_attempts": st.integers(-1, 10**6),
    "expected_runtime_s": st.one_of(st.none(), st.integers(-5, 10**9), storable),
    "priority": st.integers(-2, 12), "team": st.one_of(st.none(), st.text(max_size=8)),
    "checkpoint_interval_minutes": st.one_of(st.none(), st.integers(-1, 10**9)),
}
PLAN_MACHINE = Machine(key="m", instance_id="i-1", region=HOME, fleet="gpu1", instance_type="g5.12xlarge",
                       availability_zone=f"{HOME}a", lifecycle="spot", free_gpus=4, free_vcpus=48,
                       free_memory_mib=180_000, price_per_hour=2.0)
PLAN_FLEET = Fleet(region=HOME, fleet="gpu1", asg_name=f"mlfleet-{ENV}-gpu1", instance_types=("g5.12xlarge",),
                   current_instances=1, pending_instances=0, max_instances=4)


@settings(max_examples=200, deadline=None)
@given(changes=st.lists(st.sampled_from(sorted(SPEC_VALUES)), min_size=1, max_size=4, unique=True)
       .flatmap(lambda keys: st.fixed_dictionaries({k: SPEC_VALUES[k] for k in keys})))
def test_a_record_that_decodes_can_be_planned(changes):
    """A QUEUED record whose spec a hand edit changed (values of the right types, any content) either fails
    to decode (the scheduler quarantines it) or the planner takes it: it never makes the run's plan raise,
    which would stop every job (issue 13). Found: an instance_type_pattern that is not a regular expression."""
    job = assign_ids(SUB, [spec()])[0]
    item = L.encode(L.new_record(job, NOW.timestamp()))
    document = {k: L._from_dynamo(L._deserializer.deserialize(v)) for k, v in item.items()}
    document["spec"].update(changes)
    try:
        record = L.decode({k: L._serializer.serialize(v) for k, v in L._to_dynamo(document).items()})
    except L.DecodeError:
        return
    plan([job_request(record, (HOME,))], [PLAN_MACHINE], [PLAN_FLEET], load_catalog(),
         Limits(max_hourly_usd=100, current_hourly_usd=0), now=NOW.timestamp())


PLACEMENT_VALUES = {
    "instance_type": st.one_of(st.sampled_from(["g5.xlarge", "g5.12xlarge", "p9.huge"]), st.text(max_size=8)),
    "region": st.sampled_from([HOME, "us-west-2", "mars-1", ""]),
    "lifecycle": st.one_of(st.none(), st.sampled_from(["spot", "on-demand", "weird"])),
    "price_per_hour": st.one_of(st.none(), st.integers(-1, 10**6), storable),
    "placed_at": st.one_of(st.none(), st.integers(-1, 2 * 10**9), storable),
}


@settings(MOTO, max_examples=30)
@given(spec_changes=st.lists(st.sampled_from(sorted(SPEC_VALUES)), max_size=3, unique=True)
       .flatmap(lambda keys: st.fixed_dictionaries({k: SPEC_VALUES[k] for k in keys})),
       placement_changes=st.lists(st.sampled_from(sorted(PLACEMENT_VALUES)), max_size=3, unique=True)
       .flatmap(lambda keys: st.fixed_dictionaries({k: PLACEMENT_VALUES[k] for k in keys})),
       exit_code=st.one_of(st.none(), st.integers(0, 255)))
def test_the_stop_of_a_hand_edited_running_record_moves_it_on_or_quarantines_it(home, spec_changes, placement_changes,
                                                                                 exit_code):
    """A RUNNING record a hand edit changed (spec and placement values of the right types, any content):
    its task's stop never fails the event (which Lambda would retry and drop, leaving the job RUNNING for
    ever): the job moves on from RUNNING, or it is quarantined."""
    job = assign_ids(SUB, [spec()])[0]
    placement = L.Placement(HOME, "gpu1", CLUSTER, "arn:ci", "i-1", "g5.xlarge", TASK_ARN, "spot", 0.5,
                            NOW.timestamp() - 3600)
    record = L.JobRecord(**{**vars(L.new_record(job, NOW.timestamp())), "state": L.RUNNING, "attempt": 1, "runs": 1,
                            "placement": placement})
    document = {k: L._from_dynamo(L._deserializer.deserialize(v)) for k, v in L.encode(record).items()}
    document["spec"].update(spec_changes)
    document["placement"].update(placement_changes)
    item = {k: L._serializer.serialize(v) for k, v in L._to_dynamo(document).items()}
    aws_client("dynamodb", HOME).put_item(TableName=home["table"], Item=item)
    result = job_events.handle(task_event(job.job_id, 1, "STOPPED", exit_code, "EssentialContainerExited"),
                               event_settings(home), now=NOW)
    assert result["errors"] == 0
    try:
        after = ledger().get(job.job_id)
    except L.UndecodableRecord as error:
        assert error.bad.quarantined
        return
    assert after.state in (L.SUCCEEDED, L.QUEUED, L.FAILED)
