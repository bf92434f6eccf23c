"""What the scheduler reads each run: queue messages, and per fleet region the machines and groups.

Every read is batched (DescribeContainerInstances and DescribeTasks 100 a call, DescribeInstances and
DescribeAutoScalingGroups paginated). Nothing here writes.

Fleet sizes: `current_instances` counts the group's usable machines (registered with ECS, not draining)
and `pending_instances` the rest of its desired capacity (launching, booting, joining the cluster, or
replacing a reclaimed instance). The planner counts pending instances as capacity for waiting jobs, so
the one-minute schedule does not buy again, run after run, for jobs whose instances are still booting.
An instance detached from its group at its spot notice (its replacement declined,
lambdas/job_events/replacements.py) no longer counts in the desired capacity while it runs its last two
minutes: it is counted against its fleet's cap and priced in the dollars per hour until it is gone.

Removals (docs/removal.md): a machine tagged `mlfleet:removing` is being drained by the removal protocol;
it is `removing`, never placed onto, and counted in its fleet's `removing_instances`, neither usable nor
launching (its group's desired capacity still counts it until the terminate decrements it). Members
terminating are in no count but `terminating_instances`: the release stage counts them against the
disruption budget, as the executor does (lambdas.removal.decide.room). The release
method reads `tasks` (running + pending), `empty_since` (the `mlfleet:empty-since` tag the scheduler
writes, lambdas/scheduler/releases.py), the launch time, `mlfleet:keep-alive`, and each group's minimum.

GPU accounting: free GPUs = the machine's GPU count minus the GPUs that the tasks placed on the instance
request (their containers' GPU resourceRequirements, from the task's overrides or else its task
definition). Its GPU count is the catalog's for the instance type, or what ECS registered where that is
fewer (`registeredResources` "GPU", a STRINGSET of GPU ids, else `gpuDevices`: botocore's ecs model,
ContainerInstance, Resource). A container instance that reports neither registered no GPU: its agent
sent no GPU device (RegisterContainerInstance.platformDevices, type GPU), because it started without
ECS_ENABLE_GPU_SUPPORT or found no NVIDIA device (the driver failed at boot), and ECS places no task that
asks for a GPU on it. Its count is 0, not its type's. (moto registers no GPU resource for any instance:
the tests add it where they fake an agent, tests/ecs_agent.py.) It never reads remainingResources GPU:
the ledger of what we asked for is what the planner must respect.
The tasks counted are those ECS means to run (desiredStatus RUNNING) and those it is stopping
(desiredStatus STOPPED, lastStatus not yet STOPPED: `RegionView.stopping`): after StopTask a task runs up
to its stop timeout, and ECS frees its resources only once it has stopped (the ECS developer guide, "Amazon
ECS container instance state change events": "If a task that is supposed to be RUNNING is transitioned to
STOPPED, the agent releases the resources that were allocated to the stopped task"). A job started on them
meanwhile is refused (RESOURCE:GPU) and marks the machine. Stopping tasks hold resources, not work: they
are not among the machine's jobs or submissions. (botocore's ecs model: ListTasks desiredStatus is
RUNNING, PENDING or STOPPED; Task.lastStatus a string of the task lifecycle.)

Machines leaving (`leaving_reason`): a container instance ECS still calls ACTIVE may belong to an instance its
group is terminating (a scale-in, a health replacement, a spot reclaim, a lifecycle hook holding it in
Terminating:Wait), detaching or putting in standby, or one EC2 is shutting down or stopping: its agent
deregisters only when the instance stops. Such a machine is treated as draining: nothing is placed on it (a job
started there would die with it, an attempt spent), it is not usable capacity, and the release stage leaves it.

Degraded machines (`degraded_reason`): nothing is placed on a machine whose agent registered fewer GPUs
than its type has (none at all, a GPU fallen off the bus, a driver that failed at boot), whose ECS health is IMPAIRED
(`healthStatus.overallStatus`, botocore's ecs model ContainerInstanceHealthStatus), or on which ECS
refused a start for a reason about the machine within START_REFUSED_HOLD (the `mlfleet:start-refused-at`
tag, lambdas/scheduler/actions.py). Each run logs one `degraded-machine` line per such machine.

GPU sharing (ECS `nvidiaMps`): a task that shares a GPU holds the memory its requirement names on the GPU
ECS gave it (its container's `gpuIds`). Each shared GPU's memory left = the catalog's shareable memory per
GPU (lambdas.common.catalog) minus what the known tasks on it hold, and never more than ECS itself reports
left for that GPU (ContainerInstance.gpuDevices, where it reports them; its total bounds the capacity too).
A sharing task whose GPU is not known (moto reports no gpuIds) is counted on a GPU of its own: the planner
may then see less room than there is, never more. A machine shares GPUs only when its agent advertises
`ecs.capability.gpu-sharing-mps` (the ECS agent does once the AMI's nvidia-mps.service is enabled and the
GPU is not a vGPU slice: amazon-ecs-agent, ecs-agent/utils/gpu ShouldAdvertiseMpsCapability).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from botocore.exceptions import BotoCoreError, ClientError

from ..common import tags as tag_keys
from ..common.aws import TASKS_PER_DESCRIBE, chunks, client, describe_groups, paginate, still_stopping
from ..common.catalog import Catalog, UnknownInstanceType, UnknownRegion
from ..common.keep_alive import keep_alive_protects, parse_time
from ..common.logs import log_decision
from ..common.permissions import needs
from ..common.spot_prices import PERMISSIONS as SPOT_PRICE_PERMISSIONS
from ..common.spot_prices import live_spot_prices
from ..jobs.fleets import REBALANCE_TAG, FleetConfig
from ..jobs.queue import JobMessage, MessageError, parse_message
from ..jobs.spec import submission_of

SCALING_PAUSED_TAG = "mlfleet:scaling-paused-at"
# The container-instance attribute of an agent that shares GPUs with NVIDIA MPS (amazon-ecs-agent).
GPU_SHARING_CAPABILITY = "ecs.capability.gpu-sharing-mps"
# The container instance attribute naming its fleet (components/compute/user_data.sh).
FLEET_ATTRIBUTE = "mlfleet.fleet"
# A detached instance still running this long after its notice is logged each run (the spot market ends
# it at two minutes: lambdas/job_events/replacements.py).
DETACHED_GRACE_MINUTES = 10
# Nothing is placed on a machine for this long after ECS refused a start on it for a reason about the
# machine (the `mlfleet:start-refused-at` tag): long enough that the jobs go elsewhere or are bought for,
# short enough that a machine whose refusal passed (a task's resources freed late) is used again.
START_REFUSED_HOLD = timedelta(minutes=30)
# Receive no more once the run has less than this left: acting on what was read needs the rest.
MIN_REMAINING_MS = 60_000

PERMISSIONS = (
    needs("ecs:ListContainerInstances", resources=("arn:{partition}:ecs:*:{account}:cluster/mlfleet-{environment}",),
          why="list the fleets' container instances"),
    # IAM authorizes ListTasks on container-instance ARNs, or on "*" narrowed by the ecs:cluster key (an
    # ARN; the IAM reference, ecs:ListTasks): granted on the cluster ARN, every call would be denied.
    needs("ecs:ListTasks", condition={"ArnLike": {"ecs:cluster": "arn:{partition}:ecs:*:{account}:cluster/mlfleet-{environment}"}},
          why="list the tasks on the environment's clusters: meant to run, and stopping (still holding resources)"),
    needs("ecs:DescribeContainerInstances", "ecs:DescribeTasks",
          resources=("arn:{partition}:ecs:*:{account}:container-instance/mlfleet-{environment}/*",
                     "arn:{partition}:ecs:*:{account}:task/mlfleet-{environment}/*"),
          why="read free resources and the GPUs each task asked for"),
    needs("ecs:DescribeTaskDefinition", why="read GPU requirements of tasks without overrides (no resource-level support)"),
    needs("ec2:DescribeInstances", why="instance lifecycle (spot/on-demand), type, zone and rebalance tag"),
    needs("autoscaling:DescribeAutoScalingGroups", "autoscaling:DescribeScalingActivities",
          why="fleet sizes, caps, and failed launches for the circuit breaker"),
    *SPOT_PRICE_PERMISSIONS,
)
# A live spot price outside [this share of on-demand, on-demand] is not believed (the catalog's is used):
# AWS spot prices sit between roughly 10% and 100% of on-demand, and a misread must not make a fleet
# look free or dearer than on-demand.
PLAUSIBLE_SPOT_SHARE = 0.05


@dataclass(frozen=True)
class Received:
    receipt_handle: str
    message: JobMessage | None
    error: str = ""


def receive_messages(sqs, queue_url: str, *, max_messages: int, remaining_ms: Callable[[], int]) -> list[Received]:
    """Up to `max_messages` messages, 10 a call, stopping early when the queue is empty or time runs short.

    Malformed messages are returned with their error and never deleted: after maxReceiveCount receives
    the queue's redrive policy moves them to the dead-letter queue, untouched.
    """
    received: list[Received] = []
    while len(received) < max_messages and remaining_ms() >= MIN_REMAINING_MS:
        batch = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=min(10, max_messages - len(received)),
                                    WaitTimeSeconds=0).get("Messages", [])
        if not batch:
            break
        for raw in batch:
            try:
                received.append(Received(raw["ReceiptHandle"], parse_message(raw.get("Body", ""))))
            except MessageError as error:
                received.append(Received(raw["ReceiptHandle"], None, str(error)))
    return received


@dataclass(frozen=True)
class MachineView:
    """A container instance as the planner needs it, plus what acting needs (cluster)."""
    container_instance_arn: str
    instance_id: str
    region: str
    fleet: str
    cluster: str
    instance_type: str
    availability_zone: str
    lifecycle: str
    free_gpus: int
    free_vcpus: float
    free_memory_mib: int
    price_per_hour: float
    rebalance_recommended: bool
    draining: bool
    submissions: frozenset[str] = frozenset()  # of the jobs running on it
    jobs: frozenset[str] = frozenset()  # the job ids its running tasks were started for (their busy-until)
    removing: bool = False  # tagged `mlfleet:removing`: never placed onto
    tasks: int = 0  # running + pending on its container instance
    launched_at: float | None = None  # epoch seconds
    registered_at: float | None = None  # when its ECS agent registered (boot time = registered - launched)
    empty_since: float | None = None  # the `mlfleet:empty-since` tag; None when absent or unreadable
    protected: bool = False  # `mlfleet:keep-alive` protects it
    gpu_memory_mib: int = 0  # shareable memory per GPU (0: it cannot share: its type, or no MPS capability)
    shared_gpus: tuple[int, ...] = ()  # memory left on each GPU that tasks share
    gpus: int | None = None  # the GPUs ECS registered, where fewer than its type's (0: it registered no GPU resource)
    degraded: str = ""  # why nothing may be placed on it (degraded_reason), or ""


@dataclass(frozen=True)
class FleetView:
    config: FleetConfig
    desired: int
    current_instances: int
    pending_instances: int
    max_instances: int
    hourly_usd: float
    # The circuit breaker's mark on the group (SCALING_PAUSED_TAG), so it alerts once per opening.
    scaling_paused: bool = False
    min_size: int = 0
    removing_instances: int = 0  # being drained by a removal: neither usable nor launching
    terminating_instances: int = 0  # members terminating: in no other count, still against the disruption budget
    # Detached from the group at their spot notice (`mlfleet:detached-at`), still running out their last
    # two minutes: outside the desired capacity, so taken off `max_instances` and priced in `hourly_usd`.
    detached_instances: int = 0


@dataclass
class RegionView:
    region: str
    machines: list[MachineView] = field(default_factory=list)
    fleets: list[FleetView] = field(default_factory=list)
    # Running tasks of the region's clusters: task ARN -> startedBy (the job id for our tasks).
    tasks: dict[str, str] = field(default_factory=dict)
    # Tasks ECS is stopping (desiredStatus STOPPED, lastStatus not yet STOPPED): their machines' use counts them.
    stopping: set[str] = field(default_factory=set)


def _resource(resources: Iterable[Mapping], name: str) -> int:
    for resource in resources:
        if resource.get("name") == name:
            return int(resource.get("integerValue", 0))
    return 0


def _gpu_requirement(requirements: Iterable[Mapping] | None) -> tuple[int, int] | None:
    """(whole GPUs, MiB of a shared GPU) of a container's GPU requirement, or None when it has none."""
    for requirement in requirements or ():
        if requirement.get("type") == "GPU":
            mps = (requirement.get("sharingStrategy") or {}).get("nvidiaMps")
            if mps:
                return 0, int(mps["memory"])
            return int(requirement["value"]), 0
    return None


