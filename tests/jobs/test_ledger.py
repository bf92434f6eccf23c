"""The ledger against moto: conditional puts, the transition table, idempotent replays, bounded reasons."""

from __future__ import annotations

import contextlib
import re
from dataclasses import replace

import boto3
import pytest
from conftest import aws_client, linear_moto
from faults import resent_once

from lambdas.common.catalog import load_catalog
from lambdas.jobs import ledger as L
from lambdas.jobs import spec
from lambdas.jobs.spec import assign_ids, parse_spec

SPEC = parse_spec({"image": "img:1", "command": ["run"], "gpus": 1, "vcpus": 2, "memory_mib": 4096},
                  fleet_regions=("us-east-1",), catalog=load_catalog(), default_max_attempts=2)
PLACE = L.Placement("us-east-1", "gpu1", "mlfleet-dev", "arn:ci/1", "i-1", "g5.xlarge")


@pytest.fixture
def ledger(home):
    led = L.Ledger(aws_client("dynamodb", "us-east-1"), home["table"])
    for job in assign_ids("sub-20261122191103-0a1b2c", [SPEC] * 3):
        assert led.put_new(L.new_record(job, now=100.0 + job.index))
    return led


JOB = "sub-20261122191103-0a1b2c-00000"


def test_put_is_conditional_and_lists_work(ledger):
    job = assign_ids("sub-20261122191103-0a1b2c", [SPEC])[0]
    assert not ledger.put_new(L.new_record(job, now=999.0))
    assert ledger.get(JOB).submitted_at == 100.0
    assert [r.job_id[-1] for r in ledger.by_state(L.QUEUED)] == ["0", "1", "2"]
    assert len(ledger.by_submission("sub-20261122191103-0a1b2c")) == 3
    assert ledger.get(JOB).spec == SPEC


def test_claim_happens_once_for_one_attempt(ledger):
    first = ledger.transition(JOB, L.STARTING, expect_states=[L.QUEUED], expect_attempt=0, reason="placed",
                              now=200.0, attempt=1, placement=PLACE)
    second = ledger.transition(JOB, L.STARTING, expect_states=[L.QUEUED], expect_attempt=0, reason="placed",
                               now=201.0, attempt=1, placement=PLACE)
    assert first.applied and not second.applied
    record = ledger.get(JOB)
    assert (record.state, record.attempt, record.placement, record.version) == (L.STARTING, 1, PLACE, 1)
    assert [r["state"] for r in record.reasons] == [L.QUEUED, L.STARTING]


@pytest.mark.parametrize("frm, to", [(L.QUEUED, L.RUNNING), (L.QUEUED, L.SUCCEEDED), (L.SUCCEEDED, L.QUEUED),
                                     (L.CANCELLED, L.QUEUED), (L.FAILED, L.RUNNING), (L.RUNNING, L.STARTING)])
def test_illegal_transitions_raise_before_touching_anything(ledger, frm, to):
    with pytest.raises(L.IllegalTransition):
        ledger.transition(JOB, to, expect_states=[frm], expect_attempt=None, reason="x", now=1.0)
    assert ledger.get(JOB).version == 0


def test_stale_attempt_is_not_applied(ledger):
    ledger.transition(JOB, L.STARTING, expect_states=[L.QUEUED], expect_attempt=0, reason="p", now=1.0, attempt=1)
    ledger.transition(JOB, L.RUNNING, expect_states=[L.STARTING], expect_attempt=1, reason="started", now=2.0,
                      runs=1, placement=L.Placement(**{**vars(PLACE), "task_arn": "arn:task/1"}))
    outcome = ledger.transition(JOB, L.SUCCEEDED, expect_states=[L.RUNNING], expect_attempt=0, reason="old", now=3.0)
    assert not outcome.applied and outcome.record.state == L.RUNNING and outcome.record.placement.task_arn == "arn:task/1"


