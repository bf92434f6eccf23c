"""Where each pending job goes, and what to buy for the rest: a pure planning function.

Plain data in (pending jobs, live machines, purchasable fleets, the catalog, the limits), a `Plan` out.
No AWS: the scheduler Lambda reads the world and acts on the plan; the benchmark runs this same code.

Three stages, each for the jobs the previous one could not serve. Jobs are taken largest first (GPUs,
then vCPUs, then memory), oldest first among equals: first-fit-decreasing order packs near-optimally.

1. Live machines. Hard constraints: the machine is not draining, has the free GPUs, vCPUs and memory,
   its type fully matches the job's pattern, its region and lifecycle are ones the job accepts.
   Fitness (in the spirit of Fenzo's fitness calculators): how full the machine is after placing,
   GPUs weighted most (they are what costs), then vCPUs and memory; a full machine frees whole machines
   for the reaper. Soft constraints lower the score: a machine under a rebalance recommendation, and a
   spot pool (region, instance type, AZ) that already holds a job of the same submission (spreading a
   sweep limits what one reclaimed pool takes down). Ties go to the cheaper GPU-hour, then the key.
2. Instances already asked for but not usable yet (`Fleet.pending_instances`): counted as empty
   machines of the fleet's guaranteed size, so a job waiting for a launch does not buy a second one.
3. Purchase. Each fleet is an option: a box of the capacity every type of the fleet guarantees
   (component-wise minimum), priced at its dearest type (the group may launch any of them). Resource
   prices come from the linear program "cover the demand with fractional boxes at least cost" (its
   dual: dollars per GPU, vCPU and GiB). The box that holds the most demand-value per dollar is bought
   (filled greedily, most valuable jobs first), repeatedly, within each fleet's cap and the
   dollars-per-hour cap. This buys near the LP bound: a cheap 1-GPU box for a small job, a 4-GPU box
   shared by three memory-heavy jobs and a small one, rather than the cheapest box per job alone.

GPU counts come from the caller (catalog minus known tasks), never from ECS's remaining resources.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

GPU_WEIGHT, VCPU_WEIGHT, MEMORY_WEIGHT = 0.6, 0.2, 0.2
REBALANCE_PENALTY = 0.5  # below any healthy machine: used only when nothing else fits
SWEEP_SPREAD_PENALTY = 0.1  # less than one GPU step on a 4-GPU machine (0.15): packing wins there
ADMISSION_CLOSED = "admission closed by budget guard"
NO_FLEET = "no fleet can run it (instance-type pattern, region, lifecycle or size)"
SCALING_PAUSED = "no free capacity; scaling paused (circuit breaker open)"


@dataclass(frozen=True)
class JobRequest:
    job_id: str
    submission_id: str
    gpus: int
    vcpus: float
    memory_mib: int
    instance_type_pattern: str | None = None  # regex, full match on the type name
    regions: tuple[str, ...] = ()  # empty = any
    lifecycle: str | None = None  # "spot" | "on-demand" | None
    submitted_at: float = 0.0  # epoch seconds; older first


@dataclass(frozen=True)
class Machine:
    key: str  # container instance ARN (the StartTask target)
    instance_id: str
    region: str
    fleet: str
    instance_type: str
    availability_zone: str
    lifecycle: str
    free_gpus: int
    free_vcpus: float
    free_memory_mib: int
    price_per_hour: float
    rebalance_recommended: bool = False
    draining: bool = False
    # Submissions with a job running on the machine (the sweep spread counts them in its pool).
    submissions: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Fleet:
    region: str
    fleet: str
    asg_name: str
    instance_types: tuple[str, ...]
    # Usable machines of the group (registered with ECS, not draining), and instances asked for that
    # are not usable yet (desired capacity minus those). Together they count against the cap.
    current_instances: int
    pending_instances: int
    max_instances: int
    on_demand_base: int = 0
    on_demand_percent_above_base: int = 0


@dataclass(frozen=True)
class Limits:
    max_hourly_usd: float
    current_hourly_usd: float
    admission_open: bool = True
    scaling_allowed: bool = True  # False when the circuit breaker is open


@dataclass(frozen=True)
class Placement:
    job_id: str
    machine_key: str
    region: str
    fleet: str


@dataclass(frozen=True)
class ScaleOut:
    region: str
    fleet: str
    asg_name: str
    add_instances: int
    hourly_usd: float
    for_jobs: tuple[str, ...]


@dataclass(frozen=True)
class Plan:
    placements: tuple[Placement, ...]
    scale_outs: tuple[ScaleOut, ...]
    waiting: tuple[tuple[str, str], ...]  # (job_id, reason)


# --- shared helpers ------------------------------------------------------------------------------

Resources = tuple[int, float, int]  # GPUs, vCPUs, MiB


def _order(jobs: Iterable[JobRequest]) -> list[JobRequest]:
    return sorted(jobs, key=lambda j: (-j.gpus, -j.vcpus, -j.memory_mib, j.submitted_at, j.job_id))


def _capacity(catalog, instance_type: str) -> Resources:
    spec = catalog.get(instance_type)
    return spec.gpus, float(spec.schedulable_vcpus), spec.schedulable_memory_mib


def _demand(job: JobRequest) -> Resources:
    return job.gpus, job.vcpus, job.memory_mib


def _fits(free: Sequence[float], need: Sequence[float]) -> bool:
    return free[0] >= need[0] and free[1] >= need[1] and free[2] >= need[2]


def _share(capacity: Resources, amounts: Sequence[float]) -> float:
    """Weighted share of a machine's capacity that `amounts` make up (a resource it lacks counts full)."""
    total = 0.0
    for weight, cap, amount in zip((GPU_WEIGHT, VCPU_WEIGHT, MEMORY_WEIGHT), capacity, amounts):
        total += weight * (amount / cap if cap else 1.0)
    return total


