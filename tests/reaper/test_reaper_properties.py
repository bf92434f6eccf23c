"""The reaper's handler (lambdas/reaper/handler.py) over drawn worlds, against moto: a property.

Hypothesis draws one or two fleet groups (minimum 0-2, 1-6 instances registered with the cluster) and 0-2
standalone machines (on-demand, a Spot Instance of a persistent request, one of a one-time request). Each
machine has a CPU and GPU utilisation over the idle window (idle, busy, partly: a period without data, or
no datapoints at all), perhaps an ECS task or a job the ledger places on it (fleet members only: nothing
is placed on a machine outside the cluster), perhaps `mlfleet:keep-alive` (true, a future time, one that
expires between the runs, a past time, garbage), perhaps an earlier reaper mark `mlfleet:idle-since`
(fresh, past the grace, unreadable), perhaps DRAINING by an operator (fleet members), perhaps a removal an
earlier run left in flight (tagged `mlfleet:removing` by the reaper or the scheduler's releases, fresh, old
or unreadable, and drained; fleet members). The settings (DRY_RUN, MAX_ACTIONS_PER_RUN,
DISRUPTION_BUDGET_PERCENT) are drawn. The real handler runs 2-3 times, time moving on between runs (past
the grace sometimes), and the world may change between runs: a task starts, a job is placed, the
utilisation rises, a keep-alive is written.

What holds, read back from moto after each run (docs/reaper.md, docs/removal.md):
- no machine with a task or a job placed on it, under a valid keep-alive (an unreadable value protects), or
  whose window at the run's time holds a period at or above a threshold or without data, is terminated or
  stopped by that run;
- no group goes below its minimum (its desired capacity and its members in service);
- the removals a run begins (fleet terminations, standalone stops and terminations; not a removal in flight,
  which an earlier run began) are at most MAX_ACTIONS_PER_RUN, and the machines it newly tags
  `mlfleet:removing` in a group, with those in flight, are within the disruption budget
  (DISRUPTION_BUDGET_PERCENT of the group's desired capacity, at least one);
- a dry run changes nothing (instance states, tags, container instance statuses, groups);
- every machine the run finds (the environment's running instances) gets exactly one decision line;
- a machine is removed only when its `mlfleet:idle-since`, as it was before the run, is at least the grace old
  (but a removal in flight, whose grace was the earlier run's);
- an operator's drain stays on every machine not terminated.

Where moto differs from AWS (see also tests/removal/world.py and tests/reaper/test_reaper_moto.py):
- moto stamps LaunchTime with the wall clock: the runs are at "now + 3 h" and later, and the metrics are put
  at those future periods (real CloudWatch rejects points more than 2 h ahead; moto keeps them). There is no
  CloudWatch agent: GPU datapoints are put under its namespace, metric name and dimensions. moto's
  GetMetricData answers Maximum per period as AWS does; the property only ever raises a period's maximum.
- moto does not track GPUs on ECS container instances (tests/ecs_agent.py adds them to the registration);
  the reaper reads task counts only. A task moto starts stays RUNNING (no agent): the property starts tasks
  and never stops one.
- moto's groups launch on-demand instances whatever the launch template asks; the fleet members here are
  on-demand (the executor's spot-notice paths are the removal property's, tests/removal). Its
  TerminateInstanceInAutoScalingGroup terminates at once (no Terminating member) and never refuses to go
  below the minimum: the property checks the minimum itself after each run, as AWS would have refused.
- moto stops a Spot Instance of a one-time request; AWS refuses with UnsupportedOperation: the function's
  StopInstances is made to refuse it as AWS does (tests/reaper/test_one_time_spot.py `refuse_like_aws`).
  moto's Spot requests only ever say `fulfilled` and report no SpotInstanceRequestId on the instance.
- moto terminates and stops at once (`terminated`, `stopped`; AWS passes `shutting-down`, `stopping`).

Left out: faults (the removal property draws them for the executor, tests/reaper/test_reaper_findings.py
covers the reaper's own), spot notices, the lease held by the scheduler, a task that ends.

HYPOTHESIS_PROFILE=ci runs 2 examples and one pinned (a world with its runs costs 0.3-0.6 s; about 1.5 s in
tests/reaper, 3 s alone with the first moto world of the session); EVENT_EXAMPLES=N runs N
(tests/perturbation.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone

import ecs_agent
from hypothesis import event, example, given
from hypothesis import strategies as st
from perturbation import Lines, budget
from removal.world import _register, create_ledger_by_state, fleet_moto
from removal.world import aws as world_aws
from reaper.test_one_time_spot import refuse_like_aws
from reaper.test_reaper_moto import CLUSTER, HOME, REGION, SETTINGS, TABLE

from lambdas.common import tags as tag_keys
from lambdas.common.keep_alive import keep_alive_protects, parse_time
from lambdas.reaper.handler import handler
from lambdas.reaper.idle import DESTRUCTIVE, PERIOD_SECONDS, window_periods
from lambdas.removal import decide

ENV = "dev"
IDLE_ACTIONS = {"busy", "unmark", "mark", "wait-grace", "spare", *DESTRUCTIVE}
GRACE = timedelta(minutes=SETTINGS.idle_grace_minutes)
SPEC = {"ImageId": "ami-12c6146b", "InstanceType": "g5.xlarge"}
ENV_TAG = [{"Key": tag_keys.ENVIRONMENT, "Value": ENV}]
# The values a period gets: idle is below both thresholds (CPU 10 %, GPU 5 %), busy at or above one.
USAGE = {"idle": (1.0, 0.0), "busy-cpu": (55.0, 0.0), "busy-gpu": (2.0, 40.0)}


@dataclass(frozen=True)
class Machine:
    usage: str = "idle"  # idle, busy-cpu, busy-gpu, partly (the last period without data), none
    work: str | None = None  # "task", "job" (fleet members only)
    keep_alive: str | None = None  # "true", "future", "expiring" (in 15 minutes), "past", "garbage"
    mark: str | None = None  # "fresh", "past-grace", "unreadable": an earlier run's mlfleet:idle-since
    drained: bool = False  # DRAINING by an operator (fleet members only)
    # A removal an earlier run left half-done (fleet members only): (method, "fresh" | "old" | "unreadable"),
    # tagged `mlfleet:removing` and drained by that run (`;found-draining` when an operator had drained it).
    removing: tuple[str, str] | None = None


@dataclass(frozen=True)
class World:
    groups: tuple[tuple[int, tuple[Machine, ...]], ...]  # (min size, members)
    standalone: tuple[tuple[str, Machine], ...]  # (on-demand | persistent | one-time, machine)
    steps: tuple[int, ...]  # minutes between runs: 2 or 3 runs
    changes: tuple[tuple[int, str, int], ...]  # (after run n, kind, machine index in `everyone` order)
    dry_run: bool
    max_actions: int
    budget_percent: int


@st.composite
def machines(draw, fleet: bool) -> Machine:
    """Mostly an idle machine past its grace, so that removals happen; any drawn state otherwise."""
    plain = st.booleans()
    return Machine(
        usage="idle" if draw(plain) else draw(st.sampled_from(["idle", "busy-cpu", "busy-gpu", "partly", "none"])),
        work=None if not fleet or draw(plain) else draw(st.sampled_from([None, "task", "job"])),
        keep_alive=None if draw(plain) else draw(st.sampled_from([None, "true", "future", "expiring", "past", "garbage"])),
        mark=draw(st.sampled_from(["past-grace", "past-grace", None, "fresh", "unreadable"])),
        drained=fleet and not draw(plain) and draw(st.booleans()),
        removing=None if not fleet or draw(plain) or draw(plain) else draw(st.tuples(
            st.sampled_from([decide.IDLE, decide.RELEASE]), st.sampled_from(["fresh", "old", "unreadable"]))))


@st.composite
def worlds(draw) -> World:
    sizes = draw(st.sampled_from([[1], [2], [3], [4], [6], [1, 1], [2, 1], [3, 2], [1, 4]]))
    groups = tuple((draw(st.integers(0, min(2, n))), tuple(draw(machines(True)) for _ in range(n))) for n in sizes)
    standalone = tuple((kind, draw(machines(False))) for kind in draw(st.lists(
        st.sampled_from(["on-demand", "persistent", "one-time"]), max_size=2)))
    steps = tuple(draw(st.lists(st.sampled_from([10, 20, 35, 35]), min_size=1, max_size=2)))
    count = sum(sizes) + len(standalone)
    changes = tuple(draw(st.lists(st.tuples(st.integers(0, len(steps) - 1),
                                            st.sampled_from(["task", "job", "busy-cpu", "busy-gpu", "keep-alive"]),
                                            st.integers(0, count - 1)), max_size=2)))
    return World(groups, standalone, steps, changes, dry_run=draw(st.sampled_from([False] * 5 + [True])),
                 max_actions=draw(st.sampled_from([1, 2, 20])), budget_percent=draw(st.sampled_from([10, 50, 100])))


def asg(g: int) -> str:
    return f"mlfleet-{ENV}-gpu{g + 1}"


def aws(service: str):
    return world_aws(service, REGION)  # the tests' cached clients (moto patches botocore, not the clients)


class State:
    """The drawn world in moto, and what the property knows of it while the handler runs."""

    def __init__(self, world: World, now: datetime):
        self.world, self.now = world, now
        ec2, autoscaling, ecs = aws("ec2"), aws("autoscaling"), aws("ecs")
        create_ledger_by_state()  # the reaper's HOME and TABLE are the removal world's
        ecs.create_cluster(clusterName=CLUSTER)
        ecs.register_task_definition(family=f"mlfleet-{ENV}-gpu-job",
                                     containerDefinitions=[{"name": "job", "image": "busybox", "memory": 512}])
        self.group_of: dict[str, int] = {}
        self.machine: dict[str, Machine] = {}
        self.everyone: list[str] = []
        for g, (min_size, members) in enumerate(world.groups):
            ec2.create_launch_template(LaunchTemplateName=asg(g), LaunchTemplateData=SPEC)
            autoscaling.create_auto_scaling_group(
                AutoScalingGroupName=asg(g), LaunchTemplate={"LaunchTemplateName": asg(g)}, MinSize=min_size,
                MaxSize=10, DesiredCapacity=len(members), AvailabilityZones=[f"{REGION}a"],
                NewInstancesProtectedFromScaleIn=True, Tags=[{**ENV_TAG[0], "PropagateAtLaunch": True}])
            ids = [i["InstanceId"] for i in autoscaling.describe_auto_scaling_groups(
                AutoScalingGroupNames=[asg(g)])["AutoScalingGroups"][0]["Instances"]]
            for i, machine in zip(ids, members):
                self.group_of[i], self.machine[i] = g, machine
                self.everyone.append(i)
                ecs_agent.register(ecs, CLUSTER, i, REGION, gpus=1)  # g5.xlarge's
        self.one_time: set[str] = set()
        for kind, machine in world.standalone:
            if kind == "on-demand":
                i = ec2.run_instances(MinCount=1, MaxCount=1, **SPEC)["Instances"][0]["InstanceId"]
            else:
                i = ec2.request_spot_instances(InstanceCount=1, Type=kind, LaunchSpecification=SPEC)[
                    "SpotInstanceRequests"][0]["InstanceId"]
                if kind == "one-time":
                    self.one_time.add(i)
            ec2.create_tags(Resources=[i], Tags=ENV_TAG)
            self.machine[i] = machine
            self.everyone.append(i)
        arns = ecs.list_container_instances(cluster=CLUSTER)["containerInstanceArns"]
        self.arns = {ci["ec2InstanceId"]: ci["containerInstanceArn"] for ci in ecs.describe_container_instances(
            cluster=CLUSTER, containerInstances=arns)["containerInstances"]} if arns else {}
        self.usage = {i: m.usage for i, m in self.machine.items()}
        self.points: dict[str, dict[datetime, tuple[float, float]]] = {i: {} for i in self.machine}
        self.busy: set[str] = set()
        self.operator_drained: set[str] = set()
        self.jobs = 0
        for i, m in self.machine.items():
            if m.work:
                self.give_work(i, m.work)
            if m.keep_alive:
                value = {"true": "true", "future": (now + timedelta(days=1)).isoformat(), "garbage": "soon",
                         "expiring": (now + timedelta(minutes=15)).isoformat(),
                         "past": (now - timedelta(days=1)).isoformat()}[m.keep_alive]
                ec2.create_tags(Resources=[i], Tags=[{"Key": tag_keys.KEEP_ALIVE, "Value": value}])
            if m.mark:
                value = {"fresh": (now - timedelta(minutes=5)).isoformat(), "unreadable": "yesterday",
                         "past-grace": (now - GRACE - timedelta(minutes=15)).isoformat()}[m.mark]
                ec2.create_tags(Resources=[i], Tags=[{"Key": tag_keys.IDLE_SINCE, "Value": value}])
            if m.drained or m.removing:
                ecs.update_container_instances_state(cluster=CLUSTER, containerInstances=[self.arns[i]],
                                                     status="DRAINING")
            if m.drained:
                self.operator_drained.add(i)
            if m.removing:
                method, age = m.removing
                # An unreadable time keeps its note: a mark without it cannot tell a resumed removal that an
                # operator drained the machine (the removal property leaves such machines out of its check too).
                value = (f"{method}@not-a-time" + (f";{decide.FOUND_DRAINING}" if m.drained else "")
                         if age == "unreadable" else decide.mark_value(
                             method, now - timedelta(minutes=5 if age == "fresh" else 120), found_draining=m.drained))
                ec2.create_tags(Resources=[i], Tags=[{"Key": tag_keys.REMOVING, "Value": value}])
        refuse_like_aws(self.one_time)

    # --- the world ------------------------------------------------------------------------------------------

    def give_work(self, i: str, work: str) -> None:
        if work == "task":
            aws("ecs").start_task(cluster=CLUSTER, taskDefinition=f"mlfleet-{ENV}-gpu-job",
                                  containerInstances=[self.arns[i]], startedBy="someone")
        else:  # a claim as the scheduler writes it before StartTask (tests/removal/world.py place_job_in_ledger)
            self.jobs += 1
            world_aws("dynamodb", HOME).put_item(TableName=TABLE, Item={
                "job_id": {"S": f"sub-20261122120000-abcdef-{self.jobs:05d}"}, "state": {"S": "STARTING"},
                "submitted_at": {"N": "1"},
                "placement": {"M": {"instance_id": {"S": i}, "region": {"S": REGION}}}})
        self.busy.add(i)

    def change(self, kind: str, i: str, running: set[str]) -> None:
        if kind in ("task", "job"):
            if i in self.group_of and i in running:
                self.give_work(i, kind)
        elif kind == "keep-alive":
            aws("ec2").create_tags(Resources=[i], Tags=[{"Key": tag_keys.KEEP_ALIVE, "Value": "true"}])
        else:
            self.usage[i] = kind

    def put_metrics(self, now: datetime) -> None:
        """Each machine's datapoints over the run's window, as its usage says; a period keeps its maximum."""
        periods = window_periods(now, SETTINGS.idle)
        cpu_data, gpu_data = [], []
        for i, usage in self.usage.items():
            if usage == "none":
                continue
            values = USAGE.get(usage, USAGE["idle"])
            for p in periods[:-1] if usage == "partly" else periods:
                old = self.points[i].get(p, (0.0, 0.0))
                self.points[i][p] = (max(old[0], values[0]), max(old[1], values[1]))
                at = p + timedelta(seconds=PERIOD_SECONDS // 2)
                cpu_data.append({"MetricName": "CPUUtilization", "Dimensions": [{"Name": "InstanceId", "Value": i}],
                                 "Timestamp": at, "Value": values[0]})
                dims = [{"Name": "InstanceId", "Value": i}] + (
                    [{"Name": "AutoScalingGroupName", "Value": asg(self.group_of[i])}] if i in self.group_of else [])
                gpu_data.append({"MetricName": "nvidia_smi_utilization_gpu", "Dimensions": dims, "Timestamp": at,
                                 "Value": values[1]})
        cloudwatch = aws("cloudwatch")
        for namespace, data in (("AWS/EC2", cpu_data), ("CWAgent", gpu_data)):
            for n in range(0, len(data), 1000):
                cloudwatch.put_metric_data(Namespace=namespace, MetricData=data[n:n + 1000])

    # --- reading it back ------------------------------------------------------------------------------------

    def instances(self) -> dict[str, dict]:
        return {r["InstanceId"]: r for res in aws("ec2").describe_instances(InstanceIds=list(self.machine))[
            "Reservations"] for r in res["Instances"]}

    def groups(self) -> list[dict]:
        return aws("autoscaling").describe_auto_scaling_groups(
            AutoScalingGroupNames=[asg(g) for g in range(len(self.world.groups))])["AutoScalingGroups"]

    def statuses(self) -> dict[str, str]:
        if not self.arns:
            return {}
        by_arn = {a: i for i, a in self.arns.items()}
        return {by_arn[ci["containerInstanceArn"]]: ci["status"] for ci in aws("ecs").describe_container_instances(
            cluster=CLUSTER, containerInstances=list(self.arns.values()))["containerInstances"]}

    def snapshot(self, instances: dict[str, dict]) -> tuple:
        """Everything a run could change, for the dry run."""
        return ({i: (r["State"]["Name"], sorted((t["Key"], t["Value"]) for t in r.get("Tags", [])))
                 for i, r in instances.items()}, self.statuses(),
                sorted((g["AutoScalingGroupName"], g["DesiredCapacity"], sorted(m["InstanceId"] for m in g["Instances"]))
                       for g in self.groups()))

    def not_idle(self, i: str, now: datetime) -> str | None:
        """Why the machine may not be removed at `now`: a period of its window at or above a threshold, or
        without data."""
        for p in window_periods(now, SETTINGS.idle):
            if p not in self.points[i]:
                return f"no data for {p:%H:%M}"
            cpu, gpu = self.points[i][p]
            if cpu >= SETTINGS.idle_cpu_percent or gpu >= SETTINGS.idle_gpu_percent:
                return f"CPU {cpu} GPU {gpu} at {p:%H:%M}"
        return None


def tagged_for_removal() -> list[str]:
    """The instances the function's CreateTags tags `mlfleet:removing` from now on, as moto applied them."""
    tagged: list[str] = []
    pending: list[dict] = []
    _register("ec2", REGION, "before-parameter-build", "CreateTags", lambda params, **_: pending.append(dict(params)))

    def after(http_response, **_):
        params = pending.pop()
        if http_response.status_code < 300 and any(t["Key"] == tag_keys.REMOVING for t in params["Tags"]):
            tagged.extend(params["Resources"])

    _register("ec2", REGION, "after-call", "CreateTags", after)
    return tagged


