"""Lambda entry point: an SNS event from the budget-exceeded topic closes admission and notifies.

Environment: ENVIRONMENT, HOME_REGION, ALERT_TOPIC_ARN (the environment's alert topic).
"""

from __future__ import annotations

from dataclasses import dataclass

from lambdas.common import admission
from lambdas.common.aws import client
from lambdas.common.logs import log_decision
from lambdas.common.permissions import PUBLISH_TO_ENCRYPTED_TOPICS, needs
from lambdas.common.settings import from_env

from .budget_message import closing_message, parse_budget_message

PERMISSIONS = (
    *admission.WRITE_PERMISSIONS,
    needs("sns:Publish", resources=("arn:{partition}:sns:{region}:{account}:mlfleet-{environment}-alerts",),
          why="tell the team admission is closed"),
    PUBLISH_TO_ENCRYPTED_TOPICS,
)


@dataclass(frozen=True)
class Settings:
    environment: str
    home_region: str
    alert_topic_arn: str


def reopen_command(settings: Settings) -> str:
    return f"make admission-open STACK={settings.environment}"


def handler(event, context=None, settings: Settings | None = None):
    settings = settings or from_env(Settings)
    records = [r for r in (event or {}).get("Records", []) if r.get("EventSource") == "aws:sns" or "Sns" in r]
    if not records:
        log_decision("ignore", reason="event carries no SNS record", event_keys=sorted((event or {}).keys()))
        return {"closed": False}
    ssm = client("ssm", settings.home_region)
    notices = [parse_budget_message(r["Sns"].get("Message", "")) for r in records]
    before = admission.read_admission(ssm, settings.environment)
    notice = notices[-1]
    flag = admission.set_admission(
        ssm, settings.environment, admission.CLOSED,
        f"actual spend {notice.amount or 'unknown'} crossed budget {notice.budget_name or ''} ({notice.threshold or '100%'})",
    )
    newly_closed = before.is_open
    log_decision("close-admission", environment=settings.environment, already_closed=not newly_closed,
                 budget=notice.budget_name, amount=notice.amount, threshold=notice.threshold, reason=flag.reason)
    if newly_closed:
        client("sns", settings.alert_topic_arn.split(":")[3]).publish(
            TopicArn=settings.alert_topic_arn,
            Subject=f"mlfleet {settings.environment}: budget spent, job admission closed"[:100],
            Message=closing_message(settings.environment, notice, reopen_command(settings)),
        )
    return {"closed": True, "newly_closed": newly_closed, "reason": flag.reason}
