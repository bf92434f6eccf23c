"""A fleet's idle alarm: CPU and GPU both under their thresholds for the whole idle window.

Metric math over two fleet-wide series (the maximum over the fleet's instances, so one busy machine
keeps the fleet busy): EC2 `CPUUtilization` and the CloudWatch agent's `nvidia_smi_utilization_gpu`,
both by `AutoScalingGroupName` (the AMI's agent aggregates on that dimension; packer/files). Metric math
treats a value missing from one side of a comparison or logical operator as 0 (CloudWatch User Guide,
"Metric math syntax and functions", comparison and logical operators), so a period where only one series
has data yields 0 (`x AND 0` is false), and a period where neither has data yields no point, which
`treat_missing_data=notBreaching` never counts towards the alarm: a fleet's missing data never reads as idle.
The series are fleet-wide, though: a machine whose agent stopped publishing is simply absent from the GPU
maximum while its fleet-mates publish, so it cannot keep the alarm quiet; the reaper, per instance, treats
its missing data as busy (docs/reaper.md).

The alarm tells people (the region's encrypted alert topic) and wakes the reaper, which decides per
instance with the full contract; the alarm alone never terminates anything.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from components.resources import child
from lambdas.reaper.idle import PERIOD_SECONDS, window_period_count
GPU_NAMESPACE = "CWAgent"
GPU_METRIC = "nvidia_smi_utilization_gpu"


def idle_alarm_name(environment: str, fleet: str) -> str:
    return f"mlfleet-{environment}-{fleet}-idle"


def idle_expression(cpu_percent: int, gpu_percent: int) -> str:
    return f"IF(cpu < {cpu_percent} AND gpu < {gpu_percent}, 1, 0)"


@dataclass(frozen=True)
class FleetIdleAlarmArgs:
    environment: str
    fleet: str
    asg_name: pulumi.Input[str]
    window_minutes: int
    cpu_percent: int
    gpu_percent: int
    alert_topic_arn: pulumi.Input[str]
    reaper_arn: pulumi.Input[str]
    tags: Mapping[str, str]


class FleetIdleAlarm(pulumi.ComponentResource):
    alarm_arn: pulumi.Output[str]
    alarm_name: pulumi.Output[str]

    def __init__(self, name: str, args: FleetIdleAlarmArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("mlfleet:idle:FleetIdleAlarm", name, None, opts)
        # Every period of the window must be idle (M of N with M == N): the reaper's own count, rounded up
        # so the alarm never fires before the fleet has been idle for the whole window.
        periods = window_period_count(args.window_minutes)

        def fleet_metric(query_id: str, namespace: str, metric: str) -> dict:
            return {
                "id": query_id,
                "return_data": False,
                "metric": {
                    "namespace": namespace,
                    "metric_name": metric,
                    "dimensions": {"AutoScalingGroupName": args.asg_name},
                    "period": PERIOD_SECONDS,
                    "stat": "Maximum",
                },
            }

        alarm = aws.cloudwatch.MetricAlarm(
            f"{name}-alarm",
            name=idle_alarm_name(args.environment, args.fleet),
            alarm_description=(
                f"mlfleet {args.environment}: every instance of fleet {args.fleet} has had CPU < "
                f"{args.cpu_percent}% and GPU < {args.gpu_percent}% for {args.window_minutes} minutes. "
                "The reaper checks each instance (tasks, keep-alive, grace) before it acts."
            ),
            metric_queries=[
                fleet_metric("cpu", "AWS/EC2", "CPUUtilization"),
                fleet_metric("gpu", GPU_NAMESPACE, GPU_METRIC),
                {
                    "id": "idle",
                    "expression": idle_expression(args.cpu_percent, args.gpu_percent),
                    "label": "1 when CPU and GPU are both under their idle thresholds",
                    "return_data": True,
                },
            ],
            comparison_operator="GreaterThanOrEqualToThreshold",
            threshold=1,
            evaluation_periods=periods,
            datapoints_to_alarm=periods,
            treat_missing_data="notBreaching",
            alarm_actions=[args.alert_topic_arn, args.reaper_arn],
            tags=dict(args.tags),
            opts=child(self),
        )
        self.alarm_arn = alarm.arn
        self.alarm_name = alarm.name
        self.register_outputs({"alarm_arn": self.alarm_arn})
