"""The removal executor (lambdas/removal/execute.py) over drawn worlds, against moto: a property.

Hypothesis draws a fleet region (one or two Auto Scaling groups, minimum 0-2, 1-6 Spot Instances in all,
each registered with the cluster), each machine with or without work (an ECS task, a job the ledger
places on it, or a task ECS is stopping with no job placed: a job cancelled or requeued at its notice,
saving its results), perhaps tagged `mlfleet:removing` by an earlier run (either method; a fresh, an old
or an unreadable mark; drained by that run or not), perhaps DRAINING already (by an operator, or at its
spot notice, its Spot request then saying so), perhaps with `mlfleet:keep-alive` (true, a future time, a
past time, garbage). One method (RELEASE or IDLE, the reaper adopting old marks) proposes some machines,
and the world changes between the executor's steps (before the tag, before the drain, during the
re-check, before the group read of the terminate): a task starts, a job is placed, a task is stopped, a
keep-alive is written, a group's minimum is raised, EC2 terminates a member, the placement lease runs out
(a slow call); one call may fail (tests/removal/world.py `inject`).
Then the method runs once more, cleanly, proposing nothing: it resumes what was left.

What holds (docs/removal.md, docs/runbook.md "Taking a machine out of service"):
- no machine with a task or a job placed on it is terminated, nor one a valid keep-alive protects;
- no machine with a task ECS is still stopping is terminated, unless its removal began more than
  decide.STOPPING_GRACE ago (a stuck stop); such a machine may stay drained and tagged after the clean run;
- no terminate leaves a group below its minimum (its desired capacity, and its members in service);
- in one run, the machines newly tagged in a group, with the removals already in flight and its members
  terminating, stay within the disruption budget (10% of its desired capacity, at least one);
- every candidate gets exactly one decision line naming it (and exactly one outcome);
- a machine an operator drained before the protocol marked it stays drained, by the marking run and by one
  resuming it (its mark says it was DRAINING: `;found-draining`);
- after the clean run none is left half-removed: tagged `mlfleet:removing` and not terminated, or drained
  by the protocol and left drained; except a machine EC2 is taking (its spot notice, or terminated), which
  is kept drained, and another method's removal this method does not adopt.

Where moto differs from AWS (see also tests/removal/world.py), and what the test does:
- EC2's TerminateInstances leaves moto's member InService (an attached instance; one moto's group launched
  it replaces at once), the desired capacity unchanged; AWS's group marks it unhealthy, moves it to
  Terminating and launches a replacement, Pending while it boots. The function's DescribeAutoScalingGroups
  answers are made to say `Terminating` for it, and `Pending` for any member the group launched (moto's are
  InService at once); the property counts the members in service the same way. Its container instance
  stays ACTIVE in moto (in AWS the agent disconnects, and ECS later deregisters it).
- moto's Spot requests only ever say `fulfilled`; a machine drained at its notice gets its requests'
  answers made to say the notice's code (`world.interrupt`).
- moto's terminate never refuses to go below the minimum: the property checks after each terminate that
  the group is at or above it, as AWS would have refused.
- moto's StopTask stops a task at once; a task ECS is stopping is held at desiredStatus STOPPED, lastStatus
  RUNNING (tests/ecs_agent.py `stopping`), every task's status held where it is set.
- Raising a minimum above the desired capacity raises the desired capacity, in moto and in AWS; the new
  member is not registered with the cluster (it is never a candidate).

HYPOTHESIS_PROFILE=ci runs few examples (a moto world costs ~0.3 s; the first of a session ~1 s more);
EVENT_EXAMPLES=N runs N (tests/perturbation.py).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

import ecs_agent
from hypothesis import event, example, given
from hypothesis import strategies as st
from perturbation import Lines, budget
from removal import world
from removal.test_execute_moto import CALLS, WRITES  # the fault matrix: every call the executor makes
from removal.world import (CLUSTER, ENV, FAULTS, FLEET_REGION, HOME, LEDGER, _register, aws, fleet_moto, inject,
                           interrupt, place_job_in_ledger)

from lambdas.common import tags as tag_keys
from lambdas.common.keep_alive import keep_alive_protects
from lambdas.removal import decide
from lambdas.removal.execute import Scope, remove

ADOPT_AFTER = timedelta(minutes=30)  # the reaper's (lambdas/reaper/handler.py ADOPT_AFTER)
NOTICE_CODES = ("marked-for-termination", "marked-for-stop", "instance-terminated-no-capacity")
# The executor's steps an event may come before (the first call of each, or the terminate's group read):
# the world changes between the validation's read and the tag, the tag and the drain, during the re-check
# (before its ledger and tag reads), and between the re-check and the group read before the terminate.
POINTS = {"tag": ("ec2", "CreateTags", 0), "drain": ("ecs", "UpdateContainerInstancesState", 0),
          "recheck": ("dynamodb", "Query", 0), "terminate-read": ("autoscaling", "DescribeAutoScalingGroups", 1)}
# Work and keep-alives come no later than the re-check: after it, under the placement lease, no scheduler run
# places (docs/removal.md, "The placement lease"), and a keep-alive written then is not read again.
EARLY = ("tag", "drain", "recheck")


@dataclass(frozen=True)
class Machine:
    work: str | None = None  # "task", "job" (the ledger places a job on it), "stopping" (a task ECS stops), or None
    mark: tuple[str, str] | None = None  # (method, "fresh" | "old" | "unreadable"): an earlier run's tag
    drained: str | None = None  # "operator", "protocol" (the marking run drained it), or a spot notice's code
    keep_alive: str | None = None  # "true", "future", "past", "garbage"


@dataclass(frozen=True)
class Fleet:
    groups: tuple[tuple[int, tuple[Machine, ...]], ...]  # (min size, members)
    method: str
    proposed: tuple[tuple[int, int], ...]  # (group, member), in the method's order
    events: tuple[tuple[str, str, int, int], ...]  # (point, kind, group, member)
    fault: tuple[str, str, int, str, bool] | None = None  # world.CALLS' (service, operation, skip), kind, applied
    lease_out: str | None = None  # the point from which the placement lease has run out (a slow call)


@st.composite
def machines(draw) -> Machine:
    """Mostly a plain idle machine, so that removals go through; any of the drawn states otherwise."""
    plain = st.booleans()
    mark = None if draw(plain) else draw(st.none() | st.tuples(
        st.sampled_from([decide.RELEASE, decide.IDLE]), st.sampled_from(["fresh", "old", "unreadable"])))
    drains = ["operator", *NOTICE_CODES] + (["protocol"] * 2 if mark else [])
    return Machine(work=None if draw(plain) else draw(st.sampled_from([None, "task", "job", "stopping"])), mark=mark,
                   drained=None if draw(plain) else draw(st.none() | st.sampled_from(drains)),
                   keep_alive=None if draw(plain) else draw(st.sampled_from([None, "true", "future", "past", "garbage"])))


@st.composite
def fleets(draw) -> Fleet:
    sizes = draw(st.sampled_from([[1], [2], [3], [4], [6], [1, 1], [2, 1], [3, 3], [1, 4]]))
    groups = tuple((draw(st.sampled_from([0, 0, 1, 2][:n + 2])), tuple(draw(machines()) for _ in range(n))) for n in sizes)
    everyone = [(g, m) for g, n in enumerate(sizes) for m in range(n)]
    proposed = tuple(draw(st.permutations(everyone))[:draw(st.integers(1, len(everyone)))])
    event = st.one_of(
        st.tuples(st.sampled_from(EARLY), st.sampled_from(["task", "job", "stopping", "keep-alive"]),
                  st.sampled_from(everyone)),
        st.tuples(st.sampled_from(list(POINTS)), st.sampled_from(["min", "min+1", "ec2-terminate"]),
                  st.sampled_from(everyone)))
    events = tuple((p, k, g, m) for p, k, (g, m) in draw(st.lists(event, max_size=3)))
    cases = [(s, o, skip, kind, applied) for s, o, skip in CALLS for kind in FAULTS
             for applied in ((False, True) if o in WRITES and kind == "timeout" else (False,))]
    fault = draw(st.none() | st.none() | st.sampled_from(cases))
    lease_out = draw(st.none() | st.none() | st.none() | st.sampled_from(["start", *POINTS]))
    return Fleet(groups, draw(st.sampled_from([decide.RELEASE, decide.IDLE])), proposed, events, fault, lease_out)


def asg(g: int) -> str:
    return f"mlfleet-{ENV}-gpu{g + 1}"


def build(fleet: Fleet, now: datetime) -> list[list[str]]:
    """The fleet's groups of registered Spot Instances (moto's groups launch on-demand ones: requested and
    attached, as world.build does), in the drawn state. Returns each group's instance ids."""
    ec2, autoscaling, ecs = aws("ec2"), aws("autoscaling"), aws("ecs")
    ecs.create_cluster(clusterName=CLUSTER)
    ecs.register_task_definition(family=f"mlfleet-{ENV}-gpu-job",
                                 containerDefinitions=[{"name": "job", "image": "busybox", "memory": 512}])
    world.create_ledger_by_state()
    ids: list[list[str]] = []
    for g, (min_size, members) in enumerate(fleet.groups):
        ec2.create_launch_template(LaunchTemplateName=asg(g), LaunchTemplateData={"ImageId": "ami-12c6146b",
                                                                                 "InstanceType": "g5.xlarge"})
        autoscaling.create_auto_scaling_group(
            AutoScalingGroupName=asg(g), LaunchTemplate={"LaunchTemplateName": asg(g)}, MinSize=0, MaxSize=10,
            DesiredCapacity=0, AvailabilityZones=[f"{FLEET_REGION}a"], NewInstancesProtectedFromScaleIn=True,
            Tags=[{"Key": "mlfleet:environment", "Value": ENV, "PropagateAtLaunch": True}])
        requests = ec2.request_spot_instances(InstanceCount=len(members), LaunchSpecification={
            "ImageId": "ami-12c6146b", "InstanceType": "g5.xlarge", "Placement": {"AvailabilityZone": f"{FLEET_REGION}a"}})
        group_ids = [r["InstanceId"] for r in requests["SpotInstanceRequests"]]
        ec2.create_tags(Resources=group_ids, Tags=[{"Key": "mlfleet:environment", "Value": ENV}])
        autoscaling.attach_instances(AutoScalingGroupName=asg(g), InstanceIds=group_ids)
        autoscaling.update_auto_scaling_group(AutoScalingGroupName=asg(g), MinSize=min_size)
        ids.append(group_ids)
    return ids


