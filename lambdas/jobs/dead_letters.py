"""Dead letters, at least once: a job that fails or is quarantined reaches the dead-letter queue even when
the send fails (throttled, a transient error, the function timing out right after the ledger write).

Before, the ledger write came first and the send after it: a failed send was never made again, because a
redelivered event or the next run found the job already FAILED (or QUARANTINED) and had nothing to do.

Now each writer first notes the message it will owe (`owe`), in one item of the ledger table (key
OUTBOX_KEY, one attribute per debt: `<job id>/<token>` -> {state, attempts, at}); then makes its
conditional ledger write; then `settle`s: a write that applied sends the message and clears the debt, one
that did not (the job moved on meanwhile) just clears it. A send that fails leaves the debt; so does a
writer that dies between any two of these steps.

The scheduler `sweep`s every run (one consistent GetItem of the outbox item): each debt older than GRACE
(no writer runs that long, so its writer has settled or died) is read against its job (consistent): a job
that FAILED (or is QUARANTINED) gets its message, with the reason the ledger holds, and the debt is
cleared; a job that did not (the write never applied) has its debt cleared unsent. Each writer's debt is
its own attribute, so a writer whose write lost a race never clears the winner's debt. A message is sent
twice only when a send succeeded and its clear did not: at least once, never lost.

Why an outbox item rather than a mark on the job: no index of the table finds marked FAILED jobs without
reading every FAILED job ever (by-state keys on state and submission time), and a sparse index would be
an infrastructure change; the ledger already keeps such items (the placement lease, the teams' use).
An item holds 400 KB: about 5,000 debts, far more than the dead-letter queue's alarm lets pile up.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from boto3.dynamodb.types import TypeDeserializer
from botocore.exceptions import BotoCoreError, ClientError

from ..common.aws import dynamodb_number
from ..common.errors import describe, per_item
from ..common.logs import log_decision
from ..common.permissions import needs
from . import ledger as L
from . import queue

OUTBOX_KEY = "#outbox/dead-letters"  # no job id can take it; no `state`, so no index lists it
# Lambda's longest timeout (15 minutes), and a minute more: a debt this old has no writer still working on it.
GRACE_SECONDS = 16 * 60

PERMISSIONS = (
    needs("dynamodb:GetItem", "dynamodb:UpdateItem", resources=L.TABLE_ARNS[:1],
          condition={"ForAllValues:StringEquals": {"dynamodb:LeadingKeys": [OUTBOX_KEY]}},
          why="note, read and clear the dead-letter messages owed, one item of the job ledger"),
    *queue.DEAD_LETTER_PERMISSIONS,
)

_deserializer = TypeDeserializer()


@dataclass(frozen=True)
class Debt:
    """One writer's note that it owes the dead-letter message of `job_id` once its write to `state` applies."""
    job_id: str
    name: str  # the outbox item's attribute: `<job id>/<token>`
    state: str  # L.FAILED or L.QUARANTINED
    attempts: int
    at: float