@dataclass
class TaskUse:
    """What a task reserves on its container instance."""
    gpus: int = 0
    vcpus: float = 0.0
    memory_mib: int = 0
    shared: list = field(default_factory=list)  # (GPU id or None when unknown, MiB) per container sharing one


def requested_resources(task: Mapping, task_definition: Callable[[str], Mapping]) -> TaskUse:
    """What a task reserves: per container, its override if given, else its definition; a container that
    shares a GPU holds that much memory on the GPU ECS gave it (`gpuIds`, where ECS reports it)."""
    definition = task_definition(task["taskDefinitionArn"])
    overrides = {o.get("name"): o for o in (task.get("overrides") or {}).get("containerOverrides", [])}
    gpu_ids = {c.get("name"): c.get("gpuIds") or [] for c in task.get("containers") or ()}
    use, cpu_units = TaskUse(), 0
    for container in definition.get("containerDefinitions", []):
        name = container.get("name")
        override = overrides.get(name, {})
        gpu = _gpu_requirement(override.get("resourceRequirements")) or \
            _gpu_requirement(container.get("resourceRequirements")) or (0, 0)
        use.gpus += gpu[0]
        if gpu[1]:
            use.shared.append((gpu_ids[name][0] if len(gpu_ids.get(name, ())) == 1 else None, gpu[1]))
        cpu_units += int(override.get("cpu", container.get("cpu", 0)) or 0)
        use.memory_mib += int(override.get("memoryReservation") or override.get("memory")
                              or container.get("memoryReservation") or container.get("memory") or 0)
    use.vcpus = cpu_units / 1024
    return use


