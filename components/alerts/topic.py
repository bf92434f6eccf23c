"""An encrypted SNS topic that AWS services may publish to, with the team's e-mail subscriptions.

The topic is encrypted with a customer-managed KMS key because the AWS-managed `alias/aws/sns` key
cannot grant Budgets or CloudWatch the right to encrypt messages. Its policy allows only this account
and those services, each only on behalf of this account's alarms and budgets, to publish, and refuses
publishing without TLS. CloudWatch alarms can only notify a topic in their own region, so every region
with alarms gets one.

Confused deputy: a service principal is granted the key and the topic only with `aws:SourceAccount`
and `aws:SourceArn` conditions, so another account's alarm or budget cannot use AWS to publish here
(https://docs.aws.amazon.com/IAM/latest/UserGuide/confused-deputy.html; the key policy form for
services publishing to encrypted topics:
https://docs.aws.amazon.com/sns/latest/dg/sns-key-management.html#compatibility-with-aws-services).
EventBridge is not granted: no rule targets these topics (rules invoke the Lambdas).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from components.resources import child, invoke

# Services that publish mlfleet's notifications (idle and billing alarms, budgets), each with the ARN
# pattern of the resources it publishes for (aws:SourceArn), in the ARN formats of the IAM reference.
PUBLISHING_SERVICES: Mapping[str, str] = {
    "cloudwatch.amazonaws.com": "arn:aws:cloudwatch:*:{account}:alarm:*",
    "budgets.amazonaws.com": "arn:aws:budgets::{account}:*",
}


def _on_behalf_of_this_account(service: str, account: str) -> dict:
    return {"StringEquals": {"aws:SourceAccount": account},
            "ArnLike": {"aws:SourceArn": PUBLISHING_SERVICES[service].format(account=account)}}


def _sid(service: str) -> str:
    return service.split(".")[0].capitalize()


def key_policy(account: str, services: Sequence[str] = tuple(PUBLISHING_SERVICES)) -> str:
    return json.dumps({
        "Version": "2012-10-17",
        "Statement": [
            {"Sid": "AccountAdministers", "Effect": "Allow", "Principal": {"AWS": f"arn:aws:iam::{account}:root"},
             "Action": "kms:*", "Resource": "*"},
            *({"Sid": f"{_sid(service)}EncryptsMessagesForThisAccount", "Effect": "Allow",
               "Principal": {"Service": service}, "Action": ["kms:Decrypt", "kms:GenerateDataKey*"], "Resource": "*",
               "Condition": _on_behalf_of_this_account(service, account)} for service in services),
        ],
    }, sort_keys=True)


def topic_policy(topic_arn: str, account: str, services: Sequence[str] = tuple(PUBLISHING_SERVICES)) -> str:
    return json.dumps({
        "Version": "2012-10-17",
        "Statement": [
            {"Sid": "AccountUsesTopic", "Effect": "Allow", "Principal": {"AWS": f"arn:aws:iam::{account}:root"},
             "Action": ["SNS:Publish", "SNS:Subscribe", "SNS:GetTopicAttributes", "SNS:ListSubscriptionsByTopic"],
             "Resource": topic_arn},
            *({"Sid": f"{_sid(service)}PublishesForThisAccount", "Effect": "Allow", "Principal": {"Service": service},
               "Action": "SNS:Publish", "Resource": topic_arn,
               "Condition": _on_behalf_of_this_account(service, account)} for service in services),
            {"Sid": "TlsOnly", "Effect": "Deny", "Principal": "*", "Action": "SNS:Publish", "Resource": topic_arn,
             "Condition": {"Bool": {"aws:SecureTransport": "false"}}},
        ],
    }, sort_keys=True)


@dataclass(frozen=True)
class AlertTopicArgs:
    topic_name: str
    emails: Sequence[str]
    tags: Mapping[str, str]
    # The AWS services that publish to the topic (keys of PUBLISHING_SERVICES); none for a topic only
    # this account's functions publish to (the job notifications).
    publishing_services: Sequence[str] = tuple(PUBLISHING_SERVICES)


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
            policy=account.apply(lambda a: key_policy(a, args.publishing_services)),
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
            policy=pulumi.Output.all(topic.arn, account).apply(lambda v: topic_policy(v[0], v[1], args.publishing_services)),
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
