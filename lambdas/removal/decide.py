"""The removal protocol's decisions, as pure functions over plain data (docs/removal.md).

- `validate`: which proposed candidates may be drained now. Per group, never below its minimum (the
  group's desired capacity and its in-service instances, minus removals in flight and these, stay at
  or above `min_size`), at most the disruption budget disrupted at once (Karpenter's `nodes: "10%"`
  default, kubernetes-sigs/karpenter pkg/apis/v1/nodepool.go, at least one machine): removals in flight,
  members already terminating, and these; never a machine already being removed, a machine not in
  service in its group, or one `mlfleet:keep-alive` protects.
- `to_resume`: the removals a previous run left half-done (the Lambda was cut short) that this run
  finishes: its own method's, and, for the safety net, any other whose mark is older than a bound.
- `recheck`: after the drain, under the placement lease, terminate only a machine read again as
  DRAINING with no task, no job placed on it and no keep-alive. Gained work, or anything unread, means busy.
  A task ECS is still stopping there (a job saving its checkpoint) leaves it drained for the next run.
- `may_terminate`: right before the terminate, the group read again (its desired capacity and its
  members in service) must stay at or above its minimum after the decrement.
- `reactivation`: a machine the protocol keeps (gained work, protected, unread, refused) is set ACTIVE
  again only while EC2 is not taking it away: never under a spot interruption notice (its Spot request's
  status), never when its instance is not running, and never when that is unknown. Such a machine stays
  DRAINING and tagged, and the method's next run resumes it (it is gone by then, or terminated once
  empty): the drain ECS's agent or job-events made at the notice is never undone.

The candidate order is the method's (the reaper's longest-idle first, the release method's dearest
first): when a group's budget binds, the first candidates go.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from ..common import tags as tag_keys
from ..common.keep_alive import keep_alive_protects, parse_time

RELEASE, IDLE = "release", "idle"  # the methods: the scheduler's releases, the reaper's idle contract
DEFAULT_BUDGET_PERCENT = 10
IN_SERVICE = "InService"
DRAINING = "DRAINING"

# Verdicts of `recheck` and `may_terminate`.
TERMINATE = "terminate"
REACTIVATE = "reactivate"  # ACTIVE again and the removing tag removed: kept, never killed
LEAVE = "leave"  # nothing to do now: the next run of the method resumes it
GONE = "gone"  # already terminated or terminating, or no longer in its group


@dataclass(frozen=True)
class Candidate:
    """A machine a method proposes to remove: the planner's release stage
    (lambdas/scheduler/planning/release.py) and the reaper's idle method both return these."""
    instance_id: str
    container_instance_arn: str
    region: str
    asg_name: str
    method: str  # RELEASE or IDLE
    reason: str


# In a mark: the machine was already DRAINING when its removal began (an operator's drain, a spot notice), so
# the drain is not the protocol's to undo, even by a run that resumes the removal after this one was cut short.
FOUND_DRAINING = "found-draining"


@dataclass(frozen=True)
class Mark:
    """The `mlfleet:removing` tag: which method started the removal, when (None: unreadable), and whether the
    machine was DRAINING already then (`<method>@<time>;found-draining`)."""
    method: str
    since: datetime | None
    found_draining: bool = False


def mark_value(method: str, now: datetime, found_draining: bool = False) -> str:
    value = f"{method}@{now.isoformat(timespec='seconds')}"
    return f"{value};{FOUND_DRAINING}" if found_draining else value


def parse_mark(value: str) -> Mark:
    value, _, note = value.partition(";")
    method, _, since = value.partition("@")
    return Mark(method.strip(), parse_time(since) if since else None, note.strip() == FOUND_DRAINING)


@dataclass(frozen=True)
class Member:
    """An instance of a group, as DescribeAutoScalingGroups (lifecycle) and DescribeInstances (tags) say."""
    instance_id: str
    lifecycle_state: str  # Pending, InService, Terminating, Terminating:Wait, Standby, ...
    tags: Mapping[str, str] = field(default_factory=dict)

    @property
    def mark(self) -> Mark | None:
        value = self.tags.get(tag_keys.REMOVING)
        return None if value is None else parse_mark(value)

    @property
    def terminating(self) -> bool:
        return self.lifecycle_state.startswith("Terminat")


