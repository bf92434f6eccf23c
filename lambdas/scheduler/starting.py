"""One attempt, one task: the scheduler's claim of a job, its StartTask, and the recovery of claims a run
left unsettled.

A placement is claimed in the ledger before StartTask (QUEUED(n) -> STARTING(n+1), conditional on the
attempt), so a message delivered twice or a second run can never start the same attempt twice; the
claim then moves on by what StartTask did: RUNNING with the task ARN, back to QUEUED to be placed again,
FAILED (to the dead-letter queue) when ECS can never start it, or left STARTING when it may have
started. A claim not confirmed within STARTING_GRACE is looked up by its task (tagged with the attempt)
and confirmed or released by a later run.
"""

from __future__ import annotations

import math
from datetime import timedelta
from typing import TYPE_CHECKING

from botocore.exceptions import BotoCoreError, ClientError

from ..common.aws import client, single_attempt_client
from ..common.errors import describe, error_code, is_transient, per_item
from ..common.logs import log_decision
from ..jobs import dead_letters
from ..jobs import ledger as L
from ..jobs.fleets import FleetConfig
from ..jobs.spec import ATTEMPT_VARIABLE, parse_attempt
from ..jobs.quarantine import Quarantine
from . import actions, state

if TYPE_CHECKING:  # the handler's settings; imported for the annotations only (the handler imports this module)
    from .handler import Settings

# A claim not confirmed by a started task within this long is looked up and released.
STARTING_GRACE = timedelta(minutes=5)
# A job StartTask keeps refusing (its machine vanished, its image is unusable) fails after this many.
MAX_START_FAILURES = 5
# Refusals for the machine (actions.MACHINE_REFUSED) do not count as failed starts: each marks its machine,
# which no run places on for state.START_REFUSED_HOLD and which is released once empty. A job refused by this
# many machines is the problem itself (it asks for more than the machines register) and fails, so that it
# does not buy and refuse machines without end.
MAX_MACHINE_REFUSALS = 10


def recover_starting(ledger: L.Ledger, settings: Settings, now: float, summary: dict) -> int:
    """Jobs claimed more than STARTING_GRACE ago without a confirmed task: confirm or release them."""
    starting: list[L.JobRecord] = []
    with per_item("read-starting-failed", summary["errors"], state=L.STARTING):
        starting = ledger.by_state(L.STARTING)
    recovered = 0
    for record in starting:
        if now - record.updated_at < STARTING_GRACE.total_seconds():
            continue
        with per_item("recover-starting-failed", summary["errors"], job_id=record.job_id, attempt=record.attempt,
                      action="left STARTING for the next run"):
            recovered += recover_one(ledger, settings, record, now)
    return recovered


def tasks_of_attempt(record: L.JobRecord) -> list[dict]:
    """The job's running tasks for its current attempt (none when its cluster is gone)."""
    placement = record.placement
    if placement is None:
        return []  # claimed without a placement (written by hand): no task can be looked up, none was started
    ecs = client("ecs", placement.region)
    try:
        arns = ecs.list_tasks(cluster=placement.cluster, startedBy=record.job_id)["taskArns"]
    except ecs.exceptions.ClusterNotFoundException:
        return []  # the cluster went away, and every task with it
    tasks = ecs.describe_tasks(cluster=placement.cluster, tasks=arns)["tasks"] if arns else []
    return [t for t in tasks if task_attempt(t) == record.attempt]


