"""The removal executor: drain, re-check under the placement lease, then terminate or re-activate.

One call of `remove` acts on one fleet region for one method (docs/removal.md, "A removal, step by step"):

1. read the region's fleet groups (desired, minimum, members, their tags) and validate the proposed
   candidates (decide.validate); pick up the removals a previous run left half-done (decide.to_resume);
2. tag each new one `mlfleet:removing=<method>@<time>` BEFORE draining it, so every machine this
   protocol drains carries the tag and a run cut short at any point is resumed by the next;
3. set the container instances DRAINING, 10 per call (the API's limit);
4. read each again: its container instance (status, running + pending tasks), ListTasks on it (the tasks
   meant to run; those ECS is stopping, described to see which have not stopped yet), its instance
   (tags: a keep-alive written since validation; state and lifecycle) and the jobs the ledger places on it
   (STARTING or RUNNING); keep (re-activate) anything that gained work, is protected, or could not be read
   (decide.recheck); leave one where a task is still stopping drained for the next run (a job saving its
   checkpoint within its stop timeout);
5. read the groups again and TerminateInstanceInAutoScalingGroup(ShouldDecrementDesiredCapacity=True)
   only where the group stays at or above its minimum (decide.may_terminate); a refusal re-activates.

Re-activation reads, right before it, the Spot request of each spot machine to re-activate (one batched
DescribeSpotInstanceRequests): a machine EC2 is taking away (a spot interruption notice), or whose state
is unknown, stays DRAINING and tagged for the next run (decide.reactivation), so a drain made at the
notice (ECS's agent, job-events) is never undone.

The caller holds the placement lease (lambdas/common/lease.py) and passes its expiry: no scheduler run
can start a task between the re-check and the terminate. The executor stops acting when the lease has
less than LEASE_MARGIN_SECONDS left and leaves the rest, tagged, to the next run.

Every step is idempotent and per machine: an error (ClientError, BotoCoreError, timeouts included) on one
machine is logged with the machine and the reason, and the others go on. Re-activation sets the
container instance ACTIVE first and removes the tag second, so a failure in between leaves the tag,
and the next run finishes it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from botocore.exceptions import BotoCoreError, ClientError

from ..common import tags as tag_keys
from ..common.aws import chunks, client, describe_groups, paginate, spot_requests, still_stopping
from ..common.logs import log_decision
from ..common.permissions import ISO_8601_TIME, needs
from ..jobs.ledger import BY_STATE, RUNNING, STARTING
from . import decide
from .decide import Candidate, Group, Member, Observed

DRAIN_BATCH = 10  # UpdateContainerInstancesState takes at most 10 container instances a call
DESCRIBE_BATCH = 100  # DescribeContainerInstances takes at most 100
# Instance ids per DescribeInstances call (as lambdas/scheduler/state.py reads them); given as a filter,
# so that an instance already gone is left out instead of failing the call (InvalidInstanceID.NotFound).
FILTER_VALUES = 200
# A call usually finishes well within this; with less lease left the executor stops and the next run
# resumes. One that retries long (botocore's standard mode: 10 attempts, a 30 s read timeout each,
# lambdas/common/aws.py) can outlast it: the lease is then a first guard only, and the machine's
# `mlfleet:removing` tag and DRAINING status still keep the scheduler from placing onto it.
LEASE_MARGIN_SECONDS = 20
AWS_ERRORS = (ClientError, BotoCoreError)

CONTAINER_INSTANCES = "arn:{partition}:ecs:*:{account}:container-instance/mlfleet-{environment}/*"
INSTANCES = ("arn:{partition}:ec2:*:{account}:instance/*",)
# The scheduler (home region) acts in every fleet region; the reaper in its own. Names and the
# environment tag scope them.
PERMISSIONS = (
    needs("autoscaling:DescribeAutoScalingGroups", "ec2:DescribeInstances",
          why="read the fleet groups (desired, minimum, members) and their instances' tags (no resource scoping)"),
    # Describe* actions of EC2 take no resource (the IAM reference).
    needs("ec2:DescribeSpotInstanceRequests",
          why="before re-activating a spot machine: is EC2 interrupting it (its Spot request's status)"),
    needs("ecs:DescribeContainerInstances", resources=(CONTAINER_INSTANCES,),
          why="re-check a drained machine: its status and task counts"),
    # As in lambdas/scheduler/state.py: IAM authorizes ListTasks on "*" narrowed by ecs:cluster.
    needs("ecs:ListTasks", condition={"ArnLike": {"ecs:cluster": "arn:{partition}:ecs:*:{account}:cluster/mlfleet-{environment}"}},
          why="re-check a drained machine: the tasks running or pending on it, and those ECS is stopping"),
    needs("ecs:DescribeTasks", resources=("arn:{partition}:ecs:*:{account}:task/mlfleet-{environment}/*",),
          why="re-check a drained machine: whether the tasks ECS is stopping on it have stopped"),
    needs("ecs:UpdateContainerInstancesState", resources=(CONTAINER_INSTANCES,),
          why="drain a machine being removed; re-activate one that gained work"),
    needs("ec2:CreateTags", resources=INSTANCES, tag_scoped=True, tag_keys=(tag_keys.REMOVING,),
          tag_values=f"*@{ISO_8601_TIME}", why="mark a machine being removed (the mlfleet:removing tag only)"),
    needs("ec2:DeleteTags", resources=INSTANCES, tag_scoped=True, tag_keys=(tag_keys.REMOVING,),
          why="unmark it when it is re-activated"),
    needs("autoscaling:TerminateInstanceInAutoScalingGroup",
          resources=("arn:{partition}:autoscaling:*:{account}:autoScalingGroup:*:autoScalingGroupName/mlfleet-{environment}-*",),
          tag_scoped=True, why="terminate a drained, empty machine and shrink its group by one"),
    needs("dynamodb:Query",
          resources=("arn:{partition}:dynamodb:*:{account}:table/mlfleet-{environment}-jobs/index/" + BY_STATE,),
          why="re-check a drained machine against the ledger: jobs STARTING or RUNNING placed on it"),
)


@dataclass(frozen=True)
class Scope:
    """Where and for whom one executor call acts."""
    region: str
    cluster: str
    asg_names: tuple[str, ...]  # the fleet groups the caller covers in that region
    method: str  # decide.RELEASE or decide.IDLE
    budget_percent: int = decide.DEFAULT_BUDGET_PERCENT
    # The safety net (the reaper) also finishes other methods' removals older than this.
    adopt_after: timedelta | None = None
    dry_run: bool = False


@dataclass(frozen=True)
class LedgerSource:
    """Where the job ledger is: the home region's table (the reaper runs in a fleet region)."""
    region: str
    table: str


