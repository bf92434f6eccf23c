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
from collections.abc import Collection, Mapping, Sequence
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


def configuration_bound(demand: Mapping | Sequence, boxes: Sequence[Box], *, max_iterations: int = 1000,
                        eligible: Mapping[object, Collection[int]] | None = None,
                        shape_of=lambda kind: kind) -> ConfigurationBound:
    """The bound for `demand` (kind -> count, or a list of kinds) over instance types `boxes`.

    A kind is a shape (GPUs, vCPUs, MiB) unless `shape_of` says how to read one (a shape and the GPU model
    a job is tied to, say). `eligible[kind]`: the boxes that kind may use (every box it fits when not
    given); a pattern only holds kinds eligible on its box. Kinds no box can hold are left out (the
    caller reports them as unplaceable).
    """
    counts = Counter(demand) if not isinstance(demand, Mapping) else Counter(dict(demand))

    def allowed(kind, b: int) -> bool:
        return _fits(boxes[b][0], shape_of(kind)) and (eligible is None or b in eligible.get(kind, ()))

    kinds = [k for k in counts if any(allowed(k, b) for b in range(len(boxes)))]
    if not kinds:
        return ConfigurationBound(0.0, 0, 0, True)
    need = np.array([counts[k] for k in kinds], dtype=float)
    sizes = np.array([shape_of(k) for k in kinds], dtype=float)  # one row per kind
    shapes = [shape_of(k) for k in kinds]
    columns: list[tuple[int, np.ndarray]] = []
    for k, kind in enumerate(kinds):  # start: each kind alone on its cheapest instance
        _, box = min((price, b) for b, (capacity, price) in enumerate(boxes) if allowed(kind, b))
        column = np.zeros(len(kinds))
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
                          if allowed(kinds[k], b) else 0 for k, s in enumerate(shapes)]
            upper = np.minimum(need, np.array(fits_alone, dtype=float))
            if not upper.any():
                continue
            with _quiet_stdout():
                pattern = milp(-duals, constraints=LinearConstraint(sizes.T, -np.inf, np.array(capacity, dtype=float)),
                               integrality=np.ones(len(kinds)), bounds=Bounds(0, upper),
                               options={"mip_rel_gap": 0.0})
            if pattern.x is not None and -pattern.fun > price * (1 + 1e-9) + 1e-9:
                columns.append((b, np.round(pattern.x)))
                added += 1
        if not added:
            converged = True
            break
    return ConfigurationBound(round(float(result.fun), 4), iteration, len(columns), converged)