class _Patterns:
    """Compiled instance-type patterns and their verdicts, computed once per plan."""

    def __init__(self) -> None:
        self._compiled: dict[str, re.Pattern] = {}
        self._verdicts: dict[tuple[str, str], bool] = {}

    def accepts(self, job: JobRequest, instance_type: str, region: str, lifecycle: str | None) -> bool:
        if job.regions and region not in job.regions:
            return False
        if job.lifecycle is not None and lifecycle is not None and job.lifecycle != lifecycle:
            return False
        pattern = job.instance_type_pattern
        if pattern is None:
            return True
        key = (pattern, instance_type)
        if key not in self._verdicts:
            compiled = self._compiled.setdefault(pattern, re.compile(pattern))
            self._verdicts[key] = compiled.fullmatch(instance_type) is not None
        return self._verdicts[key]


def _constraint_key(job: JobRequest) -> tuple:
    return job.instance_type_pattern, job.regions, job.lifecycle


# --- stages 1 and 2: packing onto machines that exist or are on their way -----------------------

@dataclass
class _Bin:
    """A machine's remaining room while planning."""
    machine: Machine
    free: list  # [GPUs, vCPUs, MiB]
    capacity: Resources
    price_per_gpu: float

    def fullness(self) -> float:
        return 1.0 - _share(self.capacity, self.free)

    def rank(self) -> tuple:
        # Order inside a bucket: fullest first, then the cheaper GPU-hour, then the key (deterministic).
        return -self.fullness(), self.price_per_gpu, self.machine.key


