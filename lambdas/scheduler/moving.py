"""Carrying out the plan's moves (planning/moves.py): the tasks of the checkpointing jobs of a machine that
other machines' room can hold are stopped with MOVED_REASON and the instance each job goes to.

ECS sends the container SIGTERM and, after the task definition's stopTimeout, SIGKILL, as at a spot notice;
the job saves its checkpoint (docs/jobs.md, "Checkpoints"). The job-events function sees the task stop and
requeues the job without counting an attempt (lambdas/job_events/decide.py, `is_move`), the reason in its
record, and the next run places it on that instance first (requests.move_target, planning/live.py). Until
then the ledger holds it RUNNING, so its next attempt never starts while this one still runs, and the runs
hold the room it goes to (`moves_under_way`). The emptied machine is given back by the release stage, as
any empty machine.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import replace

from ..common.aws import TASKS_PER_DESCRIBE, chunks, client
from ..common.errors import per_item
from ..common.logs import log_decision
from ..jobs import ledger as L
from ..jobs.checkpoints import MOVED_REASON, MOVED_TO
from . import actions
from .planning import JobRequest, RuntimeEstimate
from .planning.moves import Move, RunningJob
from .requests import job_request


def running_jobs(running: Mapping[str, L.JobRecord], fleet_regions: Collection[str],
                 beliefs: Mapping[str, RuntimeEstimate]) -> list[RunningJob]:
    """The move stage's view of the ledger's RUNNING jobs: those with a task and a known start."""
    found = []
    for record in running.values():
        placement = record.placement
        if record.state != L.RUNNING or placement is None or not placement.task_arn or record.started_at is None:
            continue
        found.append(RunningJob(job_request(record, fleet_regions, beliefs.get(record.job_id)),
                                placement.container_instance_arn, record.started_at))
    return found


def moves_under_way(running: Mapping[str, L.JobRecord], read_regions: Collection[str], tasks_running: Collection[str],
                    fleet_regions: Collection[str], beliefs: Mapping[str, RuntimeEstimate],
                    summary: dict) -> list[JobRequest]:
    """The ledger's RUNNING jobs whose task ECS no longer means to run (the region view lists only tasks whose
    desired status is RUNNING) and was stopped by a move: each with `move_to`, the instance its stop reason
    names, so that the plan holds that room until the job is back in the queue. One DescribeTasks call per
    cluster and 100 tasks; a task ECS no longer describes, or stopped for another reason, holds nothing."""
    stopping: dict[tuple[str, str], dict[str, L.JobRecord]] = {}
    for record in running.values():
        placement = record.placement
        if record.state != L.RUNNING or placement is None or not placement.task_arn or \
                placement.region not in read_regions or placement.task_arn in tasks_running:
            continue
        stopping.setdefault((placement.region, placement.cluster), {})[placement.task_arn] = record
    found = []
    for (region, cluster), by_task in sorted(stopping.items()):
        with per_item("moves-under-way-unread", summary["errors"], region=region, cluster=cluster,
                      action="their rooms are not held this run"):
            for batch in chunks(sorted(by_task), TASKS_PER_DESCRIBE):
                for task in client("ecs", region).describe_tasks(cluster=cluster, tasks=batch)["tasks"]:
                    target = MOVED_TO.match(task.get("stoppedReason", ""))
                    record = by_task.get(task.get("taskArn", ""))
                    if target and record is not None:
                        request = job_request(record, fleet_regions, beliefs.get(record.job_id))
                        found.append(replace(request, move_to=target.group(1)))
    return found


def move_jobs(moves: Sequence[Move], running: Mapping[str, L.JobRecord], remaining_ms: Callable[[], int],
              reserve_ms: int, summary: dict) -> None:
    """Stop the moved jobs' tasks (one StopTask each; a task already stopped is stopped again harmlessly)."""
    for n, move in enumerate(moves):
        if remaining_ms() < reserve_ms:
            log_decision("stop-moving", reason="Lambda time running out", machines_left=len(moves) - n)
            return
        log_decision("move", instance_id=move.instance_id, targets=dict(move.targets), hourly_usd=move.hourly_usd,
                     expected_saving_usd=move.saving_usd, reason=move.reason)
        for job_id, target in move.targets:
            placement = running[job_id].placement
            with per_item("move-failed", summary["errors"], job_id=job_id, instance_id=move.instance_id,
                          action="keeps running; the next run may move it"):
                actions.stop_task(client("ecs", placement.region), placement.cluster, placement.task_arn,
                                  f"{MOVED_REASON} {target}")
                summary["jobs_moved"] = summary.get("jobs_moved", 0) + 1
