"""The move stage: a machine emptied by moving its checkpointing jobs into room other machines already pay for.

Karpenter's consolidation deletes a node whose pods fit on the other nodes (`WhenEmptyOrUnderutilized`);
mlfleet does it only for jobs that keep the checkpoint contract (docs/jobs.md, "Checkpoints": a save every
interval and on SIGTERM). The scheduler stops their tasks with MOVED_REASON and the machine each goes to
(lambdas/scheduler/moving.py); the job-events function requeues them without counting an attempt
(`lambdas/job_events/decide.py`, `is_move`); the next run places each on that machine first
(`JobRequest.move_to`, live.py), and the release stage gives the emptied machine back.

Why: when jobs end, a machine's room stays paid for until its last job ends, and a long job can keep a
machine up alone. Moving the jobs of one machine into room elsewhere ends what that machine costs
(docs/scheduler-benchmark.md, "Consolidation").

A machine is proposed when all of these hold:
- every job on it declares a checkpoint interval, and no other task runs there;
- the release stage could give it back once empty (`release.givable_once_empty`), and the planner placed
  nothing on it this run;
- each of its jobs fits the room left on another running machine after this run's placements (not one
  emptied by this run, nor an empty one: moving onto an empty machine buys nothing), in the job's region
  and within its constraints; the job goes where it keeps a machine up the least past that machine's own
  jobs, then to the fullest;
- what the machine would cost until its jobs are expected to end, less what the targets cost for staying up
  longer, less the work a stop loses (STOP_LOSS_S of each job, priced at the instance it could have alone),
  is at least MIN_SAVING_USD.
A running job's expected end: its runtime belief given how long it has run (runtimes.expected_end), or,
with none, as long again as it has run; a machine's, its jobs' latest, the jobs this run placed included
(the planner passes them as running from now). A machine none of whose jobs the stage knows (tasks the
ledger does not show running) is taken to stay up whatever is moved there. At most MAX_MOVES_PER_RUN
machines a run, those that would cost most until their jobs end first (the most a move of each could save).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from .constraints import demand_of, gpus_of, take_gpu
from .model import Fleet, JobRequest, Machine
from .packer import HOUR, Bin, Packer
from .release import givable_once_empty
from .runtimes import expected_end

# A stop costs the job its container's stop (the save on SIGTERM; the task definition's stopTimeout is 110 s),
# the requeue and the next run's start (within a minute), and reading its checkpoint back.
STOP_LOSS_S = 240.0
MIN_SAVING_USD = 0.5
# A bound on what one run stops (cost safety: a wrong price or belief cannot stop every job at once).
MAX_MOVES_PER_RUN = 4


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
    targets: tuple[tuple[str, str], ...]  # (job_id, instance_id of the machine it goes to)
    hourly_usd: float  # the emptied machine's price
    saving_usd: float  # expected, until its jobs end
    reason: str


def expected_end_of(job: RunningJob, now: float) -> float:
    ran = max(0.0, now - job.started_at)
    if job.request.runtime is None:
        return now + ran  # nothing known: as long again as it has run
    return max(now, expected_end(job.started_at, job.request.runtime, now))


def _holds_others(machine: Machine, jobs: Sequence[RunningJob], catalog) -> bool:
    """Does the machine run a task besides these jobs (one the ledger does not show RUNNING yet, or not a
    job's)? Its tasks' jobs are known, and its GPUs (from the catalog and the tasks) are all theirs."""
    whole = sum(j.request.gpus for j in jobs if not j.request.shares_gpu)
    used = gpus_of(machine, catalog) - machine.free_gpus - len(machine.shared_gpus)
    return machine.jobs != {j.request.job_id for j in jobs} or used != whole


def propose_moves(machines: Sequence[Machine], fleets: Sequence[Fleet], catalog, running: Sequence[RunningJob],
                  room: Packer, alone_hourly: Callable[[JobRequest], float | None], now: float,
                  placed_on: Collection[str] = (), max_moves: int = MAX_MOVES_PER_RUN) -> tuple[Move, ...]:
    """The machines to empty, those that would cost most until their jobs end first. `room`: the live machines' room after this
    run's placements; the moves' jobs are placed in it (later stages must not count on it)."""
    by_machine: dict[str, list[RunningJob]] = {}
    for job in running:
        by_machine.setdefault(job.machine_key, []).append(job)
    known = {m.key: m for m in machines}
    ends = {key: max(expected_end_of(j, now) for j in jobs) for key, jobs in by_machine.items()}
    able = givable_once_empty(machines, fleets, catalog)
    candidates = []
    for key, jobs in by_machine.items():
        machine = known.get(key)
        if machine is None or key not in able or key in placed_on:
            continue
        if any(j.request.checkpoint_interval_s is None for j in jobs) or _holds_others(machine, jobs, catalog):
            continue
        candidates.append((-machine.price_per_hour * (ends[key] - now) / HOUR, key))
    settled: set[str] = set()  # emptied by a move of this run, or filled by one: in no other move
    moves = []
    for most, key in sorted(candidates):
        if len(moves) >= max_moves or -most < MIN_SAVING_USD:
            break  # the rest could not save enough even into room that costs nothing more
        if key in settled:
            continue
        move = _plan_move(known[key], by_machine[key], room, ends, settled, alone_hourly, now)
        if move is not None:
            settled.add(key)
            moves.append(move)
    return tuple(moves)


def _plan_move(machine: Machine, jobs: Sequence[RunningJob], room: Packer, ends: dict[str, float],
               settled: set[str], alone_hourly: Callable[[JobRequest], float | None], now: float) -> Move | None:
    """Where each job of the machine goes, placed in `room`, if the move saves MIN_SAVING_USD (else None,
    and `room` is left as it was). A machine jobs were moved onto is never emptied in the same run."""
    taken: dict[str, Bin] = {}  # this move's targets: their room as the move leaves it
    until = dict(ends)
    extra_usd = lost_usd = 0.0
    chosen = []
    for job in sorted(jobs, key=lambda j: (-j.request.gpus, -j.request.gpu_memory_mib, -j.request.vcpus,
                                           j.request.job_id)):
        need = demand_of(job.request)
        end = expected_end_of(job, now)
        fitting = []
        for bin_ in room.room_for(job.request):
            key = bin_.machine.key
            if key == machine.key or key in settled or bin_.machine.region != machine.region or bin_.untouched():
                continue
            bin_ = taken.get(key, bin_)
            if bin_.fits(job.request, need):
                fitting.append(bin_)
        if not fitting:
            return None
        # The machine it keeps up the least past its own jobs' end (unknown: never), then the fullest.
        def extension_usd(b: Bin) -> float:
            return b.machine.price_per_hour * max(0.0, end - until.get(b.machine.key, math.inf)) / HOUR
        target = min(fitting, key=lambda b: (extension_usd(b), -b.fullness(), b.machine.key))
        extra_usd += extension_usd(target)
        until[target.machine.key] = max(until.get(target.machine.key, math.inf), end)
        shadow = taken[target.machine.key] = copy.copy(target)
        shadow.shared = list(target.shared)
        shadow.free = [take_gpu(target.free[0], shadow.shared, target.gpu_memory, job.request),
                       target.free[1] - need[1], target.free[2] - need[2]]
        lost_usd += STOP_LOSS_S * (alone_hourly(job.request) or machine.price_per_hour) / HOUR
        chosen.append((job.request, target.machine))
    saving = machine.price_per_hour * (ends[machine.key] - now) / HOUR - extra_usd - lost_usd
    if saving < MIN_SAVING_USD:
        return None
    for request, target in chosen:
        room.place_on(request, target.key)
        settled.add(target.key)
    return Move(machine.key, machine.instance_id, tuple((r.job_id, t.instance_id) for r, t in chosen),
                machine.price_per_hour, round(saving, 2),
                f"{machine.instance_type} at ${machine.price_per_hour:.3f}/h emptied into room on "
                f"{len({t.key for _, t in chosen})} running machine(s): ${saving:.2f} less expected")
