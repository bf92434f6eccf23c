"""How long the scheduler believes jobs will run, from the ledger: each job's belief, and when the jobs on
a machine are expected to end.

Beliefs come from the specs' estimates (or, without one, the estimates of the submission's other jobs)
and the finished jobs of the same submission (planning/runtimes.py), read with one ledger query per
submission; a machine's end is its jobs' latest expected end, unknown while any of them is unknown.
A job without a belief is expected to end by the environment's prior (planning/runtimes.py,
`RuntimePrior`): what the PRIOR_RUNS most recently submitted SUCCEEDED jobs ran, one query of the
`by-state` index, newest first.
"""

from __future__ import annotations

from ..common.errors import per_item
from ..jobs import ledger as L
from . import state
from .planning import RuntimeEstimate
from .planning.runtimes import PRIOR_RUNS, FinishedRun, RuntimePrior, estimates, job_end

# Submissions whose finished jobs are read per run for runtime estimates (one Query each).
MAX_SUBMISSIONS_READ = 50
# Jobs read of each of them: the first by job id, which start first and so finish first. A submission holds
# up to 10,000 jobs (spec.MAX_JOBS_PER_SUBMISSION), about 1 KB each in the ledger: reading all of 50 such
# submissions every run was up to 500 MB, past the Lambda's memory, for a median and a spread that 500
# runs give as well (one index page, about 0.5 MB).
SIBLINGS_READ = 500


def runtime_beliefs(ledger: L.Ledger, records: list[L.JobRecord], errors: list[dict] | None = None,
                    ) -> dict[str, RuntimeEstimate]:
    """Per job: what its spec estimates (or, without one, its submission's other jobs' specs) and what the
    finished jobs of its submission took (read for the first MAX_SUBMISSIONS_READ submissions, oldest
    first, SIBLINGS_READ jobs of each; the others go on the estimates among `records` alone, as do those
    whose jobs could not be read this run)."""
    submissions = list(dict.fromkeys(r.submission_id for r in records))[:MAX_SUBMISSIONS_READ]
    finished = []
    submission_of = {r.job_id: r.submission_id for r in records}
    other_hints: dict[str, float | None] = {}
    for submission_id in submissions:
        with per_item("read-submission-failed", errors, submission_id=submission_id, action="its estimates only"):
            siblings = ledger.by_submission(submission_id, limit=SIBLINGS_READ)
            finished += [FinishedRun(submission_id, r.run_seconds) for r in siblings if r.run_seconds is not None]
            other_hints.update((r.job_id, r.spec.expected_runtime_s) for r in siblings)
            submission_of.update((r.job_id, submission_id) for r in siblings)
    return estimates({r.job_id: r.spec.expected_runtime_s for r in records}, submission_of, finished, other_hints)


def runtime_prior(ledger: L.Ledger, errors: list[dict] | None = None) -> RuntimePrior | None:
    """The environment's runtime prior from the newest PRIOR_RUNS SUCCEEDED jobs (None below
    PRIOR_MIN_RUNS of them, or when the ledger could not be read this run: jobs without a belief are then
    judged as before there was a prior)."""
    with per_item("read-runtime-prior-failed", errors, state=L.SUCCEEDED, action="no runtime prior this run"):
        finished = ledger.by_state(L.SUCCEEDED, limit=PRIOR_RUNS, newest_first=True)
        return RuntimePrior.of(r.run_seconds for r in finished if r.run_seconds is not None)
    return None


def busy_until(machine: state.MachineView, running: dict[str, L.JobRecord], beliefs: dict[str, RuntimeEstimate],
               now: float, prior: RuntimePrior | None = None) -> float | None:
    """When the jobs on a machine are expected to have ended (a job without a belief by the `prior`); None
    when any of them is unknown."""
    ends = []
    for job_id in machine.jobs:
        record = running.get(job_id)
        end = None if record is None or record.started_at is None else \
            job_end(record.started_at, beliefs.get(job_id), prior, now)
        if end is None:
            return None
        ends.append(end)
    return max(ends) if ends else None
