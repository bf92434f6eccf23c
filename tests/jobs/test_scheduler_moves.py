"""Moving a checkpointing job into room another machine pays for (planning/moves.py), end to end against moto:
the scheduler run stops its task with the move reason and the instance it goes to
(lambdas/scheduler/moving.py); the job-events function, given the task's stop, requeues it without counting
an attempt; the next run starts it on that instance.

Where moto differs from AWS: moto's container instances report no GPUs, so the scheduler counts them from the
catalog and the tasks it knows (as it does in AWS, where it never trusts the reported ones alone). moto's
StopTask keeps the reason as the task's stoppedReason, as ECS does; the EventBridge event ECS would send is
built here from the task.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import boto3
from conftest import CLUSTER, ENV, FLEET_TYPE, HOME, aws_client, build_fleet, fleets_json, open_admission
from ecs_agent import stopped, stopping
from test_job_events_handler import settings as event_settings
from test_scheduler_release_inputs import run_held

from lambdas.common.catalog import load_catalog
from lambdas.job_events import handler as job_events
from lambdas.jobs import ledger as L
from lambdas.jobs.checkpoints import MOVED_REASON
from lambdas.jobs.fleets import parse_fleets
from lambdas.jobs.spec import assign_ids, parse_spec
from lambdas.scheduler import moving, state


def start(home, arn: str, instance_id: str, job_id_suffix: str, ran: timedelta, now: datetime,
          checkpoint_minutes: int | None) -> tuple[L.Ledger, str, str]:
    """A one-GPU job RUNNING for `ran` on the container instance, and its task."""
    # 1 GiB: moto's container instances report memory of their own (about 7 GiB), not the catalog's.
    document = {"image": "ghcr.io/team/train:1", "command": ["python", "train.py"], "gpus": 1, "vcpus": 1,
                "memory_mib": 1024}
    if checkpoint_minutes is not None:
        document["checkpoint_interval_minutes"] = checkpoint_minutes
    spec = parse_spec(document, fleet_regions=(HOME,), catalog=load_catalog(), default_max_attempts=2)
    (job,) = assign_ids(f"sub-20261122110000-{job_id_suffix}", [spec])
    task = aws_client("ecs", HOME).start_task(cluster=CLUSTER, taskDefinition=f"mlfleet-{ENV}-gpu-job",
                                              containerInstances=[arn], startedBy=job.job_id)["tasks"][0]["taskArn"]
    started = (now - ran).timestamp()
    ledger = L.Ledger(aws_client("dynamodb", HOME), home["table"])
    record = L.new_record(job, started - 60)
    assert ledger.put_new(L.JobRecord(**{
        **vars(record), "state": L.RUNNING, "attempt": 1, "runs": 1, "placement": L.Placement(
            HOME, "gpu1", CLUSTER, arn, instance_id, FLEET_TYPE, task),
        "reasons": ({"state": L.RUNNING, "at": started, "reason": "task running"},)}))
    return ledger, job.job_id, task


def two_machines(home, now: datetime, checkpoint_minutes: int | None):
    """The fleet's two machines: on the first, a job of five hours (checkpointing or not) alone; on the second,
    a job of ten hours that does not checkpoint, and room for three more."""
    (first, first_arn), (second, second_arn) = sorted(build_fleet(size=2).items())
    ledger, job_id, task = start(home, first_arn, first, "abcdef", timedelta(hours=5), now, checkpoint_minutes)
    start(home, second_arn, second, "fedcba", timedelta(hours=10), now, None)
    return ledger, job_id, task, second


def stopped_event(job_id: str, task: str) -> dict:
    """The "ECS Task State Change" ECS sends for the stopped task, from what DescribeTasks says of it."""
    described = boto3.client("ecs", HOME).describe_tasks(cluster=CLUSTER, tasks=[task])["tasks"][0]
    return {"detail-type": "ECS Task State Change", "source": "aws.ecs", "region": HOME,
            "time": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "detail": {"clusterArn": f"arn:aws:ecs:{HOME}:123456789012:cluster/{CLUSTER}", "taskArn": task,
                       "startedBy": job_id, "lastStatus": "STOPPED", "desiredStatus": "STOPPED",
                       "stopCode": "UserInitiated", "stoppedReason": described["stoppedReason"],
                       "containers": [{"name": "job", "exitCode": 143}],
                       "overrides": {"containerOverrides": [{"name": "job", "environment": [
                           {"name": "MLFLEET_ATTEMPT", "value": "1"}]}]}}}


def test_a_checkpointing_job_is_moved_into_the_room_of_another_machine(aws, home):
    now = datetime.now(timezone.utc) + timedelta(minutes=2)
    open_admission()
    ledger, job_id, task, second = two_machines(home, now, checkpoint_minutes=30)

    summary = run_held(home, now)

    assert summary.get("jobs_moved") == 1, summary["errors"]
    described = boto3.client("ecs", HOME).describe_tasks(cluster=CLUSTER, tasks=[task])["tasks"][0]
    assert described["desiredStatus"] == "STOPPED"
    assert described["stoppedReason"] == f"{MOVED_REASON} {second}"
    # Until the task has stopped, the ledger holds the job RUNNING: no second attempt can start beside it.
    assert ledger.get(job_id).state == L.RUNNING
    # Meanwhile the next runs hold the room it goes to: the region view no longer lists its task, and its
    # stop reason names the instance.
    view = state.read_region(HOME, parse_fleets(fleets_json()), load_catalog(), {}, now)
    summary = {"errors": []}
    (under_way,) = moving.moves_under_way({r.job_id: r for r in ledger.by_state(L.RUNNING)}, {HOME},
                                          set(view.tasks), (HOME,), {}, summary)
    assert (under_way.job_id, under_way.move_to, summary["errors"]) == (job_id, second, [])

    job_events.handle(stopped_event(job_id, task), event_settings(home))
    record = ledger.get(job_id)
    # The run the move stopped is given back: `runs` as before it started, so the restart uses no attempt.
    assert (record.state, record.runs, record.attempt) == (L.QUEUED, 0, 1), record.last_reason
    sent = aws_client("sqs", HOME).receive_message(QueueUrl=home["queue"], MaxNumberOfMessages=10,
                                                   VisibilityTimeout=0)["Messages"]
    assert len(sent) == 1 and job_id in sent[0]["Body"]

    summary = run_held(home, now + timedelta(minutes=1))
    record = ledger.get(job_id)
    assert record.state in (L.STARTING, L.RUNNING), (record.last_reason, summary["errors"])
    assert record.placement.instance_id == second and record.runs == 1


def big_job(ledger: L.Ledger, gpus: int, now: datetime) -> str:
    """A job of `gpus` GPUs queued."""
    spec = parse_spec({"image": "ghcr.io/team/train:1", "command": ["python", "train.py"], "gpus": gpus, "vcpus": 1,
                       "memory_mib": 1024}, fleet_regions=(HOME,), catalog=load_catalog(), default_max_attempts=2)
    (big,) = assign_ids("sub-20261122120000-abcdef", [spec])
    assert ledger.put_new(L.new_record(big, now.timestamp()))
    return big.job_id


def moved_and_stopping(home) -> tuple[datetime, L.Ledger, str, str, str, str]:
    """Two machines; a run moves the checkpointing job off the first into the second's room, and its task stops
    as AWS shows it (desiredStatus STOPPED, lastStatus RUNNING). Returns the run's time, the ledger, the moved
    job, its task, and the instances it leaves and goes to."""
    now = datetime.now(timezone.utc) + timedelta(minutes=2)
    open_admission()
    ledger, job_id, task, second = two_machines(home, now, checkpoint_minutes=30)
    first = ledger.get(job_id).placement.instance_id
    assert run_held(home, now).get("jobs_moved") == 1
    stopping(task)
    return now, ledger, job_id, task, first, second


def test_the_gpus_a_moved_task_holds_until_it_has_stopped_are_not_placed_onto(aws, home, held_statuses):
    """ECS frees a task's GPUs once its lastStatus is STOPPED, up to the stop timeout after StopTask: a job placed
    on them meanwhile would be refused there (RESOURCE:GPU) and the machine marked. The region view counts the
    task ECS is stopping on its machine (state.read_region, `stopping`). moto's StopTask stops a task at once: the
    test holds the moved task as AWS shows it while it stops (desiredStatus STOPPED, lastStatus RUNNING) until
    it lets it stop, and reads where the scheduler starts jobs, not ECS's refusal."""
    now, ledger, job_id, task, first, second = moved_and_stopping(home)
    # A job of all four GPUs: the emptied machine has them only once the moved task has stopped.
    big = big_job(ledger, 4, now)

    # The fleet at its cap, so that no purchase serves it cheaper: only the two machines' room could.
    run_held(home, now + timedelta(minutes=1), fleets=fleets_json(max_instances=2))
    assert ledger.get(big).state == L.QUEUED, ledger.get(big).placement

    stopped(task)  # ECS has released its GPUs; job-events has not recorded the stop yet
    run_held(home, now + timedelta(minutes=2), fleets=fleets_json(max_instances=2))
    assert ledger.get(big).placement.instance_id == first
    assert ledger.get(job_id).state == L.RUNNING  # held RUNNING until its stop is recorded

    job_events.handle(stopped_event(job_id, task), event_settings(home))  # the stop recorded
    run_held(home, now + timedelta(minutes=3), fleets=fleets_json(max_instances=2))
    record = ledger.get(job_id)
    assert record.state in (L.STARTING, L.RUNNING) and record.placement.instance_id == second, record.last_reason


