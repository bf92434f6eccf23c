"""The scheduler Lambda end to end, on worlds hypothesis draws in moto: one or two fleets with their caps
(maxInstances) and a dollar cap (maxHourlyUsd), 0-4 registered machines some of whose jobs run, queued jobs
of every kind (whole GPUs, 1 to 8; a share of one GPU, gpu_memory_mib; instance-type patterns; spot or
on-demand; teams, quotas and priorities; jobs no fleet can run), their queue messages delivered once, twice
or not at all, and admission open or closed. The handler runs two or three times, a few minutes apart; in
between, the world moves only as far as the next run needs: the group's new instances join the cluster (the
ECS agent's doing) and some jobs end (their task stops and the job-events function records it).

After every run, from what moto holds (never from what the run returns):
  - no group's desired capacity is above its fleet's maxInstances;
  - a run that raised a group leaves the fleets' hourly price at desired capacity within maxHourlyUsd, priced
    as the scheduler prices it (lambdas/scheduler/state.py read_region: each member at its type's price for
    its lifecycle, an instance not launched yet at the fleet's dearest on-demand type);
  - no job has more than one task meant to run, and each such task is the attempt its job is RUNNING at;
  - the tasks meant to run on each machine fit it: GPUs, vCPUs and memory from the catalog's type
    (lambdas/common/data/instance_catalog.json, less what the OS and agent keep), and the jobs sharing GPUs
    packed within each GPU's shareable memory beside the whole-GPU ones;
  - every job is in one ledger state, listed under that state alone, none left STARTING, none lost: each job
    queued is still queued, or running (or ended, when the test ended it), or failed with a reason;
  - with admission closed, no task starts and no group grows;
  - a job no fleet can run (too big for every type, or a pattern no type matches) never runs, is never
    reserved an instance, is told why (a `wait` line naming no fleet or its team's quota, or failed with a
    reason), and a group grows only in a run that had a job some fleet can run.

Where moto differs from AWS, and what the test does about it:
  - moto's Auto Scaling groups launch on-demand instances whatever the fleet buys (no InstanceLifecycle): the
    test marks a spot fleet's instances spot, as AWS would launch them, so that the dollar cap is judged on
    what AWS would bill, not on moto's on-demand stand-ins;
  - moto tracks no GPUs (the ECS agent's GPUs are added by tests/ecs_agent.py), registers 4 vCPUs and
    7,482 MiB for any instance and subtracts a task's definition, not its overrides, from what remains: the
    test registers each machine's catalog vCPUs and memory, and checks fit from the tasks' overrides and the
    catalog, never from moto's remaining resources;
  - tasks carry no gpuIds: which GPU a sharing task got is unknown, so the check asks that some packing of the
    machine's tasks onto its GPUs exists;
  - an instance the group launches never joins the cluster by itself, and moto launches it at once (in AWS it
    boots for minutes): the test registers it between runs, or not, as drawn;
  - moto's spot price history is placeholders the scheduler rejects as implausible: the catalog's spot
    prices decide, as in AWS when the read fails.

HYPOTHESIS_PROFILE=ci runs the pinned world and one drawn (about 3 s, the session's first moto world included);
EVENT_EXAMPLES=N runs N (tests/perturbation.py). Local searches of about 1,600 worlds (2-3 runs each) found no
defect; the pinned world fails when the dollar cap is tripled in the plan and the scale-out's own check removed.
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta, timezone

import ecs_agent
from conftest import ACCOUNT, ENV, HOME, aws_client, set_teams, teams_json, open_admission, scheduler_settings
from hypothesis import example, given
from hypothesis import strategies as st
from perturbation import Lines, budget

from benchmarks.submission import create_queues, create_table
from lambdas.common.catalog import load_catalog
from lambdas.jobs import ledger as L
from lambdas.jobs.spec import SpecError, assign_ids, container_overrides, parse_spec
from lambdas.scheduler import state
from lambdas.scheduler.handler import handler as scheduler_handler
from lambdas.scheduler.planning import NO_FLEET

CATALOG = load_catalog()
CLUSTER = f"mlfleet-{ENV}"
FAMILY = f"mlfleet-{ENV}-gpu-job"
# The fleets a world may have: (instance types, the type its launch template launches in moto).
FLEETS = {"gpu1": (("g5.12xlarge", "g5.24xlarge"), "g5.12xlarge"), "small": (("g4dn.xlarge",), "g4dn.xlarge")}
SUB = "sub-20261122110000-5c4ed0"
RUNNING_SUB = "sub-20261122100000-0a0b0c"
EPS = 1e-6


class Context:
    """What a Lambda context gives the handler: the time left, and the request id it names the lease by."""
    aws_request_id = "test"

    @staticmethod
    def get_remaining_time_in_millis() -> int:
        return 170_000


# --- the world ---------------------------------------------------------------------------------------------

def asg_name(fleet: str) -> str:
    return f"mlfleet-{ENV}-{fleet}"


@st.composite
def fleets(draw) -> list[dict]:
    names = draw(st.sampled_from([("gpu1",), ("small",), ("gpu1", "small")]))
    drawn = []
    for name in names:
        cap = draw(st.sampled_from([2, 4, 1, 3, 0]))
        drawn.append({"fleet": name, "max_instances": cap, "max_size": cap + draw(st.sampled_from([0, 0, 2])),
                      "spot": draw(st.booleans()), "machines": draw(st.integers(0, min(cap, 2 if len(names) == 2 else 4)))})
    return drawn


WHOLE = st.builds(lambda gpus, vcpus, memory: {"gpus": gpus, "vcpus": vcpus, "memory_mib": memory},
                  st.sampled_from([1, 1, 2, 4]), st.sampled_from([1, 2, 4, 8]), st.sampled_from([1024, 4096, 14_000, 60_000]))
# a share of one GPU (15,073 MiB shareable on a T4, 21,056 on an A10G)
SHARED = st.builds(lambda memory, vcpus, host: {"gpu_memory_mib": memory, "vcpus": vcpus, "memory_mib": host},
                   st.sampled_from([2048, 6144, 15_000, 20_000]), st.sampled_from([0.5, 2]), st.sampled_from([512, 4096]))
# too big for every type of every fleet in one way: GPUs, vCPUs, memory, or a GPU's memory
TOO_BIG = st.one_of(WHOLE.map(lambda d: {**d, "gpus": 8}), WHOLE.map(lambda d: {**d, "vcpus": 100}),
                    WHOLE.map(lambda d: {**d, "memory_mib": 400_000}), SHARED.map(lambda d: {**d, "gpu_memory_mib": 30_000}))
SIZES = st.one_of(WHOLE, SHARED, WHOLE, TOO_BIG)
PATTERNS = st.sampled_from([None, None, None, None, r"g5\..*", r"g4dn\..*", r"g5\.12xlarge", r"p5\..*"])
TEAMS = st.sampled_from([None, {"vision": (2, None), "nlp": (1, None)}, {"vision": (1, 2), "nlp": (1, None)}])


@st.composite
def job_specs(draw, teams: dict | None) -> dict:
    document = {"image": "ghcr.io/team/train:1", "command": ["python", "train.py"], **draw(SIZES),
                "priority": draw(st.integers(0, 9))}
    if (pattern := draw(PATTERNS)) is not None:
        document["instance_type_pattern"] = pattern
    if (lifecycle := draw(st.sampled_from([None, None, None, "spot", "on-demand"]))) is not None:
        document["lifecycle"] = lifecycle
    if teams and (team := draw(st.sampled_from([None, *sorted(teams)]))) is not None:
        document["team"] = team
    return document


@st.composite
def worlds(draw) -> dict:
    teams = draw(TEAMS)
    drawn_fleets = draw(fleets())
    machines = [(f["fleet"], n) for f in drawn_fleets for n in range(f["machines"])]
    return {
        "fleets": drawn_fleets,
        "max_hourly_usd": draw(st.sampled_from([15.0, 8.0, 40.0, 3.0, 0.0])),
        "admission": draw(st.sampled_from(["open", "open", "open", "open", "closed"])),
        "teams": teams,
        # per machine, the jobs running there: (gpus or 0, gpu memory of a shared GPU or 0)
        "running": [draw(st.lists(st.sampled_from([(1, 0), (2, 0), (0, 6144)]), max_size=2)) for _ in machines],
        "queued": draw(st.lists(job_specs(teams), max_size=8)),
        "deliveries": draw(st.lists(st.integers(0, 2), min_size=8, max_size=8)),
        # between runs: minutes later, whether new instances join, which running jobs end, whether the queued
        # jobs' first messages come again (SQS delivers at least once)
        "steps": draw(st.lists(st.tuples(st.integers(1, 6), st.booleans(), st.integers(0, 2**16), st.booleans()),
                               min_size=1, max_size=2)),
    }


def fleets_value(world: dict) -> str:
    return json.dumps([{"region": HOME, "fleet": f["fleet"], "asg_name": asg_name(f["fleet"]), "cluster": CLUSTER,
                        "task_family": FAMILY, "max_instances": f["max_instances"],
                        "instance_types": list(FLEETS[f["fleet"]][0]), "on_demand_base": 0,
                        "on_demand_percent_above_base": 0 if f["spot"] else 100} for f in world["fleets"]])


def moto_instance(instance_id: str):
    from moto.ec2.models import ec2_backends

    for reservation in ec2_backends[ACCOUNT][HOME].reservations.values():
        for instance in reservation.instances:
            if instance.id == instance_id:
                return instance
    raise KeyError(instance_id)


def as_aws_launches(world: dict) -> None:
    """Each spot fleet's instances spot, as AWS launches them (moto's groups launch on-demand ones)."""
    for fleet in world["fleets"]:
        if fleet["spot"]:
            for member in group(fleet["fleet"])["Instances"]:
                moto_instance(member["InstanceId"]).lifecycle = "spot"


def join(instance_id: str) -> str:
    """The ECS agent registering the instance: its GPUs (tests/ecs_agent.py), the vCPUs and memory its type
    has (moto registers 4 vCPUs and 7,482 MiB for any type) and its MPS capability (the AMI enables
    nvidia-mps.service). Returns its container instance ARN."""
    ecs = aws_client("ecs", HOME)
    arn = ecs_agent.register(ecs, CLUSTER, instance_id, HOME)["containerInstanceArn"]
    spec = CATALOG.get(moto_instance(instance_id).instance_type)
    record = ecs_agent.moto_record(arn)
    for resources in (record.registered_resources, record.remaining_resources):
        for resource in resources:
            if resource["name"] == "CPU":
                resource["integerValue"] = int(spec.schedulable_vcpus * 1024)
            elif resource["name"] == "MEMORY":
                resource["integerValue"] = int(spec.schedulable_memory_mib)
    ecs.put_attributes(cluster=CLUSTER, attributes=[{"name": state.GPU_SHARING_CAPABILITY, "targetId": arn}])
    return arn


def group(fleet: str) -> dict:
    return aws_client("autoscaling", HOME).describe_auto_scaling_groups(
        AutoScalingGroupNames=[asg_name(fleet)])["AutoScalingGroups"][0]


def build(world: dict, home: dict, now: datetime) -> dict:
    """The drawn world in moto; returns what the checks need: job ids queued, running, and the specs."""
    ec2, autoscaling, ecs, iam = (aws_client(s, HOME) for s in ("ec2", "autoscaling", "ecs", "iam"))
    ecs.create_cluster(clusterName=CLUSTER)
    role = iam.create_role(Path=f"/mlfleet/{ENV}/", RoleName=f"job-{HOME}", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    # Small definition defaults (each job's overrides give its size): moto subtracts these from what remains.
    ecs.register_task_definition(
        family=FAMILY, taskRoleArn=role, executionRoleArn=role, networkMode="bridge",
        containerDefinitions=[{"name": "job", "image": "public.ecr.aws/docker/library/busybox:latest",
                               "essential": True, "cpu": 128, "memoryReservation": 256,
                               "resourceRequirements": [{"type": "GPU", "value": "1"}]}],
        tags=[{"key": "mlfleet:environment", "value": ENV}])
    for fleet in world["fleets"]:
        name = asg_name(fleet["fleet"])
        ec2.create_launch_template(LaunchTemplateName=name, LaunchTemplateData={
            "ImageId": "ami-12c6146b", "InstanceType": FLEETS[fleet["fleet"]][1]})
        autoscaling.create_auto_scaling_group(
            AutoScalingGroupName=name, LaunchTemplate={"LaunchTemplateName": name}, MinSize=0,
            MaxSize=fleet["max_size"], DesiredCapacity=fleet["machines"], AvailabilityZones=[f"{HOME}a"],
            Tags=[{"Key": "mlfleet:environment", "Value": ENV, "PropagateAtLaunch": True}])
    as_aws_launches(world)
    machines = [(f["fleet"], m["InstanceId"]) for f in world["fleets"] for m in group(f["fleet"])["Instances"]]
    led = L.Ledger(aws_client("dynamodb", HOME), home["table"])
    teams = world["teams"]
    set_teams(teams_json(teams, default_team="nlp" if teams else None))
    if world["admission"] == "open":
        open_admission()
    else:
        open_admission(state="closed")

    # Jobs running on the machines, each with its task, as the scheduler would have started them.
    running = []
    for (fleet, instance_id), jobs in zip(machines, world["running"]):
        arn = join(instance_id)
        instance_type = moto_instance(instance_id).instance_type
        free = CATALOG.get(instance_type).gpus
        for gpus, gpu_memory in jobs:
            if gpus > free or (gpu_memory and free < 1):
                continue
            free -= gpus or 1  # a sharing job on a GPU of its own
            size = {"gpus": gpus} if gpus else {"gpu_memory_mib": gpu_memory}
            spec = parse_spec({"image": "ghcr.io/team/train:1", "command": ["run"], "vcpus": 1, "memory_mib": 2048,
                               **size}, fleet_regions=(HOME,), catalog=CATALOG, default_max_attempts=3)
            (job,) = assign_ids(f"{RUNNING_SUB[:-2]}{len(running):02d}", [spec])
            task = ecs.start_task(cluster=CLUSTER, taskDefinition=FAMILY, containerInstances=[arn],
                                  startedBy=job.job_id, overrides=container_overrides(spec, job.job_id, 1, "s3://b/x"))
            task_arn = task["tasks"][0]["taskArn"]
            placement = L.Placement(HOME, fleet, CLUSTER, arn, instance_id, instance_type, task_arn,
                                    "spot" if moto_instance(instance_id).lifecycle == "spot" else "on-demand", 1.0,
                                    now.timestamp() - 1800)
            record = L.JobRecord(**{**vars(L.new_record(job, now.timestamp() - 3600)), "state": L.RUNNING,
                                    "attempt": 1, "runs": 1, "placement": placement})
            aws_client("dynamodb", HOME).put_item(TableName=home["table"], Item=L.encode(record))
            running.append(job.job_id)

    # The queued jobs, and their messages: none, one, or the same one twice.
    jobs = assign_ids(SUB, [spec for document in world["queued"] if (spec := queueable(document, teams))])
    sqs = aws_client("sqs", HOME)
    for n, job in enumerate(jobs):
        assert led.put_new(L.new_record(job, now.timestamp() - 60 * (len(jobs) - n)))
        for _ in range(world["deliveries"][n]):
            sqs.send_message(QueueUrl=home["queue"], MessageBody=json.dumps({"job_id": job.job_id, "attempt": 0}))
    return {"queued": [j.job_id for j in jobs], "running": running, "specs": {j.job_id: j.spec for j in jobs}}


def queueable(document: dict, teams: dict | None):
    """The job spec `mlfleet submit` would queue for `document`, or None where it refuses it (too big for any
    type in the catalog, not only for the drawn fleets): such a job never reaches the queue."""
    try:
        return parse_spec(document, fleet_regions=(HOME,), catalog=CATALOG, default_max_attempts=3,
                          teams=tuple(teams or ()), default_team="nlp" if teams else None)
    except SpecError:
        return None


# --- what moto holds ---------------------------------------------------------------------------------------

def desired_capacities(world: dict) -> dict[str, int]:
    return {f["fleet"]: group(f["fleet"])["DesiredCapacity"] for f in world["fleets"]}


def hourly_at_desired(world: dict) -> float:
    """The fleets' $/h at desired capacity as state.read_region prices it: each member at its type's price for
    its lifecycle (the catalog's spot price: moto's are rejected as implausible), each instance asked for and
    not launched at the fleet's dearest on-demand type."""
    ec2 = aws_client("ec2", HOME)
    total = 0.0
    for fleet in world["fleets"]:
        found = group(fleet["fleet"])
        members = [m for m in found["Instances"] if not m["LifecycleState"].startswith("Terminat")]
        for member in members:
            (reservation,) = ec2.describe_instances(InstanceIds=[member["InstanceId"]])["Reservations"]
            instance = reservation["Instances"][0]
            entry = CATALOG.get(instance["InstanceType"])
            total += entry.spot_price(HOME) if instance.get("InstanceLifecycle") == "spot" else entry.on_demand_price(HOME)
        missing = max(0, found["DesiredCapacity"] - len(members))
        total += missing * max(CATALOG.get(t).on_demand_price(HOME) for t in FLEETS[fleet["fleet"]][0])
    return total


