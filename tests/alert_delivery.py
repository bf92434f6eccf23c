"""What an alert topic's subscribers receive, against moto: AWS Chatbot's HTTPS subscription (the Slack
channel), e-mail, and the rule the Subject of SNS Publish must keep.

AWS Chatbot subscribes to a topic over HTTPS and shows only messages in its own formats: an AWS
service's notification or a custom notification {"version": "1.0", "source": "custom", "content":
{"title": ..., "description": ...}} (https://docs.aws.amazon.com/chatbot/latest/adminguide/custom-notifs.html);
plain text published to the alert topic reaches e-mail but never the Slack channel.

Where moto differs from AWS:
- moto POSTs an https delivery with `requests.post` (here caught, not sent) and drops plain text no more
  than AWS does: the test must look at what Chatbot would have got.
- moto delivers nothing to an e-mail subscription; what e-mail gets is the published message's "email"
  key (MessageStructure "json"), read from moto's record of the topic (`published`).
- moto checks only that a Subject is at most 100 characters; AWS rejects the Publish (InvalidParameter)
  unless the Subject is "ASCII text that begins with a letter, number, or punctuation mark; must not
  include line breaks or control characters; and must be less than 100 characters long"
  (https://docs.aws.amazon.com/sns/latest/api/API_Publish.html, botocore's sns model). A test checks that
  rule itself (`subject_problems`).
"""

from __future__ import annotations

import json
import string

import boto3

CHATBOT_ENDPOINT = "https://global.sns-api.chatbot.amazonaws.com"


def subscribe_chatbot(topic_arn: str, monkeypatch) -> list[str]:
    """Subscribe Chatbot to the topic as components/alerts does; returns the list of messages it receives."""
    import moto.sns.models

    boto3.client("sns", region_name=topic_arn.split(":")[3]).subscribe(
        TopicArn=topic_arn, Protocol="https", Endpoint=CHATBOT_ENDPOINT)
    received: list[str] = []
    monkeypatch.setattr(moto.sns.models.requests, "post",
                        lambda url, json=None, **_: received.append(json["Message"]) if url == CHATBOT_ENDPOINT else None)
    return received


def chatbot_notification(text: str) -> dict:
    """`text` read as a custom notification, which Chatbot shows in Slack (it drops anything else)."""
    notification = json.loads(text)
    assert (notification["version"], notification["source"]) == ("1.0", "custom")
    assert notification["content"]["title"] and notification["content"]["description"]
    return notification


def published(topic_arn: str) -> list[tuple[str | None, dict[str, str]]]:
    """(Subject, the message per protocol) of each Publish to the topic, from moto's record of it."""
    from moto.sns.models import sns_backends

    _, _, _, region, account, _ = topic_arn.split(":")
    return [(subject, json.loads(message))
            for _, message, subject, _, _ in sns_backends[account][region].topics[topic_arn].sent_notifications]


def subject_problems(subject: str) -> list[str]:
    """How `subject` breaks the rule of SNS Publish's Subject (API_Publish), which moto does not check."""
    problems = []
    if not subject.isascii():
        problems.append("not ASCII")
    if any(c in "\r\n" or not c.isprintable() for c in subject):
        problems.append("a line break or control character")
    if not subject or subject[0] not in string.ascii_letters + string.digits + string.punctuation:
        problems.append("does not begin with a letter, number or punctuation mark")
    if len(subject) >= 100:
        problems.append("not less than 100 characters long")
    return problems
