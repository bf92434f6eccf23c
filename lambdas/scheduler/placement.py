"""Where each pending job goes, and what to buy for the rest: a pure planning function.

Plain data in (pending jobs, live machines, purchasable fleets, the catalog, the limits), a `Plan` out.
No AWS: the scheduler Lambda reads the world and acts on the plan; the benchmark runs this same code.

- Hard constraints: the machine is not draining, has the free GPUs, vCPUs and memory, its type fully
  matches the job's pattern, its region and lifecycle are ones the job accepts.
- Fitness (in the spirit of Fenzo's fitness calculators): after placing, how full the machine is,
  GPUs weighted most (they are what costs), then vCPUs and memory; a full machine frees whole machines
  for the reaper. Soft constraints lower the score: a machine under a rebalance recommendation, and a
  spot pool (instance type, AZ) that already holds a job of the same sweep (spreading a sweep limits
  what one reclaimed pool takes down). Ties go to the cheaper GPU-hour, then to the key (deterministic).
- Jobs are taken largest first (GPUs, then vCPUs, then memory), oldest first among equals: decreasing
  size is the classic first-fit-decreasing order that packs bins near-optimally.
- What fits nowhere asks for capacity: for each fleet that could run the job, the worst-case price of
  one instance (its most expensive type, spot unless the fleet buys on-demand) divided by how many such
  jobs one instance holds; the cheapest per job wins. Jobs are packed onto hypothetical new instances
  of the fleet's smallest type to count how many to add, never past the fleet's cap, the dollars-per-hour
  cap, or when scaling is paused. GPU counts come from the caller (catalog minus known tasks), never
  from ECS's remaining resources.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

GPU_WEIGHT, VCPU_WEIGHT, MEMORY_WEIGHT = 0.6, 0.2, 0.2
REBALANCE_PENALTY = 0.5  # below any healthy machine: used only when nothing else fits
SWEEP_SPREAD_PENALTY = 0.1  # less than one GPU step on a 4-GPU machine (0.15): packing wins there
ADMISSION_CLOSED = "admission closed by budget guard"


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


@dataclass(frozen=True)
class Fleet:
    region: str
    fleet: str
    asg_name: str
    instance_types: tuple[str, ...]
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


@dataclass
class _Bin:
    """A machine's remaining room while planning (live, or a hypothetical new instance)."""
    machine: Machine
    gpus: int
    vcpus: float
    memory_mib: int
    capacity: tuple[int, float, int]
    sweeps: set[str] = field(default_factory=set)

    def fits(self, job: JobRequest) -> bool:
        return self.gpus >= job.gpus and self.vcpus >= job.vcpus and self.memory_mib >= job.memory_mib

    def take(self, job: JobRequest) -> None:
        self.gpus -= job.gpus
        self.vcpus -= job.vcpus
        self.memory_mib -= job.memory_mib
        self.sweeps.add(job.submission_id)


def _pattern(job: JobRequest):
    return re.compile(job.instance_type_pattern) if job.instance_type_pattern else None


def _accepts(job: JobRequest, instance_type: str, region: str, lifecycle: str | None) -> bool:
    pattern = _pattern(job)
    if pattern is not None and not pattern.fullmatch(instance_type):
        return False
    if job.regions and region not in job.regions:
        return False
    return job.lifecycle is None or lifecycle is None or job.lifecycle == lifecycle


def _capacity(catalog, instance_type: str) -> tuple[int, float, int]:
    spec = catalog.get(instance_type)
    return spec.gpus, float(spec.schedulable_vcpus), spec.schedulable_memory_mib


def _fitness(bin_: _Bin, job: JobRequest) -> float:
    gpus, vcpus, memory = bin_.capacity
    used = lambda cap, free, req: (cap - free + req) / cap if cap else 1.0  # noqa: E731
    score = (GPU_WEIGHT * used(gpus, bin_.gpus, job.gpus) + VCPU_WEIGHT * used(vcpus, bin_.vcpus, job.vcpus)
             + MEMORY_WEIGHT * used(memory, bin_.memory_mib, job.memory_mib))
    if bin_.machine.rebalance_recommended:
        score -= REBALANCE_PENALTY
    if bin_.machine.lifecycle == "spot" and job.submission_id in bin_.sweeps:
        score -= SWEEP_SPREAD_PENALTY
    return score


def _order(jobs: Sequence[JobRequest]) -> list[JobRequest]:
    return sorted(jobs, key=lambda j: (-j.gpus, -j.vcpus, -j.memory_mib, j.submitted_at, j.job_id))


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


