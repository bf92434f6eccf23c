"""Read the facts out of an AWS Budgets notification (pure).

Budgets publishes plain text, not JSON, e.g.:

    Budget Name: mlfleet-dev
    Budget Type: Cost
    Budgeted Amount: $1,500.00
    Alert Type: ACTUAL
    Alert Threshold: > $1,500.00
    ACTUAL Amount: $1,523.41

The guard acts only on a message that arrived on the environment's budget topic AND reads as the
ACTUAL-spend notification of this environment's budget (`mlfleet-<env>`, components/billing/billing.py):
anyone allowed to publish to the topic, or a budget of another environment subscribed to it by mistake,
cannot close admission. A message on the topic that does not read so is reported to the alert topic
instead, so a wording change by AWS is seen, not silently ignored.
"""

from __future__ import annotations

from dataclasses import dataclass

FIELDS = ("Budget Name", "Alert Type", "Alert Threshold", "Budgeted Amount", "ACTUAL Amount", "FORECASTED Amount")


def budget_name(environment: str) -> str:
    """The environment's AWS Budgets budget (components/billing/billing.py names it so)."""
    return f"mlfleet-{environment}"


def budget_topic_name(environment: str) -> str:
    """The topic the budget's 100%-of-actual notification goes to (components/home.py)."""
    return f"mlfleet-{environment}-budget-exceeded"


@dataclass(frozen=True)
class BudgetNotice:
    budget_name: str | None
    alert_type: str | None
    threshold: str | None
    budgeted: str | None
    amount: str | None


def fields_of(text: str) -> dict[str, str]:
    """`Name: value` lines of FIELDS (the last of each), in time linear in the text. (A regular expression
    with \\s* on both sides of a lazy value took time quadratic in a run of blank lines or spaces: an SNS
    message of 256 KB of newlines held the guard for minutes, past its timeout.)"""
    found = {}
    for line in text.split("\n"):
        name, colon, value = line.partition(":")
        if colon and name.strip() in FIELDS and value.strip():
            found[name.strip()] = value.strip()
    return found


def parse_budget_message(text: str) -> BudgetNotice:
    fields = fields_of(text if isinstance(text, str) else "")
    return BudgetNotice(
        budget_name=fields.get("Budget Name"),
        alert_type=fields.get("Alert Type"),
        threshold=fields.get("Alert Threshold"),
        budgeted=fields.get("Budgeted Amount"),
        amount=fields.get("ACTUAL Amount") or fields.get("FORECASTED Amount"),
    )


def refusal(notice: BudgetNotice, environment: str) -> str | None:
    """Why the notice is not this environment's over-budget notification, or None when it is."""
    if notice.budget_name is None or notice.alert_type is None:
        return "not an AWS Budgets notification (no 'Budget Name:' and 'Alert Type:' lines)"
    if notice.budget_name != budget_name(environment):
        return f"budget {notice.budget_name[:80]!r} is not this environment's ({budget_name(environment)!r})"
    if notice.alert_type != "ACTUAL":
        return f"alert type {notice.alert_type[:40]!r}: only ACTUAL spend closes admission"
    return None


def closing_message(environment: str, notice: BudgetNotice, command: str) -> str:
    spent = f"{notice.amount} of {notice.budgeted}" if notice.amount and notice.budgeted else "100% of the budget"
    return (
        f"mlfleet {environment}: actual spend reached {spent} (budget {notice.budget_name or 'unknown'}).\n"
        "The environment has STOPPED ADMITTING NEW JOBS and will not scale out. Running jobs continue;\n"
        "queued jobs wait. Idle machines are still reaped.\n\n"
        f"To admit jobs again (after raising the budget or deciding to overspend):\n    {command}\n"
    )
