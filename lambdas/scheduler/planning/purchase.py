"""Stage 3, purchase: boxes to buy for the jobs nothing else holds, within the fleets' caps and the dollar cap.

Each fleet is an option (fleets.py). Two purchase plans are made and the better kept (more jobs served
within the caps, then the lower $/h):

- greedy: resource prices come from the linear program "cover the demand with fractional boxes at
  least cost" (its dual: dollars per GPU, vCPU and MiB); best fit in decreasing order with boxes opened
  on demand, each new box of the fleet whose box, filled with this job and the jobs still to come worth
  most beside it (a knapsack), holds the most demand-value per dollar, and filled so at once;
- cover: the configuration LP solved by column generation (`columns.cheapest_cover`), rounded down to
  whole boxes, the few jobs left covered again (RESIDUAL_SHARE) and what is still left packed by the
  greedy; past COVER_MAX_KINDS kinds, in parts. Near-optimal (0.1% above the LP bound on the
  shared trace, where the greedy alone is 1.3% above it, and was 4.2% when it filled boxes first fit),
  within a CPU budget that grows with what the greedy plan costs (`cover_budget`).

Jobs that share a GPU (ECS `nvidiaMps`) are bought for as whole-GPU bundles (`bundle_shared`): packed
largest GPU memory first into GPUs of the smallest shareable memory among the fleets able to run them, so that a bundle fits one GPU of whichever of those fleets is bought, and both plans above
handle it as a one-GPU job (the cover within 5.5% of the sharing-aware assignment bound on the shared
trace: docs/scheduler-benchmark.md). The bundles' jobs are what the scale-outs and waiting reasons name.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cached_property

from .columns import Pattern, best_pattern, cheapest_cover, gauss_jordan_pivot, whole_units
from .constraints import Patterns, constraint_key, demand_of, planning_order
from .fleets import Option, box_machine, may_run
from .model import NO_FLEET, SCALING_PAUSED, JobRequest, Limits, Resources, ScaleOut
from .packer import Packer

# The cover's CPU budget grows with what the purchase costs: at least COVER_CPU_SECONDS, one more CPU
# second per COVER_USD_PER_HOUR_PER_SECOND of the greedy plan's $/h, at most COVER_MAX_CPU_SECONDS (and
# never past what the caller has left: the scheduler Lambda's remaining time, `purchase(cpu_seconds=)`).
# A cover stopped early pays for it every hour its boxes run, and the CPU is cheap beside that: on a burst
# of 17,065 jobs of 288 kinds (greedy $7,898/h) 30 s instead of 5 bought $91.08/h less (1.2%), for
# under $0.001 of Lambda time; 0.6% on three more bursts of that size (docs/scheduler-benchmark.md,
# "Plan CPU"). The shared trace (87 kinds, 7,064 jobs) converges in about 1.6 s, within the least.
COVER_CPU_SECONDS = 5.0
COVER_USD_PER_HOUR_PER_SECOND = 250.0
COVER_MAX_CPU_SECONDS = 30.0
# The share of the cover's budget kept for covering again the jobs its rounding down left, when it stopped
# on its budget (what the first cover does not use is the second's too). Rounded down, a burst of 17,065
# jobs of 288 kinds left about 350 jobs for the greedy; covering them again took the plan from $7,534.01/h
# (one cover of 30 s) to $7,511.97/h (27 s, then 3 s), and on another burst of that kind from $6,418.53
# to $6,369.64/h (docs/scheduler-benchmark.md, "Plan CPU"). A converged cover's leftovers are few: the
# replays do not move.
RESIDUAL_SHARE = 0.1
# The most kinds one cover takes on (its master LP has a row per kind). Past it the jobs are bought for in
# parts of at most PART_KINDS kinds, the kinds dealt out in turn in planning order (each part spans the
# sizes), each part with its cover and its share of the budget, within the caps the parts before it left.
# 20,000 jobs of random sizes (19,845 kinds), which the greedy alone bought for at 1.036 x the type-aware
# bound, cost 1.009 x in 40 parts (docs/scheduler-benchmark.md, "Plan CPU"): a cover of few jobs a
# kind converges fast, and what parts lose by not sharing boxes is little beside what the cover gains.
COVER_MAX_KINDS = 1000
PART_KINDS = 500
# Runtime classes bought apart: under an hour, then up to 4 h, 16 h, 64 h, and longer.
RUNTIME_CLASS_EDGES_S = (3600.0, 4 * 3600.0, 16 * 3600.0, 64 * 3600.0)
# Jobs expected to run this class or longer (64 h and more) get hosts: the type whose box, full of jobs
# like this one, costs least per job, rather than the cheapest box for the job alone. They live for
# days, so the long jobs that arrive meanwhile fill the rest on the live stage (no extension: the host
# outlives them), and short jobs use the room left for free: 4.9% less on the shared trace than
# right-sizing each long job (docs/scheduler-benchmark.md, "Hosts"). Also where spot instances are reclaimed
# well within those 64 hours: a reclaimed host's long jobs come back together and are bought a host
# again; at 0.05 interruptions per instance-hour (a life of 20 hours) hosts cost less per completed
# GPU-hour in 27 of 39 replays (docs/scheduler-benchmark.md, "Hosts under interruptions"). Not for jobs
# the lifecycle stage sent on-demand (purchase()).
HOST_CLASS = 4
# A host is valued as if at most this many jobs like the one it is bought for will share it (or as many as
# the purchase has of them, if more): the jobs still to come are a bet. On the shared trace a g4dn.metal
# (8 T4s, $2.96/h) was bought for a week-long one-GPU pod whose own g4dn.8xlarge costs $0.69, valued full
# of five such pods that never came; capped at four it is a g4dn.12xlarge ($1.32, two of them). Cheaper
# on 7 of 8 seeds of the shared trace (up to 4.9%), within 0.2% on the other traces
# (docs/scheduler-benchmark.md, "Hosts of at most four").
HOST_MAX_JOBS = 4
# Branch-and-bound nodes for one new box's fill: boxes hold a few jobs and the kinds come best first, so
# more nodes buy little (on a burst of 288 kinds, 3,000 nodes bought 0.6% less for 1.8 times the CPU;
# 100 to 1,000 were within 0.1%: docs/scheduler-benchmark.md, "Plan CPU").
FILL_NODES = 300
# The most kinds one fill's knapsack looks at whole; past it, FILL_SAMPLE of them spread over the kinds
# still to plan (in planning order, so over their sizes). Bounds what a new box costs where nearly every
# job is its own kind: on 20,000 jobs of random sizes, the greedy purchase took 596 s of CPU with every
# kind in each fill, 31 s with samples of 300 and 9.3 s with 64, buying 0.3% and 0.2% more
# (docs/scheduler-benchmark.md, "Plan CPU").
FILL_KINDS, FILL_SAMPLE = 300, 64


def resource_prices(boxes: Sequence[tuple[Resources, float]], demand: Sequence[float]) -> tuple[float, float, float]:
    """Dollars per GPU, per vCPU and per MiB that price every box at no more than its cost and value
    `demand` highest: the dual of "cover `demand` with fractional boxes at least cost".

    A three-variable LP (maximise demand.y subject to capacity.y <= price, y >= 0), solved with a small
    dense simplex from the origin (feasible since prices are positive), Bland's rule against cycling.
    By LP duality demand.y is also the least a fractional packing of `demand` can cost.
    """
    rows = [(list(map(float, capacity)), max(float(price), 1e-9)) for capacity, price in boxes]
    if not rows or not any(demand):
        return 0.0, 0.0, 0.0
    # Scale columns so that the tableau is well conditioned (MiB are thousands of times vCPUs).
    scale = [max(row[0][i] for row in rows) or 1.0 for i in range(3)]
    n = len(rows)
    width = 3 + n
    tableau = [[row[0][i] / scale[i] for i in range(3)] + [1.0 if k == r else 0.0 for k in range(n)] + [row[1]]
               for r, row in enumerate(rows)]
    objective = [-demand[i] / scale[i] for i in range(3)] + [0.0] * n + [0.0]
    basis = [3 + r for r in range(n)]
    epsilon = 1e-12
    for _ in range(50 * (n + 3)):
        entering = next((c for c in range(width) if objective[c] < -epsilon), None)
        if entering is None:
            break
        ratios = [(tableau[r][-1] / tableau[r][entering], basis[r], r)
                  for r in range(n) if tableau[r][entering] > epsilon]
        if not ratios:
            break  # unbounded cannot happen: every box has positive capacity
        _, _, pivot = min(ratios)
        gauss_jordan_pivot(tableau, pivot, entering)
        f = objective[entering]
        objective = [a - f * b for a, b in zip(objective, tableau[pivot])]
        basis[pivot] = entering
    y = [0.0, 0.0, 0.0]
    for r, column in enumerate(basis):
        if column < 3:
            y[column] = tableau[r][-1] / scale[column]
    return y[0], y[1], y[2]


@dataclass
class _Kind:
    """Jobs alike for buying: same size and same fleets able to run them."""
    need: Resources
    options: frozenset[int]
    left: int = 0  # jobs of the kind not planned yet
    value: float = 0.0  # the need at the LP's resource prices

    @cached_property
    def units(self) -> tuple[int, int, int]:  # the need in whole units, for the fill's knapsack
        return whole_units(self.need, True)


def _worth(prices: Sequence[float], amounts: Sequence[float]) -> float:
    """Resources at the LP's prices, with a tiny size term: resources the LP prices at zero still count
    when filling (a fill that uses them beats one that does not)."""
    return sum(p * n for p, n in zip(prices, amounts)) + 1e-9 * (amounts[0] + amounts[1] / 8 + amounts[2] / 65536)


def _host_rank(option: Option, need: Resources, jobs: int) -> tuple:
    """How hosts are chosen, best first: the jobs like the first a box holds per dollar, counting at most
    HOST_MAX_JOBS of them (those still to come are a bet) or the `jobs` the purchase has, if more (no bet)."""
    copies = min(_copies(have, n) for have, n in zip(option.capacity, need) if n)
    return (-min(copies, max(HOST_MAX_JOBS, jobs)) / max(option.price, 1e-9), option.price, option.fleet.region,
            option.fleet.fleet)


def host_hourly(job: JobRequest, options: Sequence[Option], patterns: Patterns) -> float | None:
    """$/h of the host the purchase would buy for this job alone, if it buys hosts for it (a runtime belief
    of HOST_CLASS or longer); None otherwise, or where no fleet holds it."""
    if runtime_class(job) < HOST_CLASS:
        return None
    # What the purchase buys for: a job sharing a GPU as its one-GPU bundle, any other job as it is.
    bought = bundle_shared([job], options, patterns)[0][0]
    able = [o for o in options if o.holds(bought) and may_run(bought, o, patterns)]
    return min(able, key=lambda o: _host_rank(o, demand_of(bought), 1)).price if able else None


def _copies(have: float, need: float) -> int:
    """How many `need` fit in `have`, exactly (a float quotient may round up past the capacity)."""
    count = int(have // need)
    while count > 0 and count * need > have:
        count -= 1
    while (count + 1) * need <= have:
        count += 1
    return count


def _fill(capacity: tuple[int, int, int], first: _Kind, kinds: Sequence[_Kind], floor: float
          ) -> tuple[float, dict[int, int]] | None:
    """The jobs still to plan that a new box would hold with the job that opens it, worth most at the
    LP's resource prices: a knapsack over the kinds (columns.best_pattern, at most FILL_NODES nodes).
    (value, {id(kind): count}); None when no fill is worth more than `floor`.

    A box filled to its most valuable (its vCPUs used to the last one, where vCPUs are what runs out)
    rather than first-fit in size order: on a burst of 288 kinds of one-GPU jobs with 4 to 24 vCPUs,
    first fit left a quarter of the g4dn.12xlarge GPUs idle beside used-up vCPUs (docs/scheduler-benchmark.md).
    """
    free = (capacity[0] - first.units[0], capacity[1] - first.units[1], capacity[2] - first.units[2])
    counts: dict[int, int] = {}
    if min(free) >= 0:  # (whole units round a job's need up: one that fits to the last byte fills nothing)
        demand = [k.left - (k is first) for k in kinds]
        value, counts, _ = best_pattern(free, range(len(kinds)), [k.units for k in kinds], demand,
                                        [k.value for k in kinds], FILL_NODES, floor=floor - first.value)
    if not counts:  # the opening job alone
        return (first.value, {id(first): 1}) if first.value > floor else None
    fill = {id(first): 1}
    for i, count in counts.items():
        fill[id(kinds[i])] = fill.get(id(kinds[i]), 0) + count
    return first.value + value, fill


class _LiveKinds:
    """The kinds one option may hold that still have jobs to plan, in planning order: what its new
    boxes' fills choose from. Kinds planned out are dropped once they are half the list (amortised)."""

    def __init__(self, kinds: Sequence[_Kind]):
        self.kinds = list(kinds)
        self.spent = 0

    def sample(self, first: _Kind) -> list[_Kind]:
        if 2 * self.spent > len(self.kinds):
            self.kinds, self.spent = [k for k in self.kinds if k.left > 0], 0
        if len(self.kinds) <= FILL_KINDS:
            return self.kinds
        step = len(self.kinds) / FILL_SAMPLE
        chosen = [self.kinds[int(n * step)] for n in range(FILL_SAMPLE)]
        return chosen if any(k is first for k in chosen) else [first, *chosen]


