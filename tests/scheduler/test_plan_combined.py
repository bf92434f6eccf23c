"""The whole planner at once: random worlds that mix every feature the per-stage properties exercise apart
(whole-GPU and GPU-sharing jobs, patterns, two regions, lifecycles, reservations valid and stale, checkpoint
regions, runtimes, teams with quotas, machines draining, removing, protected or under rebalance, launching
instances, fleet caps, the dollar cap, paused scaling, closed admission, interruption rates, releases), and
the rules docs/scheduler.md and docs/removal.md state, checked on every plan."""

from __future__ import annotations

import itertools
import math
import random
import re
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from lambdas.common.catalog import load_catalog
from lambdas.removal.decide import disruption_budget
from lambdas.scheduler.planning import (
    Fleet, JobRequest, Limits, Machine, ReleasePolicy, Reservation, RuntimeEstimate, Shares, Team, plan,
)
from lambdas.scheduler.planning.constraints import capacity_of, gpu_share
from lambdas.scheduler.planning.fleets import fleet_lifecycle, purchase_options
from lambdas.scheduler.planning.headroom import RecentWait, placeholders
from lambdas.scheduler.planning.shares import offer_jobs

from test_gpu_sharing import gpus_pack  # tests/scheduler is on the path (rootdir-relative import)

CATALOG = load_catalog()
NOW = 100_000.0
REGIONS = ("us-east-1", "us-west-2")
FLEET_TYPES = [("g4dn.xlarge",), ("g5.2xlarge",), ("g5.12xlarge", "g6.12xlarge"), ("g4dn.xlarge", "g5.xlarge"),
               ("g6e.12xlarge",), ("g4dn.12xlarge",)]
PATTERNS = [None, r"g5\..*", r"g4dn\..*", r"g[56]\.12xlarge", r"g6e\..*"]
TEAMS = ("a", "b")


@st.composite
def fleets_st(draw):
    fleets = []
    for name in draw(st.lists(st.sampled_from(["f1", "f2", "f3", "f4"]), min_size=1, max_size=4, unique=True)):
        mix = draw(st.sampled_from(["spot", "spot", "on-demand", "mixed"]))
        fleets.append(Fleet(draw(st.sampled_from(REGIONS)), name, f"asg-{name}", draw(st.sampled_from(FLEET_TYPES)),
                            current_instances=0, pending_instances=draw(st.sampled_from([0, 0, 1, 2])),
                            max_instances=draw(st.integers(0, 8)), on_demand_base=int(mix == "mixed"),
                            on_demand_percent_above_base=100 if mix == "on-demand" else 0,
                            min_size=draw(st.sampled_from([0, 0, 1, 3])),
                            removing_instances=draw(st.sampled_from([0, 0, 0, 1, 2])),
                            terminating_instances=draw(st.sampled_from([0, 0, 0, 1, 2])),
                            gpu_sharing=draw(st.sampled_from([True, True, False]))))
    return fleets


@st.composite
def machine_st(draw, n, fleets):
    home = draw(st.sampled_from(fleets)) if fleets and draw(st.integers(0, 5)) else None
    region = home.region if home else draw(st.sampled_from(REGIONS))
    instance_type = draw(st.sampled_from(home.instance_types if home else [t for ts in FLEET_TYPES for t in ts]))
    spec = CATALOG.get(instance_type)
    sharing = draw(st.booleans()) and (home is None or home.gpu_sharing)
    gpu_memory = spec.shareable_gpu_memory_mib if sharing else 0
    used = draw(st.integers(0, spec.gpus)) if draw(st.booleans()) else 0  # half of them empty or sharing only
    shared = [draw(st.integers(0, gpu_memory)) for _ in range(draw(st.integers(0, spec.gpus - used)))] if sharing \
        and draw(st.booleans()) else []
    busy = bool(used or shared)
    share = 1 - (used + len(shared)) / (2 * spec.gpus)
    empty_for = draw(st.sampled_from([None, 0.0, 180.0, 1200.0]) | st.floats(0, 1200)) if not busy else None
    flags = draw(st.integers(0, 9))
    return Machine(
        f"m{n}", f"i-m{n}", region, home.fleet if home else "orphan", instance_type, f"{region}a",
        draw(st.sampled_from(["spot", "on-demand"])), spec.gpus - used - len(shared),
        spec.schedulable_vcpus * share if busy else spec.schedulable_vcpus,
        int(spec.schedulable_memory_mib * share) if busy else spec.schedulable_memory_mib,
        spec.spot_price(region), rebalance_recommended=flags == 1, draining=flags == 2,
        submissions=frozenset({draw(st.sampled_from(["s1", "s2"]))}) if busy else frozenset(), removing=flags == 3,
        launched_at=draw(st.sampled_from([None, NOW - 7200, NOW - 30]) | st.floats(NOW - 7200, NOW)),
        empty_since=None if empty_for is None else NOW - empty_for,
        protected=flags == 4, busy_until=NOW + draw(st.floats(0, 20 * 3600)) if busy and draw(st.booleans()) else None,
        gpu_memory_mib=gpu_memory, shared_gpus=tuple(shared))


