"""The scheduler Lambda feeding the planner's time stages, against moto: what a run reads for them (the
machines' tags and launch times, the jobs on each machine, the ledger's run times, each job's checkpoint
interval), and the release stage's proposals carried out end to end by the removal executor under the
run's placement lease (the one decision, the one executor: docs/removal.md).

Where moto differs from AWS: moto launches the group's instances when the test builds it, so a machine
"empty for an hour" was launched seconds ago; the runs here plan at a time past EC2's first billed minute
(under a placement lease taken as the handler takes it) and configure the release delay they need.
tests/removal/world.py lists the rest.
"""

from __future__ import annotations

import json
import math
import time
from datetime import datetime, timedelta, timezone

import boto3
import pytest
from conftest import (
    ASG, CLUSTER, FAMILY, HOME, build_fleet, fleets_json, on_demand_fleets_json, open_admission, scheduler_settings,
)

from lambdas.common import lease
from lambdas.common.catalog import load_catalog
from lambdas.jobs import ledger as L
from lambdas.jobs.fleets import parse_fleets, regions
from lambdas.jobs.spec import assign_ids, parse_spec
from lambdas.scheduler import handler as scheduler
from lambdas.scheduler.requests import job_request
from lambdas.scheduler.beliefs import runtime_beliefs
from lambdas.scheduler import state
from lambdas.scheduler.planning.runtimes import HINT_LOG_SIGMA, SIBLING_HINT_LOG_SIGMA


def later(minutes: float = 2) -> datetime:
    """A time past the instances' first billed minute (moto launches them as a test builds its fleet)."""
    return datetime.now(timezone.utc) + timedelta(minutes=minutes)


def run_held(home: dict, now: datetime | None = None, **overrides) -> dict:
    """One scheduler run at `now` under the placement lease, taken and given back as the handler does."""
    settings = scheduler.Settings(**{**vars(scheduler_settings(home)), **overrides})
    dynamodb = boto3.client("dynamodb", HOME)
    taken = lease.acquire(dynamodb, settings.jobs_table, "scheduler:test", now=time.time(), run_seconds=170)
    assert taken.granted
    try:
        return scheduler.run(settings, lambda: 170_000, now=now or later(), held=taken.lease)
    finally:
        lease.release(dynamodb, settings.jobs_table, taken.lease)


def tag(instance_ids, key: str, value: str) -> None:
    boto3.client("ec2", HOME).create_tags(Resources=list(instance_ids), Tags=[{"Key": key, "Value": value}])


def read(now: datetime) -> state.RegionView:
    return state.read_region(HOME, parse_fleets(fleets_json()), load_catalog(), {}, now)


def spec(**changes):
    document = {"image": "ghcr.io/team/train:1", "command": ["python"], "gpus": 1, "vcpus": 1, "memory_mib": 1024}
    return parse_spec({**document, **changes}, fleet_regions=(HOME,), catalog=load_catalog(), default_max_attempts=3)


def test_a_run_reads_keep_alive_removal_launch_and_the_jobs_on_each_machine(aws):
    now = later()
    instances = build_fleet(size=3)
    first, second, third = sorted(instances)
    tag([first], "mlfleet:keep-alive", "true")
    tag([second], "mlfleet:removing", "release@2026-11-23T00:00:00+00:00")
    job_id = "sub-20261122120000-abcdef-00000"
    boto3.client("ecs", HOME).start_task(cluster=CLUSTER, taskDefinition=FAMILY, containerInstances=[instances[third]],
                                         startedBy=job_id)
    view = read(now)
    by_id = {m.instance_id: m for m in view.machines}
    assert by_id[first].protected and not by_id[third].protected
    assert by_id[second].removing and not by_id[third].removing
    assert by_id[third].jobs == frozenset({job_id}) and by_id[first].jobs == frozenset()
    assert by_id[third].launched_at is not None and by_id[third].launched_at <= now.timestamp() + 60
    (fleet,) = view.fleets
    # The machine being removed is neither usable nor on its way; it counts against the budget.
    assert (fleet.current_instances, fleet.pending_instances, fleet.removing_instances, fleet.min_size) == (2, 0, 1, 0)


