"""Best-fit packing over a set of machines: the index the live, launching and purchase stages share.

Fitness (in the spirit of Netflix Fenzo's fitness calculators): how full the machine is after placing,
GPUs weighted most (they are what costs), then vCPUs and memory; a full machine frees whole machines
for removal. Soft constraints lower the score: a machine under a rebalance recommendation, and a spot
pool (region, instance type, AZ) that already holds a job of the same submission (spreading a sweep
limits what one reclaimed pool takes down). Ties go to the cheaper GPU-hour, then the key.

With runtimes (`Timing`): jobs that will end together share a machine. A job that would keep a machine
up past the end of its current jobs costs that machine's price for the extension (for an empty machine,
for the job's whole runtime: the machine would be released otherwise). The extension's cost, relative
to what the purchase stage would buy for the job instead, lowers the fitness; past DECLINE_FACTOR times
that purchase the machine is declined, and the job goes on to the later stages. A job that ends before
the machine's other jobs costs nothing extra: it fills room already paid for. But a belief is a spread,
not a date: the machine is declined too where the extension the belief makes likely
(runtimes.expected_excess_s) costs past DECLINE_FACTOR times the purchase. Judged by their medians alone,
jobs that could run anywhere took the room of p5.48xlarge bought for jobs that could not, and kept them up
after those ended ($797 of p5.48xlarge time on seed 3 of the synthetic trace: docs/scheduler-benchmark.md,
"Why the synthetic trace stays above 0.93 ×"). What the purchase would buy
is an instance of the job's own, or, for a job it buys hosts for (purchase.py, HOST_CLASS), the whole
host: compared with a box of its own, a months-long job declined a g4dn.12xlarge host that had room and
was bought a second g4dn.12xlarge, while the first ran 937 hours with its one job (seed 6 of the shared
trace: docs/scheduler-benchmark.md, "Long jobs into hosts' room"). Such a long job also takes room about
the price of a box of its own (`HOST_ROOM_FACTOR`) however long it outlasts the machine's other jobs.

A job without a runtime belief is judged the same way with the environment's prior (runtimes.py,
`RuntimePrior`) where its share of the machine's price (below) costs more than a box of its own: its
extension is how long jobs are expected to run past the machine's other jobs' end, and buying for it
alone costs the prior's mean runtime. Where the share costs no more, the room is taken as dear room's
rule takes it, expecting it to be shared: judged by the prior there too, jobs without a belief left the
g4dn.12xlarge that requeued jobs refill under spot interruptions for boxes of their own, +1.05% per
completed GPU-hour (docs/scheduler-benchmark.md, "What other jobs took").

Where the job has no runtime belief of its own (prior or not) or the machine's end is unknown, it may outlast the
machine's other jobs and keep it up. It then takes room on a machine only where its share of the machine's price (the
largest share of the GPUs, vCPUs or memory it takes, times the price) is at most DECLINE_FACTOR times
the cheapest instance it could have alone: the room on an 8-H100 instance bought for a training job is
not for a one-GPU job a T4 runs for a tenth of the price. Without this rule such an instance outlived
its training, kept up by one small job after another (docs/scheduler-benchmark.md, "Dear room").

An empty machine kept by the release delay (up past its boot and the runs that start the jobs it was
bought for) takes a job only if it costs no more an hour than the cheapest instance the job could have
alone: the job pays all of it until neighbours come, and a machine that happened to empty is seldom what
the next job needs. Machines just bought or replaced for waiting jobs are exempt, and so are those the
release stage could not give back (a group's minimum, `mlfleet:keep-alive`): they are paid for anyway
(docs/scheduler-benchmark.md, "Kept empty machines").
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from .constraints import (
    capacity_of, constraint_key, demand_of, fits, gpu_room, gpu_share, take_gpu, weighted_share,
)
from .model import JobRequest, Machine, Resources
from .runtimes import RuntimePrior, expected_excess_s

REBALANCE_PENALTY = 0.5  # below any healthy machine: used only when nothing else fits
SWEEP_SPREAD_PENALTY = 0.1  # less than one GPU step on a 4-GPU machine (0.15): packing wins there
# An extension costing as much as buying for the job alone weighs like a third of a machine's fullness.
EXTENSION_WEIGHT = 0.3
# Decline a machine whose extension costs more than twice buying for the job alone: a purchase makes the
# job wait for a boot, so an existing machine keeps it unless clearly dearer (the ski-rental factor of two).
DECLINE_FACTOR = 2.0
# A job the purchase buys hosts for takes room whose share costs at most this many times a box of its own,
# however long it outlasts the machine's other jobs (`Packer._host_room`): a 1-GPU, 6-vCPU job's quarter of
# a g4dn.12xlarge is 5% dearer than its g4dn.2xlarge. 1.1 and 1.5 bought the same on the shared trace.
HOST_ROOM_FACTOR = 1.1
HOUR = 3600.0
# After its boot, the scheduler runs (one a minute) that start the jobs a new machine was bought for; an
# empty machine older than its boot and this was kept by the release delay.
SETTLE_S = 120.0


@dataclass(frozen=True)
class Timing:
    """What duration-aware packing needs: the time, the hourly price of the cheapest instance the job could
    have alone (None: no fleet below its cap holds it), the boot such an instance would take first, and
    whether machines' ends are tracked (a job of the plan has a runtime belief, or there is a prior; if
    neither, only dear room is asked), and the machines the release stage could give back once empty (`givable`: the
    kept-machine rule judges only those; one a group's minimum or `mlfleet:keep-alive` holds is paid for
    anyway), and the environment's runtime prior for jobs without a belief (None: such jobs are judged by
    dear room alone), and the hourly price of the host the purchase would buy for a job it buys hosts for
    (`host_hourly`, None for other jobs)."""
    now: float
    alone_hourly: Callable[[JobRequest], float | None]
    boot_s: float
    runtimes: bool = True
    givable: frozenset[str] = frozenset()
    prior: RuntimePrior | None = None
    host_hourly: Callable[[JobRequest], float | None] = lambda job: None

    def bought_usd(self, job: JobRequest, runtime_s: float) -> float | None:
        """What the purchase stage would buy for the job instead, for `runtime_s` and a boot ($): the whole
        host it buys for a long job (its other room is a bet on jobs to come, as the room of the machine the
        job would extend is), else an instance of its own (None: nothing can be bought)."""
        host = self.host_hourly(job)
        price = self.alone_hourly(job) if host is None else host
        return None if price is None else price * (runtime_s + self.boot_s) / HOUR


def share_hourly(job: JobRequest, capacity: Resources, gpu_memory: int, price_per_hour: float) -> float:
    """The job's share of a machine's price: the largest part of its GPUs (a shared GPU's memory), vCPUs or
    memory the job takes, times the price."""
    taken = (gpu_share(job, gpu_memory), job.vcpus, job.memory_mib)
    return price_per_hour * max(amount / cap if cap else 1.0 for amount, cap in zip(taken, capacity))


def time_bucket(busy_until: float | None, now: float) -> int | None:
    """Machines whose work ends within a factor of two of each other share a bucket (None: unknown)."""
    if busy_until is None:
        return None
    return max(0, int(math.log2(max(1.0, (busy_until - now) / 60.0))))


@dataclass
class Bin:
    """A machine's remaining room while planning."""
    machine: Machine
    free: list  # [whole GPUs, vCPUs, MiB]
    capacity: Resources
    price_per_gpu: float
    busy_until: float | None = None  # when its jobs are expected to end; None when unknown
    shared: list = field(default_factory=list)  # MiB left on each GPU shared by jobs (ECS nvidiaMps)
    gpu_memory: int = 0  # shareable memory per GPU (0: cannot share)

    def fullness(self) -> float:
        gpus_free = self.free[0] + (sum(self.shared) / self.gpu_memory if self.gpu_memory else 0.0)
        return 1.0 - weighted_share(self.capacity, (gpus_free, self.free[1], self.free[2]))

    def fits(self, job: JobRequest, need: Resources) -> bool:
        return fits(self.free, need) and gpu_room(self.free[0], self.shared, self.gpu_memory, job)

    def untouched(self) -> bool:
        return self.free[0] >= self.capacity[0] and not self.shared

    def rank(self) -> tuple:
        # Order inside a bucket: fullest first, then the cheaper GPU-hour, then the key (deterministic).
        return -self.fullness(), self.price_per_gpu, self.machine.key


@dataclass
class Group:
    """Machines alike for every job: same fleet and type (so same capacity), zone, lifecycle, rebalance,
    GPU sharing, and time bucket.

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
    gpu_memory: int = 0  # shareable memory per GPU of its machines (0: they cannot share)
    price_per_hour: float = 0.0  # of the machine that opened the group (its machines share fleet, type and zone)
    timed: bool = False  # its machines' ends are known (a time bucket)
    buckets: dict[int, list] = field(default_factory=dict)  # free GPUs -> sorted [(rank, Bin)]

    def add(self, bin_: Bin) -> None:
        bisect.insort(self.buckets.setdefault(int(bin_.free[0]), []), (bin_.rank(), id(bin_), bin_))

    def remove(self, bin_: Bin, rank: tuple) -> None:
        bucket = self.buckets[int(bin_.free[0])]
        del bucket[bisect.bisect_left(bucket, (rank, id(bin_), bin_))]
        if not bucket:
            del self.buckets[int(bin_.free[0])]

    def best_fit(self, job: JobRequest, need: Resources) -> Bin | None:
        best = None
        _, vcpus, memory = need
        for free_gpus, bucket in self.buckets.items():
            if free_gpus < need[0]:  # a job sharing a GPU needs no whole one: every bucket may hold it
                continue
            for rank, _, bin_ in bucket:
                # vCPUs and memory first, inline: a burst's boxes fill their GPUs' bucket with boxes out
                # of CPU or memory, scanned once per job (most of a 17,000-job plan's CPU).
                free = bin_.free
                if free[1] >= vcpus and free[2] >= memory and bin_.fits(job, need):
                    if best is None or rank < best[0]:
                        best = (rank, bin_)
                    break
        return best[1] if best else None


class Packer:
    """Best-fit placement over a set of machines, indexed so that 10,000 jobs over 1,000 machines
    cost milliseconds, not seconds: groups of alike machines, buckets by free GPUs, and a memo of job
    sizes that already found no room (machines only fill up while planning)."""

    def __init__(self, machines: Iterable[Machine], catalog, accepts: Callable[[JobRequest, Group], bool],
                 timing: Timing | None = None):
        self._catalog = catalog
        self._accepts = accepts
        self._timing = timing
        self._groups: dict[tuple, Group] = {}
        self._pool_submissions: dict[tuple[str, str, str], set[str]] = {}
        # constraint key -> (a job with those constraints, the groups it may use)
        self._eligible: dict[tuple, tuple[JobRequest, list[Group]]] = {}
        self._no_room: dict[tuple, list[Resources]] = {}
        self._dear: dict[tuple, tuple[int, frozenset[int]]] = {}  # job size key -> (groups judged, the dear ones)
        self._bins: dict[str, tuple[Group, Bin]] = {}
        self._empty: dict[tuple[str, str], list[str]] = {}  # (region, fleet) -> untouched healthy machines
        for machine in sorted(machines, key=lambda m: m.key):
            self.add(machine)

    def _group(self, machine: Machine, capacity: Resources, busy_until: float | None) -> Group:
        pool = (machine.region, machine.instance_type, machine.availability_zone)
        bucket = time_bucket(busy_until, self._timing.now) if self._timing else None
        key = (machine.fleet, *pool, machine.lifecycle, machine.rebalance_recommended, machine.gpu_memory_mib, bucket)
        group = self._groups.get(key)
        if group is None:
            group = self._groups[key] = Group(machine.fleet, machine.instance_type, machine.region,
                                              machine.lifecycle, pool, machine.rebalance_recommended, capacity,
                                              machine.gpu_memory_mib, machine.price_per_hour, bucket is not None)
            for job, groups in self._eligible.values():
                if self._eligible_group(job, group):
                    groups.append(group)
        return group

    def _eligible_group(self, job: JobRequest, group: Group) -> bool:
        return (not job.shares_gpu or group.gpu_memory > 0) and self._accepts(job, group)

    def add(self, machine: Machine) -> None:
        pool = (machine.region, machine.instance_type, machine.availability_zone)
        # Jobs still running in a pool count for the sweep spread, on a draining machine too.
        self._pool_submissions.setdefault(pool, set()).update(machine.submissions)
        if machine.closed:
            return  # never placed onto: being drained by AWS or by a removal, or degraded
        capacity = capacity_of(self._catalog, machine.instance_type)
        # Every job holds a GPU, whole or shared, so all GPUs free and none shared means no job runs there
        # (GPUs come from the catalog).
        empty = machine.free_gpus >= capacity[0] and not machine.shared_gpus and not machine.submissions
        busy_until = None
        if self._timing is not None and self._timing.runtimes:
            busy_until = self._timing.now if empty else machine.busy_until
        group = self._group(machine, capacity, busy_until)
        bin_ = Bin(machine, [machine.free_gpus, machine.free_vcpus, machine.free_memory_mib], capacity,
                   machine.price_per_hour / max(1, capacity[0]), busy_until, list(machine.shared_gpus),
                   machine.gpu_memory_mib)
        group.add(bin_)
        self._bins[machine.key] = (group, bin_)
        if empty and not machine.rebalance_recommended:
            self._empty.setdefault((machine.region, machine.fleet), []).append(machine.key)
        self._no_room.clear()  # new room: sizes that found none may fit now

    def machine(self, key: str) -> Machine:
        return self._bins[key][1].machine

    def claim_empty(self, region: str, fleet: str) -> Machine | None:
        """An empty healthy machine of the fleet, no longer offered to the next caller."""
        keys = self._empty.get((region, fleet), [])
        while keys:
            group, bin_ = self._bins[keys.pop(0)]
            if bin_.untouched():
                return bin_.machine
        return None

    def place_on(self, job: JobRequest, key: str) -> bool:
        """Place the job on this machine if it may run there and fits (reservations and moves choose the
        machine). A machine not offered to any job (draining, being removed, degraded) takes none."""
        if key not in self._bins:
            return False
        group, bin_ = self._bins[key]
        need = demand_of(job)
        if not self._eligible_group(job, group) or not bin_.fits(job, need):
            return False
        self._take(group, bin_, job, need)
        return True

    def room_for(self, job: JobRequest) -> list[Bin]:
        """The room of every machine the job may run on and fits now, busy or empty (the move stage chooses
        among them by its own rule: fitness is for jobs that wait, not for jobs that run)."""
        need = demand_of(job)
        return [bin_ for group in self._groups_for(job) for bucket in group.buckets.values()
                for _, _, bin_ in bucket if bin_.fits(job, need)]

    def _take(self, group: Group, bin_: Bin, job: JobRequest, need: Resources) -> None:
        group.remove(bin_, bin_.rank())
        gpus = take_gpu(bin_.free[0], bin_.shared, bin_.gpu_memory, job)
        bin_.free = [gpus, bin_.free[1] - need[1], bin_.free[2] - need[2]]
        if self._timing is not None and bin_.busy_until is not None:
            busy_until = None if job.runtime is None else max(bin_.busy_until, self._timing.now + job.runtime.seconds)
            if time_bucket(busy_until, self._timing.now) != time_bucket(bin_.busy_until, self._timing.now):
                bin_.busy_until = busy_until
                group = self._group(bin_.machine, group.capacity, busy_until)
                self._bins[bin_.machine.key] = (group, bin_)
            bin_.busy_until = busy_until
        group.add(bin_)
        self._pool_submissions.setdefault(group.pool, set()).add(job.submission_id)

    def _groups_for(self, job: JobRequest) -> list[Group]:
        key = constraint_key(job)
        if key not in self._eligible:
            self._eligible[key] = (job, [g for g in self._groups.values() if self._eligible_group(job, g)])
        return self._eligible[key][1]

    def _extension_penalty(self, job: JobRequest, bin_: Bin) -> float | None:
        """The fitness lost by keeping the machine up for the job; None when the machine is declined."""
        timing = self._timing
        if timing is None or bin_.busy_until is None:
            return 0.0
        if job.runtime is not None:
            if self._host_room(job, bin_):
                return 0.0
            runtime_s = job.runtime.seconds
            extension = max(0.0, timing.now + runtime_s - bin_.busy_until)
            # What declines the machine: the extension the belief's spread makes expected, never below the
            # median's (Jensen; the max only guards rounding).
            judged = max(extension, expected_excess_s(job.runtime, bin_.busy_until - timing.now))
        elif timing.prior is not None:
            # Room whose share costs no more than a box of its own is a bargain even if the job outlasts
            # the others (dear room's view: the room will be shared); dearer room is judged by the prior.
            alone = timing.alone_hourly(job)
            if not alone or share_hourly(job, bin_.capacity, bin_.gpu_memory, bin_.machine.price_per_hour) <= alone:
                return 0.0
            runtime_s = timing.prior.mean_s
            extension = judged = timing.prior.excess_s(bin_.busy_until - timing.now)
        else:
            return 0.0
        if judged <= 0:
            return 0.0
        alternative = timing.bought_usd(job, runtime_s)
        if not alternative:  # nothing to buy instead: never declined, the share of its runtime it extends
            return EXTENSION_WEIGHT * min(1.0, extension / max(1.0, runtime_s))
        purchases_per_second = bin_.machine.price_per_hour / HOUR / alternative
        # Declined where even the expected extension costs past DECLINE_FACTOR purchases: a job believed
        # to end first may not, and on a dear machine the chance is dear. The fitness stays the median's.
        # The purchase is priced at the median, as before: for a wide belief the expectation weighs up to
        # exp(sigma^2 / 2) more than it, which leans to buying (docs/scheduler-benchmark.md, "A belief is a spread").
        if judged * purchases_per_second > DECLINE_FACTOR:
            return None
        return EXTENSION_WEIGHT * extension * purchases_per_second

    def _host_room(self, job: JobRequest, bin_: Bin) -> bool:
        """Is this room, for a job the purchase buys hosts for, about the price of a box of its own (its share at
        most HOST_ROOM_FACTOR times that box)? A host is a bet that long jobs arriving meanwhile fill it, so
        such a job takes the room however long it outlasts the machine's other jobs, as it takes a host's
        of its host's type (`Timing.bought_usd`). Weighed against the small box that is its own host (a
        g4dn.2xlarge for 6 vCPUs), a months-long job declined three GPUs of a g4dn.12xlarge whose one job
        it was believed to outlast, and ran 1,028 hours on a box of its own beside them (seed 6 of the
        shared trace: docs/scheduler-benchmark.md, "Long jobs into room as cheap as their own")."""
        timing = self._timing
        if timing.host_hourly(job) is None:
            return False
        alone = timing.alone_hourly(job)
        return bool(alone) and share_hourly(job, bin_.capacity, bin_.gpu_memory, bin_.machine.price_per_hour) <= \
            HOST_ROOM_FACTOR * alone

    def _dear_room(self, job: JobRequest, group: Group) -> bool:
        """Does the job's share of a machine of the group cost more than DECLINE_FACTOR times an instance of
        its own, where the job may outlast the machine's other jobs (its runtime or their end unknown)?
        The same for every machine of the group, busy or empty."""
        if self._timing is None or (job.runtime is not None and group.timed):
            return False
        alone = self._timing.alone_hourly(job)
        return bool(alone) and share_hourly(job, group.capacity, group.gpu_memory, group.price_per_hour) > \
            DECLINE_FACTOR * alone

    def _kept_and_dear(self, job: JobRequest, bin_: Bin) -> bool:
        """Is the machine empty, one the release stage could give back, kept by the release delay (up for more
        than a boot and SETTLE_S), and dearer an hour than the cheapest instance the job could have alone?
        Unknown launch times are never judged."""
        timing, launched = self._timing, bin_.machine.launched_at
        if timing is None or launched is None or bin_.machine.key not in timing.givable or not bin_.untouched() \
                or timing.now - launched <= timing.boot_s + SETTLE_S:
            return False
        alone = timing.alone_hourly(job)
        return bool(alone) and bin_.machine.price_per_hour > alone * (1 + 1e-9)

    def _dear_groups(self, job: JobRequest, groups: list[Group]) -> frozenset[int]:
        """The indices in `groups` of those that are dear room for the job, memoized per constraints, size and
        whether a runtime is known (groups are only ever appended)."""
        key = (constraint_key(job), demand_of(job), job.gpu_memory_mib, job.runtime is None)
        seen, dear = self._dear.get(key, (0, frozenset()))
        if seen < len(groups):
            dear |= {n for n in range(seen, len(groups)) if self._dear_room(job, groups[n])}
            self._dear[key] = (len(groups), dear)
        return dear

    def place(self, job: JobRequest) -> Machine | None:
        need = demand_of(job)
        groups = self._groups_for(job)
        dear = self._dear_groups(job, groups)
        # Jobs passing over the same groups as dear room compete for the same machines: within them, a
        # job no larger than this one that found no room answers for it.
        memo_key, size = (constraint_key(job), dear), (*need, job.gpu_memory_mib)
        if any(all(a >= b for a, b in zip(size, small)) for small in self._no_room.get(memo_key, ())):
            return None  # a job no larger than this one already found no room
        best, best_key, declined = None, None, False
        for n, group in enumerate(groups):
            if n in dear:
                continue
            candidate = group.best_fit(job, need)
            if candidate is None:
                continue
            if self._kept_and_dear(job, candidate):
                declined = True  # the decline depends on the machine's age and price, not only the size
                continue
            penalty = REBALANCE_PENALTY if group.rebalance else 0.0
            if group.lifecycle == "spot" and job.submission_id in self._pool_submissions.get(group.pool, ()):
                penalty += SWEEP_SPREAD_PENALTY
            extension = self._extension_penalty(job, candidate)
            if extension is None:
                declined = True
                continue
            taken = (gpu_share(job, group.gpu_memory), need[1], need[2])
            fitness = candidate.fullness() + weighted_share(group.capacity, taken) - penalty - extension
            key = (-round(fitness, 12), candidate.price_per_gpu, candidate.machine.key)
            if best_key is None or key < best_key:
                best, best_key = (group, candidate), key
        if best is None:
            if not declined:  # no room at all (a decline depends on the runtime, not only the size)
                # Only the smallest sizes that found none: a size at least one of them covers is answered
                # by it, so the list stays short where every job has its own size (it grew by one a job,
                # and each placement scanned it all: 31 s of CPU for 10,000 jobs of random sizes).
                smallest = self._no_room.setdefault(memo_key, [])
                smallest[:] = [small for small in smallest if not all(a >= b for a, b in zip(small, size))]
                smallest.append(size)
            return None
        group, bin_ = best
        self._take(group, bin_, job, need)
        return bin_.machine
