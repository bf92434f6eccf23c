"""The stage before placement, shares: which queued jobs are offered to placement and purchase, in what
order, under each team's quota and by weighted fair share between teams.

Teams come from the stack config (`mlfleet:teams`): a weight and, optionally, a quota of GPUs. Every job
belongs to one team; a job of no team, or of a team the config no longer lists, to the default team.

- Quota: a team never holds more GPUs than its `max_gpus`, counting its running and starting jobs, the
  queued jobs an earlier run bought an instance for (reserved) and what this run offers, even when
  capacity is free. A quota bounds a team's spend, and since running jobs are never preempted, GPUs lent
  past a quota could not be taken back before the borrower's jobs end. The GPUs of its earlier jobs that
  wait on kept machines (below) count too, though not held: the quota is theirs first, in the team's order.
- Fair share: among teams with queued work, capacity goes first to the team with the least use per
  weight: (use + GPUs reserved and offered this run) / weight. Use is what the team holds now, or its
  holding decayed over the configured half-life (`decayed_usage`) where that is more: a team that has just
  had more than its share pays it back, as with AWS Batch's shareDecaySeconds and Kueue's admission fair
  sharing; a half-life of 0 counts only what it holds now. Weights share what quotas leave: a team's
  unused share goes to the teams that have work. GPUs only: they are what the fleets are bought for and
  priced by (vCPUs and memory come with them on GPU instances), and what quotas and reports count. A job
  sharing a GPU counts as the part of one its memory is, on the smallest GPU a fleet or a live machine able
  to hold it has (the most it could take).
- Within a team: higher priority first, then the oldest. A job gains one priority step per AGING_S it
  waits, up to MAX_PRIORITY: newer jobs age too, so only the cap lets the older catch up. A job of priority
  p is at MAX_PRIORITY after (9 - p) x AGING_S, and then ahead of every newer job of its team (the oldest
  first among equals): no newer job stays ahead of it for more than (9 - p + 1) x AGING_S.
- Jobs the move stage stopped (moves.py), back in the queue with their room still there, are offered first
  and counted, as reserved ones: they held those GPUs a moment ago, and a share or a priority taking their
  room would have stopped them for it.
- No preemption: a running job is never stopped to make room. Shares converge as running jobs end,
  within the longest job of the team over its share; stopping a training loses its work since its last
  checkpoint and spends an attempt.

How much room there is comes from a model of it: the live machines (best fit, as the live stage packs),
the instances already launching, and what the fleet caps and the dollar cap still allow buying (the
cheapest fleet able to run the job). Jobs are walked in fair-share order; each is offered if the model
has room for it, and waits otherwise. Two rules keep a waiting job from being overtaken forever:
- a waiting job may keep the live machine closest to holding it once its jobs end (the most free GPUs):
  nothing else is placed there this run, so a job larger than what frees up at a time (4 GPUs among
  1-GPU jobs) gets its turn, as Slurm's backfill reserves for its top jobs. A kept machine counts for its
  team as if the job ran, so a team keeps machines while it is furthest below its share (and one for
  its first waiting job, for the order within the team); the rest stays for the others;
- once a job waits on the dollar cap alone, nothing more is bought for the jobs after it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ...jobs.spec import PRIORITIES
from .constraints import Patterns, capacity_of, constraint_key, demand_of, gpu_share, holds
from .fleets import box_machine, may_run, purchase_options
from .model import NO_FLEET, SCALING_PAUSED, Fleet, JobRequest, Limits, Machine, held_by_a_cap
from .packer import Packer

DEFAULT_TEAM = "default"
# One priority step gained per hour of waiting, up to the highest priority a job may have: a job of priority 0
# is ahead of every newer job of its team after nine hours, as they age too and escalate no further, while a
# few levels still outweigh hours of waiting.
AGING_S = 3600.0
MAX_PRIORITY = PRIORITIES[-1]


@dataclass(frozen=True)
class Team:
    weight: float = 1.0
    max_gpus: int | None = None  # None: no quota


@dataclass(frozen=True)
class Shares:
    """What the stage knows of the teams: their policies and what they hold and have used."""
    teams: Mapping[str, Team] = field(default_factory=dict)
    # Takes the jobs of no team and of teams the config no longer lists (weight 1, no quota, unless listed).
    default_team: str = DEFAULT_TEAM
    held_gpus: Mapping[str, float] = field(default_factory=dict)  # by each team's running and starting jobs
    usage: Mapping[str, float] = field(default_factory=dict)  # decayed_usage of the held GPUs
    now: float = 0.0

    def team_of(self, job: JobRequest) -> str:
        return job.team if job.team in self.teams else self.default_team

    def policy(self, team: str) -> Team:
        return self.teams.get(team, Team())


@dataclass(frozen=True)
class Offer:
    jobs: tuple[JobRequest, ...]  # offered to placement and purchase, in the order given
    waiting: tuple[tuple[str, str], ...]  # (job_id, reason) of the others
    kept: frozenset[str]  # machine keys kept for a waiting job: the planner places nothing on them
    capped: frozenset[str] = frozenset()  # ids of the waiting jobs a fleet's cap or the dollar cap holds back


def decayed_usage(previous: Mapping[str, float], previous_at: float | None, held: Mapping[str, float],
                  now: float, half_life_s: float) -> dict[str, float]:
    """Each team's GPUs held, averaged with exponentially decaying weights: U <- U*k + H*(1-k), with
    k = 0.5 ** (elapsed / half-life) (Kueue's admission fair sharing samples usage the same way). Without
    a half-life or a previous value, the GPUs held now."""
    if half_life_s <= 0 or previous_at is None:
        return {team: float(gpus) for team, gpus in held.items() if gpus}
    keep = 0.5 ** (max(0.0, now - previous_at) / half_life_s)
    usage = {team: previous.get(team, 0.0) * keep + held.get(team, 0) * (1 - keep)
             for team in set(previous) | set(held)}
    return {team: value for team, value in usage.items() if value >= 1e-3}


def queue_order(job: JobRequest, now: float) -> tuple:
    """A team's queue: higher priority first, one step more per AGING_S waited (MAX_PRIORITY at most), then
    the oldest."""
    aged = min(MAX_PRIORITY, job.priority + math.floor(max(0.0, now - job.submitted_at) / AGING_S))
    return -aged, job.submitted_at, job.job_id


@dataclass
class _Queue:
    name: str
    policy: Team
    jobs: list[JobRequest]
    holds: float  # GPUs held, reserved and offered this run
    use: float  # the decayed use where more than what is held
    promised: float = 0.0  # GPUs of its waiting jobs that keep a machine
    next: int = 0

    def score(self) -> float:
        return (self.use + self.holds + self.promised) / self.policy.weight


class _Room:
    """A model of the room this run has: live machines, instances launching, what the caps allow buying."""

    def __init__(self, machines: Sequence[Machine], fleets: Sequence[Fleet], catalog, limits: Limits, prices,
                 patterns: Patterns):
        self.catalog = catalog
        self.limits = limits
        self.patterns = patterns
        # Never placed onto, so never kept for a job either: drained by AWS, being removed (docs/removal.md), degraded.
        self.machines = [m for m in machines if not m.closed]
        # The live stage's own index: the model packs live machines as that stage will.
        self.live = Packer(self.machines, catalog,
                           lambda job, g: patterns.accepts(job, g.instance_type, g.region, g.lifecycle))
        self.options = purchase_options(fleets, catalog, prices)
        index = {(o.fleet.region, o.fleet.fleet): i for i, o in enumerate(self.options)}
        self.coming = Packer([box_machine(catalog, o, f"launching:{o.fleet.asg_name}:{n}")
                              for o in self.options for n in range(o.fleet.pending_instances)], catalog,
                             lambda job, g: may_run(job, self.options[index[(g.region, g.fleet)]], patterns))
        self.room = [o.room for o in self.options]
        # Shareable GPU sizes a job may be placed on or bought: a live machine's GPU may be smaller than any
        # fleet's (a type the fleets no longer buy).
        self.gpu_sizes = sorted({o.gpu_memory for o in self.options} | {m.gpu_memory_mib for m in self.machines})
        self.budget = limits.max_hourly_usd - limits.current_hourly_usd
        self.buying = True
        self.touched: set[str] = set()
        self.kept: list[Machine] = []
        self.bought = 0
        self._unkeepable: set[tuple] = set()

    def take_moved(self, job: JobRequest) -> bool:
        """Room for a job the move stage stopped on the machine it chose (`move_to`), as the live stage places
        it (live.py place_moved); False when that machine is gone, closed or full."""
        target = next((m for m in self.machines if m.instance_id == job.move_to), None)
        if target is None or not self.live.place_on(job, target.key):
            return False
        self.touched.add(target.key)
        return True

    def take(self, job: JobRequest) -> str | None:
        """Room for the job (None), or why there is none."""
        machine = self.live.place(job)
        if machine is not None:
            self.touched.add(machine.key)
            return None
        if self.coming.place(job) is not None:
            return None
        return self._buy(job)

    def gpus_of(self, job: JobRequest) -> float:
        """What the job counts for its team's quota and share: its GPUs, or for a job sharing a GPU the part
        of one its memory is on the smallest GPU of a fleet or live machine able to hold it (the most it could
        take)."""
        if not job.shares_gpu:
            return float(job.gpus)
        smallest = next((size for size in self.gpu_sizes if size >= job.gpu_memory_mib), None)
        return gpu_share(job, smallest) if smallest else 1.0

    def _buy(self, job: JobRequest) -> str | None:
        able = [i for i, o in enumerate(self.options) if o.holds(job) and may_run(job, o, self.patterns)]
        if not able:
            return NO_FLEET
        if not self.limits.scaling_allowed:
            return SCALING_PAUSED
        below_cap = [i for i in able if self.room[i] > 0]
        if not below_cap:
            fleets = ", ".join(f"{self.options[i].fleet.fleet} in {self.options[i].fleet.region}" for i in able)
            return f"no room, and the fleets that can run it are at their caps ({fleets})"
        if not self.buying:
            return "no room, and what the dollar cap allows goes to jobs ahead of it in fair-share order"
        affordable = [i for i in below_cap if self.options[i].price <= self.budget + 1e-9]
        if not affordable:
            self.buying = False  # what the cap frees goes to this job first
            spent = self.limits.max_hourly_usd - self.budget
            return (f"no room, and buying an instance for it would pass the cap of "
                    f"${self.limits.max_hourly_usd:g}/h (now ${spent:.2f}/h)")
        i = min(affordable, key=lambda n: (self.options[n].price, self.options[n].fleet.region,
                                           self.options[n].fleet.fleet))
        option = self.options[i]
        key = f"new:{option.fleet.asg_name}:{self.bought}"
        self.bought += 1
        self.coming.add(box_machine(self.catalog, option, key))
        self.room[i] -= 1
        self.budget -= option.price
        return None if self.coming.place_on(job, key) else NO_FLEET

    def keep_for(self, job: JobRequest) -> Machine | None:
        """The live machine closest to holding the job once its jobs end (most free GPUs, untouched and not
        kept yet this run, healthy), kept from every other job of this run."""
        memo = (constraint_key(job), demand_of(job), job.gpu_memory_mib)
        if memo in self._unkeepable:
            return None
        candidates = [m for m in self.machines
                      if m.key not in self.touched and not m.rebalance_recommended and m.free_gpus >= 1
                      and holds(capacity_of(self.catalog, m.instance_type), m.gpu_memory_mib, job)
                      and self.patterns.accepts(job, m.instance_type, m.region, m.lifecycle)]
        if not candidates:
            self._unkeepable.add(memo)
            return None
        machine = min(candidates, key=lambda m: (-m.free_gpus, -m.free_vcpus, -m.free_memory_mib, m.key))
        # Fill what is free on it, so that the model places nothing else there.
        self.live.place_on(JobRequest(f"kept-for:{job.job_id}", "", machine.free_gpus, machine.free_vcpus,
                                      machine.free_memory_mib), machine.key)
        self.kept.append(machine)
        self.touched.add(machine.key)
        return machine


def offer_jobs(jobs: Sequence[JobRequest], machines: Sequence[Machine], fleets: Sequence[Fleet], catalog,
               limits: Limits, shares: Shares, *, prices: Mapping[tuple[str, str], float] | None = None,
               patterns: Patterns | None = None) -> Offer:
    """The jobs to offer to placement and purchase this run, and why the others wait."""
    patterns = patterns or Patterns()
    room = _Room(machines, fleets, catalog, limits, prices, patterns)
    queues: dict[str, _Queue] = {}
    offered: list[JobRequest] = []
    ordered = sorted(jobs, key=lambda j: queue_order(j, shares.now))
    # Stopped by the move stage into room it chose, and back in the queue: it held its GPUs a moment ago,
    # within the quota, and goes back there before any other job (live.py), or it was stopped for a share.
    moved = {job.job_id for job in ordered if job.move_to is not None and room.take_moved(job)}
    for job in ordered:
        name = shares.team_of(job)
        queue = queues.get(name)
        if queue is None:
            held = shares.held_gpus.get(name, 0)
            queue = queues[name] = _Queue(name, shares.policy(name), [], held,
                                          max(0.0, shares.usage.get(name, 0.0) - held))
        if job.job_id in moved or job.reserved is not None:
            # Moved, or bought for by an earlier run, within the quota then: offered, and counted.
            if job.job_id not in moved:
                room.take(job)
            offered.append(job)
            queue.holds += room.gpus_of(job)
        else:
            queue.jobs.append(job)

    waiting: list[tuple[str, str]] = []
    capped: set[str] = set()
    keeping: set[str] = set()
    active = {name: q for name, q in queues.items() if q.jobs}
    while active:
        queue = min(active.values(), key=lambda q: (q.score(), q.name))
        job = queue.jobs[queue.next]
        queue.next += 1
        quota = queue.policy.max_gpus
        gpus = room.gpus_of(job)
        if quota is not None and queue.holds + queue.promised + gpus > quota + 1e-9:
            # The team's next jobs wait for its own jobs to end, so that its quota frees for this one. The GPUs
            # promised to its earlier waiting jobs (kept machines) count against the quota but are not held.
            kept = f", {queue.promised:g} more are kept for its earlier jobs waiting for room," if queue.promised else ""
            reason = (f"team {queue.name} is at its quota: it holds {queue.holds:g} of its {quota} GPUs{kept} "
                      f"and this job needs {gpus:g}")
            waiting += [(j.job_id, reason) for j in queue.jobs[queue.next - 1:]]
            del active[queue.name]
            continue
        if queue.next >= len(queue.jobs):
            del active[queue.name]
        why = room.take(job)
        if why is None:
            offered.append(job)
            queue.holds += gpus
            continue
        if held_by_a_cap(why):
            capped.add(job.job_id)
        # Its first waiting job may keep a machine; more only while another team still competes (the
        # team's score, kept GPUs included, then says how far below its share it is).
        kept = None
        if queue.name not in keeping or any(name != queue.name for name in active):
            kept = room.keep_for(job)
        if kept is not None:
            keeping.add(queue.name)
            queue.promised += gpus
            why = (f"no machine has room for it now; {kept.instance_id} ({kept.instance_type}, {kept.region}) "
                   f"is kept for it as its jobs end (team {queue.name} is next in fair-share order)")
        waiting.append((job.job_id, why))
    order = {job.job_id: n for n, job in enumerate(jobs)}
    return Offer(tuple(sorted(offered, key=lambda j: order[j.job_id])), tuple(sorted(waiting)),
                 frozenset(m.key for m in room.kept), frozenset(capped))
