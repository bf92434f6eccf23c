"""The benchmark with --share-fractional-gpus: the trace mapping, the sharing-aware bound (its dual-feasible
functions, and that it never exceeds an exact optimum), the simulation's per-GPU accounting and its
checker, and the JSON."""

from __future__ import annotations

import itertools
import json
import math
from collections import Counter
from functools import partial
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import benchmarks.configuration_bound as configuration_bound_module
from benchmarks.configuration_bound import BASE_VIEWS, THRESHOLD_VIEWS, dual_feasible_views, threshold
from benchmarks.scheduler.__main__ import BenchmarkError, check_packing, instance_types, main
from benchmarks.scheduler.bound import aggregate_bound, replay_bound, snapshot_configuration_bound
from benchmarks.scheduler.simulate import Simulation
from benchmarks.scheduler.strategies import MlfleetStrategy
from benchmarks.scheduler.trace import TraceError, TraceJob, read_trace
from lambdas.common.catalog import load_catalog

CATALOG = load_catalog()
TYPES = instance_types(CATALOG, "us-east-1")
BY_NAME = {t.name: t for t in TYPES}
T4 = BY_NAME["g4dn.xlarge"].gpu_memory
OPENB_HEADER = ("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,"
                "scheduled_time")


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "trace.csv"
    path.write_text(text)
    return path


def test_fractional_pods_ask_for_their_share_of_the_reference_gpu(tmp_path):
    path = write(tmp_path, OPENB_HEADER + "\np0,2000,4096,1,460,,LS,Running,0,600,0\np1,2000,4096,1,1000,,LS,Running,0,600,0\n")
    shared = {j.job_id: j for j in read_trace(path, share_fractional=True, reference_gpu_memory_mib=T4).jobs}
    assert (shared["p0"].gpus, shared["p0"].gpu_memory_mib, shared["p0"].trace_gpus) == (0, T4 * 460 // 1000, 0.46)
    assert shared["p1"].gpus == 1 and not shared["p1"].shares_gpu  # a whole GPU stays whole
    assert shared["p0"].as_whole() == TraceJob("p0", 0, 600, 1, 2.0, 4096, None, gpu_fraction=0.46,
                                               min_gpu_memory_mib=T4 * 460 // 1000)
    whole = {j.job_id: j for j in read_trace(path).jobs}
    assert whole["p0"].gpus == 1 and whole["p0"].trace_gpus == 0.46


def test_plain_traces_may_ask_for_gpu_memory_and_never_for_both(tmp_path):
    header = "submit_s,duration_s,gpus,vcpus,memory_mib,gpu_memory_mib\n"
    trace = read_trace(write(tmp_path, header + "0,60,0,2,4096,6000\n0,60,1,2,4096,\n"))
    assert [(j.gpus, j.gpu_memory_mib) for j in trace.jobs] == [(0, 6000), (1, 0)]
    with pytest.raises(TraceError, match="line 2, column gpu_memory_mib.*not both"):
        read_trace(write(tmp_path, header + "0,60,1,2,4096,6000\n"))


def test_a_job_run_whole_by_a_strategy_that_cannot_share_still_needs_its_gpu_memory(tmp_path, capsys):
    """20 GiB of GPU memory fits no T4 (16 GiB) whether the GPU is shared or whole: one instance per job and
    Karpenter must buy it a 24 GiB GPU too, or they would be priced for a machine the job cannot run on."""
    big = BY_NAME["g6.xlarge"].gpu_memory  # an L4's shareable memory: more than any T4 has
    job = TraceJob("j", 0, 3600, 0, 2, 4096, gpu_memory_mib=big)
    whole = job.as_whole()
    assert (whole.gpus, whole.gpu_memory_mib, whole.min_gpu_memory_mib) == (1, 0, big)
    assert not BY_NAME["g4dn.xlarge"].holds(whole) and BY_NAME["g6.xlarge"].holds(whole)
    path = write(tmp_path, f"submit_s,duration_s,gpus,vcpus,memory_mib,gpu_memory_mib\n0,3600,0,2,4096,{big}\n")
    assert main(["--trace", str(path), "--mode", "replay", "--json"]) == 0
    for name, figures in json.loads(capsys.readouterr().out)["strategies"].items():
        bought = figures["cost_by_instance_type"]
        assert bought and all(BY_NAME[t].nominal_gpu_memory >= big for t in bought), (name, bought)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(0.001, 1.0), min_size=1, max_size=12), st.lists(st.floats(0.001, 1.0), max_size=20))
