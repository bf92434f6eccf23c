"""The placement planner: one case per rule, and properties over arbitrary jobs and machines."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lambdas.common.catalog import load_catalog
from lambdas.scheduler.placement import ADMISSION_CLOSED, Fleet, JobRequest, Limits, Machine, plan

CATALOG = load_catalog()
LIMITS = Limits(max_hourly_usd=100, current_hourly_usd=0)


def job(job_id="j1", gpus=1, vcpus=2, memory_mib=8192, **kw):
    return JobRequest(job_id=job_id, submission_id=kw.pop("submission_id", "sub-1"), gpus=gpus, vcpus=vcpus,
                      memory_mib=memory_mib, **kw)


def machine(key, instance_type="g5.12xlarge", *, free_gpus=None, lifecycle="spot", region="us-east-1",
            az="us-east-1a", **kw):
    spec = CATALOG.get(instance_type)
    return Machine(key=key, instance_id=f"i-{key}", region=region, fleet="gpu4", instance_type=instance_type,
                   availability_zone=az, lifecycle=lifecycle,
                   free_gpus=spec.gpus if free_gpus is None else free_gpus,
                   free_vcpus=kw.pop("free_vcpus", spec.vcpus), free_memory_mib=kw.pop("free_memory_mib", spec.schedulable_memory_mib),
                   price_per_hour=spec.spot_price(region), **kw)


def fleet(name="gpu1", types=("g5.2xlarge", "g6.2xlarge", "g4dn.2xlarge"), *, current=0, max_instances=4,
          region="us-east-1", **kw):
    return Fleet(region=region, fleet=name, asg_name=f"mlfleet-dev-{name}", instance_types=types,
                 current_instances=current, pending_instances=0, max_instances=max_instances, **kw)


def test_packs_onto_the_fullest_machine_that_fits():
    busy = machine("a", free_gpus=1)
    empty = machine("b")
    result = plan([job()], [empty, busy], [], CATALOG, LIMITS)
    assert [p.machine_key for p in result.placements] == ["a"]


def test_gpus_weigh_most_and_free_gpus_come_from_the_caller():
    result = plan([job(gpus=2)], [machine("a", free_gpus=1), machine("b", free_gpus=2)], [], CATALOG, LIMITS)
    assert [p.machine_key for p in result.placements] == ["b"]


@pytest.mark.parametrize(
    ("job_kw", "machine_kw", "placed"),
    [
        ({"instance_type_pattern": r"g6\..*"}, {}, False),
        ({"instance_type_pattern": r"g5\..*"}, {}, True),
        ({"instance_type_pattern": r"g5"}, {}, False),  # full match, not search
        ({"regions": ("us-west-2",)}, {}, False),
        ({"lifecycle": "on-demand"}, {}, False),
        ({"lifecycle": "spot"}, {}, True),
        ({}, {"draining": True}, False),
        ({"memory_mib": 10**7}, {}, False),
    ],
    ids=["pattern-miss", "pattern-hit", "pattern-full-match", "region", "lifecycle-miss", "lifecycle-hit",
         "draining", "too-big"],
)
def test_hard_constraints(job_kw, machine_kw, placed):
    result = plan([job(**job_kw)], [machine("a", **machine_kw)], [], CATALOG, LIMITS)
    assert bool(result.placements) is placed
    if not placed:
        assert [w[0] for w in result.waiting] == ["j1"]


def test_a_machine_under_rebalance_is_avoided_when_another_fits():
    result = plan([job()], [machine("a", free_gpus=1, rebalance_recommended=True), machine("b")], [], CATALOG, LIMITS)
    assert result.placements[0].machine_key == "b"


def test_a_sweep_spreads_across_spot_pools_when_fitness_is_close():
    # On 8-GPU machines one more GPU moves fitness by 0.075: close enough for the sweep to spread.
    jobs = [job("j1", gpus=1), job("j2", gpus=1)]
    pools = [machine("a", "p4d.24xlarge", az="us-east-1a"), machine("b", "p4d.24xlarge", az="us-east-1b")]
    assert {p.machine_key for p in plan(jobs, pools, [], CATALOG, LIMITS).placements} == {"a", "b"}
    # Jobs of different submissions pack instead.
    others = [job("j1", gpus=1, submission_id="s1"), job("j2", gpus=1, submission_id="s2")]
    assert len({p.machine_key for p in plan(others, pools, [], CATALOG, LIMITS).placements}) == 1
    # On 4-GPU machines packing wins even within a sweep.
    small = [machine("a", az="us-east-1a"), machine("b", az="us-east-1b")]
    assert len({p.machine_key for p in plan(jobs, small, [], CATALOG, LIMITS).placements}) == 1


def test_admission_closed_starts_and_buys_nothing():
    result = plan([job()], [machine("a")], [fleet()], CATALOG, Limits(100, 0, admission_open=False))
    assert result.placements == () and result.scale_outs == ()
    assert result.waiting == (("j1", ADMISSION_CLOSED),)


def test_unplaced_jobs_buy_the_cheapest_capacity_per_job_and_pack_new_instances():
    one_gpu = fleet("gpu1", ("g5.2xlarge", "g6.2xlarge", "g4dn.2xlarge"))
    four_gpu = fleet("gpu4", ("g5.12xlarge", "g6.12xlarge", "g4dn.12xlarge"))
    jobs = [job(f"j{i}", gpus=1, vcpus=4, memory_mib=16000) for i in range(4)]
    result = plan(jobs, [], [one_gpu, four_gpu], CATALOG, LIMITS)
    (scale_out,) = result.scale_outs
    per_job = {"gpu1": max(CATALOG.get(t).spot_price("us-east-1") for t in one_gpu.instance_types),
               "gpu4": max(CATALOG.get(t).spot_price("us-east-1") for t in four_gpu.instance_types) / 4}
    cheapest = min(per_job, key=per_job.get)
    assert scale_out.fleet == cheapest
    assert scale_out.add_instances == (4 if cheapest == "gpu1" else 1)
    assert set(scale_out.for_jobs) == {j.job_id for j in jobs}


def test_scale_out_never_passes_the_fleet_cap_or_the_dollar_cap():
    jobs = [job(f"j{i}", gpus=1) for i in range(6)]
    capped = plan(jobs, [], [fleet(current=2, max_instances=4)], CATALOG, LIMITS)
    assert capped.scale_outs[0].add_instances == 2
    assert sum("at its cap" in reason for _, reason in capped.waiting) == 4
    price = max(CATALOG.get(t).spot_price("us-east-1") for t in fleet().instance_types)
    broke = plan(jobs, [], [fleet(max_instances=50)], CATALOG, Limits(max_hourly_usd=price * 3 + 0.001, current_hourly_usd=0))
    assert broke.scale_outs[0].add_instances == 3


def test_paused_scaling_makes_jobs_wait_with_the_reason():
    result = plan([job()], [], [fleet()], CATALOG, Limits(100, 0, scaling_allowed=False))
    assert result.scale_outs == () and "circuit breaker" in result.waiting[0][1]


def test_a_job_no_fleet_can_run_waits_with_the_reason():
    result = plan([job(gpus=1, lifecycle="on-demand")], [], [fleet()], CATALOG, LIMITS)
    assert "no fleet can run it" in result.waiting[0][1]


# --- properties --------------------------------------------------------------------------------

TYPES = ["g5.2xlarge", "g5.12xlarge", "g6.12xlarge", "g4dn.xlarge", "p4d.24xlarge"]
machines_st = st.lists(st.builds(
    lambda n, t, used, lc, rb, dr: machine(f"m{n}", t, free_gpus=max(0, CATALOG.get(t).gpus - used), lifecycle=lc,
                                            rebalance_recommended=rb, draining=dr),
    st.integers(0, 10**6), st.sampled_from(TYPES), st.integers(0, 8), st.sampled_from(["spot", "on-demand"]),
    st.booleans(), st.booleans()), max_size=8, unique_by=lambda m: m.key)
jobs_st = st.lists(st.builds(
    lambda n, g, c, m, pat, lc, sub: job(f"j{n}", gpus=g, vcpus=c, memory_mib=m, instance_type_pattern=pat,
                                         lifecycle=lc, submission_id=sub),
    st.integers(0, 10**6), st.integers(1, 8), st.integers(1, 96), st.integers(512, 400_000),
    st.sampled_from([None, r"g5\..*", r"p4d\..*"]), st.sampled_from([None, "spot", "on-demand"]),
    st.sampled_from(["s1", "s2"])), max_size=25, unique_by=lambda j: j.job_id)
fleets_st = st.lists(st.builds(
    lambda name, cur, cap: fleet(name, ("g5.12xlarge", "g6.12xlarge"), current=min(cur, cap), max_instances=cap),
    st.sampled_from(["a", "b"]), st.integers(0, 5), st.integers(1, 6)), max_size=2, unique_by=lambda f: f.fleet)


@settings(max_examples=200, deadline=None)
@given(jobs_st, machines_st, fleets_st, st.floats(1, 200), st.booleans())
def test_no_overcommit_no_constraint_violation_no_cap_exceeded_nothing_dropped(jobs, machines, fleets, cap, admit):
    limits = Limits(max_hourly_usd=cap, current_hourly_usd=0, admission_open=admit)
    result = plan(jobs, machines, fleets, CATALOG, limits)
    by_key = {m.key: m for m in machines}
    by_id = {j.job_id: j for j in jobs}
    # nothing dropped: every job placed or waiting, exactly once
    accounted = [p.job_id for p in result.placements] + [w[0] for w in result.waiting]
    assert sorted(accounted) == sorted(by_id)
    used: dict[str, list] = {}
    for p in result.placements:
        m, j = by_key[p.machine_key], by_id[p.job_id]
        assert not m.draining and admit
        assert j.lifecycle in (None, m.lifecycle)
        assert j.instance_type_pattern is None or __import__("re").fullmatch(j.instance_type_pattern, m.instance_type)
        u = used.setdefault(m.key, [0, 0, 0])
        u[0] += j.gpus; u[1] += j.vcpus; u[2] += j.memory_mib
    for key, (g, c, mem) in used.items():
        m = by_key[key]
        assert g <= m.free_gpus and c <= m.free_vcpus and mem <= m.free_memory_mib
    for f in fleets:
        added = sum(s.add_instances for s in result.scale_outs if s.fleet == f.fleet)
        assert f.current_instances + f.pending_instances + added <= f.max_instances
    assert sum(s.hourly_usd for s in result.scale_outs) <= cap + 1e-6
    assert plan(jobs, machines, fleets, CATALOG, limits) == result  # deterministic
