"""The scale benchmark on a small account: the real handler runs to the end against the stand-in account,
the figures add up, and the handler stops acting when the simulated Lambda clock runs short."""

from __future__ import annotations

import json

import pytest

from benchmarks import scheduler_scale as bench
from lambdas.common.aws import reset_clients
from lambdas.scheduler import handler


@pytest.fixture(autouse=True)
def fresh_clients():
    reset_clients()
    yield
    reset_clients()


def test_the_benchmark_measures_against_the_scheduler_lambdas_own_limits():
    from components.jobs import jobs

    assert (bench.LAMBDA_TIMEOUT_S, bench.LAMBDA_MEMORY_MIB) == (jobs.SCHEDULER_TIMEOUT_SECONDS, jobs.SCHEDULER_MEMORY_MIB)
    assert bench.LAMBDA_VCPU_SHARE == jobs.SCHEDULER_MEMORY_MIB / 1769


def test_a_small_run_completes_and_reports_its_figures(capsys):
    assert bench.main(["--jobs", "200", "--instances", "20", "--json"]) == 0
    figures = json.loads(capsys.readouterr().out)
    assert figures["errors"] == 0 and figures["fits"] and figures["pending_read"] == 200
    assert figures["started"] > 0 and figures["calls_by_operation"]["ecs:StartTask"] == figures["started"]
    assert figures["aws_calls"] == sum(figures["calls_by_operation"].values())
    assert 0 < figures["cpu_s"] and figures["lambda_cpu_s"] >= figures["cpu_s"]
    assert figures["peak_python_mib"] > 0 and figures["lambda_memory_estimate_mib"] > figures["rss_after_imports_mib"]


def test_the_run_stops_acting_when_the_lambda_clock_runs_short(monkeypatch):
    """With each ECS call taking 2 s (assumed), a 60 s Lambda starts what fits and leaves the rest."""
    monkeypatch.setattr(bench, "LAMBDA_TIMEOUT_S", 60)
    latency = {**bench.DEFAULT_LATENCY_MS, "ecs": 2_000}
    result = bench.one_run(300, 40, 1, latency, trace_memory=False, free_share=1.0)
    summary = result["summary"]
    assert summary["errors"] == [] and summary.get("left_for_next_run", 0) > 0 and summary["started"]
    used = result["cpu_s"] / bench.LAMBDA_VCPU_SHARE + result["latency_s"]
    # Acting stopped with ACT_RESERVE_MS left; scaling out and the bookkeeping after it fit in that reserve.
    assert 60 - handler.ACT_RESERVE_MS / 1000 - 2 <= used <= 60


def test_a_submission_larger_than_the_beliefs_read_is_read_one_bounded_page_deep(capsys, monkeypatch):
    """One submission of 1,500 jobs, two 1 MB pages: the runtime beliefs read its first SIBLINGS_READ jobs
    in one page (the stand-in account ends a page at Limit items, as DynamoDB does), a query fewer than
    reading all of it."""
    from lambdas.scheduler import beliefs

    queries, bounded = {}, beliefs.SIBLINGS_READ
    for bound in (bounded, None):
        monkeypatch.setattr(beliefs, "SIBLINGS_READ", bound)
        assert bench.main(["--jobs", "1500", "--instances", "10", "--submission-jobs", "1500", "--no-memory",
                           "--json"]) == 0
        figures = json.loads(capsys.readouterr().out)
        assert figures["errors"] == 0 and figures["submission_jobs"] == 1500
        queries[bound] = figures["calls_by_operation"]["dynamodb:Query"]
    assert queries[bounded] == queries[None] - 1


def test_a_submission_size_no_spec_makes_is_refused(capsys):
    with pytest.raises(SystemExit):
        bench.main(["--submission-jobs", "10001"])
    assert "--submission-jobs 10001: from 1 to 10,000" in capsys.readouterr().err