def tasks_meant_to_run() -> list[dict]:
    ecs = aws_client("ecs", HOME)
    arns = ecs.list_tasks(cluster=CLUSTER, desiredStatus="RUNNING")["taskArns"]
    return [t for n in range(0, len(arns), 100)
            for t in ecs.describe_tasks(cluster=CLUSTER, tasks=arns[n:n + 100])["tasks"]]


def attempt_of(task: dict) -> int:
    environment = task["overrides"]["containerOverrides"][0]["environment"]
    return int(next(v["value"] for v in environment if v["name"] == "MLFLEET_ATTEMPT"))


def task_use(task: dict) -> tuple[int, float, int, int]:
    """(whole GPUs, vCPUs, memory MiB, MiB of a shared GPU) the task asked for: its overrides, as the
    scheduler starts every job (the definition's defaults are not a job's)."""
    (override,) = task["overrides"]["containerOverrides"]
    (gpu,) = [r for r in override["resourceRequirements"] if r["type"] == "GPU"]
    shared = int(gpu["sharingStrategy"]["nvidiaMps"]["memory"]) if "sharingStrategy" in gpu else 0
    return (0 if shared else int(gpu["value"])), override["cpu"] / 1024, override["memoryReservation"], shared


def packs(shared: list[int], gpus: int, per_gpu: int) -> bool:
    """Whether the sharing tasks' memory fits `gpus` GPUs of `per_gpu` MiB each (an exact search: a machine
    holds few)."""
    shared = sorted(shared, reverse=True)

    def place(n: int, bins: list[int]) -> bool:
        if n == len(shared):
            return True
        tried = set()
        for b in range(len(bins)):
            if bins[b] >= shared[n] and bins[b] not in tried:
                tried.add(bins[b])
                bins[b] -= shared[n]
                if place(n + 1, bins):
                    return True
                bins[b] += shared[n]
        return False

    return all(s <= per_gpu for s in shared) and place(0, [per_gpu] * gpus) if shared else True


