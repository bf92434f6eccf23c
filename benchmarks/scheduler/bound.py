"""Lower bounds on what any strategy can pay.

`lower_bound_cost_usd` (DESIGN.md): the LP that buys fractional amounts of instance types to cover the
GPU, vCPU and memory demand of each class of jobs with the instance types that class may run on. A
class is the set of types that hold its jobs (size, and the GPU model a pattern ties them to). Each
type bought is shared by the classes: variables x_t (instances of type t) and z_ctr (how much of
resource r of type t class c uses), with sum_t z_ctr >= demand_cr over the types of c and
sum_c z_ctr <= capacity_tr x_t. Every packing is a solution (z its usage), so no packing costs less;
unlike one LP per class, it never counts one instance twice.

- snapshot: all jobs at once, $/h, solved exactly (scipy, HiGHS).
- replay: each interval between trace events (a job present from its submission to its submission plus
  its duration), the LP's $/h times the interval's length, summed. The intervals are thousands, so each
  is bounded by LP duality instead of solved: the dual of the LP gives each type a price per unit of
  each resource (w_tr, with capacity_t . w_t <= price_t), and then sum over classes and resources of
  demand_cr times the least w_tr over c's types is a lower bound for *any* demand. The duals of exact
  solves at the intervals that weigh most (length times GPUs, REPLAY_EXACT_SOLVES of them) and the
  single-price dual of the aggregate LP are all tried and the best kept per interval: a valid bound
  everywhere, exact where it was solved. `replay_bound_gap` measures how far it is from the exact LP on
  a sample of the other intervals.

The configuration-LP bound (benchmarks/configuration_bound.py) is tighter: it knows a job cannot take
GPUs from one instance and vCPUs from another.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import numpy as np
from scipy.optimize import linprog
from scipy.sparse import coo_matrix

from benchmarks.configuration_bound import ConfigurationBound, configuration_bound
from benchmarks.scheduler.simulate import InstanceType
from benchmarks.scheduler.trace import TraceJob
from lambdas.scheduler.planning import resource_prices

REPLAY_EXACT_SOLVES = 150


def job_classes(jobs: Sequence[TraceJob], types: Sequence[InstanceType]) -> tuple[list[tuple[int, ...]], list[int]]:
    """The classes (tuples of type indices) and each job's class index. Jobs no type holds get -1."""
    classes: dict[tuple[int, ...], int] = {}
    of_job = []
    memo: dict[tuple, int] = {}
    for job in jobs:
        key = (job.gpus, job.vcpus, job.memory_mib, job.instance_type_pattern)
        if key not in memo:
            eligible = tuple(i for i, t in enumerate(types) if t.holds(job))
            memo[key] = classes.setdefault(eligible, len(classes)) if eligible else -1
        of_job.append(memo[key])
    return sorted(classes, key=classes.get), of_job


class ClassLP:
    """The class-aware covering LP over fixed types and classes; demand changes between solves."""

    def __init__(self, types: Sequence[InstanceType], classes: Sequence[tuple[int, ...]]):
        self.types, self.classes = types, classes
        self.scale = np.array([max(t.capacity[r] for t in types) for r in range(3)], dtype=float)
        self.capacity = np.array([t.capacity for t in types], dtype=float) / self.scale
        self.price = np.array([t.price for t in types], dtype=float)

    def solve(self, demand: np.ndarray) -> tuple[float, np.ndarray]:
        """The LP's optimum for demand[c, r], and the dual prices w[t, r] (per unscaled unit)."""
        active = [c for c in range(len(self.classes)) if demand[c].any()]
        n_types = len(self.types)
        if not active:
            return 0.0, np.zeros((n_types, 3))
        z = {}
        for c in active:
            for t in self.classes[c]:
                for r in range(3):
                    z[c, t, r] = n_types + len(z)
        rows, cols, values, bounds = [], [], [], []
        row = 0
        for c in active:  # cover: -sum_t z_ctr <= -demand_cr
            for r in range(3):
                for t in self.classes[c]:
                    rows.append(row), cols.append(z[c, t, r]), values.append(-1.0)
                bounds.append(-demand[c, r] / self.scale[r])
                row += 1
        type_rows = row
        for t in range(n_types):  # share: sum_c z_ctr - capacity_tr x_t <= 0
            for r in range(3):
                for c in active:
                    if (c, t, r) in z:
                        rows.append(row), cols.append(z[c, t, r]), values.append(1.0)
                rows.append(row), cols.append(t), values.append(-self.capacity[t, r])
                bounds.append(0.0)
                row += 1
        cost = np.zeros(n_types + len(z))
        cost[:n_types] = self.price
        matrix = coo_matrix((values, (rows, cols)), shape=(row, n_types + len(z))).tocsr()
        result = linprog(cost, A_ub=matrix, b_ub=np.array(bounds), bounds=(0, None), method="highs")
        if result.status != 0:
            raise RuntimeError(f"bound LP failed: {result.message}")
        w = -np.asarray(result.ineqlin.marginals[type_rows:]).reshape(n_types, 3) / self.scale
        return float(result.fun), np.maximum(w, 0.0)

    def dual_value(self, demand: np.ndarray, w: np.ndarray) -> float:
        """The lower bound the dual prices w give for demand[c, r] (weak duality)."""
        least = np.array([w[list(types)].min(axis=0) for types in self.classes])
        return float((demand * least).sum())