def test_reasons_are_bounded(ledger):
    for attempt in range(15):
        ledger.transition(JOB, L.STARTING, expect_states=[L.QUEUED], expect_attempt=attempt, reason="p",
                          now=float(attempt), attempt=attempt + 1)
        ledger.transition(JOB, L.QUEUED, expect_states=[L.STARTING], expect_attempt=attempt + 1,
                          reason=f"start failed {attempt}", now=float(attempt))
    record = ledger.get(JOB)
    assert len(record.reasons) == L.MAX_REASONS and record.last_reason == "start failed 14"
    assert record.attempt == 15


def test_a_job_not_in_the_ledger_is_reported_not_created(ledger):
    outcome = ledger.transition("sub-20261122191103-ffffff-00000", L.CANCELLED, expect_states=[L.QUEUED],
                                expect_attempt=None, reason="x", now=1.0)
    assert (outcome.applied, outcome.record) == (False, None)
    assert ledger.get("sub-20261122191103-ffffff-00000") is None


def test_a_reservation_is_noted_on_a_queued_job_only_and_cleared_when_it_moves_on(ledger):
    box = ("us-east-1", "gpu4", "mlfleet-dev-gpu4/20261122T120000/0")
    assert ledger.reserve(JOB, 0, box, now=150.0)
    record = ledger.get(JOB)
    assert (record.reserved, record.version, record.updated_at) == (box, 0, 150.0)  # advisory: no version bump
    assert ledger.by_state(L.QUEUED)[0].reserved == box  # the scheduler reads it through the index
    assert not ledger.reserve(JOB, 1, box, now=151.0)  # not at that attempt
    claim = ledger.transition(JOB, L.STARTING, expect_states=[L.QUEUED], expect_attempt=0, reason="placed",
                              now=200.0, attempt=1, placement=PLACE)
    assert claim.applied and claim.record.reserved is None and ledger.get(JOB).reserved is None
    assert not ledger.reserve(JOB, 1, box, now=201.0)  # no longer queued
    assert ledger.get(JOB).reserved is None


def test_a_submission_is_written_in_transactions_of_at_most_100_conditional_puts(home, monkeypatch):
    dynamodb = boto3.client("dynamodb", "us-east-1")
    calls = []
    dynamodb.meta.events.register("provide-client-params.dynamodb.TransactWriteItems",
                                  lambda params, **_: calls.append(params))
    led = L.Ledger(dynamodb, home["table"])
    jobs = assign_ids("sub-20261122191103-0b0b0b", [SPEC] * 250)
    seen = []
    assert led.put_new_batch([L.new_record(j, now=5.0, owner="ana") for j in jobs], progress=seen.append) == 250
    assert [len(c["TransactItems"]) for c in calls] == [100, 100, 50] and seen == [100, 200, 250]
    assert all(item["Put"]["ConditionExpression"] == "attribute_not_exists(job_id)"
               for c in calls for item in c["TransactItems"])
    assert len({c["ClientRequestToken"] for c in calls}) == 3
    assert len(led.by_submission("sub-20261122191103-0b0b0b")) == 250
    assert led.get(jobs[7].job_id).owner == "ana"


@pytest.mark.parametrize("moto", ["stock", "linear"])
def test_a_transaction_with_an_existing_job_writes_none_of_its_jobs(ledger, moto):
    """All or nothing, in moto as it is and with the benchmark's rollback of the touched items."""
    with linear_moto() if moto == "linear" else contextlib.nullcontext():
        check_all_or_nothing(ledger)


def check_all_or_nothing(ledger):
    jobs = assign_ids("sub-20261122191103-0a1b2c", [SPEC] * 5)  # 0-2 exist already
    before = ledger.get(JOB)
    with pytest.raises(L.DuplicateJob) as error:
        ledger.put_new_batch([L.new_record(j, now=7.0) for j in jobs])
    assert error.value.job_id == JOB
    assert ledger.get(jobs[3].job_id) is None and ledger.get(jobs[4].job_id) is None  # all or nothing
    assert ledger.get(JOB) == before  # never overwritten


def test_transactions_stay_under_the_size_limit_too():
    items = [{"job_id": {"S": str(i)}, "blob": {"S": "x" * 100_000}} for i in range(100)]
    groups = L.transactions(items)
    assert all(sum(len(str(i)) for i in g) < 4_000_000 for g in groups) and sum(map(len, groups)) == 100
    assert len(groups) > 1 and L.transactions([]) == []


