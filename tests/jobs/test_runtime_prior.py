"""The scheduler's runtime prior, read from the ledger against moto (lambdas/scheduler/beliefs.py): the runs of
the newest SUCCEEDED jobs, and a machine's end where some of its jobs have no belief of their own."""

from __future__ import annotations

from types import SimpleNamespace

import boto3
import pytest

from lambdas.common.catalog import load_catalog
from lambdas.jobs import ledger as L
from lambdas.jobs.spec import assign_ids, parse_spec
from lambdas.scheduler import beliefs
from lambdas.scheduler.planning import RuntimeEstimate
from lambdas.scheduler.planning.runtimes import PRIOR_MIN_RUNS, RuntimePrior

SPEC = parse_spec({"image": "img:1", "command": ["run"], "gpus": 1, "vcpus": 2, "memory_mib": 4096},
                  fleet_regions=("us-east-1",), catalog=load_catalog(), default_max_attempts=2)
PLACE = L.Placement("us-east-1", "gpu1", "mlfleet-dev", "arn:ci/1", "i-1", "g5.xlarge", "arn:task/1")


def run_to_success(ledger: L.Ledger, job_id: str, started: float, seconds: float) -> None:
    ledger.transition(job_id, L.STARTING, expect_states=[L.QUEUED], expect_attempt=0, reason="placed",
                      now=started - 1, attempt=1, placement=PLACE)
    ledger.transition(job_id, L.RUNNING, expect_states=[L.STARTING], expect_attempt=1, reason="started",
                      now=started, runs=1)
    ledger.transition(job_id, L.SUCCEEDED, expect_states=[L.RUNNING], expect_attempt=1, reason="exit code 0",
                      now=started + seconds)


@pytest.fixture
def ledger(home):
    return L.Ledger(boto3.client("dynamodb", "us-east-1"), home["table"])


def submit(ledger: L.Ledger, submission: str, count: int, submitted_at: float) -> list[str]:
    jobs = assign_ids(submission, [SPEC] * count)
    assert ledger.put_new_batch([L.new_record(j, now=submitted_at + j.index) for j in jobs]) == count
    return [j.job_id for j in jobs]


def test_the_prior_is_what_the_newest_succeeded_jobs_ran(ledger, monkeypatch):
    monkeypatch.setattr(beliefs, "PRIOR_RUNS", PRIOR_MIN_RUNS)
    old = submit(ledger, "sub-20261122191103-0a0a0a", 10, submitted_at=1_000.0)
    new = submit(ledger, "sub-20261123191103-0b0b0b", PRIOR_MIN_RUNS, submitted_at=90_000.0)
    for job_id in old:
        run_to_success(ledger, job_id, started=2_000.0, seconds=50_000.0)  # older submissions: not read
    for n, job_id in enumerate(new):
        run_to_success(ledger, job_id, started=100_000.0, seconds=60.0 * (n + 1))
    submit(ledger, "sub-20261124191103-0c0c0c", 5, submitted_at=95_000.0)  # queued: no run
    assert [r.job_id for r in ledger.by_state(L.SUCCEEDED, limit=3, newest_first=True)] == new[::-1][:3]
    queries = []
    ledger.dynamodb.meta.events.register("provide-client-params.dynamodb.Query",
                                         lambda params, **_: queries.append(params))
    errors: list[dict] = []
    prior = beliefs.runtime_prior(ledger, errors)
    assert errors == [] and prior == RuntimePrior(tuple(60.0 * (n + 1) for n in range(PRIOR_MIN_RUNS)))
    # One query, newest first, each page no larger than what is kept (botocore validates the parameters).
    assert [(q["ScanIndexForward"], q["Limit"]) for q in queries] == [(False, PRIOR_MIN_RUNS)]


def test_too_few_finished_jobs_or_an_unreadable_ledger_give_no_prior(ledger, home):
    jobs = submit(ledger, "sub-20261122191103-0a0a0a", PRIOR_MIN_RUNS - 1, submitted_at=1_000.0)
    for job_id in jobs:
        run_to_success(ledger, job_id, started=2_000.0, seconds=600.0)
    assert beliefs.runtime_prior(ledger, []) is None
    errors: list[dict] = []
    missing = L.Ledger(boto3.client("dynamodb", "us-east-1"), home["table"] + "-missing")
    assert beliefs.runtime_prior(missing, errors) is None  # the run goes on without one, and says so
    assert [e["decision"] for e in errors] == ["read-runtime-prior-failed"]


def test_a_machine_s_end_counts_its_jobs_without_a_belief_by_the_prior():
    now = 10_000.0
    record = lambda started: SimpleNamespace(started_at=started)  # noqa: E731 (what busy_until reads of a record)
    machine = SimpleNamespace(jobs=frozenset({"hinted", "unknown"}))
    running = {"hinted": record(now - 600), "unknown": record(now - 600)}
    hinted = {"hinted": RuntimeEstimate(1_200.0, 0.01)}
    assert beliefs.busy_until(machine, running, hinted, now) is None  # one job unknown: the end is unknown
    prior = RuntimePrior.of([300.0] * 10 + [7_200.0] * 10 + [72_000.0] * 10)
    # The unknown job has run 10 minutes: the median of the runs longer than that is 72,000 s.
    assert beliefs.busy_until(machine, running, hinted, now, prior) == pytest.approx(now - 600 + 72_000.0)
    assert beliefs.busy_until(SimpleNamespace(jobs=frozenset({"unknown"})), {}, {}, now, prior) is None  # not in the ledger's view