@dataclass
class Record:
    """What the function's own calls did, as AWS (moto) applied them, for one run."""
    tagged: list[str]
    drained: list[str]
    activated: list[str]
    terminated: list[str]


def record(state) -> Record:
    rec = Record([], [], [], [])

    def tags(params, **_):
        if any(t["Key"] == tag_keys.REMOVING for t in params["Tags"]):
            rec.tagged += params["Resources"]

    def states(params, **_):
        (rec.drained if params["status"] == "DRAINING" else rec.activated).extend(params["containerInstances"])

    def terminate(params, **_):
        rec.terminated.append(params["InstanceId"])
        state.check_minimum(params["InstanceId"])

    # Kept from before-parameter-build to after-call: the call's parameters once AWS has applied it.
    for service, operation, action in (("ec2", "CreateTags", tags), ("ecs", "UpdateContainerInstancesState", states),
                                       ("autoscaling", "TerminateInstanceInAutoScalingGroup", terminate)):
        pending: list[dict] = []
        _register(service, FLEET_REGION, "before-parameter-build", operation,
                  lambda params, _p=pending, **_: _p.append(dict(params)))
        _register(service, FLEET_REGION, "after-call", operation,
                  lambda http_response, _p=pending, _a=action, **_: _a(_p.pop()) if http_response.status_code < 300 else _p.pop())
    return rec