def test_cost_owner_exit_code_and_the_notified_mark_round_trip(ledger):
    ledger.transition(JOB, L.STARTING, expect_states=[L.QUEUED], expect_attempt=0, reason="p", now=1.0, attempt=1,
                      placement=L.Placement(**{**vars(PLACE), "lifecycle": "spot", "price_per_hour": 0.4321,
                                               "placed_at": 1.0}))
    ledger.transition(JOB, L.CANCELLED, expect_states=[L.STARTING], expect_attempt=1, reason="c", now=2.0)
    cost = L.Cost(usd=0.125, on_demand_usd=0.5, seconds=60.0, charged_attempt=1)
    assert ledger.amend(JOB, expect_state=L.CANCELLED, expect_attempt=1, now=3.0, cost=cost, exit_code=143).applied
    assert not ledger.amend(JOB, expect_state=L.RUNNING, expect_attempt=1, now=3.0, exit_code=1).applied
    record = ledger.get(JOB)
    assert (record.cost, record.exit_code, record.placement.price_per_hour, record.state) == (
        cost, 143, 0.4321, L.CANCELLED)
    assert ledger.mark_notified(JOB, 4.0, "email") and not ledger.mark_notified(JOB, 5.0, "email")  # once
    assert (ledger.get(JOB).notified_at, ledger.get(JOB).notified) == (4.0, ("email",))
    assert ledger.mark_notified(JOB, 5.0, "slack") and ledger.get(JOB).notified == ("email", "slack")
    assert ledger.get(JOB).notified_at == 4.0  # when the first channel was marked
    assert ledger.mark_notified(JOB, 6.0, "email", undo=True) and ledger.get(JOB).notified == ("slack",)
    assert not ledger.mark_notified(JOB, 6.0, "email", undo=True)
    assert ledger.mark_notified(JOB, 6.0, "slack", undo=True)
    assert (ledger.get(JOB).notified_at, ledger.get(JOB).notified) == (None, ())
    with pytest.raises(ValueError, match="channel 'sms'"):
        ledger.mark_notified(JOB, 7.0, "sms")


def test_a_mark_written_before_channels_were_kept_means_every_channel_was_told(ledger):
    item = raw_item(ledger)
    ledger.dynamodb.put_item(TableName=ledger.table, Item={**item, "notified_at": {"N": "4"}})
    assert ledger.get(JOB).notified == L.NOTIFY_CHANNELS and not ledger.mark_notified(JOB, 5.0, "slack")
    ledger.dynamodb.put_item(TableName=ledger.table, Item={**item, "notified": {"L": [{"S": "pager"}]}})
    with pytest.raises(L.UndecodableRecord, match="field notified"):
        ledger.get(JOB)


def raw_item(ledger, job_id: str = JOB) -> dict:
    return ledger.dynamodb.get_item(TableName=ledger.table, Key={"job_id": {"S": job_id}})["Item"]


