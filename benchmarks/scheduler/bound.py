"""Lower bounds on what any strategy can pay.

`lower_bound_cost_usd` (DESIGN.md): the LP that buys fractional amounts of instance types to cover the
GPU, vCPU and memory demand of each class of jobs with the instance types that class may run on. A
class is the set of types that hold its jobs (size, and the GPU model a pattern ties them to). Each
type bought is shared by the classes: variables x_t (instances of type t) and z_ctr (how much of
resource r of type t class c uses), with sum_t z_ctr >= demand_cr over the types of c and
sum_c z_ctr <= capacity_tr x_t. Every packing is a solution (z its usage), so no packing costs less;
unlike one LP per class, it never counts one instance twice.

Jobs that share a GPU (--share-fractional-gpus) form classes of their own, one per GPU memory asked, whose
GPU demand is counted in jobs. Pooling a type's GPU memory would be a weak bound (a GPU holds one job of
80% of its memory, never 1.25 of them), so GPUs are counted under several dual-feasible functions f
(Fekete and Schepers, "New classes of fast lower bounds for bin packing problems", Math. Programming 91,
2001): for any jobs on one GPU, the sum of f(memory / the GPU's shareable memory) is at most 1. The
identity is one such f, and the step functions u_k(x) = floor((k + 1) x) / k (x where (k + 1) x is a
whole number) for k = 1, 2, 3 are others, and so are their thresholds U^(e) (a share above 1 - e counts a
whole GPU, one below e nothing), with e the trace's own shares that count its jobs at the most GPUs
(`gpu_views`). Each f is its own view of the GPUs: in every view, the whole-GPU jobs and the sharing jobs'
f-values on a type fit its GPUs. Every packing that puts each job on one GPU is a solution in every view
at once, so this sharing-aware bound is valid.

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
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import linprog
from scipy.sparse import coo_matrix

from benchmarks.configuration_bound import ConfigurationBound, configuration_bound, gpu_views
from benchmarks.scheduler.simulate import InstanceType, share_reference_mib
from benchmarks.scheduler.trace import TraceJob
from lambdas.scheduler.planning import resource_prices

REPLAY_EXACT_SOLVES = 150


@dataclass(frozen=True)
class JobClass:
    """Jobs alike for the bound: the instance types that hold them, and for jobs sharing a GPU the memory
    each asks (their GPU demand is then a count of jobs, not GPUs)."""
    types: tuple[int, ...]
    gpu_memory: int = 0  # > 0: a class of jobs sharing a GPU

    @property
    def shared(self) -> bool:
        return self.gpu_memory > 0


def job_classes(jobs: Sequence[TraceJob], types: Sequence[InstanceType]) -> tuple[list[JobClass], list[int]]:
    """The classes and each job's class index. Jobs no type holds get -1."""
    classes: dict[JobClass, int] = {}
    of_job = []
    memo: dict[tuple, int] = {}
    for job in jobs:
        key = (job.gpus, job.vcpus, job.memory_mib, job.gpu_memory_mib, job.instance_type_pattern)
        if key not in memo:
            eligible = tuple(i for i, t in enumerate(types) if t.holds(job))
            cls = JobClass(eligible, job.gpu_memory_mib if job.shares_gpu else 0)
            memo[key] = classes.setdefault(cls, len(classes)) if eligible else -1
        of_job.append(memo[key])
    return sorted(classes, key=classes.get), of_job


def gpu_demand(job: TraceJob) -> int:
    """A job's demand on the GPU row of its class: GPUs, or one job for a job sharing a GPU."""
    return 1 if job.shares_gpu else job.gpus