def test_each_view_is_a_dual_feasible_function(sizes, trace_shares):
    # Fekete and Schepers: for jobs that fit one GPU together, the f-values of every view sum to at most 1,
    # whichever thresholds the jobs of a trace choose (and for the jobs' own sizes as thresholds).
    if sum(sizes) <= 1.0:
        views = dual_feasible_views(Counter(trace_shares)) + tuple(partial(threshold, x) for x in sizes if x <= 0.5)
        for view in views:
            assert sum(view(x) for x in sizes) <= 1.0 + 1e-9


def test_the_thresholds_are_those_that_keep_apart_what_cannot_share_a_gpu():
    # 81% of a GPU leaves room for nothing of 22% or more, 65% for nothing of 37% or more: U^(0.22) and
    # U^(0.37) count those jobs whole, which the identity and u_1..u_3 do not see (one 81% and one 22% job
    # need 1.03 GPUs by the identity, but two GPUs).
    shares = Counter({0.81: 10, 0.65: 5, 0.37: 5, 0.22: 10, 0.1: 3})
    views = dual_feasible_views(shares)
    thresholds = [view.args[0] for view in views[len(BASE_VIEWS):]]
    assert thresholds == [0.1, 0.22, 0.37] and THRESHOLD_VIEWS >= 3  # every share of at most 1/2, here
    best = 10 + 5 * 0.65 + 5 * 0.37 + 10 * 0.22  # U^(0.22): the 81% jobs whole
    assert max(sum(n * view(x) for x, n in shares.items()) for view in views) == pytest.approx(best)
    assert max(sum(n * view(x) for x, n in shares.items()) for view in BASE_VIEWS) < best - 1e-6
    assert dual_feasible_views({}) == BASE_VIEWS


def test_two_jobs_that_fill_a_gpu_exactly_count_one_gpu_in_every_view():
    # Shares of a 15,073 MiB T4 that add up to it exactly: rounding must not count the larger one whole.
    for small in range(1, 7537):
        pair = (small / T4, (T4 - small) / T4)
        for view in dual_feasible_views(Counter(pair)):
            assert view(pair[0]) + view(pair[1]) <= 1.0 + 1e-9, small


def test_the_thresholds_that_keep_apart_come_first_when_there_are_many(monkeypatch):
    monkeypatch.setattr(configuration_bound_module, "THRESHOLD_VIEWS", 2)
    # 0.37 counts the jobs at fewer GPUs than the small shares do, but it is the one that keeps 37% off a GPU with 65%.
    shares = Counter({0.65: 1, 0.37: 1, **{x / 100: 50 for x in range(20, 36)}})
    assert 0.37 in [view.args[0] for view in dual_feasible_views(shares)[len(BASE_VIEWS):]]


def exact_cost(jobs, types) -> float:
    """Brute force over which type each job runs on and how the jobs of each type are packed: the least
    $/h of instances that run them all, each sharing job on one GPU."""
    best = math.inf
    for assignment in itertools.product(range(len(types)), repeat=len(jobs)):
        if not all(types[t].holds(j) for j, t in zip(jobs, assignment)):
            continue
        cost = 0.0
        for t, instance in enumerate(types):
            mine = [j for j, a in zip(jobs, assignment) if a == t]
            cost += instances_needed(mine, instance) * instance.price
        best = min(best, cost)
    return best


def instances_needed(jobs, instance) -> int:
    for count in range(len(jobs) + 1):
        if packs(jobs, [instance] * count):
            return count
    raise AssertionError("unreachable")


