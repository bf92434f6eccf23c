"""The budget guard against any SNS event built from a Budgets notification by perturbing it at any depth (a
key dropped, a value replaced by any JSON, None, huge or unusual text, a value wrapped in a list, keys
added), in a batch with the environment's real over-budget notification anywhere among them.

The promise (lambdas/budget_guard/handler.py): malformed shapes are logged, never raised, and change
nothing; each record passed over gets an `ignore` line, and one whose shape is wrong names its key and
value; the real notification still closes admission (nothing lost).
tests/jobs/test_properties.py checks when admission closes; this file checks the lines and the batch.
HYPOTHESIS_PROFILE=ci runs few examples; EVENT_EXAMPLES=N runs N (tests/perturbation.py).
"""

from __future__ import annotations

import boto3
import pytest
from hypothesis import given
from hypothesis import strategies as st
from perturbation import Lines, any_json, budget, perturbed
from test_budget_guard import BUDGETS_TEXT, GUARD_TOPIC

from lambdas.budget_guard.handler import Settings, handler
from lambdas.common import admission

GOOD = {"EventSource": "aws:sns", "EventVersion": "1.0", "EventSubscriptionArn": f"{GUARD_TOPIC}:sub",
        "Sns": {"Type": "Notification", "MessageId": "m1", "TopicArn": GUARD_TOPIC,
                "Subject": "AWS Budgets: mlfleet-dev has exceeded your alert threshold", "Message": BUDGETS_TEXT,
                "Timestamp": "2026-11-22T12:00:00.000Z", "MessageAttributes": {}}}

VALUES = any_json(GUARD_TOPIC, BUDGETS_TEXT)


@pytest.fixture
def world(aws):
    sns = boto3.client("sns", "us-east-1")
    alerts = sns.create_topic(Name="mlfleet-dev-alerts")["TopicArn"]
    with Lines() as logged:
        yield Settings(environment="dev", home_region="us-east-1", alert_topic_arn=alerts), logged


def open_admission() -> None:
    admission.set_admission(boto3.client("ssm", "us-east-1"), "dev", admission.OPEN, "test")


def well_shaped(record) -> bool:
    sns = record.get("Sns") if isinstance(record, dict) else None
    return isinstance(sns, dict) and isinstance(sns.get("TopicArn"), str) and isinstance(sns.get("Message"), str)


@budget(ci=6)
@given(bad=st.lists(perturbed(GOOD, VALUES), min_size=1, max_size=3), position=st.integers(0, 3))
def test_a_batch_of_broken_records_is_logged_key_by_key_and_its_budget_notice_still_closes_admission(world, bad,
                                                                                                     position):
    settings_, lines = world
    open_admission()
    del lines[:]
    records = [*bad]
    records.insert(min(position, len(records)), GOOD)
    result = handler({"Records": records}, settings=settings_)
    assert result["closed"] is True
    assert not admission.read_admission(boto3.client("ssm", "us-east-1"), "dev").is_open
    shapeless = [n for n, r in enumerate(records) if not well_shaped(r)]
    named = [line for line in lines if line["decision"] == "ignore" and "record" in line]
    assert [line["record"] for line in named] == shapeless
    for line in named:
        assert line["error"].startswith(f"Records[{line['record']}]") and "=" in line["error"], line