@dataclass
class Outcome:
    terminated: list[str] = field(default_factory=list)
    reactivated: dict[str, str] = field(default_factory=dict)  # instance -> why it was kept
    dropped: dict[str, str] = field(default_factory=dict)  # proposed, not drained: why
    left: dict[str, str] = field(default_factory=dict)  # in flight, left for the next run: why
    gone: list[str] = field(default_factory=list)  # already terminated or out of its group

    def merge(self, other: Outcome) -> Outcome:
        self.terminated += other.terminated
        self.reactivated.update(other.reactivated)
        self.dropped.update(other.dropped)
        self.left.update(other.left)
        self.gone += other.gone
        return self


@dataclass
class _Target:
    """A machine this call drains and re-checks."""
    instance_id: str
    asg_name: str
    arn: str | None  # its container instance; None when it is not registered with the cluster
    method: str
    reason: str
    resumed: bool = False
    status: str | None = None  # the container instance's status, as last read
    drained_here: bool = False  # this call set it DRAINING (a spot drain by ECS is not ours to undo)
    found_draining: bool = False  # DRAINING before its removal began (its mark says so): never set ACTIVE
    instance: decide.Instance | None = None  # its EC2 instance as the re-check read it (None: unread)
    since: datetime | None = None  # when its removal began (its mark; None: unreadable)
    checked: str = ""  # the re-check's verdict, for the terminate's decision line


def _error(step: str, instance_id: str | None, error: Exception, **fields) -> str:
    reason = f"{type(error).__name__}: {error}"
    log_decision("removal-error", step=step, instance_id=instance_id, reason=reason, **fields)
    return reason


