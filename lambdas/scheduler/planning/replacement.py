"""Whether a reclaimed spot instance's group should replace it: a purchase the planner did not choose.

When the spot market reclaims an instance, its Auto Scaling group launches one of the same fleet to
keep its desired capacity, and the jobs the reclaimed one ran are requeued. The group buys the same box
whatever those jobs now need. An 8-GPU g6.48xlarge bought for an 8-GPU job, then filled by one-GPU jobs
once that job ended, is replaced by another g6.48xlarge for the one-GPU jobs; they fill it, it is
reclaimed in turn, and the chain goes on. On the shared trace with 0.05 interruptions per spot
instance-hour, such a chain of g6.48xlarge cost $3,316 of mlfleet's $16,080 (docs/scheduler-benchmark.md).

The rule: keep the replacement only where it costs no more an hour than buying for the reclaimed
instance's jobs one instance each, from the cheapest fleet that may run each alone. Otherwise the
replacement is declined (the job-events function detaches the instance from its group and decrements
the desired capacity, lambdas/job_events/replacements.py) and the next scheduler run buys what the
requeued jobs need. An instance that ran no job (empty, or reclaimed while it booted for jobs that now
wait for what the planner buys them) is not replaced. A job no fleet can run alone keeps the
replacement: nothing else would hold it.

Declining is never unsafe, only a different purchase: the planner buys what the requeued jobs need,
within the caps, the group's own type where only it holds them. So where the jobs are not known (a
notice delivered again after its jobs were requeued reads none running there) it declines.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from .constraints import Patterns
from .fleets import cheapest_alone, purchase_options
from .model import Fleet, JobRequest


def keeps_replacement(replacement_price: float, jobs: Sequence[JobRequest], fleets: Sequence[Fleet], catalog,
                      prices: Mapping | None = None) -> bool:
    """Should the group replace a reclaimed instance that ran `jobs`, for `replacement_price` $/h (its fleet's
    price)? `fleets`: every fleet the stack has (a requeued job may be bought for in any it may run on)."""
    options, patterns = purchase_options(fleets, catalog, prices), Patterns()
    alone = 0.0
    for job in jobs:
        price = cheapest_alone(job, options, patterns)
        if price is None:
            return True
        alone += price
    return replacement_price <= alone * (1 + 1e-9)
