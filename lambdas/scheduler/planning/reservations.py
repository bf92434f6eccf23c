"""Stage 0, reservations: jobs an earlier run bought an instance for start together on it.

Jobs carrying the same `JobRequest.reserved` were planned onto one new instance. Once an empty,
healthy machine of that fleet is usable, they start on it together: the packing the purchase chose is
the packing that runs. Repacked job by job it may not fit, and the run would buy again for what is left
over. A reservation is a preference, never a promise: with no empty machine (the launch failed, the
instance was reclaimed), its jobs go through the later stages like any other. The launching stage
applies the same rule to the instances still on their way.
"""

from __future__ import annotations

from collections.abc import Sequence

from .model import JobRequest, Machine, Reservation
from .packer import Packer


def reserved_groups(jobs: Sequence[JobRequest]) -> list[tuple[Reservation, list[JobRequest]]]:
    """The jobs of each reservation, in the order given, reservations in a fixed order."""
    groups: dict[Reservation, list[JobRequest]] = {}
    for job in jobs:
        if job.reserved is not None:
            groups.setdefault(job.reserved, []).append(job)
    return sorted(groups.items(), key=lambda item: (item[0].region, item[0].fleet, item[0].box))


def place_reservations(jobs: Sequence[JobRequest], packer: Packer) -> dict[str, Machine]:
    """Each reservation's jobs onto one empty machine of its fleet, where there is one: {job_id: machine}."""
    placed: dict[str, Machine] = {}
    for reservation, group in reserved_groups(jobs):
        machine = packer.claim_empty(reservation.region, reservation.fleet)
        for job in group if machine is not None else ():
            if packer.place_on(job, machine.key):
                placed[job.job_id] = machine
    return placed