# job_st's strategies, made once: hypothesis works out each new strategy's properties the first time it draws
# from it, which, with a dozen strategies made per job, was most of drawing a world (py-spy; 75 ms a world,
# and this test took 15.6 s instead of 10.8). The jobs come from the same distribution.
JOB_SUBMISSIONS = st.sampled_from(["s1", "s2", "s3"])
JOB_GPUS = st.sampled_from([1, 1, 2, 4])
JOB_VCPUS = st.sampled_from([1, 2, 3.5, 8, 24])
JOB_MEMORY = st.sampled_from([256, 4096, 12_000, 40_000, 120_000])
JOB_PATTERNS = st.sampled_from([None, None, None, *PATTERNS])
JOB_REGIONS = st.sampled_from([(), (), (), ("us-east-1",), ("us-west-2",), REGIONS])
JOB_LIFECYCLES = st.sampled_from([None, None, None, "spot", "on-demand"])
JOB_CHECKPOINT_REGIONS = st.sampled_from([None, None, None, *REGIONS])
JOB_RUNTIMES = st.none() | st.builds(RuntimeEstimate, st.sampled_from([600.0, 3 * 3600.0, 30 * 3600.0, 100 * 3600.0]),
                                     st.just(0.5))
JOB_CHECKPOINT_INTERVALS = st.none() | st.sampled_from([600.0, 3600.0])
JOB_TEAMS = st.sampled_from([None, *TEAMS, "gone"])


@st.composite
def job_st(draw, n, fleets):
    sharing = draw(st.integers(0, 2)) == 0
    reserved = None
    if draw(st.integers(0, 4)) == 0:  # valid (a fleet of the world) or stale (a fleet there is not)
        home = draw(st.sampled_from(fleets)) if fleets and draw(st.booleans()) else None
        reserved = Reservation(*((home.region, home.fleet) if home else ("us-east-1", "gone")), f"box-{n % 2}")
    runtime = draw(JOB_RUNTIMES)
    return JobRequest(
        f"j{n:02d}", draw(JOB_SUBMISSIONS), 0 if sharing else draw(JOB_GPUS), draw(JOB_VCPUS), draw(JOB_MEMORY),
        instance_type_pattern=draw(JOB_PATTERNS), regions=draw(JOB_REGIONS), lifecycle=draw(JOB_LIFECYCLES),
        submitted_at=draw(st.floats(0, NOW)), reserved=reserved, checkpoint_region=draw(JOB_CHECKPOINT_REGIONS),
        runtime=runtime, checkpoint_interval_s=draw(JOB_CHECKPOINT_INTERVALS), attempts_left=draw(st.integers(1, 3)),
        team=draw(JOB_TEAMS), priority=draw(st.integers(0, 9)),
        gpu_memory_mib=draw(st.integers(1, 30_000)) if sharing else 0)


