"""Billing alerts under mocks: the budget and its notifications, the us-east-1 alarms, topic policies."""

from __future__ import annotations

import functools
import json

import pytest

from components.billing import estimate, over_budget_warning, unreachable_fleets_warning
from components.config import ConfigError, parse_stack_config
from components.functions import policy_document
from lambdas.budget_guard.handler import PERMISSIONS as GUARD_PERMISSIONS
from pulumi_harness import render_config, stack_file_config

BUDGET = "aws:budgets/budget:Budget"
ALARM = "aws:cloudwatch/metricAlarm:MetricAlarm"


def config(budget: int | None, home: str = "us-east-1", **extra) -> dict:
    values = {
        "aws:region": home,
        "mlfleet:regions": json.dumps([home]),
        "mlfleet:fleets": json.dumps({"gpu1": {"maxInstances": 4, "instanceTypes": ["g6.xlarge", "g5.xlarge", "g4dn.xlarge"]}}),
        "mlfleet:alertEmails": json.dumps(["ml@example.com", "finance@example.com"]),
        "mlfleet:maxHourlyUsd": "20",
    }
    if budget is not None:
        values["mlfleet:monthlyBudgetUsd"] = str(budget)
    values.update({f"mlfleet:{k}": v if isinstance(v, str) else json.dumps(v) for k, v in extra.items()})
    return values


@functools.cache
def rendered(budget: int):
    """The dev stack of config(budget), rendered once per test process for the tests that only read it."""
    return render_config(config(budget), "dev")


@pytest.fixture(scope="module", params=[10_000, 3_000])
def billing(request):
    return request.param, rendered(request.param)


def test_budget_is_monthly_cost_filtered_to_the_environment(billing):
    amount, rendering = billing
    (budget,) = rendering.of_type(BUDGET)
    b = budget.inputs
    assert (b["budgetType"], b["timeUnit"], b["limitUnit"]) == ("COST", "MONTHLY", "USD")
    assert float(b["limitAmount"]) == amount
    assert b["costFilters"] == [{"name": "TagKeyValue", "values": ["user:mlfleet:environment$dev"]}]


def test_five_notifications_at_each_quarter_and_forecast_with_subscribers(billing):
    _, rendering = billing
    (budget,) = rendering.of_type(BUDGET)
    notes = budget.inputs["notifications"]
    assert len(notes) == 5
    actual = sorted((n for n in notes if n["notificationType"] == "ACTUAL"), key=lambda n: n["threshold"])
    assert [n["threshold"] for n in actual] == [25, 50, 75, 100]
    forecast = [n for n in notes if n["notificationType"] == "FORECASTED"]
    assert [n["threshold"] for n in forecast] == [100]
    for note in notes:
        assert note["thresholdType"] == "PERCENTAGE" and note["comparisonOperator"] == "GREATER_THAN"
        assert note["subscriberEmailAddresses"] == ["ml@example.com", "finance@example.com"]
        assert len(note["subscriberSnsTopicArns"]) == 1
    alert_topic = rendering.outputs["alertTopicArn"]
    assert all(n["subscriberSnsTopicArns"] == [alert_topic] for n in actual[:3] + forecast)
    # The 100% actual notification goes to the budget guard, which closes admission and tells the team.
    assert actual[3]["subscriberSnsTopicArns"][0].endswith("budget-exceeded")


def billing_alarms(rendering):
    return [a for a in rendering.of_type(ALARM) if a.inputs.get("namespace") == "AWS/Billing"]


def test_estimated_charges_alarms_in_us_east_1_at_each_quarter(billing):
    amount, rendering = billing
    alarms = sorted(billing_alarms(rendering), key=lambda a: a.inputs["threshold"])
    assert [a.inputs["threshold"] for a in alarms] == [amount * q / 4 for q in (1, 2, 3, 4)]
    for alarm in alarms:
        a = alarm.inputs
        assert (a["namespace"], a["metricName"], a["dimensions"]) == ("AWS/Billing", "EstimatedCharges", {"Currency": "USD"})
        assert a["comparisonOperator"] == "GreaterThanOrEqualToThreshold"
        assert a["treatMissingData"] == "notBreaching"
        assert alarm.provider.split("::")[-2] == "aws-us-east-1"
        assert len(a["alarmActions"]) == 1


def test_billing_alarms_stay_in_us_east_1_when_home_is_elsewhere():
    values = config(5_000, home="us-west-2")
    rendering = render_config(values, "dev")
    alarms = billing_alarms(rendering)
    assert alarms and all(a.provider.split("::")[-2] == "aws-us-east-1" for a in alarms)
    topics = {t.name: t for t in rendering.of_type("aws:sns/topic:Topic")}
    billing_topic = topics["dev-home-billing-alerts-topic"]
    assert billing_topic.inputs["name"] == "mlfleet-dev-alerts-us-east-1"
    assert billing_topic.provider.split("::")[-2] == "aws-us-east-1"
    assert all(a.inputs["alarmActions"] == ["arn:aws:sns:us-east-1:123456789012:mlfleet-dev-alerts-us-east-1"] for a in alarms)
    (budget,) = rendering.of_type(BUDGET)
    assert budget.provider.split("::")[-2] == "aws-us-west-2"