def test_a_run_gives_back_what_stayed_empty_past_the_delay_through_the_executor(aws, home):
    instances = build_fleet(size=2)
    now = later()
    open_admission()
    # Empty for four minutes: under the delay, nothing is released.
    tag(instances, "mlfleet:empty-since", (now - timedelta(minutes=4)).isoformat(timespec="seconds"))
    assert run_held(home, now, release_after_empty_minutes=5)["released"] == []
    # Empty for an hour: released, one at a time (10% of two rounds up to one), with the desired capacity
    # decremented by the executor's terminate.
    tag(instances, "mlfleet:empty-since", (now - timedelta(hours=1)).isoformat(timespec="seconds"))
    released = run_held(home, now, release_after_empty_minutes=5)["released"]
    assert len(released) == 1 and set(released) <= set(instances)
    group = boto3.client("autoscaling", HOME).describe_auto_scaling_groups(
        AutoScalingGroupNames=[ASG])["AutoScalingGroups"][0]
    assert group["DesiredCapacity"] == 1 and released[0] not in {i["InstanceId"] for i in group["Instances"]}


def test_a_delay_of_zero_releases_at_the_first_run_that_finds_the_machine_empty(aws, home):
    """`releaseAfterEmptyMinutes: 0`: the run that first sees a machine empty (and marks it so) gives it back,
    with no queued job for it; a delay of one minute keeps it that run."""
    instances = build_fleet(size=1)
    now = later()
    open_admission()
    assert run_held(home, now, release_after_empty_minutes=1)["released"] == []
    ec2 = boto3.client("ec2", HOME)
    marked = {t["Key"] for r in ec2.describe_instances(InstanceIds=list(instances))["Reservations"]
              for i in r["Instances"] for t in i.get("Tags", [])}
    assert "mlfleet:empty-since" in marked  # that run marked it empty, and kept it for the minute
    ec2.delete_tags(Resources=list(instances), Tags=[{"Key": "mlfleet:empty-since"}])  # as if newly empty
    assert run_held(home, now, release_after_empty_minutes=0)["released"] == list(instances)


def test_a_machine_a_queued_job_fits_is_used_not_released(aws, home):
    instances = build_fleet(size=1)
    now = later()
    open_admission()
    tag(instances, "mlfleet:empty-since", (now - timedelta(hours=1)).isoformat(timespec="seconds"))
    ledger = L.Ledger(boto3.client("dynamodb", HOME), home["table"])
    for job in assign_ids("sub-20261122120000-abcdef", [spec(expected_runtime_s=600)]):
        ledger.put_new(L.new_record(job, now.timestamp()))
    summary = run_held(home, now, release_after_empty_minutes=1, fleets=on_demand_fleets_json())
    assert len(summary["started"]) == 1 and summary["released"] == []


def test_a_keep_alive_machine_is_never_released(aws, home):
    instances = build_fleet(size=1)
    now = later()
    open_admission()
    tag(instances, "mlfleet:empty-since", (now - timedelta(hours=1)).isoformat(timespec="seconds"))
    tag(instances, "mlfleet:keep-alive", (now + timedelta(days=1)).isoformat(timespec="seconds"))
    assert run_held(home, now, release_after_empty_minutes=5)["released"] == []
    # Expired: the mark no longer protects it (the reaper reads it the same way, lambdas/common/keep_alive.py).
    tag(instances, "mlfleet:keep-alive", (now - timedelta(days=1)).isoformat(timespec="seconds"))
    assert run_held(home, now, release_after_empty_minutes=5)["released"] == list(instances)


def test_each_job_request_carries_its_checkpoint_interval_attempts_and_belief(aws, home):
    now = later()
    ledger = L.Ledger(boto3.client("dynamodb", HOME), home["table"])
    checkpointing, plain = assign_ids("sub-20261122120000-abcdef",
                                      [spec(checkpoint_interval_minutes=30, max_attempts=3), spec()])
    for job in (checkpointing, plain):
        ledger.put_new(L.new_record(job, now.timestamp()))
    fleet_regions = regions(parse_fleets(fleets_json()))
    request = job_request(ledger.get(checkpointing.job_id), fleet_regions)
    assert request.checkpoint_interval_s == 1800.0 and request.attempts_left == 3 and request.runtime is None
    assert job_request(ledger.get(plain.job_id), fleet_regions).checkpoint_interval_s is None