class State:
    """The drawn world in moto, and what the property tracks while the executor runs."""

    def __init__(self, fleet: Fleet, ids: list[list[str]], now: datetime):
        self.fleet, self.ids, self.now = fleet, ids, now
        self.group_of = {i: g for g, members in enumerate(ids) for i in members}
        self.arns = self._arns()
        self.busy: set[str] = set()  # a task or a job placed on it, at some point
        self.stopping: set[str] = set()  # a task ECS is stopping on it, at some point (held so: never stopped)
        self.protected: set[str] = set()  # a valid keep-alive, at some point before the re-check
        self.ec2_terminated: set[str] = set()
        self.lease_expired = False  # the clock the executor reads jumps past the lease's expiry
        self.violations: list[str] = []

    def _arns(self) -> dict[str, str]:
        ecs = aws("ecs")
        for i in self.group_of:
            ecs_agent.register(ecs, CLUSTER, i, FLEET_REGION, gpus=1)  # g5.xlarge's
        arns = ecs.list_container_instances(cluster=CLUSTER)["containerInstanceArns"]
        return {ci["ec2InstanceId"]: ci["containerInstanceArn"]
                for ci in ecs.describe_container_instances(cluster=CLUSTER, containerInstances=arns)["containerInstances"]}

    def id(self, g: int, m: int) -> str:
        return self.ids[g][m]

    # --- the drawn state and the events ---------------------------------------------------------------------

    def give_work(self, instance_id: str, work: str) -> None:
        if work == "stopping":
            ecs = aws("ecs")
            task = ecs.start_task(cluster=CLUSTER, taskDefinition=f"mlfleet-{ENV}-gpu-job",
                                  containerInstances=[self.arns[instance_id]], startedBy="someone")["tasks"][0]
            ecs.stop_task(cluster=CLUSTER, task=task["taskArn"], reason="cancelled")
            ecs_agent.stopping(task["taskArn"])
            self.stopping.add(instance_id)
            return
        if work == "task":
            aws("ecs").start_task(cluster=CLUSTER, taskDefinition=f"mlfleet-{ENV}-gpu-job",
                                  containerInstances=[self.arns[instance_id]], startedBy="someone")
        else:
            place_job_in_ledger(f"sub-20261122120000-abcdef-{len(self.busy):05d}", instance_id)
        self.busy.add(instance_id)

    def keep_alive(self, instance_id: str, kind: str) -> None:
        value = {"true": "true", "future": (self.now + timedelta(days=1)).isoformat(), "garbage": "soon",
                 "past": (self.now - timedelta(days=1)).isoformat()}[kind]
        aws("ec2").create_tags(Resources=[instance_id], Tags=[{"Key": tag_keys.KEEP_ALIVE, "Value": value}])
        if keep_alive_protects(value, self.now)[0]:
            self.protected.add(instance_id)

    def set_up(self) -> None:
        for g, (_, members) in enumerate(self.fleet.groups):
            for m, machine in enumerate(members):
                i = self.id(g, m)
                if machine.work:
                    self.give_work(i, machine.work)
                if machine.keep_alive:
                    self.keep_alive(i, machine.keep_alive)
                if machine.mark:
                    method, age = machine.mark
                    value = (f"{method}@not-a-time" if age == "unreadable" else
                             decide.mark_value(method, self.now - (timedelta(minutes=1) if age == "fresh" else timedelta(hours=2))))
                    aws("ec2").create_tags(Resources=[i], Tags=[{"Key": tag_keys.REMOVING, "Value": value}])
                if machine.drained:
                    aws("ecs").update_container_instances_state(cluster=CLUSTER, containerInstances=[self.arns[i]],
                                                                status="DRAINING")
                    if machine.drained in NOTICE_CODES:
                        interrupt(i, machine.drained)
        # AWS's group moves a member EC2 terminated to Terminating, and a member it launches (a replacement, or
        # for a minimum raised) is Pending while it boots; moto's are InService at once. The function's answers
        # say what AWS's would.
        def terminating(parsed, **_):
            for group in parsed.get("AutoScalingGroups", []):
                for member in group.get("Instances", []):
                    if member["InstanceId"] in self.ec2_terminated:
                        member["LifecycleState"] = "Terminating"
                    elif member["InstanceId"] not in self.group_of:
                        member["LifecycleState"] = "Pending"

        _register("autoscaling", FLEET_REGION, "after-call", "DescribeAutoScalingGroups", terminating)

    def arm(self) -> None:
        """The events, each before its step of the first run."""
        for point in POINTS:
            events = [e for e in self.fleet.events if e[0] == point]
            if self.fleet.lease_out == point:
                events.append((point, "lease-out", 0, 0))
            if not events:
                continue
            service, operation, skip = POINTS[point]
            seen = [0]

            def before(_events=events, _seen=seen, _skip=skip, **_):
                _seen[0] += 1
                if _seen[0] == _skip + 1:
                    for _, kind, g, m in _events:
                        self.event(kind, g, m)

            _register(service, HOME if service == "dynamodb" else FLEET_REGION, "before-parameter-build", operation,
                      before)

    def event(self, kind: str, g: int, m: int) -> None:
        i = self.id(g, m)
        if kind == "lease-out":
            self.lease_expired = True
        elif kind in ("task", "job"):
            self.give_work(i, kind)
        elif kind == "keep-alive":
            self.keep_alive(i, "true")
        elif kind == "ec2-terminate":
            aws("ec2").terminate_instances(InstanceIds=[i])
            self.ec2_terminated.add(i)
        else:
            desired = self.group(g)["DesiredCapacity"]
            aws("autoscaling").update_auto_scaling_group(AutoScalingGroupName=asg(g),
                                                         MinSize=desired + (kind == "min+1"))

    # --- reading the world ----------------------------------------------------------------------------------

    def group(self, g: int) -> dict:
        return aws("autoscaling").describe_auto_scaling_groups(AutoScalingGroupNames=[asg(g)])["AutoScalingGroups"][0]

    def in_service(self, group: dict) -> int:
        """Its members in service as AWS would say (see `set_up`): the drawn ones, less those EC2 terminated."""
        return sum(1 for i in group["Instances"] if i["LifecycleState"] == "InService"
                   and i["InstanceId"] in self.group_of and i["InstanceId"] not in self.ec2_terminated)

    def check_minimum(self, instance_id: str) -> None:
        """Right after a terminate (moto never refuses one below the minimum; AWS would)."""
        group = self.group(self.group_of[instance_id])
        if min(group["DesiredCapacity"], self.in_service(group)) < group["MinSize"]:
            self.violations.append(f"terminating {instance_id} left {group['AutoScalingGroupName']} below its minimum "
                                   f"{group['MinSize']}: desired {group['DesiredCapacity']}, "
                                   f"in service {self.in_service(group)}")

    def members(self) -> set[str]:
        return {i["InstanceId"] for g in range(len(self.ids)) for i in self.group(g)["Instances"]}

    def tags(self) -> dict[str, dict[str, str]]:
        found = {}
        for reservation in aws("ec2").describe_instances(InstanceIds=list(self.group_of))["Reservations"]:
            for instance in reservation["Instances"]:
                found[instance["InstanceId"]] = {t["Key"]: t["Value"] for t in instance.get("Tags", [])}
        return found

    def statuses(self) -> dict[str, str]:
        by_arn = {a: i for i, a in self.arns.items()}
        return {by_arn[ci["containerInstanceArn"]]: ci["status"] for ci in aws("ecs").describe_container_instances(
            cluster=CLUSTER, containerInstances=list(self.arns.values()))["containerInstances"]}

    def in_flight(self, g: int, tags: dict[str, dict[str, str]]) -> tuple[int, int, int]:
        """A group's desired capacity, removals in flight (tagged, not terminating) and members terminating,
        as the function reads them at the start of a run."""
        group = self.group(g)
        terminating = {i["InstanceId"] for i in group["Instances"]
                       if i["LifecycleState"].startswith("Terminat") or i["InstanceId"] in self.ec2_terminated}
        flight = sum(1 for i in group["Instances"] if i["InstanceId"] not in terminating
                     and tag_keys.REMOVING in tags.get(i["InstanceId"], {}))
        return group["DesiredCapacity"], flight, len(terminating)