@st.composite
def worlds(draw):
    fleets = draw(fleets_st())
    machines = [draw(machine_st(n, fleets)) for n in range(draw(st.integers(0, 10)))]
    # The groups' counts agree with the machines in view: usable ones are current, removals in flight at least
    # those tagged.
    for i, f in enumerate(fleets):
        mine = [m for m in machines if (m.region, m.fleet) == (f.region, f.fleet)]
        usable = sum(1 for m in mine if not (m.draining or m.removing))
        fleets[i] = Fleet(**{**vars(f), "current_instances": usable,
                             "max_instances": max(0, usable + f.pending_instances + draw(st.integers(-1, 4))),
                             "min_size": min(f.min_size, usable + f.pending_instances),
                             "removing_instances": max(f.removing_instances, sum(1 for m in mine if m.removing))})
    jobs = [draw(job_st(n, fleets)) for n in range(draw(st.integers(1, 24)))]
    shares = None
    if draw(st.booleans()):
        teams = {name: Team(draw(st.sampled_from([0.5, 1.0, 3.0])), draw(st.none() | st.integers(0, 8)))
                 for name in TEAMS}
        shares = Shares(teams, held_gpus={name: draw(st.integers(0, 4)) for name in TEAMS},
                        usage={name: draw(st.floats(0, 10)) for name in TEAMS}, now=NOW)
    limits = Limits(max_hourly_usd=draw(st.sampled_from([3.0, 10.0, 40.0, math.inf])),
                    current_hourly_usd=draw(st.sampled_from([0.0, 0.0, 2.0, 20.0])),
                    admission_open=draw(st.sampled_from([True] * 19 + [False])),
                    scaling_allowed=draw(st.sampled_from([True] * 9 + [False])))
    rates = draw(st.none() | st.fixed_dictionaries({r: st.sampled_from([0.0, 0.0003, 0.05, 0.5]) for r in REGIONS}))
    release = draw(st.none() | st.builds(ReleasePolicy, st.sampled_from([0.0, 180.0, 600.0]),
                                         st.sampled_from([10, 50, 100])))
    # Live spot prices for some pools (the catalog's for the others).
    types = sorted({t for ts in FLEET_TYPES for t in ts})
    prices = {(region, t): CATALOG.get(t).spot_price(region) * draw(st.sampled_from([0.3, 1.0, 3.0]))
              for region in REGIONS for t in draw(st.sets(st.sampled_from(types)))}
    # Headroom: placeholders shaped like some of the jobs (planning/headroom.py), after every real one.
    waits = [RecentWait.of(j, NOW - 60) for j in draw(st.lists(st.sampled_from(jobs), max_size=4))] if jobs else []
    kwargs = dict(now=NOW, release=release, shares=shares, prices=prices or None,
                  headroom=placeholders(waits, NOW, 3600, 8),
                  boot_s=draw(st.sampled_from([60.0, 180.0])),
                  interruption_rate=None if rates is None else (lambda region, _type: rates[region]))
    return jobs, machines, fleets, limits, kwargs


def accepts(job, instance_type, region, lifecycle):
    """The hard constraints of docs/scheduler.md ("1. Live machines"), written out (lifecycle None: a mixed fleet,
    which promises neither)."""
    return ((not job.regions or region in job.regions) and job.checkpoint_region in (None, region)
            and (job.lifecycle is None or lifecycle == job.lifecycle)
            and (job.instance_type_pattern is None or re.fullmatch(job.instance_type_pattern, instance_type)))


def fleet_runs(job, fleet):
    """May any instance the group launches run the job (docs/scheduler.md, "3. Purchase")?"""
    if job.shares_gpu and not fleet.gpu_sharing:
        return False
    return all(accepts(job, t, fleet.region, fleet_lifecycle(fleet)) and
               CATALOG.get(t).shareable_gpu_memory_mib >= job.gpu_memory_mib for t in fleet.instance_types)


def quota_gpus(job, fleets, machines, placed_on=None):
    """What a job counts for its team: its GPUs, or the part of one GPU its memory is on the machine it was
    placed on, before it runs on the smallest shareable GPU a fleet or live machine has (docs/scheduler.md,
    "Sharing GPUs")."""
    if not job.shares_gpu:
        return float(job.gpus)
    if placed_on is not None:
        return gpu_share(job, placed_on.gpu_memory_mib)
    sizes = [o.gpu_memory for o in purchase_options(fleets, CATALOG, None)]
    sizes += [m.gpu_memory_mib for m in machines if not (m.draining or m.removing)]
    sizes = [size for size in sizes if size >= job.gpu_memory_mib]
    return gpu_share(job, min(sizes)) if sizes else 1.0


