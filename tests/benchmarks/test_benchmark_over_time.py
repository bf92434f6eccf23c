"""The benchmark over time, on tiny traces: skipped strategies, timeless pod lists, type-aware bounds,
draining instances, releases, Karpenter's emptiness, checkpoints, hints, and the traces it generates."""

from __future__ import annotations

import json
import math
from argparse import Namespace
from pathlib import Path

import pytest

from benchmarks.scheduler.__main__ import instance_types, job_checkpoints, job_hints, main
from benchmarks.scheduler.bound import aggregate_bound, replay_bound, replay_bound_gap, snapshot_configuration_bound
from benchmarks.scheduler.simulate import Simulation, completion_chance
from benchmarks.scheduler.strategies import KarpenterWhenEmptyStrategy, MlfleetStrategy
from benchmarks.scheduler.trace import TraceJob, read_trace
from benchmarks.traces import main as make_trace
from lambdas.common.catalog import load_catalog
from lambdas.scheduler.planning import resource_prices
from lambdas.scheduler.planning.moves import STOP_LOSS_S

CATALOG = load_catalog()
TYPES = instance_types(CATALOG, "us-east-1")
BY_NAME = {t.name: t for t in TYPES}
OPENB_NO_TIMES = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"


def write(tmp_path: Path, text: str, name: str = "trace.csv") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def run_json(capsys, *argv) -> dict:
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_a_strategy_that_cannot_run_the_trace_is_skipped_and_the_others_run(tmp_path, capsys):
    # Jobs tied to T4s and to V100s: no single type holds both, so a capacity provider of one type cannot.
    trace = write(tmp_path, "submit_s,duration_s,gpus,vcpus,memory_mib,instance_type\n"
                            "0,600,1,2,4096,g4dn\\..*\n0,600,1,2,4096,p3\\..*\n")
    result = run_json(capsys, "--trace", str(trace), "--mode", "replay")
    assert "no single instance type holds every job" in result["strategies"]["ecs-binpack-memory"]["skipped"]
    for name in ALL - {"ecs-binpack-memory"}:
        assert result["strategies"][name]["jobs_completed"] == 2


ALL = {"mlfleet", "one-instance-per-job", "karpenter-when-empty", "ecs-binpack-memory", "first-fit"}


def test_an_openb_pod_list_without_times_runs_in_snapshot_mode(tmp_path, capsys):
    trace = write(tmp_path, OPENB_NO_TIMES + "p0,4000,8192,1,1000,\np1,4000,8192,1,500,\np2,1000,1024,0,0,\n")
    result = run_json(capsys, "--trace", str(trace), "--mode", "replay")
    assert result["mode"] == "snapshot" and "no time columns" in result["mode_note"] and result["jobs"] == 2
    assert all(f["jobs_completed"] == 2 for f in result["strategies"].values() if "skipped" not in f)


def test_the_lower_bound_respects_the_types_a_job_may_run_on():
    free = TraceJob("a", 0, 3600, 1, 2, 4096)
    tied = TraceJob("b", 0, 3600, 1, 2, 4096, r"p3\..*")
    need = (1, 2, 4096)

    def fractional(types):  # the aggregate LP over only these types (its dual, checked against scipy)
        return sum(p * d for p, d in zip(resource_prices([(t.capacity, t.price) for t in types], need), need))

    p3 = [t for t in TYPES if t.name.startswith("p3.")]
    assert aggregate_bound([free], TYPES) == pytest.approx(fractional(TYPES))
    assert aggregate_bound([tied], TYPES) == pytest.approx(fractional(p3)) and fractional(p3) > fractional(TYPES)
    # Two classes share no type here: the bound is the sum, never one class covering the other's demand.
    assert aggregate_bound([free, tied], TYPES) == pytest.approx(fractional(TYPES) + fractional(p3))
    assert replay_bound([free, tied], TYPES) == pytest.approx(aggregate_bound([free, tied], TYPES))
    # A job larger than small types may only use large ones (size is a constraint too).
    big = TraceJob("c", 0, 3600, 8, 90, 300_000)
    assert aggregate_bound([big], TYPES) == pytest.approx(min(t.price for t in TYPES if t.holds(big)))