def test_the_ledger_says_when_a_run_started_and_how_long_a_finished_one_took(aws, home):
    ledger = L.Ledger(boto3.client("dynamodb", HOME), home["table"])
    (job,) = assign_ids("sub-20261122120000-abcdef", [spec()])
    ledger.put_new(L.new_record(job, 100.0))
    assert ledger.get(job.job_id).started_at is None and ledger.get(job.job_id).run_seconds is None
    ledger.transition(job.job_id, L.STARTING, expect_states=[L.QUEUED], expect_attempt=0, reason="r", now=110.0,
                      attempt=1)
    ledger.transition(job.job_id, L.RUNNING, expect_states=[L.STARTING], expect_attempt=1, reason="r", now=120.0)
    assert ledger.get(job.job_id).started_at == 120.0 and ledger.get(job.job_id).run_seconds is None
    ledger.transition(job.job_id, L.SUCCEEDED, expect_states=[L.RUNNING], expect_attempt=1, reason="r", now=720.0)
    assert ledger.get(job.job_id).run_seconds == 600.0
    assert json.loads(json.dumps(ledger.get(job.job_id).spec.to_document())).get("expected_runtime_s") is None
    # Its siblings' belief: one finished run of 600 s.
    beliefs = runtime_beliefs(ledger, [ledger.get(job.job_id)])
    assert round(beliefs[job.job_id].seconds) == 600


def finished(ledger: L.Ledger, job, seconds: float) -> None:
    """The job's record as one that ran `seconds` and succeeded."""
    ledger.put_new(L.new_record(job, 100.0))
    ledger.transition(job.job_id, L.STARTING, expect_states=[L.QUEUED], expect_attempt=0, reason="r", now=110.0,
                      attempt=1)
    ledger.transition(job.job_id, L.RUNNING, expect_states=[L.STARTING], expect_attempt=1, reason="r", now=120.0)
    ledger.transition(job.job_id, L.SUCCEEDED, expect_states=[L.RUNNING], expect_attempt=1, reason="r",
                      now=120.0 + seconds)


def test_a_large_submission_is_believed_from_its_first_jobs_read_in_one_bounded_page(aws, home, monkeypatch):
    """A submission of up to 10,000 jobs is read SIBLINGS_READ jobs deep, first by job id (they start and
    finish first), in one page that evaluates no more items than it returns: the belief is theirs. Here the
    bound is 3 of 6 finished jobs; all six would give the median of 600 s and 60,000 s runs (6,000 s)."""
    from lambdas.scheduler import beliefs as beliefs_module

    monkeypatch.setattr(beliefs_module, "SIBLINGS_READ", 3)
    dynamodb = boto3.client("dynamodb", HOME)
    ledger = L.Ledger(dynamodb, home["table"])
    *done, queued = assign_ids("sub-20261122120000-abcdef", [spec()] * 7)
    for index, job in enumerate(done):
        finished(ledger, job, 600.0 if index < 3 else 60_000.0)
    ledger.put_new(L.new_record(queued, 100.0))
    limits, returned = [], []
    dynamodb.meta.events.register("provide-client-params.dynamodb.Query",
                                  lambda params, **kwargs: limits.append(params.get("Limit")))
    dynamodb.meta.events.register("after-call.dynamodb.Query",
                                  lambda parsed, **kwargs: returned.append(len(parsed.get("Items", []))))
    beliefs = runtime_beliefs(ledger, [ledger.get(queued.job_id)])
    assert round(beliefs[queued.job_id].seconds) == 600
    assert (limits, returned) == ([3], [3])


def test_a_job_without_an_estimate_takes_its_submissions_from_the_ledger(aws, home):
    """A submission's jobs are alike: the one whose spec has no estimate is believed to run about as long
    as its siblings' specs say, whether those siblings are pending with it or already running (read from
    the ledger's by-submission index, the same read that finds finished siblings)."""
    ledger = L.Ledger(boto3.client("dynamodb", HOME), home["table"])
    hinted, plain, other = assign_ids("sub-20261122120000-abcdef",
                                      [spec(expected_runtime_s=7200), spec(), spec(expected_runtime_s=60)])
    (stranger,) = assign_ids("sub-20261122120500-fedcba", [spec()])
    for job in (hinted, plain, stranger):
        ledger.put_new(L.new_record(job, 100.0))
    pending = [ledger.get(job.job_id) for job in (hinted, plain, stranger)]
    beliefs = runtime_beliefs(ledger, pending)
    assert round(beliefs[plain.job_id].seconds) == 7200
    assert beliefs[plain.job_id].log_sigma == pytest.approx(SIBLING_HINT_LOG_SIGMA)
    assert beliefs[hinted.job_id].log_sigma == pytest.approx(HINT_LOG_SIGMA) and stranger.job_id not in beliefs
    # Only the plain job is planned now (its siblings running, say): their estimates come from the ledger's read.
    ledger.put_new(L.new_record(other, 100.0))
    beliefs = runtime_beliefs(ledger, [ledger.get(plain.job_id)])
    assert round(beliefs[plain.job_id].seconds) == round(math.sqrt(7200 * 60))  # the median of two estimates
