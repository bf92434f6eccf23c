"""What the reaper changes. Every action is idempotent: a second run, or a retry, does no harm.

Fleet instances: DRAINING in ECS (tasks get their stop signal; none run on an idle machine anyway),
then TerminateInstanceInAutoScalingGroup with ShouldDecrementDesiredCapacity, so the group does not
launch a replacement. Scale-in protection does not block this call: protection only stops the group's
own scale-in choices, not a termination requested for a named instance. Standalone instances are stopped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

from botocore.exceptions import ClientError

from lambdas.common import tags as tag_keys
from lambdas.common.aws import chunks
from lambdas.common.permissions import ISO_8601_TIME, PUBLISH_TO_ENCRYPTED_TOPICS, needs

DRAIN_BATCH = 10  # UpdateContainerInstancesState takes at most 10 container instances a call
TAG_BATCH = 1000
METRIC_NAMESPACE = "mlfleet"
INSTANCES = ("arn:{partition}:ec2:{region}:{account}:instance/*",)

PERMISSIONS = (
    needs("ec2:CreateTags", resources=INSTANCES, tag_scoped=True, tag_keys=(tag_keys.IDLE_SINCE,),
          tag_values=ISO_8601_TIME, why="mark this environment's idle instances (the idle-since tag only)"),
    needs("ec2:DeleteTags", resources=INSTANCES, tag_scoped=True, tag_keys=(tag_keys.IDLE_SINCE,),
          why="unmark them when they are busy again"),
    needs("ec2:StopInstances", resources=INSTANCES, tag_scoped=True, why="stop only this environment's instances"),
    needs("ecs:UpdateContainerInstancesState",
          resources=("arn:{partition}:ecs:{region}:{account}:container-instance/mlfleet-{environment}/*",),
          why="drain idle fleet instances"),
    needs("autoscaling:TerminateInstanceInAutoScalingGroup",
          resources=("arn:{partition}:autoscaling:{region}:{account}:autoScalingGroup:*:autoScalingGroupName/mlfleet-{environment}-*",),
          tag_scoped=True, why="terminate idle fleet instances and shrink their group"),
    needs("cloudwatch:PutMetricData", condition={"StringEquals": {"cloudwatch:namespace": METRIC_NAMESPACE}},
          why="publish idle-marked, reaped and lifecycle counts for the dashboard"),
    # The region's alert topic: the environment's own in its home region, mlfleet-<env>-alerts-<region>
    # elsewhere (components/region.py); never a prefix that other topics could share.
    needs("sns:Publish", resources=("arn:{partition}:sns:{region}:{account}:mlfleet-{environment}-alerts",
                                    "arn:{partition}:sns:{region}:{account}:mlfleet-{environment}-alerts-{region}"),
          why="one summary per run"),
    PUBLISH_TO_ENCRYPTED_TOPICS,
)


def mark(ec2, instance_ids: Sequence[str], now: datetime) -> None:
    for batch in chunks(instance_ids, TAG_BATCH):
        ec2.create_tags(Resources=batch, Tags=[{"Key": tag_keys.IDLE_SINCE, "Value": now.isoformat()}])


def unmark(ec2, instance_ids: Sequence[str]) -> None:
    for batch in chunks(instance_ids, TAG_BATCH):
        ec2.delete_tags(Resources=batch, Tags=[{"Key": tag_keys.IDLE_SINCE}])


def drain(ecs, cluster: str, container_arns: Sequence[str]) -> None:
    for batch in chunks(container_arns, DRAIN_BATCH):
        ecs.update_container_instances_state(cluster=cluster, containerInstances=batch, status="DRAINING")


def terminate_in_group(autoscaling, instance_id: str) -> bool:
    """True when terminated now; False when the group had already let it go (idempotent)."""
    try:
        autoscaling.terminate_instance_in_auto_scaling_group(InstanceId=instance_id, ShouldDecrementDesiredCapacity=True)
        return True
    except ClientError as error:
        message = error.response.get("Error", {}).get("Message", "")
        if error.response.get("Error", {}).get("Code") == "ValidationError" and "not" in message.lower():
            return False  # "Instance Id not found" / not in a group any more: already gone
        raise


def stop(ec2, instance_ids: Sequence[str]) -> None:
    for batch in chunks(instance_ids, TAG_BATCH):
        ec2.stop_instances(InstanceIds=batch)


def publish_counts(cloudwatch, environment: str, counts: Mapping[tuple[str, str], float], now: datetime) -> None:
    """counts: (metric name, ASG name[, lifecycle]) -> value. Metric names are the dashboard's interface."""
    data = []
    for key, value in sorted(counts.items()):
        metric, asg, *rest = key
        dimensions = [{"Name": "Environment", "Value": environment}, {"Name": "AutoScalingGroupName", "Value": asg}]
        if rest:
            dimensions.append({"Name": "Lifecycle", "Value": rest[0]})
        data.append({"MetricName": metric, "Dimensions": dimensions, "Timestamp": now, "Value": value, "Unit": "Count"})
    for batch in chunks(data, 1000):  # PutMetricData takes up to 1,000 metrics a call
        cloudwatch.put_metric_data(Namespace=METRIC_NAMESPACE, MetricData=batch)


def notify(sns, topic_arn: str, subject: str, message: str) -> None:
    sns.publish(TopicArn=topic_arn, Subject=subject[:100], Message=message)
