"""The placement lease against moto: one scheduler run at a time, without reserved concurrency (lambdas/common/lease.py).

Races named here: a second run starting while the first plans (it must return without acting), a run
killed before it released (its lease must expire, then be taken over), a host whose clock runs ahead
(it must not take over a live run's lease), a late release after a takeover (it must not delete the
new owner's lease). moto evaluates DynamoDB condition expressions like AWS does for these forms.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass

import boto3
import pytest
from conftest import ENV, HOME, build_fleet, open_admission, scheduler_settings
from faults import resent_once
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lambdas.common import lease
from lambdas.common.catalog import load_catalog
from lambdas.jobs import cli
from lambdas.jobs import ledger as L
from lambdas.jobs.quarantine import Quarantine
from lambdas.jobs.queue import JobMessage, send_jobs
from lambdas.jobs.spec import assign_ids, is_job_id, parse_spec
from lambdas.scheduler import handler as scheduler
from lambdas.scheduler.handler import triage_messages
from lambdas.scheduler.state import receive_messages

RUN = 180.0  # seconds a run may last: the scheduler's timeout (components/jobs/jobs.py)


def dynamodb():
    return boto3.client("dynamodb", HOME)


def lease_item(table: str) -> dict | None:
    return dynamodb().get_item(TableName=table, Key={"job_id": {"S": lease.LEASE_KEY}}, ConsistentRead=True).get("Item")


@dataclass
class Context:
    """What the scheduler reads of the Lambda context."""
    aws_request_id: str
    millis: int = int(RUN * 1000)

    def get_remaining_time_in_millis(self) -> int:
        return self.millis


@pytest.fixture
def environment(home, monkeypatch):
    values = vars(scheduler_settings(home))
    for name, value in values.items():
        if value is not None:  # an optional setting left unset is a variable the function does not get
            monkeypatch.setenv(name.upper(), str(value))
    return home


def test_the_lease_key_is_no_job_id_and_carries_no_index_attribute(home):
    assert not is_job_id(lease.LEASE_KEY)
    assert lease.acquire(dynamodb(), home["table"], "run-a", now=1000.0, run_seconds=RUN).granted
    assert set(lease_item(home["table"])) == {"job_id", "owner", "acquired_at", "expires_at"}


def test_a_second_run_is_refused_until_the_first_releases(home):
    first = lease.acquire(dynamodb(), home["table"], "run-a", now=1000.0, run_seconds=RUN)
    second = lease.acquire(dynamodb(), home["table"], "run-b", now=1001.0, run_seconds=RUN)
    assert first.granted and first.took_over is None
    assert not second.granted and second.holder == first.lease
    assert lease.release(dynamodb(), home["table"], first.lease)
    assert lease_item(home["table"]) is None
    third = lease.acquire(dynamodb(), home["table"], "run-b", now=1002.0, run_seconds=RUN)
    assert third.granted and third.took_over is None  # released, not expired: nothing taken over


def test_a_crashed_run_s_lease_expires_then_is_taken_over(home):
    crashed = lease.acquire(dynamodb(), home["table"], "run-a", now=1000.0, run_seconds=RUN).lease  # never released
    deadline = 1000.0 + RUN + lease.CLOCK_SKEW_SECONDS
    assert crashed.expires_at == deadline
    assert not lease.acquire(dynamodb(), home["table"], "run-b", now=deadline, run_seconds=RUN).granted
    taken = lease.acquire(dynamodb(), home["table"], "run-b", now=deadline + 0.5, run_seconds=RUN)
    assert taken.granted and taken.took_over == crashed
    # The crashed run, if it was only slow, cannot release what is no longer its lease.
    assert not lease.release(dynamodb(), home["table"], crashed)
    assert lease_item(home["table"])["owner"]["S"] == "run-b"


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(started_after=st.floats(min_value=0, max_value=RUN), skew=st.floats(min_value=-lease.CLOCK_SKEW_SECONDS,
                                                                            max_value=lease.CLOCK_SKEW_SECONDS))
def test_a_host_whose_clock_is_off_by_up_to_the_margin_never_takes_a_live_run_s_lease(home, started_after, skew):
    """While the holder can still be running (true time within its run), another host whose clock is
    off by at most CLOCK_SKEW_SECONDS is refused."""
    dynamodb().delete_item(TableName=home["table"], Key={"job_id": {"S": lease.LEASE_KEY}})
    holder = lease.acquire(dynamodb(), home["table"], "holder", now=5000.0, run_seconds=RUN)
    other = lease.acquire(dynamodb(), home["table"], "other", now=5000.0 + started_after + skew, run_seconds=RUN)
    assert holder.granted and not other.granted


def test_a_clock_beyond_the_margin_would_take_over_so_the_margin_is_what_protects(home):
    """The check above can fail: a host ahead by more than the margin takes a live lease over."""
    lease.acquire(dynamodb(), home["table"], "holder", now=5000.0, run_seconds=RUN)
    ahead = lease.acquire(dynamodb(), home["table"], "other", now=5000.0 + RUN + lease.CLOCK_SKEW_SECONDS + 1,
                          run_seconds=RUN)
    assert ahead.granted and ahead.took_over.owner == "holder"


@pytest.mark.parametrize("owner, now, run_seconds", [("", 1.0, RUN), ("a", float("nan"), RUN), ("a", 1.0, 0.0),
                                                     ("a", 1.0, -5.0), ("a", 1.0, float("inf"))])
def test_a_lease_with_no_owner_or_no_sensible_duration_is_refused_before_any_write(home, owner, now, run_seconds):
    with pytest.raises(ValueError):
        lease.acquire(dynamodb(), home["table"], owner, now=now, run_seconds=run_seconds)
    assert lease_item(home["table"]) is None


def test_two_concurrent_invocations_one_acts_the_other_returns_at_once(environment, monkeypatch):
    """The first invocation holds the lease while it plans; the second, started meanwhile, returns
    without calling run; the lease is released when the first ends, failed or not."""
    planning, finish = threading.Event(), threading.Event()
    runs: list[str] = []

    def slow_run(settings_, remaining_ms, now=None, held=None):
        runs.append(settings_.jobs_table)
        planning.set()
        assert finish.wait(10)
        return {"started": []}

    monkeypatch.setattr(scheduler, "run", slow_run)
    lines: list[dict] = []
    for module in (scheduler, lease):
        monkeypatch.setattr(module, "log_decision", lambda decision, **fields: lines.append({"decision": decision, **fields}))
    results: dict[str, dict] = {}
    first = threading.Thread(target=lambda: results.update(a=scheduler.handler({}, Context("req-a"))))
    first.start()
    assert planning.wait(10)
    lines.clear()
    results["b"] = scheduler.handler({"source": "mlfleet.cli"}, Context("req-b"))
    skipped_lines = list(lines)
    finish.set()
    first.join(10)

    assert runs == [environment["table"]]  # only the first planned
    assert results["b"] == {"skipped": "another run or a removal holds the placement lease"}
    assert [line["decision"] for line in skipped_lines] == ["scheduler-skipped"]  # one line, nothing else
    assert skipped_lines[0]["holder"] == "scheduler:req-a" and skipped_lines[0]["trigger"] == "mlfleet.cli"
    assert results["a"] == {"started": []} and lease_item(environment["table"]) is None


def test_a_run_that_raises_still_releases_its_lease(environment, monkeypatch):
    def failing_run(*args, **kwargs):
        raise RuntimeError("ECS unavailable")

    monkeypatch.setattr(scheduler, "run", failing_run)
    with pytest.raises(RuntimeError):
        scheduler.handler({}, Context("req-a"))
    assert lease_item(environment["table"]) is None


def queue_jobs(home: dict, count: int) -> list[str]:
    spec = parse_spec({"image": "ghcr.io/team/train:1", "command": ["python", "train.py"], "gpus": 1, "vcpus": 1,
                       "memory_mib": 1024}, fleet_regions=(HOME,), catalog=load_catalog(), default_max_attempts=3)
    jobs = assign_ids("sub-20261122120000-abcdef", [spec] * count)
    ledger = L.Ledger(dynamodb(), home["table"])
    for job in jobs:
        assert ledger.put_new(L.new_record(job, 1000.0))
    send_jobs(boto3.client("sqs", HOME), home["queue"], [JobMessage(job.job_id, 0) for job in jobs])
    return [job.job_id for job in jobs]


def test_a_refused_invocation_touches_no_job_message_or_machine(environment):
    """With the real run: a refused invocation starts nothing and leaves queue and group alone."""
    build_fleet(size=1)
    open_admission()
    job_ids = queue_jobs(environment, 2)
    assert lease.acquire(dynamodb(), environment["table"], "someone-else", now=time.time(),
                         run_seconds=RUN).granted
    assert scheduler.handler({}, Context("req-b")) == {"skipped": "another run or a removal holds the placement lease"}
    ledger = L.Ledger(dynamodb(), environment["table"])
    assert [ledger.get(j).state for j in job_ids] == [L.QUEUED, L.QUEUED]
    visible = boto3.client("sqs", HOME).get_queue_attributes(
        QueueUrl=environment["queue"], AttributeNames=["ApproximateNumberOfMessages"])["Attributes"]
    assert visible["ApproximateNumberOfMessages"] == "2"  # not even received
    # Once the holder releases, the next invocation places both jobs.
    lease.release(dynamodb(), environment["table"], lease.Lease("someone-else", 0, 0))
    summary = scheduler.handler({}, Context("req-c"))
    assert sorted(summary["started"]) == sorted(job_ids)


def test_the_ledger_and_the_cli_never_show_the_lease_as_a_job(environment):
    job_ids = queue_jobs(environment, 1)
    assert lease.acquire(dynamodb(), environment["table"], "run-a", now=1000.0, run_seconds=RUN).granted
    ledger = L.Ledger(dynamodb(), environment["table"])
    assert ledger.get(lease.LEASE_KEY) is None
    assert [r.job_id for state in L.STATES for r in ledger.by_state(state)] == job_ids
    assert ledger.by_submission(lease.LEASE_KEY) == []
    service = cli.JobService(ENV, HOME, environment["queue"], environment["table"], f"mlfleet-{ENV}-scheduler",
                             (), 3, f"/mlfleet/{ENV}/jobs")
    assert [r.job_id for r in cli.list_jobs(service, states=L.STATES)] == job_ids
    with pytest.raises(cli.CliError):
        cli.records_of(service, lease.LEASE_KEY)
    # A message naming the lease key is not a job message (its id is no job id): malformed, left for the
    # redrive policy, not a crash, and the lease item is never read as a job.
    boto3.client("sqs", HOME).send_message(QueueUrl=environment["queue"],
                                           MessageBody=json.dumps({"job_id": lease.LEASE_KEY, "attempt": 0}))
    received = receive_messages(boto3.client("sqs", HOME), environment["queue"], max_messages=10,
                                remaining_ms=lambda: 170_000)
    summary = {"duplicates": 0, "malformed": 0, "quarantined": [], "errors": []}
    kept = triage_messages(received, ledger, Quarantine(ledger, boto3.client("sqs", HOME), environment["dlq"], "test"),
                           1000.0, summary)
    lease_messages = [r for r in received if r.message is None and lease.LEASE_KEY in r.error]
    assert lease_messages and all(r.receipt_handle not in kept for r in lease_messages)
    assert summary["malformed"] == len(lease_messages) and summary["errors"] == []
    assert lease_item(environment["table"])["owner"]["S"] == "run-a"  # untouched


def test_an_acquire_resent_after_its_answer_was_lost_is_still_granted(home):
    """The first PutItem took the lease; its resend then fails the condition on our own live lease. Refused,
    the run would skip, and every run and removal after it would wait out the lease (the Lambda's whole
    timeout) that no one holds any more."""
    client, sends = resent_once(boto3.client("dynamodb", HOME), "dynamodb", "PutItem")
    taken = lease.acquire(client, home["table"], "scheduler:req-a", now=1000.0, run_seconds=RUN)
    assert sends == [1, 2]  # sent twice: the lost answer was resent
    assert taken.granted and taken.lease.owner == "scheduler:req-a" and taken.took_over is None
    assert lease.release(dynamodb(), home["table"], taken.lease)
    assert lease_item(home["table"]) is None
