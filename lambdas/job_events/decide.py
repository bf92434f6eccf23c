"""Pure decisions for job events: plain data in (an event, the job's ledger record), plain data out.

Events (forwarded from every fleet region to the home region's default bus):
  - "EC2 Spot Instance Interruption Warning": the instance goes in two minutes. Its container instance is
    drained and every job on it goes back to the queue with its attempt counted (FAILED and dead-lettered
    when no attempt is left), or with its attempts given back when it saved a checkpoint in the run (see
    the task rules below). Its tasks are stopped now, so they get SIGTERM and the task definition's
    stopTimeout to checkpoint, instead of dying with the machine.
  - "EC2 Instance Rebalance Recommendation": the instance is at elevated risk. It is tagged
    `mlfleet:rebalance-at=<time>` and the planner avoids it; the tag is removed again (undone) when no
    interruption followed within REBALANCE_TIMEOUT_MINUTES (the scheduled "Scheduled Event" check).
  - "ECS Task State Change": keeps the ledger true. What a stopped task means (the retry rules):
      * the spot market took the machine (stopCode SpotInterruption or TerminationNotice), the host
        failed (stoppedReason "Host EC2 (instance ...) stopped/terminated."), or this function stopped
        the task at the machine's spot notice (stopCode UserInitiated, stoppedReason NOTICE_STOP_REASON
        and the instance: the notice stops every job task it finds in ECS, also one whose job it could
        not requeue, its write failed or the ledger's index did not list it yet): requeued while attempts
        remain, whatever the exit code (a job that exits 0 on SIGTERM has not necessarily finished).
        If the job saved a checkpoint during that run (an object under its checkpoint location newer
        than the run's start), it gets its attempts back (`runs` 0): it made progress, and the machine,
        not the job, ended the run. So `max_attempts` bounds the runs in a row that end without
        progress: a weeks-long job on spot instances that live a day would otherwise be dead-lettered
        however well it checkpoints (and its interruptions before its first save would still add up).
        SkyPilot's managed jobs do not count preemptions at all (`max_restarts_on_errors` counts
        user-code failures); this rule still stops a job that saves nothing;
      * the scheduler stopped it to move it into room on another machine (stopCode UserInitiated,
        stoppedReason MOVED_REASON and the instance; lambdas/scheduler/planning/moves.py, only jobs that
        declare checkpoints): requeued with the attempt not counted (`runs` less the run it stopped, which
        the restart counts again), whatever the exit code: the scheduler, not the job, ended the run. The
        reason stays in the record: the next run places the job on that instance first;
      * exit code 0: SUCCEEDED;
      * an exit code the spec lists in `retry_on_exit_codes`: requeued while attempts remain;
      * any other exit code: FAILED at once, with the exit code and ECS's reason in the record;
      * no exit code (the container never ran to an exit, e.g. TaskFailedToStart with
        CannotPullContainerError), or an exitCode ECS cannot report (not a 32-bit integer): requeued while
        attempts remain.
    Each run's cost is recorded when it ends (lambdas/jobs/costs.py). An event for an older attempt, or
    for a job that has moved on, changes nothing (but the run of a job cancelled while it ran is still
    charged, once); a task still running for an attempt the ledger no longer holds is stopped, so one
    attempt never runs twice.
    The fields are those of the EventBridge "ECS Task State Change" event (detail: the DescribeTasks Task
    shape of botocore's ecs model: stopCode TaskStopCode, containers[].exitCode, stoppedReason, stoppedAt;
    https://docs.aws.amazon.com/AmazonECS/latest/developerguide/ecs_task_events.html).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from ..common.catalog import Catalog
from ..jobs.checkpoints import MOVED_REASON
from ..jobs.costs import run_cost
from ..jobs.ledger import CANCELLED, FAILED, QUEUED, RUNNING, STARTING, SUCCEEDED, JobRecord, Placement
from ..jobs.spec import ATTEMPT_VARIABLE, is_job_id, parse_attempt

INTERRUPTION = "EC2 Spot Instance Interruption Warning"
REBALANCE = "EC2 Instance Rebalance Recommendation"
TASK_STATE_CHANGE = "ECS Task State Change"
SCHEDULED = "Scheduled Event"
# ECS stop codes meaning the spot market took the machine (ECS documents both for spot capacity; botocore's
# ecs model, TaskStopCode).
SPOT_STOP_CODES = frozenset({"SpotInterruption", "TerminationNotice"})
USER_INITIATED = "UserInitiated"  # a StopTask call (botocore's ecs model, TaskStopCode)
# ECS's stoppedReason when the instance under a task stopped or was terminated ("Host EC2 (instance
# i-0abc) terminated."): the host failed, not the job.
HOST_FAILURE_PREFIX = "Host EC2 (instance"
# The reason this function gives StopTask at a spot notice, before the instance id (handler.py); ECS
# reports it as the task's stoppedReason, with stopCode UserInitiated.
NOTICE_STOP_REASON = "spot interruption of "


# EC2 instance ids: i- and 8 (older) or 17 hexadecimal digits.
_INSTANCE_ID = re.compile(r"i-[0-9a-f]{8}(?:[0-9a-f]{9})?")
EXIT_CODES = (-2**31, 2**31 - 1)  # what ECS reports: a 32-bit integer (a Windows status shows as a negative one)


class EventError(ValueError):
    pass


@dataclass(frozen=True)
class InstanceEvent:
    kind: str  # INTERRUPTION or REBALANCE
    region: str
    instance_id: str
    time: datetime


@dataclass(frozen=True)
class TaskStateChange:
    region: str
    cluster_arn: str
    task_arn: str
    container_instance_arn: str
    job_id: str | None  # startedBy, when it is an mlfleet job id
    attempt: int | None  # MLFLEET_ATTEMPT of the task's overrides
    last_status: str
    desired_status: str
    stop_code: str
    stopped_reason: str
    exit_code: int | None  # the job container's, when it has one
    stopped_at: float | None = None  # detail.stoppedAt, else the event's time (epoch seconds)
    unread: tuple[str, ...] = ()  # values of the event read as absent, each naming its key and value


@dataclass(frozen=True)
class RebalanceCheck:
    time: datetime


@dataclass(frozen=True)
class Unknown:
    detail_type: str


def _time(value: str, where: str) -> datetime:
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except (AttributeError, TypeError, ValueError):
        raise EventError(f"{where}={str(value)[:80]!r}: not an ISO-8601 time") from None
    # EventBridge times are UTC ("2026-11-22T12:00:00Z"); one without an offset is read as UTC too.
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=timezone.utc)


def _require(document: Mapping, key: str, where: str, kind: type = str) -> Any:
    value = document.get(key) if isinstance(document, Mapping) else None
    if value is None or value == "":
        raise EventError(f"{where}.{key} is missing in the event")
    if not isinstance(value, kind):
        raise EventError(f"{where}.{key}={str(value)[:80]!r} is not a {'string' if kind is str else 'JSON object'}")
    return value


def _objects(value: Any) -> list[Mapping]:
    """The objects of a JSON list (anything else in it, or a non-list, is no object)."""
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, list) else []


def _attempt(detail: Mapping) -> int | None:
    overrides = detail.get("overrides")
    for override in _objects(overrides.get("containerOverrides") if isinstance(overrides, Mapping) else None):
        for variable in _objects(override.get("environment")):
            if variable.get("name") == ATTEMPT_VARIABLE:
                value = variable.get("value")
                attempt = parse_attempt(value)
                if attempt is None:
                    raise EventError(f"detail.overrides {ATTEMPT_VARIABLE}={str(value)[:40]!r}: not an integer")
                return attempt
    return None


def _exit_codes(detail: Mapping) -> tuple[list[int], list[str]]:
    """The containers' exit codes, and a note for each exitCode that is not one ECS can report (a 32-bit
    integer: Container.exitCode is an Integer in ECS's API, botocore's ecs model, BoxedInteger). Such a
    value is read as no exit code, which retries the job while attempts remain: refusing the event would
    leave the job RUNNING with its task gone, and storing it would fail the ledger write (DynamoDB keeps 38
    digits) on every delivery of the event."""
    codes, unread = [], []
    containers = detail.get("containers")
    for n, container in enumerate(containers if isinstance(containers, list) else []):
        code = container.get("exitCode") if isinstance(container, Mapping) else None
        if code is None:
            continue
        if isinstance(code, int) and not isinstance(code, bool) and EXIT_CODES[0] <= code <= EXIT_CODES[1]:
            codes.append(code)
            continue
        # (repr refuses an integer of more than 4,300 digits: Python's int_max_str_digits)
        shown = f"an integer of {code.bit_length()} bits" if isinstance(code, int) and code.bit_length() > 10_000 \
            else repr(code)[:60]
        unread.append(f"detail.containers[{n}].exitCode={shown}: not a 32-bit integer, read as no exit code")
    return codes, unread


def _text(detail: Mapping, key: str) -> str:
    value = detail.get(key)
    return value if isinstance(value, str) else ""


def parse_event(event: Mapping) -> InstanceEvent | TaskStateChange | RebalanceCheck | Unknown:
    """The event as a typed value; EventError names the missing or bad key."""
    if not isinstance(event, Mapping):
        raise EventError(f"event {str(event)[:80]!r} is not an object")
    detail_type = _require(event, "detail-type", "event")
    if detail_type == SCHEDULED:
        return RebalanceCheck(_time(_require(event, "time", "event"), "event.time"))
    if detail_type not in (INTERRUPTION, REBALANCE, TASK_STATE_CHANGE):
        return Unknown(detail_type)
    detail = _require(event, "detail", "event", Mapping)
    region = _require(event, "region", "event")
    if detail_type in (INTERRUPTION, REBALANCE):
        instance_id = _require(detail, "instance-id", "detail")
        if not _INSTANCE_ID.fullmatch(instance_id):
            raise EventError(f"detail.instance-id={instance_id[:40]!r}: not an EC2 instance id")
        return InstanceEvent(detail_type, region, instance_id, _time(_require(event, "time", "event"), "event.time"))
    started_by = _text(detail, "startedBy")
    exit_codes, unread = _exit_codes(detail)
    stopped_key, stopped = (("detail.stoppedAt", detail["stoppedAt"]) if detail.get("stoppedAt")
                            else ("event.time", event.get("time")))
    return TaskStateChange(
        region=region, cluster_arn=_require(detail, "clusterArn", "detail"), task_arn=_require(detail, "taskArn", "detail"),
        container_instance_arn=_text(detail, "containerInstanceArn"),
        job_id=started_by if is_job_id(started_by) else None, attempt=_attempt(detail),
        last_status=_require(detail, "lastStatus", "detail"), desired_status=_text(detail, "desiredStatus"),
        stop_code=_text(detail, "stopCode"), stopped_reason=_text(detail, "stoppedReason"),
        # The first nonzero exit code if any container failed (a job task has one container); none known
        # when one could not be read and none failed.
        exit_code=next((c for c in exit_codes if c != 0), None if unread else 0) if exit_codes else None,
        stopped_at=_time(stopped, stopped_key).timestamp() if stopped else None, unread=tuple(unread),
    )


@dataclass(frozen=True)
class Decision:
    """One change to one job. `to_state` None means no ledger change (ignore, or only stop a stray task)."""
    job_id: str
    reason: str
    to_state: str | None = None
    expect_state: str | None = None
    expect_attempt: int | None = None
    changes: Mapping[str, Any] = field(default_factory=dict)
    send_message_attempt: int | None = None  # queue {"job_id", "attempt"} after the ledger change
    dead_letter: bool = False  # send {"job_id", "reason", "attempts"} to the DLQ after the ledger change
    stop_task: str | None = None  # a task ARN to stop (in the event's cluster)


def _after_run(record: JobRecord, reason: str, changes: Mapping[str, Any], *,
               checkpoint_saved_at: float | None = None) -> Decision:
    """A run of the job's current attempt ended and may be retried: requeue, or fail when none is left.
    `checkpoint_saved_at`: for a run the machine ended, the newest checkpoint's time (None: none known)."""
    runs = record.runs + (1 if record.state == STARTING else 0)  # STARTING: the task ran, not yet counted
    common = dict(job_id=record.job_id, expect_state=record.state, expect_attempt=record.attempt)
    if saved_during_run(record, checkpoint_saved_at):
        # Progress since the run started: the count of runs in a row without progress starts again.
        saved = datetime.fromtimestamp(checkpoint_saved_at, timezone.utc).isoformat(timespec="seconds")
        return Decision(**common, reason=f"{reason}; attempts given back: checkpoint saved at {saved} in this run",
                        to_state=QUEUED, changes={**changes, "runs": 0}, send_message_attempt=record.attempt)
    if runs < record.spec.max_attempts:
        return Decision(**common, reason=reason, to_state=QUEUED, changes={**changes, "runs": runs},
                        send_message_attempt=record.attempt)
    cause = f"{reason}; attempts exhausted ({runs} of {record.spec.max_attempts})"
    return Decision(**common, reason=cause, to_state=FAILED, changes={**changes, "runs": runs}, dead_letter=True)


