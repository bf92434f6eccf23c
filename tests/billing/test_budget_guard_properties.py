"""The budget guard against any SNS event built from a Budgets notification by perturbing it at any depth (a
key dropped, a value replaced by any JSON, None, huge or unusual text, a value wrapped in a list, keys
added), in a batch with the environment's real over-budget notification anywhere among them.

The promise (lambdas/budget_guard/handler.py): malformed shapes are logged, never raised, and change
nothing; each record passed over gets an `ignore` line, and one whose shape is wrong names its key and
value; the real notification still closes admission (nothing lost).
tests/jobs/test_properties.py checks when admission closes; this file checks the lines and the batch.
HYPOTHESIS_PROFILE=ci runs few examples; EVENT_EXAMPLES=N runs N (the local search).
"""

from __future__ import annotations

import copy
import json
import logging
import os

import boto3
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_budget_guard import BUDGETS_TEXT, GUARD_TOPIC

from lambdas.budget_guard.handler import Settings, handler
from lambdas.common import admission

EXAMPLES = int(os.environ.get("EVENT_EXAMPLES", "0"))
GOOD = {"EventSource": "aws:sns", "EventVersion": "1.0", "EventSubscriptionArn": f"{GUARD_TOPIC}:sub",
        "Sns": {"Type": "Notification", "MessageId": "m1", "TopicArn": GUARD_TOPIC,
                "Subject": "AWS Budgets: mlfleet-dev has exceeded your alert threshold", "Message": BUDGETS_TEXT,
                "Timestamp": "2026-11-22T12:00:00.000Z", "MessageAttributes": {}}}

leaves = st.one_of(st.none(), st.booleans(), st.integers(), st.integers(-2**70, 2**70), st.floats(allow_nan=False),
                   st.text(max_size=20), st.just(""), st.just(GUARD_TOPIC), st.just(BUDGETS_TEXT),
                   st.text(alphabet=" \t\n\u00e9\U0001f600:", max_size=3).map(lambda s: s * 80_000))
any_json = st.recursive(leaves, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                                              max_size=3), max_leaves=6)


def paths(document, prefix=()) -> list[tuple]:
    found = [prefix] if prefix else []
    if isinstance(document, dict):
        for key, value in document.items():
            found += paths(value, (*prefix, key))
    elif isinstance(document, list):
        for n, value in enumerate(document):
            found += paths(value, (*prefix, n))
    return found


@st.composite
def perturbed(draw, valid):
    document = copy.deepcopy(valid)
    for _ in range(draw(st.integers(1, 3))):
        where = paths(document)
        if not where:
            return draw(any_json)
        path = draw(st.sampled_from(where))
        parent = document
        for key in path[:-1]:
            parent = parent[key]
        change = draw(st.sampled_from(["drop", "replace", "wrap", "add"]))
        if change == "drop":
            del parent[path[-1]]
        elif change == "replace":
            parent[path[-1]] = draw(any_json)
        elif change == "wrap":
            parent[path[-1]] = [parent[path[-1]]]
        elif isinstance(parent, dict):
            parent[draw(st.text(max_size=12))] = draw(any_json)
        else:
            parent.append(draw(any_json))
    return document


class Lines(logging.Handler):
    def __init__(self):
        super().__init__()
        self.lines: list[dict] = []

    def emit(self, record):
        self.lines.append(json.loads(record.getMessage()))


@pytest.fixture
def world(aws):
    sns = boto3.client("sns", "us-east-1")
    alerts = sns.create_topic(Name="mlfleet-dev-alerts")["TopicArn"]
    lines = Lines()
    logging.getLogger("mlfleet").addHandler(lines)
    yield Settings(environment="dev", home_region="us-east-1", alert_topic_arn=alerts), lines.lines
    logging.getLogger("mlfleet").removeHandler(lines)


def open_admission() -> None:
    admission.set_admission(boto3.client("ssm", "us-east-1"), "dev", admission.OPEN, "test")


def well_shaped(record) -> bool:
    sns = record.get("Sns") if isinstance(record, dict) else None
    return isinstance(sns, dict) and isinstance(sns.get("TopicArn"), str) and isinstance(sns.get("Message"), str)


@settings(max_examples=EXAMPLES or 8, deadline=None, **({"database": None} if EXAMPLES else {}),
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large])
@given(bad=st.lists(perturbed(GOOD), min_size=1, max_size=3), position=st.integers(0, 3))
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