def _kinds(jobs: Sequence[JobRequest], options: Sequence[Option], patterns: Patterns) -> tuple[list[_Kind], dict]:
    """Jobs grouped by size and the options able to run them, in first-appearance (planning) order."""
    kinds: dict[tuple, _Kind] = {}
    kind_of: dict[str, _Kind] = {}
    for job in jobs:
        eligible = frozenset(i for i, o in enumerate(options) if may_run(job, o, patterns) and o.holds(job))
        kind = kinds.setdefault((demand_of(job), eligible), _Kind(demand_of(job), eligible))
        kind.left += 1
        kind_of[job.job_id] = kind
    return list(kinds.values()), kind_of


@dataclass
class _Bought:
    boxes: dict[int, list[list[str]]]  # option -> the job ids of each box bought
    waiting: list[tuple[str, str]]  # jobs not served, with the reason
    cost: float


class _Purchase:
    """Stage 3: boxes to buy for the jobs nothing else holds, within each fleet's cap and the dollar cap.

    Decreasing order with boxes opened on demand: a job goes to the fullest box opened so far that fits;
    when none does, it opens a box of the fleet whose box, filled with this job and the jobs still to
    come that are worth most in it (`_fill`), holds the most value per dollar, and the box gets that fill
    at once. Value is the job's resources at the prices of the LP that covers all of them at least cost,
    so boxes that fill well at those prices are what gets bought. Big jobs come first and open the boxes;
    small ones fill the gaps. Seed boxes (the rounded cover), when given, are bought first with their
    jobs, and their spare room is filled like any box's.
    """

    def __init__(self, options: Sequence[Option], catalog, patterns: Patterns, limits: Limits, host: bool = False):
        self.host = host  # buying hosts for long runs (HOST_CLASS): boxes valued full, not as filled now
        self.options = options
        self.catalog = catalog
        self.patterns = patterns
        self.limits = limits
        self.budget = limits.max_hourly_usd - limits.current_hourly_usd
        self.room = [o.room for o in options]
        self.units = [whole_units(o.capacity, False) for o in options]
        self.ceiling = [0.0] * len(options)  # a full box's worth per dollar (set by run, at its prices)
        self.live: list[_LiveKinds] = []  # per option, the kinds its new boxes' fills choose from (set by run)
        self.index_of = {(o.fleet.region, o.fleet.fleet): i for i, o in enumerate(options)}
        self.boxes = Packer([], catalog, lambda job, group: may_run(
            job, options[self.index_of[(group.region, group.fleet)]], patterns))
        self.contents: dict[str, tuple[int, list[str]]] = {}  # box key -> (option, job ids)
        self.cost = 0.0

    def affordable(self, i: int) -> bool:
        return self.room[i] > 0 and self.options[i].price <= self.budget + 1e-9

    def _open(self, i: int) -> str:
        option = self.options[i]
        key = f"new:{option.fleet.asg_name}:{len(self.contents)}"
        self.boxes.add(box_machine(self.catalog, option, key))
        self.contents[key] = (i, [])
        self.room[i] -= 1
        self.budget -= option.price
        self.cost += option.price
        return key

    def run(self, jobs: Sequence[JobRequest], seeds: Sequence[tuple[int, Sequence[JobRequest]]],
            scaling_allowed: bool) -> _Bought:
        options = self.options
        seeded: set[str] = set()
        for i, seed_jobs in seeds:
            if not self.affordable(i):
                continue
            key = self._open(i)
            for job in seed_jobs:
                if self.boxes.place_on(job, key):
                    self.contents[key][1].append(job.job_id)
                    seeded.add(job.job_id)
        rest = [job for job in jobs if job.job_id not in seeded]
        kinds, kind_of = _kinds(rest, options, self.patterns)
        demand = [sum(k.need[i] * k.left for k in kinds if k.options) for i in range(3)]
        prices = resource_prices([(o.capacity, o.price) for i, o in enumerate(options) if self.affordable(i)], demand)
        for kind in kinds:
            kind.value = _worth(prices, kind.need)
        self.live = [_LiveKinds([k for k in kinds if i in k.options]) for i in range(len(options))]
        # What a box of each option is worth full at those prices, per dollar: no fill is worth more, so
        # options are tried best first and the search stops at one that cannot beat the best fill found.
        self.ceiling = [_worth(prices, o.capacity) / max(o.price, 1e-9) for o in options]
        by_id = {id(k): k for k in kinds}
        queues: dict[int, deque[JobRequest]] = {}  # kind -> its jobs not planned yet, in planning order
        for job in rest:
            queues.setdefault(id(kind_of[job.job_id]), deque()).append(job)
        chosen: dict[int, tuple[int, dict[int, int]]] = {}  # kind -> (option, the fill it was chosen for)
        waiting: list[tuple[str, str]] = []

        for job in rest:
            kind = kind_of[job.job_id]
            queue = queues[id(kind)]
            if not queue or queue[0] is not job:
                continue  # planned already, in the fill of a box opened for an earlier job
            queue.popleft()
            if not kind.options:
                kind.left -= 1
                waiting.append((job.job_id, NO_FLEET))
                continue
            box = self.boxes.place(job)
            if box is None and scaling_allowed:
                choice = chosen.get(id(kind))
                # Reuse the kind's last choice while the jobs its fill counted on are still to come.
                if choice is None or not self.affordable(choice[0]) or any(
                        by_id[k].left < count for k, count in choice[1].items()):
                    choice = self._choose(kind)
                    if choice is not None:
                        chosen[id(kind)] = choice
                if choice is not None:
                    key = self._open(choice[0])
                    box = self.boxes.machine(key) if self.boxes.place_on(job, key) else None
                    if box is not None:
                        # The box gets the fill it was chosen for, now: left to the best fit of later
                        # jobs, the fill's jobs went elsewhere and the box stayed part empty.
                        self._fill_box(key, kind, choice[1], by_id, queues)
            self._planned(kind)
            if box is None:
                waiting.append((job.job_id, SCALING_PAUSED if not scaling_allowed else self._why_not(kind)))
            else:
                self.contents[box.key][1].append(job.job_id)

        bought: dict[int, list[list[str]]] = {}
        for i, job_ids in self.contents.values():
            bought.setdefault(i, []).append(job_ids)
        return _Bought(bought, waiting, round(self.cost, 6))

    def _fill_box(self, key: str, opener: _Kind, fill: Mapping[int, int], by_id: Mapping[int, _Kind],
                  queues: Mapping[int, deque[JobRequest]]) -> None:
        """Place the fill's jobs (beyond the one that opened the box) on the new box, the next of each kind."""
        for k, count in fill.items():
            queue = queues.get(k)
            for _ in range(count - (k == id(opener))):
                if not queue or not self.boxes.place_on(queue[0], key):
                    break
                job = queue.popleft()
                self._planned(by_id[k])
                self.contents[key][1].append(job.job_id)

    def _planned(self, kind: _Kind) -> None:
        kind.left -= 1
        if kind.left == 0:
            for i in kind.options:
                self.live[i].spent += 1

    def _choose(self, kind: _Kind) -> tuple[int, dict[int, int]] | None:
        """The option whose new box, filled, is worth most per dollar, with that fill."""
        best = None
        if self.host:  # valued full of jobs like this one: later long jobs fill it on the live stage
            for i in sorted(kind.options):
                if not self.affordable(i):
                    continue
                key = _host_rank(self.options[i], kind.need, kind.left)
                if best is None or key < best[0]:
                    best = (key, i, {id(kind): 1})
            return (best[1], best[2]) if best else None
        order = sorted((i for i in kind.options if self.affordable(i)), key=lambda i: (
            -self.ceiling[i], self.options[i].price, self.options[i].fleet.region, self.options[i].fleet.fleet))
        ratio = 0.0
        for i in order:
            price = max(self.options[i].price, 1e-9)
            if best is not None and self.ceiling[i] <= ratio:
                break  # no fill of this option or the next can beat the best found
            found = _fill(self.units[i], kind, self.live[i].sample(kind), ratio * price)
            if found is not None and (best is None or found[0] / price > ratio):
                ratio, best = found[0] / price, (i, found[1])
        return best

    def _why_not(self, kind: _Kind) -> str:
        if any(self.room[i] > 0 for i in kind.options):
            spent = self.limits.max_hourly_usd - self.budget
            return (f"buying another instance would pass the cap of ${self.limits.max_hourly_usd:g}/h "
                    f"(now ${spent:.2f}/h)")
        fleet = self.options[min(kind.options)].fleet
        if fleet.scaling_stopped:
            return (f"fleet {fleet.fleet} in {fleet.region} buys nothing while its circuit breaker is open (launches "
                    "failed, or its machines came up degraded: the alert says which); it closes by itself")
        return f"fleet {fleet.fleet} in {fleet.region} at its cap of {fleet.max_instances} instances"