@dataclass
class _Group:
    """Machines alike for every job: same fleet and type (so same capacity), zone, lifecycle, rebalance.

    Inside a group a job's fitness on a machine is the machine's fullness plus a term that depends only
    on the job and the type, so the best machine of a group is the fullest one that fits. Buckets by
    free GPUs let a job skip machines without enough of them.
    """
    fleet: str
    instance_type: str
    region: str
    lifecycle: str
    pool: tuple[str, str, str]
    rebalance: bool
    capacity: Resources
    buckets: dict[int, list] = field(default_factory=dict)  # free GPUs -> sorted [(rank, _Bin)]

    def add(self, bin_: _Bin) -> None:
        bisect.insort(self.buckets.setdefault(int(bin_.free[0]), []), (bin_.rank(), id(bin_), bin_))

    def remove(self, bin_: _Bin, rank: tuple) -> None:
        bucket = self.buckets[int(bin_.free[0])]
        del bucket[bisect.bisect_left(bucket, (rank, id(bin_), bin_))]
        if not bucket:
            del self.buckets[int(bin_.free[0])]

    def best_fit(self, need: Resources) -> _Bin | None:
        best = None
        for free_gpus, bucket in self.buckets.items():
            if free_gpus < need[0]:
                continue
            for rank, _, bin_ in bucket:
                if _fits(bin_.free, need):
                    if best is None or rank < best[0]:
                        best = (rank, bin_)
                    break
        return best[1] if best else None


class _Packer:
    """Best-fit placement over a set of machines, indexed so that 10,000 jobs over 1,000 machines
    cost milliseconds, not seconds: groups of alike machines, buckets by free GPUs, and a memo of job
    sizes that already found no room (machines only fill up while planning)."""

    def __init__(self, machines: Iterable[Machine], catalog, accepts: Callable[[JobRequest, _Group], bool]):
        self._catalog = catalog
        self._accepts = accepts
        self._groups: dict[tuple, _Group] = {}
        self._pool_submissions: dict[tuple[str, str, str], set[str]] = {}
        # constraint key -> (a job with those constraints, the groups it may use)
        self._eligible: dict[tuple, tuple[JobRequest, list[_Group]]] = {}
        self._no_room: dict[tuple, list[Resources]] = {}
        for machine in sorted(machines, key=lambda m: m.key):
            self.add(machine)

    def add(self, machine: Machine) -> None:
        if machine.draining:
            return
        capacity = _capacity(self._catalog, machine.instance_type)
        pool = (machine.region, machine.instance_type, machine.availability_zone)
        key = (machine.fleet, *pool, machine.lifecycle, machine.rebalance_recommended)
        group = self._groups.get(key)
        if group is None:
            group = self._groups[key] = _Group(machine.fleet, machine.instance_type, machine.region,
                                               machine.lifecycle, pool, machine.rebalance_recommended, capacity)
            for job, groups in self._eligible.values():
                if self._accepts(job, group):
                    groups.append(group)
        self._pool_submissions.setdefault(pool, set()).update(machine.submissions)
        group.add(_Bin(machine, [machine.free_gpus, machine.free_vcpus, machine.free_memory_mib], capacity,
                       machine.price_per_hour / max(1, capacity[0])))
        self._no_room.clear()  # new room: sizes that found none may fit now

    def _groups_for(self, job: JobRequest) -> list[_Group]:
        key = _constraint_key(job)
        if key not in self._eligible:
            self._eligible[key] = (job, [g for g in self._groups.values() if self._accepts(job, g)])
        return self._eligible[key][1]

    def place(self, job: JobRequest) -> Machine | None:
        need = _demand(job)
        memo_key = _constraint_key(job)
        if any(_fits(need, small) for small in self._no_room.get(memo_key, ())):
            return None  # a job no larger than this one already found no room
        best, best_key = None, None
        for group in self._groups_for(job):
            candidate = group.best_fit(need)
            if candidate is None:
                continue
            penalty = REBALANCE_PENALTY if group.rebalance else 0.0
            if group.lifecycle == "spot" and job.submission_id in self._pool_submissions.get(group.pool, ()):
                penalty += SWEEP_SPREAD_PENALTY
            fitness = candidate.fullness() + _share(group.capacity, need) - penalty
            key = (-round(fitness, 12), candidate.price_per_gpu, candidate.machine.key)
            if best_key is None or key < best_key:
                best, best_key = (group, candidate), key
        if best is None:
            self._no_room.setdefault(memo_key, []).append(need)
            return None
        group, bin_ = best
        group.remove(bin_, bin_.rank())
        bin_.free = [bin_.free[0] - need[0], bin_.free[1] - need[1], bin_.free[2] - need[2]]
        group.add(bin_)
        self._pool_submissions.setdefault(group.pool, set()).add(job.submission_id)
        return bin_.machine


