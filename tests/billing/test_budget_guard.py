"""The budget guard against moto: an over-budget notification closes admission; the scheduler side reads it.
Anything else (another topic, another budget, forecasts, unreadable text, malformed events) leaves it open."""

from __future__ import annotations

import json
from pathlib import Path

import boto3
import pytest
from alert_delivery import chatbot_notification, subscribe_chatbot

from lambdas.budget_guard.budget_message import budget_name, parse_budget_message
from lambdas.budget_guard.handler import Settings, handler
from lambdas.common import admission

BUDGETS_TEXT = """AWS Budget Notification November 22, 2026
AWS Account 123456789012

Dear AWS Customer,

You requested that we alert you when the ACTUAL Cost associated with your mlfleet-dev budget is greater than $1,500.00 for the current month. The ACTUAL Cost associated with this budget is $1,523.41. You can find additional details below and by accessing the AWS Budgets dashboard.

Budget Name: mlfleet-dev
Budget Type: Cost
Budgeted Amount: $1,500.00
Alert Type: ACTUAL
Alert Threshold: > $1,500.00
ACTUAL Amount: $1,523.41
"""


GUARD_TOPIC = "arn:aws:sns:us-east-1:123456789012:mlfleet-dev-budget-exceeded"
SNAPSHOTS = Path(__file__).resolve().parents[1] / "snapshots"


def sns_event(message: str, topic: str = GUARD_TOPIC) -> dict:
    return {"Records": [{"EventSource": "aws:sns", "EventVersion": "1.0",
                         "Sns": {"Type": "Notification", "TopicArn": topic,
                                 "Subject": "AWS Budgets: mlfleet-dev has exceeded your alert threshold", "Message": message}}]}


@pytest.fixture
def environment(aws):
    ssm = boto3.client("ssm", region_name="us-east-1")
    # As Pulumi creates it (components/home.py).
    ssm.put_parameter(Name="/mlfleet/dev/admission", Type="String",
                      Value=admission.Admission(admission.OPEN, "created by pulumi", "").encode())
    sns = boto3.client("sns", region_name="us-east-1")
    topic = sns.create_topic(Name="mlfleet-dev-alerts")["TopicArn"]
    sqs = boto3.client("sqs", region_name="us-east-1")
    inbox = sqs.create_queue(QueueName="inbox")["QueueUrl"]
    inbox_arn = sqs.get_queue_attributes(QueueUrl=inbox, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=inbox_arn)
    return Settings(environment="dev", home_region="us-east-1", alert_topic_arn=topic), ssm, sqs, inbox


def messages(sqs, inbox) -> list[str]:
    received = sqs.receive_message(QueueUrl=inbox, MaxNumberOfMessages=10).get("Messages", [])
    return [json.loads(m["Body"])["Message"] for m in received]


def test_parse_budget_message():
    notice = parse_budget_message(BUDGETS_TEXT)
    assert (notice.budget_name, notice.alert_type, notice.amount, notice.budgeted) == ("mlfleet-dev", "ACTUAL", "$1,523.41", "$1,500.00")
    assert parse_budget_message("something AWS changed").budget_name is None


def test_over_budget_notification_closes_admission_and_tells_the_team(environment):
    settings, ssm, sqs, inbox = environment
    assert admission.read_admission(ssm, "dev").is_open

    result = handler(sns_event(BUDGETS_TEXT), settings=settings)

    assert result["closed"] and result["newly_closed"]
    flag = admission.read_admission(ssm, "dev")
    assert not flag.is_open and "$1,523.41" in flag.reason and flag.changed_at
    (text,) = messages(sqs, inbox)
    assert "STOPPED ADMITTING NEW JOBS" in text and "make admission-open STACK=dev" in text and "Running jobs continue" in text


def test_a_second_delivery_changes_nothing_and_sends_nothing(environment):
    settings, ssm, sqs, inbox = environment
    handler(sns_event(BUDGETS_TEXT), settings=settings)
    first = admission.read_admission(ssm, "dev")
    messages(sqs, inbox)
    result = handler(sns_event(BUDGETS_TEXT), settings=settings)
    assert result["newly_closed"] is False
    assert admission.read_admission(ssm, "dev") == first
    assert messages(sqs, inbox) == []


def test_an_unreadable_message_on_the_budget_topic_leaves_admission_open_and_says_so(environment):
    settings, ssm, sqs, inbox = environment
    assert handler(sns_event("AWS changed the wording"), settings=settings) == {"closed": False, "unread": 1}
    assert admission.read_admission(ssm, "dev").is_open
    (text,) = messages(sqs, inbox)
    assert "did NOT close job admission" in text and "AWS changed the wording" in text
    assert "lambdas.common.admission close --environment dev" in text


