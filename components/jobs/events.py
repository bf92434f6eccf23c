"""The events that keep the job ledger true, from every fleet region to the home region.

Spot interruption warnings, rebalance recommendations and ECS task state changes happen in the region
of the machine. In the home region a rule sends them to the job-events function; in every other fleet
region a rule forwards them to the home region's default event bus (a cross-region event-bus target),
where the same home rule picks them up.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from components.resources import assume_role_policy, child

EC2_DETAIL_TYPES = ("EC2 Spot Instance Interruption Warning", "EC2 Instance Rebalance Recommendation")
ECS_DETAIL_TYPE = "ECS Task State Change"
JOB_EVENT_PATTERNS = ("ec2", "ecs")


def job_event_pattern(kind: str, cluster_arns: Sequence[str] = ()) -> str:
    """The rule pattern for `kind`: EC2 interruption signals, or task changes of mlfleet's clusters."""
    if kind == "ec2":
        return json.dumps({"source": ["aws.ec2"], "detail-type": list(EC2_DETAIL_TYPES)}, sort_keys=True)
    if kind == "ecs":
        return json.dumps({"source": ["aws.ecs"], "detail-type": [ECS_DETAIL_TYPE],
                           "detail": {"clusterArn": sorted(cluster_arns)}}, sort_keys=True)
    raise ValueError(f"unknown job event pattern {kind!r}; expected one of {JOB_EVENT_PATTERNS}")


def home_bus_arn(home_region: str, account_id: str) -> str:
    return f"arn:aws:events:{home_region}:{account_id}:event-bus/default"


@dataclass(frozen=True)
class EventForwarderArgs:
    environment: str
    region: str
    home_region: str
    account_id: pulumi.Input[str]
    cluster_arn: pulumi.Input[str]
    tags: Mapping[str, str]


class EventForwarder(pulumi.ComponentResource):
    """In a fleet region other than home: forward the job events to the home region's default bus."""

    def __init__(self, name: str, args: EventForwarderArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("mlfleet:jobs:EventForwarder", name, None, opts)
        tags = dict(args.tags)
        target_bus = pulumi.Output.from_input(args.account_id).apply(lambda account: home_bus_arn(args.home_region, account))
        role = aws.iam.Role(
            f"{name}-role",
            assume_role_policy=assume_role_policy("events.amazonaws.com"),
            description=f"Forwards mlfleet {args.environment} job events from {args.region} to {args.home_region}",
            force_detach_policies=True,
            tags=tags,
            opts=child(self),
        )
        aws.iam.RolePolicy(
            f"{name}-put-events",
            role=role.id,
            policy=target_bus.apply(lambda arn: json.dumps({
                "Version": "2012-10-17",
                "Statement": [{"Effect": "Allow", "Action": "events:PutEvents", "Resource": arn}],
            })),
            opts=child(self),
        )
        patterns = {
            "ec2": pulumi.Output.from_input(job_event_pattern("ec2")),
            "ecs": pulumi.Output.from_input(args.cluster_arn).apply(lambda arn: job_event_pattern("ecs", [arn])),
        }
        for kind, pattern in patterns.items():
            rule = aws.cloudwatch.EventRule(
                f"{name}-{kind}",
                description=f"mlfleet {args.environment}: forward {kind} job events to {args.home_region}",
                event_pattern=pattern,
                tags=tags,
                opts=child(self),
            )
            aws.cloudwatch.EventTarget(
                f"{name}-{kind}-to-home",
                rule=rule.name,
                arn=target_bus,
                role_arn=role.arn,
                opts=child(self),
            )
        self.register_outputs({})