def cover_budget(stake_usd_per_hour: float, left_s: float = float("inf"), parts: int = 1) -> float:
    """CPU seconds for the cover of a purchase the greedy plan prices at `stake_usd_per_hour`, or for one
    of the `parts` it is bought in (they share the budget), within `left_s` (what the caller has left for
    every cover of its plan)."""
    wanted = min(COVER_MAX_CPU_SECONDS, max(COVER_CPU_SECONDS, stake_usd_per_hour / COVER_USD_PER_HOUR_PER_SECOND))
    return max(0.0, min(wanted / parts, left_s))


def _cover_seeds(jobs: Sequence[JobRequest], options: Sequence[Option], patterns: Patterns,
                 limits: Limits, greedy: _Bought | None = None, cpu_seconds: float = COVER_CPU_SECONDS,
                 ) -> tuple[list[tuple[int, list[JobRequest]]], bool]:
    """The rounded-down configuration-LP cover of `jobs`, as boxes with their jobs (empty when the kinds
    are too many, or there is no CPU time for it), and whether its LP converged. Options the caps already
    rule out are left out of the LP. The greedy plan's boxes start the master, so the column generation
    begins at the greedy's cost."""
    kinds, kind_of = _kinds(jobs, options, patterns)
    if len(kinds) > COVER_MAX_KINDS or len(jobs) < 2 or cpu_seconds <= 0:
        return [], False
    budget = limits.max_hourly_usd - limits.current_hourly_usd
    usable = {i for i, o in enumerate(options) if o.room > 0 and o.price <= budget + 1e-9}
    position = {id(k): n for n, k in enumerate(kinds)}
    start = []
    for option, boxes in (greedy.boxes.items() if greedy else ()):
        for box in boxes:
            counts: dict[int, int] = {}
            for job_id in box:
                if job_id in kind_of:
                    counts[position[id(kind_of[job_id])]] = counts.get(position[id(kind_of[job_id])], 0) + 1
            start.append(Pattern(option, tuple(sorted(counts.items()))))
    cover = cheapest_cover([k.need for k in kinds], [k.left for k in kinds],
                           [sorted(k.options & usable) for k in kinds], [(o.capacity, o.price) for o in options],
                           cpu_seconds=cpu_seconds, start=start)
    queues: dict[int, list[JobRequest]] = {}
    for job in jobs:
        queues.setdefault(position[id(kind_of[job.job_id])], []).append(job)
    seeds = []
    for pattern, count in cover.boxes:
        for _ in range(count):
            box_jobs = []
            for k, n in pattern.counts:
                taken, queues[k] = queues.get(k, [])[:n], queues.get(k, [])[n:]
                box_jobs += taken
            if box_jobs:
                seeds.append((pattern.option, box_jobs))
    return seeds, cover.converged