def _failed(record: JobRecord, reason: str, changes: Mapping[str, Any]) -> Decision:
    """A run failed in a way retrying does not mend: FAILED now, attempts left or not."""
    return Decision(record.job_id, reason, to_state=FAILED, expect_state=record.state, expect_attempt=record.attempt,
                    changes={**changes, "runs": record.runs + (record.state == STARTING)}, dead_letter=True)


def is_host_failure(event: TaskStateChange) -> bool:
    return event.stopped_reason.startswith(HOST_FAILURE_PREFIX)


def is_move(event: TaskStateChange) -> bool:
    """The scheduler stopped the task to move the job (ECS's stopCode for a StopTask call is UserInitiated)."""
    return event.stop_code == USER_INITIATED and event.stopped_reason.startswith(MOVED_REASON)


def is_notice_stop(event: TaskStateChange) -> bool:
    """This function stopped the task at its machine's spot notice (StopTask with NOTICE_STOP_REASON)."""
    return event.stop_code == USER_INITIATED and event.stopped_reason.startswith(NOTICE_STOP_REASON)


def machine_ended(event: TaskStateChange) -> bool:
    """The task stopped because its machine went (the spot market, a host failure, the spot notice), not
    because of the job."""
    return event.last_status == "STOPPED" and (event.stop_code in SPOT_STOP_CODES or is_host_failure(event)
                                               or is_notice_stop(event))


