"""Lower bounds on what any strategy can pay.

`lower_bound_cost_usd` (DESIGN.md): the LP that buys fractional amounts of instance types to cover the
GPU, vCPU and memory demand of the jobs with the instance types each may run on. Jobs of one size that
the same types hold (size, and the GPU model a pattern ties them to) are one kind. Variables x_t
(instances of type t) and n_kt (jobs of kind k on type t), with sum_t n_kt >= the jobs of kind k, and for
each type t and each of its rows q: sum_k a_ktq n_kt <= x_t. Every packing is a solution (n its counts),
so no packing costs less; since the types are shared by all kinds, no instance is counted twice. A job
takes its GPUs, vCPUs and memory from one type: until 2026-11-26 the LP covered each resource of a class
of jobs on its own, so a class's GPUs could come from a type dense in GPUs and its memory from another,
which no packing can do (4.4% below the configuration LP on the synthetic trace, 0.2% now).

A type's rows count each resource under dual-feasible functions f (Fekete and Schepers, "New classes of
fast lower bounds for bin packing problems", Math. Programming 91, 2001): for any jobs that fit one
instance together, the sum of f(a job's GPUs, vCPUs or memory / the instance's) is at most 1, so a_ktq =
f(size of k / capacity of t) is a valid row for every f. The identity is one (the plain covering LP);
Fekete and Schepers' u_k(x) = floor((k + 1) x) / k for k = 1, 2, 3 and their thresholds U^(e) (a share
above 1 - e counts a whole instance, one below e nothing; e among the kinds' own shares,
`dual_feasible_views`) see what pooling misses: two jobs of 60% of an instance's vCPUs never share it,
nor a 3-GPU job a 4-GPU instance with a 2-GPU job. (On the benchmark's traces, whose jobs are mostly
small beside the types that hold them, these rows add under 0.01%.) Each resource is counted on its
own, so the bound stays below the configuration LP's, which knows a job takes all three from one
instance.

Jobs that share a GPU (--share-fractional-gpus) ask for GPU memory on one GPU: their kind also carries the
memory asked. Pooling a type's GPU memory would be weak (a GPU holds one job of 80% of its memory, never
1.25 of them), so the GPUs are also counted per GPU, under the same functions of the job's share of one
GPU's memory (`dual_feasible_views` of the trace's shares): in every such view, the whole-GPU jobs' GPUs
and the sharing jobs' f-values on a type fit its GPUs. Every packing that puts each job on one GPU is a
solution of every row at once, so this sharing-aware bound is valid.

- snapshot: all jobs at once, $/h, solved exactly (scipy, HiGHS).
- replay: each interval between trace events (a job present from its submission to its submission plus
  its duration), the LP's $/h times the interval's length, summed. The intervals are thousands, so each
  is bounded by LP duality instead of solved: the dual of the LP gives each row of each type a price
  (w_tq >= 0 with sum_q w_tq <= price_t), and then sum over kinds of the jobs of kind k times the least
  sum_q a_ktq w_tq over k's types is a lower bound for *any* demand. The duals of exact solves at the
  intervals that weigh most (length times GPUs, REPLAY_EXACT_SOLVES of them) and the single-price dual
  of the aggregate LP are all tried and the best kept per interval: a valid bound everywhere, exact
  where it was solved. `replay_bound_gap` measures how far it is from the exact LP on a sample of the
  other intervals.

The configuration-LP bound (benchmarks/configuration_bound.py) is tighter: it knows which jobs fit one
instance together, not only one type.
"""
from __future__ import annotations

import heapq
import math
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import linprog
from scipy.sparse import coo_matrix

from benchmarks.configuration_bound import ConfigurationBound, configuration_bound, dual_feasible_views
from benchmarks.scheduler.simulate import InstanceType, share_reference_mib
from benchmarks.scheduler.trace import TraceJob
from lambdas.scheduler.planning import resource_prices

REPLAY_EXACT_SOLVES = 150
# Past this many kinds, sizes are rounded down (job_kinds): the LP stays a few seconds per solve.
MAX_KINDS = 600
ROUNDING_STEPS = (0.0, 1 / 64, 1 / 32, 1 / 16, 1 / 8, 1 / 4, 1 / 2)
IDENTITY_ROWS = 3  # each type's first rows: its GPUs, vCPUs and memory under the identity
INTERVAL_CHUNK = 4096  # intervals valued at once in the replay bound (a dense block: intervals x kinds)


@dataclass(frozen=True)
class JobKind:
    """Jobs alike for the bound: their size, the GPU memory each asks if it shares a GPU, and the instance
    types that hold them."""
    gpus: int
    vcpus: float
    memory_mib: float
    gpu_memory: float  # > 0: a job sharing a GPU (it takes no whole GPU)
    types: tuple[int, ...]

    @property
    def shared(self) -> bool:
        return self.gpu_memory > 0


