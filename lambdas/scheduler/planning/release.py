"""The release method: empty machines the scheduler bought, proposed for removal (docs/removal.md).

Karpenter's `WhenEmpty` with `consolidateAfter`, under the protocol's rules. A fleet machine is
proposed when all of these hold:
- it is not draining and no removal is under way on it (a machine is never proposed twice);
- nothing runs on it and nothing has for the release delay (`empty_since`), and the planner placed
  nothing on it this run (so no queued job fits it: the live stage would have used it);
- it has been up for EC2's 60-second billing minimum (released sooner, it is paid for anyway);
- `mlfleet:keep-alive` does not protect it.
Then, per group, what the validation of docs/removal.md checks: desired capacity minus removals in
flight minus these releases stays at or above the group's minimum, and removals in flight plus these
releases stay within the disruption budget (10% of the group, rounded up, at least one; Karpenter's
default budget, kubernetes-sigs/karpenter pkg/apis/v1/nodepool.go `nodes: "10%"`). When the budget
binds, the dearest machines go first: they cost most to keep.

Why the delay is the boot time (`ReleasePolicy.after_empty_s`): keeping an empty machine as long as a
replacement takes to boot, then releasing it, pays at most twice what the best choice made in
hindsight pays, whatever arrives next (the ski-rental argument of docs/removal.md).

Unknown means kept: a machine whose launch time or empty time is unknown is never proposed.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from lambdas.scheduler.planning.constraints import capacity_of
from lambdas.scheduler.planning.model import Candidate, Fleet, Machine

METHOD = "release"
BILLING_MINIMUM_S = 60  # EC2 per-second billing has a 60-second minimum per instance launch
DISRUPTION_BUDGET_SHARE = 0.10


@dataclass(frozen=True)
class ReleasePolicy:
    after_empty_s: float  # the release delay: the fleets' boot time (`releaseAfterEmptyMinutes`)
    billing_minimum_s: float = BILLING_MINIMUM_S
    budget_share: float = DISRUPTION_BUDGET_SHARE

    def __post_init__(self) -> None:
        if self.after_empty_s < 0 or self.billing_minimum_s < 0 or not 0 < self.budget_share <= 1:
            raise ValueError(f"release policy: after_empty_s={self.after_empty_s!r} and billing_minimum_s="
                             f"{self.billing_minimum_s!r} must be >= 0, budget_share={self.budget_share!r} in (0, 1]")


def disruption_budget(group_size: int, share: float = DISRUPTION_BUDGET_SHARE) -> int:
    """Removals a group may have in flight at once: `share` of it rounded up, at least one."""
    return max(1, math.ceil(round(share * group_size, 9)))


def is_empty(machine: Machine, catalog) -> bool:
    """No task holds any of its resources. Every job holds a GPU, so all GPUs free means no job."""
    return machine.free_gpus >= capacity_of(catalog, machine.instance_type)[0] and not machine.submissions


def why_kept(machine: Machine, catalog, now: float, policy: ReleasePolicy, placed_on: Collection[str]) -> str | None:
    """Why the machine is not a release candidate, or None when it is one (before the group checks)."""
    if machine.draining or machine.removing:
        return "draining or already being removed"
    if machine.key in placed_on:
        return "a queued job was placed on it"
    if not is_empty(machine, catalog) or machine.empty_since is None:
        return "runs a task (or its empty time is unknown)"
    if now - machine.empty_since < policy.after_empty_s:
        return f"empty for {now - machine.empty_since:.0f} s, under the release delay of {policy.after_empty_s:.0f} s"
    if machine.launched_at is None or now - machine.launched_at < policy.billing_minimum_s:
        return "inside its first billed minute (or its launch time is unknown)"
    if machine.protected:
        return "protected by mlfleet:keep-alive"
    return None


def propose_releases(machines: Sequence[Machine], fleets: Sequence[Fleet], catalog, now: float,
                     policy: ReleasePolicy, placed_on: Collection[str]) -> tuple[Candidate, ...]:
    """The machines to give back, at most what each group's minimum and disruption budget allow."""
    groups = {(f.region, f.fleet): f for f in fleets}
    eligible: dict[tuple[str, str], list[Machine]] = {}
    for machine in machines:
        if (machine.region, machine.fleet) in groups and why_kept(machine, catalog, now, policy, placed_on) is None:
            eligible.setdefault((machine.region, machine.fleet), []).append(machine)
    candidates = []
    for key in sorted(eligible):
        fleet = groups[key]
        desired = fleet.current_instances + fleet.pending_instances  # removals in flight are in neither
        allowed = min(desired - fleet.min_size,
                      disruption_budget(desired + fleet.removing_instances, policy.budget_share)
                      - fleet.removing_instances)
        chosen = sorted(eligible[key], key=lambda m: (-m.price_per_hour, m.empty_since, m.key))[:max(0, allowed)]
        candidates += [Candidate(m.instance_id, m.key, m.region, fleet.asg_name, METHOD,
                                 f"empty since {m.empty_since:.0f} ({now - m.empty_since:.0f} s, release delay "
                                 f"{policy.after_empty_s:.0f} s); no queued job fits it")
                       for m in chosen]
    return tuple(candidates)
