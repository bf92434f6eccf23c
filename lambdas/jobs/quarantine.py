"""Quarantine: a job record the functions cannot read (or DynamoDB will not take back) is parked once,
told about once, and never blocks or slows the jobs around it.

- The ledger item moves to QUARANTINED, every other attribute kept as it was, with the reason and who
  found it (Ledger.quarantine, a conditional write: a record someone mended meanwhile is left alone).
- The job goes to the dead-letter queue with the reason, like every job that cannot run, so "a job is
  never lost: queued, running, finished, or dead-lettered with a reason" holds for it too; the message
  is owed before the write and sent at least once (lambdas/jobs/dead_letters.py).
- The scheduler tells the environment's alert topic about newly quarantined jobs once, in one message
  per run, and marks them told. Finding them reads every quarantined record (the by-state index, filtered
  on `alerted`: a filter does not lower what a query reads), which grow until someone deletes them. So the
  scheduler reads them only when something may be untold (AlertState): a run that quarantined a job, a
  quarantine by the job-events function noted since the last look, or an hour since the last look (what a
  lost note or a failed alert leaves is caught then), and once more the run after a quarantine (the index
  may not show the job yet); otherwise one small item a run.
- People look with `mlfleet -e <env> quarantine` and resubmit (docs/runbook.md, "Quarantined jobs").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from ..common.aws import dynamodb_number
from ..common.errors import describe, per_item
from ..common.logs import log_decision
from . import ledger as L
from .dead_letters import DeadLetters

# Jobs named in one alert; the rest are counted (the command line lists them all).
ALERT_LISTS = 20
# The item of the ledger table that says when quarantined records were last looked at for alerts, and whether
# a quarantine was noted since. No job id can take the key, and it has no `state` or `submission_id`, so no
# index lists it. Read and written with the GetItem and UpdateItem on the table that both functions declare
# (ledger.py READ_PERMISSIONS and QUARANTINE_PERMISSIONS).
ALERT_STATE_KEY = "#alerts/quarantine"
# The longest a quarantined job waits untold when its note was lost (the writer died after the quarantine)
# or its alert failed: the scheduler looks at every quarantined record at least this often.
CATCH_UP_SECONDS = 3600
# The by-state index is read eventually consistent only, and a quarantine reaches it shortly after its write
# (DynamoDB Developer Guide, "Global secondary indexes": "read consistency"): a look within this long of the
# last note may miss that job, so it leaves the note for the next run's look.
INDEX_LAG_SECONDS = 60


def _attempts(item: dict) -> int:
    value = item.get("attempt", {}).get("N", "0")
    return int(value) if value.isdigit() else 0


@dataclass
class Quarantine:
    """Quarantines for one run of one function (`by`: scheduler, job-events)."""
    ledger: L.Ledger
    sqs: Any
    dlq_url: str
    by: str
    done: dict[str, bool] = field(default_factory=dict)

    def item(self, bad: L.Undecodable, now: float) -> bool:
        """Quarantine one item; True when the job is quarantined now (by this call or before)."""
        if bad.quarantined:
            return True
        if bad.job_id not in self.done:
            # Owed before the write: a send that fails is made by the scheduler's sweep (dead_letters.py).
            outbox = DeadLetters.of(self.ledger, self.sqs, self.dlq_url)
            debt = outbox.owe(bad.job_id, L.QUARANTINED, _attempts(dict(bad.item)), now)
            applied = self.ledger.quarantine(bad.item, bad.error, now, self.by)
            self.done[bad.job_id] = applied
            if applied:
                AlertState.note(self.ledger, now)
            log_decision("quarantine", job_id=bad.job_id, reason=bad.error, applied=applied,
                         detail=None if applied else "the item changed since it was read: looked at again next time")
            outbox.settle(debt, applied, f"quarantined: {bad.error}")
        return self.done[bad.job_id]

    def sweep(self, now: float, failures: list[dict] | None = None) -> list[str]:
        """Quarantine every item the run's reads skipped; returns the job ids quarantined."""
        quarantined = []
        for bad in list(self.ledger.undecodable):
            if bad.quarantined or bad.job_id in self.done:
                continue
            with per_item("quarantine-failed", failures, job_id=bad.job_id, reason=bad.error):
                if self.item(bad, now):
                    quarantined.append(bad.job_id)
        return quarantined


