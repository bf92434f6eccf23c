"""How long a job will run: a belief from the spec's estimate and from finished jobs of its submission.

Nothing hands the planner a job's true duration. It has two sources, each with its error:
- the estimate in the job spec (`expected_runtime_s`), trusted to within a log-normal factor of spread
  HINT_LOG_SIGMA (a user's "about an hour" is often 20 minutes or three hours); a job whose spec has
  none takes its submission's, the median of the estimates its other jobs carry, with the spread among
  siblings added (SIBLING_HINT_LOG_SIGMA);
- the runtimes of the submission's jobs that already finished (a sweep's or a batch range's jobs are
  alike): their median, with the spread among them (at least SIBLING_MIN_LOG_SIGMA).
Both are log-normal beliefs about log seconds and are combined by their precisions. Plain records in,
a `RuntimeEstimate` (median seconds, sigma of log seconds) out; the Lambda builds the records from the
ledger, the benchmark from its simulation.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from .model import RuntimeEstimate

HINT_LOG_SIGMA = 1.0  # a hint is within a factor e of the truth about two times in three
SIBLING_LOG_SIGMA = 0.5  # spread assumed among a submission's jobs until three have finished
SIBLING_MIN_LOG_SIGMA = 0.1
# A sibling's estimate, for a job of the same submission without one: the estimate's error and the spread
# among siblings. Bought for apart from its hinted siblings for want of a belief, a sweep's unhinted half
# made mlfleet pay 1.7% more on the benchmark's synthetic traces (docs/scheduler-benchmark.md,
# "Siblings' estimates").
SIBLING_HINT_LOG_SIGMA = math.hypot(HINT_LOG_SIGMA, SIBLING_LOG_SIGMA)
MIN_SECONDS = 1.0
_NORMAL = statistics.NormalDist()


@dataclass(frozen=True)
class FinishedRun:
    """A job of a submission that ran to completion, and how long its successful run took."""
    submission_id: str
    seconds: float


def runs_by_submission(runs: Iterable[FinishedRun]) -> dict[str, list[float]]:
    grouped: dict[str, list[float]] = {}
    for run in runs:
        if run.seconds > 0:
            grouped.setdefault(run.submission_id, []).append(run.seconds)
    return grouped


def estimate(hint_s: float | None, siblings: Sequence[float] = (), *,
             sibling_hints: Sequence[float] = ()) -> RuntimeEstimate | None:
    """The belief about one job's runtime, or None when there is nothing to go on. `siblings`: runtimes
    of its submission's finished jobs; `sibling_hints`: the estimates of its submission's jobs, used
    where the job has none."""
    beliefs = []
    if hint_s is not None and hint_s > 0:
        beliefs.append((math.log(max(MIN_SECONDS, hint_s)), HINT_LOG_SIGMA))
    else:
        hinted = [math.log(max(MIN_SECONDS, h)) for h in sibling_hints if h is not None and h > 0]
        if hinted:
            beliefs.append((statistics.median(hinted), SIBLING_HINT_LOG_SIGMA))
    logs = [math.log(max(MIN_SECONDS, s)) for s in siblings if s > 0]
    if logs:
        spread = max(SIBLING_MIN_LOG_SIGMA, statistics.stdev(logs)) if len(logs) >= 3 else SIBLING_LOG_SIGMA
        # The next sibling varies like the others, around a median known to within spread / sqrt(n).
        beliefs.append((statistics.median(logs), spread * math.sqrt(1 + 1 / len(logs))))
    if not beliefs:
        return None
    precision = sum(1 / sigma ** 2 for _, sigma in beliefs)
    mean = sum(mu / sigma ** 2 for mu, sigma in beliefs) / precision
    return RuntimeEstimate(math.exp(mean), 1 / math.sqrt(precision))


def estimates(hints: Mapping[str, float | None], submission_of: Mapping[str, str],
              finished: Iterable[FinishedRun], other_hints: Mapping[str, float | None] | None = None,
              ) -> dict[str, RuntimeEstimate]:
    """Per job id: its belief from its hint (or its submission's), and its submission's finished runs (jobs
    with none of these left out). `other_hints`: the estimates of other jobs of those submissions, by job
    id (`submission_of` names their submissions too)."""
    by_submission = runs_by_submission(finished)
    hinted: dict[str, list[float]] = {}
    for job_id, hint in {**(other_hints or {}), **hints}.items():
        if hint is not None and hint > 0:
            hinted.setdefault(submission_of.get(job_id, ""), []).append(hint)
    found = {}
    for job_id, hint in hints.items():
        submission = submission_of.get(job_id, "")
        belief = estimate(hint, by_submission.get(submission, ()), sibling_hints=hinted.get(submission, ()))
        if belief is not None:
            found[job_id] = belief
    return found


def expected_end(started_at: float, belief: RuntimeEstimate, now: float) -> float:
    """When a running job is expected to end: the median of its runtime given it has run until `now`.

    A job past its median is not due at once: given T > elapsed, the log-normal's conditional median
    is exp(mu + sigma * z) with z the normal quantile of 1 - S(elapsed) / 2.
    """
    elapsed = max(0.0, now - started_at)
    mu, sigma = math.log(max(MIN_SECONDS, belief.seconds)), max(belief.log_sigma, 1e-3)
    if elapsed <= 0:
        return started_at + belief.seconds
    survival = 1 - _NORMAL.cdf((math.log(max(MIN_SECONDS, elapsed)) - mu) / sigma)
    if survival <= 1e-12:  # far beyond anything believed: expect it to run about as long again
        return now + elapsed
    quantile = min(1 - 1e-12, 1 - survival / 2)
    return started_at + max(elapsed, math.exp(mu + sigma * _NORMAL.inv_cdf(quantile)))
