"""`mlfleet list`, `status`, `follow` and `cancel`: the ledger as people read it."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from datetime import datetime, timezone

from ...common.aws import client
from .. import ledger as L
from .errors import CliError
from .service import JobService
from ..spec import is_job_id, is_submission_id

# The job container's name in the task definition (components/compute/cluster.py JOB_CONTAINER_NAME): its
# awslogs streams are job/<container>/<task id>.
JOB_CONTAINER = "job"
ACTIVE_STATES = (L.QUEUED, L.STARTING, L.RUNNING)


def records_of(service: JobService, target: str) -> list[L.JobRecord]:
    ledger = service.ledger
    if is_job_id(target):
        try:
            record = ledger.get(target)
        except L.UndecodableRecord as error:
            raise CliError(f"{error}; `mlfleet quarantine` shows such records") from None
        if record is None:
            raise CliError(f"no job {target} in {service.environment}")
        return [record]
    if is_submission_id(target):
        skipped = len(ledger.undecodable)
        records = ledger.by_submission(target)
        if not records and ledger.undecodable[skipped:]:
            raise CliError(f"submission {target}: none of its jobs can be read from the ledger: "
                           f"{unreadable_list(ledger.undecodable[skipped:])}; `mlfleet quarantine` shows such records")
        if not records:
            raise CliError(f"no submission {target} in {service.environment}")
        return sorted(records, key=lambda r: r.index)
    raise CliError(f"{target!r} is neither a job id (sub-YYYYmmddHHMMSS-xxxxxx-NNNNN) nor a submission id")


def unreadable_list(bad: Sequence[L.Undecodable], shown: int = 5) -> str:
    """The records a read skipped, each once: job id and why (the key it could not read)."""
    errors = {b.job_id: b.error for b in bad}
    named = "; ".join(f"{job_id}: {error[:200]}" for job_id, error in list(errors.items())[:shown])
    return named + (f"; and {len(errors) - shown} more" if len(errors) > shown else "")


def unreadable_note(service: JobService, what: str) -> str | None:
    """The line that says which records the command's reads skipped (None when none)."""
    bad = service.ledger.undecodable
    if not bad:
        return None
    count = len({b.job_id for b in bad})
    return (f"mlfleet: {count} job record(s) could not be read and are not {what}: {unreadable_list(bad)} "
            "(`mlfleet quarantine` shows them once the functions have quarantined them)")


def list_jobs(service: JobService, *, submission: str | None = None, states: Sequence[str] = ACTIVE_STATES,
              owner: str | None = None) -> list[L.JobRecord]:
    unknown = [s for s in states if s not in L.STATES]
    if unknown:
        raise CliError(f"--state {', '.join(unknown)}: not a job state ({', '.join(L.STATES)})")
    if tuple(states) == (L.QUARANTINED,):
        raise CliError("quarantined jobs have no readable record to list: `mlfleet quarantine` shows them")
    states = [s for s in states if s != L.QUARANTINED]
    if submission:
        records = [r for r in records_of(service, submission) if r.state in states]
    else:
        records = [r for state in states for r in service.ledger.by_state(state)]
    return [r for r in records if owner is None or r.owner == owner]


def _where(record: L.JobRecord) -> str:
    p = record.placement
    if record.state == L.QUEUED and record.reserved:
        region, fleet, _ = record.reserved
        return f"new {fleet} instance {region}"  # bought for it, still booting
    return f"{p.instance_type} {p.region}" if p else "-"


def table(records: Sequence[L.JobRecord]) -> str:
    rows = [("JOB", "STATE", "TEAM", "PRI", "ATTEMPT", "RUNS", "OWNER", "WHERE", "LAST REASON")]
    rows += [(r.job_id, r.state, r.spec.team or "-", str(r.spec.priority), str(r.attempt),
              f"{r.runs}/{r.spec.max_attempts}", r.owner or "-", _where(r), r.last_reason[:80]) for r in records]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    return "\n".join("  ".join([c.ljust(w) for c, w in zip(row, widths)] + [row[-1]]).rstrip() for row in rows)


def record_document(record: L.JobRecord) -> dict:
    cost = record.cost
    return {"job_id": record.job_id, "submission_id": record.submission_id, "state": record.state,
            "owner": record.owner, "team": record.spec.team, "attempt": record.attempt, "runs": record.runs,
            "start_failures": record.start_failures, "exit_code": record.exit_code,
            "submitted_at": _time(record.submitted_at), "updated_at": _time(record.updated_at),
            "placement": dict(vars(record.placement)) if record.placement else None,
            "reserved": dict(zip(("region", "fleet", "box"), record.reserved)) if record.reserved else None,
            "cost": {"usd": round(cost.usd, 4), "on_demand_usd": round(cost.on_demand_usd, 4),
                     "hours": round(cost.seconds / 3600, 4)} if cost else None,
            "spec": record.spec.to_document(), "reasons": [{**r, "at": _time(r["at"])} for r in record.reasons]}