def test_every_topic_is_kms_encrypted_and_only_aws_services_of_this_account_publish():
    rendering = rendered(10_000)
    topics = rendering.of_type("aws:sns/topic:Topic")
    assert {t.inputs["name"] for t in topics} == {"mlfleet-dev-alerts", "mlfleet-dev-budget-exceeded",
                                                  "mlfleet-dev-job-notifications"}
    assert all(t.inputs["kmsMasterKeyId"] for t in topics)
    keys = rendering.of_type("aws:kms/key:Key")
    assert keys and all(k.inputs["enableKeyRotation"] for k in keys)
    on_behalf_of_this_account = {
        "budgets.amazonaws.com": {"StringEquals": {"aws:SourceAccount": "123456789012"},
                                  "ArnLike": {"aws:SourceArn": "arn:aws:budgets::123456789012:*"}},
        "cloudwatch.amazonaws.com": {"StringEquals": {"aws:SourceAccount": "123456789012"},
                                     "ArnLike": {"aws:SourceArn": "arn:aws:cloudwatch:*:123456789012:alarm:*"}},
    }
    for resource in [*keys, *rendering.of_type("aws:sns/topicPolicy:TopicPolicy")]:
        statements = {s["Sid"]: s for s in json.loads(resource.inputs["policy"])["Statement"]}
        services = {s["Principal"]["Service"]: s["Condition"] for s in statements.values()
                    if "Service" in s["Principal"]}
        # confused deputy: only for this account's alarms and budgets; no service at all publishes job
        # notifications (the job-events function does, with its role)
        assert services == ({} if "-notifications-" in resource.name else on_behalf_of_this_account)
    for policy in rendering.of_type("aws:sns/topicPolicy:TopicPolicy"):
        statements = {s["Sid"]: s for s in json.loads(policy.inputs["policy"])["Statement"]}
        assert statements["TlsOnly"]["Effect"] == "Deny"
    subscriptions = rendering.of_type("aws:sns/topicSubscription:TopicSubscription")
    emails = sorted(s.inputs["endpoint"] for s in subscriptions if s.inputs["protocol"] == "email")
    assert emails == ["finance@example.com", "ml@example.com"]
    (guard,) = [s for s in subscriptions if s.inputs["protocol"] == "lambda"]
    assert guard.inputs["topic"].endswith("budget-exceeded")


def test_admission_flag_starts_open_and_pulumi_never_resets_it():
    rendering = rendered(10_000)
    (parameter,) = [p for p in rendering.of_type("aws:ssm/parameter:Parameter")
                    if p.inputs["name"] == "/mlfleet/dev/admission"]
    assert json.loads(parameter.inputs["insecureValue"])["state"] == "open"
    assert rendering.outputs["admissionParameter"] == "/mlfleet/dev/admission"


def test_budget_guard_policy_is_least_privilege():
    document = json.loads(policy_document(GUARD_PERMISSIONS, account="123456789012", region="us-east-1",
                                          environment="dev", log_group_arn="arn:aws:logs:us-east-1:123456789012:log-group:/aws/lambda/g"))
    actions = {a: s for s in document["Statement"] for a in s["Action"]}
    assert actions["ssm:PutParameter"]["Resource"] == ["arn:aws:ssm:us-east-1:123456789012:parameter/mlfleet/dev/admission"]
    assert actions["sns:Publish"]["Resource"] == ["arn:aws:sns:us-east-1:123456789012:mlfleet-dev-alerts"]
    assert actions["kms:GenerateDataKey*"]["Condition"] == {"StringLike": {"kms:ViaService": "sns.*.amazonaws.com"},
                                                           "StringEquals": {"aws:ResourceTag/mlfleet:environment": "dev"}}
    assert all("*" not in a for a in actions if a.startswith("ssm:") or a.startswith("sns:"))


def test_derived_budget_is_the_worst_case_the_caps_allow():
    rendering = render_config(config(None), "dev")
    cost = rendering.outputs["cost"]
    # 4 instances of the priciest type (g5.xlarge in the catalog), under the $20/h scheduler cap.
    assert cost["fleetCapsHourlyUsd"]["onDemand"] == pytest.approx(4 * 1.006, abs=0.01)
    assert cost["worstCaseMonthlyUsd"] == pytest.approx(cost["worstCaseHourlyUsd"] * 730, abs=0.01)
    assert rendering.outputs["budget"]["monthlyUsd"] == cost["worstCaseMonthlyUsd"]
    (budget,) = rendering.of_type(BUDGET)
    assert float(budget.inputs["limitAmount"]) == pytest.approx(cost["worstCaseMonthlyUsd"], abs=0.01)


def test_preview_warns_when_caps_can_spend_more_than_the_budget():
    cfg = parse_stack_config(config(100), "dev")
    assert "more than the $100/month budget" in over_budget_warning(cfg, estimate(cfg))
    rendering = render_config(config(100), "dev")
    assert any("more than the $100/month budget" in w for w in rendering.warnings)
    roomy = parse_stack_config(config(100_000), "dev")
    assert over_budget_warning(roomy, estimate(roomy)) is None