def test_a_moved_task_the_region_view_counts_as_stopping_is_not_held_twice(aws, home, held_statuses):
    """While a moved task stops, its machine's free GPUs leave out its GPUs once: the region view counts it
    (state.read_region, `stopping`), and nothing else takes them off again. moto stops a task at once: the test
    holds the moved task as AWS shows it while it stops (desiredStatus STOPPED, lastStatus RUNNING)."""
    now, ledger, job_id, task, first, second = moved_and_stopping(home)
    view = state.read_region(HOME, parse_fleets(fleets_json()), load_catalog(), {}, now)
    assert view.stopping == {task}
    # Three GPUs: the emptied machine has three while the moved task stops (the second, two: the moved job's
    # room is held there), and none if the moved task were counted twice.
    big = big_job(ledger, 3, now)
    run_held(home, now + timedelta(minutes=1), fleets=fleets_json(max_instances=2))
    assert ledger.get(big).placement.instance_id == first


def test_a_job_without_checkpoints_is_never_moved(aws, home):
    now = datetime.now(timezone.utc) + timedelta(minutes=2)
    open_admission()
    ledger, job_id, task, _ = two_machines(home, now, checkpoint_minutes=None)
    summary = run_held(home, now)
    assert not summary.get("jobs_moved")
    described = boto3.client("ecs", HOME).describe_tasks(cluster=CLUSTER, tasks=[task])["tasks"][0]
    assert described["desiredStatus"] == "RUNNING" and ledger.get(job_id).state == L.RUNNING
