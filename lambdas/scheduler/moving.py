"""Carrying out the plan's moves (planning/moves.py): the tasks of the checkpointing jobs of a machine that
other machines' room can hold are stopped with MOVED_REASON and the instance each job goes to.

ECS sends the container SIGTERM and, after the task definition's stopTimeout, SIGKILL, as at a spot notice;
the job saves its checkpoint (docs/jobs.md, "Checkpoints"). The job-events function sees the task stop and
requeues the job without counting an attempt (lambdas/job_events/decide.py, `is_move`), the reason in its
record, and the next run places it on that instance first (requests.move_target, planning/live.py). Until
then the ledger holds it RUNNING, so its next attempt never starts while this one still runs. The emptied
machine is given back by the release stage, as any empty machine.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence

from ..common.aws import client
from ..common.errors import per_item
from ..common.logs import log_decision
from ..jobs import ledger as L
from ..jobs.checkpoints import MOVED_REASON
from . import actions
from .planning import RuntimeEstimate
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
