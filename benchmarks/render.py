"""How big each stack is and how long one full render takes under Pulumi mocks.

    python -m benchmarks.render [--stacks dev staging prod] [--repeat 5] --json

Counts cloud resources (what `pulumi up` would create), component resources and providers separately,
and times the whole program (config validation, every component, every invoke answered by the mocks)
per stack: the best and the median of --repeat runs, wall clock, in one process after a warm-up.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from pulumi_harness import STACKS, render_stack  # noqa: E402


def measure(stack: str, repeat: int) -> dict:
    render_stack(stack)  # warm-up: imports, catalog, first-render caches
    seconds = []
    for _ in range(repeat):
        started = time.perf_counter()
        rendering = render_stack(stack)
        seconds.append(time.perf_counter() - started)
    kinds = Counter(
        "provider" if r.type.startswith("pulumi:providers:") else
        "component" if r.type.startswith("mlfleet:") or r.type == "pulumi:pulumi:Stack" else "cloud"
        for r in rendering.resources
    )
    return {
        "cloud_resources": kinds["cloud"],
        "components": kinds["component"],
        "providers": kinds["provider"],
        "by_type": dict(sorted(Counter(r.type for r in rendering.resources if not r.type.startswith(("mlfleet:", "pulumi:"))).items())),
        "render_seconds_best": round(min(seconds), 3),
        "render_seconds_median": round(statistics.median(seconds), 3),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stacks", nargs="+", default=list(STACKS))
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    results = {stack: measure(stack, args.repeat) for stack in args.stacks}
    if args.json:
        print(json.dumps(results, indent=1))
    else:
        for stack, r in results.items():
            print(f"{stack:8} {r['cloud_resources']:4} cloud resources, {r['components']:3} components, "
                  f"{r['providers']} providers; render best {r['render_seconds_best']}s median {r['render_seconds_median']}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
