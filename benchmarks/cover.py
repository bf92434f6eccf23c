"""How the purchase's cover does on a whole trace at once: kinds, LP, proven gap, CPU, and what is bought.

    python -m benchmarks.cover --trace benchmarks/data/synthetic_ml_workload.csv [--budget SECONDS]
                               [--region us-east-1] [--share-fractional-gpus] --json

Every job of the trace pending at once, one single-type spot fleet per catalog type (as the scheduler
benchmark's snapshot): the greedy purchase, then the configuration-LP cover (`columns.cheapest_cover`)
started from nothing (one box per kind) and from the greedy plan's boxes, each within --budget CPU
seconds, and the purchase the planner makes of them (`purchase.purchase`: the better of greedy and
cover; past `purchase.COVER_MAX_KINDS` kinds, in parts, each with its cover, and the two covers of the
whole are skipped). Without --budget, each cover gets what the planner gives one for the greedy plan's
$/h (`purchase.cover_budget`: 5 to 30 s); with it, each of the planner's purchases gets --budget (its
parts share it). `farley_gap` is how far the LP found is proven to be from the LP optimum, when the last
pricing was exhaustive (null otherwise). With --share-fractional-gpus, pods asking for part of a GPU share one
(as in `python -m benchmarks.scheduler --share-fractional-gpus`), every fleet may share its GPUs, and the
cover is over the one-GPU bundles the planner makes of them (`purchase.bundle_shared`).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

from benchmarks.scheduler.__main__ import instance_types, share_reference_mib  # noqa: E402
from benchmarks.scheduler.trace import read_trace  # noqa: E402
from lambdas.common.catalog import load_catalog  # noqa: E402
from lambdas.scheduler.planning import Fleet, JobRequest, Limits  # noqa: E402
from lambdas.scheduler.planning import purchase  # noqa: E402
from lambdas.scheduler.planning.columns import Pattern, cheapest_cover  # noqa: E402
from lambdas.scheduler.planning.constraints import Patterns, planning_order  # noqa: E402
from lambdas.scheduler.planning.fleets import purchase_options  # noqa: E402


def measure(trace: Path, budget: float | None, region: str, share: bool = False) -> dict:
    catalog = load_catalog()
    types = instance_types(catalog, region)
    reference = share_reference_mib(types) if share else 0
    jobs = planning_order(JobRequest(j.job_id, j.submission_id, j.gpus, j.vcpus, j.memory_mib, j.instance_type_pattern,
                                     gpu_memory_mib=j.gpu_memory_mib)
                          for j in read_trace(trace, share_fractional=share, reference_gpu_memory_mib=reference).jobs
                          if any(t.holds(j) for t in types))
    options = purchase_options([Fleet(region, t.name, t.name, (t.name,), 0, 0, 10**9, gpu_sharing=share)
                                for t in types], catalog, None)
    patterns, limits = Patterns(), Limits(float("inf"), 0)
    pending = jobs
    jobs, _ = purchase.bundle_shared(jobs, options, patterns)
    kinds, kind_of = purchase._kinds(jobs, options, patterns)
    started = time.process_time()
    greedy = purchase._Purchase(options, catalog, patterns, limits).run(jobs, (), True)
    greedy_cpu = time.process_time() - started
    fixed = budget is not None
    budget = budget if fixed else purchase.cover_budget(greedy.cost)
    position = {id(k): n for n, k in enumerate(kinds)}
    start = []
    for option, boxes in greedy.boxes.items():
        for box in boxes:
            counts: dict[int, int] = {}
            for job_id in box:
                counts[position[id(kind_of[job_id])]] = counts.get(position[id(kind_of[job_id])], 0) + 1
            start.append(Pattern(option, tuple(sorted(counts.items()))))
    result = {"trace": str(trace), "jobs": len(jobs), "kinds": len(kinds), "budget_cpu_seconds": budget,
              "greedy_usd_per_hour": round(greedy.cost, 2), "greedy_cpu_seconds": round(greedy_cpu, 2)}
    for name, seed in (("cover_from_one_box_per_kind", ()), ("cover_from_greedy", start)):
        if len(kinds) > purchase.COVER_MAX_KINDS:  # the planner covers such a burst in parts (purchase._parts)
            result[name] = {"skipped": f"{len(kinds)} kinds: past the {purchase.COVER_MAX_KINDS} one cover takes"}
            continue
        started = time.process_time()
        cover = cheapest_cover([k.need for k in kinds], [k.left for k in kinds], [sorted(k.options) for k in kinds],
                               [(o.capacity, o.price) for o in options], cpu_seconds=budget, start=seed)
        result[name] = {"lp_usd_per_hour": round(cover.lp_cost, 2), "converged": cover.converged,
                        "farley_gap": round(cover.lp_cost / cover.bound - 1, 4) if cover.bound else None,
                        "rounds": cover.rounds, "patterns": cover.patterns,
                        "cpu_seconds": round(time.process_time() - started, 2)}
    saved = purchase.COVER_CPU_SECONDS, purchase.COVER_MAX_CPU_SECONDS
    if fixed:
        purchase.COVER_CPU_SECONDS = purchase.COVER_MAX_CPU_SECONDS = budget
    try:
        started = time.process_time()
        scale_outs, _ = purchase.purchase(pending, options, catalog, patterns, limits)
        result["planner_purchase_usd_per_hour"] = round(sum(s.hourly_usd for s in scale_outs), 2)
        result["planner_purchase_cpu_seconds"] = round(time.process_time() - started, 2)
    finally:
        purchase.COVER_CPU_SECONDS, purchase.COVER_MAX_CPU_SECONDS = saved
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.cover", description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=ROOT / "benchmarks" / "data" / "synthetic_ml_workload.csv")
    parser.add_argument("--budget", type=float, default=None,
                        help="CPU seconds per cover (default: what the planner gives it, purchase.cover_budget)")
    parser.add_argument("--region", default="us-east-1")
    parser.add_argument("--share-fractional-gpus", action="store_true",
                        help="pods asking for part of a GPU share one (bought for in one-GPU bundles)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if not args.trace.is_file() or (args.budget is not None and args.budget <= 0):
        parser.error("--trace must be a file and --budget > 0")
    result = measure(args.trace, args.budget, args.region, args.share_fractional_gpus)
    print(json.dumps(result, indent=1) if args.json else
          f"{result['jobs']} jobs, {result['kinds']} kinds: greedy ${result['greedy_usd_per_hour']}/h, "
          f"planner ${result['planner_purchase_usd_per_hour']}/h")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
