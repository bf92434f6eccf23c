"""Plot each strategy's cumulative cost over a replay, from `python -m benchmarks.scheduler --timeline-hours`.

    python -m benchmarks.scheduler --mode replay --seed 3 --timeline-hours 24 --json > replay.json
    python -m benchmarks.plot_cost replay.json [more.json ...] --output docs/scheduler-benchmark-cost.png

One panel per JSON file (a trace, or the same trace with interruptions), one line per strategy that ran.
matplotlib is a development dependency for this script only; the benchmark itself does not need it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def panel_title(result: dict) -> str:
    rate = result.get("interruptions_per_hour", 0)
    return f"{Path(result['trace']).name}, {'no interruptions' if not rate else f'{rate:g} interruptions per spot instance-hour'}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.plot_cost", description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="+", type=Path, help="JSON outputs of python -m benchmarks.scheduler")
    parser.add_argument("--output", type=Path, required=True)
    args = parser.parse_args(argv)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    results = [json.loads(path.read_text()) for path in args.results]
    missing = [str(p) for p, r in zip(args.results, results)
               if not any("cost_timeline" in f for f in r["strategies"].values())]
    if missing:
        print(f"error: no cost_timeline in {', '.join(missing)}: run the benchmark with --timeline-hours",
              file=sys.stderr)
        return 2
    figure, axes = plt.subplots(len(results), 1, figsize=(9, 3.6 * len(results)), squeeze=False)
    for axis, result in zip(axes[:, 0], results):
        for name, figures in result["strategies"].items():
            if "cost_timeline" not in figures:
                continue
            days = [hours / 24 for hours, _ in figures["cost_timeline"]]
            axis.plot(days, [usd for _, usd in figures["cost_timeline"]], label=f"{name} (${figures['cost_usd']:,.0f})",
                      linewidth=2.2 if name == "mlfleet" else 1.2)
        axis.set_title(panel_title(result), fontsize=10)
        axis.set_xlabel("days into the trace")
        axis.set_ylabel("dollars spent so far")
        axis.grid(alpha=0.3)
        axis.legend(fontsize=8, loc="upper left")
    figure.tight_layout()
    figure.savefig(args.output, dpi=110)
    print(f"{args.output}: {len(results)} panel(s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
