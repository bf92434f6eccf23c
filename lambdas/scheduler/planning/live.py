"""Stage 1, live machines: each pending job onto the fittest machine that runs now.

Hard constraints: the machine is not draining (nor being removed), has the free GPUs, vCPUs and memory, its type fully
matches the job's pattern, its region and lifecycle are ones the job accepts. Among those, the fittest
wins (packer.py: fullest after placing, rebalance and sweep-spread penalties). Reserved jobs first take
an empty machine of their fleet (reservations.py). Jobs that would adopt an empty machine far dearer than
buying for them are taken back (adoption.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from .adoption import too_dear
from .constraints import Patterns, planning_order
from .model import JobRequest, Machine, Placement
from .packer import Packer, Timing
from .release import is_empty
from .reservations import place_reservations


def place_live(ordered: Sequence[JobRequest], machines: Sequence[Machine], catalog, patterns: Patterns,
               timing: Timing | None = None, alone: Callable[[JobRequest], float | None] | None = None
               ) -> tuple[list[Placement], list[JobRequest]]:
    """Placements onto live machines, and the jobs left (in planning order). `alone(job)`: $/h of buying
    for the job alone (None: the adoption rule is not applied)."""
    live = Packer(machines, catalog, lambda job, g: patterns.accepts(job, g.instance_type, g.region, g.lifecycle),
                  timing)
    reserved = place_reservations(ordered, live)
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
    if alone is None or not placements:
        return placements, unplaced
    by_id = {job.job_id: job for job in ordered}
    empty = {m.key: m.price_per_hour for m in machines if is_empty(m, catalog)}
    adopted: dict[str, list[JobRequest]] = {}
    for placement in placements:
        if placement.machine_key in empty:
            adopted.setdefault(placement.machine_key, []).append(by_id[placement.job_id])
    adopted = {key: jobs for key, jobs in adopted.items() if not any(j.reserved for j in jobs)}
    taken_back = too_dear(adopted, empty, alone)
    if not taken_back:
        return placements, unplaced
    return ([p for p in placements if p.job_id not in taken_back],
            planning_order([*unplaced, *(by_id[job_id] for job_id in taken_back)]))
