"""Costs people can see, against moto: the owner column and --mine in `list`, the cost report of `mlfleet cost`,
and the cost the job-events function records when a run placed by the real scheduler ends."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest
from conftest import CLUSTER, ENV, HOME, aws_client, build_fleet, fleets_json, run_mlfleet, scheduler_settings

from lambdas.job_events.handler import Settings as EventSettings
from lambdas.job_events.handler import handle as job_event
from lambdas.jobs import cli
from lambdas.jobs import ledger as L
from lambdas.jobs.cli import report
from lambdas.jobs.spec import assign_ids
from lambdas.scheduler.handler import run as run_scheduler

IMAGE = "ghcr.io/team/train:3"


def mlfleet(*argv) -> tuple[int, list[str]]:
    code, out, _ = run_mlfleet(*argv)
    return code, out


def ledger() -> L.Ledger:
    return L.Ledger(aws_client("dynamodb", HOME), f"mlfleet-{ENV}-jobs")


def submit(*extra: str) -> list[L.JobRecord]:
    _, lines = mlfleet("submit", "--image", IMAGE, "--gpus", "1", "--vcpus", "1", "--memory", "1GiB", *extra)
    return sorted(ledger().by_submission(lines[0].split(":")[0]), key=lambda r: r.index)


def finish(record: L.JobRecord, usd: float, on_demand: float, hours: float) -> None:
    ledger().transition(record.job_id, L.STARTING, expect_states=[L.QUEUED], expect_attempt=0, reason="p", now=1.0,
                        attempt=1)
    ledger().transition(record.job_id, L.SUCCEEDED, expect_states=[L.STARTING], expect_attempt=1, reason="exit code 0",
                        now=2.0, runs=1, cost=L.Cost(usd, on_demand, hours * 3600, 1))


def test_list_shows_the_owner_and_mine_shows_only_mine(service):
    (mine,) = submit()
    (theirs,) = assign_ids("sub-20261122191103-0b0b0b", [mine.spec])
    assert ledger().put_new(L.new_record(theirs, now=mine.submitted_at, owner="bo@example.com"))
    _, everyone = mlfleet("list")
    owner = everyone[0].split().index("OWNER")
    assert {row.split()[owner] for row in everyone[1:]} == {"moto", "bo@example.com"}
    _, only_mine = mlfleet("list", "--mine")
    assert [row.split()[0] for row in only_mine[1:]] == [mine.job_id]
    _, status = mlfleet("status", mine.job_id)
    assert json.loads("\n".join(status))["owner"] == "moto"


def test_the_cost_report_by_team_owner_and_submission(service):
    vision = submit("--team", "vision", "--sweep", "seed=1,2", "--", "train", "{seed}")
    plain = submit()
    finish(vision[0], 1.0, 3.0, 2.0)
    finish(vision[1], 2.0, 5.0, 1.0)
    finish(plain[0], 0.5, 1.0, 0.5)
    _, table = mlfleet("cost", "--by", "team", "--since", "1h")
    assert table[0].startswith("jobs submitted since ") and table[0].endswith(
        ", by team: cost at the prices paid, and the same share and time at on-demand prices (runs still going count "
        "once they end)")
    assert [row.split() for row in table[1:]] == [
        ["TEAM", "JOBS", "ENDED", "HOURS", "COST", "USD", "ON-DEMAND", "USD", "SAVED"],
        ["vision", "2", "2", "3.0", "3.00", "8.00", "62%"],
        ["(none)", "1", "1", "0.5", "0.50", "1.00", "50%"],
        ["total", "3", "3", "3.5", "3.50", "9.00", "61%"]]
    _, by_submission = mlfleet("cost", "--json")
    document = json.loads("\n".join(by_submission))
    assert document["by"] == "submission" and [r["group"] for r in document["rows"]] == [
        vision[0].submission_id, plain[0].submission_id, "total"]
    # jobs submitted before the period are not in it
    assert mlfleet("cost", "--since", (datetime.now(timezone.utc) + timedelta(minutes=5)).isoformat())[1][-1].split()[:2] \
        == ["total", "0"]


@pytest.mark.parametrize("text", ["7", "yesterday", "7y", "-3d"])
def test_a_period_that_is_neither_a_duration_nor_a_date_is_refused(text):
    with pytest.raises(cli.CliError, match=f"--since '{text}': expected a period such as 7d"):
        report.since(text, datetime(2026, 11, 23, tzinfo=timezone.utc))


def test_periods_and_dates():
    now = datetime(2026, 11, 23, 12, tzinfo=timezone.utc)
    assert report.since("7d", now) == now - timedelta(days=7) and report.since("90m", now) == now - timedelta(minutes=90)
    assert report.since("2026-11-01", now) == datetime(2026, 11, 1, tzinfo=timezone.utc)


def test_a_run_placed_by_the_scheduler_is_charged_at_the_price_it_was_placed_at(service):
    build_fleet(size=1)  # one g5.12xlarge: 4 GPUs, 48 vCPUs
    (job,) = submit()
    now = datetime(2026, 11, 22, 12, tzinfo=timezone.utc)
    assert run_scheduler(scheduler_settings(service), lambda: 170_000, now=now)["started"] == [job.job_id]
    placed = ledger().get(job.job_id)
    # moto's instances are on-demand and its spot prices dummies: the price is the catalog's on-demand one
    assert (placed.placement.lifecycle, placed.placement.price_per_hour, placed.placement.placed_at) == (
        "on-demand", 5.672, now.timestamp())
    stopped = {"detail-type": "ECS Task State Change", "source": "aws.ecs", "region": HOME,
               "time": (now + timedelta(hours=2)).isoformat(),
               "detail": {"clusterArn": f"arn:aws:ecs:{HOME}:123456789012:cluster/{CLUSTER}",
                          "taskArn": placed.placement.task_arn, "startedBy": job.job_id, "lastStatus": "STOPPED",
                          "desiredStatus": "STOPPED", "stopCode": "EssentialContainerExited",
                          "stoppedAt": (now + timedelta(hours=2)).isoformat(), "containers": [{"exitCode": 0}],
                          "overrides": {"containerOverrides": [{"name": "job", "environment": [
                              {"name": "MLFLEET_ATTEMPT", "value": "1"}]}]}}}
    settings = EventSettings(environment=ENV, jobs_table=service["table"], jobs_queue_url=service["queue"],
                             jobs_dlq_url=service["dlq"], fleets=fleets_json(), rebalance_timeout_minutes=30,
                             notify_email_topic_arn="")
    job_event(stopped, settings, now=now + timedelta(hours=2))
    ended = ledger().get(job.job_id)
    share = 1 / 4  # one of four GPUs: the dominant share of 1 GPU, 1 vCPU, 1 GiB on a g5.12xlarge
    assert (ended.state, ended.exit_code, ended.cost.seconds) == (L.SUCCEEDED, 0, 7200)
    assert ended.cost.usd == pytest.approx(share * 5.672 * 2) == pytest.approx(ended.cost.on_demand_usd)
    _, status = mlfleet("status", job.job_id)
    assert json.loads("\n".join(status))["cost"] == {"usd": 2.836, "on_demand_usd": 2.836, "hours": 2.0}