def job_kinds(jobs: Sequence[TraceJob], types: Sequence[InstanceType]) -> tuple[list[JobKind], list[int]]:
    """The kinds and each job's kind index. Jobs no type holds get -1.

    A trace of thousands of distinct sizes would make the LP thousands of columns per type, so past
    MAX_KINDS the sizes are rounded down onto a geometric grid, coarser until the kinds are few enough (or
    the grid is powers of 1.5). Rounding down keeps the bound valid (every packing of the jobs packs their
    rounded-down sizes), and each kind keeps the types that hold its jobs as they are: it only makes the
    bound less tight."""
    for step in ROUNDING_STEPS:
        kinds, of_job = _kinds(jobs, types, step)
        if len(kinds) <= MAX_KINDS:
            break
    return kinds, of_job


def _kinds(jobs: Sequence[TraceJob], types: Sequence[InstanceType], step: float) -> tuple[list[JobKind], list[int]]:
    kinds: dict[JobKind, int] = {}
    of_job = []
    memo: dict[tuple, int] = {}
    for job in jobs:
        key = (job.gpus, job.vcpus, job.memory_mib, job.gpu_memory_mib, job.shares_gpu, job.min_gpu_memory_mib,
               job.instance_type_pattern)
        if key not in memo:
            eligible = tuple(i for i, t in enumerate(types) if t.holds(job))
            kind = JobKind(0 if job.shares_gpu else job.gpus, _round_down(job.vcpus, step),
                           _round_down(job.memory_mib, step), _round_down(job.gpu_memory_mib, step) if job.shares_gpu else 0,
                           eligible)
            memo[key] = kinds.setdefault(kind, len(kinds)) if eligible else -1
        of_job.append(memo[key])
    return sorted(kinds, key=kinds.get), of_job


def _round_down(size: float, step: float) -> float:
    """The largest (1 + step)^i at most `size` (`size` itself for step 0, and for sizes of at most 1)."""
    if step <= 0 or size <= 1:
        return size
    rounded = (1 + step) ** math.floor(math.log(size) / math.log1p(step))
    return min(rounded, size)


def _fraction(size: float, capacity: float) -> float:
    return size / capacity if capacity else 0.0


def type_rows(instance: InstanceType, kinds: Sequence[JobKind], on: Sequence[int], counts: Sequence[float],
              gpu_shares: Counter) -> np.ndarray:
    """a[q, i]: what one job of kind on[i] counts in row q of one instance of this type (each row holds 1).

    Rows 0-2 are the identity's: GPUs (a sharing job its share of one GPU), vCPUs, memory. Then, without
    repeats: the GPUs counted per GPU under each view of the sharing jobs' shares (`gpu_shares`, the
    trace's), and each resource counted per instance under each view of the shares of it these kinds ask
    (weighted by `counts`, the kinds' jobs over the trace: which thresholds to use, never validity)."""
    gpus, vcpus, memory = instance.capacity
    per_gpu = [_fraction(kinds[k].gpu_memory, instance.gpu_memory) for k in on]
    whole = np.array([kinds[k].gpus for k in on], dtype=float)
    sizes = np.array([[kinds[k].gpus, kinds[k].vcpus, kinds[k].memory_mib] for k in on], dtype=float)
    fractions = sizes / np.where(np.array([gpus, vcpus, memory], dtype=float) > 0, (gpus, vcpus, memory), np.inf)
    rows = [np.array([_fraction(w + s, gpus) for w, s in zip(whole, per_gpu)]), fractions[:, 1], fractions[:, 2]]
    if any(kinds[k].shared for k in on):
        for view in dual_feasible_views(gpu_shares)[1:]:
            rows.append(np.array([_fraction(w + (view(s) if s else 0.0), gpus) for w, s in zip(whole, per_gpu)]))
    for r in range(3):
        shares = Counter()
        for i, x in enumerate(fractions[:, r]):
            shares[float(x)] += counts[on[i]]
        for view in dual_feasible_views(shares)[1:]:
            rows.append(np.array([view(float(x)) for x in fractions[:, r]]))
    kept, seen = rows[:IDENTITY_ROWS], {row.round(12).tobytes() for row in rows[:IDENTITY_ROWS]}
    for row in rows[IDENTITY_ROWS:]:  # the identity's rows stay where `single_price` prices them
        key = row.round(12).tobytes()
        if row.any() and key not in seen:
            seen.add(key)
            kept.append(row)
    return np.array(kept)


