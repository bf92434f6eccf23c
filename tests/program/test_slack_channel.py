"""The Slack channel configuration names each alert topic once (issue 12: prod listed its alert topic twice).

The provider's `sns_topic_arns` is a set and refuses duplicates; the callers' topics are Outputs, so the
component de-duplicates their resolved values, keeping the given order.
"""

from __future__ import annotations

import pulumi
from pulumi_harness import COMPONENT_TAGS, render_in_region

from components.alerts import SlackChannel, SlackChannelArgs
from components.alerts.slack import distinct

ALERTS = "arn:aws:sns:us-east-1:123456789012:mlfleet-test-alerts"
WEST = "arn:aws:sns:us-west-2:123456789012:mlfleet-test-alerts-us-west-2"


def test_distinct_keeps_first_seen_order():
    assert distinct(["b", "a", "b", "c", "a"]) == ["b", "a", "c"]
    assert distinct([]) == []


def test_channel_takes_each_topic_once_when_topics_are_outputs():
    def build(opts):
        SlackChannel("slack", SlackChannelArgs(
            environment="test", workspace_id="T0123456789", channel_id="C0123456789",
            topic_arns=[pulumi.Output.from_input(ALERTS), pulumi.Output.from_input(WEST),
                        pulumi.Output.from_input(ALERTS)],
            tags=COMPONENT_TAGS), opts=opts)
        return {}

    (channel,) = render_in_region(build).of_type("aws:chatbot/slackChannelConfiguration:SlackChannelConfiguration")
    assert channel.inputs["snsTopicArns"] == [ALERTS, WEST]
