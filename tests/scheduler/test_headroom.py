"""Headroom (lambdas/scheduler/planning/headroom.py): placeholders for the jobs that recently waited for a
boot. One case per rule, then the property that matters most: placeholders never change what real jobs
get (their placements, purchases and waits), whatever the world."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from lambdas.common.catalog import load_catalog
from lambdas.scheduler.planning import Limits, ReleasePolicy, Reservation, ScaleOut, plan
from lambdas.scheduler.planning.headroom import RecentWait, is_placeholder, placeholders, remember
from tests.scheduler.test_placement import fleets_st, job, machine, machines_st, reserved_jobs_st
from tests.scheduler.test_placement import fleet as fleet_of

CATALOG = load_catalog()
NOW = 100_000.0
HOUR = 3600.0
LIMITS = Limits(max_hourly_usd=100, current_hourly_usd=0)
RELEASE = ReleasePolicy(after_empty_s=180)


def wait(at=NOW - 60, gpus=1, vcpus=2, memory_mib=8192, **kw) -> RecentWait:
    return RecentWait(at, gpus, vcpus, memory_mib, **kw)


def spare(*waits) -> list:
    return placeholders(list(waits), NOW, HOUR, 8)


def empty_machine(key="m1", instance_type="g5.2xlarge", fleet="gpu4"):
    return replace(machine(key, instance_type, launched_at=NOW - HOUR, empty_since=NOW - 600), fleet=fleet)


def test_placeholders_are_the_newest_waits_of_the_window_and_no_job_can_be_one():
    waits = [wait(NOW - 2 * HOUR, gpus=8), wait(NOW - 50, gpus=1), wait(NOW - 40, gpus=2), wait(NOW - 30, gpus=4)]
    assert [p.gpus for p in placeholders(waits, NOW, HOUR, 2)] == [2, 4]
    assert [p.gpus for p in placeholders(waits, NOW, 3 * HOUR, 8)] == [8, 1, 2, 4]
    assert placeholders(waits, NOW, 0, 8) == [] and placeholders(waits, NOW, HOUR, 0) == []
    assert all(is_placeholder(p.job_id) for p in placeholders(waits, NOW, HOUR, 8))
    assert not is_placeholder("sub-20261126000000-abcdef-00001")


def test_remember_keeps_the_jobs_bought_for_that_had_no_instance_bought_before():
    fresh, again = job("a", gpus=2), job("b", reserved=Reservation("us-east-1", "gpu1", "x"))
    bought = [ScaleOut("us-east-1", "gpu1", "asg", 2, 1.0, ("a", "b"), (("a",), ("b",)))]
    kept = remember([wait(NOW - 2 * HOUR), wait(NOW - 60, gpus=4)], [fresh, again], bought, NOW, HOUR, 8)
    assert [(w.gpus, w.at) for w in kept] == [(4, NOW - 60), (2, NOW)]
    assert remember(kept, [fresh], bought, NOW, HOUR, 1) == [RecentWait.of(fresh, NOW)]
    assert remember(kept, [fresh], bought, NOW, 0, 8) == []


def test_a_placeholder_keeps_an_empty_machine_that_would_be_given_back():
    group = fleet_of("gpu4", ("g5.2xlarge",), current=1)
    idle = empty_machine(fleet="gpu4")
    assert [c.instance_id for c in plan([], [idle], [group], CATALOG, LIMITS, now=NOW, release=RELEASE).releases] == ["i-m1"]
    kept = plan([], [idle], [group], CATALOG, LIMITS, now=NOW, release=RELEASE, headroom=spare(wait()))
    assert kept.releases == () and kept.headroom == () and kept.scale_outs == ()
    # a placeholder the machine cannot hold does not keep it (and is bought for elsewhere)
    too_big = plan([], [idle], [group], CATALOG, LIMITS, now=NOW, release=RELEASE, headroom=spare(wait(gpus=4)))
    assert [c.instance_id for c in too_big.releases] == ["i-m1"]


def test_a_real_job_takes_the_room_first_and_the_placeholder_is_bought_ahead_for_no_job():
    group = fleet_of("gpu1", ("g5.2xlarge",), current=1)
    result = plan([job("real")], [empty_machine(fleet="gpu1")], [group], CATALOG, LIMITS, now=NOW,
                  release=RELEASE, headroom=spare(wait()))
    assert [(p.job_id, p.machine_key) for p in result.placements] == [("real", "m1")]
    (ahead,) = result.headroom
    assert (ahead.fleet, ahead.add_instances, ahead.for_jobs, ahead.boxes) == ("gpu1", 1, (), ())
    assert result.scale_outs == () and result.waiting == ()


def test_room_beside_this_runs_purchase_holds_a_placeholder_without_buying_more():
    group = fleet_of("gpu4", ("g5.12xlarge",))  # 4 GPUs: the real job takes one, the placeholder another
    result = plan([job("real")], [], [group], CATALOG, LIMITS, now=NOW, headroom=spare(wait()))
    assert [s.for_jobs for s in result.scale_outs] == [("real",)] and result.headroom == ()


def test_instances_already_launching_hold_placeholders_after_the_real_jobs():
    group = replace(fleet_of("gpu1", ("g5.2xlarge",)), pending_instances=1)
    waiting = plan([job("real")], [], [group], CATALOG, LIMITS, now=NOW, headroom=spare(wait()))
    assert [w[0] for w in waiting.waiting] == ["real"]
    assert sum(s.add_instances for s in waiting.headroom) == 1  # the launching one is the real job's
    alone = plan([], [], [group], CATALOG, LIMITS, now=NOW, headroom=spare(wait()))
    assert alone.headroom == () and alone.waiting == ()  # the placeholder waits on it: nothing bought


def test_buying_ahead_stays_within_the_caps_the_real_jobs_leave():
    group = fleet_of("gpu1", ("g5.2xlarge",), max_instances=2)
    result = plan([job("a"), job("b")], [], [group], CATALOG, LIMITS, now=NOW, headroom=spare(wait(), wait()))
    assert sum(s.add_instances for s in result.scale_outs) == 2 and result.headroom == ()
    price = CATALOG.get("g5.2xlarge").spot_price("us-east-1")
    capped = Limits(max_hourly_usd=price * 1.5, current_hourly_usd=0)
    result = plan([job("a")], [], [fleet_of("gpu1", ("g5.2xlarge",))], CATALOG, capped, now=NOW,
                  headroom=spare(wait()))
    assert sum(s.add_instances for s in result.scale_outs) == 1 and result.headroom == ()


def test_no_headroom_is_bought_while_admission_is_closed_or_scaling_paused():
    group = fleet_of("gpu1", ("g5.2xlarge",))
    for limits in (Limits(100, 0, admission_open=False), Limits(100, 0, scaling_allowed=False)):
        assert plan([], [], [group], CATALOG, limits, now=NOW, headroom=spare(wait())).headroom == ()


@settings(max_examples=150, deadline=None)
@given(reserved_jobs_st, machines_st, fleets_st, st.floats(1, 200),
       st.lists(st.builds(lambda g, c, m, pat: wait(gpus=g, vcpus=c, memory_mib=m, instance_type_pattern=pat),
                          st.integers(1, 8), st.integers(1, 96), st.integers(512, 400_000),
                          st.sampled_from([None, r"g5\..*", r"g6\..*"])), max_size=8))
def test_placeholders_never_change_what_real_jobs_get(jobs, machines, fleets, cap, waits):
    limits = Limits(max_hourly_usd=cap, current_hourly_usd=0)
    without = plan(jobs, machines, fleets, CATALOG, limits)
    result = plan(jobs, machines, fleets, CATALOG, limits, headroom=spare(*waits))
    assert (result.placements, result.scale_outs, result.waiting) == \
        (without.placements, without.scale_outs, without.waiting)
    bought = [*result.scale_outs, *result.headroom]
    for f in fleets:
        added = sum(s.add_instances for s in bought if s.fleet == f.fleet)
        assert f.current_instances + f.pending_instances + added <= f.max_instances
    assert sum(s.hourly_usd for s in bought) <= cap + 1e-6
    assert all(s.for_jobs == () and s.boxes == () for s in result.headroom)
    assert len(result.headroom) <= len(waits)


def test_a_placeholder_for_a_job_that_shares_a_gpu_keeps_a_machine_that_can_share():
    group = fleet_of("gpu4", ("g5.2xlarge",), current=1)
    sharing = replace(empty_machine(), gpu_memory_mib=CATALOG.get("g5.2xlarge").shareable_gpu_memory_mib)
    cannot = replace(empty_machine("m2"), gpu_memory_mib=0)  # its agent does not advertise MPS
    result = plan([], [sharing, cannot], [replace(group, current_instances=2)], CATALOG, LIMITS, now=NOW,
                  release=ReleasePolicy(after_empty_s=180, budget_percent=100),
                  headroom=spare(wait(gpus=0, gpu_memory_mib=4000)))
    assert [c.instance_id for c in result.releases] == ["i-m2"] and result.headroom == ()


def _held_back_by_the_dollar_cap(shares):
    """An empty 1-GPU machine kept for a placeholder holds the dollars a waiting 4-GPU job needs."""
    small, big = fleet_of("gpu1", ("g5.2xlarge",), current=1), fleet_of("gpu4", ("g5.12xlarge",))
    idle = empty_machine(fleet="gpu1")
    price = CATALOG.get("g5.2xlarge").spot_price("us-east-1")
    cap = Limits(max_hourly_usd=price + CATALOG.get("g5.12xlarge").spot_price("us-east-1") - 0.01,
                 current_hourly_usd=price)
    kw = dict(now=NOW, release=RELEASE, shares=shares)
    without = plan([job("big", gpus=4)], [idle], [small, big], CATALOG, cap, **kw)
    result = plan([job("big", gpus=4)], [idle], [small, big], CATALOG, cap, headroom=spare(wait()), **kw)
    return without, result


def test_a_real_job_waiting_on_the_dollar_cap_gets_the_machine_a_placeholder_kept():
    """Without headroom the idle machine goes back and the next run buys for the job; a placeholder must not
    hold those dollars (the job would wait the whole window)."""
    from lambdas.scheduler.planning import Shares
    for shares in (None, Shares()):
        without, result = _held_back_by_the_dollar_cap(shares)
        assert [c.instance_id for c in without.releases] == ["i-m1"]
        assert [c.instance_id for c in result.releases] == ["i-m1"] and result.headroom == ()


def test_a_real_job_waiting_on_its_fleets_cap_gets_the_slot_a_placeholder_kept():
    """The fleet now buys g6 (its config changed); its last g5 machine is idle and holds the fleet's one slot. A
    job that asks for g6 waits on the cap: a placeholder must not keep the g5 machine for the whole window."""
    group = fleet_of("gpu4", ("g6.12xlarge",), current=1, max_instances=1)
    idle = empty_machine(instance_type="g5.12xlarge", fleet="gpu4")
    g6 = job("g6", gpus=4, instance_type_pattern=r"g6\..*")
    without = plan([g6], [idle], [group], CATALOG, LIMITS, now=NOW, release=RELEASE)
    assert [c.instance_id for c in without.releases] == ["i-m1"]
    result = plan([g6], [idle], [group], CATALOG, LIMITS, now=NOW, release=RELEASE, headroom=spare(wait()))
    assert [c.instance_id for c in result.releases] == ["i-m1"]
    # a fleet the waiting job cannot use keeps its placeholder's machine
    other = fleet_of("gpu1", ("g5.2xlarge",), current=1)
    kept = plan([g6], [idle, empty_machine("m2", fleet="gpu1")], [group, other], CATALOG, LIMITS, now=NOW,
                release=ReleasePolicy(after_empty_s=180, budget_percent=100), headroom=spare(wait(), wait(gpus=4)))
    assert [c.instance_id for c in kept.releases] == ["i-m1"]


def test_a_placeholder_holds_the_lifecycle_the_plan_bought_its_job():
    """The lifecycle stage sent a week-long job without checkpoints on-demand: a placeholder of the same
    shape must keep on-demand room, or the spot machine it keeps never holds the next such job (the stage
    sends that one on-demand too) and is paid for nothing."""
    from lambdas.scheduler.planning import Fleet, RuntimeEstimate
    spot = Fleet("us-east-1", "spot", "asg-spot", ("g5.xlarge",), 0, 0, 100)
    on_demand = Fleet("us-east-1", "od", "asg-od", ("g5.xlarge",), 0, 0, 4, on_demand_percent_above_base=100)
    week = replace(job("week", vcpus=2, memory_mib=8192), runtime=RuntimeEstimate(7 * 86_400.0, 0.5), attempts_left=3)
    rate = dict(interruption_rate=lambda r, t: 0.05)
    first = plan([week], [], [spot, on_demand], CATALOG, LIMITS, now=NOW, **rate)
    assert [s.fleet for s in first.scale_outs] == ["od"]
    waits = remember([], [week], first.scale_outs, NOW, HOUR, 8, [spot, on_demand])
    after = plan([], [], [spot, on_demand], CATALOG, LIMITS, now=NOW + 60, headroom=placeholders(waits, NOW + 60, HOUR, 8),
                 **rate)
    assert [s.fleet for s in after.headroom] == ["od"]