def final_lines(lines: list[dict], instance_id: str) -> list[dict]:
    """A machine's decision lines that end its handling in a run (docs/removal.md): dropped, terminated
    (or found gone), re-activated, kept draining, deferred, or an error that leaves it for the next run.
    An error followed by a decision (a ListTasks that failed, a refused terminate) is not one."""
    ends = {"removal-dropped", "removal-terminate", "removal-reactivate", "removal-kept-draining", "removal-deferred"}
    return [line for line in lines if line.get("instance_id") == instance_id and (
        line["decision"] in ends or line["decision"] == "removal-error" and (
            line.get("step") in ("tag", "drain", "describe", "reactivate")
            or line.get("step") == "terminate" and "then" not in line))]


def run(state: State, proposed: list[str], *, fault=None, events: bool = False):
    """One executor call of the fleet's method, with the events and the fault when given; returns its
    outcome, its lines and what it did. The hooks it registers are gone once it returns."""
    fleet = state.fleet
    tags = state.tags()
    starting = {g: state.in_flight(g, tags) for g in range(len(state.ids))}
    armed = len(world._HOOKS)
    rec = record(state)
    if events:
        state.arm()
    if fault:
        service, operation, skip, kind, applied = fault
        inject(service, operation, FAULTS[kind], region=HOME if service == "dynamodb" else FLEET_REGION,
               applied=applied, skip=skip)
    candidates = [decide.Candidate(i, state.arns[i], FLEET_REGION, asg(state.group_of[i]), fleet.method, "drawn")
                  for i in proposed]
    scope = Scope(FLEET_REGION, CLUSTER, tuple(asg(g) for g in range(len(state.ids))), fleet.method,
                  adopt_after=ADOPT_AFTER if fleet.method == decide.IDLE else None)
    try:
        with Lines() as lines:
            outcome = remove(candidates, scope, registered=state.arns, ledger=LEDGER,
                             lease_expires_at=time.time() + 600, now=state.now,
                             clock=lambda: time.time() + (3600 if state.lease_expired else 0))
    finally:
        while len(world._HOOKS) > armed:  # an event or a fault not met in this run never comes in the next
            registry, name, handler = world._HOOKS.pop()
            registry.unregister(name, handler)
    lines = [line for line in lines if line["decision"].startswith("removal-")]

    for i in proposed:
        ends = final_lines(lines, i)
        assert len(ends) == 1, (i, ends, lines)
        places = [name for name, found in (("terminated", outcome.terminated), ("reactivated", outcome.reactivated),
                                           ("dropped", outcome.dropped), ("left", outcome.left), ("gone", outcome.gone))
                  if i in found]
        assert len(places) == 1, (i, places, outcome)
    for g, (desired, flight, terminating) in starting.items():
        new = {i for i in rec.tagged if state.group_of[i] == g}
        room = max(0, decide.disruption_budget(desired) - flight - terminating)
        assert len(new) <= room, (f"{asg(g)}: {len(new)} newly tagged, budget {decide.disruption_budget(desired)} "
                                  f"with {flight} in flight and {terminating} terminating", lines)
    return outcome, lines, rec


