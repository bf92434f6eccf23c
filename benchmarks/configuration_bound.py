"""The configuration-LP bound: the least any packing of a set of jobs onto bought instances can cost.

The LP over "patterns" (an instance type and a set of jobs that fit on one instance of it together):
buy fractional amounts of patterns so that every job is covered, at least cost. Every real packing is a
solution of it (each instance with what it holds is a pattern), so its optimum is a lower bound on what
any placement strategy pays; unlike the aggregate LP of DESIGN.md (`lower_bound_cost_usd`), it knows
that a job cannot take GPUs from one instance and vCPUs from another. Solved by column generation
(Gilmore and Gomory): a master LP over the patterns found so far (scipy linprog, HiGHS), and per
instance type an exact integer knapsack for the pattern of most dual value (scipy milp, zero gap);
when no pattern prices out, the master's optimum is the bound.

It is a benchmark tool, not scheduler code: the scheduler Lambda has no LP solver.
"""

from __future__ import annotations

import contextlib
import os
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, linprog, milp

Shape = tuple[int, float, int]  # GPUs, vCPUs, MiB
Box = tuple[Shape, float]  # capacity, price per hour


@dataclass(frozen=True)
class ConfigurationBound:
    cost: float
    iterations: int
    patterns: int
    converged: bool


@contextlib.contextmanager
def _quiet_stdout():
    """HiGHS's MIP solver prints progress lines on file descriptor 1 whatever its options say; keep
    them out of the benchmark's JSON."""
    saved = os.dup(1)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 1)
            yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def _fits(capacity: Shape, shape: Shape) -> bool:
    return all(c >= s for c, s in zip(capacity, shape))


def configuration_bound(demand: Mapping[Shape, int] | Sequence[Shape], boxes: Sequence[Box], *,
                        max_iterations: int = 1000) -> ConfigurationBound:
    """The bound for `demand` (shape -> count, or a list of shapes) over instance types `boxes`.

    Shapes no box can hold are left out (the caller reports them as unplaceable).
    """
    counts = Counter(demand) if not isinstance(demand, Mapping) else Counter(dict(demand))
    shapes = [s for s in counts if any(_fits(c, s) for c, _ in boxes)]
    if not shapes:
        return ConfigurationBound(0.0, 0, 0, True)
    need = np.array([counts[s] for s in shapes], dtype=float)
    sizes = np.array(shapes, dtype=float)  # one row per shape
    columns: list[tuple[int, np.ndarray]] = []
    for k, shape in enumerate(shapes):  # start: each job alone on its cheapest instance
        _, box = min((price, b) for b, (capacity, price) in enumerate(boxes) if _fits(capacity, shape))
        column = np.zeros(len(shapes))
        column[k] = 1
        columns.append((box, column))

    converged, result = False, None
    for iteration in range(1, max_iterations + 1):
        matrix = np.array([c for _, c in columns]).T
        cost = np.array([boxes[b][1] for b, _ in columns])
        result = linprog(cost, A_ub=-matrix, b_ub=-need, bounds=(0, None), method="highs")
        if result.status != 0:
            raise RuntimeError(f"master LP failed: {result.message}")
        duals = -result.ineqlin.marginals
        added = 0
        for b, (capacity, price) in enumerate(boxes):
            fits_alone = [int(min(capacity[d] // s[d] if s[d] else need[k] for d in range(3)))
                          for k, s in enumerate(shapes)]
            upper = np.minimum(need, np.array(fits_alone, dtype=float))
            if not upper.any():
                continue
            with _quiet_stdout():
                pattern = milp(-duals, constraints=LinearConstraint(sizes.T, -np.inf, np.array(capacity, dtype=float)),
                               integrality=np.ones(len(shapes)), bounds=Bounds(0, upper),
                               options={"mip_rel_gap": 0.0})
            if pattern.x is not None and -pattern.fun > price * (1 + 1e-9) + 1e-9:
                columns.append((b, np.round(pattern.x)))
                added += 1
        if not added:
            converged = True
            break
    return ConfigurationBound(round(float(result.fun), 4), iteration, len(columns), converged)
