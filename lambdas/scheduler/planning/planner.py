"""The plan: where each pending job goes, and what to buy for the rest. One pure function.

Plain data in (pending jobs, live machines, purchasable fleets, the catalog, the limits), a `Plan` out.
No AWS: the scheduler Lambda reads the world and acts on the plan; the benchmark runs this same code.
Each stage serves the jobs the previous ones could not, in planning order (largest first, oldest
first among equals):

0. reservations.py  jobs an earlier run bought an instance for start together on it
1. live.py          the fittest live machine
2. launching.py     instances already asked for and still launching
3. purchase.py      what to buy, within each fleet's cap and the dollar cap
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from lambdas.scheduler.planning.constraints import Patterns, planning_order
from lambdas.scheduler.planning.fleets import purchase_options
from lambdas.scheduler.planning.launching import place_on_launching
from lambdas.scheduler.planning.live import place_live
from lambdas.scheduler.planning.model import ADMISSION_CLOSED, Fleet, JobRequest, Limits, Machine, Plan, ScaleOut
from lambdas.scheduler.planning.purchase import purchase


def plan(jobs: Sequence[JobRequest], machines: Sequence[Machine], fleets: Sequence[Fleet], catalog,
         limits: Limits, *, prices: Mapping[tuple[str, str], float] | None = None) -> Plan:
    if not limits.admission_open:
        return Plan((), (), tuple((j.job_id, ADMISSION_CLOSED) for j in sorted(jobs, key=lambda j: j.job_id)))

    patterns = Patterns()
    placements, unplaced = place_live(planning_order(jobs), machines, catalog, patterns)
    waiting: list[tuple[str, str]] = []
    scale_outs: list[ScaleOut] = []
    if unplaced:
        options = purchase_options(fleets, catalog, prices)
        unplaced, waiting = place_on_launching(unplaced, options, catalog, patterns)
        if unplaced:
            scale_outs, bought_waiting = purchase(unplaced, options, catalog, patterns, limits)
            waiting += bought_waiting
    return Plan(tuple(placements), tuple(scale_outs), tuple(sorted(waiting)))
