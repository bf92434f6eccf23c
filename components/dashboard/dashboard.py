"""A CloudWatch dashboard per environment and fleet region: what the fleets do and what they cost.

Rows: GPU and CPU utilisation per fleet; instances by lifecycle (spot / on-demand) and the ASG's
desired vs in-service count; what the reaper marked idle and reaped; the job queue and its
dead-letter queue (home-region metrics, shown in every region's dashboard). The body is built from
plain names (every name is deterministic), so the preview shows exactly what the dashboard holds.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from components.idle.alarms import GPU_METRIC, GPU_NAMESPACE
from components.resources import child

# The reaper publishes these (lambdas/reaper): namespace and metric names are an interface.
MLFLEET_NAMESPACE = "mlfleet"
LIFECYCLES = ("spot", "on-demand")


def dashboard_name(environment: str, region: str) -> str:
    return f"mlfleet-{environment}-{region}"


def _graph(title: str, metrics: list, region: str, x: int, y: int, *, stat: str = "Average",
           y_max: int | None = None, width: int = 12) -> dict:
    properties: dict = {"title": title, "view": "timeSeries", "stacked": False, "region": region,
                        "metrics": metrics, "stat": stat, "period": 300}
    if y_max is not None:
        properties["yAxis"] = {"left": {"min": 0, "max": y_max}}
    return {"type": "metric", "x": x, "y": y, "width": width, "height": 6, "properties": properties}


def dashboard_body(*, environment: str, region: str, asg_names: Mapping[str, str], home_region: str,
                   queue_name: str, dead_letter_queue_name: str) -> str:
    fleets = sorted(asg_names.items())
    widgets = [
        _graph("GPU utilisation (%) per fleet, max over instances",
               [[GPU_NAMESPACE, GPU_METRIC, "AutoScalingGroupName", asg, {"label": fleet, "stat": "Maximum"}]
                for fleet, asg in fleets], region, 0, 0, y_max=100),
        _graph("CPU utilisation (%) per fleet, max over instances",
               [["AWS/EC2", "CPUUtilization", "AutoScalingGroupName", asg, {"label": fleet, "stat": "Maximum"}]
                for fleet, asg in fleets], region, 12, 0, y_max=100),
        _graph("Instances by lifecycle",
               [[MLFLEET_NAMESPACE, "FleetInstances", "Environment", environment, "AutoScalingGroupName", asg,
                 "Lifecycle", lifecycle, {"label": f"{fleet} {lifecycle}"}]
                for fleet, asg in fleets for lifecycle in LIFECYCLES], region, 0, 6, stat="Maximum"),
        _graph("Desired vs in service (ASG)",
               [m for fleet, asg in fleets for m in (
                   ["AWS/AutoScaling", "GroupDesiredCapacity", "AutoScalingGroupName", asg, {"label": f"{fleet} desired"}],
                   ["AWS/AutoScaling", "GroupInServiceInstances", "AutoScalingGroupName", asg, {"label": f"{fleet} in service"}],
               )], region, 12, 6, stat="Maximum"),
        _graph("Reaper: idle-marked and reaped instances",
               [m for fleet, asg in fleets for m in (
                   [MLFLEET_NAMESPACE, "IdleMarkedInstances", "Environment", environment, "AutoScalingGroupName", asg,
                    {"label": f"{fleet} idle-marked", "stat": "Maximum"}],
                   [MLFLEET_NAMESPACE, "ReapedInstances", "Environment", environment, "AutoScalingGroupName", asg,
                    {"label": f"{fleet} reaped", "stat": "Sum"}],
               )], region, 0, 12),
        _graph(f"Job queue depth ({home_region})",
               [["AWS/SQS", "ApproximateNumberOfMessagesVisible", "QueueName", queue_name, {"label": "waiting messages"}],
                ["AWS/SQS", "ApproximateNumberOfMessagesVisible", "QueueName", dead_letter_queue_name,
                 {"label": "dead-letter queue"}]], home_region, 12, 12, stat="Maximum"),
    ]
    return json.dumps({"widgets": widgets}, sort_keys=True)


@dataclass(frozen=True)
class FleetDashboardArgs:
    environment: str
    region: str
    home_region: str
    asg_names: Mapping[str, str]
    queue_name: str
    dead_letter_queue_name: str


class FleetDashboard(pulumi.ComponentResource):
    dashboard_name: pulumi.Output[str]

    def __init__(self, name: str, args: FleetDashboardArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("mlfleet:dashboard:FleetDashboard", name, None, opts)
        dashboard = aws.cloudwatch.Dashboard(
            f"{name}-dashboard",
            dashboard_name=dashboard_name(args.environment, args.region),
            dashboard_body=dashboard_body(
                environment=args.environment, region=args.region, asg_names=args.asg_names,
                home_region=args.home_region, queue_name=args.queue_name,
                dead_letter_queue_name=args.dead_letter_queue_name,
            ),
            opts=child(self),
        )
        self.dashboard_name = dashboard.dashboard_name
        self.register_outputs({"dashboard_name": self.dashboard_name})