def packs(jobs, instances) -> bool:
    if not jobs:
        return True
    boxes = [[list(i.capacity), {}] for i in instances]  # free (GPUs, vCPUs, MiB), GPU -> memory left

    def take(free: list, job, sign: int, gpus: int) -> None:
        free[0] -= sign * gpus
        free[1] -= sign * job.vcpus
        free[2] -= sign * job.memory_mib

    def place(n: int) -> bool:
        if n == len(jobs):
            return True
        job = jobs[n]
        for free, shared in boxes:
            if free[1] < job.vcpus or free[2] < job.memory_mib:
                continue
            if not job.shares_gpu:
                if free[0] >= job.gpus:
                    take(free, job, 1, job.gpus)
                    if place(n + 1):
                        return True
                    take(free, job, -1, job.gpus)
                continue
            for gpu in [*shared, None]:
                opened = gpu is None
                if opened:
                    if free[0] < 1:
                        continue
                    gpu = len(shared)
                    shared[gpu] = instances[0].gpu_memory
                    free[0] -= 1
                if shared[gpu] >= job.gpu_memory_mib:
                    shared[gpu] -= job.gpu_memory_mib
                    take(free, job, 1, 0)
                    if place(n + 1):
                        return True
                    shared[gpu] += job.gpu_memory_mib
                    take(free, job, -1, 0)
                if opened:
                    del shared[gpu]
                    free[0] += 1
        return False
    return place(0)


SMALL = [BY_NAME["g4dn.xlarge"], BY_NAME["g4dn.2xlarge"]]


small_jobs_st = st.lists(st.tuples(st.booleans(), st.integers(1, T4), st.integers(1, 8), st.integers(256, 30_000)),
                         min_size=1, max_size=4).map(lambda shapes: [
    TraceJob(f"j{n}", 0, 3600, 0 if shared else 1, vcpus, memory, None, gpu_memory_mib=gpu_memory if shared else 0)
    for n, (shared, gpu_memory, vcpus, memory) in enumerate(shapes)])


@settings(max_examples=30, deadline=None)
@given(small_jobs_st)
# Found by this test: a configuration bound rounded to 1e-4 (0.4193) below the aggregate one (0.41933).
@example([TraceJob(f"j{n}", 0, 3600, 0, 1, 7609, None, gpu_memory_mib=1) for n in range(4)])
def test_both_sharing_aware_bounds_never_exceed_the_exact_optimum(jobs):
    jobs = [j for j in jobs if any(t.holds(j) for t in SMALL)]
    if jobs:
        configuration = snapshot_configuration_bound(jobs, SMALL)
        assert configuration.converged
        assert aggregate_bound(jobs, SMALL) - 1e-6 <= configuration.cost <= exact_cost(jobs, SMALL) + 1e-6


def test_the_views_make_the_bound_count_a_gpu_per_job_over_half_of_one():
    # Three jobs of 60% of a T4 each: pooled memory says 1.8 GPUs, but no two share a GPU: 3 g4dn.xlarge.
    jobs = [TraceJob(f"j{n}", 0, 3600, 0, 1, 1024, None, gpu_memory_mib=int(T4 * 0.6)) for n in range(3)]
    price = BY_NAME["g4dn.xlarge"].price
    assert aggregate_bound(jobs, [BY_NAME["g4dn.xlarge"]]) == pytest.approx(3 * price)
    two = [TraceJob(f"k{n}", 0, 3600, 0, 1, 1024, None, gpu_memory_mib=int(T4 * 0.4)) for n in range(2)]
    assert aggregate_bound(two, [BY_NAME["g4dn.xlarge"]]) == pytest.approx(price)  # two of 40% share one
    assert replay_bound(two, [BY_NAME["g4dn.xlarge"]]) == pytest.approx(price)


def test_the_thresholds_see_what_the_other_views_miss(monkeypatch):
    # On one g4dn.12xlarge (4 T4s), three jobs of 81% of a GPU, two of 47% and one of 32% pass the identity
    # (3.69 GPUs) and u_1..u_3 (3, 4 and 4 GPUs), but no GPU beside an 81% job holds the others: two
    # instances at the least. U^(0.32) counts them at 4.26 GPUs, and the configuration LP must mix patterns
    # that really fit.
    types = [BY_NAME["g4dn.12xlarge"]]
    shares = [0.81] * 3 + [0.47] * 2 + [0.32]
    jobs = [TraceJob(f"j{n}", 0, 3600, 0, 1, 1024, None, gpu_memory_mib=int(T4 * x)) for n, x in enumerate(shares)]
    price = types[0].price
    with_thresholds = snapshot_configuration_bound(jobs, types)
    aggregate = aggregate_bound(jobs, types)
    monkeypatch.setattr(configuration_bound_module, "THRESHOLD_VIEWS", 0)
    assert snapshot_configuration_bound(jobs, types).cost == pytest.approx(price)
    assert aggregate_bound(jobs, types) == pytest.approx(price)
    assert aggregate == pytest.approx(price * 4.26 / 4, rel=1e-3)
    assert exact_cost(jobs, types) == pytest.approx(2 * price)
    assert price < aggregate < with_thresholds.cost <= 2 * price + 1e-6