def holds(instance_type: str, spec) -> bool:
    """Whether an empty instance of the type holds the job by size."""
    entry = CATALOG.get(instance_type)
    if spec.vcpus > entry.schedulable_vcpus or spec.memory_mib > entry.schedulable_memory_mib:
        return False
    if spec.gpu_memory_mib:
        return entry.gpus >= 1 and spec.gpu_memory_mib <= entry.shareable_gpu_memory_mib
    return spec.gpus <= entry.gpus


def no_fleet_can_run(world: dict, spec) -> bool:
    """Too big for every type of every fleet, or a pattern no fleet's type matches (what no live machine of
    the world, a member of a fleet, can run either)."""
    types = [t for f in world["fleets"] for t in FLEETS[f["fleet"]][0]]
    pattern = spec.instance_type_pattern
    return not any(holds(t, spec) and (pattern is None or re.fullmatch(pattern, t)) for t in types)


# --- the property ------------------------------------------------------------------------------------------

def check_run(world: dict, built: dict, before: dict, lines: list[dict]) -> None:
    led = L.Ledger(aws_client("dynamodb", HOME), f"mlfleet-{ENV}-jobs")
    caps = {f["fleet"]: f["max_instances"] for f in world["fleets"]}
    desired = desired_capacities(world)
    grew = [name for name in desired if desired[name] > before["desired"][name]]
    for name, capacity in desired.items():
        assert capacity <= caps[name], f"{name}: desired {capacity} above maxInstances {caps[name]}"
    if grew:
        price = hourly_at_desired(world)
        assert price <= world["max_hourly_usd"] + EPS, \
            f"raised {grew}: ${price:.4f}/h at desired capacity, over maxHourlyUsd {world['max_hourly_usd']}"

    # Tasks: one meant to run per job, the attempt its job runs at, and each machine's tasks fit it.
    tasks = tasks_meant_to_run()
    by_job: dict[str, list[dict]] = {}
    for task in tasks:
        by_job.setdefault(task["startedBy"], []).append(task)
    records = {job_id: led.get(job_id) for job_id in [*built["queued"], *built["running"]]}
    for job_id, found in by_job.items():
        assert len(found) == 1, f"{job_id}: {len(found)} tasks meant to run (attempts {[attempt_of(t) for t in found]})"
        record = records[job_id]
        assert record.state == L.RUNNING and record.attempt == attempt_of(found[0]) and \
            record.placement.task_arn == found[0]["taskArn"], (job_id, record.state, record.attempt)
    ecs = aws_client("ecs", HOME)
    on: dict[str, list[dict]] = {}
    for task in tasks:
        on.setdefault(task["containerInstanceArn"], []).append(task)
    for arn, placed in on.items():
        (ci,) = ecs.describe_container_instances(cluster=CLUSTER, containerInstances=[arn])["containerInstances"]
        instance = moto_instance(ci["ec2InstanceId"])
        entry = CATALOG.get(instance.instance_type)
        for task in placed:  # and the job's own constraints: its pattern and lifecycle
            spec = built["specs"].get(task["startedBy"])
            if spec is not None:
                assert spec.instance_type_pattern is None or re.fullmatch(spec.instance_type_pattern,
                                                                          instance.instance_type), task["startedBy"]
                assert spec.lifecycle in (None, instance.lifecycle or "on-demand"), (task["startedBy"], spec.lifecycle)
        uses = [task_use(t) for t in placed]
        whole = sum(u[0] for u in uses)
        assert whole <= entry.gpus, f"{ci['ec2InstanceId']}: {whole} GPUs asked of {entry.gpus}"
        assert sum(u[1] for u in uses) <= entry.schedulable_vcpus + EPS, (ci["ec2InstanceId"], uses)
        assert sum(u[2] for u in uses) <= entry.schedulable_memory_mib, (ci["ec2InstanceId"], uses)
        assert packs([u[3] for u in uses if u[3]], entry.gpus - whole, entry.shareable_gpu_memory_mib), \
            f"{ci['ec2InstanceId']}: shared GPU memory {[u[3] for u in uses if u[3]]} does not fit {entry.gpus - whole} GPUs"

    # The ledger: one state each, listed under it alone; none STARTING; none lost.
    listed: dict[str, list[str]] = {}
    for state_name in L.STATES:
        for record in led.by_state(state_name):
            listed.setdefault(record.job_id, []).append(state_name)
    for job_id, record in records.items():
        assert record is not None, f"{job_id} lost from the ledger"
        assert listed.get(job_id) == [record.state], (job_id, record.state, listed.get(job_id))
        assert record.state != L.STARTING, f"{job_id} left STARTING"
        if record.state == L.FAILED:
            assert record.last_reason, f"{job_id} failed without a reason"
    for job_id in built["queued"]:
        assert records[job_id].state in (L.QUEUED, L.RUNNING, L.FAILED) or job_id in before["ended"], \
            (job_id, records[job_id].state)
        if records[job_id].state == L.RUNNING:  # placed: its task is meant to run
            assert job_id in by_job, f"{job_id} RUNNING without a task"

    started = [t for t in tasks if t["taskArn"] not in before["tasks"]]
    if world["admission"] != "open":
        assert not started and not grew, (started, grew)
    waits = {line["job_id"]: line["reason"] for line in lines if line["decision"] == "wait" and "job_id" in line}
    runnable_queued = [j for j in before["queued"] if not no_fleet_can_run(world, built["specs"][j])]
    if grew:
        assert runnable_queued, f"{grew} raised with no queued job any fleet can run"
    for job_id, spec in built["specs"].items():
        if no_fleet_can_run(world, spec):
            record = records[job_id]
            assert record.state in (L.QUEUED, L.FAILED) and record.reserved is None, (job_id, record.state, record.reserved)
            if world["admission"] == "open" and record.state == L.QUEUED:
                reason = waits.get(job_id, "")
                assert reason == NO_FLEET or "quota" in reason, f"{job_id}: no fleet can run it, told {reason!r}"


