"""Duration-aware placement (packer.py with `Timing`, purchase by runtime class): jobs that will end
together share a machine; a long job does not pin a big machine that short jobs filled."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lambdas.common.catalog import load_catalog
from lambdas.scheduler.planning import Fleet, JobRequest, Limits, Machine, ReleasePolicy, RuntimeEstimate, plan
from lambdas.scheduler.planning.constraints import Patterns
from lambdas.scheduler.planning.fleets import purchase_options
from lambdas.scheduler.planning.purchase import host_hourly
from lambdas.scheduler.planning.runtimes import RuntimePrior

CATALOG = load_catalog()
NOW = 1_000_000.0
HOUR = 3600.0
LIMITS = Limits(1000, 0)


def job(job_id, runtime_h=None, gpus=1, vcpus=4, memory_mib=8_000, **kw):
    runtime = None if runtime_h is None else RuntimeEstimate(runtime_h * HOUR, 0.3)
    return JobRequest(job_id, kw.pop("submission_id", job_id), gpus, vcpus, memory_mib, runtime=runtime, **kw)


def machine(key, instance_type="g5.48xlarge", *, free_gpus=None, busy_h=None, fleet=None, az="us-east-1a", **kw):
    spec = CATALOG.get(instance_type)
    free = spec.gpus if free_gpus is None else free_gpus
    share = free / spec.gpus
    return Machine(key, f"i-{key}", "us-east-1", fleet or instance_type, instance_type, az, "spot", free,
                   spec.vcpus * share, int(spec.schedulable_memory_mib * share), spec.spot_price("us-east-1"),
                   submissions=frozenset() if free == spec.gpus else frozenset({"other"}),
                   busy_until=None if busy_h is None else NOW + busy_h * HOUR, **kw)


def fleet(instance_type, current=0):
    return Fleet("us-east-1", instance_type, f"asg-{instance_type}", (instance_type,), current, 0, 100)


def placed(result):
    return {p.job_id: p.machine_key for p in result.placements}


def test_a_long_job_does_not_pin_a_big_machine_whose_short_jobs_end_soon():
    # Seven GPUs of an 8-GPU machine run jobs ending within 10 minutes; the week-long job buys a small one.
    big = machine("big", free_gpus=1, busy_h=1 / 6)
    result = plan([job("long", runtime_h=168)], [big], [fleet("g5.xlarge"), fleet("g5.48xlarge", 1)], CATALOG,
                  LIMITS, now=NOW)
    assert placed(result) == {} and [(s.fleet, s.add_instances) for s in result.scale_outs] == [("g5.xlarge", 1)]
    # A short job fills the same hole: it ends before the machine's other jobs, it costs nothing extra.
    assert placed(plan([job("short", runtime_h=0.1)], [big], [fleet("g5.xlarge")], CATALOG, LIMITS, now=NOW)) == \
        {"short": "big"}
    # Without a runtime belief, best fit places it as before.
    assert placed(plan([job("unknown")], [big], [fleet("g5.xlarge")], CATALOG, LIMITS, now=NOW)) == {"unknown": "big"}


@pytest.mark.parametrize("runs_h, placed_there", [
    ([168.0] * 30, False),                 # jobs run for a week: it would keep the $5.87/h machine up alone
    ([0.05] * 27 + [100.0] * 3, False),    # one job in ten runs 100 hours: still 13 times a box of its own
    ([0.05] * 30, True),                   # jobs end within minutes: the room is paid for anyway
])
def test_a_job_without_a_belief_is_judged_by_what_the_environment_s_jobs_ran(runs_h, placed_there):
    """Seven GPUs of an 8-GPU machine run jobs ending within 10 minutes. Without a belief of its own, a job is
    expected to run past that as the environment's finished jobs did (runtimes.RuntimePrior)."""
    big = machine("big", free_gpus=1, busy_h=1 / 6)
    prior = RuntimePrior.of(h * HOUR for h in runs_h)
    result = plan([job("unknown")], [big], [fleet("g5.xlarge")], CATALOG, LIMITS, now=NOW, runtime_prior=prior)
    if placed_there:
        assert placed(result) == {"unknown": "big"} and result.scale_outs == ()
    else:
        assert placed(result) == {} and [(s.fleet, s.add_instances) for s in result.scale_outs] == [("g5.xlarge", 1)]
    # A machine whose jobs run for weeks more: what the job may run past them is little whatever the prior.
    long_busy = machine("long", free_gpus=1, busy_h=500)
    assert placed(plan([job("unknown")], [long_busy], [fleet("g5.xlarge")], CATALOG, LIMITS, now=NOW,
                       runtime_prior=prior)) == {"unknown": "long"}