def _purchase_once(jobs: Sequence[JobRequest], options: Sequence[Option], catalog, patterns: Patterns,
                   limits: Limits, hosts: bool = True, deadline: float = float("inf"), parts: int = 1) -> _Bought:
    """The better of the greedy plan and the cover-seeded one for these jobs (hosts for long runs); the
    cover stops by `deadline` (process CPU time). `parts`: these jobs are one of that many parts of a
    burst (`_parts`), whose cost, about `parts` times this one's, sets the budget they share."""
    if hosts and jobs and runtime_class(jobs[0]) >= HOST_CLASS:
        return _Purchase(options, catalog, patterns, limits, host=True).run(jobs, (), limits.scaling_allowed)
    best = _Purchase(options, catalog, patterns, limits).run(jobs, (), limits.scaling_allowed)
    if limits.scaling_allowed:
        budget = cover_budget(best.cost * parts, deadline - time.process_time(), parts)
        stop = time.process_time() + budget
        seeds, converged = _cover_seeds(jobs, options, patterns, limits, best, budget * (1 - RESIDUAL_SHARE))
        if seeds:
            covered = _Purchase(options, catalog, patterns, limits).run(jobs, seeds, True)
            # The jobs the rounding down of a cover stopped on its budget left, covered again (a small LP
            # over what is left) rather than packed by the greedy alone; kept only if the plan costs less.
            # After a converged cover it bought the same on the benchmark's plans, for 0.1-0.2 s of CPU.
            seeded = {job.job_id for _, box in seeds for job in box}
            left = [job for job in jobs if job.job_id not in seeded]
            if left and not converged:
                rest = _Purchase(options, catalog, patterns, limits).run(left, (), True)
                more, _ = _cover_seeds(left, options, patterns, limits, rest, stop - time.process_time())
                if more:
                    again = _Purchase(options, catalog, patterns, limits).run(jobs, [*seeds, *more], True)
                    covered = min(covered, again, key=_served_then_cost)
            best = min(best, covered, key=_served_then_cost)
    return best