def add_use(total: TaskUse, use: TaskUse) -> None:
    total.gpus += use.gpus
    total.vcpus += use.vcpus
    total.memory_mib += use.memory_mib
    total.shared += use.shared


def shared_gpus(uses: Iterable[tuple[str | None, int]], gpu_memory_mib: int,
                devices: Iterable[Mapping] = ()) -> tuple[int, ...]:
    """Memory left on each GPU that tasks share: the shareable memory less what the known tasks on it hold
    (a task whose GPU is unknown on one of its own), never more than ECS reports left for that GPU, and
    GPUs ECS reports shared that no known task holds counted too (another's task)."""
    held: dict[str, int] = {}
    unknown: list[int] = []
    for gpu_id, memory in uses:
        if gpu_id is None:
            unknown.append(memory)
        else:
            held[gpu_id] = held.get(gpu_id, 0) + memory
    reported = {d.get("gpuId"): d for d in devices if d.get("gpuId")}
    left = {gpu_id: gpu_memory_mib - memory for gpu_id, memory in held.items()}
    for gpu_id, device in reported.items():
        if device.get("sharingMode") == "NVIDIA_MPS" and device.get("remainingMemoryInMiB") is not None:
            left[gpu_id] = min(left.get(gpu_id, gpu_memory_mib), int(device["remainingMemoryInMiB"]))
    return tuple(max(0, x) for x in [*left.values(), *(gpu_memory_mib - m for m in unknown)])