def remove(candidates: Sequence[Candidate], scope: Scope, *, registered: Mapping[str, str], ledger: LedgerSource,
           lease_expires_at: float, now: datetime, clock: Callable[[], float] = time.time,
           busy: Mapping[str, str] | None = None) -> Outcome:
    """Carry out `candidates` (this region's) and resume this method's removals in flight.
    `registered`: instance id -> container instance ARN of the cluster, for the machines being resumed.
    `busy`: instance id -> why the method holds it busy now, by what the re-check does not read (the reaper's
    idle contract: utilisation over its window); a removal in flight of such a machine is kept, never finished."""
    outcome = Outcome()
    mine = [c for c in candidates if c.region == scope.region]
    for c in mine:
        log_decision("removal-propose", instance_id=c.instance_id, asg=c.asg_name, method=c.method, reason=c.reason,
                     dry_run=scope.dry_run)
    try:
        groups = read_groups(scope.region, scope.asg_names, with_tags=True)
    except AWS_ERRORS as error:
        reason = _error("read-groups", None, error, region=scope.region)
        for c in mine:  # one line per machine, as for any candidate dropped
            outcome.dropped[c.instance_id] = f"groups unreadable: {reason}"
            log_decision("removal-dropped", instance_id=c.instance_id, asg=c.asg_name, method=c.method,
                         reason=outcome.dropped[c.instance_id], dry_run=scope.dry_run)
        return outcome

    resumes = decide.to_resume(groups.values(), scope.method, now, scope.adopt_after)
    resumed_ids = {r.instance_id for r in resumes}
    validation = decide.validate([c for c in mine if c.instance_id not in resumed_ids], groups, now,
                                 scope.budget_percent)
    for d in validation.dropped:
        outcome.dropped[d.candidate.instance_id] = d.reason
        log_decision("removal-dropped", instance_id=d.candidate.instance_id, asg=d.candidate.asg_name,
                     method=d.candidate.method, reason=d.reason, dry_run=scope.dry_run)
    targets = [_Target(r.instance_id, r.asg_name, registered.get(r.instance_id), r.mark.method,
                       f"resumed: {'adopted from ' if r.adopted else ''}{r.mark.method} since "
                       f"{r.mark.since.isoformat() if r.mark.since else 'an unreadable time'}", resumed=True,
                       found_draining=r.mark.found_draining, since=r.mark.since)
               for r in resumes]
    targets += [_Target(c.instance_id, c.asg_name, c.container_instance_arn, c.method, c.reason, since=now)
                for c in validation.accepted]
    if scope.dry_run:
        for t in targets:
            log_decision("removal-drain", instance_id=t.instance_id, asg=t.asg_name, method=t.method,
                         reason=t.reason, dry_run=True)
            outcome.left[t.instance_id] = "dry run: not drained"
        return outcome

    def lease_left() -> bool:
        return clock() + LEASE_MARGIN_SECONDS < lease_expires_at

    if not targets:
        return outcome
    if not lease_left():
        for t in targets:
            outcome.left[t.instance_id] = "placement lease running out: left for the next run"
            log_decision("removal-deferred", instance_id=t.instance_id, asg=t.asg_name, reason=outcome.left[t.instance_id])
        return outcome

    ec2, ecs = client("ec2", scope.region), client("ecs", scope.region)
    drained = _drain(ec2, ecs, scope, targets, now, outcome)
    observed = _observe(ec2, ecs, scope.cluster, drained, ledger)
    to_terminate: list[_Target] = []
    to_keep: list[tuple[_Target, str]] = []
    for t in drained:
        verdict = decide.recheck(observed[t.instance_id], now, (busy or {}).get(t.instance_id), t.since)
        if verdict.action == decide.TERMINATE:
            t.checked = verdict.reason
            to_terminate.append(t)
        elif verdict.action == decide.LEAVE:
            # Drained and tagged: never placed onto; the method's next run re-checks it.
            outcome.left[t.instance_id] = verdict.reason
            log_decision("removal-deferred", instance_id=t.instance_id, asg=t.asg_name, method=t.method,
                         reason=verdict.reason, resumed=t.resumed)
        else:
            to_keep.append((t, verdict.reason))
    _leave_overdue_stops_ec2_ends(ec2, [t for t in to_terminate if observed[t.instance_id].stopping_tasks], to_terminate,
                                  outcome)
    _keep(ec2, ecs, scope.cluster, to_keep, outcome)
    if to_terminate:
        _terminate(ec2, ecs, scope, to_terminate, lease_left, outcome)
    return outcome