def test_the_replay_bound_never_exceeds_the_exact_lp_of_an_interval():
    jobs = [TraceJob(f"j{i}", i * 600, 1800 + i * 300, 1 + i % 2, 4 + i % 16, 8192 * (1 + i % 6),
                     r"p3\..*" if i % 5 == 0 else None) for i in range(30)]
    gap = replay_bound_gap(jobs, TYPES, sample=15)
    assert gap["sampled"] == 15 and gap["worst_shortfall"] >= -1e-6  # never above the exact optimum
    assert replay_bound(jobs, TYPES) > 0


def test_a_replay_whose_jobs_take_no_time_has_a_bound_of_zero_and_runs(tmp_path, capsys):
    # Found by fuzzing the benchmark: no interval has work, and the bound's dual step had nothing to price.
    assert replay_bound([TraceJob("a", 0, 0, 1, 4, 8192), TraceJob("b", 60, 0, 1, 4, 8192)], TYPES) == 0.0
    trace = write(tmp_path, "submit_s,duration_s,gpus,vcpus,memory_mib\n0,0,1,4,8192\n")
    result = run_json(capsys, "--trace", str(trace), "--mode", "replay", "--strategies", "mlfleet")
    assert result["lower_bound_cost_usd"] == 0.0 and result["strategies"]["mlfleet"]["jobs_completed"] == 1


def test_the_configuration_bound_keeps_jobs_tied_to_a_gpu_model():
    tied = [TraceJob(f"t{i}", 0, 60, 1, 4, 8192, r"p3\..*") for i in range(2)]
    bound = snapshot_configuration_bound(tied, TYPES)
    assert bound.converged and bound.cost == pytest.approx(2 * BY_NAME["p3.2xlarge"].price)


def tiny_sim(jobs, strategy, **kw) -> Simulation:
    return Simulation(jobs, TYPES, strategy, mode="replay", interruptions_per_hour=kw.pop("rate", 0.0), seed=1,
                      boot_s=180, max_attempts=3, **kw)


def test_an_interrupted_instance_counts_as_capacity_on_its_way_so_no_second_one_is_bought():
    job = TraceJob("j", 0, 7200, 1, 2, 4096)
    strategy = MlfleetStrategy(TYPES, CATALOG, "us-east-1", 5400, 1800, release_after_s=180)
    sim = tiny_sim([job], strategy)
    sim.now = 0.0
    sim._on_arrive(sim.jobs["j"])
    strategy.schedule(sim, 0.0)
    (box,) = sim.boxes
    sim.now = 240.0
    strategy.schedule(sim, 240.0)  # the box is ready: the job starts on it
    assert sim.jobs["j"].state == "running"
    sim.now = 600.0
    sim._on_notice(box)  # the 2-minute notice: the job goes back to the queue
    strategy.schedule(sim, 600.0)
    assert len(sim.boxes) == 1  # production counts the draining instance as launching: nothing bought
    sim.now = 720.0
    sim._on_reclaim(box)  # the group replaces it
    assert len(sim.boxes) == 2 and sim.boxes[1].type == box.type


@pytest.mark.parametrize("rule", [True, False], ids=["rule", "without-rule"])
def test_a_big_instance_reclaimed_under_a_small_job_is_not_replaced_in_kind(rule):
    """The chain planning/replacement.py breaks: a one-GPU job on an 8-GPU box (left from an 8-GPU job).
    With the rule the group's replacement is declined and the plan buys the job's own box at the notice;
    without it (`--mlfleet-without replacement`) the group replaces the 8-GPU box and the job waits for it."""
    job = TraceJob("j", 0, 7200, 1, 2, 4096)
    strategy = MlfleetStrategy(TYPES, CATALOG, "us-east-1", 5400, 1800, release_after_s=180, replacement_rule=rule)
    sim = tiny_sim([job], strategy)
    sim.now = 0.0
    # A g4dn.metal: a T4 of it costs less than twice a g4dn.xlarge, so the job may take it (packer.py, dear
    # room: an eighth of a g6.48xlarge would not be).
    big = sim.launch(BY_NAME["g4dn.metal"])
    sim.now = 240.0
    sim._on_arrive(sim.jobs["j"])
    strategy.schedule(sim, 240.0)  # the big box is ready and empty: the job starts on it
    assert sim.jobs["j"].state == "running" and len(sim.boxes) == 1
    sim.now = 600.0
    sim._on_notice(big)
    strategy.schedule(sim, 600.0)
    sim.now = 720.0
    sim._on_reclaim(big)
    bought = [b.type.name for b in sim.boxes[1:]]
    if rule:
        assert not big.replaced and len(bought) == 1 and BY_NAME[bought[0]].price < big.price / 10
    else:
        assert big.replaced and bought == ["g4dn.metal"]


