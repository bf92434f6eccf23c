"""Where each pending job goes, and what to buy for the rest: a pure planning function.

Plain data in (pending jobs, live machines, purchasable fleets, the catalog, the limits), a `Plan` out.
No AWS: the scheduler Lambda reads the world and acts on the plan; the benchmark runs this same code.

Stages, each for the jobs the previous ones could not serve. Jobs are taken largest first (GPUs, then
vCPUs, then memory), oldest first among equals: first-fit-decreasing order packs near-optimally.

0. Reservations. Jobs an earlier run bought an instance for (`JobRequest.reserved`) start together on
   an empty machine of that fleet once one is usable: the packing the purchase chose is the packing
   that runs, rather than a repacking that may not fit and would buy again.
1. Live machines. Hard constraints: the machine is not draining, has the free GPUs, vCPUs and memory,
   its type fully matches the job's pattern, its region and lifecycle are ones the job accepts.
   Fitness (in the spirit of Fenzo's fitness calculators): how full the machine is after placing,
   GPUs weighted most (they are what costs), then vCPUs and memory; a full machine frees whole machines
   for the reaper. Soft constraints lower the score: a machine under a rebalance recommendation, and a
   spot pool (region, instance type, AZ) that already holds a job of the same submission (spreading a
   sweep limits what one reclaimed pool takes down). Ties go to the cheaper GPU-hour, then the key.
2. Instances already asked for but not usable yet (`Fleet.pending_instances`): counted as empty
   machines of the fleet's guaranteed size, each holding the reservation it was bought for, so a job
   waiting for a launch does not buy a second one.
3. Purchase. Each fleet is an option: a box of the capacity every type of the fleet guarantees
   (component-wise minimum), priced at its dearest type (the group may launch any of them). Two plans
   are made and the better kept (more jobs served within the caps, then the lower $/h):
   - greedy: resource prices come from the linear program "cover the demand with fractional boxes at
     least cost" (its dual: dollars per GPU, vCPU and GiB); the box that holds the most demand-value per
     dollar is bought (filled greedily, most valuable jobs first), repeatedly, within each fleet's cap
     and the dollars-per-hour cap;
   - cover: the configuration LP solved by column generation (`columns.cheapest_cover`), rounded down
     to whole boxes, the few jobs left packed by the greedy. Near-optimal (0.2% above the LP bound on
     the shared trace, where the greedy alone is 4.2% above it), within a CPU budget.

GPU counts come from the caller (catalog minus known tasks), never from ECS's remaining resources.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from lambdas.scheduler.columns import cheapest_cover, gauss_jordan_pivot

GPU_WEIGHT, VCPU_WEIGHT, MEMORY_WEIGHT = 0.6, 0.2, 0.2
REBALANCE_PENALTY = 0.5  # below any healthy machine: used only when nothing else fits
SWEEP_SPREAD_PENALTY = 0.1  # less than one GPU step on a 4-GPU machine (0.15): packing wins there
ADMISSION_CLOSED = "admission closed by budget guard"
NO_FLEET = "no fleet can run it (instance-type pattern, region, lifecycle or size)"
SCALING_PAUSED = "no free capacity; scaling paused (circuit breaker open)"
# The cover's CPU budget, and the most kinds it takes on (its master LP has a row per kind); past either
# the greedy plan alone decides. The shared trace (87 kinds, 7,064 jobs) needs about 1.6 s.
COVER_CPU_SECONDS = 5.0
COVER_MAX_KINDS = 250


@dataclass(frozen=True)
class Reservation:
    """A new instance bought for a set of jobs: equal reservations are one box's jobs."""
    region: str
    fleet: str
    box: str


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
    reserved: Reservation | None = None  # the instance an earlier run bought for it, if any


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
    boxes: tuple[tuple[str, ...], ...] = ()  # the jobs planned onto each new instance (reserve them)


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
        self._bins: dict[str, tuple[_Group, _Bin]] = {}
        self._empty: dict[tuple[str, str], list[str]] = {}  # (region, fleet) -> untouched healthy machines
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
        bin_ = _Bin(machine, [machine.free_gpus, machine.free_vcpus, machine.free_memory_mib], capacity,
                    machine.price_per_hour / max(1, capacity[0]))
        group.add(bin_)
        self._bins[machine.key] = (group, bin_)
        # Every job holds a GPU, so all GPUs free means no job runs there (GPUs come from the catalog).
        if machine.free_gpus >= capacity[0] and not machine.submissions and not machine.rebalance_recommended:
            self._empty.setdefault((machine.region, machine.fleet), []).append(machine.key)
        self._no_room.clear()  # new room: sizes that found none may fit now

    def machine(self, key: str) -> Machine:
        return self._bins[key][1].machine

    def claim_empty(self, region: str, fleet: str) -> Machine | None:
        """An empty healthy machine of the fleet, no longer offered to the next caller."""
        keys = self._empty.get((region, fleet), [])
        while keys:
            group, bin_ = self._bins[keys.pop(0)]
            if bin_.free[0] >= group.capacity[0]:  # still untouched
                return bin_.machine
        return None

    def place_on(self, job: JobRequest, key: str) -> bool:
        """Place the job on this machine if it may run there and fits (reservations choose the machine)."""
        group, bin_ = self._bins[key]
        need = _demand(job)
        if not self._accepts(job, group) or not _fits(bin_.free, need):
            return False
        self._take(group, bin_, job, need)
        return True

    def _take(self, group: _Group, bin_: _Bin, job: JobRequest, need: Resources) -> None:
        group.remove(bin_, bin_.rank())
        bin_.free = [bin_.free[0] - need[0], bin_.free[1] - need[1], bin_.free[2] - need[2]]
        group.add(bin_)
        self._pool_submissions.setdefault(group.pool, set()).add(job.submission_id)

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
        self._take(group, bin_, job, need)
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


