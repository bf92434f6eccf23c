"""Headroom: room kept ready for jobs like the last ones that had to wait for an instance to boot.

Opt-in (`mlfleet:headroomWindowMinutes`, 0 by default). Releasing empty machines after the boot time is
what makes the scheduler cheap over time, and it is also why a job that no running machine fits waits
for a boot (about three minutes). Headroom trades dollars for that wait, as Kubernetes clusters do with
low-priority placeholder pods that new pods preempt (cluster-autoscaler's FAQ, "How can I configure
overprovisioning"): the shapes of the last `max_jobs` jobs the scheduler bought instances for, within
the last `window_s`, become placeholder requests. The planner plans them after every real job
(planner.py), so they never take room, a launching instance or a dollar from one: a live machine that
fits a placeholder is not given back, and what no machine fits is bought within the caps left. A real
job a cap holds back takes back what placeholders keep (yield_to): the next run buys for it. Once no
job has waited for a boot for a whole window, there are no placeholders and the machines kept for them
go back after the release delay. The benchmark measures what it costs (docs/scheduler-benchmark.md,
"Headroom").
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from .constraints import Patterns
from .fleets import Option, fleet_lifecycle, may_run
from .launching import place_on_launching
from .model import Fleet, JobRequest, Limits, Reservation, ScaleOut
from .purchase import purchase

# The bounds of mlfleet:headroomWindowMinutes and mlfleet:headroomMaxJobs, checked by the stack config
# (components/config/model.py) and the scheduler's settings (handler.py): a day's window, and a ledger item
# far below DynamoDB's 400 KB.
MAX_WINDOW_MINUTES, MAX_JOBS = 24 * 60, 100
PLACEHOLDER_PREFIX = "headroom:"  # no job id can take it (lambdas/jobs/spec.py _JOB_ID: sub-<digits>-<hex>-<n>)
PLACEHOLDER_SUBMISSION = "headroom"


@dataclass(frozen=True)
class RecentWait:
    """A job the scheduler bought an instance for, when, and what it asked for (what a placeholder asks)."""
    at: float  # epoch seconds
    gpus: int
    vcpus: float
    memory_mib: int
    gpu_memory_mib: int = 0
    instance_type_pattern: str | None = None
    regions: tuple[str, ...] = ()
    lifecycle: str | None = None

    @classmethod
    def of(cls, job: JobRequest, at: float, bought: str | None = None) -> RecentWait:
        """`bought`: the lifecycle of the fleet it was bought from when that is on-demand (the lifecycle stage
        may have sent it there: a placeholder on spot would not hold the next such job)."""
        return cls(at, job.gpus, job.vcpus, job.memory_mib, job.gpu_memory_mib, job.instance_type_pattern,
                   job.regions, job.lifecycle or bought)


def is_placeholder(job_id: str) -> bool:
    return job_id.startswith(PLACEHOLDER_PREFIX)


def placeholders(recent: Sequence[RecentWait], now: float, window_s: float, max_jobs: int) -> list[JobRequest]:
    """The placeholder requests for this run: the newest `max_jobs` waits of the last `window_s`."""
    return [JobRequest(f"{PLACEHOLDER_PREFIX}{n}", PLACEHOLDER_SUBMISSION, w.gpus, w.vcpus, w.memory_mib,
                       w.instance_type_pattern, regions=w.regions, lifecycle=w.lifecycle, submitted_at=w.at,
                       gpu_memory_mib=w.gpu_memory_mib)
            for n, w in enumerate(_newest(recent, now, window_s, max_jobs))]


def remember(recent: Sequence[RecentWait], jobs: Iterable[JobRequest], scale_outs: Iterable[ScaleOut], now: float,
             window_s: float, max_jobs: int, fleets: Iterable[Fleet] = ()) -> list[RecentWait]:
    """The waits to keep after this run: those still in the window, and the jobs this run bought for that
    had no instance bought for them before (a reserved job bought for again is the same wait), oldest
    first, at most `max_jobs`. A job bought on-demand (`fleets`: the plan's) waits as an on-demand one."""
    by_id = {job.job_id: job for job in jobs}
    on_demand = {(f.region, f.fleet) for f in fleets if fleet_lifecycle(f) == "on-demand"}
    new = [RecentWait.of(by_id[job_id], now, "on-demand" if (scale_out.region, scale_out.fleet) in on_demand else None)
           for scale_out in scale_outs for job_id in scale_out.for_jobs
           if job_id in by_id and by_id[job_id].reserved is None]
    return _newest([*recent, *new], now, window_s, max_jobs)


def _newest(waits: Sequence[RecentWait], now: float, window_s: float, max_jobs: int) -> list[RecentWait]:
    """The newest `max_jobs` of the waits (oldest first) within the last `window_s`."""
    return [w for w in waits if now - w.at < window_s][-max_jobs:] if window_s > 0 and max_jobs > 0 else []


def yield_to(capped: Sequence[JobRequest], options: Sequence[Option], bought: Sequence[ScaleOut],
             patterns: Patterns) -> frozenset[tuple[str, str]] | None:
    """What placeholders give up to the real jobs a cap holds back: None (everything) when one waits on the
    dollar cap (a fleet that may run it still has room), else the fleets those jobs may run in, whose caps
    the machines kept there count against. Without this, a machine kept for a placeholder would hold the
    dollars or the slot a waiting job needs for the whole window."""
    added = _added(bought)
    fleets: set[tuple[str, str]] = set()
    for job in capped:
        for o in options:
            if o.holds(job) and may_run(job, o, patterns):
                key = (o.fleet.region, o.fleet.fleet)
                if o.room - added.get(key, 0) > 0:
                    return None
                fleets.add(key)
    return frozenset(fleets)


def buy_ahead(spare: Sequence[JobRequest], options: Sequence[Option], bought: Sequence[ScaleOut],
              bought_for: Sequence[JobRequest], catalog, patterns: Patterns, limits: Limits) -> list[ScaleOut]:
    """Instances for the placeholders nothing holds yet. First the room this run's purchases leave beside
    the jobs they were bought for (each new instance as a launching one reserved for its box, as the next
    run will see it); then new instances, within what the fleets' caps and the dollar cap leave after
    those purchases, each for no job (nothing is reserved on it)."""
    added = _added(bought)
    if bought:
        by_id = {job.job_id: job for job in bought_for}
        boxed = [replace(by_id[job_id], reserved=Reservation(s.region, s.fleet, f"ahead:{n}"))
                 for s in bought for n, box in enumerate(s.boxes) for job_id in box]
        new = [replace(o, fleet=replace(o.fleet, pending_instances=added.get((o.fleet.region, o.fleet.fleet), 0)))
               for o in options]
        left, _ = place_on_launching([*boxed, *spare], new, catalog, patterns)
        spare = [job for job in left if is_placeholder(job.job_id)]
    if not spare:
        return []
    rooms = [replace(o, room=o.room - added.get((o.fleet.region, o.fleet.fleet), 0)) for o in options]
    limits = replace(limits, current_hourly_usd=limits.current_hourly_usd + sum(s.hourly_usd for s in bought))
    scale_outs, _ = purchase(spare, rooms, catalog, patterns, limits)
    return [replace(s, for_jobs=(), boxes=()) for s in scale_outs]


def _added(bought: Sequence[ScaleOut]) -> dict[tuple[str, str], int]:
    """Instances this run's purchases add to each fleet (region, fleet)."""
    added: dict[tuple[str, str], int] = {}
    for scale_out in bought:
        added[scale_out.region, scale_out.fleet] = added.get((scale_out.region, scale_out.fleet), 0) + scale_out.add_instances
    return added
