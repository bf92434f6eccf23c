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

A job with neither has no belief of its own. For it there is the environment's `RuntimePrior`: what the
PRIOR_RUNS most recently submitted jobs that finished took, whatever their submission. It says when a
running job without a belief is expected to end (the median of the finished runs longer than it has run
so far), so that a machine's end is known even where some of its jobs have no belief, and how long a
job without a belief is expected to outlast a machine's other jobs (packer.py). Without it, a machine
holding such a job had no known end, and a one-GPU job of unknown runtime took room on a g6.48xlarge
($5.51/h) whose other jobs were ending, then kept it up for 566 hours (seed 8 of the shared trace:
docs/scheduler-benchmark.md, "What other jobs took").
"""

from __future__ import annotations

import bisect
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

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
# The environment's prior: the finished runs of the PRIOR_RUNS most recently submitted jobs that succeeded
# (one ledger query a run, lambdas/scheduler/beliefs.py), trusted once there are PRIOR_MIN_RUNS of them
# (a new stack's first jobs say little about the next ones).
PRIOR_RUNS = 500
PRIOR_MIN_RUNS = 20
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


def _log_normal(belief: RuntimeEstimate) -> tuple[float, float]:
    """The belief as the mean and sigma of log seconds (sigma kept off zero: a point belief divides by it)."""
    return math.log(max(MIN_SECONDS, belief.seconds)), max(belief.log_sigma, 1e-3)


def expected_end(started_at: float, belief: RuntimeEstimate, now: float) -> float:
    """When a running job is expected to end: the median of its runtime given it has run until `now`.

    A job past its median is not due at once: given T > elapsed, the log-normal's conditional median
    is exp(mu + sigma * z) with z the normal quantile of 1 - S(elapsed) / 2.
    """
    elapsed = max(0.0, now - started_at)
    mu, sigma = _log_normal(belief)
    if elapsed <= 0:
        return started_at + belief.seconds
    survival = 1 - _NORMAL.cdf((math.log(max(MIN_SECONDS, elapsed)) - mu) / sigma)
    if survival <= 1e-12:  # far beyond anything believed: expect it to run about as long again
        return now + elapsed
    quantile = min(1 - 1e-12, 1 - survival / 2)
    return started_at + max(elapsed, math.exp(mu + sigma * _NORMAL.inv_cdf(quantile)))


def expected_excess_s(belief: RuntimeEstimate, horizon_s: float) -> float:
    """How long a job is expected to run past `horizon_s` from its start, E[max(0, T - horizon)], for T
    log-normal with the belief's median and sigma: the log-normal's partial expectation,
    E[T; T > h] = exp(mu + sigma^2 / 2) * Phi(d1) with d1 = (mu + sigma^2 - ln h) / sigma, less h * P(T > h).
    Where the median says a job ends first, its spread still says by how much it may not."""
    mu, sigma = _log_normal(belief)
    mean = math.exp(mu + sigma * sigma / 2)
    if horizon_s <= 0:
        return mean - horizon_s
    d1 = (mu + sigma * sigma - math.log(horizon_s)) / sigma
    return max(0.0, mean * _NORMAL.cdf(d1) - horizon_s * _NORMAL.cdf(d1 - sigma))


def job_end(started_at: float, belief: RuntimeEstimate | None, prior: RuntimePrior | None, now: float) -> float | None:
    """When a running job is expected to end: by its belief, else by the environment's prior; None with
    neither."""
    if belief is not None:
        return expected_end(started_at, belief, now)
    return None if prior is None else prior.expected_end(started_at, now)


@dataclass(frozen=True)
class RuntimePrior:
    """What finished jobs of any submission took (`of` builds it; seconds sorted), for jobs and machines
    with no belief of their own. The finished runs are a sample of what jobs take, less the longest of
    those still running: it errs short."""
    seconds: tuple[float, ...]
    _tail_sums: tuple[float, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        tails = [0.0] * (len(self.seconds) + 1)
        for i in range(len(self.seconds) - 1, -1, -1):
            tails[i] = tails[i + 1] + self.seconds[i]
        object.__setattr__(self, "_tail_sums", tuple(tails))

    @classmethod
    def of(cls, runs: Iterable[float], min_runs: int = PRIOR_MIN_RUNS) -> RuntimePrior | None:
        """The prior of these run lengths (seconds), or None below `min_runs` of them."""
        seconds = sorted(float(s) for s in runs if s > 0)
        return cls(tuple(seconds)) if len(seconds) >= max(1, min_runs) else None

    @property
    def mean_s(self) -> float:
        return self._tail_sums[0] / len(self.seconds)

    def excess_s(self, remaining_s: float) -> float:
        """How long a job of unknown runtime starting now is expected to run past `remaining_s` from now:
        the mean of max(0, run - remaining_s) over the runs."""
        remaining_s = max(0.0, remaining_s)
        longer = bisect.bisect_right(self.seconds, remaining_s)
        return (self._tail_sums[longer] - (len(self.seconds) - longer) * remaining_s) / len(self.seconds)

    def expected_end(self, started_at: float, now: float) -> float:
        """When a job without a belief, running since `started_at`, is expected to end: the median of the
        runs longer than it has run; past them all, as long again as it has run."""
        elapsed = max(0.0, now - started_at)
        longer = bisect.bisect_right(self.seconds, elapsed)
        if longer >= len(self.seconds):
            return now + elapsed
        return started_at + self.seconds[(longer + len(self.seconds)) // 2]