def recover_one(ledger: L.Ledger, settings: Settings, record: L.JobRecord, now: float) -> bool:
    mine = sorted(tasks_of_attempt(record), key=lambda t: t.get("createdAt") or 0)
    if mine:
        # One attempt, one task: a second one (a StartTask resent by someone) is stopped first, so that a
        # failure here leaves the job STARTING and the next run tries again.
        for extra in mine[1:]:
            actions.stop_task(client("ecs", record.placement.region), record.placement.cluster, extra["taskArn"],
                              f"second task of {record.job_id} attempt {record.attempt}")
        placement = L.Placement(**{**vars(record.placement), "task_arn": mine[0]["taskArn"]})
        outcome = ledger.transition(record.job_id, L.RUNNING, expect_states=[L.STARTING], expect_attempt=record.attempt,
                                    reason="task found after an unconfirmed start", now=now, current=record,
                                    runs=record.runs + 1, placement=placement)
    else:
        failures = record.start_failures + 1
        reason = f"start not confirmed within {STARTING_GRACE}"
        if failures >= MAX_START_FAILURES:
            outcome = fail_job(ledger, settings, record, record.attempt, f"{reason} ({failures} failed starts)", now,
                               start_failures=failures)
        else:
            outcome = ledger.transition(record.job_id, L.QUEUED, expect_states=[L.STARTING],
                                        expect_attempt=record.attempt, reason=reason, now=now, current=record,
                                        start_failures=failures)
    log_decision("recover-starting", job_id=record.job_id, attempt=record.attempt, task_found=bool(mine),
                 tasks=len(mine), applied=outcome.applied, to_state=outcome.record.state if outcome.record else None)
    return outcome.applied


def task_attempt(task: dict) -> int | None:
    for override in (task.get("overrides") or {}).get("containerOverrides", []):
        for variable in override.get("environment", []):
            if variable.get("name") == ATTEMPT_VARIABLE:
                return parse_attempt(str(variable.get("value", "")))
    return None


def fail_job(ledger: L.Ledger, settings: Settings, record: L.JobRecord, attempt: int, reason: str, now: float,
             **changes) -> L.Outcome:
    """STARTING -> FAILED with the reason, and the job to the dead-letter queue: the message is owed before
    the write, so a send that fails is made by a later run's sweep (lambdas/jobs/dead_letters.py)."""
    outbox = dead_letters.DeadLetters.of(ledger, client("sqs"), settings.jobs_dlq_url)
    debt = outbox.owe(record.job_id, L.FAILED, attempt, now)
    outcome = ledger.transition(record.job_id, L.FAILED, expect_states=[L.STARTING], expect_attempt=attempt,
                                reason=reason, now=now, current=record, **changes)
    outbox.settle(debt, outcome.applied, reason)
    return outcome


def start_one(settings: Settings, ledger: L.Ledger, quarantine: Quarantine, record: L.JobRecord,
              machine: state.MachineView, fleet: FleetConfig, definitions: actions.TaskDefinitions, now: float,
              summary: dict) -> str | None:
    """Claim the job (QUEUED -> STARTING, attempt + 1), start its task, and settle the claim by the outcome.
    Returns StartTask's outcome (actions.STARTED ... UNKNOWN), or None when the job was not claimed."""
    attempt = record.attempt + 1
    # The price paid is recorded with the placement: what the job's runs cost is charged at it (lambdas/jobs/costs.py).
    placement = L.Placement(region=machine.region, fleet=machine.fleet, cluster=machine.cluster,
                            container_instance_arn=machine.container_instance_arn, instance_id=machine.instance_id,
                            instance_type=machine.instance_type, lifecycle=machine.lifecycle,
                            price_per_hour=machine.price_per_hour if math.isfinite(machine.price_per_hour) else None,
                            placed_at=now)
    try:
        # From the index read: a stale view fails the write's version condition, changing nothing.
        claim = ledger.transition(record.job_id, L.STARTING, expect_states=[L.QUEUED], expect_attempt=record.attempt,
                                  reason=f"placed on {machine.instance_id} ({machine.instance_type}, {machine.region})",
                                  now=now, current=record, attempt=attempt, placement=placement)
    except ClientError as error:
        if error_code(error) != "ValidationException":
            raise  # logged by the caller, tried again next run; the job is QUEUED (or STARTING: recovered)
        # DynamoDB will never take this record back (an item over 400 KB, an invalid attribute): park it.
        if quarantine.item(L.Undecodable(record.job_id, L.encode(record), f"claim refused: {describe(error)}"), now):
            summary["quarantined"].append(record.job_id)
        return None
    if not claim.applied:
        log_decision("skip-claimed", job_id=record.job_id, attempt=attempt, detail=claim.detail)
        return None
    image = record.spec.image_for(machine.region)
    try:
        revision = definitions.revision_for(fleet.task_family, image, record.spec.secrets, record.spec)
    except (ClientError, BotoCoreError) as error:
        started = actions.Started(None, f"task definition for {image!r}: {describe(error)}",
                                  actions.RETRY if is_transient(error) else actions.REFUSED)
    else:
        started = actions.start_job(
            single_attempt_client("ecs", machine.region), cluster=machine.cluster, task_definition_arn=revision.arn,
            container_instance_arn=machine.container_instance_arn, record=record, attempt=attempt,
            container_name=revision.container_name, environment=settings.environment,
            checkpoint_uri=settings.checkpoint_uri(machine.region, record.job_id))
    settle_start(settings, ledger, claim.record, placement, started, now, summary)
    return started.outcome