def test_room_cheaper_than_a_box_of_its_own_is_taken_whatever_the_prior():
    """A T4 and a quarter of a g4dn.12xlarge ($0.33/h) for a job whose own box is a g4dn.4xlarge ($0.45/h): a
    bargain even if it keeps the machine up, and requeued jobs refill such hosts (dear room's view)."""
    host = machine("host", "g4dn.12xlarge", free_gpus=1, busy_h=1 / 6)
    week_long = RuntimePrior.of([168 * HOUR] * 30)
    big = job("unknown", vcpus=12, memory_mib=24_000)
    assert placed(plan([big], [host], [fleet("g4dn.4xlarge")], CATALOG, LIMITS, now=NOW,
                       runtime_prior=week_long)) == {"unknown": "host"}


def test_dear_room_holds_for_a_job_without_a_belief_even_where_the_prior_says_it_ends_first():
    """docs/scheduler.md, "1. Live machines": the prior judges room that costs more than a box of the job's own,
    and dear room still declines room whose share costs more than twice that, whatever the prior says."""
    dear = machine("dear", "p5.48xlarge", free_gpus=4, busy_h=3)
    minutes = RuntimePrior.of([0.05 * HOUR] * 30)  # every finished job ran three minutes: it would end first
    result = plan([job("small")], [dear], [fleet("g4dn.xlarge")], CATALOG, LIMITS, now=NOW, runtime_prior=minutes)
    assert placed(result) == {} and [(s.fleet, s.add_instances) for s in result.scale_outs] == [("g4dn.xlarge", 1)]


@pytest.mark.parametrize("instance_type, free_gpus, placed_there", [
    ("p5.48xlarge", 4, False),    # an eighth of $23.45/h for a job a g4dn.xlarge runs for $0.20/h
    ("p5.48xlarge", 8, False),    # empty: the same share, the same price
    ("g6.48xlarge", 4, False),    # $0.69/h an L4: more than twice a T4 of its own
    ("g4dn.12xlarge", 2, True),   # $0.33/h a T4: cheaper than a box of its own
    ("g4dn.metal", 4, True),      # $0.37/h a T4
])
def test_a_job_of_unknown_runtime_takes_room_only_where_its_share_costs_at_most_twice_a_box_of_its_own(
        instance_type, free_gpus, placed_there):
    """It may outlast the machine's other jobs and keep it up: room on a dear machine is not free for it."""
    host = machine("host", instance_type, free_gpus=free_gpus)
    fleets = [fleet("g4dn.xlarge")]
    result = plan([job("small")], [host], fleets, CATALOG, LIMITS, now=NOW)
    if placed_there:
        assert placed(result) == {"small": "host"} and result.scale_outs == ()
    else:
        assert placed(result) == {} and [(s.fleet, s.add_instances) for s in result.scale_outs] == \
            [("g4dn.xlarge", 1)]


def test_dear_room_is_still_taken_where_the_job_surely_ends_first_or_nothing_else_holds_it():
    p5 = machine("p5", "p5.48xlarge", free_gpus=4, busy_h=10)
    # Known to end before the machine's other jobs: the room is paid for anyway.
    assert placed(plan([job("short", runtime_h=1)], [p5], [fleet("g4dn.xlarge")], CATALOG, LIMITS, now=NOW)) == \
        {"short": "p5"}
    # Its runtime known but the machine's end not: it may keep the machine up, so its share is priced.
    unknown_end = machine("p5", "p5.48xlarge", free_gpus=4)
    assert placed(plan([job("short", runtime_h=1)], [unknown_end], [fleet("g4dn.xlarge")], CATALOG, LIMITS,
                       now=NOW)) == {}
    # No fleet to buy from, or the cheap one at its cap: nothing is cheaper than the room there is, and the
    # job would only wait.
    assert placed(plan([job("small")], [unknown_end], [], CATALOG, LIMITS, now=NOW)) == {"small": "p5"}
    capped = Fleet("us-east-1", "g4dn.xlarge", "asg-g4dn.xlarge", ("g4dn.xlarge",), 100, 0, 100)
    assert placed(plan([job("small")], [unknown_end], [capped], CATALOG, LIMITS, now=NOW)) == {"small": "p5"}
    long_job = job("long", runtime_h=48)  # the extension rule alike: declined only for what can be bought
    assert placed(plan([long_job], [p5], [capped], CATALOG, LIMITS, now=NOW)) == {"long": "p5"}
    assert placed(plan([long_job], [p5], [fleet("g4dn.xlarge")], CATALOG, LIMITS, now=NOW)) == {}


