"""Spot or on-demand by expected cost (lambdas/scheduler/planning/lifecycle.py): the formulas against a
Monte Carlo of the same process, and the choice inside the plan, within the on-demand fleets' caps."""

from __future__ import annotations

import math
import random
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lambdas.common.catalog import load_catalog
from lambdas.scheduler.planning import Fleet, JobRequest, Limits, Reservation, RuntimeEstimate, plan
from lambdas.scheduler.planning.lifecycle import finish_probability, on_demand_cost, spot_cost_to_finish

CATALOG = load_catalog()
DAY = 86_400.0


def monte_carlo(runtime, rate_per_hour, checkpoint, attempts, boot, runs=20_000, seed=7):
    """Seconds billed and jobs finished, simulating the process the formulas describe: an interrupted run
    that saved a checkpoint gives the attempts back (lambdas/job_events/decide.py), so the job is given up
    after `attempts` runs in a row that save nothing."""
    rng = random.Random(seed)
    billed, finished = 0.0, 0
    for _ in range(runs):
        progress, in_a_row = 0.0, 0
        while in_a_row < attempts:
            billed += boot
            left = runtime - progress
            until = rng.expovariate(rate_per_hour / 3600)
            if until >= left:
                billed += left
                finished += 1
                break
            billed += until
            saved = until // checkpoint * checkpoint if checkpoint else 0.0
            progress += saved
            in_a_row = 0 if saved > 0 else in_a_row + 1
    return billed, finished


@pytest.mark.parametrize(("runtime", "rate", "checkpoint", "attempts"), [
    (3600, 0.05, None, 3), (20 * 3600, 0.05, None, 3), (10 * 3600, 0.2, None, 5),
    (DAY, 0.05, 1800, 3), (3 * DAY, 0.05, 3600, 10), (30 * DAY, 0.05, 1800, 3), (30 * DAY, 0.5, 3600, 2),
])
def test_finish_probability_matches_a_simulation(runtime, rate, checkpoint, attempts):
    _, finished = monte_carlo(runtime, rate, checkpoint, attempts, 0)
    assert finish_probability(runtime, rate, checkpoint, attempts) == pytest.approx(finished / 20_000, abs=0.02)


@pytest.mark.parametrize(("runtime", "rate", "attempts"), [(3600, 0.05, 3), (20 * 3600, 0.05, 3), (5 * 3600, 0.3, 4)])
def test_spot_cost_without_checkpoints_matches_a_simulation(runtime, rate, attempts):
    billed, finished = monte_carlo(runtime, rate, None, attempts, 180)
    expected = spot_cost_to_finish(3600.0, runtime, rate, None, attempts, 180)  # $1 per second: cost = seconds
    assert expected == pytest.approx(billed / finished, rel=0.03)


@pytest.mark.parametrize(("runtime", "rate", "checkpoint", "attempts"), [
    (DAY, 0.05, 1800, 3), (30 * DAY, 0.05, 1800, 3), (3 * DAY, 0.2, 3600, 2)])
def test_spot_cost_with_checkpoints_matches_a_simulation(runtime, rate, checkpoint, attempts):
    billed, finished = monte_carlo(runtime, rate, checkpoint, attempts, 180, runs=4_000)
    expected = spot_cost_to_finish(3600.0, runtime, rate, checkpoint, attempts, 180)
    assert expected == pytest.approx(billed / finished, rel=0.05)


def test_no_interruptions_cost_the_price_and_impossible_jobs_cost_infinity():
    assert spot_cost_to_finish(2.0, 3600, 0.0, None, 1, 0) == pytest.approx(2.0)
    assert spot_cost_to_finish(1.0, 365 * DAY, 1.0, None, 1, 0) == math.inf
    assert on_demand_cost(3.0, 3600, 1800) == pytest.approx(4.5)


@settings(max_examples=100, deadline=None)
@given(st.floats(60, 30 * DAY), st.floats(0.001, 0.5), st.integers(1, 10))
def test_checkpoints_never_make_finishing_less_likely(runtime, rate, attempts):
    restart = finish_probability(runtime, rate, None, attempts)
    assert finish_probability(runtime, rate, min(1800, runtime / 2), attempts) >= restart - 1e-9


# --- inside the plan --------------------------------------------------------------------------------

def fleets(on_demand_room=4):
    spot = Fleet("us-east-1", "spot", "asg-spot", ("g5.xlarge",), 0, 0, 100)
    on_demand = Fleet("us-east-1", "od", "asg-od", ("g5.xlarge",), 0, 0, on_demand_room, on_demand_percent_above_base=100)
    return [spot, on_demand]