def _kinds(jobs: Sequence[JobRequest], options: Sequence[_Option], patterns: _Patterns) -> tuple[list[_Kind], dict]:
    """Jobs grouped by size and the options able to run them, in first-appearance (planning) order."""
    kinds: dict[tuple, _Kind] = {}
    kind_of: dict[str, _Kind] = {}
    for job in jobs:
        eligible = frozenset(i for i, o in enumerate(options)
                             if _may_run(job, o, patterns) and _fits(o.capacity, _demand(job)))
        kind = kinds.setdefault((_demand(job), eligible), _Kind(_demand(job), eligible))
        kind.left += 1
        kind_of[job.job_id] = kind
    return list(kinds.values()), kind_of


def _box_machine(catalog, option: _Option, key: str) -> Machine:
    """A box as a machine to pack onto: the fleet's guaranteed capacity, empty."""
    fleet = option.fleet
    smallest = min(fleet.instance_types, key=lambda t: _capacity(catalog, t))
    return Machine(key, "", fleet.region, fleet.fleet, smallest, "", _fleet_lifecycle(fleet) or "mixed",
                   *option.capacity, option.price)


def _reserved_groups(jobs: Sequence[JobRequest]) -> list[tuple[Reservation, list[JobRequest]]]:
    groups: dict[Reservation, list[JobRequest]] = {}
    for job in jobs:
        if job.reserved is not None:
            groups.setdefault(job.reserved, []).append(job)
    return sorted(groups.items(), key=lambda item: (item[0].region, item[0].fleet, item[0].box))


def _launching(jobs: Sequence[JobRequest], options: Sequence[_Option], catalog,
               patterns: _Patterns) -> tuple[list[JobRequest], list[tuple[str, str]]]:
    """Stage 2: jobs onto instances asked for earlier and still launching. Each launching instance
    first takes the reservation it was bought for, then the rest pack first-fit decreasing.
    Returns the jobs left and the waiting reasons of those placed."""
    index_of = {(o.fleet.region, o.fleet.fleet): i for i, o in enumerate(options)}
    boxes = _Packer([_box_machine(catalog, o, f"launching:{o.fleet.asg_name}:{n}")
                     for o in options for n in range(o.fleet.pending_instances)], catalog,
                    lambda job, group: _may_run(job, options[index_of[(group.region, group.fleet)]], patterns))
    placed: dict[str, Machine] = {}
    for reservation, group in _reserved_groups(jobs):
        box = boxes.claim_empty(reservation.region, reservation.fleet)
        for job in group if box is not None else ():
            if boxes.place_on(job, box.key):
                placed[job.job_id] = box
    left = []
    for job in jobs:
        box = placed.get(job.job_id) or boxes.place(job)
        if box is None:
            left.append(job)
        else:
            placed[job.job_id] = box
    waiting = [(job_id, f"waiting for an instance of fleet {box.fleet} in {box.region} that is already launching")
               for job_id, box in placed.items()]
    return left, waiting


