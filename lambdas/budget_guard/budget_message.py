"""Read the facts out of an AWS Budgets notification (pure).

Budgets publishes plain text, not JSON, e.g.:

    Budget Name: mlfleet-dev
    Budget Type: Cost
    Budgeted Amount: $1,500.00
    Alert Type: ACTUAL
    Alert Threshold: > $1,500.00
    ACTUAL Amount: $1,523.41

The guard acts on which topic the message arrived on (only the 100%-of-actual notification is sent to
the guard's topic), so a wording change by AWS can only cost detail in the log, never the action.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_FIELD = re.compile(r"^\s*(Budget Name|Alert Type|Alert Threshold|Budgeted Amount|ACTUAL Amount|FORECASTED Amount)\s*:\s*(.+?)\s*$", re.M)


@dataclass(frozen=True)
class BudgetNotice:
    budget_name: str | None
    alert_type: str | None
    threshold: str | None
    budgeted: str | None
    amount: str | None


def parse_budget_message(text: str) -> BudgetNotice:
    fields = {key: value for key, value in _FIELD.findall(text or "")}
    return BudgetNotice(
        budget_name=fields.get("Budget Name"),
        alert_type=fields.get("Alert Type"),
        threshold=fields.get("Alert Threshold"),
        budgeted=fields.get("Budgeted Amount"),
        amount=fields.get("ACTUAL Amount") or fields.get("FORECASTED Amount"),
    )


def closing_message(environment: str, notice: BudgetNotice, command: str) -> str:
    spent = f"{notice.amount} of {notice.budgeted}" if notice.amount and notice.budgeted else "100% of the budget"
    return (
        f"mlfleet {environment}: actual spend reached {spent} (budget {notice.budget_name or 'unknown'}).\n"
        "The environment has STOPPED ADMITTING NEW JOBS and will not scale out. Running jobs continue;\n"
        "queued jobs wait. Idle machines are still reaped.\n\n"
        f"To admit jobs again (after raising the budget or deciding to overspend):\n    {command}\n"
    )
