"""The scheduler gives back what it bought (docs/removal.md): when each machine became empty, how long a
release waits, and the plan's release candidates carried out by the removal executor in the same run,
under the placement lease the run already holds.

When a machine became empty is the `mlfleet:empty-since` tag, written the first time a run sees the
machine with no task and removed when it runs one again. Not derived from the ledger's finished jobs:
- the tag sees every task ECS counts on the machine, not only the ledger's jobs (a task started by
  hand keeps its machine busy, as it keeps the reaper off it);
- the ledger has no index of finished jobs by machine, and finished jobs grow without bound;
- a tag survives from run to run at no storage cost and is visible to users, like `mlfleet:idle-since`.
Its cost: one CreateTags per machine that becomes empty, one DeleteTags per machine that gets work again,
and a time up to one run late, so that a machine is released later than it could be, never sooner. A
tag that cannot be written leaves the machine's empty time unknown, and unknown is never released.

The release delay is `mlfleet:releaseAfterEmptyMinutes`, or else the fleets' boot time measured on the
machines in view (their ECS registration minus their launch, the median): keeping an empty machine as
long as a replacement takes to boot pays at most twice the best choice made in hindsight (docs/removal.md,
"The release delay"). With no machine in view there is nothing to release, so no delay is needed.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from datetime import datetime

from ..common import tags as tag_keys
from ..common.aws import client, per_item
from ..common.logs import log_decision
from ..common.permissions import ISO_8601_TIME, needs
from ..removal import decide as removal
from ..removal import execute
from .state import MachineView, RegionView

TAG_BATCH = 1000  # CreateTags and DeleteTags take up to 1,000 resources a call
# The release delay when nothing has been measured: the benchmark's boot time (benchmarks/scheduler,
# --boot-seconds). Only used when no machine is in view, when there is nothing to release either.
UNMEASURED_BOOT_S = 180.0
INSTANCES = ("arn:{partition}:ec2:*:{account}:instance/*",)

PERMISSIONS = (
    needs("ec2:CreateTags", resources=INSTANCES, tag_scoped=True, tag_keys=(tag_keys.EMPTY_SINCE,),
          tag_values=ISO_8601_TIME, why="note when a fleet instance became empty (the empty-since tag only)"),
    needs("ec2:DeleteTags", resources=INSTANCES, tag_scoped=True, tag_keys=(tag_keys.EMPTY_SINCE,),
          why="clear it when the instance runs a task again"),
    *execute.PERMISSIONS,
)


def empty_changes(machines: Iterable[MachineView]) -> tuple[list[str], list[str]]:
    """(instances to mark empty now, instances whose empty mark to clear). A machine being drained or
    removed is neither: its removal, not its emptiness, decides what happens to it."""
    to_mark, to_clear = [], []
    for m in machines:
        if m.tasks == 0 and m.empty_since is None and not (m.draining or m.removing):
            to_mark.append(m.instance_id)
        elif m.tasks > 0 and m.empty_since is not None:
            to_clear.append(m.instance_id)
    return sorted(to_mark), sorted(to_clear)


def record_empty(views: Sequence[RegionView], now: datetime) -> None:
    """Write and clear `mlfleet:empty-since`, machine by machine on failure; update the views to match."""
    for view in views:
        to_mark, to_clear = empty_changes(view.machines)
        ec2 = client("ec2", view.region)
        failed = per_item(lambda ids: ec2.create_tags(
            Resources=ids, Tags=[{"Key": tag_keys.EMPTY_SINCE, "Value": now.isoformat(timespec="seconds")}]),
            to_mark, TAG_BATCH)
        failed.update(per_item(lambda ids: ec2.delete_tags(Resources=ids, Tags=[{"Key": tag_keys.EMPTY_SINCE}]),
                               to_clear, TAG_BATCH))
        for instance_id, error in sorted(failed.items()):
            log_decision("empty-since-error", region=view.region, instance_id=instance_id, reason=error,
                         then="its empty time stays unknown: not released")
        marked, cleared = set(to_mark) - set(failed), set(to_clear)
        if marked or cleared:
            log_decision("empty-since", region=view.region, marked=sorted(marked), cleared=sorted(cleared))
        view.machines = [replace(m, empty_since=now.timestamp()) if m.instance_id in marked
                         else replace(m, empty_since=None) if m.instance_id in cleared else m
                         for m in view.machines]


def boot_seconds(machines: Iterable[MachineView]) -> float | None:
    """The fleets' boot time: the median of (ECS registration - launch) over the machines in view."""
    measured = [m.registered_at - m.launched_at for m in machines
                if m.registered_at is not None and m.launched_at is not None and m.registered_at >= m.launched_at]
    return statistics.median(measured) if measured else None


def release_delay_s(configured_minutes: int | None, machines: Sequence[MachineView]) -> float:
    if configured_minutes is not None:
        return configured_minutes * 60.0
    measured = boot_seconds(machines)
    return measured if measured is not None else UNMEASURED_BOOT_S


def give_back(candidates: Sequence[removal.Candidate], views: Sequence[RegionView], *, budget_percent: int,
              ledger: execute.LedgerSource, lease_expires_at: float, now: datetime,
              clock: Callable[[], float] = time.time) -> execute.Outcome:
    """Carry out the plan's release candidates (lambdas/scheduler/planning/release.py) region by region
    and cluster by cluster, and finish the releases a previous run left half-done."""
    outcome = execute.Outcome()
    for view in views:
        for cluster in dict.fromkeys(fv.config.cluster for fv in view.fleets):
            fleets = [fv for fv in view.fleets if fv.config.cluster == cluster]
            groups = {fv.config.asg_name for fv in fleets}
            mine = [c for c in candidates if c.region == view.region and c.asg_name in groups]
            if not mine and not any(fv.removing_instances for fv in fleets):
                continue
            scope = execute.Scope(view.region, cluster, tuple(sorted(groups)), removal.RELEASE, budget_percent)
            registered = {m.instance_id: m.container_instance_arn for m in view.machines if m.cluster == cluster}
            try:
                outcome.merge(execute.remove(mine, scope, registered=registered, ledger=ledger,
                                             lease_expires_at=lease_expires_at, now=now, clock=clock))
            except Exception as error:  # noqa: BLE001 (one region's failure never stops the others or the run)
                log_decision("removal-error", step="remove", region=view.region, cluster=cluster,
                             reason=f"{type(error).__name__}: {error}")
                outcome.left.update({c.instance_id: f"removal failed: {type(error).__name__}" for c in mine})
    return outcome