def machine_gpu_memory(spec, ci: Mapping) -> int:
    """Memory per GPU jobs sharing one may be planned onto on this machine: the catalog's, never more than
    the smallest total ECS reports for its GPUs; 0 without the agent's MPS capability."""
    if spec is None or not any(a.get("name") == GPU_SHARING_CAPABILITY for a in ci.get("attributes") or ()):
        return 0
    totals = [int(d["totalMemoryInMiB"]) for d in ci.get("gpuDevices") or () if d.get("totalMemoryInMiB")]
    return min([spec.shareable_gpu_memory_mib, *totals])


def registers_gpus(ci: Mapping) -> bool:
    """Whether ECS reports any GPU resource for the container instance (`registeredResources` "GPU", or
    `gpuDevices`, present only where the agent supports GPU sharing: botocore's ecs model, ContainerInstance)."""
    return bool(ci.get("gpuDevices")) or any(r.get("name") == "GPU" for r in ci.get("registeredResources") or ())


def registered_gpus(ci: Mapping) -> int:
    """The GPUs ECS registered for a container instance: its `registeredResources` "GPU" (a STRINGSET of GPU
    ids), else its `gpuDevices`; 0 when it reports neither: the agent registered no GPU device, and ECS places
    no GPU task there (module docstring, "GPU accounting")."""
    for resource in ci.get("registeredResources") or ():
        if resource.get("name") == "GPU":
            return len(resource.get("stringSetValue") or ())
    return len(ci.get("gpuDevices") or ())