def read_groups(region: str, asg_names: Sequence[str], *, with_tags: bool) -> dict[str, Group]:
    """The fleet groups as decide.Group; members' tags from DescribeInstances when `with_tags`."""
    autoscaling = client("autoscaling", region)
    raw = describe_groups(autoscaling, asg_names) if asg_names else []
    tags: dict[str, dict[str, str]] = {}
    if with_tags and raw:
        for reservation in paginate(client("ec2", region), "describe_instances", "Reservations", Filters=[
                {"Name": "tag:aws:autoscaling:groupName", "Values": [g["AutoScalingGroupName"] for g in raw]}]):
            for instance in reservation["Instances"]:
                tags[instance["InstanceId"]] = {t["Key"]: t["Value"] for t in instance.get("Tags", [])}
    return {g["AutoScalingGroupName"]: Group(
        name=g["AutoScalingGroupName"], desired=int(g["DesiredCapacity"]), min_size=int(g["MinSize"]),
        members={i["InstanceId"]: Member(i["InstanceId"], i["LifecycleState"], tags.get(i["InstanceId"], {}))
                 for i in g.get("Instances", [])})
        for g in raw}


def _describe(ecs, cluster: str, arns: Iterable[str]) -> dict[str, dict]:
    """Container instance ARN -> its description; a batch that fails is left out (unknown)."""
    found: dict[str, dict] = {}
    for batch in chunks(sorted(set(arns)), DESCRIBE_BATCH):
        try:
            for ci in ecs.describe_container_instances(cluster=cluster, containerInstances=batch)["containerInstances"]:
                found[ci["containerInstanceArn"]] = ci
        except AWS_ERRORS as error:
            _error("describe-container-instances", None, error, container_instances=batch)
    return found


def _drain(ec2, ecs, scope: Scope, targets: list[_Target], now: datetime, outcome: Outcome) -> list[_Target]:
    """Tag new targets, then set every target that is ACTIVE to DRAINING. Returns those now draining.
    The statuses are read before the tags are written: a machine DRAINING already (an operator took it out of
    service) is marked so, and no run, this one or one resuming it, sets it ACTIVE again."""
    described = _describe(ecs, scope.cluster, (t.arn for t in targets if t.arn is not None))
    for t in targets:
        t.status = described.get(t.arn, {}).get("status") if t.arn is not None else None
    tagged: list[_Target] = []
    for t in targets:
        if t.resumed:
            tagged.append(t)
            continue
        if t.arn is not None and t.status is None:
            # Unread, whether an operator drained it is unknown: left untagged and undrained, proposed again.
            outcome.dropped[t.instance_id] = "container instance unreadable before the drain"
            log_decision("removal-dropped", instance_id=t.instance_id, asg=t.asg_name, method=t.method,
                         reason=outcome.dropped[t.instance_id], dry_run=scope.dry_run)
            continue
        t.found_draining = t.status == decide.DRAINING
        try:
            ec2.create_tags(Resources=[t.instance_id], Tags=[{"Key": tag_keys.REMOVING, "Value": decide.mark_value(
                scope.method, now, found_draining=t.found_draining)}])
            tagged.append(t)
        except AWS_ERRORS as error:
            # Untagged means undrained: nothing to undo, the method proposes it again next run.
            outcome.dropped[t.instance_id] = _error("tag", t.instance_id, error, asg=t.asg_name)
    unregistered = [t for t in tagged if t.arn is None]
    for t in unregistered:
        _reactivate(ec2, ecs, scope.cluster, t, "not registered with the cluster: unknown means busy", outcome)
    tagged = [t for t in tagged if t.arn is not None]
    to_drain = [t for t in tagged if t.status == "ACTIVE"]
    failed: dict[str, str] = {}
    for batch in chunks(to_drain, DRAIN_BATCH):
        try:
            response = ecs.update_container_instances_state(cluster=scope.cluster, status="DRAINING",
                                                            containerInstances=[t.arn for t in batch])
            for failure in response.get("failures", []):
                failed[failure.get("arn", "")] = f"{failure.get('reason')}: {failure.get('detail', '')}"
            for t in batch:
                if t.arn not in failed:
                    t.status, t.drained_here = decide.DRAINING, True
        except AWS_ERRORS as error:
            reason = _error("drain", None, error, instance_ids=[t.instance_id for t in batch])
            failed.update({t.arn: reason for t in batch})
    drained = []
    for t in tagged:
        if t.arn in failed:
            # Tagged, perhaps drained: never placed onto; the next run reads it again and finishes.
            outcome.left[t.instance_id] = f"drain failed: {failed[t.arn]}"
            log_decision("removal-error", step="drain", instance_id=t.instance_id, reason=failed[t.arn],
                         action="left tagged for the next run")
        elif t.status is None:
            outcome.left[t.instance_id] = "container instance unreadable before the drain"
            log_decision("removal-error", step="describe", instance_id=t.instance_id,
                         reason=outcome.left[t.instance_id], action="left tagged for the next run")
        else:
            log_decision("removal-drain", instance_id=t.instance_id, asg=t.asg_name, method=t.method,
                         reason=t.reason, resumed=t.resumed, status=t.status)
            drained.append(t)
    return drained