def test_mlfleet_releases_an_empty_instance_after_the_delay_and_never_one_with_work():
    jobs = [TraceJob("a", 0, 600, 1, 2, 4096), TraceJob("b", 4000, 600, 1, 2, 4096)]
    strategy = MlfleetStrategy(TYPES, CATALOG, "us-east-1", 5400, 1800, release_after_s=180)
    sim = tiny_sim(jobs, strategy)
    sim.run()
    assert all(s.state == "completed" for s in sim.jobs.values())
    first = sim.boxes[0]
    # Bought at the first tick (60), ready at 240, the job runs from the next tick (300) to 900; the
    # release delay runs out at 1080 and the run on the tick after (1140) gives the instance back.
    assert first.terminated == 1140.0 and strategy.released == 2 and len(sim.boxes) == 2


def test_small_jobs_of_unknown_runtime_do_not_keep_up_an_instance_bought_for_a_pinned_training():
    """The synthetic traces' case (docs/scheduler-benchmark.md, "Dear room"): a 4-GPU job tied to H100s
    gets a p5.48xlarge for two hours while one-GPU jobs of unknown runtime arrive every ten minutes for
    eight. The p5's room is theirs only at a T4's price: they get their own instances, and the p5 goes
    one release delay after its job. Before, they filled its room one after another and kept it up for
    eight hours at $23 an hour."""
    pinned = TraceJob("train", 0, 7200, 4, 24, 92_160, r"p5\..*")
    small = [TraceJob(f"s{n}", 300 + 600 * n, 3600, 1, 4, 8192) for n in range(48)]
    strategy = MlfleetStrategy(TYPES, CATALOG, "us-east-1", 5400, 1800, release_after_s=180)
    sim = tiny_sim([pinned, *small], strategy)
    sim.run()
    assert all(s.state == "completed" for s in sim.jobs.values())
    (p5,) = [b for b in sim.boxes if b.type.name == "p5.48xlarge"]
    # Bought at 60, ready at 240, the training runs from 300 to 7,500; given back on the first run after
    # 7,500 + 180.
    assert p5.terminated == 7740.0


def test_releases_the_disruption_budget_holds_back_go_on_the_next_ticks_not_with_the_reaper():
    """Twelve one-GPU jobs end together on twelve g4dn.xlarge: the budget (10% of the group, rounded up)
    lets a run give back two, then one. Production's scheduler runs every minute, so the simulation runs
    it again while any is held back; before, the rest waited for the next event or the reaper (90 + 30
    minutes)."""
    jobs = [TraceJob(f"j{n}", 0, 600, 1, 2, 4096) for n in range(12)]
    strategy = MlfleetStrategy(TYPES, CATALOG, "us-east-1", 5400, 1800, release_after_s=180)
    sim = tiny_sim(jobs, strategy)
    sim.run()
    assert len(sim.boxes) == 12 and strategy.released == 12
    # Bought at 60, ready at 240, the jobs run 300-900; the delay runs out at 1080: two go at the run of
    # 1140 (ceil(10% of 12)), then one a minute (ceil(10% of 10 or fewer)).
    assert sorted(b.terminated for b in sim.boxes) == [1140.0, 1140.0, *(1140.0 + 60 * k for k in range(1, 11))]


def test_the_cost_breakdown_books_each_second_of_an_instance_once():
    """The release scenario above, second by second: 180 s booting, 600 s running its one job (a whole
    g4dn.xlarge's GPU: its used share is 1), empty from ready to the job (60 s) and after it (240 s)."""
    jobs = [TraceJob("a", 0, 600, 1, 2, 4096)]
    sim = tiny_sim(jobs, MlfleetStrategy(TYPES, CATALOG, "us-east-1", 5400, 1800, release_after_s=180))
    sim.run()
    (box,) = sim.boxes
    hour = box.price / 3600
    assert box.type.name == "g4dn.xlarge" and (box.launched, box.terminated) == (60.0, 1140.0)
    assert sim.spend == pytest.approx({"booting": 180 * hour, "used": 600 * hour, "empty": 300 * hour,
                                       "unused_room": 0.0})


