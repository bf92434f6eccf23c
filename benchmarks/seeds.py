"""The scheduler benchmark over many seeds: each strategy's ratio to the peers, seed by seed, and its mean.

    python -m benchmarks.seeds --seeds 3-12 [--processes 2] [--json] -- [benchmarks.scheduler flags]

One seed draws which jobs carry a runtime estimate and how far off it is, which jobs checkpoint, and when
spot instances are reclaimed. On the shared trace the cost is mostly a few dozen weeks-long pods, so one
seed's draw moves mlfleet's figure by several percent (docs/scheduler-benchmark.md, "Across seeds"). A
target is met on a trace only if it holds over the seeds, not on the one that looks best.

Ratios are taken seed by seed (each strategy against the peer in the same run, the same draw), then
averaged, with the standard error of that mean. With interruptions the dollars per completed GPU-hour
are compared too (a strategy that gives up on long jobs must not look cheaper for it).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]

from benchmarks.scheduler.__main__ import BenchmarkError, build_parser, check_args, run  # noqa: E402
from benchmarks.scheduler.trace import TraceError  # noqa: E402

PEERS = ("one-instance-per-job", "karpenter-when-empty")
# Figures compared between strategies of one run, and the key each is read from.
FIGURES = {"cost": "cost_usd", "per_completed_gpu_hour": "usd_per_completed_gpu_hour", "p95_wait": "p95_wait_s"}


def parse_seeds(text: str) -> list[int]:
    """`3-12`, `3,5,9` or a mix: the seeds in the order given, each once."""
    seeds: dict[int, None] = {}  # insertion-ordered, each seed once
    for part in (p.strip() for p in text.split(",")):
        match = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not match or int(match[2] or match[1]) < int(match[1]):
            raise ValueError(f"--seeds {text!r}: {part!r} is not a seed or a range low-high")
        seeds.update(dict.fromkeys(range(int(match[1]), int(match[2] or match[1]) + 1)))
    return list(seeds)


def ratios(results: list[dict]) -> dict:
    """Per strategy and peer (`x_<peer>`): each figure's ratio to that peer's in the same run, seed by seed, and their
    mean, standard error (of the mean), lowest and highest. A figure a run lacks (a skipped strategy, no
    completed GPU-hours, a p95 of 0) leaves that seed out of the figure's summary."""
    out: dict = {}
    names = [n for n in results[0]["strategies"] if "skipped" not in results[0]["strategies"][n]]
    for name in names:
        # Each strategy against each peer; a peer only against the peers before it (Karpenter against one
        # instance per job), not against itself or back again.
        for peer in PEERS[:PEERS.index(name)] if name in PEERS else PEERS:
            if peer not in results[0]["strategies"]:
                continue
            for figure, key in FIGURES.items():
                values = []
                for result in results:
                    mine, theirs = result["strategies"].get(name, {}), result["strategies"].get(peer, {})
                    if mine.get(key) is not None and theirs.get(key):
                        values.append(mine[key] / theirs[key])
                if values:
                    out.setdefault(name, {}).setdefault(f"x_{peer}", {})[figure] = summary(values)
    return out


def summary(values: list[float]) -> dict:
    mean = statistics.fmean(values)
    se = statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else None
    return {"mean": round(mean, 4), "standard_error": None if se is None else round(se, 4),
            "low": round(min(values), 4), "high": round(max(values), 4), "seeds": len(values),
            "per_seed": [round(v, 4) for v in values]}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    own, rest = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    parser = argparse.ArgumentParser(prog="python -m benchmarks.seeds", description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", required=True, help="seeds to run: 3-12, or 3,5,9")
    parser.add_argument("--processes", type=int, default=1, help="seeds run at once (one core each)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    mine = parser.parse_args(own)
    if mine.processes < 1:
        parser.error(f"--processes {mine.processes} (must be >= 1)")
    try:
        seeds = parse_seeds(mine.seeds)
    except ValueError as error:
        parser.error(str(error))
    scheduler = build_parser("python -m benchmarks.seeds ... --")
    scheduler.set_defaults(seed=None)
    base = scheduler.parse_args(rest)
    if base.seed is not None:
        scheduler.error(f"--seed {base.seed}: give the seeds to python -m benchmarks.seeds --seeds, before the --")
    check_args(scheduler, base)
    runs = [argparse.Namespace(**{**vars(base), "seed": seed}) for seed in seeds]
    try:
        if mine.processes == 1 or len(runs) == 1:
            results = [run(a) for a in runs]
        else:
            with ProcessPoolExecutor(max_workers=mine.processes) as pool:
                results = list(pool.map(run, runs))
    except (TraceError, BenchmarkError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    report = {
        "trace": results[0]["trace"], "mode": results[0]["mode"], "seeds": seeds,
        "interruptions_per_hour": base.interruptions_per_hour,
        "ratios": ratios(results),
        "cost_usd": {name: [r["strategies"][name].get("cost_usd") for r in results]
                     for name in results[0]["strategies"]},
        "runs": results,
    }
    if mine.json:
        print(json.dumps(report, indent=1))
        return 0
    print(f"{report['trace']} ({report['mode']}, interruptions {base.interruptions_per_hour:g}/h), "
          f"seeds {mine.seeds}: ratio seed by seed, mean ± standard error [lowest, highest]")
    for name, by_peer in report["ratios"].items():
        for peer, figures in by_peer.items():
            shown = ", ".join(f"{figure} {_text(s)}" for figure, s in figures.items())
            print(f"  {name:22} {peer:24} {shown}")
    return 0


def _text(s: dict) -> str:
    se = "" if s["standard_error"] is None else f" ± {s['standard_error']:.3f}"
    return f"{s['mean']:.3f}{se} [{s['low']:.3f}, {s['high']:.3f}]"


if __name__ == "__main__":
    raise SystemExit(main())