def saved_during_run(record: JobRecord, checkpoint_saved_at: float | None) -> bool:
    """A checkpoint newer than the start of the job's current run: the run made progress the next resumes.
    A job that never reached RUNNING, or whose start is not in its reasons, saved nothing that counts."""
    started = record.started_at if record.state == RUNNING else None
    return checkpoint_saved_at is not None and started is not None and checkpoint_saved_at > started


def _charge(record: JobRecord, event: TaskStateChange, catalog: Catalog | None) -> dict[str, Any]:
    """The cost of the run that ended, as a ledger change ({} when there is nothing to charge)."""
    if catalog is None or event.stopped_at is None:
        return {}
    cost = run_cost(record, event.stopped_at, catalog)
    return {"cost": cost} if cost is not None else {}


def decide_task_change(event: TaskStateChange, record: JobRecord | None, catalog: Catalog | None = None, *,
                       checkpoint_saved_at: float | None = None) -> Decision:
    """`checkpoint_saved_at`: when the machine ended the run, the newest checkpoint's time (the handler
    reads it only then; None: none, or unknown)."""
    job = event.job_id or "-"
    if record is None or event.attempt is None:
        return Decision(job, "not an mlfleet job task (no ledger entry or no attempt)")
    current = event.attempt == record.attempt and record.state in (STARTING, RUNNING)
    if event.last_status != "STOPPED":
        if current and record.state == STARTING:
            placement = record.placement or Placement(event.region, "", event.cluster_arn, event.container_instance_arn,
                                                      "", "")
            return Decision(record.job_id, f"task {event.last_status.lower()}", to_state=RUNNING, expect_state=STARTING,
                            expect_attempt=record.attempt,
                            changes={"runs": record.runs + 1,
                                     "placement": Placement(**{**vars(placement), "task_arn": event.task_arn})})
        if current:
            return Decision(record.job_id, f"task {event.last_status.lower()}, ledger already RUNNING")
        if event.desired_status == "STOPPED":
            return Decision(record.job_id, "task of a superseded attempt is already stopping")
        return Decision(record.job_id, f"task of attempt {event.attempt} runs but the ledger holds {record.state} "
                                       f"attempt {record.attempt}: stopping it", stop_task=event.task_arn)
    if not current:
        charge = _charge(record, event, catalog) if record.state == CANCELLED and event.attempt == record.attempt else {}
        if charge:
            # Cancelled while it ran: the ledger moved on, but the run still cost what it held until now.
            return Decision(record.job_id, "run of a cancelled job ended: its cost recorded", expect_state=CANCELLED,
                            expect_attempt=record.attempt, changes=charge)
        return Decision(record.job_id, f"stop of attempt {event.attempt} ignored: ledger holds {record.state} "
                                       f"attempt {record.attempt}")
    changes = {**_charge(record, event, catalog), "exit_code": event.exit_code}
    why = f" ({event.stopped_reason})" if event.stopped_reason else ""
    if event.stop_code in SPOT_STOP_CODES:
        return _after_run(record, f"spot interruption ({event.stop_code}: {event.stopped_reason})".strip(), changes,
                          checkpoint_saved_at=checkpoint_saved_at)
    if is_host_failure(event):
        return _after_run(record, f"host failure: {event.stopped_reason}", changes,
                          checkpoint_saved_at=checkpoint_saved_at)
    if is_notice_stop(event):  # the notice stopped the task but could not requeue the job: done here
        return _after_run(record, event.stopped_reason, changes, checkpoint_saved_at=checkpoint_saved_at)
    if is_move(event):
        # The run it stopped was counted when it started (RUNNING: runs + 1) and the restart counts one
        # again: it is given back, so that a move uses no attempt.
        runs = max(0, record.runs - (record.state == RUNNING))
        return Decision(record.job_id, f"{event.stopped_reason}: requeued, attempt not counted", to_state=QUEUED,
                        expect_state=record.state, expect_attempt=record.attempt,
                        changes={**changes, "runs": runs}, send_message_attempt=record.attempt)
    if event.exit_code == 0:
        return Decision(record.job_id, "exit code 0", to_state=SUCCEEDED, expect_state=record.state,
                        expect_attempt=record.attempt,
                        changes={**changes, "runs": record.runs + (record.state == STARTING)})
    if event.exit_code is None:
        return _after_run(record, f"no exit code{why}", changes)
    retried = record.spec.retry_on_exit_codes
    if event.exit_code in retried:
        return _after_run(record, f"exit code {event.exit_code}{why}: retried (in retry_on_exit_codes)", changes)
    rule = f"retry_on_exit_codes is {list(retried)}" if retried else "no retry_on_exit_codes"
    return _failed(record, f"exit code {event.exit_code}{why}: not retried ({rule})", changes)