@pytest.mark.parametrize("job, used_share", [
    (TraceJob("gpu", 0, 3600, 1, 2, 4096), 0.25),  # one of four GPUs
    (TraceJob("cpu", 0, 3600, 1, 36, 4096), 0.75),  # 36 of 48 vCPUs
    (TraceJob("mem", 0, 3600, 1, 2, 93859), 0.5),  # half its memory
    # A quarter of the memory of one of four GPUs, shared: a sixteenth of the GPUs.
    (TraceJob("mps", 0, 3600, 0, 2, 4096, gpu_memory_mib=BY_NAME["g4dn.12xlarge"].gpu_memory // 4), 1 / 16),
], ids=["gpus", "vcpus", "memory", "shared-gpu"])
def test_a_running_instance_splits_its_price_by_the_largest_share_its_jobs_hold(job, used_share):
    sim = tiny_sim([job], MlfleetStrategy(TYPES, CATALOG, "us-east-1", 5400, 1800, release_after_s=180))
    box = sim.launch(BY_NAME["g4dn.12xlarge"])
    sim.now = box.ready
    sim._on_arrive(sim.jobs[job.job_id])
    sim.start(sim.jobs[job.job_id], box)
    sim.now += 3600
    sim._stop(sim.jobs[job.job_id])
    sim.terminate(box)
    assert sim.spend["used"] == pytest.approx(box.price * used_share, rel=1e-3)
    assert sim.spend["unused_room"] == pytest.approx(box.price * (1 - used_share), rel=1e-3)
    assert sim.spend["booting"] == pytest.approx(box.price * 180 / 3600) and sim.spend["empty"] == 0.0


def test_the_breakdown_adds_up_to_the_cost_under_interruptions(tmp_path, capsys):
    rows = "".join(f"{i * 900},{5400 + i * 600},{1 + i % 2},{2 + 2 * (i % 3)},{4096 * (1 + i % 2)}\n" for i in range(12))
    trace = write(tmp_path, "submit_s,duration_s,gpus,vcpus,memory_mib\n" + rows)
    result = run_json(capsys, "--trace", str(trace), "--mode", "replay", "--interruptions-per-hour", "0.5")
    for name, figures in result["strategies"].items():
        parts = figures["cost_breakdown_usd"]
        assert set(parts) == {"used", "unused_room", "empty", "booting"} and min(parts.values()) >= 0, name
        assert sum(parts.values()) == pytest.approx(figures["cost_usd"], abs=0.03), name
    # One instance per job boots a machine for every run; mlfleet reuses the machines it has.
    mlfleet, alone = result["strategies"]["mlfleet"], result["strategies"]["one-instance-per-job"]
    assert alone["cost_breakdown_usd"]["booting"] > mlfleet["cost_breakdown_usd"]["booting"]


def test_karpenter_removes_an_empty_node_after_consolidate_after_and_never_moves_jobs():
    jobs = [TraceJob("long", 0, 7200, 1, 2, 4096), TraceJob("short", 0, 600, 1, 2, 4096)]
    strategy = KarpenterWhenEmptyStrategy(TYPES, consolidate_after_s=30)
    sim = tiny_sim(jobs, strategy)
    sim.run()
    # One batch of two pods: one node, the cheapest type holding both.
    (node,) = sim.boxes
    assert node.type.name == min((t for t in TYPES if t.gpus >= 2 and t.vcpus >= 4), key=lambda t: t.price).name
    # Ready at 240, both start at the 300 tick; the long one ends at 7500, the node goes 30 s later.
    assert sim.jobs["long"].runs == 1 and node.terminated == pytest.approx(300 + 7200 + 30)


def started_alone(duration_s: float, checkpoint_s: float | None, *, runs: int = 0, progress: float = 0.0):
    """One job under mlfleet, having used `runs` and saved `progress`, started on the instance bought
    for it (ready at 240 s: the 180 s boot after the first tick)."""
    strategy = MlfleetStrategy(TYPES, CATALOG, "us-east-1", 5400, 1800, release_after_s=180)
    sim = tiny_sim([TraceJob("j", 0, duration_s, 1, 2, 4096)], strategy,
                   checkpoints={"j": checkpoint_s} if checkpoint_s else {})
    state = sim.jobs["j"]
    state.runs, state.progress = runs, progress
    sim._on_arrive(state)
    strategy.schedule(sim, 0.0)
    sim.now = 240.0
    strategy.schedule(sim, 240.0)
    assert state.state == "running" and state.runs == runs + 1
    return sim, state


def test_a_checkpointing_job_resumes_from_its_last_checkpoint():
    sim, state = started_alone(4 * 3600, 1800.0)
    sim.now = 240.0 + 5000
    sim._on_notice(sim.boxes[0])
    assert state.progress == 3600.0 and state.remaining_s == 3 * 3600 and state.state == "waiting"


def test_hints_carry_the_stated_error_and_never_the_duration_itself():
    jobs = [TraceJob(f"j{i}", 0, 1000.0 + i, 1, 2, 4096) for i in range(2000)]
    args = Namespace(seed=1, hint_share=0.5, hint_sigma=1.0, checkpoint_share=0.25, checkpoint_interval_minutes=30)
    hints = job_hints(jobs, args)
    assert 900 < len(hints) < 1100 and hints == job_hints(jobs, args)  # seeded
    errors = [math.log(hints[j.job_id] / j.duration_s) for j in jobs if j.job_id in hints]
    assert abs(sum(errors) / len(errors)) < 0.1 and 0.9 < (sum(e * e for e in errors) / len(errors)) ** 0.5 < 1.1
    assert 400 < len(job_checkpoints(jobs, args)) < 600
    assert not job_hints(jobs, Namespace(**{**vars(args), "hint_share": 0.0}))


def test_replay_reports_completed_gpu_hours_dollars_per_gpu_hour_and_a_timeline(tmp_path, capsys):
    trace = write(tmp_path, "submit_s,duration_s,gpus,vcpus,memory_mib\n0,3600,2,4,8192\n600,1800,1,2,4096\n")
    result = run_json(capsys, "--trace", str(trace), "--mode", "replay", "--timeline-hours", "0.5")
    figures = result["strategies"]["one-instance-per-job"]
    assert figures["completed_gpu_hours"] == pytest.approx(2.5)
    assert figures["usd_per_completed_gpu_hour"] == pytest.approx(figures["cost_usd"] / 2.5, abs=0.005)  # rounded cost
    timeline = figures["cost_timeline"]
    assert timeline[0] == [0.0, 0.0] and timeline[-1][1] == pytest.approx(figures["cost_usd"], abs=0.01)
    assert all(a[1] <= b[1] for a, b in zip(timeline, timeline[1:]))


@pytest.mark.parametrize("mode", ["replay", "snapshot"])
def test_the_cost_by_instance_type_adds_up_to_the_cost(tmp_path, capsys, mode):
    # One instance per job: a 2-GPU job and a 1-GPU job take two different cheapest types.
    trace = write(tmp_path, "submit_s,duration_s,gpus,vcpus,memory_mib\n0,3600,2,4,8192\n600,1800,1,2,4096\n")
    figures = run_json(capsys, "--trace", str(trace), "--mode", mode)["strategies"]["one-instance-per-job"]
    by_type = figures["cost_by_instance_type"]
    assert len(by_type) == 2 and list(by_type.values()) == sorted(by_type.values(), reverse=True)
    assert sum(by_type.values()) == pytest.approx(figures["cost_usd"], abs=0.02)


def test_generated_traces_are_seeded_and_readable(tmp_path):
    for kind in ("synthetic", "resample"):
        first, second = tmp_path / f"{kind}-1.csv", tmp_path / f"{kind}-2.csv"
        extra = ["--days", "2"] if kind == "synthetic" else []
        assert make_trace([kind, "--seed", "4", "--output", str(first), *extra]) == 0
        assert make_trace([kind, "--seed", "4", "--output", str(second), *extra]) == 0
        assert first.read_text() == second.read_text()
        trace = read_trace(first)
        assert trace.format == "plain" and trace.jobs and all(j.submission for j in trace.jobs)


SOURCE_PODS = OPENB_NO_TIMES.strip().split(",") + ["qos", "pod_phase", "creation_time", "deletion_time", "scheduled_time"]


@pytest.mark.parametrize("share", [0.0, 0.5, 1.0])
def test_a_gpushare_trace_draws_fractional_pods_in_the_share_asked_keeping_each_pod(tmp_path, capsys, share):
    rows = ["whole,8000,30517,1,1000,,LS,Running,100,900,100", "eight,64000,262144,8,1000,,LS,Running,0,7200,10",
            "cpu,4000,8192,0,0,,BE,Running,0,60,0"] + [
        f"part{n},4000,15258,1,{100 * (n + 1)},,BE,Running,{n * 60},{n * 60 + 600},{n * 60}" for n in range(5)]
    source = write(tmp_path, ",".join(SOURCE_PODS) + "\n" + "\n".join(rows) + "\n", "source.csv")
    first, second = tmp_path / "a.csv", tmp_path / "b.csv"
    for output in (first, second):
        assert make_trace(["gpushare", "--seed", "2", "--fractional-share", str(share), "--source", str(source),
                           "--output", str(output)]) == 0
    assert first.read_text() == second.read_text()
    by_shape = {tuple(r.split(",")[1:]) for r in rows}
    drawn = first.read_text().splitlines()[1:]
    assert len(drawn) == 7 and all(tuple(r.split(",")[1:]) in by_shape for r in drawn)  # the 7 GPU pods, as they were
    fractional = sum(1 for r in drawn if 0 < int(r.split(",")[4]) < 1000)
    assert {0.0: fractional == 0, 0.5: 0 < fractional < 7, 1.0: fractional == 7}[share]  # seed 2 draws 0 < n < 7
    trace = read_trace(first, share_fractional=True, reference_gpu_memory_mib=15073)
    assert trace.format == "openb" and trace.timed and sum(1 for j in trace.jobs if j.shares_gpu) == fractional
    with pytest.raises(SystemExit):
        make_trace(["gpushare", "--fractional-share", "1.5", "--output", str(first)])
    assert "--fractional-share must be in [0, 1]" in capsys.readouterr().err


def test_a_gpushare_trace_from_a_pod_list_without_times_has_none_either(tmp_path):
    source = write(tmp_path, OPENB_NO_TIMES + "a,4000,8192,1,500,,\nb,8000,16384,2,1000,T4\n", "source.csv")
    output = tmp_path / "out.csv"
    assert make_trace(["gpushare", "--fractional-share", "0.5", "--source", str(source), "--output", str(output)]) == 0
    assert output.read_text().splitlines()[0] == OPENB_NO_TIMES.strip()
    trace = read_trace(output)
    assert trace.format == "openb" and not trace.timed and len(trace.jobs) == 2


@pytest.mark.parametrize("checkpoint, state, forgiven", [(1800.0, "waiting", 1), (None, "dead_lettered", 0)])
def test_an_interruption_after_a_checkpoint_in_the_run_gives_the_attempts_back(checkpoint, state, forgiven):
    """The retry rule of lambdas/job_events/decide.py, in the simulation: the job's last attempt (3 of 3)
    saved in its run before the notice, so it goes back to the queue; without checkpoints it is done."""
    sim, run = started_alone(40 * 3600, checkpoint, runs=2)  # two runs already used: this is the last
    sim.now = 240.0 + 2000  # one checkpoint (1,800 s) into the run
    sim._on_notice(sim.boxes[0])
    assert (run.state, run.forgiven, run.attempts_used) == (state, 3 * forgiven, 3 - 3 * forgiven)


def test_an_interruption_before_the_first_checkpoint_of_the_run_uses_an_attempt():
    sim, run = started_alone(40 * 3600, 1800.0, progress=3600.0)  # saved by earlier runs, not this one
    sim.now = 240.0 + 1000
    sim._on_notice(sim.boxes[0])
    assert (run.state, run.forgiven, run.attempts_used, run.progress) == ("waiting", 0, 1, 3600.0)


def test_a_sweep_job_without_a_hint_is_believed_to_run_as_its_arrived_siblings_hints_say():
    """As in production (planning/runtimes.py): a job whose spec has no estimate takes its submission's,
    from the jobs of the submission the scheduler has seen, never one still to arrive."""
    jobs = [TraceJob("a", 0, 3600, 1, 2, 4096, submission="sweep"), TraceJob("b", 0, 3600, 1, 2, 4096, submission="sweep"),
            TraceJob("c", 5000, 3600, 1, 2, 4096, submission="sweep"), TraceJob("d", 0, 3600, 1, 2, 4096)]
    strategy = MlfleetStrategy(TYPES, CATALOG, "us-east-1", 5400, 1800, release_after_s=180)
    sim = tiny_sim(jobs, strategy, hints={"a": 7200.0, "c": 60.0})
    sim.now = 0.0
    assert strategy._belief(sim, sim.jobs["b"]).seconds == pytest.approx(7200)
    assert strategy._belief(sim, sim.jobs["d"]) is None  # a submission of its own, without a hint
    sim.now = 6000.0
    assert strategy._belief(sim, sim.jobs["b"]).seconds == pytest.approx(math.sqrt(7200 * 60))
    assert strategy._belief(sim, sim.jobs["a"]).seconds == pytest.approx(7200)


@pytest.mark.parametrize("duration_h, checkpoint_h, rate, attempts", [
    (10, None, 0.05, 3), (100, None, 0.05, 3), (5, None, 0.2, 1), (5, 6, 0.2, 3), (0, None, 0.2, 3), (10, None, 0, 3)])
def test_the_completion_chance_of_a_job_without_checkpoints_is_its_runs_all_cut_short(duration_h, checkpoint_h,
                                                                                       rate, attempts):
    """A checkpoint interval of the duration or more saves nothing: one level, as without checkpoints."""
    expected = 1 - (1 - math.exp(-rate * duration_h)) ** attempts
    assert completion_chance(duration_h * 3600, checkpoint_h and checkpoint_h * 3600, rate, attempts) == \
        pytest.approx(expected)


def test_the_completion_chance_of_a_checkpointing_job_counts_each_resume_from_a_save():
    # One attempt, two intervals: the first run completes (k^2), or is cut short in the second interval
    # after saving the first (k - k^2) and the resumed run, with its attempt back, completes that (k).
    k = math.exp(-0.3 * 2)  # a run gets past one 2-hour interval at 0.3 interruptions an hour
    assert completion_chance(4 * 3600, 2 * 3600, 0.3, 1) == pytest.approx(k ** 2 + (k - k ** 2) * k)
    # A last interval that is only part of one: the run from the save needs 1 hour more, not 2.
    assert completion_chance(3 * 3600, 2 * 3600, 0.3, 1) == pytest.approx(k * math.exp(-0.3) + (k - math.exp(-0.9)) * math.exp(-0.3))
    without = completion_chance(40 * 3600, None, 0.05, 3)
    saving = [completion_chance(40 * 3600, hours * 3600, 0.05, 3) for hours in (8, 2, 0.5)]
    assert without < saving[0] < saving[1] < saving[2] < 1  # the more often it saves, the likelier it completes


@pytest.mark.parametrize("strategy", ["one-instance-per-job", "mlfleet"])
def test_the_jobs_a_replay_dead_letters_are_what_the_interruptions_alone_make_likely(tmp_path, capsys, strategy):
    """The expectation the results carry (`expected_if_all_spot`) against the simulation itself: 200 jobs
    of 10 hours at 0.2 interruptions an hour, half of them saving every 30 minutes. Each run is cut short
    whatever instance it is on, and the count a strategy dead-letters stays within four standard deviations
    of what the durations and checkpoints alone make likely (65 of 200 here; without the retry rule's
    attempts given back for a save, the checkpointing jobs would lose more)."""
    rows = [f"{i * 60},{10 * 3600},1,4,8192" for i in range(200)]
    trace = write(tmp_path, "submit_s,duration_s,gpus,vcpus,memory_mib\n" + "\n".join(rows) + "\n")
    result = run_json(capsys, "--trace", str(trace), "--mode", "replay", "--interruptions-per-hour", "0.2",
                      "--seed", "3", "--strategies", strategy)
    expected = result["expected_if_all_spot"]
    figures = result["strategies"][strategy]
    assert 62 < expected["jobs_dead_lettered"] < 68
    spread = 4 * math.sqrt(expected["jobs_dead_lettered"])
    assert abs(figures["jobs_dead_lettered"] - expected["jobs_dead_lettered"]) < spread
    assert abs(figures["completed_gpu_hours"] - expected["completed_gpu_hours"]) < 5 * spread
    assert "expected_if_all_spot" not in run_json(capsys, "--trace", str(trace), "--mode", "replay",
                                                  "--strategies", strategy, "--limit", "5")


def test_headroom_starts_the_next_job_like_the_last_one_without_a_boot_and_lets_go_after_the_window():
    """Two alike jobs half an hour apart. Released after the boot time, the first job's instance is gone
    when the second arrives, which waits for a boot. With an hour of headroom (planning/headroom.py) the
    scheduler keeps room for one more such job: the second starts on the next tick. Once the window has
    passed, what was kept is given back: nothing runs on."""
    jobs = [TraceJob("a", 0, 600, 1, 2, 4096), TraceJob("b", 1800, 600, 1, 2, 4096)]
    waits, costs = {}, {}
    for window in (0, 3600):
        sim = tiny_sim(jobs, MlfleetStrategy(TYPES, CATALOG, "us-east-1", 5400, 1800, release_after_s=180,
                                             headroom_window_s=window, headroom_max_jobs=8))
        sim.run()
        waits[window] = sim.jobs["b"].first_start - 1800
        costs[window] = sum((b.terminated - b.launched) / 3600 * b.price for b in sim.boxes)
        assert all(b.terminated is not None for b in sim.boxes)
        if window:  # the last job bought for was bought for at 60 s: its window ends at 3,660 s, and so does all
            assert max(b.terminated for b in sim.boxes) <= 60 + window + 60
    assert waits[0] >= 180 and waits[3600] <= 60
    assert costs[3600] > costs[0]  # the wait is bought with dollars


def two_hosts(moves: bool) -> tuple[Simulation, MlfleetStrategy]:
    """Two g4dn.12xlarge, each bought for four one-GPU jobs of 12 vCPUs: on the first, three end after an hour
    and `long` (ten hours, a checkpoint every 30 minutes) stays; on the second, bought ten minutes later,
    three end after an hour and `anchor` (twenty hours, no checkpoints) stays."""
    jobs = [*(TraceJob(f"short{n}", 0, 3600, 1, 12, 24576) for n in range(3)), TraceJob("long", 0, 36000, 1, 12, 24576),
            *(TraceJob(f"later{n}", 600, 3600, 1, 12, 24576) for n in range(3)),
            TraceJob("anchor", 600, 72000, 1, 12, 24576)]
    strategy = MlfleetStrategy(TYPES, CATALOG, "us-east-1", 5400, 1800, release_after_s=180, moves=moves)
    sim = tiny_sim(jobs, strategy, checkpoints={"long": 1800.0})
    sim.run()
    return sim, strategy


@pytest.mark.parametrize("moves", [True, False], ids=["moves", "without-moves"])
def test_a_checkpointing_job_left_alone_on_a_big_instance_is_moved_into_room_another_one_pays_for(moves):
    """With the move stage `long` is stopped (its attempt not counted, its work saved on the SIGTERM), resumes
    on the second machine, and the first goes; without it (`--mlfleet-without moves`) the first runs the ten
    hours."""
    sim, strategy = two_hosts(moves)
    long, anchor = sim.jobs["long"], sim.jobs["anchor"]
    assert all(s.state == "completed" for s in sim.jobs.values()) and long.attempts_used <= 1
    first, second = sorted(sim.boxes, key=lambda b: b.launched)
    assert len(sim.boxes) == 2 and first.type.name == second.type.name == "g4dn.12xlarge"  # nothing bought to move
    if moves:
        assert strategy.jobs_moved == 1 and long.runs == 2 and first.terminated < 3 * 3600
        # It lost the stop's STOP_LOSS_S at most, and the wait for the next run.
        assert 36000 < long.gpu_seconds <= 36000 + STOP_LOSS_S + 60
        # The second machine ends with `anchor`, given back by the release stage after its delay.
        assert anchor.first_start + 72000 <= second.terminated <= anchor.first_start + 72000 + 180 + 120
    else:
        assert strategy.jobs_moved == 0 and long.runs == 1 and first.terminated > 36000


def test_the_move_saves_what_the_emptied_machine_would_have_cost():
    with_moves, without = (two_hosts(moves)[0] for moves in (True, False))
    first = min(with_moves.boxes, key=lambda b: b.launched)
    saved_h = 36000 / 3600 - (first.terminated - first.launched) / 3600
    assert without.cost_so_far() - with_moves.cost_so_far() == pytest.approx(saved_h * first.price, rel=0.02)
