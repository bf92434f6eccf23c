"""The configuration-LP bound: the least any packing of a set of jobs onto bought instances can cost.

The LP over "patterns" (an instance type and a set of jobs that fit on one instance of it together):
buy fractional amounts of patterns so that every job is covered, at least cost. Every real packing is a
solution of it (each instance with what it holds is a pattern), so its optimum is a lower bound on what
any placement strategy pays; unlike the aggregate LP of DESIGN.md (`lower_bound_cost_usd`), it knows
that a job cannot take GPUs from one instance and vCPUs from another. Solved by column generation
(Gilmore and Gomory): a master LP over the patterns found so far (scipy linprog, HiGHS), and per
instance type an exact integer knapsack for the pattern of most dual value (scipy milp, zero gap);
when no pattern prices out, the master's optimum is the bound.

Jobs that share a GPU (a kind with GPU memory, `gpu_memory_of`) make the pricing a small bin packing as
well: a pattern puts each such job on one of the instance's GPUs that it opens for sharing, within that
GPU's shareable memory, and a GPU opened for sharing takes no whole-GPU job. The pricing MILP then has a
count per kind and GPU, and a switch per GPU; every packing that fits each job onto one GPU is still a
pattern, so the bound stays valid and knows exactly how GPUs are shared.

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
                        shape_of=lambda kind: kind, gpu_memory_of=lambda kind: 0,
                        box_gpu_memory: Sequence[int] = ()) -> ConfigurationBound:
    """The bound for `demand` (kind -> count, or a list of kinds) over instance types `boxes`.

    A kind is a shape (GPUs, vCPUs, MiB) unless `shape_of` says how to read one (a shape and the GPU model
    a job is tied to, say). `eligible[kind]`: the boxes that kind may use (every box it fits when not
    given); a pattern only holds kinds eligible on its box. Kinds no box can hold are left out (the
    caller reports them as unplaceable). `gpu_memory_of(kind)`: MiB of one GPU a kind sharing GPUs asks
    for (its shape then has 0 GPUs); `box_gpu_memory[b]`: the shareable memory of each GPU of box b.
    """
    counts = Counter(demand) if not isinstance(demand, Mapping) else Counter(dict(demand))

    def share(b: int) -> int:
        return box_gpu_memory[b] if b < len(box_gpu_memory) else 0

    def allowed(kind, b: int) -> bool:
        memory = gpu_memory_of(kind)
        sharing_ok = not memory or (boxes[b][0][0] >= 1 and share(b) >= memory)
        return sharing_ok and _fits(boxes[b][0], shape_of(kind)) and (eligible is None or b in eligible.get(kind, ()))

    kinds = [k for k in counts if any(allowed(k, b) for b in range(len(boxes)))]
    if not kinds:
        return ConfigurationBound(0.0, 0, 0, True)
    need = np.array([counts[k] for k in kinds], dtype=float)
    sizes = np.array([shape_of(k) for k in kinds], dtype=float)  # one row per kind
    shapes = [shape_of(k) for k in kinds]
    memories = np.array([gpu_memory_of(k) for k in kinds], dtype=float)
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
            fits_alone = [int(min([capacity[d] // s[d] if s[d] else need[k] for d in range(3)]
                                  + ([capacity[0] * (share(b) // memories[k])] if memories[k] else [])))
                          if allowed(kinds[k], b) else 0 for k, s in enumerate(shapes)]
            upper = np.minimum(need, np.array(fits_alone, dtype=float))
            if not upper.any():
                continue
            shared = [k for k in range(len(kinds)) if memories[k] and upper[k]]
            with _quiet_stdout():
                if shared:
                    found = _price_sharing(duals, sizes, memories, upper, shared, capacity, share(b))
                else:
                    pattern = milp(-duals, constraints=LinearConstraint(sizes.T, -np.inf, np.array(capacity, dtype=float)),
                                   integrality=np.ones(len(kinds)), bounds=Bounds(0, upper),
                                   options={"mip_rel_gap": 0.0})
                    found = (np.round(pattern.x), -pattern.fun) if pattern.x is not None else None
            if found is not None and found[1] > price * (1 + 1e-9) + 1e-9:
                columns.append((b, found[0]))
                added += 1
        if not added:
            converged = True
            break
    return ConfigurationBound(round(float(result.fun), 4), iteration, len(columns), converged)


def _price_sharing(duals: np.ndarray, sizes: np.ndarray, memories: np.ndarray, upper: np.ndarray,
                   shared: Sequence[int], capacity: Shape, gpu_memory: int) -> tuple[np.ndarray, float] | None:
    """The pattern of most dual value on one box when some kinds share GPUs: whole-GPU kinds by count, each
    sharing kind by count on each GPU, and per GPU a switch that opens it for sharing (then it takes no
    whole-GPU job and holds at most its shareable memory). Returns (counts per kind, value)."""
    n, gpus = len(duals), int(capacity[0])
    whole = [k for k in range(n) if not memories[k]]
    columns = len(whole) + len(shared) * gpus + gpus  # counts, per-GPU counts, switches
    objective = np.zeros(columns)
    objective[:len(whole)] = -duals[whole]
    for i, k in enumerate(shared):
        objective[len(whole) + i * gpus:len(whole) + (i + 1) * gpus] = -duals[k]
    rows, lower, upper_rows = [], [], []

    def row() -> np.ndarray:
        return np.zeros(columns)

    for d in (1, 2):  # vCPUs and memory of everything on the box
        r = row()
        r[:len(whole)] = sizes[whole, d]
        for i, k in enumerate(shared):
            r[len(whole) + i * gpus:len(whole) + (i + 1) * gpus] = sizes[k, d]
        rows.append(r), lower.append(-np.inf), upper_rows.append(capacity[d])
    r = row()  # whole GPUs plus the GPUs opened for sharing
    r[:len(whole)] = sizes[whole, 0]
    r[columns - gpus:] = 1
    rows.append(r), lower.append(-np.inf), upper_rows.append(gpus)
    for g in range(gpus):  # each opened GPU's memory; unopened GPUs hold no sharing job
        r = row()
        for i, k in enumerate(shared):
            r[len(whole) + i * gpus + g] = memories[k]
        r[columns - gpus + g] = -gpu_memory
        rows.append(r), lower.append(-np.inf), upper_rows.append(0.0)
    for g in range(gpus - 1):  # GPUs open in order: no two patterns that differ by a relabelling
        r = row()
        r[columns - gpus + g], r[columns - gpus + g + 1] = -1, 1
        rows.append(r), lower.append(-np.inf), upper_rows.append(0.0)
    for i, k in enumerate(shared):  # a kind's count over all GPUs within what is needed
        r = row()
        r[len(whole) + i * gpus:len(whole) + (i + 1) * gpus] = 1
        rows.append(r), lower.append(-np.inf), upper_rows.append(upper[k])
    bounds_upper = np.concatenate([upper[whole], np.repeat(upper[list(shared)], gpus), np.ones(gpus)])
    result = milp(objective, constraints=LinearConstraint(np.array(rows), lower, upper_rows),
                  integrality=np.ones(columns), bounds=Bounds(0, bounds_upper), options={"mip_rel_gap": 0.0})
    if result.x is None:
        return None
    x = np.round(result.x)
    counts = np.zeros(n)
    counts[whole] = x[:len(whole)]
    for i, k in enumerate(shared):
        counts[k] = x[len(whole) + i * gpus:len(whole) + (i + 1) * gpus].sum()
    return counts, -result.fun