def operator_drained(fleet: Fleet, state: State) -> set[str]:
    """Drained by an operator and not tagged: no earlier run of the protocol can have drained them."""
    return {state.id(g, m) for g, (_, members) in enumerate(fleet.groups) for m, machine in enumerate(members)
            if machine.drained == "operator" and machine.mark is None}


def stale_marks(fleet: Fleet, state: State) -> set[str]:
    """Machines whose removal began more than decide.STOPPING_GRACE before the runs (an "old" mark: 2 hours)."""
    return {state.id(g, m) for g, (_, members) in enumerate(fleet.groups) for m, machine in enumerate(members)
            if machine.mark and machine.mark[1] == "old"}


def check(fleet: Fleet, monkeypatch) -> str:
    now = datetime.now(timezone.utc)
    with fleet_moto(monkeypatch), ecs_agent.held_task_statuses():
        state = State(fleet, build(fleet, now), now)
        state.set_up()
        state.lease_expired = fleet.lease_out == "start"
        first, first_lines, first_rec = run(state, [state.id(g, m) for g, m in fleet.proposed], fault=fleet.fault,
                                            events=True)
        # The clean run: no event, no fault, a fresh lease, nothing proposed; it resumes what the first left.
        state.lease_expired = False
        second, second_lines, second_rec = run(state, [])

        terminated = set(first_rec.terminated) | set(second_rec.terminated)
        assert not state.violations, state.violations
        assert not terminated & state.busy, f"terminated with work on it: {terminated & state.busy}"
        assert not terminated & state.protected, f"terminated under a keep-alive: {terminated & state.protected}"
        cut_short = (terminated & state.stopping) - stale_marks(fleet, state)
        assert not cut_short, f"terminated while a task ECS is stopping saves its checkpoint: {cut_short}"

        members, tags, statuses = state.members(), state.tags(), state.statuses()
        # Since the marks say whether a machine was DRAINING when its removal began, a resumed removal keeps an
        # operator's drain too (docs/runbook.md).
        for i in operator_drained(fleet, state):
            if i in members and i not in terminated:
                assert statuses[i] == "DRAINING", f"{i}: an operator's drain undone ({statuses[i]})"

        drained_by_protocol = {i for i, a in state.arns.items() if a in first_rec.drained + second_rec.drained} | {
            state.id(g, m) for g, (_, ms) in enumerate(fleet.groups) for m, machine in enumerate(ms)
            if machine.drained == "protocol"}
        spot_noticed = {state.id(g, m) for g, (_, ms) in enumerate(fleet.groups) for m, machine in enumerate(ms)
                        if machine.drained in NOTICE_CODES}
        for i in (members & set(state.group_of)) - state.ec2_terminated - spot_noticed:
            mark = tags[i].get(tag_keys.REMOVING)
            if mark is not None:
                parsed = decide.parse_mark(mark)
                # Another method's removal: left to it, unless the reaper adopts it (old or unreadable).
                others = parsed.method != fleet.method and not (
                    fleet.method == decide.IDLE and (parsed.since is None or now - parsed.since >= ADOPT_AFTER))
                # A task still stopping holds it, drained and tagged, for the next run (decide.recheck).
                waiting = i in state.stopping and "ECS is stopping" in second.left.get(i, "")
                assert others or waiting, \
                    f"{i} left tagged {mark} after the clean run: {second.left.get(i) or first.left.get(i)}"
                continue
            if i in drained_by_protocol and i not in operator_drained(fleet, state):
                assert statuses[i] == "ACTIVE", f"{i} drained by the protocol and left {statuses[i]}, untagged"
        return (f"terminated {len(terminated)}, the first run left {len(first.left)}, "
                f"re-activated {len(first.reactivated) + len(second.reactivated)}")


@budget(ci=3)
@given(fleet=fleets())
# The spot market takes the other member during the re-check: the terminate's read must count it (decide.may_terminate).
@example(fleet=Fleet(((1, (Machine(), Machine())),), decide.IDLE, ((0, 0),), (("recheck", "ec2-terminate", 0, 1),)))
# A job moved off its machine saves its checkpoint within its stop timeout: the re-check must wait for its task.
@example(fleet=Fleet(((0, (Machine(work="stopping"), Machine())),), decide.RELEASE, ((0, 0), (0, 1)), ()))
def test_the_executor_never_kills_work_keeps_the_minimum_and_the_budget_and_leaves_nothing_half_done(fleet, monkeypatch):
    event(check(fleet, monkeypatch))
