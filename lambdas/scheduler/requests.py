"""What the planner is asked for each job: its ledger record as a `JobRequest`.

The scheduler plans with these; the job-events function prices a reclaimed instance's jobs with them
(planning/replacement.py). A job that has run goes back to the region of its checkpoint.
"""

from __future__ import annotations

from collections.abc import Collection

from ..common.errors import describe, per_item
from ..common.logs import log_decision
from ..jobs import ledger as L
from ..jobs.checkpoints import MOVED_TO
from ..jobs.quarantine import Quarantine
from .planning import JobRequest, Reservation, RuntimeEstimate


def checkpoint_region(record: L.JobRecord, fleet_regions: Collection[str]) -> str | None:
    """The region of the job's checkpoint: where its first task ran, or None before any ran.

    A job runs in one region only (the planner keeps it there once it has run), so the placement of its
    latest claim is in that region. Checkpoints are regional (components/storage/checkpoints.py): placed
    elsewhere, a job in a region without internet egress could not reach its checkpoint, and with egress
    it would pay cross-region transfer and be refused by the other region's bucket. A region the stack
    no longer has lost its bucket with it: the job starts afresh wherever it fits.
    """
    if record.runs == 0 or record.placement is None:
        return None
    if record.placement.region not in fleet_regions:
        log_decision("checkpoint-region-gone", job_id=record.job_id, region=record.placement.region,
                     action="restarts from zero in any region")
        return None
    return record.placement.region


def job_request(record: L.JobRecord, fleet_regions: Collection[str],
                runtime: RuntimeEstimate | None = None) -> JobRequest:
    spec = record.spec
    interval = spec.checkpoint_interval_minutes
    return JobRequest(job_id=record.job_id, submission_id=record.submission_id, gpus=spec.gpus, vcpus=spec.vcpus,
                      memory_mib=spec.memory_mib, instance_type_pattern=spec.instance_type_pattern,
                      regions=spec.regions, lifecycle=spec.lifecycle, submitted_at=record.submitted_at,
                      reserved=Reservation(*record.reserved) if record.reserved else None,
                      checkpoint_region=checkpoint_region(record, fleet_regions), runtime=runtime,
                      checkpoint_interval_s=interval * 60.0 if interval is not None else None,
                      attempts_left=max(1, spec.max_attempts - record.runs), team=spec.team,
                      priority=spec.priority, gpu_memory_mib=spec.gpu_memory_mib, move_to=move_target(record))


def move_target(record: L.JobRecord) -> str | None:
    """The instance a move (planning/moves.py) sends the job to: its last transition was the requeue that
    followed the scheduler's stop, whose reason names the instance."""
    if record.state != L.QUEUED or not record.reasons:
        return None
    found = MOVED_TO.match(str(record.reasons[-1].get("reason", "")))
    return found.group(1) if found else None


def plannable(pending: list[L.JobRecord], fleet_regions: Collection[str], beliefs: dict[str, RuntimeEstimate],
              quarantine: Quarantine, now: float, summary: dict) -> list[JobRequest]:
    """The planner's request for each pending job; a record that cannot become one (a value the planner
    cannot use, which decoding did not catch) is quarantined, never left to fail every run's plan."""
    requests = []
    for record in pending:
        try:
            requests.append(job_request(record, fleet_regions, beliefs.get(record.job_id)))
        except Exception as error:  # noqa: BLE001 (one record's, whatever it is)
            log_decision("job-request-failed", job_id=record.job_id, error=describe(error), action="quarantined")
            with per_item("quarantine-failed", summary["errors"], job_id=record.job_id):
                if quarantine.item(L.Undecodable(record.job_id, L.encode(record),
                                                 f"cannot be planned: {describe(error)}"), now):
                    summary["quarantined"].append(record.job_id)
    return requests
