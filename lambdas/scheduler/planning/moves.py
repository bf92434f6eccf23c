"""The move stage: machines far dearer than their checkpointing jobs need, emptied by moving the jobs.

Karpenter's consolidation replaces an underused node by a cheaper one and moves its pods; mlfleet does it
only for jobs that keep the checkpoint contract (docs/jobs.md, "Checkpoints"): the scheduler stops their
tasks (SIGTERM, as at a spot notice), the job-events function requeues them without counting an attempt
(`lambdas/job_events/decide.py`, MOVED_REASON), and the next runs place them as any queued job (room on
other machines, or an instance of their own). Nothing is placed on the emptied machine meanwhile unless it
is what a job needs (the kept-machine rule, packer.py), and the release stage gives it back.

Why: a machine bought for several jobs, or a host bought for a long job (purchase.py), can be left with
one long job and room nobody uses; until that job ends, it pays the machine for what an instance of its
own would run for a fraction (docs/scheduler-benchmark.md, "Moving checkpointing jobs").

A machine is proposed when all of these hold:
- every job on it declares a checkpoint interval, and each has run for MIN_RUN_S (a move's boot and lost
  work are then small beside what is left, and a job moves at most once in that time);
- the release stage could give it back once empty (`release.givable`'s rules: in a known group above its
  minimum, not protected, draining or being removed), and the planner placed nothing on it this run;
- it costs more than MOVE_FACTOR times the instances its jobs could have alone, and what it would cost
  until its jobs are expected to end, less what those instances would cost for the same time and a boot,
  less the work lost since each job's last periodic checkpoint (priced at its own instance), is at least
  MIN_SAVING_USD.
A job's expected end: its runtime belief given how long it has run (runtimes.expected_end), or, with
none, as long again as it has run. At most MAX_MOVES_PER_RUN machines a run, the largest saving first.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from .constraints import capacity_of
from .model import Fleet, JobRequest, Machine
from .release import is_empty
from .runtimes import expected_end

MIN_RUN_S = 3600.0
# Dearer than the jobs' own instances by more than half: below that, the saving is within what the next
# jobs' room on the machine is worth, and a move would risk undoing a host bet still in play.
MOVE_FACTOR = 1.5
MIN_SAVING_USD = 1.0
# A bound on what one run stops (cost safety: a wrong price or belief cannot stop every job at once).
MAX_MOVES_PER_RUN = 4
HOUR = 3600.0


@dataclass(frozen=True)
class RunningJob:
    """A job running on a machine: its request (size, constraints, runtime belief, checkpoint interval) and
    when its current run started (epoch seconds)."""
    request: JobRequest
    machine_key: str
    started_at: float


@dataclass(frozen=True)
class Move:
    machine_key: str
    instance_id: str
    job_ids: tuple[str, ...]
    hourly_usd: float  # the machine's price
    alone_hourly_usd: float  # the jobs' own instances, together
    saving_usd: float  # expected, until the jobs end
    reason: str


def _expected_left(job: RunningJob, now: float) -> float:
    ran = max(0.0, now - job.started_at)
    if job.request.runtime is None:
        return ran  # nothing known: as long again as it has run
    return max(0.0, expected_end(job.started_at, job.request.runtime, now) - now)


def _lost_s(job: RunningJob, now: float) -> float:
    """Work since the last periodic checkpoint (the job may save on SIGTERM too; not counted on)."""
    interval = job.request.checkpoint_interval_s or 0.0
    return (max(0.0, now - job.started_at) % interval) if interval > 0 else 0.0


def _holds_others(machine: Machine, jobs: Sequence[RunningJob], catalog) -> bool:
    """Does the machine run a task besides these jobs (one the ledger does not show RUNNING yet, or not a
    job's)? Its tasks' jobs are known, and its GPUs (from the catalog and the tasks) are all theirs."""
    whole = sum(j.request.gpus for j in jobs if not j.request.shares_gpu)
    used = capacity_of(catalog, machine.instance_type)[0] - machine.free_gpus - len(machine.shared_gpus)
    return machine.jobs != {j.request.job_id for j in jobs} or used != whole


def _may_give_back(machines: Sequence[Machine], fleets: Sequence[Fleet], catalog) -> set[str]:
    """Busy machines the release stage could give back once empty: in a known group with machines above its
    minimum that the group's empty ones do not already take up, and not protected, draining or removing."""
    groups = {(f.region, f.fleet): f for f in fleets}
    empty: dict[tuple[str, str], int] = {}
    for machine in machines:
        if is_empty(machine, catalog):
            empty[machine.region, machine.fleet] = empty.get((machine.region, machine.fleet), 0) + 1
    found = set()
    for machine in machines:
        fleet = groups.get((machine.region, machine.fleet))
        if fleet is None or machine.protected or machine.draining or machine.removing:
            continue
        if fleet.current_instances - fleet.min_size - empty.get((machine.region, machine.fleet), 0) > 0:
            found.add(machine.key)
    return found


def propose_moves(machines: Sequence[Machine], fleets: Sequence[Fleet], catalog, running: Sequence[RunningJob],
                  alone_hourly: Callable[[JobRequest], float | None], now: float, boot_s: float,
                  placed_on: Collection[str] = (), max_moves: int = MAX_MOVES_PER_RUN) -> tuple[Move, ...]:
    """The machines whose checkpointing jobs to move, the largest expected saving first."""
    by_machine: dict[str, list[RunningJob]] = {}
    for job in running:
        by_machine.setdefault(job.machine_key, []).append(job)
    known = {m.key: m for m in machines}
    able = _may_give_back(machines, fleets, catalog)
    moves = []
    for key in sorted(by_machine):
        machine, jobs = known.get(key), by_machine[key]
        if machine is None or key not in able or key in placed_on:
            continue
        if any(j.request.checkpoint_interval_s is None or now - j.started_at < MIN_RUN_S for j in jobs):
            continue
        if _holds_others(machine, jobs, catalog):
            continue  # a task the ledger does not show as running (starting, or not a job): it would stay
        prices = [alone_hourly(j.request) for j in jobs]
        if any(p is None for p in prices):
            continue  # nothing to buy for one of them: it would only wait
        alone = sum(prices)
        if machine.price_per_hour <= MOVE_FACTOR * alone:
            continue
        left = max(_expected_left(j, now) for j in jobs)
        lost_usd = sum(_lost_s(j, now) * p for j, p in zip(jobs, prices)) / HOUR
        saving = (machine.price_per_hour * left - alone * (left + boot_s)) / HOUR - lost_usd
        if saving < MIN_SAVING_USD:
            continue
        moves.append(Move(key, machine.instance_id, tuple(sorted(j.request.job_id for j in jobs)),
                          machine.price_per_hour, round(alone, 4), round(saving, 2),
                          f"{machine.instance_type} at ${machine.price_per_hour:.3f}/h for jobs whose own instances "
                          f"cost ${alone:.3f}/h: ${saving:.2f} less expected until they end"))
    moves.sort(key=lambda m: (-m.saving_usd, m.machine_key))
    return tuple(moves[:max_moves])