def between_runs(world: dict, built: dict, step: tuple, home: dict, ended: set[str], now: datetime) -> None:
    """The world moving between runs: new instances join (or not yet), and some running jobs end (their task
    stops and job-events records the exit code 0)."""
    _, joins, seed, again = step
    ecs = aws_client("ecs", HOME)
    if joins:
        registered = set()
        arns = ecs.list_container_instances(cluster=CLUSTER)["containerInstanceArns"]
        if arns:
            registered = {ci["ec2InstanceId"] for ci in ecs.describe_container_instances(
                cluster=CLUSTER, containerInstances=arns)["containerInstances"]}
        for fleet in world["fleets"]:
            for member in group(fleet["fleet"])["Instances"]:
                if member["InstanceId"] not in registered and member["LifecycleState"] == "InService":
                    join(member["InstanceId"])
    led = L.Ledger(aws_client("dynamodb", HOME), home["table"])
    for n, task in enumerate(sorted(tasks_meant_to_run(), key=lambda t: t["taskArn"])):
        if seed >> (n % 16) & 1:
            ecs.stop_task(cluster=CLUSTER, task=task["taskArn"], reason="Essential container in task exited")
            record = led.get(task["startedBy"])
            assert led.transition(record.job_id, L.SUCCEEDED, expect_states=[L.RUNNING], expect_attempt=record.attempt,
                                  reason="exit code 0", now=now.timestamp()).applied
            ended.add(record.job_id)
    if again:
        for job_id in built["queued"]:
            aws_client("sqs", HOME).send_message(QueueUrl=home["queue"],
                                                 MessageBody=json.dumps({"job_id": job_id, "attempt": 0}))