@pytest.mark.parametrize("sigma, placed_there", [
    (0.3, True),    # surely done before the machine's other jobs: the room is paid for anyway
    (1.0, False),   # "about an hour" may be three: 21 minutes expected past them, at $23.45/h
])
def test_dear_room_is_declined_where_the_belief_s_spread_makes_keeping_it_up_likely(sigma, placed_there):
    """Median one hour, the p5.48xlarge's own jobs end in three. With the spread of a user's hint, the
    extension expected (runtimes.expected_excess_s) costs many times the g4dn.xlarge it could have alone;
    judged by its median alone, the job took that room and could keep a p5 up for hours (synthetic trace,
    docs/scheduler-benchmark.md, "Why the synthetic trace stays above 0.93 ×")."""
    p5 = machine("p5", "p5.48xlarge", free_gpus=4, busy_h=3)
    request = replace(job("one-hour"), runtime=RuntimeEstimate(HOUR, sigma))
    result = plan([request], [p5], [fleet("g4dn.xlarge")], CATALOG, LIMITS, now=NOW)
    if placed_there:
        assert placed(result) == {"one-hour": "p5"} and result.scale_outs == ()
    else:
        assert placed(result) == {} and [(s.fleet, s.add_instances) for s in result.scale_outs] == \
            [("g4dn.xlarge", 1)]
    # Where nothing can be bought instead, the room is taken whatever the spread.
    assert placed(plan([request], [p5], [], CATALOG, LIMITS, now=NOW)) == {"one-hour": "p5"}


def test_jobs_that_end_together_share_a_machine():
    # Two 8-GPU machines: "soon" is fuller but its jobs end in an hour; "late" runs for ten more hours.
    soon = machine("soon", free_gpus=2, busy_h=1)
    late = machine("late", free_gpus=4, busy_h=10)
    assert placed(plan([job("nine-hours", runtime_h=9)], [soon, late], [], CATALOG, LIMITS, now=NOW)) == \
        {"nine-hours": "late"}
    # A job as short as the fuller machine's goes there: best fit, no extension either way.
    assert placed(plan([job("one-hour", runtime_h=0.9)], [soon, late], [], CATALOG, LIMITS, now=NOW)) == \
        {"one-hour": "soon"}


def test_an_empty_big_machine_is_declined_for_a_long_small_job_but_used_for_a_short_one():
    empty = machine("empty", "g5.48xlarge")
    fleets = [fleet("g5.xlarge"), fleet("g5.48xlarge", 1)]
    assert placed(plan([job("long", runtime_h=48)], [empty], fleets, CATALOG, LIMITS, now=NOW)) == {}
    assert placed(plan([job("big-long", runtime_h=48, gpus=8, vcpus=150, memory_mib=600_000)], [empty], fleets,
                       CATALOG, LIMITS, now=NOW)) == {"big-long": "empty"}


def test_purchases_never_mix_a_day_long_job_with_minute_long_ones():
    jobs = [job("day", runtime_h=30)] + [job(f"m{i}", runtime_h=0.1) for i in range(3)]
    result = plan(jobs, [], [fleet("g5.12xlarge")], CATALOG, LIMITS, now=NOW)
    (scale_out,) = result.scale_outs
    assert sorted(scale_out.boxes) == [("day",), ("m0", "m1", "m2")]
    # Without beliefs they share one box, as before.
    unknown = [job(j.job_id) for j in jobs]
    assert plan(unknown, [], [fleet("g5.12xlarge")], CATALOG, LIMITS, now=NOW).scale_outs[0].add_instances == 1