# --- stage 3: what to buy ------------------------------------------------------------------------

@dataclass
class _Option:
    """One fleet as something to buy: a box of guaranteed capacity at its worst-case price."""
    fleet: Fleet
    capacity: Resources
    price: float
    room: int  # instances the cap still allows


def _fleet_lifecycle(fleet: Fleet) -> str | None:
    """What a new instance of the fleet will be: spot, on-demand, or either (mixed)."""
    if fleet.on_demand_percent_above_base >= 100:
        return "on-demand"
    if fleet.on_demand_base == 0 and fleet.on_demand_percent_above_base == 0:
        return "spot"
    return None


def _price(catalog, prices: Mapping | None, region: str, instance_type: str, lifecycle: str | None) -> float:
    spec = catalog.get(instance_type)
    if lifecycle == "spot":
        return (prices or {}).get((region, instance_type), spec.spot_price(region))
    return spec.on_demand_price(region)  # on-demand, or a mix: the worst case


def _guaranteed_capacity(catalog, fleet: Fleet) -> Resources:
    """What any instance of the fleet holds at least, whichever of its types the group launches."""
    capacities = [_capacity(catalog, t) for t in fleet.instance_types]
    return (min(c[0] for c in capacities), min(c[1] for c in capacities), min(c[2] for c in capacities))


def _options(fleets: Sequence[Fleet], catalog, prices) -> list[_Option]:
    options = []
    for fleet in sorted(fleets, key=lambda f: (f.region, f.fleet)):
        lifecycle = _fleet_lifecycle(fleet)
        price = max(_price(catalog, prices, fleet.region, t, lifecycle) for t in fleet.instance_types)
        room = max(0, fleet.max_instances - fleet.current_instances - fleet.pending_instances)
        options.append(_Option(fleet, _guaranteed_capacity(catalog, fleet), price, room))
    return options


def _may_run(job: JobRequest, option: _Option, patterns: _Patterns) -> bool:
    """May an instance of this fleet run the job, whichever of its types the group launches?"""
    fleet = option.fleet
    lifecycle = _fleet_lifecycle(fleet)
    if job.lifecycle is not None and lifecycle != job.lifecycle:
        return False  # a mixed fleet cannot promise the lifecycle the job insists on
    return all(patterns.accepts(job, t, fleet.region, lifecycle) for t in fleet.instance_types)


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
        factor = tableau[pivot][entering]
        tableau[pivot] = [v / factor for v in tableau[pivot]]
        for r in range(n):
            if r != pivot and tableau[r][entering]:
                f = tableau[r][entering]
                tableau[r] = [a - f * b for a, b in zip(tableau[r], tableau[pivot])]
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