def quarantine_table(items: Sequence[L.QuarantinedItem]) -> str:
    rows = [("JOB", "QUARANTINED", "BY", "WAS", "REASON")]
    rows += [(q.job_id, _time(q.at), q.by, q.previous_state or "-", q.error) for q in items]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    return "\n".join("  ".join([c.ljust(w) for c, w in zip(row, widths)] + [row[-1]]).rstrip() for row in rows)


def quarantine_documents(items: Sequence[L.QuarantinedItem]) -> list[dict]:
    return [{**vars(q), "at": _time(q.at)} for q in items]


def _time(stamp: float) -> str:
    return datetime.fromtimestamp(stamp, timezone.utc).isoformat(timespec="seconds")


def _sleep(seconds: float) -> None:
    time.sleep(seconds)


def follow(service: JobService, target: str, *, interval: float = 10.0, logs: bool = False,
           out: Callable[[str], None] = print, sleep: Callable[[float], None] | None = None,
           max_polls: int | None = None) -> int:
    """Print every state change (and, with logs, the output) until all jobs have ended: 0 when none failed,
    1 when one FAILED or was quarantined, 2 when a record that cannot be read says it ended (or its state
    is none the functions read): how that job ended is unknown. A record that cannot be read and says it is
    queued, starting or running is waited for: the scheduler quarantines it when it next reads it."""
    sleep = sleep or _sleep
    seen: dict[str, int] = {}
    tokens: dict[str, str] = {}
    polls = 0
    while True:
        skipped = len(service.ledger.undecodable)
        records = records_of(service, target)
        unread = {bad.job_id: bad for bad in service.ledger.undecodable[skipped:]}.values()
        for record in records:
            for reason in record.reasons[seen.get(record.job_id, 0):]:
                out(f"{_time(reason['at'])}  {record.job_id}  {reason['state']:<9}  attempt {reason.get('attempt', 0)}  "
                    f"{reason['reason']}")
            seen[record.job_id] = len(record.reasons)
            if logs and record.placement is not None and record.placement.task_arn:
                _print_logs(service, record, tokens, out)
        if all(r.state in L.TERMINAL for r in records) and not any(b.state in ACTIVE_STATES for b in unread):
            if any(not bad.quarantined for bad in unread):
                return 2
            return 1 if unread or any(r.state == L.FAILED for r in records) else 0
        polls += 1
        if max_polls is not None and polls >= max_polls:
            return 3  # still running when the caller stopped watching
        sleep(interval)


def _print_logs(service: JobService, record: L.JobRecord, tokens: dict[str, str], out) -> None:
    stream = f"job/{JOB_CONTAINER}/{record.placement.task_arn.rsplit('/', 1)[-1]}"
    logs = client("logs", record.placement.region)
    while True:
        kwargs = {"nextToken": tokens[stream]} if stream in tokens else {"startFromHead": True}
        try:
            page = logs.get_log_events(logGroupName=service.job_log_group, logStreamName=stream, **kwargs)
        except logs.exceptions.ResourceNotFoundException:
            return  # the task has not written anything yet
        for event in page.get("events", []):
            out(f"{record.job_id} | {event['message']}")
        if page.get("nextForwardToken") in (None, tokens.get(stream)):
            return
        tokens[stream] = page["nextForwardToken"]


def cancel(service: JobService, target: str, *, who: str) -> list[tuple[str, str]]:
    """Cancel every job of `target` that has not ended; stop its task if one runs. Safe to repeat."""
    results = []
    for record in records_of(service, target):
        if record.state in L.TERMINAL:
            results.append((record.job_id, f"already {record.state}"))
            continue
        outcome = service.ledger.cancel(record, reason=f"cancelled by {who}", now=time.time())
        if not outcome.applied:
            current = outcome.record.state if outcome.record else "gone"
            results.append((record.job_id, f"not cancelled: it changed meanwhile (now {current}); run cancel again"))
            continue
        placement = record.placement
        if placement is not None and placement.task_arn and record.state in (L.STARTING, L.RUNNING):
            client("ecs", placement.region).stop_task(cluster=placement.cluster, task=placement.task_arn,
                                                      reason=f"mlfleet cancel by {who}"[:255])
            results.append((record.job_id, f"cancelled; task {placement.task_arn.rsplit('/', 1)[-1]} stopping"))
        else:
            # A STARTING job without a task yet: the scheduler stops the task it starts when it sees CANCELLED.
            results.append((record.job_id, "cancelled"))
    return results