TYPES = ["g5.xlarge", "g5.12xlarge", "g5.48xlarge"]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.builds(lambda n, g, c, rt, pat: job(f"j{n}", rt, gpus=g, vcpus=c, instance_type_pattern=pat),
                          st.integers(0, 10**6), st.integers(1, 8), st.integers(1, 64),
                          st.one_of(st.none(), st.floats(0.01, 500)), st.sampled_from([None, r"g5\.12xlarge"])),
                max_size=20, unique_by=lambda j: j.job_id),
       st.lists(st.builds(lambda n, t, used, busy: machine(f"m{n}", t, free_gpus=max(0, CATALOG.get(t).gpus - used),
                                                           busy_h=busy if used else None),
                          st.integers(0, 10**6), st.sampled_from(TYPES), st.integers(0, 8),
                          st.one_of(st.none(), st.floats(0, 500))), max_size=8, unique_by=lambda m: m.key))
def test_with_runtimes_nothing_is_over_committed_and_nothing_dropped(jobs, machines):
    result = plan(jobs, machines, [fleet(t) for t in TYPES], CATALOG, LIMITS, now=NOW)
    by_key, by_id = {m.key: m for m in machines}, {j.job_id: j for j in jobs}
    assert sorted([p.job_id for p in result.placements] + [w[0] for w in result.waiting]) == sorted(by_id)
    used: dict[str, list] = {}
    for p in result.placements:
        m, j = by_key[p.machine_key], by_id[p.job_id]
        assert j.instance_type_pattern is None or re.fullmatch(j.instance_type_pattern, m.instance_type)
        u = used.setdefault(m.key, [0, 0, 0])
        u[0] += j.gpus
        u[1] += j.vcpus
        u[2] += j.memory_mib
    for key, (g, c, mem) in used.items():
        m = by_key[key]
        assert g <= m.free_gpus and c <= m.free_vcpus + 1e-9 and mem <= m.free_memory_mib
    for s in result.scale_outs:
        spec = CATALOG.get(s.fleet)
        for box in s.boxes:
            assert sum(by_id[j].gpus for j in box) <= spec.gpus
            assert sum(by_id[j].vcpus for j in box) <= spec.schedulable_vcpus
    assert plan(jobs, machines, [fleet(t) for t in TYPES], CATALOG, LIMITS, now=NOW) == result  # deterministic


def test_a_job_expected_to_run_for_days_gets_a_host_that_jobs_like_it_will_fill():
    fleets = [fleet("g4dn.4xlarge"), fleet("g4dn.12xlarge")]
    shape = dict(vcpus=12, memory_mib=24_000)
    price = {t: CATALOG.get(t).spot_price("us-east-1") for t in ("g4dn.4xlarge", "g4dn.12xlarge")}
    assert price["g4dn.12xlarge"] / 4 < price["g4dn.4xlarge"] < price["g4dn.12xlarge"]  # four per box are cheaper
    week = plan([job("week", runtime_h=168, **shape)], [], fleets, CATALOG, LIMITS, now=NOW)
    assert [(s.fleet, s.add_instances) for s in week.scale_outs] == [("g4dn.12xlarge", 1)]
    hour = plan([job("hour", runtime_h=1, **shape)], [], fleets, CATALOG, LIMITS, now=NOW)
    assert [(s.fleet, s.add_instances) for s in hour.scale_outs] == [("g4dn.4xlarge", 1)]
    # The next long job joins the host on the live stage: the host outlives it, nothing extra to pay.
    host = machine("host", "g4dn.12xlarge", free_gpus=3, busy_h=160)
    assert placed(plan([job("next", runtime_h=150, **shape)], [host], fleets, CATALOG, LIMITS, now=NOW)) == \
        {"next": "host"}
    # Also where spot instances are reclaimed well within the host's life (0.05 per hour: every 20 hours):
    # measured cheaper per completed GPU-hour there too (purchase.py, HOST_CLASS).
    stormy = plan([job("week", runtime_h=168, **shape)], [], fleets, CATALOG, LIMITS, now=NOW,
                  interruption_rate=lambda region, instance_type: 0.05)
    assert [(s.fleet, s.add_instances) for s in stormy.scale_outs] == [("g4dn.12xlarge", 1)]


