"""CPU time of one scheduler plan: N pending jobs over M live machines, with fleets to buy from.

    python -m benchmarks.placement [--jobs 10000] [--machines 1000] [--repeat 5] [--seed 1]
                                   [--trace PATH] [--teams N] --json

The workload is what the scheduler Lambda sees at a busy moment, generated from a seed:
- machines: M container instances of three fleets (1-GPU g5/g6, 4-GPU g5/g6.12xlarge, 8-GPU g5/g6.48xlarge)
  in three regions and three zones each, 80% spot, partly busy (a random share of GPUs taken, with
  vCPUs and memory in proportion), 5% under a rebalance recommendation, 2% draining;
- jobs: N pending jobs in submissions of 10-500 jobs that share a shape (a sweep or a batch range),
  shapes from 1 GPU / 4 vCPUs / 16 GiB to 8 GPUs / 96 vCPUs / 700 GiB, 10% with an instance-type
  pattern, 5% pinned to a region, 5% insisting on on-demand; with --trace, each job's shape is drawn
  from the GPU pods of that trace instead (the openb pod list: every shape at once, the hard case);
- fleets: the three fleets in every region, with room to grow, and a dollar cap of --hourly-cap-factor
  times what the machines cost now (1.5 binds part-way; a large factor makes the planner buy for every
  job that fits no machine, its most expensive case);
- with --teams N, the submissions belong to N teams in turn (weights 1..N, the first with a quota of a
  tenth of the GPUs), each job with a priority 0-9, and the plan runs its shares stage (what the
  scheduler Lambda always does), the busy GPUs held by the teams evenly.

Measures `lambdas.scheduler.planning.plan`, the code the Lambda runs: CPU seconds (time.process_time),
best and median of --repeat runs after one warm-up, plus what the plan decided.
"""

from __future__ import annotations

import argparse
import csv
import json
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

from lambdas.common.catalog import load_catalog  # noqa: E402
from lambdas.scheduler.planning import Fleet, JobRequest, Limits, Machine, Shares, Team, plan  # noqa: E402

REGIONS = ("us-east-1", "us-east-2", "us-west-2")
FLEETS = {"gpu1": ("g5.2xlarge", "g6.2xlarge"), "gpu4": ("g5.12xlarge", "g6.12xlarge"),
          "gpu8": ("g5.48xlarge", "g6.48xlarge")}
SHAPES = [(1, 4, 16_384), (1, 8, 30_000), (1, 12, 48_000), (2, 16, 64_000), (4, 24, 96_000), (4, 44, 170_000),
          (8, 96, 700_000)]
PATTERNS = (r"g5\..*", r"g6\..*", r".*\.12xlarge")


