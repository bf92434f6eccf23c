"""The release stage: the one decision of which empty machines the scheduler gives back (docs/removal.md,
the release method). The scheduler Lambda hands its proposals to the removal executor (lambdas/removal),
which validates them again on the groups read afresh, drains, re-checks and terminates; the benchmark
carries them out in its simulation.

Karpenter's `WhenEmpty` with `consolidateAfter`, under the protocol's rules. A fleet machine is
proposed when all of these hold:
- it is not draining and no removal is under way on it (a machine is never proposed twice);
- nothing runs on it and nothing has for the release delay (`empty_since`), and the planner placed
  nothing on it this run (so no queued job fits it: the live stage would have used it);
- it has been up for EC2's 60-second billing minimum (released sooner, it is paid for anyway);
- `mlfleet:keep-alive` does not protect it.
A degraded machine (`Machine.degraded`: fewer GPUs registered than its type has, ECS health IMPAIRED, a
start ECS refused for the machine) takes no job, so no queued job is kept it for: once empty it is
proposed without the release delay, before the group's healthy empty machines.
Then, per group, the protocol's own rule (`lambdas.removal.decide.room`, which the executor's
validation applies too): never below the group's minimum, and removals in flight, members terminating
and these within the disruption budget (`DISRUPTION_BUDGET_PERCENT` of the group, rounded up, at least
one). When it binds, degraded machines go first, then the dearest: they cost most to keep.

Why the delay is the boot time (`ReleasePolicy.after_empty_s`): keeping an empty machine as long as a
replacement takes to boot, then releasing it, pays at most twice what the best choice made in
hindsight pays, whatever arrives next (the ski-rental argument of docs/removal.md). A delay of 0 (the
setting) releases at the first run that finds the machine empty: a little cheaper on average on the
benchmark's traces, without that worst-case bound (docs/removal.md).

Unknown means kept: a machine whose launch time or empty time is unknown is never proposed.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from ...removal.decide import DEFAULT_BUDGET_PERCENT, RELEASE, room
from .constraints import gpus_of
from .model import Candidate, Fleet, Machine

# EC2 bills per second with a 60-second minimum per launch (https://aws.amazon.com/ec2/pricing/on-demand/,
# "Per Second Billing"): a machine released inside its first minute is paid for anyway.
BILLING_MINIMUM_S = 60


@dataclass(frozen=True)
class ReleasePolicy:
    # The release delay: `mlfleet:releaseAfterEmptyMinutes`, or the fleets' measured boot time
    # (lambdas/scheduler/releases.py release_delay_s).
    after_empty_s: float
    budget_percent: int = DEFAULT_BUDGET_PERCENT  # `mlfleet:disruptionBudgetPercent`
    billing_minimum_s: float = BILLING_MINIMUM_S

    def __post_init__(self) -> None:
        if self.after_empty_s < 0 or self.billing_minimum_s < 0 or not 0 < self.budget_percent <= 100:
            raise ValueError(f"release policy: after_empty_s={self.after_empty_s!r} and billing_minimum_s="
                             f"{self.billing_minimum_s!r} must be >= 0, budget_percent={self.budget_percent!r} "
                             "in 1..100")


def is_empty(machine: Machine, catalog) -> bool:
    """No task holds any of its resources. Every job holds a GPU, whole or shared, so all GPUs free and none
    shared means no job."""
    return (machine.free_gpus >= gpus_of(machine, catalog) and not machine.shared_gpus
            and not machine.submissions)


def why_kept(machine: Machine, catalog, now: float, policy: ReleasePolicy, placed_on: Collection[str]) -> str | None:
    """Why the machine is not a release candidate, or None when it is one (before the group checks)."""
    if machine.draining or machine.removing:
        return "draining or already being removed"
    if machine.key in placed_on:
        return "a queued job was placed on it"
    if not is_empty(machine, catalog) or machine.empty_since is None:
        return "runs a task (or its empty time is unknown)"
    if now - machine.empty_since < policy.after_empty_s and not machine.degraded:
        return f"empty for {now - machine.empty_since:.0f} s, under the release delay of {policy.after_empty_s:.0f} s"
    if machine.launched_at is None or now - machine.launched_at < policy.billing_minimum_s:
        return "inside its first billed minute (or its launch time is unknown)"
    if machine.protected:
        return "protected by mlfleet:keep-alive"
    return None


def givable(machines: Sequence[Machine], fleets: Sequence[Fleet], catalog) -> frozenset[str]:
    """The empty machines the release stage could give back once past the delay: in a known group, not
    protected, draining or being removed, and, per group, no more than its machines above the group's
    minimum (the dearest first, as releases go). The others are paid for whatever runs on them."""
    groups = {(f.region, f.fleet): f for f in fleets}
    found: list[str] = []
    by_group: dict[tuple[str, str], list[Machine]] = {}
    for machine in machines:
        if _releasable(machine, groups) and is_empty(machine, catalog):
            by_group.setdefault((machine.region, machine.fleet), []).append(machine)
    for key, members in by_group.items():
        fleet = groups[key]
        above_minimum = max(0, fleet.current_instances - fleet.min_size)  # removals in flight are in neither
        found += [m.key for m in sorted(members, key=lambda m: (-m.price_per_hour, m.key))[:above_minimum]]
    return frozenset(found)


def givable_once_empty(machines: Sequence[Machine], fleets: Sequence[Fleet], catalog) -> frozenset[str]:
    """The busy machines the release stage could give back once they are empty (the move stage's
    candidates): as `givable`, where the group has machines above its minimum that its empty ones do not
    already take up."""
    groups = {(f.region, f.fleet): f for f in fleets}
    empty: dict[tuple[str, str], int] = {}
    for machine in machines:
        if is_empty(machine, catalog):
            empty[machine.region, machine.fleet] = empty.get((machine.region, machine.fleet), 0) + 1
    return frozenset(m.key for m in machines if _releasable(m, groups) and not is_empty(m, catalog) and
                     groups[m.region, m.fleet].current_instances - groups[m.region, m.fleet].min_size
                     - empty.get((m.region, m.fleet), 0) > 0)


def _releasable(machine: Machine, groups: Mapping[tuple[str, str], Fleet]) -> bool:
    """In a known group, and neither kept by mlfleet:keep-alive nor draining or being removed."""
    return (machine.region, machine.fleet) in groups and not (machine.protected or machine.draining or machine.removing)


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
        # Removals in flight are in neither current nor pending (lambdas/scheduler/state.py), still in
        # service and in the desired capacity until their terminate decrements it.
        allowed, _ = room(desired=fleet.current_instances + fleet.pending_instances + fleet.removing_instances,
                          in_service=fleet.current_instances + fleet.removing_instances, min_size=fleet.min_size,
                          in_flight=fleet.removing_instances, terminating=fleet.terminating_instances,
                          budget_percent=policy.budget_percent)
        chosen = sorted(eligible[key], key=lambda m: (not m.degraded, -m.price_per_hour, m.empty_since, m.key))
        candidates += [Candidate(m.instance_id, m.key, m.region, fleet.asg_name, RELEASE,
                                 f"empty since {m.empty_since:.0f} ({now - m.empty_since:.0f} s, release delay "
                                 f"{policy.after_empty_s:.0f} s); " + (f"degraded: {m.degraded}" if m.degraded
                                                                       else "no queued job fits it"))
                       for m in chosen[:allowed]]
    return tuple(candidates)
