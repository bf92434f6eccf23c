"""What a job costs, and the cost report of `mlfleet cost`. Pure: plain data in, plain data out.

A run's cost is the job's share of its instance for the time it held it, at the price paid:

    cost = share x hourly price at placement x (end of the run - placement) / 3600 s

- **Share: the largest of its GPU, vCPU and memory shares** of what the instance type can schedule
  (lambdas.common.catalog: GPUs, vCPUs, memory less what the OS and the ECS agent keep; a job sharing a
  GPU holds the part of one its GPU memory is). Whichever
  resource a job takes most of is what it denies other jobs: a job holding 1 of 4 GPUs but 90% of the
  memory leaves the other 3 GPUs without memory to run anything (the dominant share of Dominant Resource
  Fairness, Ghodsi et al., NSDI 2011). The shares of the jobs on one machine may add up to more or less
  than 1: this attributes spend to work, it does not reproduce the bill (an idle machine is nobody's).
- **Price paid**: the hourly price the scheduler saw when it placed the job (Placement.price_per_hour:
  the live spot price of the type in the region for a spot machine, the catalog's on-demand price for an
  on-demand one), else the catalog's price for the machine's lifecycle.
- **Time**: from the scheduler's claim (Placement.placed_at, when the share was reserved) to the end of
  the run: the task's stoppedAt, or the spot interruption warning for an interrupted run (the machine
  goes at most two minutes later).
- **On demand**: the same share and time at the catalog's on-demand price of the type in the region,
  what the same work would have cost without spot.

Each run is charged once (Cost.charged_attempt), by the job-events function (lambdas/job_events).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ..common.catalog import Catalog, InstanceType, UnknownInstanceType, UnknownRegion
from .ledger import STARTING, Cost, JobRecord
from .spec import JobSpec

GROUPINGS = ("submission", "owner", "team")
UNKNOWN = "(none)"


def dominant_share(spec: JobSpec, instance: InstanceType) -> float:
    """The largest of the job's GPU, vCPU and memory shares of what `instance` can schedule (at most 1). A job
    sharing a GPU holds the part of one GPU its memory is of that GPU's shareable memory."""
    shares = [spec.vcpus / instance.schedulable_vcpus, spec.memory_mib / instance.schedulable_memory_mib]
    if instance.gpus:
        gpus = instance.gpu_fraction(spec.gpu_memory_mib) if spec.shares_gpu else spec.gpus
        shares.append(gpus / instance.gpus)
    return min(1.0, max(shares))


def _placed_at(record: JobRecord) -> float | None:
    if record.placement is not None and record.placement.placed_at is not None:
        return record.placement.placed_at
    # Records placed before placements carried the time: the claim of this attempt in the history.
    claims = [r["at"] for r in record.reasons if r.get("state") == STARTING and r.get("attempt") == record.attempt]
    return claims[-1] if claims else None


def run_cost(record: JobRecord, ended_at: float, catalog: Catalog) -> Cost | None:
    """The job's cost with the run of its current attempt added, or None when there is nothing to add:
    no placement, the run already charged, or a machine the catalog does not price."""
    placement = record.placement
    if placement is None or (record.cost is not None and record.cost.charged_attempt >= record.attempt):
        return None
    started = _placed_at(record)
    try:
        instance = catalog.get(placement.instance_type)
        on_demand = instance.on_demand_price(placement.region)
        paid = placement.price_per_hour
        if paid is None:
            paid = instance.spot_price(placement.region) if placement.lifecycle == "spot" else on_demand
    except (UnknownInstanceType, UnknownRegion):
        return None
    if started is None:
        return None
    seconds = max(0.0, ended_at - started)
    share = dominant_share(record.spec, instance)
    return (record.cost or Cost()).plus(share * paid * seconds / 3600, share * on_demand * seconds / 3600, seconds,
                                        record.attempt)


@dataclass(frozen=True)
class CostRow:
    group: str
    jobs: int
    ended: int  # of them, jobs in a terminal state
    hours: float  # time the jobs held their shares, over all runs
    usd: float
    on_demand_usd: float

    @property
    def saved(self) -> float | None:
        """The share of the on-demand cost that was not spent (None when nothing ran)."""
        return 1 - self.usd / self.on_demand_usd if self.on_demand_usd else None


def group_of(record: JobRecord, by: str) -> str:
    if by == "submission":
        return record.submission_id
    if by == "owner":
        return record.owner or UNKNOWN
    if by == "team":
        return record.spec.team or UNKNOWN
    raise ValueError(f"cannot group costs by {by!r} (one of {', '.join(GROUPINGS)})")


def cost_report(records: Iterable[JobRecord], by: str, terminal: Sequence[str]) -> list[CostRow]:
    """One row per group, dearest first, and a last row `total`."""
    sums: dict[str, list[float]] = {}
    for record in records:
        cost = record.cost or Cost()
        row = sums.setdefault(group_of(record, by), [0, 0, 0.0, 0.0, 0.0])
        row[0] += 1
        row[1] += record.state in terminal
        row[2] += cost.seconds / 3600
        row[3] += cost.usd
        row[4] += cost.on_demand_usd
    rows = sorted((CostRow(group, int(j), int(e), h, u, o) for group, (j, e, h, u, o) in sums.items()),
                  key=lambda r: (-r.usd, r.group))
    total = CostRow("total", *(int(sum(getattr(r, k) for r in rows)) for k in ("jobs", "ended")),
                    *(sum(getattr(r, k) for r in rows) for k in ("hours", "usd", "on_demand_usd")))
    return [*rows, total]


def report_document(rows: Sequence[CostRow], by: str, since: float) -> Mapping:
    return {"by": by, "since": since,
            "rows": [{"group": r.group, "jobs": r.jobs, "ended": r.ended,
                      "hours": round(r.hours, 4), "usd": round(r.usd, 4), "on_demand_usd": round(r.on_demand_usd, 4),
                      "saved": None if r.saved is None else round(r.saved, 4)} for r in rows]}