class KindLP:
    """The covering LP over fixed types and kinds; the demand (jobs of each kind) changes between solves.

    Dual prices are one array per type, w[t][q] >= 0 for each of its rows, with sum_q w[t][q] <= price_t.
    """

    def __init__(self, types: Sequence[InstanceType], kinds: Sequence[JobKind], counts: Sequence[float],
                 gpu_shares: Counter):
        self.types, self.kinds = types, kinds
        self.price = np.array([t.price for t in types], dtype=float)
        self.on = [[k for k, kind in enumerate(kinds) if t in kind.types] for t in range(len(types))]
        self.rows = [type_rows(types[t], kinds, on, counts, gpu_shares) if on else np.zeros((IDENTITY_ROWS, 0))
                     for t, on in enumerate(self.on)]
        self.column = [{k: i for i, k in enumerate(on)} for on in self.on]  # kind -> its column in rows[t]
        # GPUs one job of a kind is, roughly (for ordering and the single-price dual only): a sharing job its
        # share of the largest GPU that holds it.
        self.gpus = np.array([min(_fraction(kind.gpu_memory, types[t].gpu_memory) for t in kind.types)
                              if kind.shared else kind.gpus for kind in kinds])

    def least_prices(self, w: Sequence[np.ndarray]) -> np.ndarray:
        """Each kind's least price per job under type prices w: the dual value of one job of it."""
        per_type = [w[t] @ self.rows[t] for t in range(len(self.types))]
        return np.array([min(per_type[t][self.column[t][k]] for t in kind.types) for k, kind in enumerate(self.kinds)])

    def dual_value(self, demand: np.ndarray, w: Sequence[np.ndarray]) -> float:
        """The lower bound the dual prices w give for demand[k] jobs of each kind (weak duality)."""
        return float(demand @ self.least_prices(w))

    def single_price(self, prices: Sequence[float]) -> list[np.ndarray]:
        """Type prices from one price per GPU, vCPU and MiB on the identity rows: feasible for every type,
        since `resource_prices` prices no type above its cost."""
        duals = []
        for t, rows in zip(self.types, self.rows):
            w = np.zeros(len(rows))
            w[:IDENTITY_ROWS] = np.multiply(prices, t.capacity)
            duals.append(w)
        return duals

    def solve(self, demand: np.ndarray) -> tuple[float, list[np.ndarray]]:
        """The LP's optimum for demand[k] jobs of each kind, and its dual prices."""
        n_types = len(self.types)
        active = {k for k in range(len(self.kinds)) if demand[k] > 0}
        if not active:
            return 0.0, [np.zeros(len(rows)) for rows in self.rows]
        n = {}  # (kind, type) -> column
        for k in sorted(active):
            for t in self.kinds[k].types:
                n[k, t] = n_types + len(n)
        rows, cols, values, bounds = [], [], [], []
        for row, k in enumerate(sorted(active)):  # cover: -sum_t n_kt <= -demand_k
            for t in self.kinds[k].types:
                rows.append(row), cols.append(n[k, t]), values.append(-1.0)
            bounds.append(-float(demand[k]))
        first_type_row = row = len(bounds)
        for t in range(n_types):  # sum_k a_ktq n_kt - x_t <= 0 for each row q of t
            for a in self.rows[t]:
                for i, k in enumerate(self.on[t]):
                    if k in active and a[i]:
                        rows.append(row), cols.append(n[k, t]), values.append(float(a[i]))
                rows.append(row), cols.append(t), values.append(-1.0)
                bounds.append(0.0)
                row += 1
        cost = np.zeros(n_types + len(n))
        cost[:n_types] = self.price
        matrix = coo_matrix((values, (rows, cols)), shape=(row, n_types + len(n))).tocsr()
        result = linprog(cost, A_ub=matrix, b_ub=np.array(bounds), bounds=(0, None), method="highs")
        if result.status != 0:
            raise RuntimeError(f"bound LP failed: {result.message}")
        marginals = np.maximum(-np.asarray(result.ineqlin.marginals[first_type_row:]), 0.0)
        ends = np.cumsum([len(rows) for rows in self.rows])
        return float(result.fun), np.split(marginals, ends[:-1])


def _counts(of_job: Sequence[int], n_kinds: int) -> np.ndarray:
    demand = np.zeros(n_kinds)
    for k in of_job:
        if k >= 0:
            demand[k] += 1
    return demand


def sharing_shares(jobs: Sequence[TraceJob], types: Sequence[InstanceType]) -> Counter:
    """{a sharing job's share of the smallest GPU that can share: how many such jobs}, what
    `dual_feasible_views` chooses the per-GPU thresholds from."""
    reference = share_reference_mib(types)
    return Counter(job.gpu_memory_mib / reference for job in jobs if job.shares_gpu and reference)


def _lp(jobs: Sequence[TraceJob], types: Sequence[InstanceType]) -> tuple[KindLP | None, list[int]]:
    kinds, of_job = job_kinds(jobs, types)
    if not kinds:
        return None, of_job
    return KindLP(types, kinds, _counts(of_job, len(kinds)), sharing_shares(jobs, types)), of_job


