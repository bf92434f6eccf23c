"""Billing alerts at each quarter of the monthly budget, on two independent channels.

1. An AWS Budgets cost budget filtered to this environment's cost-allocation tag, notifying at each
   configured percent of actual spend and at a percent of forecast spend (e-mail and SNS).
   The tag counts only once it is activated for cost allocation, an account step the program cannot
   take (scripts/cost_allocation_tag.py, `make cost-tag`): until then the budget sees $0.
   The 100% notification goes to the budget guard's topic instead of the alert topic: the guard
   closes job admission and tells the alert topic so.
2. CloudWatch `AWS/Billing EstimatedCharges` alarms at the same thresholds. That metric exists only in
   us-east-1 and only for the whole account (not per environment), so the alarms are declared through
   a us-east-1 provider whatever the home region, and notify a topic in us-east-1.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from components.resources import child
from lambdas.common import tags as tag_keys

# Percent of actual spend whose notification closes job admission.
ADMISSION_STOP_PERCENT = 100
# Billing data arrives a few times a day; six hours is the metric's useful resolution.
BILLING_PERIOD_SECONDS = 21600


def budget_tag_filter(environment: str) -> str:
    """Budgets' TagKeyValue filter: 'user:<key>$<value>' for a user-defined cost allocation tag."""
    return f"user:{tag_keys.ENVIRONMENT}${environment}"


def quarter_thresholds(budget_usd: float, percents: Sequence[int]) -> list[float]:
    return [round(budget_usd * p / 100, 2) for p in percents]


@dataclass(frozen=True)
class BillingAlertsArgs:
    environment: str
    monthly_budget_usd: float
    percents: Sequence[int]
    forecast_percent: int | None
    emails: Sequence[str]
    alert_topic_arn: pulumi.Input[str]
    guard_topic_arn: pulumi.Input[str]
    # A topic in us-east-1 for the EstimatedCharges alarms, and the provider to declare them with.
    billing_topic_arn: pulumi.Input[str]
    billing_provider: pulumi.ProviderResource
    tags: Mapping[str, str]


class BillingAlerts(pulumi.ComponentResource):
    budget_name: pulumi.Output[str]

    def __init__(self, name: str, args: BillingAlertsArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("mlfleet:billing:BillingAlerts", name, None, opts)
        tags = dict(args.tags)
        emails = list(args.emails)

        notifications = []
        for percent in args.percents:
            notifications.append({
                "comparison_operator": "GREATER_THAN",
                "notification_type": "ACTUAL",
                "threshold": percent,
                "threshold_type": "PERCENTAGE",
                "subscriber_email_addresses": emails,
                "subscriber_sns_topic_arns": [
                    args.guard_topic_arn if percent == ADMISSION_STOP_PERCENT else args.alert_topic_arn
                ],
            })
        if args.forecast_percent:
            notifications.append({
                "comparison_operator": "GREATER_THAN",
                "notification_type": "FORECASTED",
                "threshold": args.forecast_percent,
                "threshold_type": "PERCENTAGE",
                "subscriber_email_addresses": emails,
                "subscriber_sns_topic_arns": [args.alert_topic_arn],
            })

        budget = aws.budgets.Budget(
            f"{name}-budget",
            name=f"mlfleet-{args.environment}",
            budget_type="COST",
            limit_amount=f"{args.monthly_budget_usd:.2f}",
            limit_unit="USD",
            time_unit="MONTHLY",
            cost_filters=[{"name": "TagKeyValue", "values": [budget_tag_filter(args.environment)]}],
            # What the team pays for: credits and refunds would hide a jump in usage.
            cost_types={"include_credit": False, "include_refund": False},
            notifications=notifications,
            tags=tags,
            opts=child(self),
        )

        for percent, threshold in zip(args.percents, quarter_thresholds(args.monthly_budget_usd, args.percents)):
            aws.cloudwatch.MetricAlarm(
                f"{name}-estimated-charges-{percent}pct",
                name=f"mlfleet-{args.environment}-estimated-charges-{percent}pct",
                alarm_description=(
                    f"Account-wide estimated charges this month reached {percent}% of mlfleet {args.environment}'s "
                    f"${args.monthly_budget_usd:,.0f} budget (${threshold:,.2f}). Runbook: docs/runbook.md#billing-alerts"
                ),
                namespace="AWS/Billing",
                metric_name="EstimatedCharges",
                dimensions={"Currency": "USD"},
                statistic="Maximum",
                period=BILLING_PERIOD_SECONDS,
                evaluation_periods=1,
                threshold=threshold,
                comparison_operator="GreaterThanOrEqualToThreshold",
                # No billing data is no news, not an alert.
                treat_missing_data="notBreaching",
                alarm_actions=[args.billing_topic_arn],
                tags=tags,
                opts=child(self, provider=args.billing_provider),
            )

        self.budget_name = budget.name
        self.register_outputs({"budget_name": self.budget_name})