def scheduler_world(world: dict) -> None:
    from moto import mock_aws

    from lambdas.common.aws import reset_clients

    with mock_aws():
        reset_clients()
        create_table()
        queue, dlq = create_queues()
        aws_client("sns", HOME).create_topic(Name=f"mlfleet-{ENV}-alerts")
        home = {"table": f"mlfleet-{ENV}-jobs", "queue": queue, "dlq": dlq}
        # moto stamps launches and registrations with the wall clock: the runs' time follows it, so that
        # machines are as old as they would be in AWS (the release delay, the kept-machine rule).
        now = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(seconds=1)
        built = build(world, home, now)
        settings = scheduler_settings(home, max_hourly_usd=world["max_hourly_usd"], fleets=fleets_value(world))
        ended: set[str] = set()
        for step in [(0, False, 0, False), *world["steps"]]:
            if step[0]:
                now += timedelta(minutes=step[0])
                between_runs(world, built, step, home, ended, now)
                as_aws_launches(world)
            led = L.Ledger(aws_client("dynamodb", HOME), home["table"])
            before = {"desired": desired_capacities(world), "tasks": {t["taskArn"] for t in tasks_meant_to_run()},
                      "ended": set(ended), "queued": [r.job_id for r in led.by_state(L.QUEUED)]}
            with Lines() as lines:
                result = scheduler_handler({"source": "aws.events"}, Context(), settings=settings, now=now)
            assert "skipped" not in result and not [e for e in result["errors"]], result["errors"]
            as_aws_launches(world)
            check_run(world, built, before, lines)
    reset_clients()


