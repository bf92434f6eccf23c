"""A fleet's boot alarm: at least one machine came up degraded (ECS registered fewer GPUs than its type has, or
none) within the scheduler's YOUNG window. Named in the group's instance refresh (fleet.py): a refresh during
which it goes into ALARM fails, so an image whose machines boot but register no GPU replaces the first machines
of the fleet, not all of them; the alarm also tells the region's alert topic, since a refresh that stops says
nothing by itself (going back to the previous image is pinning it: docs/ami.md, the comment in fleet.py).

The metric is the scheduler's (lambdas/scheduler/boot_health.py), published in the fleet's region once a run
(every minute), 0 included; the namespace, metric name and dimensions are imported from there, so the alarm
cannot watch a series nobody publishes. Maximum over 5 minutes, one period: a run skipped or late (the placement
lease, a slow run) leaves no gap in the period, and missing data (the scheduler not running, the region unread)
is not breaching: it never fails a refresh by itself.

The name is deterministic (boot_alarm_name), so the group can name it with no lookup; the group still takes it
from the alarm's output, so the alarm exists before a refresh names it.
"""

from __future__ import annotations

from collections.abc import Mapping

import pulumi
import pulumi_aws as aws

from components.resources import child
from lambdas.scheduler.boot_health import METRIC, NAMESPACE, YOUNG, dimensions

PERIOD_SECONDS = 300
THRESHOLD = 1


def boot_alarm_name(environment: str, fleet: str) -> str:
    return f"mlfleet-{environment}-{fleet}-degraded-at-boot"


def boot_alarm(name: str, *, environment: str, region: str, fleet: str, asg_name: str, tags: Mapping[str, str],
               parent: pulumi.Resource, alert_topic_arn: pulumi.Input[str] | None = None) -> aws.cloudwatch.MetricAlarm:
    """The fleet's alarm, a child of `parent` (so in the fleet's region, through its provider)."""
    return aws.cloudwatch.MetricAlarm(
        name,
        name=boot_alarm_name(environment, fleet),
        alarm_description=(
            f"mlfleet {environment}: a machine of fleet {fleet} ({asg_name}) came up degraded, ECS registering "
            f"fewer GPUs than its type has, within {int(YOUNG.total_seconds() // 60)} minutes of its launch. "
            "An instance refresh of the group fails while this alarm is in ALARM: check the image "
            "(docs/ami.md, docs/runbook.md)."
        ),
        namespace=NAMESPACE,
        metric_name=METRIC,
        dimensions=dimensions(environment, region, fleet, asg_name),
        statistic="Maximum",
        period=PERIOD_SECONDS,
        evaluation_periods=1,
        datapoints_to_alarm=1,
        comparison_operator="GreaterThanOrEqualToThreshold",
        threshold=THRESHOLD,
        treat_missing_data="notBreaching",
        alarm_actions=[alert_topic_arn] if alert_topic_arn is not None else [],
        tags=dict(tags),
        opts=child(parent),
    )
