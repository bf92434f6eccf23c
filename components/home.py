"""What an environment declares once, in its home region: alerts, the budget and its guard.

- the alert topic `mlfleet-<env>-alerts` (encrypted, the team's e-mail subscriptions);
- the budget guard: its own topic (the Budgets 100%-of-actual notification), a function that
  closes job admission and tells the alert topic, and the admission flag it writes;
- billing alerts (components/billing) with a topic in us-east-1 for the EstimatedCharges alarms.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from components.alerts import AlertTopic, AlertTopicArgs
from components.billing import BillingAlerts, BillingAlertsArgs, CostEstimate, monthly_budget
from components.config import StackConfig
from components.config.regions import BILLING_METRICS_REGION
from components.functions import PythonFunction, PythonFunctionArgs
from components.resources import child
from lambdas.common import admission


def alert_topic_name(environment: str, region: str | None = None) -> str:
    return f"mlfleet-{environment}-alerts" + (f"-{region}" if region else "")


@dataclass(frozen=True)
class HomeRegionArgs:
    config: StackConfig
    cost: CostEstimate
    # The us-east-1 provider for billing metrics (the home provider itself when home is us-east-1).
    billing_provider: pulumi.ProviderResource


class HomeRegion(pulumi.ComponentResource):
    alert_topic_arn: pulumi.Output[str]
    billing_topic_arn: pulumi.Output[str]
    admission_parameter: pulumi.Output[str]

    def __init__(self, name: str, args: HomeRegionArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("mlfleet:home:HomeRegion", name, None, opts)
        cfg = args.config
        tags = cfg.base_tags()

        alerts = AlertTopic(
            f"{name}-alerts",
            AlertTopicArgs(topic_name=alert_topic_name(cfg.environment), emails=cfg.alert_emails, tags=tags),
            opts=child(self),
        )
        if cfg.home_region == BILLING_METRICS_REGION:
            billing_topic_arn = alerts.topic_arn
        else:
            billing_topic_arn = AlertTopic(
                f"{name}-billing-alerts",
                AlertTopicArgs(topic_name=alert_topic_name(cfg.environment, BILLING_METRICS_REGION),
                               emails=cfg.alert_emails, tags=tags),
                opts=child(self, providers=[args.billing_provider]),
            ).topic_arn

        # The admission flag: created open; afterwards only the guard and people change it.
        parameter = aws.ssm.Parameter(
            f"{name}-admission",
            name=admission.parameter_name(cfg.environment),
            type="String",
            description="May the scheduler admit new jobs? Closed by the budget guard; reopen with make admission-open",
            insecure_value=admission.Admission(admission.OPEN, "created by pulumi", "").encode(),
            tags=tags,
            opts=child(self, ignore_changes=["insecure_value"]),
        )

        guard_topic = AlertTopic(
            f"{name}-budget-exceeded",
            AlertTopicArgs(topic_name=f"mlfleet-{cfg.environment}-budget-exceeded", emails=(), tags=tags),
            opts=child(self),
        )
        guard = PythonFunction(
            f"{name}-budget-guard",
            PythonFunctionArgs(
                function="budget_guard",
                description="Closes job admission when actual spend crosses the monthly budget",
                region=cfg.home_region,
                environment=cfg.environment,
                log_retention_days=cfg.log_retention_days,
                tags=tags,
                variables={"HOME_REGION": cfg.home_region, "ALERT_TOPIC_ARN": alerts.topic_arn},
                timeout_seconds=60,
                memory_mib=256,
            ),
            opts=child(self, depends_on=[parameter]),
        )
        # SNS invokes the guard asynchronously: when closing the flag keeps failing, Lambda retries twice and
        # then discards the notification unless an on-failure destination is set
        # (https://docs.aws.amazon.com/lambda/latest/dg/invocation-async-retain-records.html). The failed
        # invocation goes to the alert topic, so the team learns admission did NOT close; Lambda publishes it
        # with the function's role, which may publish there (lambdas/budget_guard/handler.py PERMISSIONS).
        aws.lambda_.FunctionEventInvokeConfig(
            f"{name}-budget-guard-on-failure",
            function_name=guard.function_name,
            destination_config={"on_failure": {"destination": alerts.topic_arn}},
            opts=child(self),
        )
        invoke_permission = aws.lambda_.Permission(
            f"{name}-budget-guard-from-sns",
            action="lambda:InvokeFunction",
            function=guard.function_name,
            principal="sns.amazonaws.com",
            source_arn=guard_topic.topic_arn,
            opts=child(self),
        )
        aws.sns.TopicSubscription(
            f"{name}-budget-guard-subscription",
            topic=guard_topic.topic_arn,
            protocol="lambda",
            endpoint=guard.arn,
            opts=child(self, depends_on=[invoke_permission]),
        )

        self.billing = BillingAlerts(
            f"{name}-billing",
            BillingAlertsArgs(
                environment=cfg.environment,
                monthly_budget_usd=monthly_budget(cfg, args.cost),
                percents=cfg.budget_alert_percents,
                forecast_percent=cfg.budget_forecast_percent,
                emails=cfg.alert_emails,
                alert_topic_arn=alerts.topic_arn,
                guard_topic_arn=guard_topic.topic_arn,
                billing_topic_arn=billing_topic_arn,
                billing_provider=args.billing_provider,
                tags=tags,
            ),
            opts=child(self),
        )

        self.alert_topic_arn = alerts.topic_arn
        self.billing_topic_arn = pulumi.Output.from_input(billing_topic_arn)
        self.admission_parameter = parameter.name
        self.register_outputs({"alert_topic_arn": self.alert_topic_arn})
