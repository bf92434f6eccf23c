"""Job-event decisions, pure: parametrized cases and a property that no event sequence loses a job."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta, timezone

import botocore.session
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lambdas.job_events import decide as D
from lambdas.jobs import ledger as L
from lambdas.jobs.checkpoints import MOVED_REASON
from lambdas.jobs.spec import JobSpec

JOB = "sub-20261122191103-0a1b2c-00007"
TASK = "arn:aws:ecs:us-east-1:123456789012:task/mlfleet-dev/abc"
PLACE = L.Placement("us-east-1", "gpu1", "mlfleet-dev", "arn:ci/1", "i-1", "g5.xlarge", TASK)


def record(state=L.RUNNING, attempt=1, runs=1, max_attempts=3, placement=PLACE, retry=()) -> L.JobRecord:
    spec = JobSpec(image="img", command=("run",), gpus=1, vcpus=1.0, memory_mib=1024, max_attempts=max_attempts,
                   retry_on_exit_codes=retry)
    return L.JobRecord(job_id=JOB, submission_id=JOB[:-6], index=7, state=state, attempt=attempt, runs=runs,
                       start_failures=0, submitted_at=0.0, updated_at=0.0, spec=spec, placement=placement)


def task_event(attempt=1, last="STOPPED", exit_code=0, stop_code="EssentialContainerExited", desired="STOPPED",
               started_by=JOB, reason="") -> dict:
    containers = [{"name": "job", **({"exitCode": exit_code} if exit_code is not None else {})}]
    return {"detail-type": "ECS Task State Change", "source": "aws.ecs", "region": "us-east-1",
            "time": "2026-11-22T12:00:00Z",
            "detail": {"clusterArn": "arn:aws:ecs:us-east-1:123456789012:cluster/mlfleet-dev", "taskArn": TASK,
                       "containerInstanceArn": "arn:ci/1", "startedBy": started_by, "lastStatus": last,
                       "desiredStatus": desired, "stopCode": stop_code if last == "STOPPED" else "",
                       "stoppedReason": reason, "containers": containers,
                       "overrides": {"containerOverrides": [{"name": "job", "environment": [
                           {"name": "MLFLEET_JOB_ID", "value": started_by},
                           {"name": "MLFLEET_ATTEMPT", "value": str(attempt)}]}]}}}


HOST_GONE = "Host EC2 (instance i-1) terminated."


@pytest.mark.parametrize("event, rec, to_state, message, dead, stop", [
    (task_event(exit_code=0), record(), L.SUCCEEDED, None, False, None),
    # The retry rules: listed exit codes are retried while attempts remain; any other fails at once.
    (task_event(exit_code=1), record(runs=1), L.FAILED, None, True, None),
    (task_event(exit_code=1), record(runs=1, retry=(1,)), L.QUEUED, 1, False, None),
    (task_event(exit_code=137, reason="OOM"), record(runs=1, retry=(143,)), L.FAILED, None, True, None),
    (task_event(exit_code=137, reason="OOM"), record(runs=1, retry=(137, 143)), L.QUEUED, 1, False, None),
    (task_event(exit_code=137, reason="OOM"), record(runs=3, retry=(137,)), L.FAILED, None, True, None),
    # Spot interruptions and host failures are retried whatever the exit code, while attempts remain.
    (task_event(exit_code=0, stop_code="SpotInterruption"), record(), L.QUEUED, 1, False, None),
    (task_event(exit_code=2, stop_code="SpotInterruption"), record(), L.QUEUED, 1, False, None),
    (task_event(exit_code=143, stop_code="TerminationNotice"), record(runs=3), L.FAILED, None, True, None),
    (task_event(exit_code=143, reason=HOST_GONE), record(), L.QUEUED, 1, False, None),
    (task_event(exit_code=None, reason=HOST_GONE), record(runs=3), L.FAILED, None, True, None),
    (task_event(exit_code=None, reason="CannotPullContainerError"), record(), L.QUEUED, 1, False, None),
    # Stopped by job-events at the spot notice (which could not requeue the job): the machine ended the run.
    (task_event(exit_code=143, stop_code="UserInitiated", reason="spot interruption of i-1"), record(), L.QUEUED, 1,
     False, None),
    (task_event(exit_code=0, stop_code="UserInitiated", reason="spot interruption of i-1"), record(runs=3), L.FAILED,
     None, True, None),
    (task_event(exit_code=0), record(state=L.STARTING, runs=0), L.SUCCEEDED, None, False, None),
    (task_event(exit_code=1), record(state=L.STARTING, runs=0, max_attempts=1), L.FAILED, None, True, None),
    (task_event(attempt=1, exit_code=1), record(state=L.RUNNING, attempt=2), None, None, False, None),
    (task_event(exit_code=1), record(state=L.CANCELLED), None, None, False, None),
    (task_event(exit_code=1), record(state=L.QUEUED), None, None, False, None),
    (task_event(last="RUNNING", desired="RUNNING"), record(state=L.STARTING, runs=0), L.RUNNING, None, False, None),
    (task_event(last="RUNNING", desired="RUNNING"), record(), None, None, False, None),
    (task_event(attempt=1, last="RUNNING", desired="RUNNING"), record(state=L.QUEUED), None, None, False, TASK),
    (task_event(attempt=1, last="RUNNING", desired="RUNNING"), record(state=L.CANCELLED), None, None, False, TASK),
    (task_event(attempt=1, last="RUNNING", desired="STOPPED"), record(state=L.QUEUED), None, None, False, None),
    (task_event(started_by="someone-else"), None, None, None, False, None),
])
def test_task_state_change(event, rec, to_state, message, dead, stop):
    parsed = D.parse_event(event)
    decision = D.decide_task_change(parsed, rec)
    assert (decision.to_state, decision.send_message_attempt, decision.dead_letter, decision.stop_task) == (
        to_state, message, dead, stop)
    if to_state == L.RUNNING:
        assert decision.changes["placement"].task_arn == TASK and decision.changes["runs"] == 1
    exit_code = event["detail"]["containers"][0].get("exitCode")
    if to_state in (L.QUEUED, L.FAILED, L.SUCCEEDED):
        assert decision.changes["exit_code"] == exit_code  # the record keeps the exit code of the run
    if dead:
        retryable = (exit_code in rec.spec.retry_on_exit_codes or exit_code is None or parsed.stop_code in
                     D.SPOT_STOP_CODES or D.is_host_failure(parsed) or D.is_notice_stop(parsed))
        assert ("attempts exhausted" if retryable else "not retried") in decision.reason
        if not retryable:
            assert decision.reason.startswith(f"exit code {exit_code}") and decision.changes["runs"] == rec.runs + (
                rec.state == L.STARTING)


def test_a_failure_that_is_not_retried_names_the_code_the_reason_and_the_rule():
    decision = D.decide_task_change(D.parse_event(task_event(exit_code=137, reason="Essential container in task exited")),
                                    record(runs=1, retry=(143,)))
    assert decision.reason == ("exit code 137 (Essential container in task exited): not retried "
                               "(retry_on_exit_codes is [143])")
    assert decision.to_state == L.FAILED and decision.dead_letter


def test_interruption_requeues_the_jobs_on_that_instance_only():
    on_it = [record(), replace(record(state=L.STARTING, runs=0), job_id=JOB[:-1] + "8"),
             replace(record(runs=3), job_id=JOB[:-1] + "9")]
    elsewhere = replace(record(placement=replace(PLACE, instance_id="i-2")), job_id=JOB[:-1] + "6")
    decisions = {d.job_id: d for d in D.decide_interruption("i-1", [*on_it, elsewhere])}
    assert set(decisions) == {r.job_id for r in on_it}
    assert decisions[JOB].to_state == L.QUEUED and decisions[JOB].changes == {"runs": 1}  # no catalog: no cost
    assert decisions[JOB[:-1] + "8"].changes == {"runs": 1} and decisions[JOB[:-1] + "8"].send_message_attempt == 1
    assert decisions[JOB[:-1] + "9"].to_state == L.FAILED and decisions[JOB[:-1] + "9"].dead_letter
    assert all(d.stop_task == TASK for d in decisions.values())


STARTED = 1_000.0  # the current run's start, as its RUNNING reason records it


def running(runs=1, max_attempts=3, started=STARTED) -> L.JobRecord:
    reasons = ({"state": L.RUNNING, "at": started, "reason": "task running"},) if started is not None else ()
    return replace(record(runs=runs, max_attempts=max_attempts), reasons=reasons)


@pytest.mark.parametrize("event", [
    task_event(exit_code=143, stop_code="SpotInterruption"),
    task_event(exit_code=None, stop_code="TerminationNotice"),
    task_event(exit_code=143, reason=HOST_GONE),
], ids=["spot", "termination-notice", "host-failure"])
@pytest.mark.parametrize("rec, saved, counted", [
    (running(runs=1), STARTED + 60, False),  # a checkpoint in this run: the attempts are given back
    (running(runs=3), STARTED + 60, False),  # ... even after the last one: it made progress, it is requeued
    (running(runs=1), STARTED - 60, True),  # only a checkpoint of an earlier run: counted
    (running(runs=1), STARTED, True),  # saved at the very start: nothing done in the run
    (running(runs=1), None, True),  # none, or it could not be read
    (running(runs=1, started=None), STARTED + 60, True),  # the run's start is unknown
    (running(runs=3), None, True),  # counted, and the last: dead-lettered
])
def test_a_run_the_machine_ended_after_a_checkpoint_gives_the_attempts_back(event, rec, saved, counted):
    decision = D.decide_task_change(D.parse_event(event), rec, checkpoint_saved_at=saved)
    runs = rec.runs if counted else 0
    assert decision.changes["runs"] == runs
    exhausted = counted and runs >= rec.spec.max_attempts
    assert (decision.to_state, decision.dead_letter) == ((L.FAILED, True) if exhausted else (L.QUEUED, False))
    assert ("attempts given back: checkpoint saved at" in decision.reason) is not counted


@pytest.mark.parametrize("exit_code, retry, to_state", [(0, (), L.SUCCEEDED), (1, (), L.FAILED), (1, (1,), L.QUEUED)])
def test_a_checkpoint_spares_no_attempt_when_the_job_itself_ended_the_run(exit_code, retry, to_state):
    rec = replace(running(runs=1), spec=replace(running().spec, retry_on_exit_codes=retry))
    decision = D.decide_task_change(D.parse_event(task_event(exit_code=exit_code)), rec, checkpoint_saved_at=STARTED + 60)
    assert decision.to_state == to_state and decision.changes["runs"] == 1


def test_an_interruption_warning_spares_the_attempt_of_jobs_that_saved_in_their_run():
    saved, unsaved = running(runs=3), replace(running(runs=3), job_id=JOB[:-1] + "8")
    decisions = {d.job_id: d for d in D.decide_interruption("i-1", [saved, unsaved],
                                                            checkpoints_saved_at={JOB: STARTED + 600})}
    assert decisions[JOB].to_state == L.QUEUED and decisions[JOB].changes == {"runs": 0}
    assert decisions[JOB[:-1] + "8"].to_state == L.FAILED and decisions[JOB[:-1] + "8"].dead_letter


@pytest.mark.parametrize("event, fragment", [
    ({}, "event.detail-type is missing"),
    ({"detail-type": "ECS Task State Change", "region": "us-east-1"}, "event.detail is missing"),
    ({"detail-type": "ECS Task State Change", "region": "us-east-1", "detail": {"taskArn": "t"}}, "detail.clusterArn"),
    ({"detail-type": "EC2 Spot Instance Interruption Warning", "region": "us-east-1", "time": "2026-01-01T00:00:00Z",
      "detail": {"instance-action": "terminate"}}, "detail.instance-id is missing"),
    ({"detail-type": "EC2 Instance Rebalance Recommendation", "region": "us-east-1", "time": "yesterday",
      "detail": {"instance-id": "i-0123456789abcdef0"}}, "event.time='yesterday'"),
    ({"detail-type": "EC2 Spot Instance Interruption Warning", "region": "us-east-1", "time": "2026-01-01T00:00:00Z",
      "detail": {"instance-id": "i-\x1f"}}, "not an EC2 instance id"),
    ("a string", "is not an object"),
    # Characters str.isdigit() accepts and int() does not, and more digits than int() converts: the
    # parser raised ValueError naming neither the key nor the event.
    (task_event(attempt="\u00b2"), "MLFLEET_ATTEMPT='\u00b2': not an integer"),
    (task_event(attempt="\u0663"), "MLFLEET_ATTEMPT='\u0663': not an integer"),
    (task_event(attempt="9" * 5000), "MLFLEET_ATTEMPT='99999"),
    # Without stoppedAt the event's own time is read: the error names that key.
    ({"detail-type": "ECS Task State Change", "region": "us-east-1", "time": 5,
      "detail": {k: v for k, v in task_event()["detail"].items() if k != "stoppedAt"}}, "event.time='5'"),
])
def test_malformed_events_are_refused_with_the_key(event, fragment):
    with pytest.raises(D.EventError, match=fragment.replace("(", r"\(").replace(".", r"\.")):
        D.parse_event(event)


@pytest.mark.parametrize("exit_code, shown", [
    (10**40, "10000000000000000000000000000000000000000"), (2**31, "2147483648"), (-2**31 - 1, "-2147483649"),
    (1.5, "1.5"), ("1", "'1'"), (True, "True"), ({"code": 1}, "{'code': 1}")])
def test_an_exit_code_ecs_cannot_report_is_read_as_none_and_named(exit_code, shown):
    """Found by tests/jobs/test_event_properties.py: exitCode 10**40 parsed, and the ledger write of the
    job's end failed on DynamoDB's 38 digits (decimal.Rounded) on every delivery, so the event was retried,
    then dropped, and the job stayed RUNNING with its task gone. ECS's exitCode is a 32-bit integer; any
    other value is read as no exit code (the job is retried while attempts remain), with a note naming the key."""
    event = D.parse_event(task_event(exit_code=exit_code))
    assert event.exit_code is None
    assert event.unread == (f"detail.containers[0].exitCode={shown}: not a 32-bit integer, read as no exit code",)
    assert D.parse_event(task_event(exit_code=-2**31)).exit_code == -2**31 and not D.parse_event(task_event()).unread


def test_unknown_detail_type_is_ignored():
    assert D.parse_event({"detail-type": "EC2 Instance State-change Notification"}) == D.Unknown(
        "EC2 Instance State-change Notification")


def test_expired_rebalance_tags():
    now = datetime(2026, 11, 22, 12, tzinfo=timezone.utc)
    tags = {"i-old": (now - timedelta(minutes=31)).isoformat(), "i-new": (now - timedelta(minutes=5)).isoformat(),
            "i-bad": "soon", "i-edge": (now - timedelta(minutes=30)).isoformat()}
    assert D.expired_rebalance_tags(tags, now, timedelta(minutes=30)) == ["i-bad", "i-edge", "i-old"]


# --- No event sequence loses a job -------------------------------------------------------------------
# A model of the ledger's conditional transition (state and attempt must match) and of the scheduler's
# claim-then-start, driven by arbitrary interleavings of duplicated, late and out-of-order events.

class World:
    def __init__(self, max_attempts: int):
        self.record = replace(record(state=L.QUEUED, attempt=0, runs=0, max_attempts=max_attempts), placement=None)
        self.messages: list[int] = [0]
        self.dead: list[str] = []
        self.tasks: dict[int, str] = {}  # attempt -> "running" | "stopped"
        self.started: list[int] = []
        self.exits: dict[int, tuple[int, bool]] = {}  # attempt -> (exit code, spot) of its stopped task

    def apply(self, decision: D.Decision) -> None:
        r = self.record
        if decision.to_state is not None and r.state == decision.expect_state and r.attempt == decision.expect_attempt:
            assert decision.to_state in L.TRANSITIONS[r.state]
            self.record = replace(r, state=decision.to_state, **decision.changes)
            if decision.send_message_attempt is not None:
                self.messages.append(decision.send_message_attempt)
            if decision.dead_letter:
                self.dead.append(decision.reason)
        if decision.stop_task:
            attempt = int(decision.stop_task.rsplit("/", 1)[1])
            self.tasks[attempt] = "stopped"

    def schedule(self, confirm: bool) -> None:
        r = self.record
        if r.state != L.QUEUED:
            return
        attempt = r.attempt + 1
        task = f"{TASK[:-3]}{attempt}"
        self.record = replace(r, state=L.STARTING, attempt=attempt, placement=replace(PLACE, task_arn=None))
        assert attempt not in self.started  # one task per attempt, ever
        self.started.append(attempt)
        self.tasks[attempt] = "running"
        if confirm:
            self.record = replace(self.record, state=L.RUNNING, runs=self.record.runs + 1,
                                  placement=replace(PLACE, task_arn=task))

    def task_event(self, attempt: int, last: str, exit_code: int, spot: bool) -> None:
        if attempt not in self.tasks:
            return
        if last == "STOPPED":
            self.tasks[attempt] = "stopped"
            self.exits.setdefault(attempt, (exit_code, spot))
        event = task_event(attempt=attempt, last=last, exit_code=exit_code,
                           stop_code="SpotInterruption" if spot else "EssentialContainerExited",
                           desired="STOPPED" if self.tasks[attempt] == "stopped" else "RUNNING")
        event["detail"]["taskArn"] = f"{TASK[:-3]}{attempt}"
        self.apply(D.decide_task_change(D.parse_event(event), self.record))

    def interrupt(self) -> None:
        for decision in D.decide_interruption("i-1", [self.record]):
            self.apply(decision)

    def check(self) -> None:
        r = self.record
        assert r.state in L.STATES
        assert r.runs <= r.spec.max_attempts
        assert (r.state == L.FAILED) == (len(self.dead) == 1) and len(self.dead) <= 1
        if r.state == L.QUEUED:
            assert r.attempt in self.messages  # back in the queue with a message for its attempt
        if r.state == L.SUCCEEDED:
            assert self.exits.get(r.attempt) == (0, False)  # only its own attempt's clean exit counts


operations = st.lists(st.one_of(
    st.tuples(st.just("schedule"), st.booleans()),
    # An event for the current attempt, or one or two attempts back (late, duplicated, out of order).
    st.tuples(st.just("event"), st.integers(0, 2), st.sampled_from(["PENDING", "RUNNING", "STOPPED"]),
              st.sampled_from([0, 1, 137]), st.booleans()),
    st.tuples(st.just("interrupt")),
), max_size=40)


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 4), operations)
def test_no_event_sequence_loses_a_job(max_attempts, ops):
    world = World(max_attempts)
    for op in ops:
        if op[0] == "schedule":
            world.schedule(op[1])
        elif op[0] == "event":
            world.task_event(world.record.attempt - op[1], *op[2:])
        else:
            world.interrupt()
        world.check()
    # Let the world settle: run the scheduler and let every current task finish; the job must end
    # SUCCEEDED, or FAILED with exactly one dead-letter entry. Nothing is left in between.
    for _ in range(4 * max_attempts + 4):
        if world.record.state in L.TERMINAL:
            break
        world.schedule(confirm=True)
        world.task_event(world.record.attempt, "STOPPED", 1, False)
        world.check()
    assert world.record.state in (L.SUCCEEDED, L.FAILED)
    assert world.record.state != L.FAILED or len(world.dead) == 1


MOVED = f"{MOVED_REASON} i-0abc1234def567890"


@pytest.mark.parametrize("exit_code", [143, 0, 1, None], ids=["sigterm", "exit-0", "exit-1", "no-exit-code"])
@pytest.mark.parametrize("runs", [1, 3], ids=["attempts-left", "last-attempt"])
def test_a_move_requeues_the_job_without_counting_the_attempt(exit_code, runs):
    """The scheduler stopped the task to move the job (planning/moves.py): whatever the exit code, and on its
    last attempt too, the job goes back to the queue with its runs as they were before the run the move
    stopped (counted when it started: the restart counts it again)."""
    event = D.parse_event(task_event(exit_code=exit_code, stop_code="UserInitiated", reason=MOVED))
    decision = D.decide_task_change(event, record(runs=runs))
    assert (decision.to_state, decision.send_message_attempt, decision.dead_letter) == (L.QUEUED, 1, False)
    assert decision.changes["runs"] == runs - 1
    assert decision.reason.startswith(MOVED_REASON)


@pytest.mark.parametrize("max_attempts", [1, 2, 3])
def test_a_moved_job_has_the_attempts_it_would_have_had_unmoved(max_attempts):
    """A move's restart is a run started (lambdas/scheduler/starting.py counts runs + 1 at RUNNING), so the
    move gives back the run it stopped. Before, the requeue kept `runs` and the restart counted one more: a
    job of max_attempts 2 moved once was FAILED at its first spot interruption, and one of max_attempts 1
    ran with runs 2 of 1 (found by tests/jobs/test_scheduler_moves_properties.py)."""
    running = record(runs=1, max_attempts=max_attempts)
    moved = D.decide_task_change(D.parse_event(task_event(exit_code=143, stop_code="UserInitiated", reason=MOVED)),
                                 running)
    restarted = record(attempt=2, runs=moved.changes["runs"] + 1, max_attempts=max_attempts)
    assert restarted.runs == running.runs <= max_attempts
    spot = D.parse_event(task_event(attempt=2, exit_code=143, stop_code="SpotInterruption", reason="interrupted"))
    unmoved = D.decide_task_change(D.parse_event(task_event(exit_code=143, stop_code="SpotInterruption",
                                                            reason="interrupted")), running)
    interrupted = D.decide_task_change(spot, restarted)
    assert (interrupted.to_state, interrupted.changes["runs"]) == (unmoved.to_state, unmoved.changes["runs"])


@pytest.mark.parametrize("stop_code, reason", [("UserInitiated", "stopped by an operator"),
                                               ("EssentialContainerExited", MOVED)],
                         ids=["other-stop-task", "reason-without-stop-task"])
def test_only_the_schedulers_stop_with_its_reason_is_a_move(stop_code, reason):
    event = D.parse_event(task_event(exit_code=1, stop_code=stop_code, reason=reason))
    decision = D.decide_task_change(event, record(runs=1))
    assert (decision.to_state, decision.dead_letter) == (L.FAILED, True)


def test_the_stop_codes_and_the_stop_reason_are_ecs_own():
    """The rule's owner is ECS: botocore's ecs model lists the stop codes decide.py reads (TaskStopCode), and
    StopTask takes the `reason` that the move stage's MOVED_REASON travels in (shown as stoppedReason)."""
    model = botocore.session.get_session().get_service_model("ecs")
    assert {D.USER_INITIATED, *D.SPOT_STOP_CODES} <= set(model.shape_for("TaskStopCode").enum)
    assert "reason" in model.operation_model("StopTask").input_shape.members
    assert "stoppedReason" in model.shape_for("Task").members
