"""Scheduler runs against moto: jobs start on free GPUs, the rest buy capacity once, not every minute.

Where moto differs from AWS: an instance the group launches is InService at once and never joins the
ECS cluster by itself (in AWS the ECS agent registers it a few minutes after boot), so the test
registers it, standing in for the agent. GPU counts come from the catalog minus tasks (moto has none).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta, timezone

import boto3
import pytest
import ecs_agent
from conftest import ASG, CLUSTER, ENV, HOME, build_fleet, open_admission, scheduler_settings, two_fleets_json

from lambdas.common.catalog import load_catalog
from lambdas.jobs import ledger as L
from lambdas.jobs.spec import assign_ids, parse_spec
from lambdas.scheduler import handler
from lambdas.scheduler.handler import ACT_RESERVE_MS, cover_cpu_seconds, run
from lambdas.scheduler.planning.purchase import COVER_MAX_CPU_SECONDS
from lambdas.scheduler.planning.runtimes import PRIOR_MIN_RUNS, RuntimePrior

NOW = datetime(2026, 11, 22, 12, tzinfo=timezone.utc)


def settings(home: dict):
    return scheduler_settings(home)


def queue_jobs(home: dict, count: int) -> list[str]:
    spec = parse_spec({"image": "ghcr.io/team/train:1", "command": ["python", "train.py"], "gpus": 1, "vcpus": 1,
                       "memory_mib": 1024}, fleet_regions=(HOME,), catalog=load_catalog(), default_max_attempts=3)
    jobs = assign_ids("sub-20261122120000-abcdef", [spec] * count)
    ledger = L.Ledger(boto3.client("dynamodb", HOME), home["table"])
    for job in jobs:
        assert ledger.put_new(L.new_record(job, NOW.timestamp()))
    return [job.job_id for job in jobs]


def desired() -> int:
    group = boto3.client("autoscaling", HOME).describe_auto_scaling_groups(AutoScalingGroupNames=[ASG])
    return group["AutoScalingGroups"][0]["DesiredCapacity"]


def register_new_instances(known: set[str]) -> None:
    ecs = boto3.client("ecs", HOME)
    group = boto3.client("autoscaling", HOME).describe_auto_scaling_groups(AutoScalingGroupNames=[ASG])
    for member in group["AutoScalingGroups"][0]["Instances"]:
        if member["InstanceId"] not in known:
            ecs_agent.register(ecs, CLUSTER, member["InstanceId"], HOME)


def spy_on_plan(monkeypatch, argument: str) -> list:
    """What each call of the planner got as `argument` (the plan itself runs unchanged)."""
    seen, real = [], handler.plan

    def spy(*args, **kwargs):
        seen.append(kwargs[argument])
        return real(*args, **kwargs)

    monkeypatch.setattr(handler, "plan", spy)
    return seen


def test_capacity_is_bought_once_while_it_boots_and_used_when_it_joins(home):
    instances = build_fleet(size=1)  # one g5.12xlarge: 4 GPUs
    open_admission()
    job_ids = queue_jobs(home, 6)
    ledger = L.Ledger(boto3.client("dynamodb", HOME), home["table"])

    first = run(settings(home), lambda: 170_000, now=NOW)
    assert len(first["started"]) == 4 and desired() == 2
    # The two waiting jobs carry the instance bought for them, the same one.
    boxes = {ledger.get(j).reserved for j in job_ids[4:]}
    assert len(boxes) == 1 and None not in boxes and next(iter(boxes))[:2] == (HOME, "gpu1")
    # A minute later the instance bought for the last two jobs is still booting: nothing more is bought.
    second = run(settings(home), lambda: 170_000, now=NOW + timedelta(minutes=1))
    assert second["started"] == [] and second["scaled"] == [] and desired() == 2
    assert {r.job_id for r in ledger.by_state(L.QUEUED)} == set(job_ids[4:])

    register_new_instances(set(instances))
    third = run(settings(home), lambda: 170_000, now=NOW + timedelta(minutes=5))
    assert sorted(third["started"]) == job_ids[4:] and desired() == 2
    hosts = {ledger.get(j).placement.instance_id for j in job_ids[4:]}
    assert len(hosts) == 1 and hosts.isdisjoint(instances)
    assert all(ledger.get(j).reserved is None for j in job_ids)  # started: reservations cleared


def test_a_job_of_unknown_runtime_gets_its_own_box_rather_than_a_dear_share_of_an_idle_big_one(home):
    """Dear room (planning/packer.py) in the Lambda: an empty g5.12xlarge ($2.18/h spot in the catalog: a
    quarter of it is $0.55/h) against a one-T4 fleet's g4dn.xlarge ($0.20/h). The job may outlast
    anything else the g5 would run, so the run buys the small box; with only the g5 fleet, as in the
    first test, it starts on the g5. (moto's spot prices are placeholders that state.spot_prices_for
    rejects as implausible: the catalog's prices decide here, as they do in AWS when the read fails.)"""
    build_fleet(size=1)
    small = f"mlfleet-{ENV}-small"
    boto3.client("ec2", HOME).create_launch_template(LaunchTemplateName=small, LaunchTemplateData={
        "ImageId": "ami-12c6146b", "InstanceType": "g4dn.xlarge"})
    boto3.client("autoscaling", HOME).create_auto_scaling_group(
        AutoScalingGroupName=small, LaunchTemplate={"LaunchTemplateName": small}, MinSize=0, MaxSize=4,
        DesiredCapacity=0, AvailabilityZones=[f"{HOME}a"],
        Tags=[{"Key": "mlfleet:environment", "Value": ENV, "PropagateAtLaunch": True}])
    open_admission()
    (job_id,) = queue_jobs(home, 1)
    first = run(scheduler_settings(home, fleets=two_fleets_json()), lambda: 170_000, now=NOW)
    assert first["started"] == [] and desired() == 1
    small_group = boto3.client("autoscaling", HOME).describe_auto_scaling_groups(AutoScalingGroupNames=[small])
    assert small_group["AutoScalingGroups"][0]["DesiredCapacity"] == 1
    ledger = L.Ledger(boto3.client("dynamodb", HOME), home["table"])
    assert ledger.get(job_id).state == L.QUEUED and ledger.get(job_id).reserved[:2] == (HOME, "small")


@pytest.mark.parametrize("remaining_ms, memory_mib, seconds", [
    (180_000, "1024", (180 - ACT_RESERVE_MS / 1000) * 1024 / 1769 / 2),  # the scheduler's 1,024 MB: 0.58 vCPU
    (180_000, "1769", (180 - ACT_RESERVE_MS / 1000) / 2),  # one vCPU
    (180_000, "10240", (180 - ACT_RESERVE_MS / 1000) / 2),  # more memory, more vCPUs: one thread uses one
    (180_000, None, (180 - ACT_RESERVE_MS / 1000) / 2),  # outside Lambda
    (180_000, "lots", (180 - ACT_RESERVE_MS / 1000) / 2),
    (ACT_RESERVE_MS - 1, "1024", 0.0),  # no time left to act: no cover
])
def test_the_cover_may_use_half_the_cpu_time_left_before_acting_must_stop(remaining_ms, memory_mib, seconds):
    assert cover_cpu_seconds(remaining_ms, memory_mib) == pytest.approx(seconds)


def test_a_run_bounds_the_purchase_cover_by_the_lambda_time_left(home, monkeypatch):
    build_fleet(size=1)
    open_admission()
    queue_jobs(home, 6)
    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "1024")
    seen = spy_on_plan(monkeypatch, "cover_cpu_seconds")
    first = run(settings(home), lambda: 100_000, now=NOW)
    assert len(first["started"]) == 4 and desired() == 2  # the plan is made and acted on as before
    assert seen == [pytest.approx((100 - ACT_RESERVE_MS / 1000) * 1024 / 1769 / 2)]
    # The run's summary says what the plan took and what its cover could have.
    assert first["cover_budget_cpu_s"] == pytest.approx(seen[0], abs=1e-3)
    assert 0 <= first["plan_cpu_s"] < 5


