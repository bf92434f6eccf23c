"""Lambda entry point: the budget's over-budget notification closes admission and notifies.

Only a record from the environment's budget topic (`mlfleet-<env>-budget-exceeded`, in the home region
and account of the alert topic) that reads as this environment's ACTUAL-spend notification closes
admission (budget_message.refusal). Any other SNS record is logged and ignored; one from the budget
topic that does not read so is reported to the alert topic, since it may mean AWS changed its wording.
Malformed event shapes are logged, never raised. When closing the flag fails (throttled, denied), the
handler raises after logging, so Lambda's asynchronous retry tries again; closing is idempotent. After
the last retry Lambda sends the failed invocation to the alert topic (its on-failure destination,
components/home.py), so a notification that could not close admission is not lost in silence.

Environment: ENVIRONMENT, HOME_REGION, ALERT_TOPIC_ARN (the environment's alert topic).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from ..common import admission, alerts
from ..common.aws import client
from ..common.errors import describe, per_item
from ..common.logs import log_decision, shown
from ..common.permissions import PUBLISH_TO_ENCRYPTED_TOPICS, needs
from ..common.settings import SettingsError, from_env

from .budget_message import BudgetNotice, budget_topic_name, closing_message, parse_budget_message, refusal

PERMISSIONS = (
    *admission.WRITE_PERMISSIONS,
    needs("sns:Publish", resources=("arn:{partition}:sns:{region}:{account}:mlfleet-{environment}-alerts",),
          why="tell the team admission is closed, or that the budget topic carried a message it could not read"),
    PUBLISH_TO_ENCRYPTED_TOPICS,
)


@dataclass(frozen=True)
class Settings:
    environment: str
    home_region: str
    alert_topic_arn: str

    def __post_init__(self) -> None:
        parts = self.alert_topic_arn.split(":")
        if len(parts) != 6 or parts[:3] != ["arn", parts[1], "sns"] or not parts[4].isdigit():
            raise SettingsError(f"ALERT_TOPIC_ARN={self.alert_topic_arn!r}: not an SNS topic ARN")

    @property
    def budget_topic_arn(self) -> str:
        """The budget topic: same partition and account as the alert topic, in the home region."""
        _, partition, _, _, account, _ = self.alert_topic_arn.split(":")
        return f"arn:{partition}:sns:{self.home_region}:{account}:{budget_topic_name(self.environment)}"


def reopen_command(settings: Settings) -> str:
    return f"make admission-open STACK={settings.environment}"


def sns_records(event) -> Iterator[tuple[str, str, str]]:
    """(topic ARN, subject, message) of each well-formed SNS record; the rest are logged and skipped."""
    records = event.get("Records") if isinstance(event, Mapping) else None
    if not isinstance(records, list):
        log_decision("ignore", reason="event carries no list of records",
                     event_keys=sorted(map(str, event))[:20] if isinstance(event, Mapping) else type(event).__name__)
        return
    for position, record in enumerate(records):
        sns = record.get("Sns") if isinstance(record, Mapping) else None
        fields = [sns.get(k) for k in ("TopicArn", "Subject", "Message")] if isinstance(sns, Mapping) else []
        if len(fields) != 3 or not isinstance(fields[0], str) or not isinstance(fields[2], str):
            log_decision("ignore", record=position, reason="not an SNS record with TopicArn and Message",
                         error=_bad_key(position, record))
            continue
        yield fields[0], fields[1] if isinstance(fields[1], str) else "", fields[2]


def _bad_key(position: int, record) -> str:
    """The first key of the record that is missing or not what an SNS record holds there, with its value."""
    where = f"Records[{position}]"
    if not isinstance(record, Mapping):
        return f"{where}={shown(record)}: not a JSON object"
    sns = record.get("Sns")
    if not isinstance(sns, Mapping):
        return f"{where}.Sns={shown(sns)}: {'missing' if sns is None else 'not a JSON object'}"
    for key in ("TopicArn", "Message"):
        if not isinstance(sns.get(key), str):
            return f"{where}.Sns.{key}={shown(sns.get(key))}: {'missing' if sns.get(key) is None else 'not a string'}"
    return f"{where}: not an SNS record"



def handler(event, context=None, settings: Settings | None = None):
    settings = settings or from_env(Settings)
    notices: list[BudgetNotice] = []
    unread: list[str] = []
    for topic, subject, message in sns_records(event):
        if topic != settings.budget_topic_arn:
            log_decision("ignore", topic=topic[:200], reason=f"not the budget topic {settings.budget_topic_arn}")
            continue
        notice = parse_budget_message(message)
        why = refusal(notice, settings.environment)
        if why is None:
            notices.append(notice)
        else:
            log_decision("ignore", topic=topic, subject=subject[:100], reason=why)
            unread.append(f"{why}; subject {subject[:100]!r}; message {message[:300]!r}")
    if unread:
        with per_item("alert-failed", None, about="unreadable budget-topic message"):
            publish(settings, f"mlfleet {settings.environment}: budget guard got a message it could not read",
                    "The budget guard received message(s) on the budget topic that are not this environment's "
                    "over-budget notification, and did NOT close job admission:\n\n  " + "\n  ".join(unread) +
                    "\n\nIf spend really crossed the budget, close admission by hand: python -m "
                    f"lambdas.common.admission close --environment {settings.environment} "
                    f"--region {settings.home_region}")
    if not notices:
        return {"closed": False, "unread": len(unread)}
    return close(settings, notices[-1])


def close(settings: Settings, notice: BudgetNotice) -> dict:
    ssm = client("ssm", settings.home_region)
    try:
        before = admission.read_admission(ssm, settings.environment)
        flag = admission.set_admission(
            ssm, settings.environment, admission.CLOSED,
            f"actual spend {notice.amount or 'unknown'} crossed budget {notice.budget_name} "
            f"({notice.threshold or '100%'})")
    except Exception as error:
        log_decision("close-admission-failed", environment=settings.environment, error=describe(error),
                     action="raised, so Lambda retries the notification")
        raise
    newly_closed = before.is_open
    log_decision("close-admission", environment=settings.environment, already_closed=not newly_closed,
                 budget=notice.budget_name, amount=notice.amount, threshold=notice.threshold, reason=flag.reason)
    if newly_closed:
        # Budgets e-mails the same notification to the team directly; this adds what it means and the fix.
        with per_item("alert-failed", None, about="admission closed"):
            publish(settings, f"mlfleet {settings.environment}: budget spent, job admission closed",
                    closing_message(settings.environment, notice, reopen_command(settings)))
    return {"closed": True, "newly_closed": newly_closed, "reason": flag.reason}


def publish(settings: Settings, subject: str, message: str) -> None:
    """Publish to the alert topic: plain text for e-mail, a custom notification for Chatbot (common/alerts.py)."""
    alerts.publish_alert(client("sns", settings.alert_topic_arn.split(":")[3]), settings.alert_topic_arn, subject,
                         message)
