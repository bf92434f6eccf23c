"""Adopting an empty machine: the rule the live and launching stages share.

Jobs placed onto a machine nothing runs on (a live one that is empty, or one still launching) make it
theirs: without them it would be given back (release.py), so from now on they pay its whole price. They
keep it only if it costs at most DECLINE_FACTOR (packer.py: the ski-rental factor of two) times buying
for them alone, each on the cheapest fleet that may run it; otherwise they go on to the later stages,
which buy for them, and the machine is released after its delay.

Why: an Auto Scaling group replaces a reclaimed spot instance with one of the same type, and an empty
machine outlives jobs that needed its size; either took whatever was queued, and jobs without a runtime
belief could keep an 8-GPU instance for weeks for one GPU's work (docs/scheduler-benchmark.md, "Replay,
0.05 interruptions"). Machines and boxes bought for reserved jobs are theirs already and not checked.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from .model import JobRequest
from .packer import DECLINE_FACTOR


def too_dear(adopted: Mapping[str, Sequence[JobRequest]], price_of: Mapping[str, float],
             alone: Callable[[JobRequest], float | None]) -> set[str]:
    """The jobs to take back: those of each adopted machine (key -> the jobs placed on it, none reserved)
    whose price passes DECLINE_FACTOR times what buying for them alone costs an hour. A job no fleet can
    run alone (None) keeps the machine: there is nothing cheaper to buy."""
    taken_back: set[str] = set()
    for key, jobs in adopted.items():
        alone_prices = [alone(job) for job in jobs]
        if all(p is not None for p in alone_prices) and price_of[key] > DECLINE_FACTOR * sum(alone_prices):
            taken_back.update(job.job_id for job in jobs)
    return taken_back