def check(world: World, monkeypatch) -> str:
    now = datetime.now(timezone.utc) + timedelta(hours=3)
    settings = replace(SETTINGS, fleet_asg_names=tuple(asg(g) for g in range(len(world.groups))),
                       dry_run=world.dry_run, max_actions_per_run=world.max_actions,
                       disruption_budget_percent=world.budget_percent)
    fleet_removed = standalone_removed = 0
    with fleet_moto(monkeypatch):
        state = State(world, now)
        tagged = tagged_for_removal()
        running = set(state.machine)
        for run in range(len(world.steps) + 1):
            if run:
                now += timedelta(minutes=world.steps[run - 1])
                for after, kind, n in world.changes:
                    if after == run - 1:
                        state.change(kind, state.everyone[n], running)
            state.put_metrics(now)
            before = state.instances()
            running = {i for i, r in before.items() if r["State"]["Name"] == "running"}
            marks = {i: {t["Key"]: t["Value"] for t in r.get("Tags", [])} for i, r in before.items()}
            groups_before = {g["AutoScalingGroupName"]: g for g in state.groups()}
            snapshot = state.snapshot(before) if world.dry_run else None
            tagged.clear()
            with Lines() as lines:
                handler({"detail-type": "Scheduled Event"}, None, settings=settings, now=now)
            where = f"run {run} at +{(now - datetime.now(timezone.utc)).total_seconds() / 60:.0f} min"

            after_instances = state.instances()
            removed = {i for i in running if after_instances[i]["State"]["Name"] != "running"}
            fleet_removed += len(removed & set(state.group_of))
            standalone_removed += len(removed - set(state.group_of))
            if world.dry_run:
                assert state.snapshot(after_instances) == snapshot, f"{where}: a dry run changed the world"
            for i in removed:
                tags = marks[i]
                assert i not in state.busy, f"{where}: {i} removed with work on it"
                protected, why = keep_alive_protects(tags.get(tag_keys.KEEP_ALIVE), now)
                assert not protected, f"{where}: {i} removed under a keep-alive ({why})"
                hot = state.not_idle(i, now)
                assert hot is None, f"{where}: {i} removed, not idle over its window: {hot}"
                if tag_keys.REMOVING in tags:
                    continue  # a removal in flight, resumed: its grace was the run's that began it
                since = parse_time(tags[tag_keys.IDLE_SINCE]) if tag_keys.IDLE_SINCE in tags else None
                assert since is not None and now - since >= GRACE, (
                    f"{where}: {i} removed, marked {tags.get(tag_keys.IDLE_SINCE)!r}: not the grace ago")
            # The cap is on the actions a run begins; a removal in flight was begun (and counted) by an earlier run.
            begun = {i for i in removed if tag_keys.REMOVING not in marks[i]}
            assert len(begun) <= world.max_actions, f"{where}: {len(begun)} removals begun, cap {world.max_actions}"

            for group in state.groups():
                name = group["AutoScalingGroupName"]
                in_service = sum(1 for m in group["Instances"] if m["LifecycleState"] == "InService")
                assert min(group["DesiredCapacity"], in_service) >= group["MinSize"], (
                    f"{where}: {name} below its minimum {group['MinSize']}: desired {group['DesiredCapacity']}, "
                    f"in service {in_service}")
                desired = groups_before[name]["DesiredCapacity"]
                flight = sum(1 for m in groups_before[name]["Instances"]
                             if tag_keys.REMOVING in marks.get(m["InstanceId"], {}))
                new = [i for i in tagged if i in state.group_of and asg(state.group_of[i]) == name]
                limit = decide.disruption_budget(desired, world.budget_percent)
                assert len(new) <= max(0, limit - flight), (
                    f"{where}: {name} {len(new)} newly tagged, budget {limit} of {desired}, {flight} in flight")

            decided = [line for line in lines if line["decision"] in IDLE_ACTIONS]
            for i in running:
                mine = [line["decision"] for line in decided if line.get("instance_id") == i]
                assert len(mine) == 1, f"{where}: {i} has decision lines {mine}: {json.dumps(lines)[:2000]}"
            assert {line.get("instance_id") for line in decided} <= running, f"{where}: a line for no machine"

            statuses = state.statuses()
            for i in state.operator_drained:
                if after_instances[i]["State"]["Name"] == "running":
                    assert statuses[i] == "DRAINING", f"{where}: {i}: an operator's drain undone ({statuses[i]})"
    return ("dry run" if world.dry_run else
            f"fleet removed {min(fleet_removed, 3)}{'+' if fleet_removed > 3 else ''}, standalone {standalone_removed}")


@budget(ci=2)
@given(world=worlds())
# A removal in flight of a machine busy again by its CPU: it was resumed and terminated (the re-check reads no
# utilisation) by the run whose decision line said busy.
@example(world=World(((0, (Machine(usage="busy-cpu", removing=(decide.IDLE, "fresh")), Machine())),), (), (35,), (),
                     dry_run=False, max_actions=20, budget_percent=10))
def test_the_reaper_never_removes_work_keeps_minimums_caps_and_the_grace_and_decides_each_machine_once(
        world, monkeypatch):
    event(check(world, monkeypatch))
