"""Stage 2, instances already launching: jobs wait for capacity that is on its way instead of buying more.

A fleet's desired capacity minus its usable machines (registered with ECS, not draining) is capacity
on its way: instances booting, joining the cluster, or replacing a reclaimed one. Each counts as an
empty machine of the fleet's guaranteed size; each first takes the reservation it was bought for, then
jobs that fit pack first-fit decreasing. Without this, each one-minute run would buy again for jobs
whose instances are still booting (a GPU instance takes minutes to join), until the cap.
"""

from __future__ import annotations

from collections.abc import Sequence

from .constraints import Patterns
from .fleets import Option, box_machine, may_run
from .model import JobRequest, Machine
from .packer import Packer
from .reservations import place_reservations


def place_on_launching(jobs: Sequence[JobRequest], options: Sequence[Option], catalog,
                       patterns: Patterns) -> tuple[list[JobRequest], list[tuple[str, str]]]:
    """The jobs left, and the waiting reasons of those held by a launching instance."""
    index_of = {(o.fleet.region, o.fleet.fleet): i for i, o in enumerate(options)}
    boxes = Packer([box_machine(catalog, o, f"launching:{o.fleet.asg_name}:{n}")
                    for o in options for n in range(o.fleet.pending_instances)], catalog,
                   lambda job, group: may_run(job, options[index_of[(group.region, group.fleet)]], patterns))
    placed: dict[str, Machine] = place_reservations(jobs, boxes)
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