class ClassLP:
    """The class-aware covering LP over fixed types and classes; demand changes between solves.

    Resources: the GPUs in each of the n_views views (`gpu_views` of the sharing jobs' `shares`), vCPUs,
    memory. Dual prices w[t, q] are per unscaled unit: per GPU in each view (q < n_views), per vCPU
    (q = n_views) and per MiB (q = n_views + 1).
    """

    def __init__(self, types: Sequence[InstanceType], classes: Sequence[JobClass], shares: Mapping[float, float]):
        self.types, self.classes = types, classes
        self.views = gpu_views(shares)
        self.n_views = len(self.views)
        self.scale = np.array([max(t.capacity[r] for t in types) for r in range(3)], dtype=float)
        self.capacity = np.array([t.capacity for t in types], dtype=float) / self.scale
        self.price = np.array([t.price for t in types], dtype=float)
        # f_k(share of a GPU of type t) of one job of a sharing class: the GPUs it takes in view k.
        self.takes = [{(k, t): view(cls.gpu_memory / types[t].gpu_memory)
                       for k, view in enumerate(self.views) for t in cls.types} if cls.shared else {}
                      for cls in classes]
        # GPUs one unit of a class's GPU demand is, roughly (for ordering and the single-price dual only).
        self.gpus_per_unit = np.array([min(self.takes[c][0, t] for t in cls.types) if cls.shared else 1.0
                                       for c, cls in enumerate(classes)])

    def least_prices(self, w: np.ndarray) -> np.ndarray:
        """Each class's cheapest price per unit of its demand (GPUs or jobs, vCPUs, MiB) under type prices w."""
        least = np.zeros((len(self.classes), 3))
        for c, cls in enumerate(self.classes):
            on = w[list(cls.types)]
            least[c, 1:] = on[:, self.n_views:].min(axis=0)
            if cls.shared:
                least[c, 0] = sum(min(w[t, k] * self.takes[c][k, t] for t in cls.types) for k in range(self.n_views))
            else:
                least[c, 0] = on[:, :self.n_views].sum(axis=1).min()
        return least

    def dual_value(self, demand: np.ndarray, w: np.ndarray) -> float:
        """The lower bound the dual prices w give for demand[c, r] (weak duality)."""
        return float((demand * self.least_prices(w)).sum())

    def single_price(self, prices: Sequence[float]) -> np.ndarray:
        """Type prices from one price per GPU, vCPU and MiB (the identity view's): feasible for every type."""
        w = np.zeros((len(self.types), self.n_views + 2))
        w[:, 0], w[:, self.n_views], w[:, self.n_views + 1] = prices
        return w

    def solve(self, demand: np.ndarray) -> tuple[float, np.ndarray]:
        """The LP's optimum for demand[c, r], and the dual prices w[t, q] (per unscaled unit)."""
        active = [c for c in range(len(self.classes)) if demand[c].any()]
        n_types = len(self.types)
        if not active:
            return 0.0, np.zeros((n_types, self.n_views + 2))
        z = {}  # (class, type, q) -> column: q < n_views GPUs in view q (one column for all views: whole jobs)
        for c in active:
            views = range(self.n_views) if self.classes[c].shared else (0,)
            for t in self.classes[c].types:
                for q in (*views, self.n_views, self.n_views + 1):
                    z[c, t, q] = n_types + len(z)
        rows, cols, values, bounds = [], [], [], []
        row = 0
        for c in active:  # cover: -sum_t a_ctq z_ctq <= -demand (a = jobs per GPU in view q for sharing jobs)
            cls = self.classes[c]
            v = self.n_views
            covers = [(q, 0) for q in (range(v) if cls.shared else (0,))] + [(v, 1), (v + 1, 2)]
            for q, r in covers:
                if cls.shared and q < self.n_views and min(self.takes[c][q, t] for t in cls.types) <= 0:
                    continue  # free on some type in this view: the view says nothing about the class
                for t in cls.types:
                    rows.append(row), cols.append(z[c, t, q])
                    values.append(-(1.0 / self.takes[c][q, t] if cls.shared and q < self.n_views else 1.0))
                bounds.append(-demand[c, r] / self.scale[r])
                row += 1
        type_rows = row
        for t in range(n_types):  # share: sum_c z_ctq - capacity_t x_t <= 0, every GPU view, vCPUs, memory
            for q in range(self.n_views + 2):
                r = min(q - self.n_views + 1, 2) if q >= self.n_views else 0
                for c in active:
                    column = z.get((c, t, q if self.classes[c].shared or q >= self.n_views else 0))
                    if column is not None:
                        rows.append(row), cols.append(column), values.append(1.0)
                rows.append(row), cols.append(t), values.append(-self.capacity[t, r])
                bounds.append(0.0)
                row += 1
        cost = np.zeros(n_types + len(z))
        cost[:n_types] = self.price
        matrix = coo_matrix((values, (rows, cols)), shape=(row, n_types + len(z))).tocsr()
        result = linprog(cost, A_ub=matrix, b_ub=np.array(bounds), bounds=(0, None), method="highs")
        if result.status != 0:
            raise RuntimeError(f"bound LP failed: {result.message}")
        scale = np.concatenate([np.full(self.n_views, self.scale[0]), self.scale[1:]])
        w = -np.asarray(result.ineqlin.marginals[type_rows:]).reshape(n_types, self.n_views + 2) / scale
        return float(result.fun), np.maximum(w, 0.0)


def _demand_matrix(jobs: Sequence[TraceJob], of_job: Sequence[int], n_classes: int) -> np.ndarray:
    demand = np.zeros((n_classes, 3))
    for job, c in zip(jobs, of_job):
        if c >= 0:
            demand[c] += (gpu_demand(job), job.vcpus, job.memory_mib)
    return demand


def sharing_shares(jobs: Sequence[TraceJob], types: Sequence[InstanceType]) -> Counter:
    """{a sharing job's share of the smallest GPU that can share: how many such jobs}, what `gpu_views`
    chooses its thresholds from."""
    reference = share_reference_mib(types)
    return Counter(job.gpu_memory_mib / reference for job in jobs if job.shares_gpu and reference)