def test_a_host_is_valued_full_of_at_most_four_jobs_like_its_own():
    """A week-long one-GPU job of 16 vCPUs and 64 GiB: a g4dn.metal holds five such jobs, a g4dn.12xlarge
    two. Valued full, the metal looks cheapest per job; but the jobs to come are a bet, and five that
    never came left it mostly empty on the shared trace (purchase.py, HOST_MAX_JOBS)."""
    fleets = [fleet("g4dn.8xlarge"), fleet("g4dn.12xlarge"), fleet("g4dn.metal")]
    shape = dict(vcpus=16, memory_mib=64 * 1024)
    price = {t: CATALOG.get(t).spot_price("us-east-1") for t in ("g4dn.8xlarge", "g4dn.12xlarge", "g4dn.metal")}
    assert price["g4dn.metal"] / 5 < price["g4dn.12xlarge"] / 2 < price["g4dn.8xlarge"]  # full, the metal wins
    assert price["g4dn.metal"] / 4 > price["g4dn.12xlarge"] / 2
    week = plan([job("week", runtime_h=168, **shape)], [], fleets, CATALOG, LIMITS, now=NOW)
    assert [(s.fleet, s.add_instances) for s in week.scale_outs] == [("g4dn.12xlarge", 1)]
    # Five such jobs at once are no bet: they fill the metal, and it is bought.
    five = plan([job(f"week-{n}", runtime_h=168, **shape) for n in range(5)], [], fleets, CATALOG, LIMITS, now=NOW)
    assert [(s.fleet, s.add_instances) for s in five.scale_outs] == [("g4dn.metal", 1)]


def test_a_long_job_is_weighed_against_the_host_it_would_be_bought_not_a_box_of_its_own():
    """A job believed to run 3,600 hours and a g4dn.12xlarge host with room whose jobs end in 300: keeping
    the host up 3,300 hours longer costs more than twice the job's own g4dn.4xlarge, which the rule used to
    weigh, so it declined the room, and the purchase bought the job a second g4dn.12xlarge host, whose whole
    price then ran for all of its runtime (seed 6 of the shared trace, where the first host then ran 937
    hours with its one job)."""
    fleets = [fleet("g4dn.4xlarge"), fleet("g4dn.12xlarge", 1), fleet("g5.48xlarge", 1)]
    shape = dict(vcpus=12, memory_mib=16 * 1024)
    price = {t: CATALOG.get(t).spot_price("us-east-1") for t in ("g4dn.4xlarge", "g4dn.12xlarge", "g5.48xlarge")}
    assert price["g4dn.12xlarge"] * (3600 - 300) > 2 * price["g4dn.4xlarge"] * 3600  # declined by its own box
    host = machine("host", "g4dn.12xlarge", free_gpus=3, busy_h=300)
    assert placed(plan([job("long", runtime_h=3600, **shape)], [host], fleets, CATALOG, LIMITS, now=NOW)) == \
        {"long": "host"}
    # Room dearer than the host it would be bought is still declined: it gets that host instead.
    dear = machine("dear", "g5.48xlarge", free_gpus=7, busy_h=300)
    result = plan([job("long", runtime_h=3600, **shape)], [dear], fleets, CATALOG, LIMITS, now=NOW)
    assert placed(result) == {} and [(s.fleet, s.add_instances) for s in result.scale_outs] == \
        [("g4dn.12xlarge", 1)]
    # A job the purchase buys no host for (40 hours) is still weighed against a box of its own.
    soon = machine("soon", "g4dn.12xlarge", free_gpus=3, busy_h=1)
    result = plan([job("days", runtime_h=40, **shape)], [soon], fleets, CATALOG, LIMITS, now=NOW)
    assert placed(result) == {} and [(s.fleet, s.add_instances) for s in result.scale_outs] == \
        [("g4dn.4xlarge", 1)]