def test_scheduler_dollar_cap_bounds_the_worst_case():
    cfg = parse_stack_config(stack_file_config("prod"), "prod")
    cost = estimate(cfg)
    assert cost.caps_on_demand_hourly > cfg.max_hourly_usd
    assert cost.worst_case_hourly == cfg.max_hourly_usd
    assert cost.caps_spot_hourly < cost.caps_on_demand_hourly


@pytest.mark.parametrize("value", ["true", "false"])
def test_the_removed_key_is_one_error_that_says_what_to_run_instead(value):
    with pytest.raises(ConfigError) as raised:
        parse_stack_config(config(10_000, activateCostAllocationTag=value), "dev")
    message = str(raised.value)
    assert "1 configuration error" in message
    assert "mlfleet:activateCostAllocationTag is no longer a stack key" in message and "make cost-tag" in message


def test_preview_warns_about_fleets_the_scheduler_s_cap_never_buys_for():
    """A cap below a fleet's cheapest instance leaves its jobs waiting forever without a word; the catalog's
    spot prices (lambdas/common/data/instance_catalog.json) say it before anything is deployed."""
    fleets = {"gpu1": {"maxInstances": 4, "instanceTypes": ["g6.xlarge", "g5.xlarge", "g4dn.xlarge"]},
              "big": {"maxInstances": 1, "instanceTypes": ["p5.48xlarge"]}}
    cfg = parse_stack_config(config(None, fleets=fleets), "dev")  # the cap is $20/h
    warning = unreachable_fleets_warning(estimate(cfg))
    assert warning.startswith("mlfleet:maxHourlyUsd $20/h is below the cheapest instance of big in us-east-1 (p5.48xlarge at $")
    assert "gpu1" not in warning
    assert any("below the cheapest instance of big" in w for w in render_config(config(None, fleets=fleets), "dev").warnings)
    assert unreachable_fleets_warning(estimate(parse_stack_config(config(None), "dev"))) is None


def test_the_figures_and_warnings_docs_billing_md_shows_are_what_the_program_computes():
    """docs/billing.md: dev's `pulumi stack output cost`, dev's over-budget warning, staging at $1/h."""
    from pathlib import Path

    document = (Path(__file__).resolve().parents[2] / "docs" / "billing.md").read_text()
    flat = " ".join(document.split())
    dev = parse_stack_config(stack_file_config("dev"), "dev")
    (shown,) = [block for block in document.split("```json\n")[1:] if "fleetCapsHourlyUsd" in block]
    assert json.loads(shown.split("```")[0]) == estimate(dev).outputs()
    assert f"warning: {over_budget_warning(dev, estimate(dev))}" in flat
    staging = parse_stack_config({**stack_file_config("staging"), "mlfleet:maxHourlyUsd": "1"}, "staging")
    assert f"warning: {unreachable_fleets_warning(estimate(staging))}" in flat


def test_a_notification_the_guard_could_not_act_on_reaches_the_team():
    """SNS invokes the guard asynchronously; when closing the flag keeps failing (the handler raises so that
    Lambda retries), Lambda retries twice and then discards the event unless an on-failure destination is
    set (https://docs.aws.amazon.com/lambda/latest/dg/invocation-async-retain-records.html). Without one,
    the only notification that closes admission vanished with nobody told: admission stayed open past the
    budget. The failed invocation record goes to the alert topic, which the guard's role may publish to."""
    rendering = rendered(10_000)
    (function,) = [f for f in rendering.of_type("aws:lambda/function:Function")
                   if f.inputs["name"].endswith("-budget_guard")]
    configs = [c for c in rendering.of_type("aws:lambda/functionEventInvokeConfig:FunctionEventInvokeConfig")
               if c.inputs["functionName"] == function.inputs["name"]]
    assert len(configs) == 1, configs
    destination = configs[0].inputs["destinationConfig"]["onFailure"]["destination"]
    assert destination == rendering.outputs["alertTopicArn"]
    document = json.loads(policy_document(GUARD_PERMISSIONS, account="123456789012", region="us-east-1",
                                          environment="dev", log_group_arn="arn:aws:logs:us-east-1:123456789012:log-group:/aws/lambda/g"))
    publish = [s for s in document["Statement"] if "sns:Publish" in s["Action"]]
    assert publish and publish[0]["Resource"] == [destination]


def test_the_removed_key_is_listed_with_the_stack_s_other_problems():
    """Every problem at once: the removed key's check ran first and stopped there, hiding the rest."""
    with pytest.raises(ConfigError) as raised:
        parse_stack_config(config(10_000, activateCostAllocationTag="true", idleWindowMinutes="5"), "dev")
    message = str(raised.value)
    assert "2 configuration error" in message and "mlfleet:activateCostAllocationTag is no longer a stack key" in message
    assert "mlfleet:idleWindowMinutes: Input should be greater than or equal to 30" in message
