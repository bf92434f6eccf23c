"""The move stage (lambdas/scheduler/planning/moves.py): one case per rule, the saving's arithmetic, the cap
per run, and the plan's wiring (only with a release policy and without headroom; a moved job is bought no
host again)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from lambdas.common.catalog import load_catalog
from lambdas.scheduler.planning import Fleet, JobRequest, Limits, Machine, ReleasePolicy, RuntimeEstimate, plan
from lambdas.scheduler.planning.moves import (
    MAX_MOVES_PER_RUN, MIN_RUN_S, MOVE_FACTOR, RunningJob, propose_moves,
)
from lambdas.scheduler.planning.purchase import purchase
from lambdas.scheduler.planning.fleets import purchase_options
from lambdas.scheduler.planning.constraints import Patterns

CATALOG = load_catalog()
NOW = 1_000_000.0
BIG, SMALL = "g4dn.12xlarge", "g4dn.xlarge"
PRICE = {t: CATALOG.get(t).spot_price("us-east-1") for t in (BIG, SMALL)}
BOOT_S = 180.0


def job(job_id="j1", *, checkpoint_s=1800.0, runtime=None, vcpus=2.0, memory_mib=4096, **kw):
    return JobRequest(job_id, f"sub-{job_id}", 1, vcpus, memory_mib, checkpoint_interval_s=checkpoint_s,
                      runtime=runtime, **kw)


def busy(key="m1", instance_type=BIG, jobs=(), **kw):
    spec = CATALOG.get(instance_type)
    fields = dict(key=key, instance_id=f"i-{key}", region="us-east-1", fleet=instance_type,
                  instance_type=instance_type, availability_zone="us-east-1a", lifecycle="spot",
                  free_gpus=spec.gpus - sum(j.gpus for j in jobs),
                  free_vcpus=spec.schedulable_vcpus - sum(j.vcpus for j in jobs),
                  free_memory_mib=spec.schedulable_memory_mib - sum(j.memory_mib for j in jobs),
                  price_per_hour=PRICE[instance_type], launched_at=NOW - 10 * 3600,
                  submissions=frozenset(j.submission_id for j in jobs), jobs=frozenset(j.job_id for j in jobs))
    fields.update(kw)
    return Machine(**fields)


def fleets(current=3, min_size=0):
    return [Fleet("us-east-1", t, f"mlfleet-dev-{t}", (t,), current, 0, 50, min_size=min_size) for t in (BIG, SMALL)]


def alone(request):
    return PRICE[SMALL]


def running(jobs, key="m1", ran_s=5 * 3600.0):
    return [RunningJob(j, key, NOW - ran_s) for j in jobs]


def moves(jobs, machine=None, *, ran_s=5 * 3600.0, fleet_list=None, placed_on=(), **kw):
    machine = machine or busy(jobs=jobs)
    return propose_moves([machine], fleet_list or fleets(), CATALOG, running(jobs, machine.key, ran_s), alone, NOW,
                         BOOT_S, placed_on, **kw)


def test_a_lone_checkpointing_job_on_a_big_machine_is_moved_with_the_saving_it_expects():
    (move,) = moves([job()])
    assert move.machine_key == "m1" and move.job_ids == ("j1",)
    # Nothing known of its runtime: as long again as it has run (5 h), a boot on its own instance, and the
    # work since its last half-hourly checkpoint (5 h is a multiple: none).
    left = 5 * 3600.0
    assert move.saving_usd == pytest.approx((PRICE[BIG] * left - PRICE[SMALL] * (left + BOOT_S)) / 3600, abs=0.01)
    assert "g4dn.12xlarge" in move.reason and f"${PRICE[BIG]:.3f}/h" in move.reason


@pytest.mark.parametrize(("jobs", "kw", "machine_kw"), [
    ([job(checkpoint_s=None)], {}, {}),
    ([job(), job("j2", checkpoint_s=None)], {}, {}),
    ([job()], {"ran_s": MIN_RUN_S - 1}, {}),
    ([job()], {"placed_on": ("m1",)}, {}),
    ([job()], {"fleet_list": fleets(current=1, min_size=1)}, {}),
    ([job()], {}, {"protected": True}),
    ([job()], {}, {"draining": True}),
    ([job()], {}, {"removing": True}),
    ([job()], {}, {"fleet": "not-a-fleet"}),
    ([job()], {}, {"free_gpus": 2}),  # 4 GPUs, the job's 1, and another task's 1
    ([job()], {}, {"jobs": frozenset({"j1", "j9"})}),
], ids=["no-checkpoints", "one-without-checkpoints", "ran-under-an-hour", "placed-this-run", "group-at-minimum",
        "keep-alive", "draining", "removing", "unknown-group", "a-gpu-held-by-another-task", "another-job-runs"])
def test_each_rule_keeps_the_jobs_where_they_are(jobs, kw, machine_kw):
    machine = replace(busy(jobs=jobs), **machine_kw)
    assert moves(jobs, machine, **kw) == ()


@pytest.mark.parametrize(("alone_usd", "moved"), [(PRICE[BIG] / MOVE_FACTOR / 4 + 0.001, False),
                                                   (PRICE[BIG] / MOVE_FACTOR / 4 - 0.001, True)])
def test_moved_only_past_the_factor(alone_usd, moved):
    jobs = [job(f"j{n}") for n in range(4)]  # four one-GPU jobs fill the four GPUs
    machine = busy(jobs=jobs)
    found = propose_moves([machine], fleets(), CATALOG, running(jobs), lambda r: alone_usd, NOW, BOOT_S)
    assert bool(found) is moved


def test_a_job_believed_to_end_soon_is_not_moved():
    soon = RuntimeEstimate(seconds=5 * 3600.0 + 300, log_sigma=0.1)
    assert moves([job(runtime=soon)]) == ()
    long = RuntimeEstimate(seconds=50 * 3600.0, log_sigma=0.1)
    assert moves([job(runtime=long)])


def test_work_lost_since_the_last_checkpoint_counts_against_the_move():
    # Run 5 h with a checkpoint every 3 h: 2 h since the last one. A job believed to end in ~3 h more.
    belief = RuntimeEstimate(seconds=8 * 3600.0, log_sigma=0.05)
    (with_checkpoint,) = moves([job(checkpoint_s=3600.0, runtime=belief)])
    (losing,) = moves([job(checkpoint_s=3 * 3600.0, runtime=belief)])
    assert with_checkpoint.saving_usd - losing.saving_usd == pytest.approx(2 * PRICE[SMALL], abs=0.01)


def test_no_instance_to_buy_instead_keeps_the_job():
    machine = busy(jobs=[job()])
    assert propose_moves([machine], fleets(), CATALOG, running([job()]), lambda r: None, NOW, BOOT_S) == ()


def test_at_most_the_cap_a_run_and_the_largest_saving_first():
    machines = [busy(f"m{n}", jobs=[job(f"j{n}")]) for n in range(MAX_MOVES_PER_RUN + 2)]
    ran = [RunningJob(job(f"j{n}"), f"m{n}", NOW - (2 + n) * 3600.0) for n in range(len(machines))]
    found = propose_moves(machines, fleets(current=10), CATALOG, ran, alone, NOW, BOOT_S)
    assert len(found) == MAX_MOVES_PER_RUN
    assert [m.saving_usd for m in found] == sorted((m.saving_usd for m in found), reverse=True)
    assert found[0].machine_key == f"m{len(machines) - 1}"  # ran longest: expected to run longest


def test_the_plan_moves_only_with_a_release_policy_and_without_headroom():
    jobs = [job()]
    machine = busy(jobs=jobs)
    args = ([], [machine], fleets(), CATALOG, Limits(100.0, 1.0))
    kw = dict(now=NOW, boot_s=BOOT_S, running=running(jobs))
    assert plan(*args, release=ReleasePolicy(after_empty_s=180), **kw).moves
    assert plan(*args, **kw).moves == ()
    assert plan(*args, release=ReleasePolicy(after_empty_s=180), headroom_on=True, **kw).moves == ()


def test_a_moved_job_believed_long_gets_its_own_instance_not_a_host():
    week = RuntimeEstimate(seconds=7 * 24 * 3600.0, log_sigma=0.2)
    request = job(runtime=week, vcpus=12.0, memory_mib=24576)
    mid = "g4dn.4xlarge"  # 16 vCPUs: the job's own instance
    options = purchase_options([*fleets(), Fleet("us-east-1", mid, f"mlfleet-dev-{mid}", (mid,), 0, 0, 50)], CATALOG,
                               None)
    first, _ = purchase([request], options, CATALOG, Patterns(), Limits(100.0, 0.0))
    again, _ = purchase([JobRequest(**{**vars(request), "moved": True})], options, CATALOG, Patterns(),
                        Limits(100.0, 0.0))
    assert [s.fleet for s in first] == [BIG]  # the host, valued full of such jobs
    assert [s.fleet for s in again] == [mid]
