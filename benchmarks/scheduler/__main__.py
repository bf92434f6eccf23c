"""How much each scheduling strategy pays for a GPU trace, how close to the least possible, and what it loses.

    python -m benchmarks.scheduler --trace PATH [--mode snapshot|replay] [--seed N]
                                   [--interruptions-per-hour R] --json

The interface is fixed by DESIGN.md ("Scheduler benchmark"); docs/scheduler-benchmark.md explains the
trace mapping, each strategy, the bounds and the measured figures.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT)]

from benchmarks.scheduler.bound import aggregate_bound, replay_bound, snapshot_configuration_bound  # noqa: E402
from benchmarks.scheduler.simulate import InstanceType, Simulation, completion_chance, share_reference_mib  # noqa: E402
from benchmarks.scheduler.strategies import (  # noqa: E402
    EcsBinpackMemoryStrategy, FirstFitStrategy, KarpenterWhenEmptyStrategy, MlfleetStrategy,
    OneInstancePerJobStrategy, StrategyCannotRun,
)
from benchmarks.scheduler.trace import TraceError, read_trace  # noqa: E402
from lambdas.jobs.spec import CHECKPOINT_INTERVAL_LIMIT_MINUTES, MAX_ATTEMPTS_LIMIT  # noqa: E402
from lambdas.scheduler.planning.headroom import MAX_JOBS as HEADROOM_MAX_JOBS  # noqa: E402
from lambdas.scheduler.planning.headroom import MAX_WINDOW_MINUTES as HEADROOM_MAX_WINDOW_MINUTES  # noqa: E402
from lambdas.common.catalog import load_catalog  # noqa: E402

DEFAULT_TRACE = ROOT / "benchmarks" / "data" / "openb_pod_list_default.csv"
STRATEGIES = ("mlfleet", "one-instance-per-job", "karpenter-when-empty", "ecs-binpack-memory", "first-fit")
MLFLEET_PARTS = ("release", "runtimes", "lifecycle", "replacement", "moves")


class BenchmarkError(Exception):
    """A run that cannot give a meaningful answer (bad arguments, a strategy that broke a rule)."""


def instance_types(catalog, region: str) -> list[InstanceType]:
    types = [InstanceType(t.name, t.gpus, float(t.schedulable_vcpus), t.schedulable_memory_mib, t.spot_price(region),
                          t.on_demand_price(region), t.shareable_gpu_memory_mib, t.nominal_gpu_memory_mib)
             for t in catalog.types if region in t.regions()]
    if not types:
        raise BenchmarkError(f"--region {region}: the catalog prices no instance type there "
                             f"(it has {', '.join(catalog.regions())})")
    return types


def job_hints(jobs, args) -> dict[str, float]:
    """The runtime estimates the jobs' specs carry: for a share of the jobs, the true duration times a
    log-normal error factor exp(N(0, sigma)). The planner sees only these, never the durations."""
    rng = random.Random(f"hints:{args.seed}")
    hints = {}
    for job in sorted(jobs, key=lambda j: j.job_id):
        if rng.random() < args.hint_share:
            hints[job.job_id] = job.duration_s * math.exp(rng.gauss(0.0, args.hint_sigma))
    return hints


def job_checkpoints(jobs, args) -> dict[str, float]:
    """A share of the jobs save their progress every --checkpoint-interval-minutes (seeded choice)."""
    rng = random.Random(f"checkpoints:{args.seed}")
    return {job.job_id: args.checkpoint_interval_minutes * 60 for job in sorted(jobs, key=lambda j: j.job_id)
            if rng.random() < args.checkpoint_share}


def expected_if_all_spot(jobs, checkpoints, args) -> dict:
    """What the interruptions alone make of the trace, for any strategy that retries and runs every job on
    spot: the jobs dead-lettered and the GPU-hours completed, in expectation (`completion_chance`). A run's
    count differs from it by the draw; two runs of one strategy that differ from it in opposite ways differ
    in dollars per completed GPU-hour by that much, whatever their placements."""
    chances = [completion_chance(j.duration_s, checkpoints.get(j.job_id), args.interruptions_per_hour,
                                 args.max_attempts) for j in jobs]
    return {"jobs_dead_lettered": round(sum(1 - c for c in chances), 1),
            "completed_gpu_hours": round(sum(c * j.trace_gpus * j.duration_s for c, j in zip(chances, jobs)) / 3600, 2)}


def simulate(strategy, jobs, types, args, hints=None, checkpoints=None) -> Simulation:
    sim = Simulation(jobs, types, strategy, mode=args.mode, interruptions_per_hour=args.interruptions_per_hour,
                     seed=args.seed, boot_s=args.boot_seconds, max_attempts=args.max_attempts,
                     checkpoints=checkpoints, hints=hints, timeline_s=args.timeline_hours * 3600)
    sim.run()
    if sim.snapshot:
        check_packing(sim, strategy.name)
    return sim


def check_packing(sim: Simulation, name: str) -> None:
    """Independent of every strategy: no instance holds more than it has, every job is on one instance, and
    the jobs sharing a GPU fit its memory (the GPU each was given, counted apart from the whole ones)."""
    seen: Counter = Counter()
    for box in sim.boxes:
        used = [0, 0.0, 0]
        shared: dict[int, int] = {}
        for job_id in box.jobs:
            state = sim.jobs[job_id]
            job = state.job
            seen[job_id] += 1
            used = [used[0] + job.gpus, used[1] + job.vcpus, used[2] + job.memory_mib]
            if job.shares_gpu:
                shared[state.slot] = shared.get(state.slot, 0) + job.gpu_memory_mib
            if not box.type.holds(job):
                raise BenchmarkError(f"{name}: job {job_id} placed on {box.type.name}, which cannot run it")
        capacity = box.type.capacity
        used[0] += len(shared)
        if used[0] > capacity[0] or used[1] > capacity[1] + 1e-6 or used[2] > capacity[2] or \
                any(memory > box.type.gpu_memory for memory in shared.values()):
            raise BenchmarkError(f"{name}: instance {box.id} ({box.type.name}) over-committed: {used} > {capacity}, "
                                 f"shared GPUs {shared} of {box.type.gpu_memory} MiB")
    if any(count != 1 for count in seen.values()):
        raise BenchmarkError(f"{name}: a job is on more than one instance")


def ecs_instance_type(jobs, types, args) -> InstanceType:
    """ECS gets its best homogeneous type: of the types that hold every job, the one whose binpack of the
    whole trace at once costs least."""
    candidates = [t for t in types if all(t.holds(j) for j in jobs)]
    if not candidates:
        raise StrategyCannotRun("no single instance type holds every job (sizes, or GPU models the jobs are "
                                "tied to), and a capacity provider scales one type")
    snapshot = argparse.Namespace(**{**vars(args), "mode": "snapshot"})
    costs = {t.name: sum(b.type.price for b in simulate(EcsBinpackMemoryStrategy(t), jobs, types, snapshot).boxes)
             for t in candidates}
    return next(t for t in candidates if t.name == min(costs, key=lambda n: (costs[n], n)))


def metrics(sim: Simulation) -> dict:
    states = list(sim.jobs.values())
    by_state = Counter(s.state for s in states)
    by_type: Counter = Counter()
    if sim.snapshot:
        for b in sim.boxes:
            by_type[b.type.name] += b.price
        cost = sum(b.price for b in sim.boxes)
        bought_gpus = sum(b.type.gpus for b in sim.boxes)
        utilization = sum(s.job.gpu_memory_mib / s.box.type.gpu_memory if s.job.shares_gpu else s.job.gpus
                          for s in states if s.state == "running") / bought_gpus if bought_gpus else 0.0
        completed, lost, waits = by_state["running"], by_state["waiting"], [0.0]
        done = [s for s in states if s.state == "running"]
    else:
        end = {b.id: b.terminated for b in sim.boxes}
        for b in sim.boxes:
            by_type[b.type.name] += (end[b.id] - b.launched) / 3600 * b.price
        cost = sum(by_type.values())
        done = [s for s in states if s.state == "completed"]
        held = sum((end[b.id] - b.launched) * b.type.gpus for b in sim.boxes)
        utilization = sum(s.gpu_seconds for s in states) / held if held else 0.0
        completed = by_state["completed"]
        lost = by_state["lost"] + by_state["waiting"] + by_state["running"]
        waits = sorted(s.first_start - s.job.submit_s for s in states if s.first_start is not None) or [0.0]
        if completed + by_state["dead_lettered"] + lost != len(states):
            raise BenchmarkError("job accounting does not add up")
    completed_gpu_hours = sum(s.job.trace_gpus * s.job.duration_s for s in done) / 3600
    figures = {
        "cost_usd": round(cost, 2),
        "gpu_utilization": round(utilization, 4),
        "jobs_completed": completed,
        "jobs_lost": lost,
        "p95_wait_s": round(waits[min(len(waits) - 1, int(0.95 * len(waits)))], 1),
        "instances_launched": len(sim.boxes),
        "plan_seconds": round(sim.plan_seconds, 3),
        "completed_gpu_hours": round(completed_gpu_hours, 2),
        # Where the dollars went ($/h in snapshot mode), dearest first: which instance types a strategy pays for.
        "cost_by_instance_type": {name: round(usd, 2) for name, usd in sorted(by_type.items(), key=lambda i: (-i[1], i[0]))},
    }
    if not sim.snapshot:
        figures["usd_per_completed_gpu_hour"] = round(cost / completed_gpu_hours, 4) if completed_gpu_hours else None
        figures["jobs_dead_lettered"] = by_state["dead_lettered"]
        figures["dead_letter_reasons"] = dict(Counter(s.reason for s in states if s.state == "dead_lettered"))
        figures["on_demand_instances"] = sum(1 for b in sim.boxes if b.lifecycle != "spot")
        # What the dollars bought: the machines' used share, the room beside it, empty machines, boots.
        figures["cost_breakdown_usd"] = {part: round(usd, 2) for part, usd in sim.spend.items()}
        if abs(sum(sim.spend.values()) - cost) > 1e-6 * max(1.0, cost):
            raise BenchmarkError(f"cost breakdown {sum(sim.spend.values()):.6f} does not add up to {cost:.6f}")
        if sim.timeline:
            figures["cost_timeline"] = [[round(t / 3600, 2), round(usd, 2)] for t, usd in sim.timeline]
    return figures


def make_strategy(name: str, placeable, types, catalog, args):
    window, grace = args.idle_window_minutes * 60, args.idle_grace_minutes * 60
    if name == "mlfleet":
        without = set(args.mlfleet_without)
        return MlfleetStrategy(
            types, catalog, args.region, window, grace,
            release_after_s=None if "release" in without else (
                args.boot_seconds if args.release_after_empty_seconds is None else args.release_after_empty_seconds),
            boot_s=args.boot_seconds,
            interruptions_per_hour=0.0 if "lifecycle" in without else args.interruptions_per_hour,
            on_demand_max_instances=args.on_demand_max_instances, runtimes="runtimes" not in without,
            replacement_rule="replacement" not in without,
            headroom_window_s=args.headroom_window_minutes * 60, headroom_max_jobs=args.headroom_max_jobs,
            moves="moves" not in without)
    if name == "one-instance-per-job":
        return OneInstancePerJobStrategy(types)
    if name == "karpenter-when-empty":
        return KarpenterWhenEmptyStrategy(types, args.consolidate_after_seconds)
    if name == "first-fit":
        return FirstFitStrategy(types, window, grace)
    return EcsBinpackMemoryStrategy(ecs_instance_type(placeable, types, args))


# Strategies that run jobs sharing a GPU as they ask (ECS nvidiaMps places them by GPU memory); the others
# give each such job a whole GPU: one instance per job never shares one, and Karpenter provisions
# `nvidia.com/gpu` as whole devices (sharing on Kubernetes is the device plugin's, which it does not model).
SHARING_STRATEGIES = ("mlfleet", "ecs-binpack-memory", "first-fit")


def run(args) -> dict:
    catalog = load_catalog()
    types = instance_types(catalog, args.region)
    reference = share_reference_mib(types)
    if args.share_fractional_gpus and not reference:
        raise BenchmarkError(f"--share-fractional-gpus: no instance type priced in {args.region} can share its GPUs")
    trace = read_trace(args.trace, args.limit, share_fractional=args.share_fractional_gpus,
                       reference_gpu_memory_mib=reference)
    placeable = [j for j in trace.jobs if any(t.holds(j) for t in types)]
    wanted = [s.strip() for s in args.strategies.split(",") if s.strip()]
    unknown = sorted(set(wanted) - set(STRATEGIES))
    if unknown:
        raise BenchmarkError(f"--strategies: unknown {', '.join(unknown)} (known: {', '.join(STRATEGIES)})")
    requested = args.mode
    if not trace.timed and args.mode == "replay":
        args.mode = "snapshot"  # an openb pod list without time columns has nothing to replay
    result = {
        "trace": str(args.trace), "mode": args.mode, "jobs": len(trace.jobs),
        "unplaceable": len(trace.jobs) - len(placeable),
        "lower_bound_cost_usd": round(aggregate_bound(placeable, types) if args.mode == "snapshot"
                                      else replay_bound(placeable, types), 2),
        "strategies": {},
        "region": args.region, "seed": args.seed, "catalog_snapshot": catalog.snapshot_date,
        "excluded": dict(trace.excluded),
        "share_fractional_gpus": args.share_fractional_gpus,
        "fractional_jobs": sum(1 for j in trace.jobs if j.gpu_fraction is not None),
    }
    if args.share_fractional_gpus:
        result["gpu_share_reference_mib"] = reference
    if requested != args.mode:
        result["mode_note"] = f"--mode {requested} asked for, but the trace has no time columns: snapshot"
    hints, checkpoints = {}, {}
    if args.mode == "replay":
        hints, checkpoints = job_hints(placeable, args), job_checkpoints(placeable, args)
        result.update(interruptions_per_hour=args.interruptions_per_hour, boot_seconds=args.boot_seconds,
                      max_attempts=args.max_attempts, idle_window_minutes=args.idle_window_minutes,
                      idle_grace_minutes=args.idle_grace_minutes,
                      runtime_hints={"share": args.hint_share, "log_sigma": args.hint_sigma, "jobs": len(hints)},
                      checkpoints={"share": args.checkpoint_share,
                                   "interval_minutes": args.checkpoint_interval_minutes, "jobs": len(checkpoints)})
        if args.interruptions_per_hour > 0:
            result["expected_if_all_spot"] = expected_if_all_spot(placeable, checkpoints, args)
    if args.configuration_bound:
        if args.mode != "snapshot":
            raise BenchmarkError("--configuration-bound is computed for --mode snapshot only")
        bound = snapshot_configuration_bound(placeable, types, args.configuration_bound_minutes * 60)
        result["configuration_lp_bound_usd"] = round(bound.cost, 2)
        if not bound.converged:  # Farley's bound, still a lower bound; the LP lies between it and the master
            result["configuration_lp_bound_note"] = (
                f"stopped after {bound.iterations} rounds ({args.configuration_bound_minutes:g} min of CPU): Farley's "
                f"lower bound; the last master LP was ${bound.master_cost:,.2f}/h")
    for name in wanted:
        started = time.perf_counter()
        try:
            strategy = make_strategy(name, placeable, types, catalog, args)
        except StrategyCannotRun as reason:
            result["strategies"][name] = {"skipped": str(reason)}
            continue
        jobs = placeable if name in SHARING_STRATEGIES else [j.as_whole() for j in placeable]
        figures = metrics(simulate(strategy, jobs, types, args, hints, checkpoints))
        figures["cost_ratio_to_bound"] = round(figures["cost_usd"] / result["lower_bound_cost_usd"], 4) \
            if result["lower_bound_cost_usd"] else None
        if name == "ecs-binpack-memory":
            figures["instance_type"] = strategy.type.name
        if name == "mlfleet":
            figures["instances_released"] = strategy.released
            figures["jobs_moved"] = strategy.jobs_moved
        figures["wall_seconds"] = round(time.perf_counter() - started, 1)
        result["strategies"][name] = figures
    return result


def build_parser(prog: str = "python -m benchmarks.scheduler") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE, help="openb pod list or plain CSV")
    parser.add_argument("--mode", choices=("snapshot", "replay"), default="snapshot")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--interruptions-per-hour", type=float, default=0.0,
                        help="chance per spot instance-hour that the instance is reclaimed (0.05 = 5 per 100 h)")
    parser.add_argument("--region", default="us-east-1")
    parser.add_argument("--max-attempts", type=int, default=3, help="runs a job gets (the stack default)")
    parser.add_argument("--boot-seconds", type=float, default=180.0, help="from scale-out to a usable instance")
    parser.add_argument("--idle-window-minutes", type=float, default=90.0, help="the reaper's window")
    parser.add_argument("--idle-grace-minutes", type=float, default=30.0, help="the reaper's grace period")
    parser.add_argument("--release-after-empty-seconds", type=float,
                        help="mlfleet's release delay (default: --boot-seconds, the ski-rental choice)")
    parser.add_argument("--hint-share", type=float, default=0.5,
                        help="share of jobs whose spec carries a runtime estimate (replay)")
    parser.add_argument("--hint-sigma", type=float, default=1.0,
                        help="an estimate is the true duration times exp(N(0, sigma))")
    parser.add_argument("--checkpoint-share", type=float, default=0.5,
                        help="share of jobs that checkpoint; a requeued attempt resumes from the last one")
    parser.add_argument("--checkpoint-interval-minutes", type=float, default=30.0)
    parser.add_argument("--on-demand-max-instances", type=int, default=0,
                        help="mlfleet's cap per on-demand fleet, one per type, used only with interruptions (default "
                             "0: no on-demand fleet, as in the committed stacks)")
    parser.add_argument("--headroom-window-minutes", type=float, default=0.0,
                        help="mlfleet's headroom (mlfleet:headroomWindowMinutes): keep room for the jobs it bought "
                             "instances for in this window (0, the default: none)")
    parser.add_argument("--headroom-max-jobs", type=int, default=8,
                        help="mlfleet's headroom: at most this many of those jobs (mlfleet:headroomMaxJobs)")
    parser.add_argument("--consolidate-after-seconds", type=float, default=0.0,
                        help="karpenter-when-empty's consolidateAfter (the NodePool default is 0s)")
    parser.add_argument("--mlfleet-without", type=lambda text: [p for p in text.split(",") if p], default=[],
                        help=f"switch parts of mlfleet off, to measure them: {','.join(MLFLEET_PARTS)}")
    parser.add_argument("--timeline-hours", type=float, default=0.0,
                        help="replay: also report each strategy's cumulative cost every this many hours")
    parser.add_argument("--strategies", default=",".join(STRATEGIES))
    parser.add_argument("--limit", type=int, help="only the first N jobs of the trace (quick runs)")
    parser.add_argument("--configuration-bound-minutes", type=float, default=30.0,
                        help="CPU minutes the configuration bound may take before it reports Farley's bound (30)")
    parser.add_argument("--share-fractional-gpus", action="store_true",
                        help="openb pods with gpu_milli < 1000 ask for that share of one GPU's memory and share GPUs "
                             "(ECS MPS); without it every pod takes num_gpu whole GPUs")
    parser.add_argument("--configuration-bound", action="store_true",
                        help="also compute the configuration-LP bound (snapshot; about a minute on the shared trace)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    return parser


# Each numeric flag and the range it must lie in: (low, high, low excluded). Where a stack setting or a job
# spec key is what the flag models, the flag takes that setting's range: the job spec's attempts
# (lambdas/jobs/spec.py MAX_ATTEMPTS_LIMIT) and checkpoint interval (from a minute: shorter ones made a
# 300-job replay run for minutes), the config model's reaper window, grace and release delay (a day:
# components/config/model.py) and headroom (planning/headroom.py). A boot of more than a day hung the
# simulation (1e9 s) and is no fleet anyone runs.
DAY_MINUTES = 24 * 60
RANGES = {
    "interruptions_per_hour": (0, math.inf, False), "max_attempts": (1, MAX_ATTEMPTS_LIMIT, False),
    "boot_seconds": (0, DAY_MINUTES * 60, False), "limit": (1, math.inf, False), "hint_share": (0, 1, False),
    "checkpoint_share": (0, 1, False), "hint_sigma": (0, math.inf, False),
    "checkpoint_interval_minutes": (1, CHECKPOINT_INTERVAL_LIMIT_MINUTES, False),
    "on_demand_max_instances": (0, math.inf, False),
    "consolidate_after_seconds": (0, DAY_MINUTES * 60, False), "timeline_hours": (0, math.inf, False),
    "headroom_window_minutes": (0, HEADROOM_MAX_WINDOW_MINUTES, False),
    "headroom_max_jobs": (0, HEADROOM_MAX_JOBS, False),
    "release_after_empty_seconds": (0, DAY_MINUTES * 60, False), "idle_window_minutes": (0, DAY_MINUTES, False),
    "idle_grace_minutes": (0, DAY_MINUTES, False), "configuration_bound_minutes": (0, math.inf, True),
}
# A timeline sample more often than the scheduler's one-minute tick shows nothing new, and a tiny interval
# never ends (1e-9 h: 10^13 samples over a day).
TIMELINE_MIN_HOURS = 1 / 60
# AWS's notice before a Spot Instance is reclaimed (EC2 User Guide, "Spot Instance interruption notices").
NOTICE_S = 120
# At most this share of instances may be reclaimed, on average, before they are usable and past their
# notice: at 12 interruptions an instance-hour and the default 180 s boot, an instance lives on average as
# long as its boot and notice take, no job completes and the simulation replaces instances for ever.
MAX_RECLAIMED_BEFORE_USE = 0.25


def check_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """One error (parser.error: exit 2) naming each flag out of its range and its value, before anything runs."""
    bad = []
    for key, (low, high, open_low) in RANGES.items():
        value = getattr(args, key)
        # Finite: an infinite boot, window or rate made the simulation loop for ever or stop with a traceback.
        if value is not None and not ((value > low if open_low else value >= low) and value <= high
                                      and math.isfinite(value)):
            bound = f"> {low:g}" if open_low and high == math.inf else (
                f">= {low:g}" if high == math.inf else f"in [{low:g}, {high:g}]")
            bad.append(f"--{key.replace('_', '-')} {value:g} (must be {'a finite number ' * (not math.isfinite(value))}{bound})")
    if math.isfinite(args.interruptions_per_hour) and math.isfinite(args.boot_seconds) and \
            args.interruptions_per_hour * (args.boot_seconds + NOTICE_S) / 3600 > MAX_RECLAIMED_BEFORE_USE:
        most = MAX_RECLAIMED_BEFORE_USE * 3600 / (args.boot_seconds + NOTICE_S)
        bad.append(f"--interruptions-per-hour {args.interruptions_per_hour:g} (must be at most {most:.3g} with "
                   f"--boot-seconds {args.boot_seconds:g}: an instance would live about as long as its boot and "
                   "the 2-minute notice, and no job would complete)")
    if 0 < args.timeline_hours < TIMELINE_MIN_HOURS:
        bad.append(f"--timeline-hours {args.timeline_hours:g} (must be 0 or at least {TIMELINE_MIN_HOURS:.4f}, a minute)")
    if bad:
        parser.error("; ".join(bad))
    if set(args.mlfleet_without) - set(MLFLEET_PARTS):
        parser.error(f"--mlfleet-without: unknown {','.join(sorted(set(args.mlfleet_without) - set(MLFLEET_PARTS)))} "
                     f"(known: {','.join(MLFLEET_PARTS)})")
    if not args.trace.is_file():
        parser.error(f"--trace {args.trace}: no such file")


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    check_args(parser, args)
    try:
        result = run(args)
    except (TraceError, BenchmarkError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        excluded = ", ".join(f"{count} {why}" for why, count in sorted(result["excluded"].items()))
        print(f"{result['trace']} ({result['mode']}): {result['jobs']} jobs, {result['unplaceable']} unplaceable, "
              f"lower bound ${result['lower_bound_cost_usd']:,.2f}" + (f"; left out: {excluded}" if excluded else ""))
        for name, figures in result["strategies"].items():
            if "skipped" in figures:
                print(f"  {name:22} skipped: {figures['skipped']}")
                continue
            ratio = figures["cost_ratio_to_bound"]
            print(f"  {name:22} ${figures['cost_usd']:>12,.2f}  x{'-' if ratio is None else ratio}  "
                  f"gpu {figures['gpu_utilization']:.1%}  completed {figures['jobs_completed']}  "
                  f"lost {figures['jobs_lost']}  p95 wait {figures['p95_wait_s']} s  "
                  f"instances {figures['instances_launched']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