@pytest.mark.parametrize("change, field", [
    (lambda item: item.pop("spec"), "field 'spec' is missing"),
    (lambda item: item.pop("submitted_at"), "field 'submitted_at' is missing"),
    (lambda item: item.update(attempt={"S": "one"}), "field attempt='one' is not an integer >= 0"),
    (lambda item: item.update(attempt={"N": "-1"}), "field attempt=-1 is not an integer >= 0"),
    (lambda item: item.update(state={"S": "LOST"}), "field state='LOST' is not one of"),
    (lambda item: item.update(reasons={"S": "x"}), "field reasons='x' is not a list"),
    (lambda item: item["spec"]["M"].pop("gpus"), "KeyError"),
    (lambda item: item["spec"]["M"].update(command={"S": "run"}), "spec.command is not a list of strings"),
    (lambda item: item["spec"]["M"].update(environment={"M": {"A": {"N": "1"}}}), "spec.environment is not a mapping"),
    (lambda item: item.update(placement={"M": {"nowhere": {"S": "x"}}}), "field placement.'nowhere' is not a placement key"),
    # What the commands show (`mlfleet status`, `list`, `follow`) and could not: a history entry, a time, a size.
    (lambda item: item["reasons"]["L"][0]["M"].pop("at"), "field 'reasons[0].at' is missing"),
    (lambda item: item["reasons"]["L"][0]["M"].update(at={"S": "yesterday"}), "field reasons[0].at='yesterday' is not a time"),
    (lambda item: item["reasons"]["L"][0]["M"].update(reason={"B": b"\x00"}), "field reasons[0].reason=Binary"),
    (lambda item: item["reasons"]["L"].append({"N": "1"}), "field reasons[1]=1 is not a map"),
    (lambda item: item.update(updated_at={"N": "1e20"}), "field updated_at=100000000000000000000 is not a time"),
    (lambda item: item["spec"]["M"].update(gpus={"L": [{"N": "1"}]}), "spec.gpus='[1]' is not an integer"),
    (lambda item: item["spec"]["M"].update(vcpus={"S": "many"}), "spec.vcpus='many' is not a number"),
    # A binary value's str is bytes (boto3's Binary): its text could not be shown, and the error named no key
    # (found by tests/jobs/test_cli_read_properties.py: 'TypeError: __str__ returned non-string').
    (lambda item: item["spec"]["M"].update(image={"B": b"\x00\xff"}), "spec.image=Binary(b'\\x00\\xff') is not an image"),
    (lambda item: item["spec"]["M"].update(gpus={"B": b"1"}), "spec.gpus=Binary(b'1') is not an integer"),
    (lambda item: item["spec"]["M"].update(team={"B": b"a"}), "spec.team=Binary(b'a') is not a string"),
    (lambda item: item.update(placement={"M": {**{k: {"S": "x"} for k in L.PLACEMENT_TEXTS}, "placed_at": {"S": "now"}}}),
     "field placement.placed_at='now' is not a number"),
    (lambda item: item.update(reserved={"M": {"region": {"S": "us-east-1"}, "fleet": {"N": "4"}, "box": {"S": "b"}}}),
     "field reserved="),
    # Values parse_spec refuses, which the planner would trip over in every run.
    (lambda item: item["spec"]["M"].update(instance_type_pattern={"S": "g5.(12"}),
     "spec.instance_type_pattern='g5.(12' is not a regular expression"),
    (lambda item: item["spec"]["M"].update(lifecycle={"S": "reserved"}), "spec.lifecycle='reserved' is not one of"),
    (lambda item: item["spec"]["M"].update(expected_runtime_s={"N": "0"}),
     "spec.expected_runtime_s=0.0 is not a positive number"),
])
def test_decode_names_what_is_wrong_with_an_item(ledger, change, field):
    item = raw_item(ledger)
    change(item)
    with pytest.raises(L.DecodeError, match=re.escape(field)):
        L.decode(item)


def test_an_undecodable_item_is_skipped_by_lists_and_raised_by_get(ledger):
    item = raw_item(ledger)
    del item["spec"]
    ledger.dynamodb.put_item(TableName=ledger.table, Item=item)
    reader = L.Ledger(ledger.dynamodb, ledger.table)
    assert [r.job_id[-1] for r in reader.by_state(L.QUEUED)] == ["1", "2"]
    assert [(b.job_id, b.error) for b in reader.undecodable] == [(JOB, "field 'spec' is missing")]
    with pytest.raises(L.UndecodableRecord, match="field 'spec' is missing"):
        reader.get(JOB)
    with pytest.raises(L.UndecodableRecord):  # and a transition, which reads it first
        reader.transition(JOB, L.CANCELLED, expect_states=[L.QUEUED], expect_attempt=None, reason="x", now=1.0)