def _served_then_cost(plan: _Bought) -> tuple[int, float]:
    """What a purchase plan is judged by: fewer jobs left waiting, then fewer dollars an hour (the first
    of equals kept)."""
    return len(plan.waiting), plan.cost


def _parts(jobs: Sequence[JobRequest], options: Sequence[Option], patterns: Patterns) -> list[list[JobRequest]]:
    """The jobs as one part, or, past the kinds one cover takes (COVER_MAX_KINDS), as parts of at most
    PART_KINDS kinds: the kinds in planning order dealt out in turn, each with all its jobs."""
    # A kind's fleets follow from its size, GPU memory and constraints: as many of those, at most as many kinds.
    if len({(demand_of(job), job.gpu_memory_mib, constraint_key(job)) for job in jobs}) <= COVER_MAX_KINDS:
        return [list(jobs)]
    kinds, kind_of = _kinds(jobs, options, patterns)
    if len(kinds) <= COVER_MAX_KINDS:
        return [list(jobs)]
    count = -(-len(kinds) // PART_KINDS)
    part_of = {id(kind): n % count for n, kind in enumerate(kinds)}
    parts: list[list[JobRequest]] = [[] for _ in range(count)]
    for job in jobs:
        parts[part_of[id(kind_of[job.job_id])]].append(job)
    return parts


BUNDLE_PREFIX = "shared-gpu:"


def bundle_shared(jobs: Sequence[JobRequest], options: Sequence[Option], patterns: Patterns
                  ) -> tuple[list[JobRequest], dict[str, tuple[JobRequest, ...]]]:
    """The jobs to buy for, with those sharing a GPU packed into one-GPU bundles (in planning order), and
    each bundle's jobs by its id.

    Jobs are bundled with jobs of the same constraints, runtime class and able fleets, largest GPU memory
    first, into GPUs of the smallest shareable memory among those fleets. A bundle's
    vCPUs and memory stay within one GPU's share of the able fleet with the most of them per GPU, so
    it fits that fleet's box whole (a job over that share is a bundle alone: it fits a box by itself).
    Jobs no fleet can run are left as they are, for the purchase to say so.
    """
    out: list[JobRequest] = []
    groups: dict[tuple, tuple[list[Option], list[JobRequest]]] = {}
    for job in jobs:
        if not job.shares_gpu:
            out.append(job)
            continue
        able = [i for i, o in enumerate(options) if may_run(job, o, patterns) and o.holds(job)]
        if not able:
            out.append(job)
            continue
        key = (constraint_key(job), runtime_class(job), tuple(able))
        groups.setdefault(key, ([options[i] for i in able], []))[1].append(job)
    members: dict[str, tuple[JobRequest, ...]] = {}
    for able, group in groups.values():
        gpu_memory = min(o.gpu_memory for o in able)
        widest = max(able, key=lambda o: (o.capacity[1] / o.capacity[0], o.capacity[2] / o.capacity[0]))
        vcpus, memory = widest.capacity[1] / widest.capacity[0], widest.capacity[2] / widest.capacity[0]
        bins: list[list] = []  # [memory left, vCPUs, MiB, jobs]
        for job in sorted(group, key=lambda j: (-j.gpu_memory_mib, -j.vcpus, -j.memory_mib, j.submitted_at, j.job_id)):
            # Among GPUs with room, the one with the fewest vCPUs so far: CPU-heavy jobs spread over bundles,
            # which stay near a GPU's share of a box (2058 against 2086 $/h for first fit on the shared trace).
            home = min((b for b in bins if b[0] >= job.gpu_memory_mib and b[1] + job.vcpus <= vcpus + 1e-9
                        and b[2] + job.memory_mib <= memory), key=lambda b: (b[1], b[0]), default=None)
            if home is None:
                home = [gpu_memory, 0.0, 0, []]
                bins.append(home)
            home[0] -= job.gpu_memory_mib
            home[1] += job.vcpus
            home[2] += job.memory_mib
            home[3].append(job)
        for box in bins:
            first = box[3][0]
            # One whole GPU that can share what its jobs use: only fleets able to run them all hold it.
            bundle = replace(first, job_id=f"{BUNDLE_PREFIX}{first.job_id}", gpus=1, gpu_memory_mib=gpu_memory - box[0],
                             vcpus=box[1], memory_mib=box[2], reserved=None, checkpoint_interval_s=None,
                             submitted_at=min(j.submitted_at for j in box[3]),
                             runtime=max((j.runtime for j in box[3] if j.runtime), key=lambda r: r.seconds,
                                         default=None),
                             attempts_left=min(j.attempts_left for j in box[3]))
            members[bundle.job_id] = tuple(box[3])
            out.append(bundle)
    return planning_order(out) if members else list(jobs), members


def _unbundled(job_ids: Sequence[str], members: Mapping[str, Sequence[JobRequest]]) -> list[str]:
    return [m.job_id for j in job_ids for m in members.get(j, ())] + [j for j in job_ids if j not in members]


def runtime_class(job: JobRequest) -> int:
    """Jobs expected to run about as long as each other (-1: no runtime belief)."""
    if job.runtime is None:
        return -1
    return sum(job.runtime.seconds >= edge for edge in RUNTIME_CLASS_EDGES_S)


def purchase(jobs: Sequence[JobRequest], options: Sequence[Option], catalog, patterns: Patterns,
             limits: Limits, fallbacks: Mapping[str, JobRequest] | None = None,
             cpu_seconds: float | None = None) -> tuple[list[ScaleOut], list[tuple[str, str]]]:
    """Boxes for `jobs`, bought class by class of runtime (a box never mixes a day-long job with
    minute-long ones: it would outlive them, nearly empty), within the caps all classes share.

    `fallbacks`: jobs the lifecycle stage sent on-demand, as they were; one that could not be bought
    for (the on-demand fleets' caps) is planned again as it was, with what room is left. Such jobs get
    no hosts: the stage chose on-demand for each job alone, and hosts bought on-demand for them, valued
    full, ran far from full (docs/scheduler-benchmark.md, "Hosts under interruptions").

    `cpu_seconds`: the most CPU time the covers of all classes may take together (None: each takes what
    `cover_budget` gives it); past it the greedy plans decide.
    """
    deadline = float("inf") if cpu_seconds is None else time.process_time() + cpu_seconds
    fallbacks = dict(fallbacks or {})
    classes: dict[tuple[int, bool], list[JobRequest]] = {}
    for job in jobs:  # in planning order; a class comes in the order of its first job
        cls = runtime_class(job)
        classes.setdefault((cls, cls < HOST_CLASS or job.job_id not in fallbacks), []).append(job)
    rounds = [(batch, hosts) for (_, hosts), batch in classes.items()]
    bought: dict[int, list[list[str]]] = {}
    waiting: list[tuple[str, str]] = []
    options = list(options)
    while rounds:
        jobs_of_round, hosts = rounds.pop(0)
        batch, members = bundle_shared(jobs_of_round, options, patterns)
        parts = _parts(batch, options, patterns)
        for part in parts:
            result = _purchase_once(part, options, catalog, patterns, limits, hosts, deadline, len(parts))
            for i, boxes in result.boxes.items():
                bought.setdefault(i, []).extend(_unbundled(box, members) for box in boxes)
                options[i] = replace(options[i], room=options[i].room - len(boxes))
            limits = replace(limits, current_hourly_usd=limits.current_hourly_usd + result.cost)
            result.waiting = [(job_id, reason) for bundle, reason in result.waiting
                              for job_id in _unbundled([bundle], members)]
            retry = [fallbacks.pop(job_id) for job_id, _ in result.waiting if job_id in fallbacks]
            retried = {job.job_id for job in retry}
            waiting += [(job_id, reason) for job_id, reason in result.waiting if job_id not in retried]
            if retry:
                rounds.append((retry, True))
    scale_outs = []
    for i in sorted(bought):
        fleet, boxes = options[i].fleet, sorted(tuple(sorted(b)) for b in bought[i])
        for_jobs = tuple(sorted(j for b in boxes for j in b))
        scale_outs.append(ScaleOut(fleet.region, fleet.fleet, fleet.asg_name, len(boxes),
                                   round(options[i].price * len(boxes), 4), for_jobs, tuple(boxes)))
        waiting += [(j, f"waiting for {len(boxes)} new instance(s) of fleet {fleet.fleet} in {fleet.region}")
                    for j in for_jobs]
    return scale_outs, waiting
