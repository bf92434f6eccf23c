"""Stage 1, live machines: each pending job onto the fittest machine that runs now.

Hard constraints: the machine is not draining (nor being removed, nor degraded), has the free GPUs, vCPUs and memory, its type fully
matches the job's pattern, its region and lifecycle are ones the job accepts. Among those, the fittest
wins (packer.py: fullest after placing, rebalance and sweep-spread penalties; machines a job would keep
up at more than twice the price of an instance of its own declined). Jobs the move stage stopped first
take the room it moved them to (moves.py); reserved jobs then take an empty machine of their fleet
(reservations.py).
"""

from __future__ import annotations

from collections.abc import Sequence

from .constraints import Patterns
from .model import JobRequest, Machine, Placement
from .packer import Packer, Timing
from .reservations import place_reservations


def place_live(ordered: Sequence[JobRequest], machines: Sequence[Machine], catalog, patterns: Patterns,
               timing: Timing | None = None, moving: Sequence[JobRequest] = ()) -> tuple[list[Placement], list[JobRequest], Packer]:
    """Placements onto live machines, the jobs left (in planning order), and the machines' room after them.
    `moving`: jobs whose move is under way (their task stopping, `move_to` set): the room they go to is held
    for them first, so that no other job takes it before they are back in the queue."""
    live = Packer(machines, catalog, lambda job, g: patterns.accepts(job, g.instance_type, g.region, g.lifecycle),
                  timing)
    place_moved(moving, machines, live)
    reserved = place_moved(ordered, machines, live)
    reserved.update(place_reservations([j for j in ordered if j.job_id not in reserved], live))
    placements = [Placement(job_id, m.key, m.region, m.fleet) for job_id, m in reserved.items()]
    unplaced: list[JobRequest] = []
    for job in ordered:
        if job.job_id in reserved:
            continue
        machine = live.place(job)
        if machine is None:
            unplaced.append(job)
        else:
            placements.append(Placement(job.job_id, machine.key, machine.region, machine.fleet))
    return placements, unplaced, live


def place_moved(ordered: Sequence[JobRequest], machines: Sequence[Machine], live: Packer) -> dict[str, Machine]:
    """Jobs the move stage stopped go to the machine it chose for them (`JobRequest.move_to`), while it runs
    and they fit there: the room that made the move worth it. Otherwise they go on like any job."""
    by_instance = {m.instance_id: m for m in machines}
    placed = {}
    for job in ordered:
        target = by_instance.get(job.move_to) if job.move_to else None
        if target is not None and live.place_on(job, target.key):
            placed[job.job_id] = target
    return placed