@dataclass
class _Bought:
    boxes: dict[int, list[list[str]]]  # option -> the job ids of each box bought
    waiting: list[tuple[str, str]]  # jobs not served, with the reason
    cost: float


class _Purchase:
    """Stage 3: boxes to buy for the jobs nothing else holds, within each fleet's cap and the dollar cap.

    First-fit decreasing with boxes opened on demand: a job goes to the fullest box opened so far that
    fits; when none does, it opens a box of the fleet whose box, filled with this job and the jobs still
    to come, holds the most value per dollar. Value is the job's resources at the prices of the LP that
    covers all of them at least cost, so boxes that fill well at those prices are what gets bought. Big
    jobs come first and open the boxes; small ones fill the gaps. Seed boxes (the rounded cover), when
    given, are bought first with their jobs, and their spare room is filled like any box's.
    """

    def __init__(self, options: Sequence[_Option], catalog, patterns: _Patterns, limits: Limits):
        self.options = options
        self.catalog = catalog
        self.patterns = patterns
        self.limits = limits
        self.budget = limits.max_hourly_usd - limits.current_hourly_usd
        self.room = [o.room for o in options]
        self.index_of = {(o.fleet.region, o.fleet.fleet): i for i, o in enumerate(options)}
        self.boxes = _Packer([], catalog, lambda job, group: _may_run(
            job, options[self.index_of[(group.region, group.fleet)]], patterns))
        self.contents: dict[str, tuple[int, list[str]]] = {}  # box key -> (option, job ids)
        self.cost = 0.0

    def affordable(self, i: int) -> bool:
        return self.room[i] > 0 and self.options[i].price <= self.budget + 1e-9

    def _open(self, i: int) -> str:
        option = self.options[i]
        key = f"new:{option.fleet.asg_name}:{len(self.contents)}"
        self.boxes.add(_box_machine(self.catalog, option, key))
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
            # A tiny size term: resources the LP prices at zero still count when filling.
            kind.value = sum(p * n for p, n in zip(prices, kind.need)) + 1e-9 * (
                kind.need[0] + kind.need[1] / 8 + kind.need[2] / 65536)
        per_option = [[k for k in kinds if i in k.options] for i in range(len(options))]
        by_id = {id(k): k for k in kinds}
        chosen: dict[int, tuple[int, dict[int, int]]] = {}  # kind -> (option, its tentative fill)
        waiting: list[tuple[str, str]] = []

        for job in rest:
            kind = kind_of[job.job_id]
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
                    choice = self._choose(kind, per_option)
                    if choice is not None:
                        chosen[id(kind)] = choice
                if choice is not None:
                    key = self._open(choice[0])
                    box = self.boxes.machine(key) if self.boxes.place_on(job, key) else None
            kind.left -= 1
            if box is None:
                waiting.append((job.job_id, SCALING_PAUSED if not scaling_allowed else self._why_not(kind)))
            else:
                self.contents[box.key][1].append(job.job_id)

        bought: dict[int, list[list[str]]] = {}
        for i, job_ids in self.contents.values():
            bought.setdefault(i, []).append(job_ids)
        return _Bought(bought, waiting, round(self.cost, 6))

    def _choose(self, kind: _Kind, per_option: Sequence[Sequence[_Kind]]) -> tuple[int, dict[int, int]] | None:
        best = None
        for i in sorted(kind.options):
            option = self.options[i]
            if not self.affordable(i):
                continue
            fill = _tentative_fill(option.capacity, kind, per_option[i])
            value = sum(k.value * count for k, count in ((k, fill.get(id(k), 0)) for k in per_option[i]))
            key = (-value / max(option.price, 1e-9), option.price, option.fleet.region, option.fleet.fleet)
            if best is None or key < best[0]:
                best = (key, i, fill)
        return (best[1], best[2]) if best else None

    def _why_not(self, kind: _Kind) -> str:
        if any(self.room[i] > 0 for i in kind.options):
            spent = self.limits.max_hourly_usd - self.budget
            return (f"buying another instance would pass the cap of ${self.limits.max_hourly_usd:g}/h "
                    f"(now ${spent:.2f}/h)")
        fleet = self.options[min(kind.options)].fleet
        return f"fleet {fleet.fleet} in {fleet.region} at its cap of {fleet.max_instances} instances"