# Auto Scaling lifecycle states (botocore's autoscaling model, Instance.LifecycleState) in which an instance stays
# in service: placed onto. Pending states are kept too: a container instance registers at the end of the boot, and
# a group without launch hooks moves its instance to InService as soon as EC2 runs it.
STAYING_LIFECYCLE_PREFIXES = ("InService", "Pending")
# EC2 instance states (InstanceStateName, botocore's ec2 model) of an instance on its way out.
GOING_STATES = frozenset({"shutting-down", "terminated", "stopping", "stopped"})


def leaving_reason(lifecycle_state: str | None, instance_state: str | None) -> str:
    """Why a fleet machine is going away though its container instance may still be ACTIVE, or "" (module
    docstring, "Machines leaving"). None: not read (an instance the group read did not list, or no state)."""
    if lifecycle_state is not None and not lifecycle_state.startswith(STAYING_LIFECYCLE_PREFIXES):
        return f"its Auto Scaling group has it {lifecycle_state}"
    if instance_state in GOING_STATES:
        return f"its EC2 instance is {instance_state}"
    return ""


def degraded_reason(ci: Mapping, type_gpus: int | None, registered: int, start_refused_at: datetime | None,
                    now: datetime | None) -> str:
    """Why nothing may be placed on the machine, or "" (module docstring, "Degraded machines"). `registered`:
    registered_gpus(ci)."""
    reasons = []
    if type_gpus is not None and registered < type_gpus:
        reasons.append(f"ECS registered {registered} of its type's {type_gpus} GPUs" if registers_gpus(ci) else
                       f"ECS registered no GPU resource of its type's {type_gpus} GPUs (an agent started without "
                       "ECS_ENABLE_GPU_SUPPORT, or no NVIDIA device found: the driver failed at boot)")
    if (ci.get("healthStatus") or {}).get("overallStatus") == "IMPAIRED":
        reasons.append("ECS reports its health IMPAIRED")
    if start_refused_at is not None and now is not None and now - start_refused_at < START_REFUSED_HOLD:
        reasons.append(f"ECS refused a start on it for the machine at {start_refused_at.isoformat()} "
                       f"({tag_keys.START_REFUSED_AT}; placed on again {START_REFUSED_HOLD} after)")
    return "; ".join(reasons)


def price_of(catalog: Catalog, instance_type: str, region: str, lifecycle: str,
             spot_prices: Mapping[str, float]) -> float:
    try:
        entry = catalog.get(instance_type)
        if lifecycle == "spot":
            return spot_prices.get(instance_type, entry.spot_price(region))
        return entry.on_demand_price(region)
    except (UnknownInstanceType, UnknownRegion):
        # A type the catalog does not know is priced out of reach rather than as free.
        return float("inf")


def spot_prices_for(region: str, instance_types: Iterable[str], catalog: Catalog) -> dict[str, float]:
    """Live spot prices where they can be read and are plausible; the caller falls back to the catalog.

    The read is best effort: the planner must still run when DescribeSpotPriceHistory is throttled or
    denied, so an error is logged and the catalog's prices are used.
    """
    types = sorted({t for t in instance_types if t in catalog})
    try:
        live = live_spot_prices(region, types)
    except (ClientError, BotoCoreError) as error:
        log_decision("spot-prices", region=region, source="catalog", reason=str(error)[:500])
        return {}
    accepted, rejected = {}, {}
    for instance_type, price in live.items():
        try:
            on_demand = catalog.get(instance_type).on_demand_price(region)
        except UnknownRegion:
            continue
        if PLAUSIBLE_SPOT_SHARE * on_demand <= price <= on_demand:
            accepted[instance_type] = price
        else:
            rejected[instance_type] = price
    log_decision("spot-prices", region=region, live=accepted, implausible=rejected,
                 catalog=sorted(set(types) - set(accepted)))
    return accepted


# Instance ids per DescribeInstances call, given as the instance-id filter: with InstanceIds, one id EC2
# does not know (gone long ago, or launched a moment ago: EC2's reads are eventually consistent) fails the
# whole call with InvalidInstanceID.NotFound, and the region's read with it; a filter leaves it out.
INSTANCE_FILTER_VALUES = 200