def _purchase_option(job: JobRequest, fleet: Fleet, catalog, prices) -> tuple[float, float, str] | None:
    """(price per job, price per instance, the type new instances are counted as), or None."""
    lifecycle = _fleet_lifecycle(fleet)
    if job.lifecycle is not None and lifecycle is not None and job.lifecycle != lifecycle:
        return None
    if job.lifecycle is not None and lifecycle is None:
        return None  # a mixed fleet cannot promise the lifecycle the job insists on
    types = [t for t in fleet.instance_types if _accepts(job, t, fleet.region, None)]
    if len(types) != len(fleet.instance_types):
        return None  # the group may launch any of its types: all must suit the job
    per_instance = max(_price(catalog, prices, fleet.region, t, lifecycle) for t in types)
    smallest = min(types, key=lambda t: _capacity(catalog, t))
    gpus, vcpus, memory = _capacity(catalog, smallest)
    per_box = min(gpus // job.gpus if job.gpus else 10**6, int(vcpus // job.vcpus) if job.vcpus else 10**6,
                  memory // job.memory_mib if job.memory_mib else 10**6)
    if per_box < 1:
        return None
    return per_instance / per_box, per_instance, smallest


def plan(jobs: Sequence[JobRequest], machines: Sequence[Machine], fleets: Sequence[Fleet], catalog,
         limits: Limits, *, prices: Mapping[tuple[str, str], float] | None = None) -> Plan:
    if not limits.admission_open:
        return Plan((), (), tuple((j.job_id, ADMISSION_CLOSED) for j in sorted(jobs, key=lambda j: j.job_id)))

    bins = [
        _Bin(m, m.free_gpus, m.free_vcpus, m.free_memory_mib, _capacity(catalog, m.instance_type))
        for m in sorted(machines, key=lambda m: m.key) if not m.draining
    ]
    placements: list[Placement] = []
    unplaced: list[JobRequest] = []
    for job in _order(jobs):
        candidates = [b for b in bins if b.fits(job)
                      and _accepts(job, b.machine.instance_type, b.machine.region, b.machine.lifecycle)]
        if not candidates:
            unplaced.append(job)
            continue
        best = max(candidates, key=lambda b: (
            _fitness(b, job),
            -b.machine.price_per_hour / max(1, b.capacity[0]),
            # max() keeps the first of equals; the negated key order makes it deterministic
            [-ord(c) for c in b.machine.key],
        ))
        best.take(job)
        if best.gpus == 0:
            bins.remove(best)  # every job needs a GPU: a machine without one free is out of the race
        placements.append(Placement(job.job_id, best.machine.key, best.machine.region, best.machine.fleet))

    waiting: list[tuple[str, str]] = []
    scale_outs: list[ScaleOut] = []
    if unplaced and not limits.scaling_allowed:
        waiting += [(j.job_id, "no free capacity; scaling paused (circuit breaker open)") for j in unplaced]
        unplaced = []

    # Group the rest by the fleet where they are cheapest per job.
    by_fleet: dict[tuple[str, str], list[JobRequest]] = {}
    option_of: dict[tuple[str, str], tuple[float, str]] = {}
    for job in unplaced:
        options = []
        for fleet in fleets:
            option = _purchase_option(job, fleet, catalog, prices)
            if option is not None:
                options.append((option[0], fleet.region, fleet.fleet, option[1], option[2]))
        if not options:
            waiting.append((job.job_id, "no fleet can run it (instance-type pattern, region or lifecycle)"))
            continue
        _, region, name, per_instance, box_type = min(options)
        key = (region, name)
        by_fleet.setdefault(key, []).append(job)
        option_of[key] = (max(per_instance, option_of.get(key, (0.0, ""))[0]), box_type)

    spent = limits.current_hourly_usd
    fleet_by_key = {(f.region, f.fleet): f for f in fleets}
    for key in sorted(by_fleet):
        fleet = fleet_by_key[key]
        per_instance, box_type = option_of[key]
        room = max(0, fleet.max_instances - fleet.current_instances - fleet.pending_instances)
        boxes: list[_Bin] = []
        counted_for: list[str] = []
        for job in _order(by_fleet[key]):
            target = next((b for b in boxes if b.fits(job)), None)
            if target is None:
                if len(boxes) >= room:
                    waiting.append((job.job_id, f"fleet {fleet.fleet} in {fleet.region} at its cap of "
                                                f"{fleet.max_instances} instances"))
                    continue
                if spent + per_instance > limits.max_hourly_usd:
                    waiting.append((job.job_id, f"buying another instance would pass the cap of "
                                                f"${limits.max_hourly_usd:g}/h (now ${spent:.2f}/h)"))
                    continue
                capacity = _capacity(catalog, box_type)
                hypothetical = Machine(f"new:{fleet.asg_name}:{len(boxes)}", "", fleet.region, fleet.fleet,
                                       box_type, "", "spot", *capacity, per_instance)
                target = _Bin(hypothetical, *capacity, capacity)
                boxes.append(target)
                spent += per_instance
            target.take(job)
            counted_for.append(job.job_id)
        if boxes:
            scale_outs.append(ScaleOut(fleet.region, fleet.fleet, fleet.asg_name, len(boxes),
                                       round(per_instance * len(boxes), 4), tuple(sorted(counted_for))))
            waiting += [(j, f"waiting for {len(boxes)} new instance(s) of fleet {fleet.fleet} in {fleet.region}")
                        for j in sorted(counted_for)]

    return Plan(tuple(placements), tuple(scale_outs), tuple(sorted(waiting)))