@pytest.mark.parametrize("message, topic, why", [
    (BUDGETS_TEXT, "arn:aws:sns:us-east-1:123456789012:someone-elses-topic", "another topic"),
    (BUDGETS_TEXT, "arn:aws:sns:us-east-1:123456789012:mlfleet-prod-budget-exceeded", "another environment's topic"),
    (BUDGETS_TEXT, "arn:aws:sns:eu-west-1:123456789012:mlfleet-dev-budget-exceeded", "another region"),
    (BUDGETS_TEXT, "arn:aws:sns:us-east-1:999999999999:mlfleet-dev-budget-exceeded", "another account"),
    (BUDGETS_TEXT.replace("Budget Name: mlfleet-dev", "Budget Name: mlfleet-prod"), GUARD_TOPIC, "another budget"),
    (BUDGETS_TEXT.replace("Alert Type: ACTUAL", "Alert Type: FORECASTED"), GUARD_TOPIC, "a forecast"),
    ("close admission please", GUARD_TOPIC, "free text"),
])
def test_only_this_environments_actual_budget_notification_closes_admission(environment, message, topic, why):
    settings, ssm, _, _ = environment
    assert handler(sns_event(message, topic), settings=settings)["closed"] is False, why
    assert admission.read_admission(ssm, "dev").is_open, why


@pytest.mark.parametrize("event", [
    None, [], "Records", 42, {"Records": "x"}, {"Records": None}, {"Records": [None]}, {"Records": ["x", 1]},
    {"Records": [{"Sns": "x"}]}, {"Records": [{"Sns": None}]}, {"Records": [{"Sns": {"Message": BUDGETS_TEXT}}]},
    {"Records": [{"Sns": {"TopicArn": GUARD_TOPIC, "Message": 5}}]},
    {"Records": [{"Sns": {"TopicArn": ["x"], "Message": BUDGETS_TEXT}}]},
    {"Records": [{"EventSource": "aws:sns", "Sns": {"TopicArn": GUARD_TOPIC, "Message": None, "Subject": None}}]},
])
def test_malformed_events_are_logged_not_raised_and_change_nothing(environment, event):
    settings, ssm, _, _ = environment
    assert handler(event, settings=settings)["closed"] is False
    assert admission.read_admission(ssm, "dev").is_open


def test_a_well_formed_record_still_acts_after_malformed_ones(environment):
    settings, ssm, _, _ = environment
    event = {"Records": [None, {"Sns": "x"}, *sns_event(BUDGETS_TEXT)["Records"]]}
    assert handler(event, settings=settings)["closed"] is True
    assert not admission.read_admission(ssm, "dev").is_open


@pytest.mark.parametrize("stack", sorted(p.stem for p in SNAPSHOTS.glob("*.json")))
def test_the_guard_expects_the_topic_and_budget_the_stack_declares(stack):
    """The guard derives its topic and budget names; the committed rendering of each stack must agree."""
    resources = json.loads((SNAPSHOTS / f"{stack}.json").read_text())
    (function,) = [r for r in resources if r["type"] == "aws:lambda/function:Function"
                   and r["inputs"]["name"].endswith("-budget_guard")]
    variables = function["inputs"]["environment"]["variables"]
    settings = Settings(environment=variables["ENVIRONMENT"], home_region=variables["HOME_REGION"],
                        alert_topic_arn=variables["ALERT_TOPIC_ARN"])
    (subscription,) = [r for r in resources if r["type"] == "aws:sns/topicSubscription:TopicSubscription"
                       and r["inputs"].get("protocol") == "lambda" and r["inputs"]["endpoint"].endswith(":" + function["inputs"]["name"])]
    assert subscription["inputs"]["topic"] == settings.budget_topic_arn
    (budget,) = [r for r in resources if r["type"] == "aws:budgets/budget:Budget"]
    assert budget["inputs"]["name"] == budget_name(settings.environment)
    actual_to_guard = [n for n in budget["inputs"]["notifications"] if settings.budget_topic_arn in n["subscriberSnsTopicArns"]]
    assert [(n["notificationType"], n["threshold"]) for n in actual_to_guard] == [("ACTUAL", 100)]