def _instances(ec2, instance_ids: Sequence[str]) -> dict[str, Mapping]:
    found = {}
    for batch in chunks(sorted(set(instance_ids)), INSTANCE_FILTER_VALUES):
        for reservation in paginate(ec2, "describe_instances", "Reservations",
                                    Filters=[{"Name": "instance-id", "Values": batch}]):
            for instance in reservation["Instances"]:
                found[instance["InstanceId"]] = instance
    return found


def _epoch(value) -> float | None:
    return value.timestamp() if isinstance(value, datetime) else None


def detached_from(registered: Sequence[tuple[str, Mapping]], instances: Mapping[str, Mapping],
                  fleet_of: Mapping[str, FleetConfig], fleet_names: Collection[str],
                  now: datetime | None = None) -> dict[str, list[Mapping]]:
    """Fleet name -> its instances detached at their spot notice that still run (job_events/replacements.py).

    Outside the group, such an instance is found through its ECS registration, which outlives the detach,
    and named to its fleet by the `mlfleet.fleet` attribute its user data gives the agent
    (components/compute/user_data.sh, ECS_INSTANCE_ATTRIBUTES)."""
    found: dict[str, list[Mapping]] = {}
    for _, ci in registered:
        instance = instances.get(ci["ec2InstanceId"])
        if instance is None or ci["ec2InstanceId"] in fleet_of:
            continue
        tags = {t["Key"]: t["Value"] for t in instance.get("Tags", [])}
        state = instance.get("State", {}).get("Name", "running")
        fleet = next((a.get("value") for a in ci.get("attributes") or () if a.get("name") == FLEET_ATTRIBUTE), None)
        if tag_keys.DETACHED_AT in tags and state in ("pending", "running") and fleet in fleet_names:
            found.setdefault(fleet, []).append(instance)
            detached_at = parse_time(tags[tag_keys.DETACHED_AT])
            if now is not None and (detached_at is None or now - detached_at > timedelta(minutes=DETACHED_GRACE_MINUTES)):
                log_decision("detached-still-running", instance_id=ci["ec2InstanceId"], fleet=fleet,
                             detached_at=tags[tag_keys.DETACHED_AT], action="counted against the fleet's caps",
                             reason="the spot market should have ended it two minutes after its notice")
    return found