def settle_start(settings: Settings, ledger: L.Ledger, claimed: L.JobRecord, placement: L.Placement,
                 started: actions.Started, now: float, summary: dict) -> None:
    """Move the claim on by what StartTask did (actions.STARTED ... UNKNOWN)."""
    job_id, attempt = claimed.job_id, claimed.attempt
    if started.outcome == actions.STARTED:
        done = ledger.transition(job_id, L.RUNNING, expect_states=[L.STARTING], expect_attempt=attempt,
                                 reason="task started", now=now, current=claimed, runs=claimed.runs + 1,
                                 placement=L.Placement(**{**vars(placement), "task_arn": started.task_arn}))
        if not done.applied and done.record is not None and done.record.state == L.CANCELLED:
            # Should this stop fail, the task's own RUNNING event makes the job-events function stop it (a task
            # of a job the ledger no longer runs); the start itself happened and is logged below.
            with per_item("stop-cancelled-failed", summary["errors"], job_id=job_id, task_arn=started.task_arn,
                          action="the task's state event stops it (job events)"):
                actions.stop_task(client("ecs", placement.region), placement.cluster, started.task_arn,
                                  "job cancelled while starting")
        log_decision("start", job_id=job_id, attempt=attempt, task_arn=started.task_arn,
                     instance_id=placement.instance_id, region=placement.region, recorded=done.applied)
        summary["started"].append(job_id)
        return
    summary["start_failed"].append(job_id)
    if started.outcome == actions.UNKNOWN:
        # Maybe started: releasing the claim could start the attempt twice. The recovery of STARTING jobs
        # looks for its task after STARTING_GRACE (and the task's own state events confirm it sooner).
        log_decision("start-unknown", job_id=job_id, attempt=attempt, reason=started.failure,
                     action=f"left STARTING; looked up after {STARTING_GRACE}")
        return
    # Nothing done, or refused for the machine (which is marked, not the job): not a failed start of the job.
    failures = claimed.start_failures + (0 if started.outcome in (actions.RETRY, actions.MACHINE_REFUSED) else 1)
    refusals = claimed.machine_refusals + (1 if started.outcome == actions.MACHINE_REFUSED else 0)
    if started.outcome == actions.PERMANENT or failures >= MAX_START_FAILURES or refusals >= MAX_MACHINE_REFUSALS:
        if started.outcome == actions.PERMANENT:
            reason = started.failure
        elif failures >= MAX_START_FAILURES:
            reason = f"{started.failure} ({failures} failed starts)"
        else:
            reason = (f"{started.failure} ({refusals} starts refused for their machines: the job may ask for more "
                      "than the machines register)")
        outcome = fail_job(ledger, settings, claimed, attempt, reason, now, start_failures=failures,
                           machine_refusals=refusals)
    else:
        outcome = ledger.transition(job_id, L.QUEUED, expect_states=[L.STARTING], expect_attempt=attempt,
                                    reason=started.failure, now=now, current=claimed, start_failures=failures,
                                    machine_refusals=refusals)
    log_decision("start-failed", job_id=job_id, attempt=attempt, reason=started.failure, outcome=started.outcome,
                 start_failures=failures, machine_refusals=refusals,
                 to_state=outcome.record.state if outcome.record else None,
                 applied=outcome.applied)