def decide_interruption(instance_id: str, records: Sequence[JobRecord], *, now: float | None = None,
                        catalog: Catalog | None = None,
                        checkpoints_saved_at: Mapping[str, float] | None = None) -> list[Decision]:
    """Every job started on the instance goes back to the queue (or fails, with no attempt left), its run
    charged up to the warning (`now`). `checkpoints_saved_at`: job id -> its newest checkpoint's time."""
    decisions = []
    for record in records:
        if record.state not in (STARTING, RUNNING) or record.placement is None or record.placement.instance_id != instance_id:
            continue
        cost = run_cost(record, now, catalog) if now is not None and catalog is not None else None
        decision = _after_run(record, f"{NOTICE_STOP_REASON}{instance_id}", {"cost": cost} if cost else {},
                              checkpoint_saved_at=(checkpoints_saved_at or {}).get(record.job_id))
        task = record.placement.task_arn
        decisions.append(Decision(**{**vars(decision), "stop_task": task}))
    return decisions


def expired_rebalance_tags(tags: Mapping[str, str], now: datetime, timeout: timedelta) -> list[str]:
    """Instances whose rebalance tag is older than `timeout` (or unreadable): the recommendation is undone."""
    expired = []
    for instance_id, value in sorted(tags.items()):
        try:
            tagged = _time(value, "tag")
        except EventError:
            expired.append(instance_id)
            continue
        if tagged.tzinfo is None or now - tagged >= timeout:
            expired.append(instance_id)
    return expired

