"""Optional Slack delivery of every alert topic through AWS Chatbot (Amazon Q Developer in chat).

The Slack workspace must be authorised once in the Chatbot console; its id and the channel id come
from the stack config. Chatbot is a global service served from us-east-2, so the channel
configuration sets `region` explicitly rather than following the home region's provider.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from components.resources import assume_role_policy, child, managed_policy

CHATBOT_REGION = "us-east-2"


@dataclass(frozen=True)
class SlackChannelArgs:
    environment: str
    workspace_id: str
    channel_id: str
    topic_arns: Sequence[pulumi.Input[str]]
    tags: Mapping[str, str]


class SlackChannel(pulumi.ComponentResource):
    def __init__(self, name: str, args: SlackChannelArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("mlfleet:alerts:SlackChannel", name, None, opts)
        role = aws.iam.Role(
            f"{name}-role",
            assume_role_policy=assume_role_policy("chatbot.amazonaws.com"),
            description="AWS Chatbot renders mlfleet alerts (read-only CloudWatch for charts)",
            tags=dict(args.tags),
            opts=child(self),
        )
        aws.iam.RolePolicyAttachment(
            f"{name}-read-metrics", role=role.name, policy_arn=managed_policy("CloudWatchReadOnlyAccess"), opts=child(self)
        )
        aws.chatbot.SlackChannelConfiguration(
            f"{name}-channel",
            configuration_name=f"mlfleet-{args.environment}",
            slack_team_id=args.workspace_id,
            slack_channel_id=args.channel_id,
            sns_topic_arns=list(args.topic_arns),
            iam_role_arn=role.arn,
            # What people in the channel may do through the bot: read, never change.
            guardrail_policy_arns=[managed_policy("ReadOnlyAccess")],
            logging_level="ERROR",
            region=CHATBOT_REGION,
            tags=dict(args.tags),
            opts=child(self),
        )
        self.register_outputs({})