@dataclass(frozen=True)
class Group:
    name: str
    desired: int
    min_size: int
    members: Mapping[str, Member] = field(default_factory=dict)

    @property
    def in_service(self) -> int:
        return sum(1 for m in self.members.values() if m.lifecycle_state == IN_SERVICE)

    @property
    def in_flight(self) -> tuple[str, ...]:
        """Members a removal is draining: tagged, not yet terminating (their decrement is still to come)."""
        return tuple(sorted(i for i, m in self.members.items() if m.mark is not None and not m.terminating))

    @property
    def terminating(self) -> int:
        """Members terminating (Terminating, Terminating:Wait, :Proceed, :Retained: botocore's autoscaling
        model, LifecycleState), whoever ended them (a removal, the spot market, a health check): capacity
        still being lost, in Terminating:Wait as long as a lifecycle hook holds it (an hour by default:
        PutLifecycleHook HeartbeatTimeout). They count against the disruption budget (`room`)."""
        return sum(1 for m in self.members.values() if m.terminating)


def disruption_budget(group_size: int, percent: int = DEFAULT_BUDGET_PERCENT) -> int:
    """Removals a group may have in flight at once: `percent` of it rounded up, at least one."""
    if not 0 < percent <= 100:
        raise ValueError(f"disruption budget percent {percent!r} must be in 1..100")
    return max(1, -(-max(0, group_size) * percent // 100))


def room(*, desired: int, in_service: int, min_size: int, in_flight: int, terminating: int,
         budget_percent: int) -> tuple[int, str]:
    """How many more removals a group allows now, and what binds: its desired capacity and in-service
    instances, less the removals in flight, stay at or above its minimum, and the removals in flight plus
    the members already terminating stay within the disruption budget. The rule for both the release
    stage's proposals (from the planner's counts) and `validate` (from the group read again).

    Terminating members count against the budget as Karpenter counts nodes being deleted against a
    NodePool's (kubernetes-sigs/karpenter pkg/controllers/disruption/helpers.go, BuildDisruptionBudgetMapping:
    "taking the max disruptions allowed ... and subtracting the number of nodes that are NotReady and
    already being deleted"): they are capacity being lost, whoever ended them. Not again against the
    minimum: `in_service` leaves them out, and so does `desired` once a terminate with
    ShouldDecrementDesiredCapacity took them off it (a spot reclaim or a health replacement leaves them in
    `desired`, and `in_service` is then the lower of the two)."""
    above_min = min(desired, in_service) - min_size - in_flight
    limit = disruption_budget(desired, budget_percent)
    budget = limit - in_flight - terminating
    if above_min <= budget:
        return max(0, above_min), (f"group at its minimum: desired {desired}, in service {in_service}, "
                                   f"min {min_size}, {in_flight} removal(s) in flight")
    return max(0, budget), (f"disruption budget of {limit} ({budget_percent}% of {desired}) reached with "
                            f"{in_flight} removal(s) in flight and {terminating} member(s) terminating")


def headroom(group: Group, budget_percent: int) -> tuple[int, str]:
    """`room` for a group as read."""
    return room(desired=group.desired, in_service=group.in_service, min_size=group.min_size,
                in_flight=len(group.in_flight), terminating=group.terminating, budget_percent=budget_percent)


@dataclass(frozen=True)
class Dropped:
    candidate: Candidate
    reason: str


@dataclass(frozen=True)
class Validation:
    accepted: tuple[Candidate, ...]
    dropped: tuple[Dropped, ...]


def _why_not(candidate: Candidate, group: Group | None, now: datetime) -> str | None:
    if group is None:
        return f"group {candidate.asg_name} was not read (not one of the run's fleet groups, or unreadable)"
    member = group.members.get(candidate.instance_id)
    if member is None:
        return f"no longer in group {group.name}"
    if member.mark is not None:
        since = member.mark.since.isoformat() if member.mark.since else "an unreadable time"
        return f"already being removed ({member.mark.method or 'unknown method'} since {since})"
    if member.lifecycle_state != IN_SERVICE:
        return f"{member.lifecycle_state} in its group, not InService"
    protected, why = keep_alive_protects(member.tags.get(tag_keys.KEEP_ALIVE), now)
    if protected:
        return f"protected: {why}"
    return None


def validate(candidates: Sequence[Candidate], groups: Mapping[str, Group], now: datetime,
             budget_percent: int = DEFAULT_BUDGET_PERCENT) -> Validation:
    """The candidates that may be drained now, in the method's order, and why the others may not."""
    accepted: list[Candidate] = []
    dropped: list[Dropped] = []
    seen: set[str] = set()
    room: dict[str, tuple[int, str]] = {}
    for candidate in candidates:
        if candidate.instance_id in seen:
            dropped.append(Dropped(candidate, "proposed twice in one run"))
            continue
        seen.add(candidate.instance_id)
        group = groups.get(candidate.asg_name)
        reason = _why_not(candidate, group, now)
        if reason is None:
            left, binding = room.setdefault(candidate.asg_name, headroom(group, budget_percent))
            if left <= 0:
                reason = binding
            else:
                room[candidate.asg_name] = (left - 1, binding)
        if reason is None:
            accepted.append(candidate)
        else:
            dropped.append(Dropped(candidate, reason))
    return Validation(tuple(accepted), tuple(dropped))


@dataclass(frozen=True)
class Resume:
    instance_id: str
    asg_name: str
    mark: Mark
    adopted: bool  # started by another method, adopted by the safety net


def to_resume(groups: Iterable[Group], method: str, now: datetime,
              adopt_after: timedelta | None = None) -> tuple[Resume, ...]:
    """Removals in flight that this run finishes: those `method` started, and, when `adopt_after` is
    given (the reaper, the safety net), any other whose mark is older than that or unreadable, so
    nothing stays DRAINING because the method that started it no longer runs."""
    found = []
    for group in groups:
        for instance_id in group.in_flight:
            mark = group.members[instance_id].mark
            if mark.method == method:
                found.append(Resume(instance_id, group.name, mark, adopted=False))
            elif adopt_after is not None and (mark.since is None or now - mark.since >= adopt_after):
                found.append(Resume(instance_id, group.name, mark, adopted=True))
    return tuple(found)


@dataclass(frozen=True)
class Observed:
    """A drained machine read again under the lease. None: that read failed (unknown)."""
    ecs_status: str | None  # the container instance's status
    ecs_tasks: int | None  # runningTasksCount + pendingTasksCount
    listed_tasks: int | None  # ListTasks (desiredStatus RUNNING: pending and running) on it
    ledger_jobs: tuple[str, ...] | None  # jobs STARTING or RUNNING that the ledger places on it
    keep_alive: str | None = None  # the instance's `mlfleet:keep-alive` tag, read again after the drain
    tags_read: bool = True  # False: its tags could not be read again
    # Tasks ECS is stopping on it (desiredStatus STOPPED, lastStatus not yet STOPPED): a job moved, cancelled or
    # warned of its spot interruption, saving its checkpoint on SIGTERM within its stop timeout.
    stopping_tasks: int | None = 0


# How long a task ECS is stopping holds a drained machine back from its terminate, from when its removal began.
# The job task definition's stopTimeout is 110 s (components/compute/cluster.py; at most 120 s on EC2) and ECS
# then kills its containers: a task still not stopped well past that is held by a stuck agent, and waiting
# longer saves no checkpoint, it only pays for the machine. A stop under way when the removal began is one the
# first re-check saw (a task meant to run would have kept the machine), so the grace counts from the mark.
STOPPING_GRACE = timedelta(minutes=15)


@dataclass(frozen=True)
class Verdict:
    action: str  # TERMINATE, REACTIVATE, LEAVE or GONE
    reason: str


def recheck(observed: Observed, now: datetime, busy: str | None = None,
            removing_since: datetime | None = None) -> Verdict:
    """Terminate only what is known to be drained and empty; gained work or unknown means busy. `busy`: why
    the method holds the machine busy now by what the re-check does not read (the reaper's idle contract:
    utilisation over its window). A machine with a task ECS is still stopping is left drained for the next
    run (the job may be saving its checkpoint) until STOPPING_GRACE after `removing_since` (its mark's time;
    None, unreadable: left)."""
    unread = [name for name, value in (("container instance", observed.ecs_status), ("task count", observed.ecs_tasks),
                                       ("task list", observed.listed_tasks), ("ledger", observed.ledger_jobs),
                                       ("stopping tasks", observed.stopping_tasks))
              if value is None] + ([] if observed.tags_read else ["tags"])
    if unread:
        return Verdict(REACTIVATE, f"could not read its {', '.join(unread)}: unknown means busy")
    tasks = max(observed.ecs_tasks, observed.listed_tasks)
    if tasks:
        return Verdict(REACTIVATE, f"gained work: {tasks} ECS task(s) running or pending")
    if observed.ledger_jobs:
        return Verdict(REACTIVATE, f"gained work: the ledger places {', '.join(observed.ledger_jobs)} on it")
    protected, why = keep_alive_protects(observed.keep_alive, now)
    if protected:
        return Verdict(REACTIVATE, f"protected since it was proposed: {why}")
    if observed.ecs_status != DRAINING:
        return Verdict(REACTIVATE, f"container instance is {observed.ecs_status}, not DRAINING, after the drain")
    if busy:
        return Verdict(REACTIVATE, f"busy by its method's reading: {busy}")
    if observed.stopping_tasks:
        if removing_since is None or now - removing_since < STOPPING_GRACE:
            return Verdict(LEAVE, f"{observed.stopping_tasks} task(s) ECS is stopping still on it (a job may be saving "
                                  "its checkpoint): left drained for the next run")
        return Verdict(TERMINATE, f"drained, no task meant to run, no job placed on it; {observed.stopping_tasks} "
                                  f"task(s) ECS has been stopping since the removal began {removing_since.isoformat()}, "
                                  f"more than {STOPPING_GRACE} ago: past any stop timeout")
    return Verdict(TERMINATE, "drained, no task, no job placed on it")


def may_terminate(group: Group | None, instance_id: str, terminated_in_group: int = 0) -> Verdict:
    """Right before TerminateInstanceInAutoScalingGroup(ShouldDecrementDesiredCapacity=True), on the group
    read again; `terminated_in_group` counts this run's terminations since that read."""
    if group is None:
        return Verdict(LEAVE, "its group could not be read right before the terminate; the next run resumes it")
    member = group.members.get(instance_id)
    if member is None or member.terminating:
        return Verdict(GONE, "no longer in its group" if member is None else f"already {member.lifecycle_state}")
    desired = group.desired - terminated_in_group
    # As `room`: the members in service too. A member the spot market or a health check ended since validation
    # is Terminating with the desired capacity unchanged; with the decrement the group would run below its
    # minimum until its replacement boots.
    in_service = group.in_service - terminated_in_group
    if min(desired, in_service) - 1 < group.min_size:
        return Verdict(REACTIVATE, f"group at its minimum right before the terminate: desired {desired}, "
                                   f"in service {in_service}, min {group.min_size}")
    return Verdict(TERMINATE, f"desired {desired} -> {desired - 1}, in service {in_service}, min {group.min_size}")


# The Spot request status codes of a Spot Instance that keeps running (EC2 User Guide, "Spot request status",
# https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/spot-request-status.html, the Fulfilled and
# Fulfilled-terminal tables). Every other code of a running instance means EC2 is stopping or terminating it:
# marked-for-stop, marked-for-termination, and instance-terminated-no-capacity, which an instance that
# terminates on interruption gets at the notice, while it runs out its two minutes, instead of
# marked-for-termination ("it is not set to marked-for-termination"). So the rule lists what keeps running,
# not what is being taken: any other code keeps the machine drained. botocore's EC2 model leaves
# SpotInstanceStatus.Code a free string and points to that page.
SPOT_KEEPS_RUNNING = frozenset({"fulfilled", "request-canceled-and-instance-running"})
RUNNING = "running"  # EC2 InstanceStateName (botocore's EC2 model): pending, running, shutting-down, stopping, ...


@dataclass(frozen=True)
class Instance:
    """A machine about to be re-activated, as EC2 describes it. None: not read."""
    state: str | None  # DescribeInstances State.Name
    spot: bool | None  # InstanceLifecycle is "spot"
    spot_status: str | None = None  # its Spot request's Status.Code (DescribeSpotInstanceRequests); spot only
    detached_at: str | None = None  # `mlfleet:detached-at`: job-events took it out of its group at its notice


def why_kept_drained(instance: Instance | None) -> str | None:
    """Why a machine must stay drained rather than be set ACTIVE: EC2 is taking it away, or whether it is
    cannot be known. None: it may be re-activated."""
    if instance is None or instance.state is None or instance.spot is None:
        return "its EC2 instance could not be read (a spot interruption cannot be ruled out)"
    if instance.detached_at:
        return f"detached from its group at its spot notice ({tag_keys.DETACHED_AT}={instance.detached_at})"
    if instance.state != RUNNING:
        return f"its instance is {instance.state}"
    if instance.spot and instance.spot_status is None:
        return "its Spot request's status could not be read or found (a spot interruption cannot be ruled out)"
    if instance.spot and instance.spot_status not in SPOT_KEEPS_RUNNING:
        return f"under a spot interruption: its Spot request is {instance.spot_status}"
    return None


def overdue_stop(instance: Instance | None) -> Verdict | None:
    """A machine whose tasks ECS has been stopping past STOPPING_GRACE (recheck's TERMINATE) is still left while
    EC2 is taking it away, or whether it is cannot be known (why_kept_drained): its tasks may have begun stopping
    at a spot notice that came after the removal began, and their saves run out the notice's two minutes
    before EC2 ends the machine itself. None: terminate it."""
    why = why_kept_drained(instance)
    return Verdict(LEAVE, f"a task ECS is still stopping, and {why}: left for EC2 to end") if why else None


def reactivation(reason: str, instance: Instance | None) -> Verdict:
    """What to do with a machine the protocol keeps for `reason` (gained work, protected, unread, a refused
    terminate): REACTIVATE it (ACTIVE again, the tag removed), or LEAVE it DRAINING and tagged while EC2 is
    taking it away. Its DRAINING status may then be ECS's own (ECS_ENABLE_SPOT_INSTANCE_DRAINING: "Amazon ECS
    receives the Spot Instance interruption notice and places the instance in DRAINING status",
    docs.aws.amazon.com/AmazonECS/latest/developerguide/spot-instance-draining-linux-container.html) or
    job-events' at the "EC2 Spot Instance Interruption Warning", which ECS does not tell apart from ours
    (UpdateContainerInstancesState takes no reason): undone, the scheduler would place jobs on a machine
    gone within two minutes. Left tagged, it stays in flight (never placed onto, counted against the budget
    and the minimum) and the method's next run resumes it: the spot market has ended it by then, or it is
    terminated once empty, or left again."""
    why = why_kept_drained(instance)
    if why is None:
        return Verdict(REACTIVATE, reason)
    return Verdict(LEAVE, f"{reason}; not re-activated: {why}; left DRAINING and tagged for the next run")


# TerminateInstanceInAutoScalingGroup answers ValidationError both for an instance that already left its
# group ("Instance Id not found - No managed instance found for instance ID ...", yaybu/touchdown#51)
# and for a refusal ("Currently, desiredSize equals minSize (1). Terminating instance without
# replacement will violate group's min size constraint...", aws/aws-cli#47,
# buildkite/elastic-ci-stack-for-aws#1261); botocore's autoscaling model has no finer error code.
# Only the first means there is nothing left to do.
_GONE_MESSAGES = ("instance id not found", "no managed instance found")


def terminate_error(code: str, message: str) -> Verdict:
    """What a refused terminate means: GONE when the instance already left its group, else REACTIVATE."""
    if code == "ValidationError" and any(text in message.lower() for text in _GONE_MESSAGES):
        return Verdict(GONE, f"already gone: {message}")
    return Verdict(REACTIVATE, f"terminate refused: {code}: {message}")