def test_quarantine_keeps_the_item_and_is_conditional_on_it_being_as_read(ledger):
    item = raw_item(ledger)
    del item["spec"]
    ledger.dynamodb.put_item(TableName=ledger.table, Item=item)
    assert ledger.quarantine(item, "field 'spec' is missing", now=500.0, by="test")
    assert not ledger.quarantine(item, "again", now=501.0, by="test")  # no longer as read: QUARANTINED now
    stored = raw_item(ledger)
    assert stored["state"] == {"S": L.QUARANTINED} and stored["version"] == {"N": "1"}  # a stale view cannot overwrite it
    # Every attribute kept but the by-team index's key: no longer queued (a job of no team had NO_TEAM there).
    assert item[L.QUEUED_TEAM] == {"S": L.NO_TEAM} and L.QUEUED_TEAM not in stored
    assert {k: v for k, v in stored.items() if k not in ("state", "quarantine", "version")} == {
        k: v for k, v in item.items() if k not in ("state", "version", L.QUEUED_TEAM)}
    with pytest.raises(L.UndecodableRecord) as error:
        ledger.get(JOB)
    assert error.value.bad.quarantined and "quarantined: field 'spec' is missing" in str(error.value)
    (parked,) = ledger.quarantined(not_alerted=True)
    assert (parked.job_id, parked.error, parked.previous_state, parked.at, parked.by) == (
        JOB, "field 'spec' is missing", L.QUEUED, 500.0, "test")
    assert ledger.mark_alerted(JOB) and ledger.quarantined(not_alerted=True) == []
    assert [q.job_id for q in ledger.quarantined()] == [JOB]
    assert JOB not in {r.job_id for r in ledger.by_state(L.QUEUED)}


def test_a_record_changed_after_it_was_read_is_not_quarantined(ledger):
    item = raw_item(ledger)
    ledger.transition(JOB, L.CANCELLED, expect_states=[L.QUEUED], expect_attempt=None, reason="x", now=1.0)
    assert not ledger.quarantine(item, "stale view", now=2.0, by="test")
    assert ledger.get(JOB).state == L.CANCELLED


def test_a_transition_from_a_stale_view_changes_nothing(ledger):
    stale = ledger.by_state(L.QUEUED)[0]
    assert ledger.transition(JOB, L.CANCELLED, expect_states=[L.QUEUED], expect_attempt=None, reason="x", now=1.0).applied
    outcome = ledger.transition(JOB, L.STARTING, expect_states=[L.QUEUED], expect_attempt=0, reason="claim", now=2.0,
                                current=stale, attempt=1, placement=PLACE)
    assert not outcome.applied and outcome.record.state == L.CANCELLED and ledger.get(JOB).state == L.CANCELLED


def test_reasons_are_cut_to_a_line_for_people(ledger):
    ledger.transition(JOB, L.CANCELLED, expect_states=[L.QUEUED], expect_attempt=None, reason="e" * 50_000, now=1.0)
    assert len(ledger.get(JOB).last_reason) == L.MAX_REASON_CHARS


TEAM_SPEC = parse_spec({"image": "img:1", "command": ["run"], "gpus": 1, "vcpus": 2, "memory_mib": 4096,
                        "team": "vision"}, fleet_regions=("us-east-1",), catalog=load_catalog(),
                       default_max_attempts=2, teams=("vision", "speech"))


def test_the_by_team_index_lists_a_team_s_jobs_while_they_are_queued_only(ledger):
    """The sparse index the scheduler reads each team's oldest queued jobs from: a job is in it while it is
    QUEUED and names a team (moto keeps a GSI sparse as DynamoDB does: items without the key are left out).
    Out at every way of leaving the queue (claim, cancel, quarantine), back in when requeued."""
    jobs = assign_ids("sub-20261122191104-0a1b2c", [TEAM_SPEC] * 3)
    for job in jobs:
        assert ledger.put_new(L.new_record(job, now=300.0 + job.index))
    first, second, third = (job.job_id for job in jobs)
    assert [r.job_id for r in ledger.queued_of_team("vision")] == [first, second, third]
    assert ledger.queued_of_team("vision", limit=2)[-1].job_id == second
    assert ledger.queued_of_team("speech") == []
    # A job of no team is in the index under NO_TEAM, which no team can be named.
    assert raw_item(ledger)[L.QUEUED_TEAM] == {"S": L.NO_TEAM} and not spec.TEAM_NAME.fullmatch(L.NO_TEAM)
    assert [r.job_id[-1] for r in ledger.queued_of_team(None)] == ["0", "1", "2"]  # the fixture's, oldest first
    assert [r.job_id[-1] for r in ledger.iter_queued_of_team(None, page_size=1)] == ["0", "1", "2"]

    claim = ledger.transition(first, L.STARTING, expect_states=[L.QUEUED], expect_attempt=0, reason="placed",
                              now=400.0, attempt=1, placement=PLACE)
    assert claim.applied and L.QUEUED_TEAM not in raw_item(ledger, first)
    assert [r.job_id for r in ledger.queued_of_team("vision")] == [second, third]
    back = ledger.transition(first, L.QUEUED, expect_states=[L.STARTING], expect_attempt=1,
                             reason="start never confirmed", now=410.0, current=claim.record)
    assert back.applied and raw_item(ledger, first)[L.QUEUED_TEAM] == {"S": "vision"}
    assert [r.job_id for r in ledger.queued_of_team("vision")] == [first, second, third]

    assert ledger.cancel(ledger.get(second), reason="not needed", now=420.0).applied
    assert L.QUEUED_TEAM not in raw_item(ledger, second)
    assert ledger.quarantine(raw_item(ledger, third), "looked wrong", now=430.0, by="test")
    assert L.QUEUED_TEAM not in raw_item(ledger, third)
    assert [r.job_id for r in ledger.queued_of_team("vision")] == [first]


