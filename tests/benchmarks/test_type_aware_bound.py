"""The type-aware bound (`lower_bound_cost_usd`) counts each resource of an instance under dual-feasible
functions: it sees that jobs over half an instance never share it, and it never exceeds what a real
packing costs."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import benchmarks.scheduler.bound as bound_module
from benchmarks.scheduler.bound import (aggregate_bound, job_kinds, replay_bound, replay_bound_gap,
                                       snapshot_configuration_bound, type_rows)
from benchmarks.scheduler.trace import TraceJob
from tests.benchmarks.test_benchmark_gpu_sharing import BY_NAME, exact_cost

BIG = BY_NAME["g4dn.12xlarge"]  # 4 GPUs, 48 vCPUs
SMALL_TYPES = [BY_NAME["g4dn.xlarge"], BY_NAME["g4dn.4xlarge"], BIG]


def jobs_of(*shapes, start=0):
    return [TraceJob(f"j{start + n}", 0, 3600, gpus, vcpus, memory) for n, (gpus, vcpus, memory) in enumerate(shapes)]


def test_a_job_takes_its_gpus_and_its_vcpus_from_one_type():
    # Jobs of 1 GPU and 40 vCPUs: a g4dn.12xlarge is cheap per GPU, a g4dn.16xlarge cheap per vCPU, and
    # each holds one such job. Covering each resource on its own (the LP before 2026-11-26) took the GPUs
    # from the one and the vCPUs from the other, 0.67 of the true cost; per kind, the bound is exact.
    sixteen = BY_NAME["g4dn.16xlarge"]
    jobs = jobs_of(*[(1, 40, 8192)] * 4)
    assert aggregate_bound(jobs, [BIG, sixteen]) == pytest.approx(4 * sixteen.price)
    assert exact_cost(jobs, [BIG, sixteen]) == pytest.approx(4 * sixteen.price)


def test_jobs_over_half_of_an_instances_gpus_each_take_one():
    # Pooled GPUs say 1.5 instances for two 3-GPU jobs; u_1 counts each as a whole instance.
    jobs = jobs_of((3, 4, 8192), (3, 4, 8192))
    assert aggregate_bound(jobs, [BIG]) == pytest.approx(2 * BIG.price)
    assert replay_bound(jobs, [BIG]) == pytest.approx(2 * BIG.price)


def test_jobs_over_half_of_an_instances_vcpus_each_take_one():
    # Three 1-GPU jobs of 25 of 48 vCPUs: pooled, 1.56 instances; no two fit one.
    jobs = jobs_of(*[(1, 25, 8192)] * 3)
    assert aggregate_bound(jobs, [BIG]) == pytest.approx(3 * BIG.price)


def test_a_threshold_sees_a_big_job_beside_small_ones_that_cannot_join_it():
    # On one type of 48 vCPUs: two jobs of 40 vCPUs and four of 10. Pooled: 120/48 = 2.5 instances, and
    # u_1..u_3 count 2, 2.67 and 2.67. No 10-vCPU job fits beside a 40-vCPU one, so three instances; the
    # threshold U^(10/48) counts each 40-vCPU job as 1 and the small ones as themselves: 2 + 40/48.
    jobs = jobs_of((1, 40, 8192), (1, 40, 8192), *[(0, 10, 8192)] * 4)
    assert aggregate_bound(jobs, [BIG]) == pytest.approx((2 + 40 / 48) * BIG.price)
    assert exact_cost(jobs, [BIG]) == pytest.approx(3 * BIG.price)


def test_a_trace_of_many_sizes_is_bounded_over_fewer_kinds_rounded_down(monkeypatch):
    # 300 distinct sizes: past MAX_KINDS the sizes are rounded down, coarser until the kinds are few enough.
    # Rounded-down jobs pack wherever the jobs do, so the bound is still below the exact-kinds one, and
    # each kind keeps the types its jobs may use.
    jobs = [TraceJob(f"j{n}", n * 60, 3600, 1 + n % 2, 1 + n % 7 + n / 1000, 4000 + 97 * n) for n in range(300)]
    exact_kinds, _ = job_kinds(jobs, SMALL_TYPES)
    exact = aggregate_bound(jobs, SMALL_TYPES), replay_bound(jobs, SMALL_TYPES)
    monkeypatch.setattr(bound_module, "MAX_KINDS", 70)
    kinds, of_job = job_kinds(jobs, SMALL_TYPES)
    assert len(exact_kinds) == 300 and len(kinds) <= 70
    for job, k in zip(jobs, of_job):
        kind = kinds[k]
        assert kind.vcpus <= job.vcpus and kind.memory_mib <= job.memory_mib and kind.gpus == job.gpus
        assert kind.types == tuple(i for i, t in enumerate(SMALL_TYPES) if t.holds(job))
    rounded = aggregate_bound(jobs, SMALL_TYPES), replay_bound(jobs, SMALL_TYPES)
    assert 0.8 * exact[0] < rounded[0] <= exact[0] + 1e-6 and 0 < rounded[1]


def test_the_identity_rows_stay_first_even_where_two_are_equal():
    # 1 of 4 GPUs and 12 of 48 vCPUs: the GPU and vCPU rows are equal, and both stay where the single-price
    # dual of the replay bound prices them (a repeat of a later view is what is dropped).
    kinds, _ = job_kinds(jobs_of((1, 12, 8192)), [BIG])
    rows = type_rows(BIG, kinds, [0], [1.0], Counter())
    assert rows[:3, 0].tolist() == pytest.approx([0.25, 0.25, 8192 / BIG.memory_mib])
    assert len({row.tobytes() for row in rows[3:]}) == len(rows) - 3


shapes_st = st.lists(st.tuples(st.integers(0, 4), st.integers(1, 48), st.integers(256, 180_000)),
                     min_size=1, max_size=4)


@settings(max_examples=40, deadline=None)
@given(shapes_st)
def test_the_bound_never_exceeds_the_configuration_bound_nor_the_exact_optimum(shapes):
    jobs = [j for j in jobs_of(*shapes) if any(t.holds(j) for t in SMALL_TYPES)]
    if jobs:
        configuration = snapshot_configuration_bound(jobs, SMALL_TYPES)
        assert configuration.converged
        # The configuration bound is rounded to 4 decimals.
        assert aggregate_bound(jobs, SMALL_TYPES) - 1e-4 <= configuration.cost <= exact_cost(jobs, SMALL_TYPES) + 1e-6


@settings(max_examples=15, deadline=None)
@given(st.lists(st.tuples(shapes_st.map(lambda s: s[0]), st.integers(0, 7200), st.integers(1, 7200)),
                min_size=2, max_size=12))
def test_the_replay_bound_never_exceeds_the_exact_lp_of_an_interval(jobs):
    trace = [TraceJob(f"j{n}", start, duration, *shape) for n, (shape, start, duration) in enumerate(jobs)]
    trace = [j for j in trace if any(t.holds(j) for t in SMALL_TYPES)]
    if trace:
        assert replay_bound_gap(trace, SMALL_TYPES, sample=5)["worst_shortfall"] >= -1e-6
