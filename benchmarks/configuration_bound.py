"""The configuration-LP bound: the least any packing of a set of jobs onto bought instances can cost.

The LP over "patterns" (an instance type and a set of jobs that fit on one instance of it together):
buy fractional amounts of patterns so that every job is covered, at least cost. Every real packing is a
solution of it (each instance with what it holds is a pattern), so its optimum is a lower bound on what
any placement strategy pays; unlike the aggregate LP of DESIGN.md (`lower_bound_cost_usd`), it knows
that a job cannot take GPUs from one instance and vCPUs from another. Solved by column generation
(Gilmore and Gomory): a master LP over the patterns found so far (scipy linprog, HiGHS), and per
instance type an exact integer knapsack for the pattern of most dual value (scipy milp, zero gap);
when no pattern prices out, the master's optimum is the bound.

Jobs that share a GPU (a kind with GPU memory, `gpu_memory_of`) need a GPU's memory each, on one GPU. A
pattern counts the box's GPUs under dual-feasible functions (`dual_feasible_views`): whole-GPU jobs take
a GPU, a sharing job f(its share of a GPU), within the box's GPUs for every function. Every packing that
fits each job onto one GPU is a pattern, so the bound stays valid (the exact per-GPU packing is too slow
to price on the shared trace's 8-GPU types).

It is a benchmark tool, not scheduler code: the scheduler Lambda has no LP solver.
"""

from __future__ import annotations

import bisect
import contextlib
import math
import os
import time
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from functools import partial

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, linprog, milp

Shape = tuple[int, float, int]  # GPUs, vCPUs, MiB
Box = tuple[Shape, float]  # capacity, price per hour