def test_one_team_s_backlog_does_not_hide_another_team_s_newer_job(ledger, monkeypatch):
    """What the scheduler plans from (handler.read_pending): with teams, each team's oldest and the oldest
    of all, an equal part of MAX_PENDING each; without teams, the oldest MAX_PENDING."""
    from lambdas.scheduler import handler

    backlog = assign_ids("sub-20261122191105-0a1b2c", [TEAM_SPEC] * 12)  # vision's, all older than speech's
    for job in backlog:
        assert ledger.put_new(L.new_record(job, now=300.0 + job.index))
    speech = replace(TEAM_SPEC, team="speech")
    (late,) = assign_ids("sub-20261122191106-0a1b2c", [speech])
    assert ledger.put_new(L.new_record(late, now=900.0))
    monkeypatch.setattr(handler, "MAX_PENDING", 6)

    alone = handler.read_pending(ledger, ())
    assert len(alone) == 6 and late.job_id not in {r.job_id for r in alone}  # the known limit without teams

    shared = handler.read_pending(ledger, ("vision", "speech"))
    ids = [r.job_id for r in shared]
    assert len(ids) == len(set(ids)) <= 6 and late.job_id in ids
    assert ids[:2] == [JOB, "sub-20261122191103-0a1b2c-00001"]  # the oldest of all (no team) still come first
    assert [r.submitted_at for r in shared] == sorted(r.submitted_at for r in shared)


def test_an_unreadable_team_index_falls_back_to_the_oldest_of_all(ledger, monkeypatch):
    """While `pulumi up` adds the index (or a read of it is throttled) the run plans as before the index."""
    from botocore.exceptions import ClientError

    from lambdas.scheduler import handler

    def unreadable(team, limit=None):
        raise ClientError({"Error": {"Code": "ValidationException", "Message": "index not ready"}}, "Query")

    monkeypatch.setattr(ledger, "queued_of_team", unreadable)
    monkeypatch.setattr(handler, "MAX_PENDING", 2)
    assert [r.job_id for r in handler.read_pending(ledger, ("vision", "speech"))] == [
        JOB, "sub-20261122191103-0a1b2c-00001"]


def test_a_transition_botocore_resent_after_its_answer_was_lost_is_applied(ledger):
    """The first PutItem wrote the next version; its resend fails `version = :v` on that very write. Reported
    as not applied, a claim would be skipped (the job left STARTING with no task until the recovery, a failed
    start counted) and a FAILED job's dead letter never sent (the outbox clears the debt of a write that did
    not apply: lambdas/jobs/dead_letters.py settle)."""
    as_read = ledger.get(JOB)
    client, sends = resent_once(boto3.client("dynamodb", "us-east-1"), "dynamodb", "PutItem")
    resending = L.Ledger(client, ledger.table)
    outcome = resending.transition(JOB, L.STARTING, expect_states=[L.QUEUED], expect_attempt=0, reason="placed",
                                   now=200.0, current=as_read, attempt=1, placement=PLACE)
    assert sends == [1, 2]
    assert outcome.applied and (outcome.record.state, outcome.record.version) == (L.STARTING, 1)
    assert ledger.get(JOB) == outcome.record
    # Another change from the same version is still refused: the item is not what it would have written.
    other = resending.transition(JOB, L.CANCELLED, expect_states=[L.QUEUED], expect_attempt=None, reason="x",
                                 now=201.0, current=as_read)
    assert not other.applied and other.record == outcome.record and ledger.get(JOB).state == L.STARTING


