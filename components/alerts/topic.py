"""An encrypted SNS topic that AWS services may publish to, with the team's e-mail subscriptions.

The topic is encrypted with a customer-managed KMS key because the AWS-managed `alias/aws/sns` key
cannot grant Budgets, CloudWatch or EventBridge the right to encrypt messages. Its policy allows only
this account and those services (for this account) to publish, and refuses publishing without TLS.
CloudWatch alarms can only notify a topic in their own region, so every region with alarms gets one.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from components.resources import child, invoke

# Services that publish mlfleet's notifications: alarms, budgets, event rules (spot interruptions).
PUBLISHING_SERVICES = ("cloudwatch.amazonaws.com", "budgets.amazonaws.com", "events.amazonaws.com")


def key_policy(account: str) -> str:
    return json.dumps({
        "Version": "2012-10-17",
        "Statement": [
            {"Sid": "AccountAdministers", "Effect": "Allow", "Principal": {"AWS": f"arn:aws:iam::{account}:root"},
             "Action": "kms:*", "Resource": "*"},
            {"Sid": "ServicesEncryptMessages", "Effect": "Allow", "Principal": {"Service": list(PUBLISHING_SERVICES)},
             "Action": ["kms:Decrypt", "kms:GenerateDataKey*"], "Resource": "*"},
        ],
    }, sort_keys=True)


def topic_policy(topic_arn: str, account: str) -> str:
    return json.dumps({
        "Version": "2012-10-17",
        "Statement": [
            {"Sid": "AccountUsesTopic", "Effect": "Allow", "Principal": {"AWS": f"arn:aws:iam::{account}:root"},
             "Action": ["SNS:Publish", "SNS:Subscribe", "SNS:GetTopicAttributes", "SNS:ListSubscriptionsByTopic"],
             "Resource": topic_arn},
            {"Sid": "ServicesPublishForThisAccount", "Effect": "Allow", "Principal": {"Service": list(PUBLISHING_SERVICES)},
             "Action": "SNS:Publish", "Resource": topic_arn,
             "Condition": {"StringEquals": {"aws:SourceAccount": account}}},
            {"Sid": "TlsOnly", "Effect": "Deny", "Principal": "*", "Action": "SNS:Publish", "Resource": topic_arn,
             "Condition": {"Bool": {"aws:SecureTransport": "false"}}},
        ],
    }, sort_keys=True)


@dataclass(frozen=True)
class AlertTopicArgs:
    topic_name: str
    emails: Sequence[str]
    tags: Mapping[str, str]


class AlertTopic(pulumi.ComponentResource):
    topic_arn: pulumi.Output[str]
    key_arn: pulumi.Output[str]

    def __init__(self, name: str, args: AlertTopicArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("mlfleet:alerts:AlertTopic", name, None, opts)
        tags = dict(args.tags)
        account = aws.get_caller_identity_output(opts=invoke(self)).account_id

        key = aws.kms.Key(
            f"{name}-key",
            description=f"Encrypts SNS topic {args.topic_name}",
            enable_key_rotation=True,
            deletion_window_in_days=7,
            policy=account.apply(key_policy),
            tags=tags,
            opts=child(self),
        )
        topic = aws.sns.Topic(
            f"{name}-topic",
            name=args.topic_name,
            kms_master_key_id=key.arn,
            tags=tags,
            opts=child(self),
        )
        aws.sns.TopicPolicy(
            f"{name}-policy",
            arn=topic.arn,
            policy=pulumi.Output.all(topic.arn, account).apply(lambda v: topic_policy(v[0], v[1])),
            opts=child(self),
        )
        for email in args.emails:
            # Each address confirms once (AWS sends a link); until then SNS keeps the subscription pending.
            aws.sns.TopicSubscription(
                f"{name}-{email}", topic=topic.arn, protocol="email", endpoint=email, opts=child(self)
            )
        self.topic_arn = topic.arn
        self.key_arn = key.arn
        self.register_outputs({"topic_arn": self.topic_arn})
