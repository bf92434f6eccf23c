"""Runtime beliefs (lambdas/scheduler/planning/runtimes.py): the hint, finished siblings, and both."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lambdas.scheduler.planning.model import RuntimeEstimate
from lambdas.scheduler.planning.runtimes import (
    HINT_LOG_SIGMA, PRIOR_MIN_RUNS, SIBLING_HINT_LOG_SIGMA, SIBLING_LOG_SIGMA, FinishedRun, RuntimePrior, estimate,
    estimates, expected_end, expected_excess_s, job_end,
)


def test_nothing_to_go_on_is_no_belief():
    assert estimate(None, ()) is None and estimate(0, ()) is None


def test_a_hint_alone_is_believed_with_its_error():
    assert estimate(3600, ()) == RuntimeEstimate(pytest.approx(3600), HINT_LOG_SIGMA)


@pytest.mark.parametrize(("siblings", "median"), [((600,), 600), ((600, 1200, 2400), 1200), ((100, 100, 100, 10_000), 100)])
def test_siblings_give_their_median(siblings, median):
    belief = estimate(None, siblings)
    assert belief.seconds == pytest.approx(median, rel=1e-6)


def test_one_sibling_uses_the_assumed_spread_and_many_alike_narrow_it():
    assert estimate(None, (600,)).log_sigma == pytest.approx(SIBLING_LOG_SIGMA * math.sqrt(2))
    assert estimate(None, (600, 610, 590, 605)).log_sigma < 0.2


def test_hint_and_siblings_combine_between_them_and_tighter_than_either():
    hint, siblings = 7200.0, (600.0, 650.0, 700.0)
    both, alone = estimate(hint, siblings), estimate(None, siblings)
    assert 600 < both.seconds < hint
    assert both.log_sigma < min(HINT_LOG_SIGMA, alone.log_sigma)
    assert abs(math.log(both.seconds / alone.seconds)) < abs(math.log(both.seconds / hint))  # siblings weigh more


def test_estimates_group_finished_runs_by_submission():
    found = estimates({"a-1": None, "b-1": None, "c-1": 100.0}, {"a-1": "a", "b-1": "b", "c-1": "c"},
                      [FinishedRun("a", 500.0), FinishedRun("d", 5.0)])
    assert set(found) == {"a-1", "c-1"} and found["a-1"].seconds == pytest.approx(500)


def test_a_job_due_is_expected_at_its_median_and_an_overdue_one_later_than_now():
    belief = RuntimeEstimate(3600, 0.5)
    assert expected_end(1000, belief, 1000) == pytest.approx(4600)
    assert expected_end(1000, belief, 1500) == pytest.approx(4600, rel=0.05)  # barely started: still the median
    overdue = expected_end(1000, belief, 1000 + 3 * 3600)
    assert overdue > 1000 + 3 * 3600


@settings(max_examples=200, deadline=None)
@given(st.floats(1, 1e6), st.floats(0.01, 3), st.floats(0, 1e7), st.floats(0, 1e7))
def test_expected_end_is_never_in_the_past_and_grows_with_elapsed_time(median, sigma, elapsed, more):
    belief = RuntimeEstimate(median, sigma)
    first = expected_end(0.0, belief, elapsed)
    later = expected_end(0.0, belief, elapsed + more)
    assert first >= elapsed and later >= elapsed + more
    assert later >= first - 1e-6 * max(1.0, first)


def _excess_by_quadrature(median: float, sigma: float, horizon: float, steps: int = 40_000) -> float:
    """E[max(0, T - horizon)], T = median * exp(sigma * Z), integrated over Z in [-10, 10] (midpoints)."""
    width = 20.0 / steps
    total = 0.0
    for i in range(steps):
        z = -10.0 + (i + 0.5) * width
        total += max(0.0, median * math.exp(sigma * z) - horizon) * math.exp(-z * z / 2) * width
    return total / math.sqrt(2 * math.pi)


@pytest.mark.parametrize("median, sigma, horizon", [
    (3600, 1.0, 3 * 3600),    # a job believed to end two hours before the machine's others
    (3600, 0.3, 3 * 3600),    # the same, believed within a third: barely past
    (3600, 1.0, 1800),        # its median past the horizon
    (36_000, 2.0, 3600),
    (60, 0.1, 30),
])
def test_the_expected_excess_is_the_log_normal_s_partial_expectation(median, sigma, horizon):
    found = expected_excess_s(RuntimeEstimate(median, sigma), horizon)
    assert found == pytest.approx(_excess_by_quadrature(median, sigma, horizon), rel=1e-3, abs=1e-6 * median)


def test_the_expected_excess_beyond_a_past_horizon_is_the_mean_and_the_time_since():
    belief = RuntimeEstimate(3600, 1.0)
    mean = 3600 * math.exp(0.5)
    assert expected_excess_s(belief, 0) == pytest.approx(mean)
    assert expected_excess_s(belief, -600) == pytest.approx(mean + 600)


@settings(max_examples=200, deadline=None)
@given(st.floats(1, 1e6), st.floats(0.01, 3), st.floats(1, 1e7), st.floats(0, 1e7))
def test_the_expected_excess_shrinks_with_the_horizon_and_is_at_least_the_median_s(median, sigma, horizon, more):
    belief = RuntimeEstimate(median, sigma)
    first, later = expected_excess_s(belief, horizon), expected_excess_s(belief, horizon + more)
    assert 0 <= later <= first + 1e-9 * max(1.0, first)
    # Jensen: E[max(0, T - h)] >= max(0, E[T] - h) >= max(0, median - h), the log-normal's mean above its median.
    assert first >= max(0.0, median - horizon) * (1 - 1e-9)


def test_a_job_without_an_estimate_takes_the_median_of_its_siblings_estimates():
    belief = estimate(None, sibling_hints=(600.0, 2400.0, 1200.0, None))
    assert belief == RuntimeEstimate(pytest.approx(1200), pytest.approx(SIBLING_HINT_LOG_SIGMA))
    assert SIBLING_HINT_LOG_SIGMA > HINT_LOG_SIGMA  # a sibling's estimate says less than the job's own
    assert estimate(3600, sibling_hints=(600.0,)) == estimate(3600)  # its own estimate wins
    assert estimate(None, sibling_hints=(0.0, None)) is None


def test_siblings_estimates_and_finished_runs_combine():
    both = estimate(None, (600.0, 650.0, 700.0), sibling_hints=(7200.0,))
    finished = estimate(None, (600.0, 650.0, 700.0))
    assert finished.seconds < both.seconds < 7200 and both.log_sigma < finished.log_sigma


def test_estimates_take_siblings_estimates_from_the_jobs_planned_and_the_others_of_their_submissions():
    submission_of = {"a-1": "a", "a-2": "a", "a-3": "a", "b-1": "b"}
    found = estimates({"a-1": None, "a-2": 3600.0, "b-1": None}, submission_of, [], {"a-3": 900.0, "a-2": 3600.0})
    assert found["a-1"].seconds == pytest.approx(math.sqrt(3600 * 900))  # a-2 counted once, with a-3
    assert found["a-2"].seconds == pytest.approx(3600) and "b-1" not in found and "a-3" not in found


def test_the_prior_needs_enough_finished_runs():
    assert RuntimePrior.of([600.0] * (PRIOR_MIN_RUNS - 1)) is None
    assert RuntimePrior.of([600.0] * PRIOR_MIN_RUNS + [0.0, -5.0]).seconds == (600.0,) * PRIOR_MIN_RUNS
    assert RuntimePrior.of([], min_runs=0) is None  # never a prior of nothing


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(1, 1e7), min_size=1, max_size=60), st.floats(-100, 2e7))
def test_the_prior_s_excess_is_the_mean_time_past_what_remains(runs, remaining):
    prior = RuntimePrior.of(runs, min_runs=1)
    brute = sum(max(0.0, r - max(0.0, remaining)) for r in runs) / len(runs)
    assert prior.excess_s(remaining) == pytest.approx(brute, rel=1e-9, abs=1e-6)
    assert prior.mean_s == pytest.approx(sum(runs) / len(runs), rel=1e-9)
    assert prior.excess_s(0) == pytest.approx(prior.mean_s, rel=1e-9)


def test_a_job_without_a_belief_ends_at_the_median_of_the_runs_longer_than_it_has_run():
    prior = RuntimePrior.of([60, 120, 600, 3600, 36_000, 360_000], min_runs=1)
    assert prior.expected_end(1000.0, 1000.0) == 1000.0 + 3600  # not started: the median of all
    assert prior.expected_end(0.0, 700.0) == 36_000  # of 3,600, 36,000 and 360,000
    assert prior.expected_end(0.0, 400_000.0) == 800_000  # longer than every run: as long again
    assert job_end(0.0, None, prior, 700.0) == 36_000
    assert job_end(0.0, None, None, 700.0) is None
    belief = RuntimeEstimate(100.0, 0.5)
    assert job_end(0.0, belief, prior, 10.0) == expected_end(0.0, belief, 10.0)  # a belief comes first


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(1, 1e6), min_size=1, max_size=40), st.floats(0, 1e6), st.floats(0, 2e6))
def test_the_prior_s_expected_end_is_never_in_the_past(runs, started, elapsed):
    prior = RuntimePrior.of(runs, min_runs=1)
    assert prior.expected_end(started, started + elapsed) >= started + elapsed