@dataclass
class DeadLetters:
    dynamodb: Any
    table: str
    sqs: Any
    dlq_url: str

    @classmethod
    def of(cls, ledger: L.Ledger, sqs, dlq_url: str) -> DeadLetters:
        return cls(ledger.dynamodb, ledger.table, sqs, dlq_url)

    def owe(self, job_id: str, state: str, attempts: int, now: float) -> Debt:
        """Note the debt before the ledger write that would incur it."""
        debt = Debt(job_id, f"{job_id}/{uuid.uuid4().hex[:12]}", state, attempts, now)
        self.dynamodb.update_item(
            TableName=self.table, Key={"job_id": {"S": OUTBOX_KEY}}, UpdateExpression="SET #debt = :debt",
            ExpressionAttributeNames={"#debt": debt.name},
            ExpressionAttributeValues={":debt": {"M": {"state": {"S": state}, "attempts": {"N": str(attempts)},
                                                       "at": dynamodb_number(now)}}})
        return debt

    def settle(self, debt: Debt, applied: bool, reason: str) -> bool:
        """After the ledger write: send the message when it applied, then clear the debt. True when sent;
        a send that failed is logged and left owed for the sweep (it raises nothing)."""
        sent = applied and self._send(debt, reason, by="writer")
        if sent or not applied:
            self._clear(debt)
        return sent

    def _send(self, debt: Debt, reason: str, by: str) -> bool:
        try:
            queue.dead_letter(self.sqs, self.dlq_url, debt.job_id, reason, debt.attempts)
        except (BotoCoreError, ClientError) as error:
            log_decision("dead-letter-deferred", job_id=debt.job_id, error=describe(error),
                         action=f"owed: the scheduler sends it once the debt is {GRACE_SECONDS // 60} minutes old")
            return False
        log_decision("dead-letter", job_id=debt.job_id, state=debt.state, reason=reason[:L.MAX_REASON_CHARS],
                     attempts=debt.attempts, by=by)
        return True

    def _clear(self, debt: Debt) -> None:
        """Remove the debt; idempotent (conditional on it being there). A failure leaves it for the sweep."""
        try:
            self.dynamodb.update_item(
                TableName=self.table, Key={"job_id": {"S": OUTBOX_KEY}}, UpdateExpression="REMOVE #debt",
                ConditionExpression="attribute_exists(#debt)", ExpressionAttributeNames={"#debt": debt.name})
        except self.dynamodb.exceptions.ConditionalCheckFailedException:
            return  # already cleared (by the sweep, or this debt's writer): nothing owed
        except (BotoCoreError, ClientError) as error:
            log_decision("dead-letter-clear-failed", job_id=debt.job_id, error=describe(error),
                         action="the sweep clears it (the message may go out twice)")

    def owed(self) -> list[Debt]:
        """Every debt noted and not cleared, oldest first."""
        item = self.dynamodb.get_item(TableName=self.table, Key={"job_id": {"S": OUTBOX_KEY}},
                                      ConsistentRead=True).get("Item") or {}
        debts = []
        for name, value in item.items():
            if name == "job_id":
                continue
            entry = value.get("M", {})
            try:
                debts.append(Debt(name.rsplit("/", 1)[0], name, entry["state"]["S"], int(entry["attempts"]["N"]),
                                  float(entry["at"]["N"])))
            except (KeyError, TypeError, ValueError):
                log_decision("dead-letter-debt-unreadable", name=name[:200], action="left in the outbox item")
        return sorted(debts, key=lambda d: (d.at, d.name))

    def sweep(self, now: float, failures: list[dict] | None = None) -> list[str]:
        """Send the messages owed for longer than GRACE_SECONDS and clear their debts; the job ids sent."""
        sent: list[str] = []
        for debt in self.owed():
            if now - debt.at < GRACE_SECONDS:
                continue  # its writer may still be between its writes
            with per_item("dead-letter-sweep-failed", failures, job_id=debt.job_id, action="tried again next run"):
                if debt.job_id in sent:  # two writers' debts for one job: one message
                    self._clear(debt)
                    continue
                reason = self._reason(debt)
                if reason is None:
                    log_decision("dead-letter-not-owed", job_id=debt.job_id, state=debt.state,
                                 reason="the ledger write never applied", action="debt cleared")
                    self._clear(debt)
                elif self._send(debt, reason, by="sweep"):
                    self._clear(debt)
                    sent.append(debt.job_id)
        return sent

    def _reason(self, debt: Debt) -> str | None:
        """The dead-letter reason the ledger holds for the debt's job, None when the job never got there."""
        item = self.dynamodb.get_item(TableName=self.table, Key={"job_id": {"S": debt.job_id}}, ConsistentRead=True,
                                      ProjectionExpression="#state, reasons, quarantine",
                                      ExpressionAttributeNames={"#state": "state"}).get("Item")
        if not item:
            return None
        document = {k: _deserializer.deserialize(v) for k, v in item.items()}
        if debt.state == L.QUARANTINED:
            info = document.get("quarantine")
            return f"quarantined: {info.get('error', '')}" if isinstance(info, Mapping) else None
        reasons = document.get("reasons")
        for entry in reversed(reasons if isinstance(reasons, list) else []):
            if isinstance(entry, Mapping) and entry.get("state") == L.FAILED:
                return str(entry.get("reason", ""))
        return None