def check(jobs, machines, fleets, limits, kwargs, result):
    by_id, by_key = {j.job_id: j for j in jobs}, {m.key: m for m in machines}
    fleet_of = {(f.region, f.fleet): f for f in fleets}
    placed = {p.job_id: p.machine_key for p in result.placements}
    waiting = dict(result.waiting)

    # Every job placed or waiting, exactly once.
    assert sorted([*placed, *(w for w, _ in result.waiting)]) == sorted(by_id)
    assert len(placed) == len(result.placements) and len(waiting) == len(result.waiting)
    if not limits.admission_open:
        assert not result.placements and not result.scale_outs
    if not limits.scaling_allowed:
        assert not result.scale_outs

    # Placements: the machine's room (GPUs packed exactly, MPS GPUs only for sharing jobs), hard constraints.
    on: dict[str, list[JobRequest]] = {}
    for p in result.placements:
        m, j = by_key[p.machine_key], by_id[p.job_id]
        assert (p.region, p.fleet) == (m.region, m.fleet)
        assert not m.draining and not m.removing
        assert accepts(j, m.instance_type, m.region, m.lifecycle), (j, m)
        on.setdefault(m.key, []).append(j)
    for key, jobs_on in on.items():
        m = by_key[key]
        assert sum(j.vcpus for j in jobs_on) <= m.free_vcpus + 1e-9
        assert sum(j.memory_mib for j in jobs_on) <= m.free_memory_mib
        assert gpus_pack(sum(j.gpus for j in jobs_on), [j.gpu_memory_mib for j in jobs_on if j.shares_gpu],
                         m.free_gpus, list(m.shared_gpus), m.gpu_memory_mib), (key, jobs_on)

    # Scale-outs: boxes partition for_jobs, each for_jobs job waits for it, fits whichever type is launched,
    # and the fleet may run it; caps.
    bought_jobs = [j for s in result.scale_outs for j in s.for_jobs]
    assert len(bought_jobs) == len(set(bought_jobs))
    assert len({(s.region, s.fleet) for s in result.scale_outs}) == len(result.scale_outs)
    for s in result.scale_outs:
        f = fleet_of[(s.region, s.fleet)]
        assert s.add_instances == len(s.boxes) > 0 and all(s.boxes)
        assert sorted(j for box in s.boxes for j in box) == sorted(s.for_jobs)
        # The group's desired capacity counts removals in flight until their terminate (state.py).
        assert s.add_instances <= max(0, f.max_instances - f.current_instances - f.pending_instances
                                      - f.removing_instances)
        for j in s.for_jobs:
            assert j not in placed and "new instance" in waiting[j]
            assert fleet_runs(by_id[j], f), (by_id[j], f)
        for box, t in itertools.product(s.boxes, f.instance_types):
            spec, inside = CATALOG.get(t), [by_id[j] for j in box]
            assert sum(j.vcpus for j in inside) <= spec.schedulable_vcpus + 1e-9
            assert sum(j.memory_mib for j in inside) <= spec.schedulable_memory_mib
            assert gpus_pack(sum(j.gpus for j in inside), [j.gpu_memory_mib for j in inside if j.shares_gpu],
                             spec.gpus, [], spec.shareable_gpu_memory_mib if f.gpu_sharing else 0), (box, t)
    budget = max(0.0, limits.max_hourly_usd - limits.current_hourly_usd)
    assert sum(s.hourly_usd for s in result.scale_outs) <= budget + 1e-3

    # Headroom bought ahead: for no job, only while jobs may start and scaling is allowed, and within the caps
    # together with the real purchases.
    assert all(s.for_jobs == () and s.boxes == () and s.add_instances > 0 for s in result.headroom)
    if not (limits.admission_open and limits.scaling_allowed) or not kwargs["headroom"]:
        assert result.headroom == ()
    for f in fleets:
        added = sum(s.add_instances for s in [*result.scale_outs, *result.headroom]
                    if (s.region, s.fleet) == (f.region, f.fleet))
        assert added <= max(0, f.max_instances - f.current_instances - f.pending_instances - f.removing_instances)
    assert sum(s.hourly_usd for s in [*result.scale_outs, *result.headroom]) <= budget + 1e-3

    # Jobs held by a launching instance: of a fleet with instances on their way, that may run them.
    launching: dict[str, list[JobRequest]] = {}
    for job_id, reason in result.waiting:
        if "already launching" in reason:
            name, region = re.search(r"fleet (\S+) in (\S+) that", reason).groups()
            f = fleet_of[(region, name)]
            assert f.pending_instances > 0 and fleet_runs(by_id[job_id], f)
            launching.setdefault(f.asg_name, []).append(by_id[job_id])
    for f in fleets:  # what waits for a fleet's launching instances could fit them (a necessary condition)
        held = launching.get(f.asg_name, [])
        memory = min(CATALOG.get(t).shareable_gpu_memory_mib for t in f.instance_types)
        for i, need in enumerate((sum(gpu_share(j, memory) for j in held), sum(j.vcpus for j in held),
                                  sum(j.memory_mib for j in held))):
            assert need <= f.pending_instances * min(capacity_of(CATALOG, t)[i] for t in f.instance_types) + 1e-9

    # Quotas: what each team holds, reserved before and committed now (placed, bought for, held by a launching
    # instance) stays within its quota (reserved jobs were within it when bought).
    shares = kwargs["shares"]
    if shares is not None:
        committed = set(placed) | set(bought_jobs) | {j for j, r in result.waiting if "already launching" in r}
        committed |= {j.job_id for j in jobs if j.reserved is not None}
        for name, policy in shares.teams.items():
            if policy.max_gpus is None:
                continue
            mine = [by_id[j] for j in committed if shares.team_of(by_id[j]) == name]
            before = sum(quota_gpus(j, fleets, machines) for j in jobs
                         if j.reserved is not None and shares.team_of(j) == name)
            holds = shares.held_gpus.get(name, 0) + sum(
                quota_gpus(j, fleets, machines, by_key.get(placed.get(j.job_id))) for j in mine)
            assert holds <= max(policy.max_gpus, shares.held_gpus.get(name, 0) + before) + 1e-9, name
        kept = offer_jobs(jobs, machines, fleets, CATALOG, limits, shares,
                          prices=kwargs["prices"]).kept if limits.admission_open else ()
        assert not set(kept) & set(on)
    else:
        kept = ()

    # Releases: empty past the delay and the billing minimum, unprotected, in a known fleet, nothing placed or
    # kept there, never twice, never below a group's minimum, within its disruption budget.
    policy = kwargs["release"]
    if policy is None:
        assert result.releases == ()
    keys = [c.container_instance_arn for c in result.releases]
    assert len(keys) == len(set(keys))
    for c in result.releases:
        m = by_key[c.container_instance_arn]
        assert c.instance_id == m.instance_id and (m.region, m.fleet) in fleet_of
        assert c.asg_name == fleet_of[(m.region, m.fleet)].asg_name
        assert m.free_gpus == CATALOG.get(m.instance_type).gpus and not m.shared_gpus and not m.submissions
        assert not (m.draining or m.removing or m.protected)
        assert m.key not in on and m.key not in kept
        assert NOW - m.empty_since >= policy.after_empty_s and NOW - m.launched_at >= policy.billing_minimum_s
    for f in fleets:
        released = sum(1 for c in result.releases if c.asg_name == f.asg_name)
        if released:
            desired = f.current_instances + f.pending_instances + f.removing_instances
            assert min(desired, f.current_instances + f.removing_instances) - f.removing_instances - released \
                >= f.min_size
            assert f.removing_instances + f.terminating_instances + released <= \
                disruption_budget(desired, policy.budget_percent)