def workload(jobs: int, machines: int, seed: int, trace: Path | None, cap_factor: float, teams: int = 0):
    rng = random.Random(seed)
    catalog = load_catalog()
    live = []
    for n in range(machines):
        fleet = rng.choices(list(FLEETS), weights=(5, 3, 2))[0]
        instance_type = rng.choice(FLEETS[fleet])
        spec = catalog.get(instance_type)
        region = rng.choice(REGIONS)
        lifecycle = "spot" if rng.random() < 0.8 else "on-demand"
        busy = rng.randint(0, spec.gpus) / spec.gpus
        price = spec.spot_price(region) if lifecycle == "spot" else spec.on_demand_price(region)
        live.append(Machine(
            key=f"arn:aws:ecs:{region}:123456789012:container-instance/mlfleet-bench/{n:06d}", instance_id=f"i-{n:017x}",
            region=region, fleet=fleet, instance_type=instance_type, availability_zone=region + rng.choice("abc"),
            lifecycle=lifecycle, free_gpus=spec.gpus - round(busy * spec.gpus),
            free_vcpus=round(spec.schedulable_vcpus * (1 - busy), 2),
            free_memory_mib=int(spec.schedulable_memory_mib * (1 - busy)), price_per_hour=price,
            rebalance_recommended=rng.random() < 0.05, draining=rng.random() < 0.02))

    trace_shapes = _trace_shapes(trace) if trace else None
    pending = []
    while len(pending) < jobs:
        submission = f"sub-bench-{len(pending):06d}"
        size = min(rng.randint(10, 500), jobs - len(pending))
        shape = rng.choice(SHAPES)
        pattern = rng.choice(PATTERNS) if rng.random() < 0.10 else None
        regions = (rng.choice(REGIONS),) if rng.random() < 0.05 else ()
        lifecycle = "on-demand" if rng.random() < 0.05 else None
        team = f"team{len(pending) % teams}" if teams else None
        for index in range(size):
            gpus, vcpus, memory = rng.choice(trace_shapes) if trace_shapes else shape
            pending.append(JobRequest(f"{submission}-{index:05d}", submission, gpus, vcpus, memory, pattern, regions,
                                      lifecycle, submitted_at=float(len(pending)), team=team,
                                      priority=rng.randint(0, 9) if teams else 5))

    fleets = []
    for region in REGIONS:
        for name, types in FLEETS.items():
            current = sum(1 for m in live if m.region == region and m.fleet == name and not m.draining)
            fleets.append(Fleet(region, name, f"mlfleet-bench-{name}", types, current, 0, current + 2000))
    hourly = sum(m.price_per_hour for m in live)
    shares = None
    if teams:
        gpus = sum(catalog.get(m.instance_type).gpus for m in live)
        held = sum(catalog.get(m.instance_type).gpus - m.free_gpus for m in live) // teams
        shares = Shares({f"team{k}": Team(k + 1.0, max(1, gpus // 10) if k == 0 else None) for k in range(teams)},
                        held_gpus={f"team{k}": held for k in range(teams)},
                        usage={f"team{k}": held * (1 + k / teams) for k in range(teams)}, now=float(len(pending)))
    limits = Limits(max_hourly_usd=hourly * cap_factor, current_hourly_usd=hourly)
    return pending, live, fleets, limits, catalog, shares


def _trace_shapes(path: Path) -> list[tuple[int, float, int]]:
    with path.open(newline="") as handle:
        return [(max(1, int(row["num_gpu"])), int(row["cpu_milli"]) / 1000, int(row["memory_mib"]))
                for row in csv.DictReader(handle) if int(row["num_gpu"]) > 0]


def measure(jobs: int, machines: int, repeat: int, seed: int, trace: Path | None, cap_factor: float,
            teams: int = 0) -> dict:
    pending, live, fleets, limits, catalog, shares = workload(jobs, machines, seed, trace, cap_factor, teams)
    result = plan(pending, live, fleets, catalog, limits, shares=shares)  # warm-up: patterns, the catalog
    cpu, wall = [], []
    for _ in range(repeat):
        started_cpu, started_wall = time.process_time(), time.perf_counter()
        result = plan(pending, live, fleets, catalog, limits, shares=shares)
        cpu.append(time.process_time() - started_cpu)
        wall.append(time.perf_counter() - started_wall)
    return {
        "jobs": jobs, "machines": machines, "seed": seed, "trace": str(trace) if trace else None,
        "hourly_cap_factor": cap_factor, "teams": teams,
        "cpu_seconds_best": round(min(cpu), 3), "cpu_seconds_median": round(statistics.median(cpu), 3),
        "wall_seconds_median": round(statistics.median(wall), 3),
        "placed": len(result.placements), "instances_bought": sum(s.add_instances for s in result.scale_outs),
        "waiting": len(result.waiting),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--machines", type=int, default=1_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--hourly-cap-factor", type=float, default=1.5,
                        help="dollar cap as a multiple of the machines' current cost per hour")
    parser.add_argument("--trace", type=Path, help="draw job shapes from an openb pod list (GPU pods)")
    parser.add_argument("--teams", type=int, default=0, help="jobs of N teams, planned with the shares stage")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    if args.jobs < 1 or args.machines < 0 or args.repeat < 1 or args.hourly_cap_factor <= 0 or args.teams < 0:
        parser.error("--jobs and --repeat must be >= 1, --machines and --teams >= 0, --hourly-cap-factor > 0")
    if args.trace and not args.trace.is_file():
        parser.error(f"--trace {args.trace}: no such file")
    figures = measure(args.jobs, args.machines, args.repeat, args.seed, args.trace, args.hourly_cap_factor, args.teams)
    if args.json:
        print(json.dumps(figures, indent=1))
    else:
        print(f"plan of {figures['jobs']} jobs over {figures['machines']} machines: "
              f"{figures['cpu_seconds_median']} s CPU (best {figures['cpu_seconds_best']} s); "
              f"placed {figures['placed']}, bought {figures['instances_bought']}, waiting {figures['waiting']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
