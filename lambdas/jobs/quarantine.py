"""Quarantine: a job record the functions cannot read (or DynamoDB will not take back) is parked once,
told about once, and never blocks or slows the jobs around it.

- The ledger item moves to QUARANTINED, every other attribute kept as it was, with the reason and who
  found it (Ledger.quarantine, a conditional write: a record someone mended meanwhile is left alone).
- The job goes to the dead-letter queue with the reason, like every job that cannot run, so "a job is
  never lost: queued, running, finished, or dead-lettered with a reason" holds for it too; the message
  is owed before the write and sent at least once (lambdas/jobs/dead_letters.py).
- The scheduler tells the environment's alert topic about newly quarantined jobs once, in one message
  per run, and marks them told.
- People look with `mlfleet -e <env> quarantine` and resubmit (docs/runbook.md, "Quarantined jobs").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..common.errors import per_item
from ..common.logs import log_decision
from . import ledger as L
from .dead_letters import DeadLetters

# Jobs named in one alert; the rest are counted (the command line lists them all).
ALERT_LISTS = 20


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


def alert_new(ledger: L.Ledger, publish: Callable[[str, str], None], environment: str,
              failures: list[dict] | None = None) -> list[str]:
    """One alert for the quarantined jobs nobody was told about yet; each is then marked told."""
    fresh = ledger.quarantined(not_alerted=True)
    if not fresh:
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
    return told
