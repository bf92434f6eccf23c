"""Optional Slack delivery of every alert topic through AWS Chatbot (Amazon Q Developer in chat).

The Slack workspace must be authorised once in the Chatbot console; its id and the channel id come
from the stack config. Chatbot is a global service served from us-east-2, so the channel
configuration sets `region` explicitly rather than following the home region's provider.

The provider's `sns_topic_arns` is a set (terraform-provider-aws,
internal/service/chatbot/slack_channel_configuration.go: `schema.SetAttribute`) and the bridge refuses a
set with a duplicate element ("Duplicate Set Element", pulumi/pulumi-terraform-bridge#924). Callers may
pass the same topic twice (the billing topic is the alert topic when home is us-east-1), and the ARNs are
Outputs, so they are made distinct once resolved, in the order given.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from components.resources import assume_role_policy, child, managed_policy

CHATBOT_REGION = "us-east-2"


def distinct(values: Iterable[str]) -> list[str]:
    """Each value once, in first-seen order."""
    return list(dict.fromkeys(values))


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
            force_detach_policies=True,
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
            sns_topic_arns=pulumi.Output.all(*args.topic_arns).apply(distinct),
            iam_role_arn=role.arn,
            # What people in the channel may do through the bot: read, never change.
            guardrail_policy_arns=[managed_policy("ReadOnlyAccess")],
            logging_level="ERROR",
            region=CHATBOT_REGION,
            tags=dict(args.tags),
            opts=child(self),
        )
        self.register_outputs({})