def _demand_matrix(jobs: Sequence[TraceJob], of_job: Sequence[int], n_classes: int) -> np.ndarray:
    demand = np.zeros((n_classes, 3))
    for job, c in zip(jobs, of_job):
        if c >= 0:
            demand[c] += (job.gpus, job.vcpus, job.memory_mib)
    return demand


def aggregate_bound(jobs: list[TraceJob], types: list[InstanceType]) -> float:
    classes, of_job = job_classes(jobs, types)
    if not classes:
        return 0.0
    return ClassLP(types, classes).solve(_demand_matrix(jobs, of_job, len(classes)))[0]


def _intervals(jobs: Sequence[TraceJob], of_job: Sequence[int], n_classes: int):
    """(start, end, demand matrix) of every interval between trace events with work in it."""
    changes: dict[float, list] = {}
    for job, c in zip(jobs, of_job):
        if c < 0:
            continue
        for at, sign in ((job.submit_s, 1), (job.submit_s + job.duration_s, -1)):
            # Integer milli-vCPUs: no drift over tens of thousands of steps.
            changes.setdefault(at, []).append((c, sign * job.gpus, sign * round(job.vcpus * 1000), sign * job.memory_mib))
    level = np.zeros((n_classes, 3), dtype=np.int64)
    previous = None
    for at in sorted(changes):
        if previous is not None and level.any():
            yield previous, at, level.astype(float) * (1.0, 0.001, 1.0)
        for c, g, v, m in changes[at]:
            level[c] += (g, v, m)
        previous = at


def replay_bound(jobs: list[TraceJob], types: list[InstanceType], exact_solves: int = REPLAY_EXACT_SOLVES) -> float:
    classes, of_job = job_classes(jobs, types)
    if not classes:
        return 0.0
    intervals = list(_intervals(jobs, of_job, len(classes)))
    lp = ClassLP(types, classes)
    # One dual is the aggregate LP's single price per resource: feasible for every type.
    total = np.array([d.sum(axis=0) for _, _, d in intervals]).sum(axis=0) if intervals else np.zeros(3)
    duals = [np.tile(resource_prices([(t.capacity, t.price) for t in types], tuple(total)), (len(types), 1))]
    weight = sorted(range(len(intervals)), key=lambda i: -(intervals[i][1] - intervals[i][0]) * intervals[i][2][:, 0].sum())
    for i in weight[:exact_solves]:
        duals.append(lp.solve(intervals[i][2])[1])
    least = np.array([[w[list(types)].min(axis=0) for types in classes] for w in duals])  # dual, class, r
    demands = np.array([d for _, _, d in intervals])  # interval, class, r
    values = np.einsum("icr,kcr->ik", demands, least).max(axis=1)
    lengths = np.array([end - start for start, end, _ in intervals])
    return float((values * lengths).sum() / 3600)


def replay_bound_gap(jobs: list[TraceJob], types: list[InstanceType], sample: int = 50, seed: int = 1) -> dict:
    """How the replay bound's per-interval values compare with exact solves on a random sample of
    intervals: the dual bound is never above the exact optimum; the mean and worst shortfall."""
    classes, of_job = job_classes(jobs, types)
    intervals = list(_intervals(jobs, of_job, len(classes)))
    lp = ClassLP(types, classes)
    chosen = random.Random(seed).sample(range(len(intervals)), min(sample, len(intervals)))
    weight = sorted(range(len(intervals)), key=lambda i: -(intervals[i][1] - intervals[i][0]) * intervals[i][2][:, 0].sum())
    total = np.array([d.sum(axis=0) for _, _, d in intervals]).sum(axis=0)
    duals = [np.tile(resource_prices([(t.capacity, t.price) for t in types], tuple(total)), (len(types), 1))]
    duals += [lp.solve(intervals[i][2])[1] for i in weight[:REPLAY_EXACT_SOLVES]]
    shortfalls = []
    for i in chosen:
        exact = lp.solve(intervals[i][2])[0]
        bound = max(lp.dual_value(intervals[i][2], w) for w in duals)
        shortfalls.append(0.0 if exact <= 0 else (exact - bound) / exact)
    return {"intervals": len(intervals), "sampled": len(chosen), "mean_shortfall": float(np.mean(shortfalls)),
            "worst_shortfall": float(np.max(shortfalls))}


def snapshot_configuration_bound(jobs: list[TraceJob], types: list[InstanceType]) -> ConfigurationBound:
    """The configuration LP over kinds (size, and the types the job may use: its GPU model)."""
    if not jobs:
        return ConfigurationBound(0, 0, 0, True)
    eligible = {}
    kinds = []
    for job in jobs:
        kind = ((job.gpus, job.vcpus, job.memory_mib), job.instance_type_pattern)
        if kind not in eligible:
            eligible[kind] = {i for i, t in enumerate(types) if t.holds(job)}
        kinds.append(kind)
    return configuration_bound(kinds, [(t.capacity, t.price) for t in types], eligible=eligible,
                               shape_of=lambda kind: kind[0])