def _copies(have: float, need: float) -> int:
    """How many `need` fit in `have`, exactly (a float quotient may round up past the capacity)."""
    count = int(have // need)
    while count > 0 and count * need > have:
        count -= 1
    while (count + 1) * need <= have:
        count += 1
    return count


def _tentative_fill(capacity: Resources, first: _Kind, kinds: Sequence[_Kind]) -> dict[int, int]:
    """What a new box would hold: the job that opens it, then the jobs still to plan in the order they
    come (largest first), as many of each as fit. {id(kind): count}."""
    free = [capacity[0] - first.need[0], capacity[1] - first.need[1], capacity[2] - first.need[2]]
    counts = {id(first): 1}
    for kind in kinds:
        available = kind.left - counts.get(id(kind), 0)
        if available <= 0 or not _fits(free, kind.need):
            continue
        count = min([available] + [_copies(have, need) for have, need in zip(free, kind.need) if need])
        if count:
            free = [free[i] - count * kind.need[i] for i in range(3)]
            counts[id(kind)] = counts.get(id(kind), 0) + count
    return counts


class _NewCapacity:
    """Stages 2 and 3: jobs onto instances already launching, then onto boxes bought for them.

    First-fit decreasing with boxes opened on demand: a job goes to the fullest box (launching, or
    opened earlier in this plan) that fits; when none does, it opens a box of the fleet whose box, filled
    with this job and the jobs still to come, holds the most value per dollar. Value is the job's
    resources at the prices of the LP that covers all of them at least cost, so boxes that fill well at
    those prices are what gets bought. Big jobs come first and open the boxes; small ones fill the gaps.
    """

    def __init__(self, options: list[_Option], catalog, patterns: _Patterns, limits: Limits):
        self.options = options
        self.catalog = catalog
        self.patterns = patterns
        self.limits = limits
        self.budget = limits.max_hourly_usd - limits.current_hourly_usd
        self.index_of = {(o.fleet.region, o.fleet.fleet): i for i, o in enumerate(options)}
        self.boxes = _Packer([], catalog, lambda job, group: _may_run(
            job, options[self.index_of[(group.region, group.fleet)]], patterns))
        self.launching: set[str] = set()
        self.opened: dict[int, int] = {}  # option -> boxes bought
        for i, option in enumerate(options):
            for n in range(option.fleet.pending_instances):
                self.launching.add(self._add_box(i, f"launching:{option.fleet.asg_name}:{n}"))

    def _add_box(self, i: int, key: str) -> str:
        option = self.options[i]
        smallest = min(option.fleet.instance_types, key=lambda t: _capacity(self.catalog, t))
        self.boxes.add(Machine(key, "", option.fleet.region, option.fleet.fleet, smallest, "",
                               _fleet_lifecycle(option.fleet) or "mixed", *option.capacity, option.price))
        return key

    def _affordable(self, option: _Option) -> bool:
        return option.room > 0 and option.price <= self.budget + 1e-9

    def plan(self, jobs: Sequence[JobRequest], scaling_allowed: bool) -> tuple[list[ScaleOut], list[tuple[str, str]]]:
        options = self.options
        waiting: list[tuple[str, str]] = []
        kinds: dict[tuple, _Kind] = {}
        kind_of: dict[str, _Kind] = {}
        for job in jobs:
            eligible = frozenset(i for i, o in enumerate(options)
                                 if _may_run(job, o, self.patterns) and _fits(o.capacity, _demand(job)))
            kind = kinds.setdefault((_demand(job), eligible), _Kind(_demand(job), eligible))
            kind.left += 1
            kind_of[job.job_id] = kind
        sequence = list(kinds.values())  # first appearance: the planning order, largest first
        demand = [sum(k.need[i] * k.left for k in sequence if k.options) for i in range(3)]
        prices = resource_prices([(o.capacity, o.price) for o in options if self._affordable(o)], demand)
        for kind in sequence:
            # A tiny size term: resources the LP prices at zero still count when filling.
            kind.value = sum(p * n for p, n in zip(prices, kind.need)) + 1e-9 * (
                kind.need[0] + kind.need[1] / 8 + kind.need[2] / 65536)
        per_option = [[k for k in sequence if i in k.options] for i in range(len(options))]
        by_id = {id(k): k for k in sequence}
        chosen: dict[int, tuple[int, dict[int, int]]] = {}  # kind -> (option, its tentative fill)
        bought: dict[int, list[str]] = {}

        for job in jobs:
            kind = kind_of[job.job_id]
            if not kind.options:
                waiting.append((job.job_id, NO_FLEET))
                kind.left -= 1
                continue
            box = self.boxes.place(job)
            if box is None and scaling_allowed:
                choice = chosen.get(id(kind))
                # Reuse the kind's last choice while the jobs its fill counted on are still to come.
                if choice is None or not self._affordable(options[choice[0]]) or any(
                        by_id[k].left < count for k, count in choice[1].items()):
                    choice = self._choose(kind, per_option)
                    if choice is not None:
                        chosen[id(kind)] = choice
                if choice is not None:
                    i = choice[0]
                    option = options[i]
                    self._add_box(i, f"new:{option.fleet.asg_name}:{self.opened.get(i, 0)}")
                    self.opened[i] = self.opened.get(i, 0) + 1
                    option.room -= 1
                    self.budget -= option.price
                    box = self.boxes.place(job)
            kind.left -= 1
            if box is None:
                waiting.append((job.job_id, SCALING_PAUSED if not scaling_allowed else self._why_not(kind)))
            elif box.key in self.launching:
                waiting.append((job.job_id, f"waiting for an instance of fleet {box.fleet} in {box.region} "
                                            "that is already launching"))
            else:
                bought.setdefault(self.index_of[(box.region, box.fleet)], []).append(job.job_id)

        scale_outs = []
        for i in sorted(self.opened):
            fleet, count = options[i].fleet, self.opened[i]
            for_jobs = tuple(sorted(bought.get(i, ())))
            scale_outs.append(ScaleOut(fleet.region, fleet.fleet, fleet.asg_name, count,
                                       round(options[i].price * count, 4), for_jobs))
            waiting += [(j, f"waiting for {count} new instance(s) of fleet {fleet.fleet} in {fleet.region}")
                        for j in for_jobs]
        return scale_outs, waiting

    def _choose(self, kind: _Kind, per_option: Sequence[Sequence[_Kind]]) -> tuple[int, dict[int, int]] | None:
        best = None
        for i in sorted(kind.options):
            option = self.options[i]
            if not self._affordable(option):
                continue
            fill = _tentative_fill(option.capacity, kind, per_option[i])
            value = sum(k.value * count for k, count in ((k, fill.get(id(k), 0)) for k in per_option[i]))
            key = (-value / max(option.price, 1e-9), option.price, option.fleet.region, option.fleet.fleet)
            if best is None or key < best[0]:
                best = (key, i, fill)
        return (best[1], best[2]) if best else None

    def _why_not(self, kind: _Kind) -> str:
        if any(self.options[i].room > 0 for i in kind.options):
            spent = self.limits.max_hourly_usd - self.budget
            return (f"buying another instance would pass the cap of ${self.limits.max_hourly_usd:g}/h "
                    f"(now ${spent:.2f}/h)")
        fleet = self.options[min(kind.options)].fleet
        return f"fleet {fleet.fleet} in {fleet.region} at its cap of {fleet.max_instances} instances"


# --- the plan ------------------------------------------------------------------------------------

def plan(jobs: Sequence[JobRequest], machines: Sequence[Machine], fleets: Sequence[Fleet], catalog,
         limits: Limits, *, prices: Mapping[tuple[str, str], float] | None = None) -> Plan:
    if not limits.admission_open:
        return Plan((), (), tuple((j.job_id, ADMISSION_CLOSED) for j in sorted(jobs, key=lambda j: j.job_id)))

    patterns = _Patterns()
    ordered = _order(jobs)
    live = _Packer(machines, catalog, lambda job, g: patterns.accepts(job, g.instance_type, g.region, g.lifecycle))
    placements: list[Placement] = []
    unplaced: list[JobRequest] = []
    for job in ordered:
        machine = live.place(job)
        if machine is None:
            unplaced.append(job)
        else:
            placements.append(Placement(job.job_id, machine.key, machine.region, machine.fleet))

    waiting: list[tuple[str, str]] = []
    scale_outs: list[ScaleOut] = []
    if unplaced:
        new_capacity = _NewCapacity(_options(fleets, catalog, prices), catalog, patterns, limits)
        scale_outs, waiting = new_capacity.plan(unplaced, limits.scaling_allowed)
    return Plan(tuple(placements), tuple(scale_outs), tuple(sorted(waiting)))
