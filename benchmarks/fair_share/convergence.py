"""How close shares come to weights over many random two-team cases, for a choice of half-lives.

Each case draws (from its seed) each team's job size (1, 2 or 4 GPUs) and weight (1, 2 or 3), gives
both teams a backlog that alone would keep the fleet busy for --case-hours, submitted at once, and
measures each team's share of the GPU-hours run while both had jobs waiting. The figure of a case is
the gap between team a's share and its share of the weights; reported: the mean, the 90th percentile
and the largest gap over the cases, and how busy the GPUs were.
"""

from __future__ import annotations

import random
import statistics

from benchmarks.fair_share.measure import measure
from benchmarks.fair_share.strategy import simulate
from benchmarks.fair_share.trace import backlog
from lambdas.scheduler.planning import Team


def case(seed: int) -> tuple[int, int, int, int]:
    """(GPUs per job of a, of b, weight of a, of b)."""
    rng = random.Random(seed)
    return rng.choice([1, 2, 4]), rng.choice([1, 2, 4]), rng.choice([1, 2, 3]), rng.choice([1, 2, 3])


def convergence(cases: int, *, first_seed: int, instances: int, gpus_per_instance: int, hours: float,
                half_life_s: float) -> dict:
    fleet_gpus = instances * gpus_per_instance
    gaps, busy, worst = [], [], None
    for seed in range(first_seed, first_seed + cases):
        gpus_a, gpus_b, weight_a, weight_b = case(seed)
        trace = backlog(seed, "a", gpus_a, fleet_gpus, hours) + backlog(seed, "b", gpus_b, fleet_gpus, hours)
        sim, _ = simulate(trace, {"a": Team(weight_a), "b": Team(weight_b)}, instances=instances,
                          half_life_s=half_life_s, seed=seed)
        figures = measure(sim, trace, fleet_gpus, 3600)
        gap = abs(figures["share"]["a"] - weight_a / (weight_a + weight_b))
        gaps.append(gap)
        busy.append(figures["gpu_utilization_both_waiting"])
        if worst is None or gap > worst["gap"]:
            worst = {"seed": seed, "gap": round(gap, 4), "gpus_per_job": [gpus_a, gpus_b],
                     "weights": [weight_a, weight_b], "share_a": figures["share"]["a"]}
    ordered = sorted(gaps)
    return {"cases": cases, "first_seed": first_seed, "fleet_gpus": fleet_gpus, "case_hours": hours,
            "half_life_minutes": half_life_s / 60, "mean_gap": round(statistics.fmean(gaps), 4),
            "p90_gap": round(ordered[int(0.9 * (len(ordered) - 1))], 4), "max_gap": round(ordered[-1], 4),
            "worst": worst, "mean_gpu_utilization": round(statistics.fmean(busy), 4)}