def aggregate_bound(jobs: list[TraceJob], types: list[InstanceType]) -> float:
    lp, of_job = _lp(jobs, types)
    return lp.solve(_counts(of_job, len(lp.kinds)))[0] if lp else 0.0


def _intervals(jobs: Sequence[TraceJob], of_job: Sequence[int], n_kinds: int):
    """(start, end, jobs of each kind) of every interval between trace events with work in it. The
    intervals are as many as twice the jobs, each a vector over the kinds: they are scanned, not kept."""
    changes: dict[float, list] = {}
    for job, k in zip(jobs, of_job):
        if k >= 0:
            changes.setdefault(job.submit_s, []).append((k, 1))
            changes.setdefault(job.submit_s + job.duration_s, []).append((k, -1))
    level = np.zeros(n_kinds, dtype=np.int64)
    previous = None
    for at in sorted(changes):
        if previous is not None and level.any():
            yield previous, at, level.astype(float)
        for k, sign in changes[at]:
            level[k] += sign
        previous = at


def _duals(lp: KindLP, intervals, exact_solves: int) -> list[list[np.ndarray]]:
    """The aggregate LP's single price per resource, and the duals of exact solves at the intervals that
    weigh most (length times GPUs), from one scan of `intervals`; [] when none has work."""
    heaviest: list[tuple[float, int, np.ndarray]] = []  # a min-heap of the exact_solves heaviest
    total = None
    for n, (start, end, demand) in enumerate(intervals):
        total = demand.copy() if total is None else total + demand
        entry = ((end - start) * float(demand @ lp.gpus), -n, demand)
        if len(heaviest) < exact_solves:
            heapq.heappush(heaviest, entry)
        elif entry[:2] > heaviest[0][:2]:
            heapq.heapreplace(heaviest, entry)
    if total is None:
        return []
    sizes = np.array([(g, kind.vcpus, kind.memory_mib) for g, kind in zip(lp.gpus, lp.kinds)])
    # The demand summed over the intervals in (GPUs, vCPUs, MiB), a sharing job counted as its share of the
    # largest GPU that holds it: only which single-price dual to try depends on it, never validity.
    single = lp.single_price(resource_prices([(t.capacity, t.price) for t in lp.types],
                                             tuple(float(x) for x in total @ sizes)))
    return [single] + [lp.solve(demand)[1] for *_, demand in sorted(heaviest, reverse=True)]


def replay_bound(jobs: list[TraceJob], types: list[InstanceType], exact_solves: int = REPLAY_EXACT_SOLVES) -> float:
    lp, of_job = _lp(jobs, types)
    if not lp:
        return 0.0
    duals = _duals(lp, _intervals(jobs, of_job, len(lp.kinds)), exact_solves)
    if not duals:
        return 0.0  # every job the types hold ends as it starts: no work to pay for
    least = np.array([lp.least_prices(w) for w in duals])  # dual, kind
    total, chunk, lengths = 0.0, [], []
    for start, end, demand in _intervals(jobs, of_job, len(lp.kinds)):
        chunk.append(demand)
        lengths.append(end - start)
        if len(chunk) == INTERVAL_CHUNK:
            total += _best_values(least, chunk, lengths)
            chunk, lengths = [], []
    return (total + (_best_values(least, chunk, lengths) if chunk else 0.0)) / 3600


def _best_values(least: np.ndarray, demands: list, lengths: list) -> float:
    """Sum over intervals of the best dual's value times the interval's length."""
    return float(((np.array(demands) @ least.T).max(axis=1) * np.array(lengths)).sum())


def replay_bound_gap(jobs: list[TraceJob], types: list[InstanceType], sample: int = 50, seed: int = 1) -> dict:
    """How the replay bound's per-interval values compare with exact solves on a random sample of
    intervals: the dual bound is never above the exact optimum; the mean and worst shortfall."""
    lp, of_job = _lp(jobs, types)
    intervals = list(_intervals(jobs, of_job, len(lp.kinds)))
    chosen = random.Random(seed).sample(range(len(intervals)), min(sample, len(intervals)))
    duals = _duals(lp, intervals, REPLAY_EXACT_SOLVES)
    shortfalls = []
    for i in chosen:
        exact = lp.solve(intervals[i][2])[0]
        bound = max(lp.dual_value(intervals[i][2], w) for w in duals)
        shortfalls.append(0.0 if exact <= 0 else (exact - bound) / exact)
    return {"intervals": len(intervals), "sampled": len(chosen), "mean_shortfall": float(np.mean(shortfalls)),
            "worst_shortfall": float(np.max(shortfalls))}


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
