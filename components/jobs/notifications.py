"""Where the end of a submission is announced: one topic for e-mail, one for the Slack channel.

- `mlfleet-<env>-job-notifications`: e-mail. Nothing subscribes here from Pulumi: each person subscribes
  their own address once (`mlfleet notify subscribe ADDRESS`, confirmed from that mailbox) with a filter
  policy on the message attribute `notify`, so a message reaches exactly the addresses its submission named
  (lambdas/jobs/cli/notify.py, lambdas/job_events/submissions.py).
- `mlfleet-<env>-job-notifications-slack`: only when the stack has a Slack channel; the environment's AWS
  Chatbot channel subscribes to it (components/alerts/slack.py), and only messages for Slack go there, so
  the channel does not repeat every e-mail.

Both are encrypted with their own customer-managed key like the alert topics (components/alerts/topic.py);
no AWS service publishes to them, only the job-events function (with its role's sns:Publish), so the
key and topic policies grant no service principal.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pulumi

from components.alerts import AlertTopic, AlertTopicArgs
from components.resources import child


def email_topic_name(environment: str) -> str:
    return f"mlfleet-{environment}-job-notifications"


def slack_topic_name(environment: str) -> str:
    return f"mlfleet-{environment}-job-notifications-slack"


@dataclass(frozen=True)
class JobNotificationsArgs:
    environment: str
    slack: bool  # the stack has a Slack channel (slackWorkspaceId, slackChannelId)
    tags: Mapping[str, str]


class JobNotifications(pulumi.ComponentResource):
    email_topic_arn: pulumi.Output[str]
    slack_topic_arn: pulumi.Output[str] | None

    def __init__(self, name: str, args: JobNotificationsArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("mlfleet:jobs:JobNotifications", name, None, opts)
        def topic(channel: str, topic_name: str) -> pulumi.Output[str]:
            return AlertTopic(f"{name}-{channel}", AlertTopicArgs(topic_name=topic_name, emails=(), tags=args.tags,
                                                                 publishing_services=()), opts=child(self)).topic_arn

        self.email_topic_arn = topic("email", email_topic_name(args.environment))
        self.slack_topic_arn = topic("slack", slack_topic_name(args.environment)) if args.slack else None
        self.register_outputs({"email_topic_arn": self.email_topic_arn})
