"""What the reaper reads, batched: the environment's instances, their ECS task counts and metrics.

- DescribeInstances, paginated, filtered on the environment tag (running instances only);
- ListContainerInstances (paginated) + DescribeContainerInstances, 100 ARNs a call, for task counts;
- GetMetricData, 500 queries a call (two per instance), paginated on NextToken;
- DescribeSpotInstanceRequests for the standalone Spot Instances only (their request's Type says whether EC2
  can stop them), 200 instance ids a call, none at all when there is no such instance.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from botocore.exceptions import BotoCoreError, ClientError

from ..common import tags as tag_keys
from ..common.aws import chunks, paginate, spot_requests
from ..common.errors import describe
from ..common.logs import log_decision
from ..common.permissions import needs
from .idle import PERIOD_SECONDS, PERSISTENT, Instance, IdleSettings, window_periods

GPU_NAMESPACE, GPU_METRIC = "CWAgent", "nvidia_smi_utilization_gpu"
METRIC_QUERIES_PER_CALL = 500
CONTAINER_INSTANCES_PER_CALL = 100

PERMISSIONS = (
    needs("ec2:DescribeInstances", why="find the environment's instances (EC2 Describe* has no resource scoping)"),
    needs("ecs:ListContainerInstances",
          resources=("arn:{partition}:ecs:{region}:{account}:cluster/mlfleet-{environment}",),
          why="list the cluster's container instances"),
    needs("ecs:DescribeContainerInstances",
          resources=("arn:{partition}:ecs:{region}:{account}:container-instance/mlfleet-{environment}/*",),
          why="read running task counts"),
    needs("cloudwatch:GetMetricData", why="CPU and GPU utilisation over the window (no resource scoping)"),
    # Describe* actions of EC2 take no resource (the IAM reference).
    needs("ec2:DescribeSpotInstanceRequests",
          why="a standalone Spot Instance's request type: one of a one-time request cannot be stopped"),
)


def environment_instances(ec2, environment: str, fleet_asg_names: Sequence[str]) -> list[dict]:
    """Running instances tagged for the environment: fleet members of `fleet_asg_names`, and standalone
    ones (no ASG). Instances of other groups are not the reaper's."""
    found = []
    for reservation in paginate(ec2, "describe_instances", "Reservations", Filters=[
        {"Name": f"tag:{tag_keys.ENVIRONMENT}", "Values": [environment]},
        {"Name": "instance-state-name", "Values": ["running"]},
    ]):
        for raw in reservation["Instances"]:
            tags = {t["Key"]: t["Value"] for t in raw.get("Tags", [])}
            asg = tags.get("aws:autoscaling:groupName")
            if asg is None or asg in fleet_asg_names:
                found.append(raw)
    return found


def _standalone_spot(raw: dict) -> bool:
    return raw.get("InstanceLifecycle") == "spot" and not any(
        t["Key"] == "aws:autoscaling:groupName" for t in raw.get("Tags", []))


def spot_request_types(ec2, raws: Sequence[dict]) -> dict[str, tuple[str, str]]:
    """Standalone Spot Instance id -> (its Spot request's id, Type), in one batched read; an instance whose
    request is gone, or all of them when the read fails, is left out: unknown, the decision says what that
    means (idle.standalone_action). The instance's own SpotInstanceRequestId picks its request when it
    names one (moto leaves it out; the `instance-id` filter finds the request either way)."""
    ids = [raw["InstanceId"] for raw in raws if _standalone_spot(raw)]
    if not ids:
        return {}
    named = {raw["InstanceId"]: raw.get("SpotInstanceRequestId") for raw in raws if _standalone_spot(raw)}
    found: dict[str, tuple[str, str]] = {}
    try:
        for request in spot_requests(ec2, ids):
            instance_id, request_id, kind = (request.get("InstanceId"), request.get("SpotInstanceRequestId"),
                                             request.get("Type"))
            if instance_id not in named or not kind or named[instance_id] not in (None, request_id):
                continue
            # Should two requests name it, persistent wins: a stop is tried first, and a refusal still
            # terminates it (idle.stop_refused).
            if found.get(instance_id, ("", ""))[1] != PERSISTENT:
                found[instance_id] = (request_id, kind)
    except (ClientError, BotoCoreError) as error:
        log_decision("reaper-error", step="read-spot-requests", instance_ids=ids,
                     reason=f"{describe(error)}: their request types are unknown this run")
        return {}
    return found


@dataclass(frozen=True)
class ContainerInstance:
    arn: str
    tasks: int  # running + pending: a task being placed makes the machine busy