def job(job_id="j1", runtime=None, checkpoint=None, **kw):
    return JobRequest(job_id, "sub", 1, 2, 8192, runtime=None if runtime is None else RuntimeEstimate(runtime, 0.5),
                      checkpoint_interval_s=checkpoint, attempts_left=3, **kw)


def bought(result):
    return {s.fleet: s.add_instances for s in result.scale_outs}


def test_a_week_long_job_without_checkpoints_goes_on_demand_at_a_high_interruption_rate():
    result = plan([job(runtime=7 * DAY)], [], fleets(), CATALOG, Limits(100, 0), interruption_rate=lambda r, t: 0.05)
    assert bought(result) == {"od": 1}


@pytest.mark.parametrize(("runtime", "checkpoint", "rate"), [
    (3600, None, 0.05),  # short: a restart costs little
    (7 * DAY, 1800, 0.0005),  # checkpoints and a realistic rate (a few per 10,000 instance-hours)
    (7 * DAY, None, 0.0),  # no interruptions
    (None, None, 0.05),  # no runtime belief: left alone
], ids=["short", "checkpointing", "no-interruptions", "unknown-runtime"])
def test_spot_stays_where_it_is_cheaper_or_nothing_is_known(runtime, checkpoint, rate):
    result = plan([job(runtime=runtime, checkpoint=checkpoint)], [], fleets(), CATALOG, Limits(100, 0),
                  interruption_rate=lambda r, t: rate)
    assert bought(result) == {"spot": 1}


def test_a_user_lifecycle_is_never_overridden():
    result = plan([job(runtime=7 * DAY, lifecycle="spot")], [], fleets(), CATALOG, Limits(100, 0),
                  interruption_rate=lambda r, t: 0.05)
    assert bought(result) == {"spot": 1}


def test_a_job_reserved_an_instance_keeps_the_lifecycle_it_was_bought_for():
    """A spot instance bought for the job is still booting (the spot fleet's pending one) when on-demand room
    appears: choosing again would send the job on-demand and buy it a second instance (found by the
    combined property over the planner, tests/scheduler/test_plan_combined.py)."""
    spot, on_demand = fleets()
    booting = Fleet(**{**vars(spot), "pending_instances": 1})
    reserved = job(runtime=7 * DAY, reserved=Reservation("us-east-1", "spot", "earlier-run:0"))
    result = plan([reserved], [], [booting, on_demand], CATALOG, Limits(100, 0), interruption_rate=lambda r, t: 0.05)
    assert bought(result) == {} and "already launching" in result.waiting[0][1]


def test_past_the_on_demand_cap_the_rest_fall_back_to_spot():
    jobs = [job(f"j{i}", runtime=7 * DAY) for i in range(3)]
    result = plan(jobs, [], fleets(on_demand_room=1), CATALOG, Limits(100, 0), interruption_rate=lambda r, t: 0.05)
    assert bought(result) == {"od": 1, "spot": 2}
    assert not any("cap" in reason for _, reason in result.waiting)
    # With no on-demand room at all, nothing is even tried on-demand.
    assert bought(plan(jobs, [], fleets(on_demand_room=0), CATALOG, Limits(100, 0),
                       interruption_rate=lambda r, t: 0.05)) == {"spot": 3}


def test_a_long_job_sent_on_demand_gets_no_host_while_one_on_spot_does():
    """Hosts (purchase.py, HOST_CLASS) are bought on spot whatever the rate; a job the lifecycle stage moved
    to on-demand is bought its own box: on-demand hosts valued full ran far from full (measured)."""
    types = ("g4dn.4xlarge", "g4dn.12xlarge")
    spot = [Fleet("us-east-1", t, f"asg-{t}", (t,), 0, 0, 100) for t in types]
    on_demand = [Fleet("us-east-1", f"{t}/od", f"asg-{t}-od", (t,), 0, 0, 4, on_demand_percent_above_base=100)
                 for t in types]
    shape = {"vcpus": 12, "memory_mib": 24_000}
    week = JobRequest("week", "sub", 1, runtime=RuntimeEstimate(7 * DAY, 0.5), attempts_left=3, **shape)
    stormy = plan([week], [], [*spot, *on_demand], CATALOG, Limits(100, 0), interruption_rate=lambda r, t: 0.05)
    assert bought(stormy) == {"g4dn.4xlarge/od": 1}
    checkpointing = replace(week, checkpoint_interval_s=1800.0)  # stays on spot, where it gets a host
    assert bought(plan([checkpointing], [], [*spot, *on_demand], CATALOG, Limits(100, 0),
                       interruption_rate=lambda r, t: 0.05)) == {"g4dn.12xlarge": 1}