def _cover_seeds(jobs: Sequence[JobRequest], options: Sequence[_Option], patterns: _Patterns,
                 limits: Limits) -> list[tuple[int, list[JobRequest]]]:
    """The rounded-down configuration-LP cover of `jobs`, as boxes with their jobs (empty when the kinds
    are too many for the budget). Options the caps already rule out are left out of the LP."""
    kinds, kind_of = _kinds(jobs, options, patterns)
    if len(kinds) > COVER_MAX_KINDS or len(jobs) < 2:
        return []
    budget = limits.max_hourly_usd - limits.current_hourly_usd
    usable = {i for i, o in enumerate(options) if o.room > 0 and o.price <= budget + 1e-9}
    cover = cheapest_cover([k.need for k in kinds], [k.left for k in kinds],
                           [sorted(k.options & usable) for k in kinds], [(o.capacity, o.price) for o in options],
                           cpu_seconds=COVER_CPU_SECONDS)
    queues: dict[int, list[JobRequest]] = {}
    position = {id(k): n for n, k in enumerate(kinds)}
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
    return seeds


def _purchase(jobs: Sequence[JobRequest], options: Sequence[_Option], catalog, patterns: _Patterns,
              limits: Limits) -> tuple[list[ScaleOut], list[tuple[str, str]]]:
    best = _Purchase(options, catalog, patterns, limits).run(jobs, (), limits.scaling_allowed)
    if limits.scaling_allowed:
        seeds = _cover_seeds(jobs, options, patterns, limits)
        if seeds:
            covered = _Purchase(options, catalog, patterns, limits).run(jobs, seeds, True)
            if (len(covered.waiting), covered.cost) < (len(best.waiting), best.cost):
                best = covered
    scale_outs, waiting = [], list(best.waiting)
    for i in sorted(best.boxes):
        fleet, boxes = options[i].fleet, sorted(tuple(sorted(b)) for b in best.boxes[i])
        for_jobs = tuple(sorted(j for b in boxes for j in b))
        scale_outs.append(ScaleOut(fleet.region, fleet.fleet, fleet.asg_name, len(boxes),
                                   round(options[i].price * len(boxes), 4), for_jobs, tuple(boxes)))
        waiting += [(j, f"waiting for {len(boxes)} new instance(s) of fleet {fleet.fleet} in {fleet.region}")
                    for j in for_jobs]
    return scale_outs, waiting


# --- the plan ------------------------------------------------------------------------------------

def plan(jobs: Sequence[JobRequest], machines: Sequence[Machine], fleets: Sequence[Fleet], catalog,
         limits: Limits, *, prices: Mapping[tuple[str, str], float] | None = None) -> Plan:
    if not limits.admission_open:
        return Plan((), (), tuple((j.job_id, ADMISSION_CLOSED) for j in sorted(jobs, key=lambda j: j.job_id)))

    patterns = _Patterns()
    ordered = _order(jobs)
    live = _Packer(machines, catalog, lambda job, g: patterns.accepts(job, g.instance_type, g.region, g.lifecycle))
    placements: list[Placement] = []
    for reservation, group in _reserved_groups(ordered):
        machine = live.claim_empty(reservation.region, reservation.fleet)
        for job in group if machine is not None else ():
            if live.place_on(job, machine.key):
                placements.append(Placement(job.job_id, machine.key, machine.region, machine.fleet))
    placed = {p.job_id for p in placements}
    unplaced: list[JobRequest] = []
    for job in ordered:
        if job.job_id in placed:
            continue
        machine = live.place(job)
        if machine is None:
            unplaced.append(job)
        else:
            placements.append(Placement(job.job_id, machine.key, machine.region, machine.fleet))

    waiting: list[tuple[str, str]] = []
    scale_outs: list[ScaleOut] = []
    if unplaced:
        options = _options(fleets, catalog, prices)
        unplaced, waiting = _launching(unplaced, options, catalog, patterns)
        if unplaced:
            scale_outs, bought_waiting = _purchase(unplaced, options, catalog, patterns, limits)
            waiting += bought_waiting
    return Plan(tuple(placements), tuple(scale_outs), tuple(sorted(waiting)))
