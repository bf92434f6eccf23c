"""A fleet region's reaper: the function (lambdas/reaper), its schedule, and the idle alarms that wake it.

The schedule (every `reaperScheduleMinutes`) is what makes the reaper reliable: alarms fire once on a
state change, the schedule keeps checking. The alarm only shortens the wait after a fleet goes quiet.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from components.functions import PythonFunction, PythonFunctionArgs
from components.idle.alarms import FleetIdleAlarm, FleetIdleAlarmArgs
from components.resources import child, invoke


@dataclass(frozen=True)
class ReaperArgs:
    region: str
    environment: str
    cluster_name: pulumi.Input[str]
    # fleet name -> ASG name, the fleets of this region
    fleets: Mapping[str, pulumi.Input[str]]
    alert_topic_arn: pulumi.Input[str]
    window_minutes: int
    cpu_percent: int
    gpu_percent: int
    grace_minutes: int
    schedule_minutes: int
    dry_run: bool
    max_actions_per_run: int
    log_retention_days: int
    tags: Mapping[str, str]
    # The job ledger holds the placement lease the removals take (docs/removal.md); it is in the home region.
    home_region: str
    jobs_table: str
    disruption_budget_percent: int


class Reaper(pulumi.ComponentResource):
    function_name: pulumi.Output[str]
    alarm_names: dict[str, pulumi.Output[str]]

    def __init__(self, name: str, args: ReaperArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("mlfleet:idle:Reaper", name, None, opts)
        tags = dict(args.tags)
        function = PythonFunction(
            f"{name}-function",
            PythonFunctionArgs(
                function="reaper",
                description="Marks idle GPU instances, then removes them through the removal protocol (or stops them)",
                region=args.region,
                environment=args.environment,
                log_retention_days=args.log_retention_days,
                tags=tags,
                variables={
                    "CLUSTER_NAME": args.cluster_name,
                    "FLEET_ASG_NAMES": pulumi.Output.all(*args.fleets.values()).apply(",".join),
                    "IDLE_WINDOW_MINUTES": str(args.window_minutes),
                    "IDLE_CPU_PERCENT": str(args.cpu_percent),
                    "IDLE_GPU_PERCENT": str(args.gpu_percent),
                    "IDLE_GRACE_MINUTES": str(args.grace_minutes),
                    "DRY_RUN": str(args.dry_run).lower(),
                    "MAX_ACTIONS_PER_RUN": str(args.max_actions_per_run),
                    "ALERT_TOPIC_ARN": args.alert_topic_arn,
                    "HOME_REGION": args.home_region,
                    "JOBS_TABLE": args.jobs_table,
                    "DISRUPTION_BUDGET_PERCENT": str(args.disruption_budget_percent),
                },
                # A 5,000-instance region fits one run (benchmarks/reaper.py). No reserved concurrency:
                # its actions are idempotent, and reservations eat into a small account's quota.
                timeout_seconds=600,
                memory_mib=1024,
            ),
            opts=child(self),
        )

        schedule = aws.cloudwatch.EventRule(
            f"{name}-schedule",
            description=f"mlfleet {args.environment}: run the reaper every {args.schedule_minutes} minutes",
            schedule_expression=f"rate({args.schedule_minutes} minutes)",
            tags=tags,
            opts=child(self),
        )
        from_schedule = aws.lambda_.Permission(
            f"{name}-from-schedule",
            action="lambda:InvokeFunction",
            function=function.function_name,
            principal="events.amazonaws.com",
            source_arn=schedule.arn,
            opts=child(self),
        )
        aws.cloudwatch.EventTarget(
            f"{name}-schedule-target",
            rule=schedule.name,
            arn=function.arn,
            opts=child(self, depends_on=[from_schedule]),
        )

        caller = aws.get_caller_identity_output(opts=invoke(self))
        self.alarm_names = {}
        for fleet, asg_name in args.fleets.items():
            alarm = FleetIdleAlarm(
                f"{name}-{fleet}-idle",
                FleetIdleAlarmArgs(
                    environment=args.environment,
                    fleet=fleet,
                    asg_name=asg_name,
                    window_minutes=args.window_minutes,
                    cpu_percent=args.cpu_percent,
                    gpu_percent=args.gpu_percent,
                    alert_topic_arn=args.alert_topic_arn,
                    reaper_arn=function.arn,
                    tags=tags,
                ),
                opts=child(self),
            )
            aws.lambda_.Permission(
                f"{name}-{fleet}-from-alarm",
                action="lambda:InvokeFunction",
                function=function.function_name,
                principal="lambda.alarms.cloudwatch.amazonaws.com",
                source_account=caller.account_id,
                source_arn=alarm.alarm_arn,
                opts=child(self),
            )
            self.alarm_names[fleet] = alarm.alarm_name

        self.function_name = function.function_name
        self.register_outputs({"function_name": self.function_name})