def read_region(region: str, fleets: Sequence[FleetConfig], catalog: Catalog,
                spot_prices: Mapping[str, float], now: datetime | None = None) -> RegionView:
    """Machines, fleet sizes and running tasks of one fleet region."""
    ecs, ec2, autoscaling = client("ecs", region), client("ec2", region), client("autoscaling", region)
    view = RegionView(region)
    groups = {g["AutoScalingGroupName"]: g for g in describe_groups(autoscaling, [f.asg_name for f in fleets])}
    fleet_of: dict[str, FleetConfig] = {}
    lifecycle_of: dict[str, str] = {}
    for fleet in fleets:
        for instance in groups.get(fleet.asg_name, {}).get("Instances", []):
            fleet_of[instance["InstanceId"]] = fleet
            lifecycle_of[instance["InstanceId"]] = instance.get("LifecycleState")

    definitions = functools.lru_cache(maxsize=None)(
        lambda arn: ecs.describe_task_definition(taskDefinition=arn)["taskDefinition"])
    registered: list[tuple[str, Mapping]] = []
    used: dict[str, TaskUse] = {}
    submissions: dict[str, set[str]] = {}
    job_ids: dict[str, set[str]] = {}
    for cluster in dict.fromkeys(f.cluster for f in fleets):
        arns = list(paginate(ecs, "list_container_instances", "containerInstanceArns", cluster=cluster))
        for batch in chunks(arns, 100):
            registered.extend((cluster, ci) for ci in ecs.describe_container_instances(
                cluster=cluster, containerInstances=batch)["containerInstances"])
        task_arns = list(paginate(ecs, "list_tasks", "taskArns", cluster=cluster, desiredStatus="RUNNING"))
        for batch in chunks(task_arns, TASKS_PER_DESCRIBE):
            for task in ecs.describe_tasks(cluster=cluster, tasks=batch)["tasks"]:
                view.tasks[task["taskArn"]] = task.get("startedBy", "")
                host = task.get("containerInstanceArn", "")
                add_use(used.setdefault(host, TaskUse()), requested_resources(task, definitions))
                submission = submission_of(task.get("startedBy", ""))
                if submission:
                    submissions.setdefault(host, set()).add(submission)
                    job_ids.setdefault(host, set()).add(task["startedBy"])
        # Tasks ECS is stopping still hold what they reserved until they have stopped (module docstring, "GPU
        # accounting"): counted in their machine's use, not as its jobs. ECS lists stopped tasks for about an
        # hour, so this pages through them (describing only those not seen STOPPED before: still_stopping); a
        # task listed as meant to run a moment ago is counted once.
        stopped_arns = paginate(ecs, "list_tasks", "taskArns", cluster=cluster, desiredStatus="STOPPED")
        for task in still_stopping(ecs, cluster, stopped_arns):
            if task["taskArn"] in view.tasks:
                continue
            view.stopping.add(task["taskArn"])
            add_use(used.setdefault(task.get("containerInstanceArn", ""), TaskUse()),
                    requested_resources(task, definitions))

    instances = _instances(ec2, [*fleet_of, *(ci["ec2InstanceId"] for _, ci in registered)])
    detached = detached_from(registered, instances, fleet_of, {f.fleet for f in fleets}, now)
    for cluster, ci in registered:
        instance = instances.get(ci["ec2InstanceId"])
        fleet = fleet_of.get(ci["ec2InstanceId"])
        if instance is None or fleet is None or ci.get("status") not in ("ACTIVE", "DRAINING"):
            log_decision("skip-machine", region=region, container_instance=ci["containerInstanceArn"],
                         instance_id=ci["ec2InstanceId"], status=ci.get("status"),
                         reason="not an instance of a fleet group" if fleet is None else f"status {ci.get('status')}")
            continue
        instance_type = instance["InstanceType"]
        lifecycle = "spot" if instance.get("InstanceLifecycle") == "spot" else "on-demand"
        tags = {t["Key"]: t["Value"] for t in instance.get("Tags", [])}
        use = used.get(ci["containerInstanceArn"], TaskUse())
        gpus_used, vcpus_used, memory_used = use.gpus, use.vcpus, use.memory_mib
        known = instance_type in catalog
        spec = catalog.get(instance_type) if known else None
        registered = registered_gpus(ci)
        # Fewer registered than its type has, none included: its count (and the machine degraded); otherwise its type's.
        gpus = registered if spec is not None and registered < spec.gpus else None
        refused_at = parse_time(tags[tag_keys.START_REFUSED_AT]) if tag_keys.START_REFUSED_AT in tags else None
        degraded = degraded_reason(ci, spec.gpus if spec else None, registered, refused_at, now)
        if degraded:
            log_decision("degraded-machine", region=region, fleet=fleet.fleet, instance_id=ci["ec2InstanceId"],
                         container_instance=ci["containerInstanceArn"], instance_type=instance_type,
                         reason=degraded, tasks=int(ci.get("runningTasksCount", 0)) + int(ci.get("pendingTasksCount", 0)),
                         action="nothing placed on it; once empty, released without the release delay")
        gpu_memory = machine_gpu_memory(spec, ci)
        shared = shared_gpus(use.shared, gpu_memory or (spec.shareable_gpu_memory_mib if spec else 0),
                             ci.get("gpuDevices") or ())
        # ECS's own remainingResources bound CPU and memory; the catalog bounds them too, in case the
        # agent registered more than a task can really get (and because moto subtracts task-definition
        # values, not overrides, from remainingResources).
        remaining = ci.get("remainingResources", [])
        free_vcpus = _resource(remaining, "CPU") / 1024
        free_memory = _resource(remaining, "MEMORY")
        if spec is not None:
            free_vcpus = min(free_vcpus, spec.schedulable_vcpus - vcpus_used)
            free_memory = min(free_memory, spec.schedulable_memory_mib - memory_used)
        empty_since = parse_time(tags[tag_keys.EMPTY_SINCE]) if tag_keys.EMPTY_SINCE in tags else None
        leaving = leaving_reason(lifecycle_of.get(ci["ec2InstanceId"]), (instance.get("State") or {}).get("Name"))
        if leaving:
            log_decision("leaving-machine", region=region, fleet=fleet.fleet, instance_id=ci["ec2InstanceId"],
                         container_instance=ci["containerInstanceArn"], status=ci.get("status"), reason=leaving,
                         action="treated as draining: nothing placed on it, not usable capacity")
        view.machines.append(MachineView(
            container_instance_arn=ci["containerInstanceArn"], instance_id=ci["ec2InstanceId"], region=region,
            fleet=fleet.fleet, cluster=cluster, instance_type=instance_type,
            availability_zone=instance.get("Placement", {}).get("AvailabilityZone", ""), lifecycle=lifecycle,
            free_gpus=max(0, (gpus if gpus is not None else spec.gpus if spec else 0) - gpus_used - len(shared)),
            free_vcpus=max(0.0, free_vcpus),
            free_memory_mib=max(0, free_memory),
            price_per_hour=price_of(catalog, instance_type, region, lifecycle, spot_prices),
            rebalance_recommended=REBALANCE_TAG in tags,
            draining=ci.get("status") == "DRAINING" or not ci.get("agentConnected", True) or bool(leaving),
            submissions=frozenset(submissions.get(ci["containerInstanceArn"], ())),
            jobs=frozenset(job_ids.get(ci["containerInstanceArn"], ())),
            removing=tag_keys.REMOVING in tags,
            tasks=int(ci.get("runningTasksCount", 0)) + int(ci.get("pendingTasksCount", 0)),
            launched_at=_epoch(instance.get("LaunchTime")), registered_at=_epoch(ci.get("registeredAt")),
            empty_since=empty_since.timestamp() if empty_since else None,
            protected=now is not None and keep_alive_protects(tags.get(tag_keys.KEEP_ALIVE), now)[0],
            gpu_memory_mib=gpu_memory, shared_gpus=shared,
            gpus=gpus, degraded=degraded))

    for fleet in fleets:
        group = groups.get(fleet.asg_name)
        if group is None:
            log_decision("skip-fleet", region=region, fleet=fleet.fleet, asg=fleet.asg_name, reason="group not found")
            continue
        members = [i for i in group.get("Instances", []) if not i["LifecycleState"].startswith("Terminat")]
        terminating = len(group.get("Instances", [])) - len(members)
        usable = sum(1 for m in view.machines if m.fleet == fleet.fleet and not m.draining and not m.removing)
        removing = sum(1 for i in members if any(t["Key"] == tag_keys.REMOVING for t in
                                                  instances.get(i["InstanceId"], {}).get("Tags", [])))
        desired = int(group["DesiredCapacity"])
        hourly = 0.0
        for member in members:
            lifecycle = "spot" if instances.get(member["InstanceId"], {}).get("InstanceLifecycle") == "spot" else "on-demand"
            hourly += price_of(catalog, member["InstanceType"], region, lifecycle, spot_prices)
        # Instances asked for but not launched yet are priced at the fleet's dearest on-demand type:
        # the dollar cap must hold whatever the group ends up buying.
        missing = max(0, desired - len(members))
        if missing:
            hourly += missing * max(price_of(catalog, t, region, "on-demand", {}) for t in fleet.instance_types)
        gone_from_group = detached.get(fleet.fleet, [])
        for instance in gone_from_group:
            lifecycle = "spot" if instance.get("InstanceLifecycle") == "spot" else "on-demand"
            hourly += price_of(catalog, instance["InstanceType"], region, lifecycle, spot_prices)
        view.fleets.append(FleetView(
            config=fleet, desired=desired, current_instances=usable,
            pending_instances=max(0, desired - usable - removing),
            max_instances=max(0, min(int(group["MaxSize"]), fleet.max_instances - len(gone_from_group))),
            hourly_usd=hourly, detached_instances=len(gone_from_group),
            scaling_paused=any(t["Key"] == SCALING_PAUSED_TAG for t in group.get("Tags", [])),
            min_size=int(group.get("MinSize", 0)), removing_instances=removing, terminating_instances=terminating))
    return view


def failed_launches(autoscaling, asg_name: str, now: datetime, window: timedelta) -> int:
    """Failed scaling activities of the group that started within `window` before `now`."""
    since = now - window
    # Newest first; one page of 100 covers far more than 30 minutes of a group's launches.
    activities = autoscaling.describe_scaling_activities(AutoScalingGroupName=asg_name, MaxRecords=100)["Activities"]
    return sum(1 for a in activities if a["StartTime"] >= since and a.get("StatusCode") == "Failed")

