"""Lower bounds on what any strategy can pay.

`lower_bound_cost_usd` (DESIGN.md): the LP that buys fractional amounts of instance types to cover the
total GPU, vCPU and memory demand. snapshot: all jobs at once, in $/h. replay: the demand of each
interval between trace events (a job present from its submission to its submission plus its duration),
the LP's $/h times the interval's length, summed, in dollars. The snapshot LP is solved with scipy
(HiGHS); the replay's thousands of intervals with the scheduler's own `resource_prices` (the same LP's
dual, which the tests check against scipy), cached by demand.

The configuration-LP bound (benchmarks/configuration_bound.py) is tighter: it knows a job cannot take
GPUs from one instance and vCPUs from another.
"""

from __future__ import annotations

from benchmarks.configuration_bound import ConfigurationBound, configuration_bound
from benchmarks.scheduler.simulate import InstanceType
from benchmarks.scheduler.trace import TraceJob
from lambdas.scheduler.planning import resource_prices


def _demand(jobs) -> tuple[int, float, int]:
    return (sum(j.gpus for j in jobs), round(sum(j.vcpus for j in jobs), 6), sum(j.memory_mib for j in jobs))


def aggregate_bound(jobs: list[TraceJob], types: list[InstanceType]) -> float:
    from scipy.optimize import linprog

    demand = _demand(jobs)
    if not jobs:
        return 0.0
    result = linprog([t.price for t in types], A_ub=[[-t.capacity[i] for t in types] for i in range(3)],
                     b_ub=[-d for d in demand], bounds=(0, None), method="highs")
    if result.status != 0:
        raise RuntimeError(f"bound LP failed: {result.message}")
    return float(result.fun)


def replay_bound(jobs: list[TraceJob], types: list[InstanceType]) -> float:
    boxes = [(t.capacity, t.price) for t in types]
    changes: dict[float, list[int]] = {}
    for job in jobs:
        for at, sign in ((job.submit_s, 1), (job.submit_s + job.duration_s, -1)):
            delta = changes.setdefault(at, [0, 0, 0])
            delta[0] += sign * job.gpus
            delta[1] += sign * round(job.vcpus * 1000)  # integer milli-vCPUs: no drift over 16,000 steps
            delta[2] += sign * job.memory_mib
    cache: dict[tuple, float] = {}
    total, level, previous = 0.0, [0, 0, 0], None
    for at in sorted(changes):
        if previous is not None and any(level):
            demand = (level[0], level[1] / 1000, level[2])
            if demand not in cache:
                cache[demand] = sum(p * d for p, d in zip(resource_prices(boxes, demand), demand))
            total += cache[demand] * (at - previous) / 3600
        level = [a + b for a, b in zip(level, changes[at])]
        previous = at
    return total


def snapshot_configuration_bound(jobs: list[TraceJob], types: list[InstanceType]) -> ConfigurationBound:
    return configuration_bound([(j.gpus, j.vcpus, j.memory_mib) for j in jobs if j.instance_type_pattern is None],
                               [(t.capacity, t.price) for t in types]) if jobs else ConfigurationBound(0, 0, 0, True)