def test_a_long_job_takes_room_about_the_price_of_its_own_box_however_long_it_outlasts_the_machine_s_jobs():
    """Seed 6 of the shared trace: openb-pod-0001 (one GPU, 6 vCPUs, 12 GiB, believed to run 2,836 hours) and
    a g4dn.12xlarge host with three free GPUs whose one job was believed to end in 800. Its own host is a
    g4dn.2xlarge, and keeping the 12xlarge up 2,000 hours longer costs more than twice that, so the room
    was declined and the job ran 1,028 hours on a box of its own beside it. Its quarter of the 12xlarge is
    5% dearer than the g4dn.2xlarge: it takes it now (packer.HOST_ROOM_FACTOR)."""
    fleets = [fleet("g4dn.2xlarge"), fleet("g4dn.12xlarge", 1)]
    shape = dict(vcpus=6, memory_mib=12 * 1024)
    price = {t: CATALOG.get(t).spot_price("us-east-1") for t in ("g4dn.2xlarge", "g4dn.12xlarge")}
    assert price["g4dn.12xlarge"] * (2836 - 800) > 2 * price["g4dn.2xlarge"] * 2836  # the extension declined it
    assert price["g4dn.2xlarge"] < price["g4dn.12xlarge"] / 4 <= 1.1 * price["g4dn.2xlarge"]
    host = machine("host", "g4dn.12xlarge", free_gpus=3, busy_h=800)
    assert placed(plan([job("long", runtime_h=2836, **shape)], [host], fleets, CATALOG, LIMITS, now=NOW)) == \
        {"long": "host"}
    # A job the purchase buys no host for (40 hours) is still judged by the extension: a box of its own.
    soon = machine("soon", "g4dn.12xlarge", free_gpus=3, busy_h=1)
    result = plan([job("days", runtime_h=40, **shape)], [soon], fleets, CATALOG, LIMITS, now=NOW)
    assert placed(result) == {} and [(s.fleet, s.add_instances) for s in result.scale_outs] == \
        [("g4dn.2xlarge", 1)]
    # Room more than 10% dearer than its own box is judged by the extension as before: an eighth of a
    # g4dn.metal is 18% dearer than the g4dn.2xlarge.
    metal_price = CATALOG.get("g4dn.metal").spot_price("us-east-1")
    assert metal_price / 8 > 1.1 * price["g4dn.2xlarge"]
    metal = machine("metal", "g4dn.metal", free_gpus=7, busy_h=800)
    result = plan([job("long", runtime_h=2836, **shape)], [metal], [*fleets, fleet("g4dn.metal", 1)], CATALOG,
                  LIMITS, now=NOW)
    assert placed(result) == {} and [(s.fleet, s.add_instances) for s in result.scale_outs] == \
        [("g4dn.2xlarge", 1)]


HOST_TYPES = ["g4dn.xlarge", "g4dn.2xlarge", "g4dn.4xlarge", "g4dn.8xlarge", "g4dn.12xlarge", "g4dn.metal",
              "g5.12xlarge", "g5.48xlarge", "p3.8xlarge"]


@settings(max_examples=80, deadline=None)
@given(gpus=st.integers(1, 8), vcpus=st.integers(1, 96), memory_gib=st.integers(1, 400),
       types=st.lists(st.sampled_from(HOST_TYPES), min_size=1, max_size=5, unique=True),
       shared_mib=st.one_of(st.none(), st.integers(500, 23_000)))
def test_the_host_the_live_stage_weighs_is_the_one_the_purchase_buys(gpus, vcpus, memory_gib, types, shared_mib):
    """For jobs of whole GPUs and for jobs sharing one (`shared_mib` of its memory)."""
    size = dict(gpus=gpus) if shared_mib is None else dict(gpus=0, gpu_memory_mib=shared_mib)
    long = job("long", runtime_h=200, vcpus=vcpus, memory_mib=memory_gib * 1024, **size)
    fleets = [fleet(t) for t in types]
    options = purchase_options(fleets, CATALOG, {})
    weighed = host_hourly(long, options, Patterns())
    bought = plan([long], [], fleets, CATALOG, LIMITS, now=NOW).scale_outs
    if bought:  # scale-outs give their price to four decimals
        assert len(bought) == 1 and bought[0].add_instances == 1
        assert weighed == pytest.approx(bought[0].hourly_usd, abs=5e-5)
    else:
        assert weighed is None
    assert host_hourly(replace(long, runtime=RuntimeEstimate(40 * HOUR, 0.3)), options, Patterns()) is None


BOOT_S = 180.0