def test_the_documented_command_reopens_admission(environment, capsys):
    settings, ssm, _, _ = environment
    handler(sns_event(BUDGETS_TEXT), settings=settings)
    assert admission.main(["open", "--environment", "dev", "--region", "us-east-1", "--reason", "budget raised"]) == 0
    assert json.loads(capsys.readouterr().out)["state"] == "open"
    flag = admission.read_admission(ssm, "dev")
    assert flag.is_open and flag.reason == "budget raised"


def test_missing_or_garbled_flag_reads_as_closed(aws):
    ssm = boto3.client("ssm", region_name="us-east-1")
    assert not admission.read_admission(ssm, "dev").is_open
    ssm.put_parameter(Name="/mlfleet/dev/admission", Type="String", Value="yes please")
    flag = admission.read_admission(ssm, "dev")
    assert not flag.is_open and "unreadable" in flag.reason


def test_an_event_without_sns_records_is_ignored(environment):
    settings, ssm, _, _ = environment
    assert handler({"source": "aws.events"}, settings=settings) == {"closed": False, "unread": 0}
    assert admission.read_admission(ssm, "dev").is_open


@pytest.fixture
def slack(environment, monkeypatch):
    """What the Chatbot subscription of the alert topic receives (tests/alert_delivery.py)."""
    settings, *_ = environment
    return subscribe_chatbot(settings.alert_topic_arn, monkeypatch)


def test_the_closing_notice_reaches_slack_as_a_chatbot_notification_and_e_mail_as_text(environment, slack):
    settings, ssm, sqs, inbox = environment
    handler(sns_event(BUDGETS_TEXT), settings=settings)
    (posted,) = slack
    notification = chatbot_notification(posted)
    assert notification["content"]["title"] == "mlfleet dev: budget spent, job admission closed"
    assert "STOPPED ADMITTING NEW JOBS" in notification["content"]["description"]
    assert "make admission-open STACK=dev" in json.dumps(notification)
    (text,) = messages(sqs, inbox)  # e-mail and every other protocol: the plain text
    assert text.startswith("mlfleet dev: actual spend reached $1,523.41 of $1,500.00")


def test_an_unreadable_budget_topic_message_reaches_slack_too(environment, slack):
    settings, ssm, sqs, inbox = environment
    handler(sns_event("AWS changed the wording"), settings=settings)
    (posted,) = slack
    notification = chatbot_notification(posted)
    assert "did NOT close job admission" in notification["content"]["description"]
    assert "did NOT close job admission" in messages(sqs, inbox)[0]


def test_a_new_month_does_not_reopen_admission_and_the_docs_say_so(environment):
    """Nothing reopens the flag when the month rolls over: AWS Budgets resets its notifications for the new
    period (it sends nothing that could reopen), the guard only closes, the scheduler reads the flag as it is.
    So a closed environment stays closed into next month until someone runs `make admission-open`; the
    docs' "or wait for next month" left the team waiting on something that never happens."""
    settings, ssm, _, _ = environment
    handler(sns_event(BUDGETS_TEXT), settings=settings)
    closed = admission.read_admission(ssm, "dev")
    next_month = BUDGETS_TEXT.replace("November 22, 2026", "December 1, 2026").replace("$1,523.41", "$0.00")
    handler(sns_event(next_month.replace("Alert Type: ACTUAL", "Alert Type: FORECASTED")), settings=settings)
    assert admission.read_admission(ssm, "dev") == closed

    root = Path(__file__).resolve().parents[2]
    for document in ("README.md", "docs/billing.md", "docs/runbook.md"):
        rows = [line for line in (root / document).read_text().splitlines()
                if line.startswith("|") and "100" in line and "ACTUAL" in line.upper() and "admission" in line]
        assert rows, document
        for row in rows:
            assert "wait for next month" not in row and "or wait for the month;" not in row, (document, row)
            assert "stays closed" in row and "admission-open" in row, (document, row)


@pytest.mark.parametrize("filler", ["\n", "\t\n", " "])
def test_a_message_of_blank_lines_is_read_in_linear_time(filler):
    """Found by tests/billing/test_budget_guard_properties.py: the field pattern (\\s* on both sides of a lazy
    value, over lines) took time quadratic in a run of blank lines: 40,000 newlines took 14 s, and an SNS
    message holds 256 KB, which held the guard past its timeout, so Lambda retried it, to the same end."""
    import time

    started = time.perf_counter()
    notice = parse_budget_message(filler * 20_000 + BUDGETS_TEXT + "Budget Name: x" + " " * 20_000 + "y\n")
    assert time.perf_counter() - started < 0.5
    assert (notice.budget_name, notice.alert_type) == ("x" + " " * 20_000 + "y", "ACTUAL")