def placed_jobs(ledger: LedgerSource) -> dict[str, list[str]] | None:
    """Instance id -> jobs STARTING or RUNNING that the ledger places on it; None when unreadable.
    Only `job_id` and `placement` are read, so a record the job code cannot decode does not hide the rest."""
    dynamodb = client("dynamodb", ledger.region)
    found: dict[str, list[str]] = {}
    try:
        for state in (STARTING, RUNNING):
            for item in paginate(dynamodb, "query", "Items", TableName=ledger.table, IndexName=BY_STATE,
                                 KeyConditionExpression="#state = :state", ProjectionExpression="job_id, placement",
                                 ExpressionAttributeNames={"#state": "state"},
                                 ExpressionAttributeValues={":state": {"S": state}}):
                instance_id = item.get("placement", {}).get("M", {}).get("instance_id", {}).get("S")
                job_id = item.get("job_id", {}).get("S", "?")
                if instance_id is None:
                    log_decision("removal-ledger-unplaced", job_id=job_id, state=state,
                                 reason="a job STARTING or RUNNING without a placement; ECS's task counts still guard")
                    continue
                found.setdefault(instance_id, []).append(job_id)
    except AWS_ERRORS as error:
        _error("read-ledger", None, error, table=ledger.table)
        return None
    return found


def _instances(ec2, instance_ids: Iterable[str]) -> dict[str, dict] | None:
    """Instance id -> its DescribeInstances description, read again; None when the read failed (unknown)."""
    found: dict[str, dict] = {}
    ids = sorted(set(instance_ids))
    try:
        for batch in chunks(ids, FILTER_VALUES):
            for reservation in paginate(ec2, "describe_instances", "Reservations",
                                        Filters=[{"Name": "instance-id", "Values": batch}]):
                for instance in reservation["Instances"]:
                    found[instance["InstanceId"]] = instance
    except AWS_ERRORS as error:
        _error("read-instances", None, error, instance_ids=ids)
        return None
    return found


def _spot_statuses(ec2, instance_ids: Sequence[str]) -> dict[str, str] | None:
    """Instance id -> its Spot request's status code; None when the read failed (unknown). A request that
    is gone leaves its instance out (spot_requests)."""
    found: dict[str, str] = {}
    try:
        for request in spot_requests(ec2, instance_ids):
            instance_id, code = request.get("InstanceId"), request.get("Status", {}).get("Code")
            if not instance_id or not code:
                continue
            # One request fulfils one instance; should two name it, a code that takes it away wins.
            if found.get(instance_id) in (None, *decide.SPOT_KEEPS_RUNNING):
                found[instance_id] = code
    except AWS_ERRORS as error:
        _error("read-spot-requests", None, error, instance_ids=list(instance_ids))
        return None
    return found


def _stopping(ecs, cluster: str, drained: Sequence[_Target]) -> dict[str, int | None]:
    """Container instance ARN -> how many tasks ECS is stopping on it (None: unread). The stopped tasks are
    listed per machine, then described together, 100 a call (still_stopping)."""
    listed: dict[str, list[str] | None] = {}
    for t in drained:
        try:
            listed[t.arn] = list(paginate(ecs, "list_tasks", "taskArns", cluster=cluster, containerInstance=t.arn,
                                          desiredStatus="STOPPED"))
        except AWS_ERRORS as error:
            _error("list-stopped-tasks", t.instance_id, error)
            listed[t.arn] = None
    arns = [arn for found in listed.values() if found for arn in found]
    try:
        hosts = [task.get("containerInstanceArn") for task in still_stopping(ecs, cluster, arns)] if arns else []
    except AWS_ERRORS as error:
        _error("describe-stopped-tasks", None, error, tasks=len(arns))
        return {arn: None if found is None or found else 0 for arn, found in listed.items()}
    return {arn: None if found is None else hosts.count(arn) for arn, found in listed.items()}