@dataclass(frozen=True)
class ConfigurationBound:
    cost: float  # a lower bound on every packing: the LP optimum when converged, else Farley's bound
    iterations: int
    patterns: int
    converged: bool
    master_cost: float = 0.0  # the last master LP's optimum (the LP optimum when converged)


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
                        time_limit_s: float | None = None,
                        eligible: Mapping[object, Collection[int]] | None = None,
                        shape_of=lambda kind: kind, gpu_memory_of=lambda kind: 0,
                        box_gpu_memory: Sequence[int] = ()) -> ConfigurationBound:
    """The bound for `demand` (kind -> count, or a list of kinds) over instance types `boxes`.

    A kind is a shape (GPUs, vCPUs, MiB) unless `shape_of` says how to read one (a shape and the GPU model
    a job is tied to, say). `eligible[kind]`: the boxes that kind may use (every box it fits when not
    given); a pattern only holds kinds eligible on its box. Kinds no box can hold are left out (the
    caller reports them as unplaceable). `gpu_memory_of(kind)`: MiB of one GPU a kind sharing GPUs asks
    for (its shape then has 0 GPUs); `box_gpu_memory[b]`: the shareable memory of each GPU of box b.

    Stopped by `max_iterations` or `time_limit_s` before it converges, the bound is Farley's: with the
    master's duals y and every box priced exactly, y / max_b(best pattern value_b / price_b) is dual
    feasible, so the master's optimum divided by that ratio is a lower bound on the LP's (the best of the
    iterations is kept).
    """
    started = time.process_time()
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
    # The thresholds are chosen on the smallest GPU that can share (any choice keeps the bound valid).
    reference, shares = min((share(b) for b in range(len(boxes)) if share(b)), default=0), Counter()
    for k in kinds:
        if gpu_memory_of(k) and reference:
            shares[gpu_memory_of(k) / reference] += counts[k]
    views = dual_feasible_views(shares)
    sizes = np.array([shape_of(k) for k in kinds], dtype=float)  # one row per kind
    shapes = [shape_of(k) for k in kinds]
    memories = np.array([gpu_memory_of(k) for k in kinds], dtype=float)
    columns: list[tuple[int, np.ndarray]] = []
    for k, kind in enumerate(kinds):  # start: each kind alone on its cheapest instance
        _, box = min((price, b) for b, (capacity, price) in enumerate(boxes) if allowed(kind, b))
        column = np.zeros(len(kinds))
        column[k] = 1
        columns.append((box, column))

    priced = [b for b in range(len(boxes)) if not _dominated(b, boxes, kinds, allowed, share)]

    converged, result, best_bound = False, None, 0.0
    for iteration in range(1, max_iterations + 1):
        matrix = np.array([c for _, c in columns]).T
        cost = np.array([boxes[b][1] for b, _ in columns])
        result = linprog(cost, A_ub=-matrix, b_ub=-need, bounds=(0, None), method="highs")
        if result.status != 0:
            raise RuntimeError(f"master LP failed: {result.message}")
        duals = -result.ineqlin.marginals
        added, ratio, proven = 0, 1.0, True
        for b in priced:
            capacity, price = boxes[b]
            fits_alone = [int(min([capacity[d] // s[d] if s[d] else need[k] for d in range(3)]
                                  + ([capacity[0] * (share(b) // memories[k])] if memories[k] else [])))
                          if allowed(kinds[k], b) else 0 for k, s in enumerate(shapes)]
            upper = np.minimum(need, np.array(fits_alone, dtype=float))
            if not upper.any():
                continue
            shared = [k for k in range(len(kinds)) if memories[k] and upper[k]]
            with _quiet_stdout():
                if shared:
                    found = _price_sharing(duals, sizes, memories, upper, shared, capacity, share(b), views)
                else:
                    pattern = milp(-duals, constraints=LinearConstraint(sizes.T, -np.inf, np.array(capacity, dtype=float)),
                                   integrality=np.ones(len(kinds)), bounds=Bounds(0, upper),
                                   options={"mip_rel_gap": 0.0})
                    found = (np.round(pattern.x), -pattern.fun) if pattern.x is not None else None
            if found is None:
                proven = False  # the solver gave no pattern: this iteration proves nothing
            else:
                ratio = max(ratio, found[1] / price)
            if found is not None and found[1] > price * (1 + 1e-9) + 1e-9:
                columns.append((b, found[0]))
                added += 1
        if proven:
            best_bound = max(best_bound, float(result.fun) / ratio)
        if not added:
            converged = True
            break
        if time_limit_s is not None and time.process_time() - started > time_limit_s:
            break
    # Not rounded: a lower bound rounded to the nearest 1e-4 can fall below the aggregate bound it tightens
    # (0.4193 against 0.41933, tests/benchmarks/test_benchmark_gpu_sharing.py) or pass the optimum it bounds.
    master = float(result.fun)
    return ConfigurationBound(master if converged else best_bound, iteration, len(columns), converged, master)


def _dominated(a: int, boxes: Sequence[Box], kinds: Sequence, allowed: Callable[[object, int], bool],
               share: Callable[[int], int]) -> bool:
    """Whether box `a` need not be priced: another box holds every kind `a` may hold, at least `a`'s capacity
    in every dimension and as much memory on each GPU (or `a` shares none), for at most `a`'s price (of equal
    boxes, the first is priced). Every pattern of `a` is then a pattern of that box, for no more, so leaving
    `a` out changes neither the LP's optimum nor Farley's bound (its best pattern's value per dollar is at
    most the other box's). The GPU memory check is enough because a sharing job's share of a GPU only
    shrinks on a GPU with more memory, and every view of it is non-decreasing. On the shared trace's
    us-east-1 types, 19 of 36 are dominated."""
    capacity, price = boxes[a]
    for b, (other, other_price) in enumerate(boxes):
        if b == a or other_price > price or any(o < c for o, c in zip(other, capacity)):
            continue
        if share(a) and share(b) < share(a):
            continue
        if (other, other_price, share(b)) == (capacity, price, share(a)) and b > a:
            continue  # an equal box: the first of them is priced
        if all(allowed(kind, b) for kind in kinds if allowed(kind, a)):
            return True
    return False


def dual_feasible(k: int, x: float) -> float:
    """The k-th dual-feasible function of a job's share x of a GPU: the identity (k = 0), else Fekete and
    Schepers' u_k(x) = floor((k + 1) x) / k, x itself where (k + 1) x is a whole number ("New classes of
    fast lower bounds for bin packing problems", Math. Programming 91, 2001). For any jobs that fit one
    GPU together, the values of each function sum to at most 1."""
    if k == 0 or abs((k + 1) * x - round((k + 1) * x)) < 1e-12:
        return x
    return math.floor((k + 1) * x) / k


def threshold(epsilon: float, x: float) -> float:
    """Fekete and Schepers' U^(epsilon), 0 < epsilon <= 1/2 (same paper): a share above 1 - epsilon counts a
    whole GPU, one below epsilon nothing, the others themselves. Jobs that fit one GPU with a share above
    1 - epsilon are each below epsilon, so the values still sum to at most 1. It is the function behind
    Martello and Toth's L2 bound for bin packing, and it sees what the u_k miss: a GPU holding 81% of its
    memory holds no job of 22% beside it. (A margin far below one MiB of a GPU keeps two jobs that fill a
    GPU exactly from counting more than 1 through rounding.)"""
    if x > 1 - epsilon + 1e-9:
        return 1.0
    return x if x >= epsilon else 0.0


GpuView = Callable[[float], float]
BASE_VIEWS: tuple[GpuView, ...] = tuple(partial(dual_feasible, k) for k in range(4))  # identity, u_1, u_2, u_3
THRESHOLD_VIEWS = 8  # at most this many U^(epsilon) views, chosen for the jobs at hand


def dual_feasible_views(shares: Mapping[float, float]) -> tuple[GpuView, ...]:
    """The views a resource is counted in, for jobs asking shares of it ({a job's share: how many such jobs}; a
    share of a reference GPU's memory for jobs sharing GPUs, or of an instance's GPUs, vCPUs or memory
    in the type-aware bound): BASE_VIEWS, then up to THRESHOLD_VIEWS thresholds U^(epsilon), epsilon
    among the shares of at most 1/2. First, for each share above 1/2 (the most common first), the least
    share that cannot join it (on one GPU, or one instance): that view counts it whole and keeps every
    job that would have to go elsewhere (81% and 22%; 65% and 37%). Then those that count all the jobs
    at the most GPUs (the L2 bound's choice). Every view is dual feasible whatever the shares, so the
    choice only decides how tight the bounds are."""
    small = sorted(x for x in shares if 0 < x <= 0.5)
    chosen: dict[float, None] = {}
    for big in sorted((x for x in shares if x > 0.5), key=lambda x: (-shares[x], x)):
        at = bisect.bisect_right(small, 1 - big)  # the least share above 1 - big
        if at < len(small):
            chosen.setdefault(small[at], None)
    count = dict(zip(small, _threshold_counts(shares, small)))
    for e in sorted(small, key=lambda e: (-count[e], e)):
        chosen.setdefault(e, None)
    return BASE_VIEWS + tuple(partial(threshold, e) for e in sorted(list(chosen)[:THRESHOLD_VIEWS]))


def _threshold_counts(shares: Mapping[float, float], epsilons: Sequence[float]) -> list[float]:
    """sum(n * threshold(e, x) for x, n in shares.items()) for each e, by prefix sums over the sorted shares
    (a type-aware bound's kinds can ask thousands of shares of a resource: the plain sum is quadratic)."""
    xs = sorted(shares)
    x = np.array(xs, dtype=float)
    n = np.array([shares[v] for v in xs], dtype=float)
    jobs, weight = np.concatenate([[0.0], np.cumsum(n)]), np.concatenate([[0.0], np.cumsum(n * x)])
    counts = []
    for e in epsilons:
        whole = int(np.searchsorted(x, 1 - e + 1e-9, side="right"))  # threshold() counts these as 1
        least = int(np.searchsorted(x, e, side="left"))  # and these below e as 0
        counts.append(float(jobs[-1] - jobs[whole] + weight[whole] - weight[least]))
    return counts


def _price_sharing(duals: np.ndarray, sizes: np.ndarray, memories: np.ndarray, upper: np.ndarray,
                   shared: Sequence[int], capacity: Shape, gpu_memory: int,
                   views: Sequence[GpuView]) -> tuple[np.ndarray, float] | None:
    """The pattern of most dual value on one box when some kinds share GPUs, with the GPUs counted under
    each dual-feasible function: whole GPUs plus the sharing jobs' f-values within the box's GPUs in every
    view. Every way to pack the box's GPUs passes, so the bound stays valid; the exact per-GPU packing
    (a count per kind and GPU) is too slow to price at this size. The views still pass some patterns no
    GPU packing holds (docs/scheduler-benchmark.md, "Traces where more pods share"): the bound is valid,
    not tight."""
    gpu_rows = np.tile(sizes[:, 0], (len(views), 1))
    for k in shared:
        gpu_rows[:, k] = [view(memories[k] / gpu_memory) for view in views]
    rows = np.vstack([sizes[:, 1], sizes[:, 2], gpu_rows])
    limits = np.array([capacity[1], capacity[2], *[capacity[0]] * len(views)], dtype=float)
    result = milp(-duals, constraints=LinearConstraint(rows, -np.inf, limits), integrality=np.ones(len(duals)),
                  bounds=Bounds(0, upper), options={"mip_rel_gap": 0.0})
    return (np.round(result.x), -result.fun) if result.x is not None else None