@settings(max_examples=200, deadline=None)
@given(worlds(), st.randoms(use_true_random=False))
def test_every_rule_holds_with_every_feature_at_once(world, rng: random.Random):
    jobs, machines, fleets, limits, kwargs = world
    result = plan(jobs, machines, fleets, CATALOG, limits, **kwargs)
    check(jobs, machines, fleets, limits, kwargs, result)
    assert plan(jobs, machines, fleets, CATALOG, limits, **kwargs) == result  # deterministic
    # Placeholders take nothing from real jobs: the same placements, purchases and waits without them, and
    # only fewer releases (the machines kept for them). Which of the rest go back may differ: the disruption
    # budget takes the next candidate in place of one a placeholder keeps.
    without = plan(jobs, machines, fleets, CATALOG, limits, **{**kwargs, "headroom": ()})
    assert (result.placements, result.scale_outs, result.waiting) == \
        (without.placements, without.scale_outs, without.waiting)
    assert len(result.releases) <= len(without.releases)
    if result.releases:
        unbudgeted = replace(kwargs["release"], budget_percent=100)
        candidates = plan(jobs, machines, fleets, CATALOG, limits, **{**kwargs, "headroom": (), "release": unbudgeted})
        assert {c.instance_id for c in result.releases} <= {c.instance_id for c in candidates.releases}
    # The Lambda reads jobs, machines and fleets in whatever order AWS lists them: the plan does not depend on it.
    shuffled = [rng.sample(items, len(items)) for items in (jobs, machines, fleets)]
    assert plan(*shuffled[:2], shuffled[2], CATALOG, limits, **kwargs) == result