def test_the_checker_catches_a_gpu_shared_past_its_memory():
    jobs = [TraceJob(f"j{n}", 0, 60, 0, 1, 1024, None, gpu_memory_mib=T4 // 2) for n in range(2)]
    sim = Simulation(jobs, TYPES, MlfleetStrategy(TYPES, CATALOG, "us-east-1", 5400, 1800), mode="snapshot",
                     interruptions_per_hour=0, seed=1, boot_s=0, max_attempts=3)
    sim.run()
    check_packing(sim, "mlfleet")
    (box,) = [b for b in sim.boxes if b.jobs]
    assert len(box.jobs) == 2 and len(box.shared) == 1  # both on one GPU
    sim.jobs["j1"].job = TraceJob("j1", 0, 60, 0, 1, 1024, None, gpu_memory_mib=T4)  # now over the GPU's memory
    with pytest.raises(BenchmarkError, match="over-committed"):
        check_packing(sim, "mlfleet")


def test_a_replay_with_sharing_reports_it_and_packs_fractional_pods_onto_shared_gpus(tmp_path, capsys):
    rows = [f"p{n},2000,4096,1,{300 + 100 * (n % 4)},,LS,Running,{n * 60},{n * 60 + 7200},{n * 60}" for n in range(24)]
    path = write(tmp_path, OPENB_HEADER + "\n" + "\n".join(rows) + "\n")
    argv = ["--trace", str(path), "--mode", "replay", "--strategies", "mlfleet,one-instance-per-job", "--json"]
    assert main([*argv, "--share-fractional-gpus"]) == 0
    shared = json.loads(capsys.readouterr().out)
    assert main(argv) == 0
    whole = json.loads(capsys.readouterr().out)
    assert shared["share_fractional_gpus"] and shared["fractional_jobs"] == 24 and shared["gpu_share_reference_mib"] == T4
    for result in (shared, whole):
        for figures in result["strategies"].values():
            assert figures["jobs_completed"] == 24 and figures["jobs_lost"] == 0
            assert figures["completed_gpu_hours"] == pytest.approx(sum(0.3 + 0.1 * (n % 4) for n in range(24)) * 2)
    # One instance per job never shares: the same either way. mlfleet pays less when the pods share GPUs.
    assert shared["strategies"]["one-instance-per-job"]["cost_usd"] == whole["strategies"]["one-instance-per-job"]["cost_usd"]
    assert shared["strategies"]["mlfleet"]["cost_usd"] < whole["strategies"]["mlfleet"]["cost_usd"]
    assert shared["lower_bound_cost_usd"] < whole["lower_bound_cost_usd"]


def test_the_configuration_bound_packs_each_gpu_exactly():
    # Three jobs of 60% of a T4 never share one; two of 40% each fit beside one of them: three GPUs. The
    # bound finds that, never exceeds the brute-force optimum nor falls below the class LP's bound.
    types = [BY_NAME["g4dn.xlarge"], BY_NAME["g4dn.12xlarge"]]
    jobs = [TraceJob(f"j{n}", 0, 3600, 0, 1, 1024, None, gpu_memory_mib=int(T4 * (0.6 if n < 3 else 0.4)))
            for n in range(5)]
    bound = snapshot_configuration_bound(jobs, types)
    assert bound.converged and bound.cost == pytest.approx(exact_cost(jobs, types))
    assert bound.cost >= aggregate_bound(jobs, types) - 1e-6
    assert bound.cost == pytest.approx(3 * BY_NAME["g4dn.xlarge"].price)