@pytest.mark.parametrize("instance_type, up_s, runtime_h, placed_there", [
    ("g4dn.12xlarge", 3600, None, False),    # kept by the release delay, $1.32/h against a $0.20/h box of its own
    ("g4dn.12xlarge", 3600, 1, False),       # the same with a runtime belief: it pays all of it until others come
    ("g4dn.12xlarge", 3600, 500, False),
    ("g4dn.12xlarge", BOOT_S + 60, None, True),   # just booted: bought (or replaced) for waiting jobs
    ("g4dn.xlarge", 3600, None, True),       # no dearer than a box of its own: used, no boot to wait for
])
def test_an_empty_machine_kept_by_the_release_delay_takes_a_job_only_if_no_dearer_than_its_own_box(
        instance_type, up_s, runtime_h, placed_there):
    kept = machine("kept", instance_type, launched_at=NOW - up_s, empty_since=NOW - min(up_s, 600))
    fleets = [fleet("g4dn.xlarge", 1 if instance_type == "g4dn.xlarge" else 0)] + \
        ([fleet(instance_type, 1)] if instance_type != "g4dn.xlarge" else [])
    result = plan([job("small", runtime_h=runtime_h)], [kept], fleets, CATALOG, LIMITS, now=NOW, boot_s=BOOT_S,
                  release=ReleasePolicy(after_empty_s=BOOT_S))
    if placed_there:
        assert placed(result) == {"small": "kept"} and result.scale_outs == () and result.releases == ()
    else:
        # The job gets a box of its own, and the kept machine, past its delay, is given back in the same plan.
        assert placed(result) == {} and [(s.fleet, s.add_instances) for s in result.scale_outs] == [("g4dn.xlarge", 1)]
        assert [c.instance_id for c in result.releases] == ["i-kept"]


def test_a_kept_empty_machine_is_used_when_nothing_cheaper_can_be_bought_or_it_cannot_be_given_back():
    release = ReleasePolicy(after_empty_s=BOOT_S)

    def kept_plan(jobs, machine, fleets, group=None):
        group = group or fleet("g4dn.12xlarge", 1)
        return plan(jobs, [machine], [*fleets, group], CATALOG, LIMITS, now=NOW, boot_s=BOOT_S, release=release)

    kept = machine("kept", "g4dn.12xlarge", launched_at=NOW - 3600, empty_since=NOW - 600)
    capped = Fleet("us-east-1", "g4dn.xlarge", "asg-g4dn.xlarge", ("g4dn.xlarge",), 100, 0, 100)
    for fleets in ([], [capped]):  # nothing cheaper to buy
        assert placed(kept_plan([job("small")], kept, fleets)) == {"small": "kept"}
    # Paid for whatever runs on it: protected by mlfleet:keep-alive, or the group at its minimum.
    protected = machine("kept", "g4dn.12xlarge", launched_at=NOW - 3600, empty_since=NOW - 600, protected=True)
    assert placed(kept_plan([job("small")], protected, [fleet("g4dn.xlarge")])) == {"small": "kept"}
    at_minimum = Fleet("us-east-1", "g4dn.12xlarge", "asg-g4dn.12xlarge", ("g4dn.12xlarge",), 1, 0, 100, min_size=1)
    assert placed(kept_plan([job("small")], kept, [fleet("g4dn.xlarge")], at_minimum)) == {"small": "kept"}
    # Without a release stage (no policy), nothing is given back, so nothing is judged.
    assert placed(plan([job("small")], [kept], [fleet("g4dn.xlarge"), fleet("g4dn.12xlarge", 1)], CATALOG, LIMITS,
                       now=NOW, boot_s=BOOT_S)) == {"small": "kept"}
    # Headroom configured, with or without placeholders this run: machines are kept on purpose for the jobs to
    # come, and a job takes one (the same with and without placeholders: they take nothing from real jobs).
    spare = JobRequest("headroom:0", "headroom", 1, 4, 8_000)
    for placeholders in ([spare], []):
        assert placed(plan([job("small")], [kept], [fleet("g4dn.xlarge"), fleet("g4dn.12xlarge", 1)], CATALOG,
                           LIMITS, now=NOW, boot_s=BOOT_S, release=release, headroom=placeholders,
                           headroom_on=True)) == {"small": "kept"}
    # Unknown launch time: never judged by its age.
    unknown = machine("kept", "g4dn.12xlarge")
    assert placed(kept_plan([job("small")], unknown, [fleet("g4dn.xlarge")])) == {"small": "kept"}
    # A machine with a job on it is not empty: its room goes by the dear-room rule ($0.33/h a T4 here).
    busy = machine("kept", "g4dn.12xlarge", free_gpus=2, launched_at=NOW - 3600)
    assert placed(kept_plan([job("small")], busy, [fleet("g4dn.xlarge")])) == {"small": "kept"}
    # Two jobs: the first, declined, is bought a box; the second is judged the same way (the machine is still empty).
    result = kept_plan([job("a"), job("b")], kept, [fleet("g4dn.xlarge")])
    assert placed(result) == {} and sum(s.add_instances for s in result.scale_outs) >= 1
