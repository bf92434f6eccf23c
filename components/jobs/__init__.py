from components.jobs.events import JOB_EVENT_PATTERNS, EventForwarder, EventForwarderArgs, job_event_pattern
from components.jobs.jobs import JobService, JobServiceArgs, fleets_document, ledger_name, queue_name

__all__ = [
    "JOB_EVENT_PATTERNS",
    "EventForwarder",
    "EventForwarderArgs",
    "JobService",
    "JobServiceArgs",
    "fleets_document",
    "job_event_pattern",
    "ledger_name",
    "queue_name",
]