def container_instances(ecs, cluster: str) -> dict[str, ContainerInstance]:
    """EC2 instance id -> its registration in the cluster, for every registered container instance."""
    arns = list(paginate(ecs, "list_container_instances", "containerInstanceArns", cluster=cluster))
    found: dict[str, ContainerInstance] = {}
    for batch in chunks(arns, CONTAINER_INSTANCES_PER_CALL):
        for ci in ecs.describe_container_instances(cluster=cluster, containerInstances=batch)["containerInstances"]:
            found[ci["ec2InstanceId"]] = ContainerInstance(
                ci["containerInstanceArn"], ci.get("runningTasksCount", 0) + ci.get("pendingTasksCount", 0))
    return found


def metric_queries(instance_id: str, asg_name: str | None, index: int) -> list[dict]:
    """The two queries of one instance. The AMI's agent publishes GPU utilisation aggregated on
    InstanceId + AutoScalingGroupName for fleet members and on InstanceId alone for every machine; a
    standalone one has only the latter (no group tag, no AutoScalingGroupName: test_metric_dimensions.py)."""
    gpu_dimensions = [{"Name": "InstanceId", "Value": instance_id}]
    if asg_name:
        gpu_dimensions.append({"Name": "AutoScalingGroupName", "Value": asg_name})
    return [
        {"Id": f"cpu{index}", "ReturnData": True, "MetricStat": {
            "Metric": {"Namespace": "AWS/EC2", "MetricName": "CPUUtilization",
                       "Dimensions": [{"Name": "InstanceId", "Value": instance_id}]},
            "Period": PERIOD_SECONDS, "Stat": "Maximum"}},
        {"Id": f"gpu{index}", "ReturnData": True, "MetricStat": {
            "Metric": {"Namespace": GPU_NAMESPACE, "MetricName": GPU_METRIC, "Dimensions": gpu_dimensions},
            "Period": PERIOD_SECONDS, "Stat": "Maximum"}},
    ]


def utilisation(cloudwatch, raws: Sequence[dict], now: datetime, settings: IdleSettings) -> dict[str, dict]:
    """instance id -> {"cpu": {period: max}, "gpu": {...}}; a series with no data at all is None."""
    periods = window_periods(now, settings)
    start, end = periods[0], periods[-1] + timedelta(seconds=PERIOD_SECONDS)
    ids = [raw["InstanceId"] for raw in raws]
    queries = []
    for index, raw in enumerate(raws):
        tags = {t["Key"]: t["Value"] for t in raw.get("Tags", [])}
        queries += metric_queries(raw["InstanceId"], tags.get("aws:autoscaling:groupName"), index)
    series: dict[str, dict] = {i: {"cpu": None, "gpu": None} for i in ids}
    for batch in chunks(queries, METRIC_QUERIES_PER_CALL):
        for result in paginate(cloudwatch, "get_metric_data", "MetricDataResults", MetricDataQueries=batch,
                               StartTime=start, EndTime=end, ScanBy="TimestampAscending"):
            if not result.get("Timestamps"):
                continue
            kind, index = result["Id"][:3], int(result["Id"][3:])
            points = series[ids[index]][kind] or {}
            for timestamp, value in zip(result["Timestamps"], result["Values"]):
                points[timestamp] = max(value, points.get(timestamp, value))
            series[ids[index]][kind] = points
    return series


def to_instances(raws: Iterable[dict], registered: dict[str, ContainerInstance], series: dict[str, dict],
                 spot_types: dict[str, tuple[str, str]] | None = None) -> list[Instance]:
    spot_types = spot_types or {}
    out = []
    for raw in raws:
        tags = {t["Key"]: t["Value"] for t in raw.get("Tags", [])}
        instance_id = raw["InstanceId"]
        asg = tags.get("aws:autoscaling:groupName")
        # A fleet member missing from the cluster is unknown (busy); a standalone machine runs no ECS tasks.
        tasks = registered[instance_id].tasks if instance_id in registered else (None if asg else 0)
        out.append(Instance(
            instance_id=instance_id,
            launch_time=raw["LaunchTime"],
            lifecycle="spot" if raw.get("InstanceLifecycle") == "spot" else "on-demand",
            asg_name=asg,
            tags=tags,
            running_tasks=tasks,
            cpu=series[instance_id]["cpu"],
            gpu=series[instance_id]["gpu"],
            spot_request_id=spot_types.get(instance_id, (raw.get("SpotInstanceRequestId"), None))[0],
            spot_request_type=spot_types.get(instance_id, (None, None))[1],
        ))
    return out
