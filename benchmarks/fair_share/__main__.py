"""Each team's share of GPU-hours against its weight while both teams have work queued.

    python -m benchmarks.fair_share [--weights 1:1 --weights 3:1 ...] [--seed N] [--half-life-minutes M]
                                    [--quota TEAM=GPUS] [--instances N] [--hours H] --json
    python -m benchmarks.fair_share --convergence CASES [--case-hours H] [--half-life-minutes M] --json

Runs the scheduler's own plan (with its shares stage) on the benchmark's discrete-event simulation
(benchmarks/scheduler/simulate.py) over a seeded two-team trace (benchmarks/fair_share/trace.py): team
`sweeps` (short 1-GPU jobs) and team `training` (long 4-GPU jobs) share one fleet of g6.12xlarge (4 GPUs)
capped at --instances. Weights are given as sweeps:training. For each, and for the plan without teams
(one queue, as before teams existed), it reports over the time both teams had jobs waiting: each
team's share of the GPU-hours run, against its share of the weights, per --window-hours and over all;
how busy the GPUs were then, and while one team alone had work waiting; the most GPUs each team held
(running, or reserved on an instance still booting); and each team's median wait by priority.
With --convergence, it runs that many random backlogged two-team cases instead (convergence.py) and
reports how far shares come from weights. docs/scheduler-benchmark.md ("Fair shares") has the figures.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT)]

from benchmarks.fair_share.convergence import convergence  # noqa: E402
from benchmarks.fair_share.measure import measure, waits_by_priority  # noqa: E402
from benchmarks.fair_share.strategy import INSTANCE_TYPE, simulate  # noqa: E402
from benchmarks.fair_share.trace import HORIZON_S, SWEEPS, TEAMS, TRAINING, two_team_trace  # noqa: E402
from lambdas.common.catalog import load_catalog  # noqa: E402
from lambdas.scheduler.planning import Team  # noqa: E402


def run(args) -> dict:
    trace = two_team_trace(args.seed, horizon_s=args.hours * 3600)
    capacity = args.instances * load_catalog().get(INSTANCE_TYPE).gpus
    quotas = dict(args.quota)
    result = {"seed": args.seed, "hours": args.hours, "instance_type": INSTANCE_TYPE, "instances": args.instances,
              "capacity_gpus": capacity, "half_life_minutes": args.half_life_minutes, "boot_seconds": args.boot_seconds,
              "jobs": {team: sum(1 for j in trace if j.team == team) for team in TEAMS},
              "gpu_hours_submitted": {team: round(sum(j.job.gpus * j.job.duration_s for j in trace if j.team == team)
                                                  / 3600, 1) for team in TEAMS},
              "quotas": quotas, "runs": []}
    for weights in [None, *args.weights]:
        started = time.perf_counter()
        teams = None if weights is None else {team: Team(weight, quotas.get(team)) for team, weight in
                                              zip((SWEEPS, TRAINING), weights)}
        sim, strategy = simulate(trace, teams, instances=args.instances, half_life_s=args.half_life_minutes * 60,
                                 boot_s=args.boot_seconds, region=args.region, seed=args.seed)
        figures = {"weights": None if weights is None else dict(zip((SWEEPS, TRAINING), weights))}
        figures.update(measure(sim, trace, capacity, args.window_hours * 3600))
        if weights is not None:
            total = sum(weights)
            figures["weight_share"] = {team: round(w / total, 4) for team, w in zip((SWEEPS, TRAINING), weights)}
            figures["max_share_error"] = round(max(abs(figures["share"][t] - figures["weight_share"][t])
                                                   for t in TEAMS), 4) if figures["share"][SWEEPS] is not None else None
        figures["most_gpus_held"] = {team: strategy.most_held[team] for team in TEAMS}
        figures["median_wait_minutes_by_priority"] = waits_by_priority(sim, trace)
        figures["plan_seconds"] = round(sim.plan_seconds, 2)
        figures["wall_seconds"] = round(time.perf_counter() - started, 1)
        result["runs"].append(figures)
    return result


def _weights(text: str) -> tuple[float, float]:
    try:
        sweeps, training = (float(part) for part in text.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected SWEEPS:TRAINING, e.g. 3:1") from None
    if sweeps <= 0 or training <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: weights must be > 0")
    return sweeps, training


def _quota(text: str) -> tuple[str, int]:
    team, _, gpus = text.partition("=")
    if team not in TEAMS or not gpus.isdigit() or int(gpus) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected TEAM=GPUS with TEAM one of {', '.join(TEAMS)}")
    return team, int(gpus)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.fair_share", description=__doc__.splitlines()[0])
    parser.add_argument("--weights", type=_weights, action="append", help="SWEEPS:TRAINING (repeatable; "
                        "default 1:1 and 3:1)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--half-life-minutes", type=float, default=60.0,
                        help="the decay of each team's use (mlfleet:shareHalfLifeMinutes; 0: only what it holds now)")
    parser.add_argument("--quota", type=_quota, action="append", default=[], metavar="TEAM=GPUS")
    parser.add_argument("--instances", type=int, default=8, help="the fleet's cap (4 GPUs each)")
    parser.add_argument("--hours", type=float, default=HORIZON_S / 3600, help="how long both teams submit work")
    parser.add_argument("--region", default="us-east-1")
    parser.add_argument("--boot-seconds", type=float, default=180.0)
    parser.add_argument("--window-hours", type=float, default=4.0, help="the windows shares are reported over")
    parser.add_argument("--convergence", type=int, metavar="CASES",
                        help="run this many random backlogged two-team cases instead of the trace")
    parser.add_argument("--case-hours", type=float, default=8.0,
                        help="--convergence: each team's backlog would keep the whole fleet busy this long")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    args.weights = args.weights or [(1.0, 1.0), (3.0, 1.0)]
    if args.half_life_minutes < 0 or args.instances < 1 or args.window_hours <= 0 or args.hours <= 0:
        parser.error("--half-life-minutes must be >= 0, --instances >= 1, --window-hours and --hours > 0")
    if args.convergence is not None:
        if args.convergence < 1 or args.case_hours <= 0:
            parser.error("--convergence must be >= 1 and --case-hours > 0")
        figures = convergence(args.convergence, first_seed=args.seed, instances=args.instances,
                              gpus_per_instance=load_catalog().get(INSTANCE_TYPE).gpus, hours=args.case_hours,
                              half_life_s=args.half_life_minutes * 60)
        print(json.dumps({"convergence": figures}, indent=1) if args.json else
              f"{figures['cases']} cases on {figures['fleet_gpus']} GPUs, half-life {figures['half_life_minutes']:g} "
              f"min: gap between share and weight mean {figures['mean_gap']:.2%}, p90 {figures['p90_gap']:.2%}, "
              f"max {figures['max_gap']:.2%}; GPUs busy {figures['mean_gpu_utilization']:.1%}")
        return 0
    result = run(args)
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    print(f"{result['capacity_gpus']} GPUs ({result['instances']} x {INSTANCE_TYPE}), half-life "
          f"{result['half_life_minutes']:g} min, seed {result['seed']}")
    for figures in result["runs"]:
        weights = figures["weights"]
        label = "one queue" if weights is None else f"weights {weights[SWEEPS]:g}:{weights[TRAINING]:g}"
        print(f"  {label:16} both waiting {figures['both_waiting_hours']:6.1f} h  shares "
              + "  ".join(f"{t} {figures['share'][t]:.1%}" for t in TEAMS)
              + (f"  (weights {figures['weight_share'][SWEEPS]:.1%})" if weights else "")
              + f"  GPUs busy {figures['gpu_utilization_both_waiting']:.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