def test_a_quarantine_botocore_resent_after_its_answer_was_lost_is_reported_done(ledger):
    """The first UpdateItem quarantined the item; its resend fails `#state = :was` on that very write. Reported
    as not done, the dead-letter debt owed for it would be cleared unsent (Quarantine.item settles it as a
    write that did not apply: lambdas/jobs/dead_letters.py), and the job never dead-lettered."""
    item = raw_item(ledger)
    del item["spec"]
    ledger.dynamodb.put_item(TableName=ledger.table, Item=item)
    client, sends = resent_once(boto3.client("dynamodb", "us-east-1"), "dynamodb", "UpdateItem")
    resending = L.Ledger(client, ledger.table)
    assert resending.quarantine(item, "field 'spec' is missing", now=500.0, by="test")
    assert sends == [1, 2]
    assert raw_item(ledger)["version"] == {"N": "1"}
    # A later quarantine of the same stale view is still refused: it is not the write that quarantined it.
    assert not resending.quarantine(item, "field 'spec' is missing", now=501.0, by="test")


@pytest.mark.parametrize("attribute, value", [("spec", {"M": []}), ("index", {"N": {"x": 1}}), ("owner", {"X": "a"}),
                                              ("reasons", ["not", "typed"])])
def test_an_attribute_dynamodb_types_cannot_hold_is_named_in_the_decode_error(attribute, value):
    """Found by tests/jobs/test_event_properties.py: a stream record's new image with an attribute value that is
    no DynamoDB type was skipped with 'DecodeError: TypeError: Value must be a nonempty dictionary whose key
    is a valid dynamodb type.', naming neither the attribute nor its value."""
    job = assign_ids("sub-20261122110000-abcdef", [parse_spec(
        {"image": "img:1", "command": ["run"], "gpus": 1, "vcpus": 1, "memory_mib": 1024}, fleet_regions=("us-east-1",),
        catalog=load_catalog(), default_max_attempts=3)])[0]
    item = {**L.encode(L.new_record(job, 1.0)), attribute: value}
    with pytest.raises(L.DecodeError, match=f"^field '{attribute}': "):
        L.decode(item)


def test_an_item_whose_version_is_not_a_number_is_quarantined_all_the_same(ledger):
    # DynamoDB refuses `+` on a version of another type (a hand edit): the quarantine failed on every run.
    item = raw_item(ledger)
    item["version"] = {"L": [{"N": "1"}]}
    ledger.dynamodb.put_item(TableName=ledger.table, Item=item)
    assert ledger.quarantine(item, "field version=[1] is not an integer >= 0", 500.0, "scheduler")
    quarantined = raw_item(ledger)
    assert quarantined["state"] == {"S": L.QUARANTINED} and quarantined["version"] == {"N": "1"}
    assert [q.job_id for q in ledger.quarantined()] == [JOB]


def test_a_quarantined_item_a_hand_edit_left_unreadable_is_still_listed(ledger):
    # `mlfleet quarantine` failed on a reason stored as binary (str() of boto3's Binary is bytes) and on a
    # time past what datetime shows.
    assert ledger.quarantine(raw_item(ledger), "field 'spec' is missing", 500.0, "scheduler")
    item = raw_item(ledger)
    item["quarantine"]["M"].update(error={"B": b"\xff"}, at={"N": "1e20"}, by={"N": "7"})
    ledger.dynamodb.put_item(TableName=ledger.table, Item=item)
    (found,) = ledger.quarantined()
    assert (found.job_id, found.error, found.at, found.by) == (JOB, "Binary(b'\\xff')", 0.0, "7")
