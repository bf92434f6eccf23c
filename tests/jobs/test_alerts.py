"""The scheduler's alerts reach Slack and e-mail, and every alert's Subject is one SNS Publish accepts
(lambdas/common/alerts.py).

The scheduler published plain text to the alert topic, which AWS Chatbot (the topic's Slack
subscription, over HTTPS) drops: the circuit breaker's "scaling stopped" reached e-mail only. Where moto
differs from AWS (tests/alert_delivery.py): moto records no failed scaling activities, so the breaker's
count of failed launches is given; it delivers nothing to e-mail, so the e-mail text is read from the
published message; and it does not check the Subject's rule (ASCII, no line breaks or control
characters, a letter, number or punctuation mark first, under 100 characters), so the tests check it.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest
from alert_delivery import chatbot_notification, published, subject_problems, subscribe_chatbot
from conftest import ENV, HOME, aws_client, build_fleet, fleets_json, scheduler_settings
from hypothesis import example, given
from hypothesis import strategies as st

from lambdas.common.alerts import SUBJECT_MAX, chatbot_notification as build, publish_alert, sns_subject
from lambdas.jobs.fleets import parse_fleets
from lambdas.scheduler import handler, state

NOW = datetime(2026, 11, 22, 12, tzinfo=timezone.utc)


@pytest.fixture
def alert_topic(home):
    """The alert topic with an SQS queue subscribed (any protocol but e-mail and https gets "default")."""
    topic = aws_client("sns", HOME).create_topic(Name=f"mlfleet-{ENV}-alerts")["TopicArn"]
    sqs = aws_client("sqs", HOME)
    inbox = sqs.create_queue(QueueName="alert-inbox")["QueueUrl"]
    aws_client("sns", HOME).subscribe(TopicArn=topic, Protocol="sqs", Endpoint=sqs.get_queue_attributes(
        QueueUrl=inbox, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"])
    return topic, inbox


def test_the_circuit_breakers_alert_reaches_slack_as_a_chatbot_notification_and_e_mail_as_text(
        home, alert_topic, monkeypatch):
    topic, inbox = alert_topic
    settings = scheduler_settings(home)
    assert settings.alert_topic_arn == topic
    build_fleet(size=2)
    slack = subscribe_chatbot(topic, monkeypatch)
    monkeypatch.setattr(state, "failed_launches", lambda *_: handler.BREAKER_FAILURES)  # moto records no failures
    (config,) = parse_fleets(fleets_json())
    view = state.FleetView(config=config, desired=2, current_instances=2, pending_instances=0, max_instances=4,
                           hourly_usd=0.0)

    assert handler.circuit_breaker(view, NOW, settings) is True

    (posted,) = slack
    notification = chatbot_notification(posted)
    assert notification["content"]["title"] == f"mlfleet {ENV}: scaling of gpu1 in {HOME} stopped"
    assert "stopped raising its desired capacity" in notification["content"]["description"]
    ((subject, message),) = published(topic)
    assert subject == notification["content"]["title"] and subject_problems(subject) == []
    assert message["email"] == message["default"] == notification["content"]["description"]
    (body,) = [json.loads(m["Body"]) for m in aws_client("sqs", HOME).receive_message(QueueUrl=inbox)["Messages"]]
    assert body["Message"] == message["default"] and body["Subject"] == subject


class Recorder:
    """An SNS client that keeps what it was asked to publish."""

    def __init__(self):
        self.calls: list[dict] = []

    def publish(self, **kwargs):
        self.calls.append(kwargs)
        return {"MessageId": "1"}


@given(st.text(), st.text())
@example("mlfleet dev: 3 × g5.xlarge ≥ budget — stopped", "text")
@example("\n", "")
@example("a\u2028b\x00c\x7fd\te", "")
@example("x" * 150, "")
def test_publish_alert_makes_a_subject_sns_accepts_of_any_text(subject, message):
    sns = Recorder()
    publish_alert(sns, "arn:aws:sns:us-east-1:123456789012:mlfleet-dev-alerts", subject, message)
    (call,) = sns.calls
    assert subject_problems(call["Subject"]) == []
    per_protocol = json.loads(call["Message"])
    assert call["MessageStructure"] == "json" and per_protocol["default"] == per_protocol["email"] == message
    assert json.loads(per_protocol["https"])["content"] == {"title": subject, "description": message}


@given(st.from_regex(r"[A-Za-z0-9!-/:-@\[-`{-~][ -~]{0,98}", fullmatch=True))
def test_a_subject_that_keeps_the_rule_is_published_as_it_is(subject):
    subject = " ".join(subject.split())
    assert sns_subject(subject) == subject


@pytest.mark.parametrize("text, subject", [
    ("mlfleet dev: 3 × g5 ≥ 2 — stopped", "mlfleet dev: 3 x g5 >= 2 - stopped"),
    ("a ≠ b, ≮ c", "a != b, <? c"),  # not "a = b": NFKD would leave the overlay that negates it
    ("Café naïve ½ ﬁle", "Cafe naive 1/2 file"),
    ("team “vision”\n\tlost", 'team "vision" lost'),
    ("  \u200b 中文", "??"),
    ("\n", "mlfleet alert"),
    ("x" * 150, "x" * (SUBJECT_MAX - 3) + "..."),
])
def test_a_subject_is_spelled_in_ascii(text, subject):
    assert sns_subject(text) == subject
    assert subject_problems(sns_subject(text)) == []


def test_a_custom_notification_carries_what_chatbot_reads():
    assert json.loads(build("t", "d")) == {"version": "1.0", "source": "custom",
                                           "content": {"title": "t", "description": "d"}, "metadata": {"summary": "t"}}
    full = json.loads(build("t", "d", notification_id="i", text_type="client-markdown", next_steps=["`a`"],
                            event_type="E", additional_context={"k": "v"}))
    assert full["id"] == "i" and full["content"]["textType"] == "client-markdown"
    assert full["content"]["nextSteps"] == ["`a`"]
    assert full["metadata"] == {"summary": "t", "eventType": "E", "additionalContext": {"k": "v"}}