def _observe(ec2, ecs, cluster: str, drained: Sequence[_Target], ledger: LedgerSource) -> dict[str, Observed]:
    if not drained:
        return {}
    described = _describe(ecs, cluster, (t.arn for t in drained))
    stopping = _stopping(ecs, cluster, drained)
    jobs = placed_jobs(ledger)
    # Read again, as the tasks are: a keep-alive written since validation read the tags keeps the machine.
    # The same read says whether the instance is spot and still running, for a re-activation (_keep).
    instances = _instances(ec2, (t.instance_id for t in drained))
    observed = {}
    for t in drained:
        ci = described.get(t.arn)
        try:
            listed = len(ecs.list_tasks(cluster=cluster, containerInstance=t.arn, desiredStatus="RUNNING")["taskArns"])
        except AWS_ERRORS as error:
            _error("list-tasks", t.instance_id, error)
            listed = None
        raw = instances.get(t.instance_id) if instances is not None else None
        instance_tags = {tag["Key"]: tag["Value"] for tag in raw.get("Tags", [])} if raw is not None else None
        if raw is not None:
            t.instance = decide.Instance(state=raw.get("State", {}).get("Name"),
                                         spot=raw.get("InstanceLifecycle") == "spot",
                                         detached_at=instance_tags.get(tag_keys.DETACHED_AT))
        observed[t.instance_id] = Observed(
            ecs_status=ci.get("status") if ci else None,
            ecs_tasks=(ci.get("runningTasksCount", 0) + ci.get("pendingTasksCount", 0)) if ci else None,
            listed_tasks=listed,
            ledger_jobs=tuple(jobs.get(t.instance_id, ())) if jobs is not None else None,
            keep_alive=instance_tags.get(tag_keys.KEEP_ALIVE) if instance_tags is not None else None,
            tags_read=instance_tags is not None, stopping_tasks=stopping[t.arn])
        if ci:
            t.status = ci.get("status")
    return observed


def _leave_overdue_stops_ec2_ends(ec2, overdue: Sequence[_Target], to_terminate: list[_Target],
                                  outcome: Outcome) -> None:
    """Of the machines to terminate whose tasks ECS has been stopping past the grace, leave those EC2 is taking
    away, or whose state is unknown (decide.overdue_stop): their Spot requests read in one batched call."""
    if not overdue:
        return
    spot = [t.instance_id for t in overdue if t.instance is not None and t.instance.spot]
    statuses = _spot_statuses(ec2, spot) if spot else {}
    for t in overdue:
        instance = t.instance
        if instance is not None and instance.spot:
            instance = replace(instance, spot_status=statuses.get(t.instance_id) if statuses is not None else None)
        verdict = decide.overdue_stop(instance)
        if verdict is not None:
            to_terminate.remove(t)
            outcome.left[t.instance_id] = verdict.reason
            log_decision("removal-deferred", instance_id=t.instance_id, asg=t.asg_name, method=t.method,
                         reason=verdict.reason, resumed=t.resumed)


def _keep(ec2, ecs, cluster: str, kept: Sequence[tuple[_Target, str]], outcome: Outcome) -> None:
    """Machines the protocol keeps (each with why): re-activate them, except those EC2 is taking away or
    whose state is unknown (decide.reactivation), which stay DRAINING and tagged for the next run. The
    Spot requests are read here, right before the writes, in one batched call."""
    spot = [t.instance_id for t, _ in kept if t.instance is not None and t.instance.spot]
    statuses = _spot_statuses(ec2, spot) if spot else {}
    for t, reason in kept:
        instance = t.instance
        if instance is not None and instance.spot:
            instance = replace(instance, spot_status=statuses.get(t.instance_id) if statuses is not None else None)
        verdict = decide.reactivation(reason, instance)
        if verdict.action == decide.REACTIVATE:
            _reactivate(ec2, ecs, cluster, t, reason, outcome)
        else:
            outcome.left[t.instance_id] = verdict.reason
            log_decision("removal-kept-draining", instance_id=t.instance_id, asg=t.asg_name, method=t.method,
                         reason=verdict.reason, resumed=t.resumed)