def job(size: dict, **keys) -> dict:
    return {"image": "ghcr.io/team/train:1", "command": ["python", "train.py"], **size, **keys}


FOUR_GPUS = {"gpus": 4, "vcpus": 8, "memory_mib": 14_000}
SHARE = {"gpu_memory_mib": 6144, "vcpus": 0.5, "memory_mib": 512}
# Both fleets with jobs running, GPUs shared beside whole ones, a team at its quota, jobs no fleet can run
# (a GPU's memory no type has, a pattern no fleet's type matches, 8 GPUs), messages delivered twice and again
# later, and the dollar cap binding: $9/h holds the running machines ($5.87/h) and a small box, not a g5 one
# ($8.14/h on-demand at its dearest type).
SHARING_AND_TEAMS = {
    "fleets": [{"fleet": "gpu1", "max_instances": 2, "max_size": 2, "spot": False, "machines": 1},
               {"fleet": "small", "max_instances": 2, "max_size": 4, "spot": True, "machines": 1}],
    "max_hourly_usd": 9.0, "admission": "open", "teams": {"vision": (1, 2), "nlp": (1, None)},
    "running": [[(1, 0), (0, 6144)], [(0, 6144)]],
    "queued": [job(SHARE), job(SHARE, team="vision"), job(SHARE, lifecycle="spot"),
               job({**SHARE, "gpu_memory_mib": 20_000}), job({"gpus": 2, "vcpus": 4, "memory_mib": 4096}, team="nlp"),
               job({**FOUR_GPUS, "gpus": 8}, team="vision"), job(SHARE, instance_type_pattern=r"p5\..*"),
               job({**SHARE, "gpu_memory_mib": 30_000}, priority=0)],
    "deliveries": [1, 2, 0, 1, 2, 1, 0, 1], "steps": [(1, True, 3, True)]}


@budget(ci=1)
@given(world=worlds())
@example(world=SHARING_AND_TEAMS)
def test_scheduler_runs_keep_caps_fit_tasks_and_lose_no_job(world):
    scheduler_world(world)