@dataclass(frozen=True)
class AlertState:
    """The ledger's ALERT_STATE_KEY item: when the scheduler last looked at every quarantined record
    (`checked_at`), and when a quarantine was last noted since (`noted_at`); `version` orders the writes."""
    checked_at: float | None = None
    noted_at: float | None = None
    version: int | None = None  # None: no item yet

    @staticmethod
    def note(ledger: L.Ledger, now: float) -> None:
        """Note a quarantine for the scheduler's next look. Best effort: a note that fails is logged, and the
        job is told about at the hourly look (CATCH_UP_SECONDS)."""
        try:
            ledger.dynamodb.update_item(
                TableName=ledger.table, Key={"job_id": {"S": ALERT_STATE_KEY}},
                UpdateExpression="SET noted_at = :now, #version = if_not_exists(#version, :zero) + :one",
                ExpressionAttributeNames={"#version": "version"},
                ExpressionAttributeValues={":now": dynamodb_number(now), ":zero": {"N": "0"}, ":one": {"N": "1"}})
        except (BotoCoreError, ClientError) as error:
            log_decision("quarantine-note-failed", error=describe(error),
                         action=f"told at the scheduler's hourly look ({CATCH_UP_SECONDS // 60} minutes at most)")

    @classmethod
    def read(cls, ledger: L.Ledger) -> AlertState | None:
        """The state, consistently read (a note written a moment ago counts); None when it cannot be read."""
        try:
            item = ledger.dynamodb.get_item(TableName=ledger.table, Key={"job_id": {"S": ALERT_STATE_KEY}},
                                            ConsistentRead=True).get("Item")
        except (BotoCoreError, ClientError) as error:
            log_decision("quarantine-state-read-failed", error=describe(error), action="every quarantined record read")
            return None
        if item is None:
            return cls()
        fields = {name: _number_of(item.get(name)) for name in ("checked_at", "noted_at", "version")}
        if fields["version"] is None:  # not a number (a hand edit): rewritten by the next look
            return cls(None, None, None)
        return cls(fields["checked_at"], fields["noted_at"], int(fields["version"]))

    def why_look(self, now: float, quarantined_now: bool) -> str | None:
        """Why every quarantined record must be read now, or None when nothing can be untold."""
        if quarantined_now:
            return "this run quarantined a job"
        if self.noted_at is not None:
            return "a quarantine was noted since the last look"
        if self.checked_at is None:
            return "no look recorded"
        if now - self.checked_at >= CATCH_UP_SECONDS:
            return f"the hourly look (last {now - self.checked_at:.0f} s ago)"
        return None

    def looked(self, ledger: L.Ledger, now: float) -> None:
        """Record a look that told about every quarantined job it found: the notes before it are done. Conditional
        on the version read, so a quarantine noted during the look is kept for the next run; a note younger
        than INDEX_LAG_SECONDS is kept too (the index may not show its job yet)."""
        if self.noted_at is not None and now - self.noted_at < INDEX_LAG_SECONDS:
            log_decision("quarantine-note-kept", noted_at=self.noted_at,
                         action="the index may not show that job yet: looked at again next run")
            return
        values: dict[str, Any] = {":now": dynamodb_number(now), ":one": {"N": "1"}}
        if self.version is None:
            condition = "attribute_not_exists(#version) OR NOT attribute_type(#version, :number)"
            values[":number"] = {"S": "N"}
            update = "SET checked_at = :now, #version = :one REMOVE noted_at"
        else:
            condition = "#version = :read"
            values[":read"] = {"N": str(self.version)}
            update = "SET checked_at = :now, #version = #version + :one REMOVE noted_at"
        try:
            ledger.dynamodb.update_item(
                TableName=ledger.table, Key={"job_id": {"S": ALERT_STATE_KEY}}, UpdateExpression=update,
                ConditionExpression=condition, ExpressionAttributeNames={"#version": "version"},
                ExpressionAttributeValues=values)
        except ledger.dynamodb.exceptions.ConditionalCheckFailedException:
            log_decision("quarantine-state-moved", action="a quarantine was noted during the look: read again next run")
        except (BotoCoreError, ClientError) as error:
            log_decision("quarantine-state-write-failed", error=describe(error), action="read again next run")


def _number_of(value: Any) -> float | None:
    try:
        return float(value["N"]) if isinstance(value, dict) and "N" in value else None
    except (TypeError, ValueError):
        return None


def alert_new(ledger: L.Ledger, publish: Callable[[str, str], None], environment: str,
              failures: list[dict] | None = None, *, now: float, quarantined_now: bool = False) -> list[str]:
    """One alert for the quarantined jobs nobody was told about yet; each is then marked told. Every
    quarantined record is read only when something may be untold (AlertState.why_look)."""
    state = AlertState.read(ledger)
    why = "its state could not be read" if state is None else state.why_look(now, quarantined_now)
    if why is None:
        return []
    fresh = ledger.quarantined(not_alerted=True)
    log_decision("quarantine-look", why=why, untold=len(fresh))
    if not fresh:
        if state is not None and not quarantined_now:  # this run's own quarantine may not be in the index yet
            state.looked(ledger, now)
        return []
    lines = [f"  {q.job_id}: {q.error}" for q in fresh[:ALERT_LISTS]]
    if len(fresh) > ALERT_LISTS:
        lines.append(f"  ... and {len(fresh) - ALERT_LISTS} more")
    publish(f"mlfleet {environment}: {len(fresh)} job(s) quarantined",
            f"The scheduler could not read or write back {len(fresh)} job record(s) and quarantined them: they are "
            "out of the queue (and in its dead-letter queue) and block nothing else.\n\n" + "\n".join(lines) +
            f"\n\nInspect them with `mlfleet -e {environment} quarantine`; docs/runbook.md (Quarantined jobs) says "
            "how to resubmit them.")
    told = []
    for item in fresh:
        with per_item("quarantine-alert-mark-failed", failures, job_id=item.job_id):
            if ledger.mark_alerted(item.job_id):
                told.append(item.job_id)
    log_decision("quarantine-alert", jobs=[q.job_id for q in fresh], marked=len(told))
    # A mark that failed: read again (and told again) next run; this run's quarantine: the index may lag.
    if state is not None and len(told) == len(fresh) and not quarantined_now:
        state.looked(ledger, now)
    return told