def _reactivate(ec2, ecs, cluster: str, t: _Target, reason: str, outcome: Outcome) -> None:
    """ACTIVE again (when this protocol drained it), then the tag removed. A failure leaves the tag:
    the machine is still never placed onto, and the next run resumes it. A drain this call made is undone
    whatever the status read since says: ECS reads are eventually consistent, and one that still said
    ACTIVE would leave the machine DRAINING with its tag gone, never placed onto and never released.
    A resumed machine found DRAINING was drained by an earlier run, unless its mark says it was DRAINING when
    that run began (an operator's drain: `found_draining`); _keep has ruled out a spot drain (the agent's or
    job-events'). Called directly only for a machine not registered with the cluster (nothing
    to set ACTIVE, and nothing is placed onto it)."""
    try:
        if t.arn is not None and (t.drained_here or (t.resumed and t.status == decide.DRAINING
                                                     and not t.found_draining)):
            response = ecs.update_container_instances_state(cluster=cluster, containerInstances=[t.arn], status="ACTIVE")
            if response.get("failures"):
                raise RuntimeError(f"UpdateContainerInstancesState ACTIVE failed: {response['failures']}")
        ec2.delete_tags(Resources=[t.instance_id], Tags=[{"Key": tag_keys.REMOVING}])
    except (*AWS_ERRORS, RuntimeError) as error:
        outcome.left[t.instance_id] = f"re-activation failed ({_error('reactivate', t.instance_id, error)}); kept: {reason}"
        return
    outcome.reactivated[t.instance_id] = reason
    log_decision("removal-reactivate", instance_id=t.instance_id, asg=t.asg_name, method=t.method, reason=reason)


def _terminate(ec2, ecs, scope: Scope, targets: list[_Target], lease_left: Callable[[], bool], outcome: Outcome) -> None:
    """Read the groups again, then terminate each with the decrement, or re-activate it."""
    try:
        groups = read_groups(scope.region, sorted({t.asg_name for t in targets}), with_tags=False)
    except AWS_ERRORS as error:
        reason = _error("read-groups", None, error, region=scope.region)
        for t in targets:  # one line per machine: drained and tagged, the next run resumes it
            outcome.left[t.instance_id] = f"groups unreadable before the terminate ({reason}); drained, tagged"
            log_decision("removal-deferred", instance_id=t.instance_id, asg=t.asg_name, reason=outcome.left[t.instance_id])
        return
    autoscaling = client("autoscaling", scope.region)
    done: dict[str, int] = {}
    kept: list[tuple[_Target, str]] = []
    for t in targets:
        if not lease_left():
            outcome.left[t.instance_id] = "placement lease running out before the terminate: left for the next run"
            log_decision("removal-deferred", instance_id=t.instance_id, asg=t.asg_name, reason=outcome.left[t.instance_id])
            continue
        verdict = decide.may_terminate(groups.get(t.asg_name), t.instance_id, done.get(t.asg_name, 0))
        if verdict.action == decide.TERMINATE:
            try:
                autoscaling.terminate_instance_in_auto_scaling_group(InstanceId=t.instance_id,
                                                                     ShouldDecrementDesiredCapacity=True)
            except ClientError as error:
                err = error.response.get("Error", {})
                verdict = decide.terminate_error(err.get("Code", ""), err.get("Message", ""))
                _error("terminate", t.instance_id, error, asg=t.asg_name, then=verdict.action)
            except BotoCoreError as error:
                # A timeout may or may not have terminated it: the next run reads the group and knows.
                outcome.left[t.instance_id] = f"terminate unconfirmed ({_error('terminate', t.instance_id, error)})"
                continue
            else:
                done[t.asg_name] = done.get(t.asg_name, 0) + 1
                outcome.terminated.append(t.instance_id)
                log_decision("removal-terminate", instance_id=t.instance_id, asg=t.asg_name, method=t.method,
                             reason=t.reason, recheck=t.checked, group=verdict.reason)
                continue
        if verdict.action == decide.REACTIVATE:
            kept.append((t, verdict.reason))
        elif verdict.action == decide.GONE:
            outcome.gone.append(t.instance_id)
            log_decision("removal-terminate", instance_id=t.instance_id, asg=t.asg_name, method=t.method,
                         reason=verdict.reason, already_gone=True)
        else:
            outcome.left[t.instance_id] = verdict.reason
            log_decision("removal-deferred", instance_id=t.instance_id, asg=t.asg_name, reason=verdict.reason)
    _keep(ec2, ecs, scope.cluster, kept, outcome)
