"""How much each scheduling strategy pays for a GPU trace, how close to the least possible, and what it loses.

    python -m benchmarks.scheduler --trace PATH [--mode snapshot|replay] [--seed N]
                                   [--interruptions-per-hour R] --json

The interface is fixed by DESIGN.md ("Scheduler benchmark"); docs/scheduler-benchmark.md explains the
trace mapping, each strategy, the bounds and the measured figures.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT)]

from benchmarks.scheduler.bound import aggregate_bound, replay_bound, snapshot_configuration_bound  # noqa: E402
from benchmarks.scheduler.simulate import InstanceType, Simulation  # noqa: E402
from benchmarks.scheduler.strategies import (  # noqa: E402
    EcsBinpackMemoryStrategy, FirstFitStrategy, MlfleetStrategy, OneInstancePerJobStrategy,
)
from benchmarks.scheduler.trace import TraceError, read_trace  # noqa: E402
from lambdas.common.catalog import load_catalog  # noqa: E402

DEFAULT_TRACE = ROOT / "benchmarks" / "data" / "openb_pod_list_default.csv"
STRATEGIES = ("mlfleet", "one-instance-per-job", "ecs-binpack-memory", "first-fit")


class BenchmarkError(Exception):
    """A run that cannot give a meaningful answer (bad arguments, a strategy that broke a rule)."""


def instance_types(catalog, region: str) -> list[InstanceType]:
    types = [InstanceType(t.name, t.gpus, float(t.schedulable_vcpus), t.schedulable_memory_mib, t.spot_price(region))
             for t in catalog.types if region in t.regions()]
    if not types:
        raise BenchmarkError(f"--region {region}: the catalog prices no instance type there "
                             f"(it has {', '.join(catalog.regions())})")
    return types


def simulate(strategy, jobs, types, args) -> Simulation:
    sim = Simulation(jobs, types, strategy, mode=args.mode, interruptions_per_hour=args.interruptions_per_hour,
                     seed=args.seed, boot_s=args.boot_seconds, max_attempts=args.max_attempts)
    sim.run()
    if sim.snapshot:
        check_packing(sim, strategy.name)
    return sim


def check_packing(sim: Simulation, name: str) -> None:
    """Independent of every strategy: no instance holds more than it has, every job is on one instance."""
    seen: Counter = Counter()
    for box in sim.boxes:
        used = [0, 0.0, 0]
        for job_id in box.jobs:
            job = sim.jobs[job_id].job
            seen[job_id] += 1
            used = [used[0] + job.gpus, used[1] + job.vcpus, used[2] + job.memory_mib]
            if not box.type.holds(job):
                raise BenchmarkError(f"{name}: job {job_id} placed on {box.type.name}, which cannot run it")
        capacity = box.type.capacity
        if used[0] > capacity[0] or used[1] > capacity[1] + 1e-6 or used[2] > capacity[2]:
            raise BenchmarkError(f"{name}: instance {box.id} ({box.type.name}) over-committed: {used} > {capacity}")
    if any(count != 1 for count in seen.values()):
        raise BenchmarkError(f"{name}: a job is on more than one instance")


def ecs_instance_type(jobs, types, args) -> InstanceType:
    """ECS gets its best homogeneous type: of the types that hold every job, the one whose binpack of the
    whole trace at once costs least."""
    candidates = [t for t in types if all(t.holds(j) for j in jobs)]
    if not candidates:
        raise BenchmarkError("no single instance type holds every job: ecs-binpack-memory cannot run this trace")
    snapshot = argparse.Namespace(**{**vars(args), "mode": "snapshot"})
    costs = {t.name: sum(b.type.price for b in simulate(EcsBinpackMemoryStrategy(t), jobs, types, snapshot).boxes)
             for t in candidates}
    return next(t for t in candidates if t.name == min(costs, key=lambda n: (costs[n], n)))


def metrics(sim: Simulation) -> dict:
    states = list(sim.jobs.values())
    by_state = Counter(s.state for s in states)
    if sim.snapshot:
        cost = sum(b.type.price for b in sim.boxes)
        bought_gpus = sum(b.type.gpus for b in sim.boxes)
        utilization = sum(s.job.gpus for s in states if s.state == "running") / bought_gpus if bought_gpus else 0.0
        completed, lost, waits = by_state["running"], by_state["waiting"], [0.0]
    else:
        end = {b.id: b.terminated for b in sim.boxes}
        cost = sum((end[b.id] - b.launched) / 3600 * b.type.price for b in sim.boxes)
        held = sum((end[b.id] - b.launched) * b.type.gpus for b in sim.boxes)
        utilization = sum(s.gpu_seconds for s in states) / held if held else 0.0
        completed = by_state["completed"]
        lost = by_state["lost"] + by_state["waiting"] + by_state["running"]
        waits = sorted(s.first_start - s.job.submit_s for s in states if s.first_start is not None) or [0.0]
        if completed + by_state["dead_lettered"] + lost != len(states):
            raise BenchmarkError("job accounting does not add up")
    figures = {
        "cost_usd": round(cost, 2),
        "gpu_utilization": round(utilization, 4),
        "jobs_completed": completed,
        "jobs_lost": lost,
        "p95_wait_s": round(waits[min(len(waits) - 1, int(0.95 * len(waits)))], 1),
        "instances_launched": len(sim.boxes),
        "plan_seconds": round(sim.plan_seconds, 3),
    }
    if not sim.snapshot:
        figures["jobs_dead_lettered"] = by_state["dead_lettered"]
        figures["dead_letter_reasons"] = dict(Counter(s.reason for s in states if s.state == "dead_lettered"))
    return figures


def run(args) -> dict:
    catalog = load_catalog()
    types = instance_types(catalog, args.region)
    trace = read_trace(args.trace, args.limit)
    placeable = [j for j in trace.jobs if any(t.holds(j) for t in types)]
    wanted = [s.strip() for s in args.strategies.split(",") if s.strip()]
    unknown = sorted(set(wanted) - set(STRATEGIES))
    if unknown:
        raise BenchmarkError(f"--strategies: unknown {', '.join(unknown)} (known: {', '.join(STRATEGIES)})")
    window, grace = args.idle_window_minutes * 60, args.idle_grace_minutes * 60
    result = {
        "trace": str(args.trace), "mode": args.mode, "jobs": len(trace.jobs),
        "unplaceable": len(trace.jobs) - len(placeable),
        "lower_bound_cost_usd": round(aggregate_bound(placeable, types) if args.mode == "snapshot"
                                      else replay_bound(placeable, types), 2),
        "strategies": {},
        "region": args.region, "seed": args.seed, "catalog_snapshot": catalog.snapshot_date,
        "excluded": dict(trace.excluded),
    }
    if args.mode == "replay":
        result.update(interruptions_per_hour=args.interruptions_per_hour, boot_seconds=args.boot_seconds,
                      max_attempts=args.max_attempts, idle_window_minutes=args.idle_window_minutes,
                      idle_grace_minutes=args.idle_grace_minutes)
    if args.configuration_bound:
        if args.mode != "snapshot":
            raise BenchmarkError("--configuration-bound is computed for --mode snapshot only")
        bound = snapshot_configuration_bound(placeable, types)
        result["configuration_lp_bound_usd"] = round(bound.cost, 2)
    for name in wanted:
        started = time.perf_counter()
        if name == "mlfleet":
            strategy = MlfleetStrategy(types, catalog, args.region, window, grace)
        elif name == "one-instance-per-job":
            strategy = OneInstancePerJobStrategy(types)
        elif name == "first-fit":
            strategy = FirstFitStrategy(types, window, grace)
        else:
            strategy = EcsBinpackMemoryStrategy(ecs_instance_type(placeable, types, args))
        figures = metrics(simulate(strategy, placeable, types, args))
        figures["cost_ratio_to_bound"] = round(figures["cost_usd"] / result["lower_bound_cost_usd"], 4) \
            if result["lower_bound_cost_usd"] else None
        if name == "ecs-binpack-memory":
            figures["instance_type"] = strategy.type.name
        figures["wall_seconds"] = round(time.perf_counter() - started, 1)
        result["strategies"][name] = figures
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.scheduler", description=__doc__.splitlines()[0])
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
    parser.add_argument("--strategies", default=",".join(STRATEGIES))
    parser.add_argument("--limit", type=int, help="only the first N jobs of the trace (quick runs)")
    parser.add_argument("--configuration-bound", action="store_true",
                        help="also compute the configuration-LP bound (snapshot; about a minute on the shared trace)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    if args.interruptions_per_hour < 0 or args.max_attempts < 1 or args.boot_seconds < 0 or (args.limit or 1) < 1:
        parser.error("--interruptions-per-hour and --boot-seconds must be >= 0, --max-attempts and --limit >= 1")
    if not args.trace.is_file():
        parser.error(f"--trace {args.trace}: no such file")
    try:
        result = run(args)
    except (TraceError, BenchmarkError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print(f"{result['trace']} ({result['mode']}): {result['jobs']} jobs, {result['unplaceable']} unplaceable, "
              f"lower bound ${result['lower_bound_cost_usd']:,.2f}")
        for name, figures in result["strategies"].items():
            print(f"  {name:22} ${figures['cost_usd']:>12,.2f}  x{figures['cost_ratio_to_bound']}  "
                  f"gpu {figures['gpu_utilization']:.1%}  completed {figures['jobs_completed']}  "
                  f"lost {figures['jobs_lost']}  p95 wait {figures['p95_wait_s']} s  "
                  f"instances {figures['instances_launched']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