def aggregate_bound(jobs: list[TraceJob], types: list[InstanceType]) -> float:
    classes, of_job = job_classes(jobs, types)
    if not classes:
        return 0.0
    return ClassLP(types, classes, sharing_shares(jobs, types)).solve(_demand_matrix(jobs, of_job, len(classes)))[0]


def _intervals(jobs: Sequence[TraceJob], of_job: Sequence[int], n_classes: int):
    """(start, end, demand matrix) of every interval between trace events with work in it."""
    changes: dict[float, list] = {}
    for job, c in zip(jobs, of_job):
        if c < 0:
            continue
        for at, sign in ((job.submit_s, 1), (job.submit_s + job.duration_s, -1)):
            # Integer milli-vCPUs: no drift over tens of thousands of steps.
            changes.setdefault(at, []).append((c, sign * gpu_demand(job), sign * round(job.vcpus * 1000),
                                               sign * job.memory_mib))
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
    if not intervals:
        return 0.0  # every job the types hold ends as it starts: no work to pay for
    lp = ClassLP(types, classes, sharing_shares(jobs, types))
    # One dual is the aggregate LP's single price per resource: feasible for every type.
    duals = [lp.single_price(resource_prices([(t.capacity, t.price) for t in types], _gpu_total(lp, intervals)))]
    weight = sorted(range(len(intervals)), key=lambda i: -(intervals[i][1] - intervals[i][0]) * _gpus(lp, intervals[i][2]))
    for i in weight[:exact_solves]:
        duals.append(lp.solve(intervals[i][2])[1])
    least = np.array([lp.least_prices(w) for w in duals])  # dual, class, r
    demands = np.array([d for _, _, d in intervals])  # interval, class, r
    values = np.einsum("icr,kcr->ik", demands, least).max(axis=1)
    lengths = np.array([end - start for start, end, _ in intervals])
    return float((values * lengths).sum() / 3600)


def replay_bound_gap(jobs: list[TraceJob], types: list[InstanceType], sample: int = 50, seed: int = 1) -> dict:
    """How the replay bound's per-interval values compare with exact solves on a random sample of
    intervals: the dual bound is never above the exact optimum; the mean and worst shortfall."""
    classes, of_job = job_classes(jobs, types)
    intervals = list(_intervals(jobs, of_job, len(classes)))
    lp = ClassLP(types, classes, sharing_shares(jobs, types))
    chosen = random.Random(seed).sample(range(len(intervals)), min(sample, len(intervals)))
    weight = sorted(range(len(intervals)), key=lambda i: -(intervals[i][1] - intervals[i][0]) * _gpus(lp, intervals[i][2]))
    duals = [lp.single_price(resource_prices([(t.capacity, t.price) for t in types], _gpu_total(lp, intervals)))]
    duals += [lp.solve(intervals[i][2])[1] for i in weight[:REPLAY_EXACT_SOLVES]]
    shortfalls = []
    for i in chosen:
        exact = lp.solve(intervals[i][2])[0]
        bound = max(lp.dual_value(intervals[i][2], w) for w in duals)
        shortfalls.append(0.0 if exact <= 0 else (exact - bound) / exact)
    return {"intervals": len(intervals), "sampled": len(chosen), "mean_shortfall": float(np.mean(shortfalls)),
            "worst_shortfall": float(np.max(shortfalls))}


def _gpus(lp: ClassLP, demand: np.ndarray) -> float:
    """GPUs in a demand matrix, a sharing job counted as its share of the largest GPU that holds it."""
    return float((demand[:, 0] * lp.gpus_per_unit).sum())


def _gpu_total(lp: ClassLP, intervals) -> tuple[float, float, float]:
    """The whole demand in (GPUs, vCPUs, MiB), a sharing job counted as its share of the largest GPU that
    holds it: only which single-price dual to try depends on it, never the bound's validity."""
    if not intervals:
        return 0.0, 0.0, 0.0
    total = np.array([d for _, _, d in intervals]).sum(axis=0)  # class, r
    total[:, 0] *= lp.gpus_per_unit
    return tuple(float(x) for x in total.sum(axis=0))


def snapshot_configuration_bound(jobs: list[TraceJob], types: list[InstanceType],
                                 time_limit_s: float | None = None) -> ConfigurationBound:
    """The configuration LP over kinds (size, and the types the job may use: its GPU model)."""
    if not jobs:
        return ConfigurationBound(0, 0, 0, True)
    eligible = {}
    kinds = []
    for job in jobs:
        kind = ((job.gpus, job.vcpus, job.memory_mib), job.instance_type_pattern, job.gpu_memory_mib)
        if kind not in eligible:
            eligible[kind] = {i for i, t in enumerate(types) if t.holds(job)}
        kinds.append(kind)
    return configuration_bound(kinds, [(t.capacity, t.price) for t in types], eligible=eligible,
                               shape_of=lambda kind: kind[0], gpu_memory_of=lambda kind: kind[2],
                               box_gpu_memory=[t.gpu_memory for t in types], time_limit_s=time_limit_s)