@pytest.mark.parametrize("stack_seconds, remaining_ms, expected", [
    (COVER_MAX_CPU_SECONDS, 900_000, COVER_MAX_CPU_SECONDS),  # time to spare: the stack's most
    (5.0, 900_000, 5.0),  # mlfleet:purchaseSearchCpuSeconds lowered
    (0.0, 900_000, 0.0),  # the greedy plan alone
    (COVER_MAX_CPU_SECONDS, 40_000, (40 - ACT_RESERVE_MS / 1000) / 2),  # little time left: half of it (one vCPU here)
])
def test_the_stack_setting_and_the_time_left_bound_the_purchase_search(home, monkeypatch, stack_seconds, remaining_ms,
                                                                       expected):
    build_fleet(size=1)
    open_admission()
    queue_jobs(home, 6)
    monkeypatch.delenv("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", raising=False)
    seen = []
    real = handler.plan
    monkeypatch.setattr(handler, "plan", lambda *a, **k: seen.append(k["cover_cpu_seconds"]) or real(*a, **k))
    result = run(replace(settings(home), purchase_search_cpu_seconds=stack_seconds), lambda: remaining_ms, now=NOW)
    assert len(result["started"]) == 4 and desired() == 2  # the two jobs left are bought for either way
    assert seen == [pytest.approx(expected)] and result["cover_budget_cpu_s"] == pytest.approx(expected, abs=1e-3)


def test_a_run_plans_with_the_runtimes_of_the_newest_finished_jobs(home, monkeypatch):
    """The jobs without a runtime belief are judged by what the environment's finished jobs ran
    (beliefs.runtime_prior); the run's summary says how many runs that was."""
    build_fleet(size=1)
    open_admission()
    ledger = L.Ledger(boto3.client("dynamodb", HOME), home["table"])
    *finished, _queued = queue_jobs(home, PRIOR_MIN_RUNS + 1)  # one left queued: a job to place
    start = NOW.timestamp() - 7_200
    for n, job_id in enumerate(finished):
        ledger.transition(job_id, L.STARTING, expect_states=[L.QUEUED], expect_attempt=0, reason="placed",
                          now=start, attempt=1)
        ledger.transition(job_id, L.RUNNING, expect_states=[L.STARTING], expect_attempt=1, reason="started",
                          now=start, runs=1)
        ledger.transition(job_id, L.SUCCEEDED, expect_states=[L.RUNNING], expect_attempt=1, reason="exit code 0",
                          now=start + 60 * (n + 1))
    seen = spy_on_plan(monkeypatch, "runtime_prior")
    summary = run(settings(home), lambda: 100_000, now=NOW)
    assert seen == [RuntimePrior(tuple(60.0 * (n + 1) for n in range(PRIOR_MIN_RUNS)))]
    assert summary["runtime_prior_runs"] == PRIOR_MIN_RUNS and summary["errors"] == []


def test_a_run_with_nothing_to_place_reads_no_runtime_prior(home, monkeypatch):
    build_fleet(size=1)
    open_admission()
    calls = []
    monkeypatch.setattr(handler, "runtime_prior", lambda *args: calls.append(args))
    seen = spy_on_plan(monkeypatch, "runtime_prior")
    summary = run(settings(home), lambda: 100_000, now=NOW)
    assert calls == [] and seen in ([], [None]) and summary["runtime_prior_runs"] == 0
