"""Properties of the shares stage (lambdas/scheduler/planning/shares.py) against docs/scheduler.md "Teams,
shares and priorities", over random teams, queues, held and reserved jobs and room: each test names the
sentence it holds the stage to."""

from __future__ import annotations

import functools
import math
import re
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from lambdas.common.catalog import load_catalog
from lambdas.jobs.spec import PRIORITIES
from lambdas.scheduler.planning import (
    Fleet, JobRequest, Limits, Machine, ReleasePolicy, Reservation, Shares, Team, decayed_usage, plan,
)
from lambdas.scheduler.planning.shares import AGING_S, DEFAULT_TEAM, MAX_PRIORITY, offer_jobs, queue_order

HOUR = AGING_S


def request(job_id: str, team: str | None = "a", gpus: int = 1, *, priority: int = 5, at: float = 0.0,
            **kw) -> JobRequest:
    return JobRequest(job_id, f"sub-{team}", gpus, kw.pop("vcpus", 8 * max(gpus, 1)),
                      kw.pop("memory_mib", 32768 * max(gpus, 1)), submitted_at=at, team=team, priority=priority, **kw)


# --- within a team: priority, then age, one step per hour waited ---------------------------------------

def test_escalation_stops_at_the_highest_priority_a_job_may_have():
    assert MAX_PRIORITY == PRIORITIES.stop - 1


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 9), st.integers(0, 9), st.floats(0, 40_000), st.floats(1, 40_000), st.floats(0, 30 * HOUR))
def test_no_newer_job_stays_ahead_of_a_waiting_job_for_more_than_ten_hours(old_priority, new_priority, submitted,
                                                                           later, past_bound):
    """"A waiting job gains one priority step per hour, so no newer job of its team stays ahead of a
    priority-0 job for more than ten hours": whatever the newer job's priority, and however long it has
    waited too. Before, both aged alike, so a priority-9 job submitted a minute after a priority-0 one
    stayed nine steps ahead of it for ever."""
    old = request("old", priority=old_priority, at=submitted)
    new = request("new", priority=new_priority, at=submitted + later)
    now = submitted + 10 * HOUR + past_bound
    assert queue_order(old, now) < queue_order(new, now)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 9), st.integers(0, 9), st.floats(0, 20 * HOUR), st.floats(1, 20 * HOUR))
def test_a_newer_job_is_ahead_only_by_a_higher_priority_not_yet_made_up_by_waiting(old_priority, new_priority,
                                                                                     waited, later):
    """"Higher priority first, then the oldest": an older job is ahead unless the newer one's priority is
    higher than the older's plus its whole hours waited (both capped at the highest priority)."""
    old = request("old", priority=old_priority, at=0.0)
    new = request("new", priority=new_priority, at=later)
    now = later + waited
    old_level = min(MAX_PRIORITY, old_priority + int(now // HOUR))
    new_level = min(MAX_PRIORITY, new_priority + int(waited // HOUR))
    assert (queue_order(new, now) < queue_order(old, now)) == (new_level > old_level)


def test_a_team_of_one_queue_keeps_the_bound_in_the_stage():
    """Through the stage: one free slot, a priority-0 job of ten hours and a priority-9 job of nine hours
    fifty-nine minutes: the older is offered."""
    now = 10 * HOUR
    jobs = [request("old", priority=0, at=0.0), request("urgent", priority=9, at=60.0)]
    fleet = Fleet("us-east-1", "gpu4", "mlfleet-dev-gpu4", (FOUR.name,), 1, 0, 1)
    offer = offer_jobs(jobs, [live("m", FOUR, 1)], [fleet], CATALOG, LIMITS, Shares({"a": Team()}, now=now))
    assert [j.job_id for j in offer.jobs] == ["old"]


# --- random worlds ------------------------------------------------------------------------------------

CATALOG = load_catalog()
LIMITS = Limits(max_hourly_usd=1000, current_hourly_usd=0)
FOUR, T4 = CATALOG.get("g6.12xlarge"), CATALOG.get("g4dn.xlarge")
NOW = 40_000.0
TEAM_NAMES = ("a", "b", "c")


def live(key: str, kind, free_gpus: int, **kw) -> Machine:
    used = kind.gpus - free_gpus
    per_gpu_vcpus, per_gpu_memory = kind.schedulable_vcpus // kind.gpus, kind.schedulable_memory_mib // kind.gpus
    return Machine(key, f"i-{key}", "us-east-1", "gpu4" if kind is FOUR else "old", kind.name, "us-east-1a", "spot",
                   free_gpus, kind.schedulable_vcpus - per_gpu_vcpus * used,
                   kind.schedulable_memory_mib - per_gpu_memory * used, kind.spot_price("us-east-1"),
                   gpu_memory_mib=kind.shareable_gpu_memory_mib, launched_at=0.0,
                   empty_since=0.0 if free_gpus == kind.gpus else None, **kw)


def fleets_of(draw, machines: list[Machine], capped: bool = False) -> list[Fleet]:
    """The two fleets, with room to buy and instances launching, or (one time in two, or always when
    `capped`) at their caps: the live machines are then all the room there is, and waiting jobs keep machines."""
    fours = sum(1 for m in machines if m.fleet == "gpu4")
    grow = not capped and draw(st.booleans())
    return [Fleet("us-east-1", "gpu4", "mlfleet-dev-gpu4", (FOUR.name,), fours, draw(st.integers(0, 1)) * grow,
                  fours + draw(st.integers(0, 3)) * grow),
            Fleet("us-east-1", "gpu1", "mlfleet-dev-gpu1", ("g5.2xlarge",), 0, draw(st.integers(0, 1)) * grow,
                  draw(st.integers(0, 4)) * grow)]


# The worlds' strategies, made once (those that depend on the teams listed, once per list): hypothesis works out
# a new strategy's properties on its first draw, and made inside the composites most were new on every draw.
# The same distribution; this file took 14.5 s of user CPU before, 10.3 s after.
TEAM_WEIGHTS = st.sampled_from([0.25, 0.5, 1.0, 3.0])
QUOTAS, QUOTAS_SHARING, QUOTAS_TIGHT = st.none() | st.integers(1, 12), st.integers(1, 3), st.integers(2, 8)
HELD, HELD_TIGHT = st.sampled_from([0.0, 0.25, 1.0, 2.5, 4.0, 7.0]), st.sampled_from([0.0, 1.0])
USAGE = st.sampled_from([0.0, 0.5, 3.0, 12.0])
GPUS_BIG, GPUS_SHARING = st.sampled_from([1, 4, 4]), st.sampled_from([0, 0, 0, 1])
GPUS_SHARED, GPUS_WHOLE = st.sampled_from([0, 1, 1, 2, 4]), st.sampled_from([1, 1, 2, 4])
SHARING_MEMORY = st.sampled_from([3000, 8000, 12000, 16000, 22000])
DOLLAR_CAPS = st.sampled_from([3.0, 20.0, 1000.0])
ONE_GPU_WEIGHTS, ONE_GPU_QUOTAS = st.sampled_from([0.5, 1.0, 2.0, 4.0]), st.none() | st.integers(1, 10)
ONE_GPU_USAGE = st.sampled_from([0.0, 0.25, 2.5, 5.0, 12.0])
REWEIGHTS, OTHERS_HELD, USED_OR_NOT = st.sampled_from([0.25, 1.0, 5.0]), st.sampled_from([0.0, 9.0]), \
    st.sampled_from([0.0, 30.0])


@functools.cache
def default_teams(names: tuple[str, ...]):
    return st.sampled_from([DEFAULT_TEAM, *names])


@functools.cache
def job_teams(names: tuple[str, ...]):
    return st.sampled_from([*names, None, "gone"])


@functools.cache
def listed_teams(names: tuple[str, ...]):
    return st.sampled_from(names)


@functools.cache
def fallback_teams(names: tuple[str, ...]):
    return st.none() | st.sampled_from(names)


@st.composite
def worlds(draw, *, shared=True, teams=TEAM_NAMES, big=False, sharing=False, tight=False):
    """Teams (weights, quotas), what they hold and have used, a queue of whole and GPU-sharing jobs of
    those teams, of no team and of a team no longer listed (some reserved), live machines of two GPU
    sizes, fleets with room or at their caps, and a dollar cap. `tight`: quotas of a few GPUs, little held, the
    fleets at their caps and machines part full, so that jobs keep machines and then meet their team's quota."""
    names = teams[:draw(st.integers(1, len(teams)))]
    listed = list(names) + ([DEFAULT_TEAM] if draw(st.booleans()) else [])
    quotas = QUOTAS_SHARING if sharing else QUOTAS_TIGHT if tight else QUOTAS
    policies = {name: Team(draw(TEAM_WEIGHTS), draw(quotas)) for name in listed}
    default = draw(default_teams(names))
    held = {name: draw(HELD_TIGHT if tight else HELD) for name in {*listed, default}}
    usage = {name: draw(USAGE) for name in {*listed, default}}
    jobs = []
    for n in range(draw(st.integers(0, 24))):
        gpus = draw(GPUS_BIG if big else GPUS_SHARING if sharing else GPUS_SHARED if shared else GPUS_WHOLE)
        memory = draw(SHARING_MEMORY) if gpus == 0 else 0
        reserved = Reservation("us-east-1", "gpu4", f"box-{n % 3}") if draw(st.integers(0, 3 if big else 9)) == 0 \
            else None
        team = draw(job_teams(names))
        jobs.append(request(f"j{n:02d}", team, gpus, priority=draw(st.integers(0, 9)),
                            at=draw(st.integers(0, int(NOW))), reserved=reserved, gpu_memory_mib=memory,
                            vcpus=2, memory_mib=4096))
    machines = [live(f"m{n}", FOUR, draw(st.integers(1, 3) if tight else st.integers(0, 4)),
                     rebalance_recommended=draw(st.integers(0, 5)) == 0)
                for n in range(draw(st.integers(0, 5)))]
    machines += [live(f"t{n}", T4, draw(st.integers(0, 1))) for n in range(draw(st.integers(int(sharing), 2)))]
    fleets = fleets_of(draw, machines, capped=tight)
    limits = Limits(max_hourly_usd=draw(DOLLAR_CAPS), current_hourly_usd=0.0)
    return jobs, machines, fleets, limits, Shares(policies, default, held_gpus=held, usage=usage, now=NOW)


def outcome(offer) -> tuple:
    return tuple(j.job_id for j in offer.jobs), offer.waiting, offer.kept, offer.capped


def counted(job: JobRequest, machines, fleets) -> float:
    """What a job counts for its team, as the contract says, computed apart from the stage: its GPUs, or
    for a job sharing a GPU its memory over the smallest shareable GPU a fleet or a live machine able to
    hold it has (a whole GPU when none is)."""
    if not job.shares_gpu:
        return float(job.gpus)
    sizes = [min(CATALOG.get(t).shareable_gpu_memory_mib for t in f.instance_types) for f in fleets if f.gpu_sharing]
    sizes += [m.gpu_memory_mib for m in machines if not m.closed]
    able = [s for s in sizes if s >= job.gpu_memory_mib]
    return min(1.0, job.gpu_memory_mib / min(able)) if able else 1.0


@settings(max_examples=150, deadline=None)
@given(worlds() | worlds(sharing=True))
def test_a_team_never_holds_more_than_its_quota_fractional_jobs_counted_as_the_contract_says(world):
    """"A team never holds more than maxGpus (running, starting and reserved)": what it holds, what
    earlier runs reserved and what this run offers, a job sharing a GPU as the part of one its memory is
    on the smallest GPU able to hold it. Reserved jobs are offered whatever the quota (within it when
    bought), so the bound is the quota or what was already committed, whichever is more."""
    jobs, machines, fleets, limits, shares = world
    offer = offer_jobs(jobs, machines, fleets, CATALOG, limits, shares)
    result = plan(jobs, machines, fleets, CATALOG, limits, shares=shares)
    offered = {j.job_id for j in offer.jobs}
    committed = {p.job_id for p in result.placements} | {i for s in result.scale_outs for i in s.for_jobs}
    assert committed <= offered
    assert {j.job_id for j in jobs if j.reserved is not None} <= offered
    for name, policy in shares.teams.items():
        if policy.max_gpus is None:
            continue
        mine = [j for j in jobs if shares.team_of(j) == name]
        before = shares.held_gpus.get(name, 0) + sum(counted(j, machines, fleets) for j in mine if j.reserved)
        after = before + sum(counted(j, machines, fleets) for j in mine if not j.reserved and j.job_id in offered)
        assert after <= max(policy.max_gpus, before) + 1e-9, name
    # A sharing job holds on the machine it is placed on no more than it was counted for.
    where = {m.key: m for m in machines}
    by_id = {j.job_id: j for j in jobs}
    for p in result.placements:
        job = by_id[p.job_id]
        if job.shares_gpu:
            assert CATALOG.get(where[p.machine_key].instance_type).gpu_fraction(job.gpu_memory_mib) \
                <= counted(job, machines, fleets) + 1e-9
    # Every job is placed or waits, once: nothing is lost.
    assert sorted([p.job_id for p in result.placements] + [i for i, _ in result.waiting]) == \
        sorted(j.job_id for j in jobs)


QUOTA_REASON = re.compile(r"team (?P<team>\S+) is at its quota: it holds (?P<holds>[\d.e+-]+) of its (?P<quota>\d+) "
                          r"GPUs(, (?P<kept>[\d.e+-]+) more are kept for its earlier jobs waiting for room,)? and "
                          r"this job needs (?P<needs>[\d.e+-]+)")


@settings(max_examples=150, deadline=None)
@given(worlds(big=True, tight=True) | worlds(tight=True) | worlds() | worlds(sharing=True))
def test_a_quota_reason_counts_what_the_quota_counts_and_calls_held_only_what_is_held(world):
    """"past its quota (held + reserved + offered + kept for its earlier waiting jobs + this job > maxGpus)":
    the reason's "holds" is the team's running and starting GPUs, its reserved jobs and what this run offers
    it, never the GPUs of machines kept for its waiting jobs, which it names apart; the three pass the quota."""
    jobs, machines, fleets, limits, shares = world
    offer = offer_jobs(jobs, machines, fleets, CATALOG, limits, shares)
    offered = {j.job_id for j in offer.jobs}
    reasons = dict(offer.waiting)
    for name, policy in shares.teams.items():
        mine = [j for j in jobs if shares.team_of(j) == name]
        quota_reasons = {reasons[j.job_id] for j in mine if reasons.get(j.job_id, "").startswith(f"team {name} is at")}
        if not quota_reasons:
            continue
        (reason,) = quota_reasons  # one reason for the team's job at the quota and the ones behind it
        found = QUOTA_REASON.fullmatch(reason)
        assert found is not None and found["team"] == name and int(found["quota"]) == policy.max_gpus, reason
        holds = shares.held_gpus.get(name, 0) + sum(counted(j, machines, fleets) for j in mine if j.job_id in offered)
        kept = sum(counted(j, machines, fleets) for j in mine if "is kept for it" in reasons.get(j.job_id, ""))
        assert math.isclose(float(found["holds"]), holds, abs_tol=1e-4), reason
        assert math.isclose(float(found["kept"] or 0), kept, abs_tol=1e-4), reason
        assert float(found["holds"]) + float(found["kept"] or 0) + float(found["needs"]) > policy.max_gpus, reason


@settings(max_examples=100, deadline=None)
@given(worlds(), st.data())
def test_weights_share_only_what_is_contended(world, data):
    """"Weights share what is contended and nothing more: ... one team alone uses every GPU the caps
    allow": with one team's jobs queued, what is offered depends neither on the weights nor on what the
    other teams hold or have used."""
    jobs, machines, fleets, limits, shares = world
    alone = shares.team_of(jobs[0]) if jobs else None
    jobs = [j for j in jobs if shares.team_of(j) == alone or j.reserved is not None]
    others = {t for t in {*shares.teams, *shares.held_gpus} if t != alone}
    reweighed = Shares({t: Team(data.draw(REWEIGHTS), p.max_gpus) for t, p in shares.teams.items()},
                       shares.default_team, held_gpus={**shares.held_gpus, **{t: data.draw(OTHERS_HELD) for t in others}},
                       usage={**shares.usage, **{t: data.draw(USED_OR_NOT) for t in others},
                              alone: data.draw(USED_OR_NOT)},
                       now=shares.now)
    assert offer_jobs(jobs, machines, fleets, CATALOG, limits, shares) == \
        offer_jobs(jobs, machines, fleets, CATALOG, limits, reweighed)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 9), max_size=20), st.integers(0, 3), st.integers(0, 2))
def test_a_team_alone_without_a_quota_gets_everything_the_caps_allow(priorities, room, launching):
    """"One team alone uses every GPU the caps allow", whatever its weight, use and priorities: every
    one-GPU job the fleet's instances launching and the four-GPU instances its cap still allows buying
    have room for is offered."""
    jobs = [request(f"j{n:02d}", "a", 1, priority=p, at=n, vcpus=2, memory_mib=4096)
            for n, p in enumerate(priorities)]
    fleet = Fleet("us-east-1", "gpu4", "mlfleet-dev-gpu4", (FOUR.name,), 1, launching, 1 + launching + room)
    offer = offer_jobs(jobs, [live("m0", FOUR, 0)], [fleet], CATALOG, LIMITS,
                       Shares({"a": Team(0.25), "b": Team(4.0)}, held_gpus={"b": 0.0}, usage={"a": 100.0}, now=NOW))
    assert len(offer.jobs) == min(len(jobs), FOUR.gpus * (launching + room))


@st.composite
def one_gpu_worlds(draw):
    """Every job takes one GPU and fits any free one; live machines only (the fleets at their caps): the
    room is a number of slots, so the contract's turn order says exactly which jobs are offered."""
    names = TEAM_NAMES[:draw(st.integers(1, 3))]
    policies = {name: Team(draw(ONE_GPU_WEIGHTS), draw(ONE_GPU_QUOTAS)) for name in names}
    held = {name: float(draw(st.integers(0, 6))) for name in names}
    usage = {name: draw(ONE_GPU_USAGE) for name in names}
    jobs = [request(f"j{n:02d}", draw(job_teams(names)), 1, priority=draw(st.integers(0, 9)),
                    at=draw(st.integers(0, int(NOW))), vcpus=1, memory_mib=1024,
                    reserved=Reservation("us-east-1", "gpu4", "box") if draw(st.integers(0, 7)) == 0 else None)
            for n in range(draw(st.integers(0, 25)))]
    machines = [live(f"m{n}", FOUR, draw(st.integers(0, 4))) for n in range(draw(st.integers(0, 4)))]
    fleet = Fleet("us-east-1", "gpu4", "mlfleet-dev-gpu4", (FOUR.name,), len(machines), 0, len(machines))
    return jobs, machines, [fleet], Shares(policies, draw(listed_teams(names)), held_gpus=held, usage=usage,
                                           now=NOW)


def contract_offer(jobs, slots: int, shares: Shares) -> set[str]:
    """docs/scheduler.md's steps 1-3, for one-GPU jobs and `slots` free GPUs: reserved jobs first; then
    turns by least (max(U, held) + reserved + offered) / weight (ties by name), each team's queue by
    priority then age; past its quota a team's turn ends its queue; with no slot left a job waits."""
    order = sorted(jobs, key=lambda j: queue_order(j, shares.now))
    teams = {shares.team_of(j) for j in jobs}
    counted = {t: max(shares.usage.get(t, 0.0), shares.held_gpus.get(t, 0.0)) for t in teams}
    holds = {t: shares.held_gpus.get(t, 0.0) for t in teams}
    offered = set()
    for job in order:
        if job.reserved is not None:
            offered.add(job.job_id)
            slots = max(0, slots - 1)
            counted[shares.team_of(job)] += 1
            holds[shares.team_of(job)] += 1
    queues = {t: [j for j in order if shares.team_of(j) == t and j.reserved is None] for t in teams}
    queues = {t: q for t, q in queues.items() if q}
    while queues:
        team = min(queues, key=lambda t: (counted[t] / shares.policy(t).weight, t))
        job = queues[team].pop(0)
        quota = shares.policy(team).max_gpus
        if quota is not None and holds[team] + 1 > quota:
            del queues[team]
            continue
        if not queues[team]:
            del queues[team]
        if slots:
            slots -= 1
            offered.add(job.job_id)
            counted[team] += 1
            holds[team] += 1
    return offered


@settings(max_examples=200, deadline=None)
@given(one_gpu_worlds())
def test_teams_take_turns_by_least_use_per_weight(world):
    """Step 3: "Teams take turns by least use per weight: (max(U, held) + reserved + offered this run +
    kept) / weight, recomputed after every job offered", quotas as in the first bullet, jobs of no team
    or of a team no longer listed as the default team's."""
    jobs, machines, fleets, shares = world
    offer = offer_jobs(jobs, machines, fleets, CATALOG, LIMITS, shares)
    assert not offer.kept  # every free GPU is taken before a job waits for one
    assert {j.job_id for j in offer.jobs} == contract_offer(jobs, sum(m.free_gpus for m in machines), shares)


@settings(max_examples=100, deadline=None)
@given(worlds())
def test_a_job_of_no_team_or_an_unlisted_team_runs_as_the_default_teams(world):
    """"A queued job of no team, or of a team the config no longer lists (renamed, removed), runs as the
    default team's": the stage treats it exactly as a job of that team."""
    jobs, machines, fleets, limits, shares = world
    renamed = [replace(j, team=shares.default_team) if j.team not in shares.teams else j for j in jobs]
    assert outcome(offer_jobs(jobs, machines, fleets, CATALOG, limits, shares)) == \
        outcome(offer_jobs(renamed, machines, fleets, CATALOG, limits, shares))


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(st.sampled_from(["vision", "nlp", "default"]),
                       st.tuples(st.sampled_from([0.5, 1.0, 3.0]), st.none() | st.integers(1, 24)), max_size=3),
       st.data())
def test_the_scheduler_and_the_stage_agree_on_the_team_of_a_job(teams, data):
    """What a team holds (lambdas/scheduler/teams.py, TeamsSettings.team_of) is counted for the same team
    the stage gives the job (Shares.team_of), for every job team and every configuration."""
    from lambdas.jobs.teams import TeamsSettings

    default = data.draw(fallback_teams(tuple(sorted(teams)))) if teams else None
    settings_ = TeamsSettings({name: Team(*policy) for name, policy in teams.items()}, default, 3600.0)
    shares = Shares(settings_.teams, settings_.fallback_team)
    assert settings_.team_of(None) == (default or DEFAULT_TEAM)
    for name in (None, "vision", "nlp", "default", "gone"):
        assert settings_.team_of(name) == shares.team_of(request("j", name))
    if not teams:
        assert shares.team_of(request("j", "vision")) == DEFAULT_TEAM


@settings(max_examples=150, deadline=None)
@given(worlds() | worlds(big=True))
def test_kept_machines_are_few_untouched_and_neither_placed_on_nor_released(world):
    """Kept machines: "Nothing else is placed there this run", "the kept machines are left out of [the
    stages], and out of the release stage"; a team alone with work keeps one, for its first waiting job;
    a kept machine is live, healthy and could hold the job it is kept for."""
    jobs, machines, fleets, limits, shares = world
    offer = offer_jobs(jobs, machines, fleets, CATALOG, limits, shares)
    result = plan(jobs, machines, fleets, CATALOG, limits, shares=shares, release=ReleasePolicy(0.0), now=NOW)
    assert not offer.kept & {p.machine_key for p in result.placements}
    assert not offer.kept & {r.container_instance_arn for r in result.releases}
    by_key = {m.key: m for m in machines}
    for key in offer.kept:
        kept = by_key[key]
        assert not kept.closed and not kept.rebalance_recommended and kept.free_gpus >= 1
    teams_waiting = {shares.team_of(j) for j in jobs if j.reserved is None}
    if len(teams_waiting) == 1:
        assert len(offer.kept) <= 1


# --- decayed use -----------------------------------------------------------------------------------------

USE = st.floats(0, 10_000, allow_nan=False)
TEAM_USE = st.dictionaries(st.sampled_from(TEAM_NAMES), USE, max_size=3)


@settings(max_examples=300, deadline=None)
@given(TEAM_USE, st.none() | st.floats(0, 1e9), TEAM_USE, st.floats(0, 1e9), st.sampled_from([0.0, 60.0, 3600.0, 604_800.0]))
def test_decayed_use_is_the_contracts_average_and_never_negative_nan_or_past_its_inputs(previous, at, held, now,
                                                                                        half_life):
    """"U <- U * k + held * (1 - k), k = 0.5 ^ (minutes since the last run / shareHalfLifeMinutes)", "0:
    only what it holds now"; no division by zero, no negative or NaN use, and a run whose clock is behind
    the kept value's (now < at) counts no time as passed rather than a negative one (k > 1 would make a use
    negative or past both its inputs)."""
    usage = decayed_usage(previous, at, held, now, half_life)
    assert all(math.isfinite(u) and u >= 0 for u in usage.values())
    if half_life == 0 or at is None:
        assert usage == {t: float(h) for t, h in held.items() if h}
        return
    keep = 0.5 ** (max(0.0, now - at) / half_life)
    for team in {*previous, *held}:
        before, holds = previous.get(team, 0.0), held.get(team, 0.0)
        expected = before * keep + holds * (1 - keep)
        got = usage.get(team, 0.0)
        assert math.isclose(got, expected, rel_tol=1e-9, abs_tol=1e-3), team
        assert min(before, holds) - 1e-3 <= got <= max(before, holds) + 1e-9
    if now <= at:
        assert usage == {t: u for t, u in previous.items() if u >= 1e-3}


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 4), st.integers(0, 3), st.lists(st.integers(1, 3), min_size=1, max_size=5))
def test_a_team_alone_with_work_keeps_one_machine_whatever_others_have_reserved(big, reserved, free):
    """"A team keeps machines while it is furthest below its share, plus one for its first waiting job":
    alone with work (the other team's jobs all reserved: offered first, never waiting) no other team
    competes, so it keeps one machine and leaves the rest to the jobs it can run."""
    jobs = [request(f"a{n}", "a", 4, at=n, vcpus=2, memory_mib=4096) for n in range(big)]
    jobs += [request(f"b{n}", "b", 1, at=n, vcpus=2, memory_mib=4096,
                     reserved=Reservation("us-east-1", "gpu4", "box")) for n in range(reserved)]
    machines = [live(f"m{n}", FOUR, f) for n, f in enumerate(free)]
    fleet = Fleet("us-east-1", "gpu4", "mlfleet-dev-gpu4", (FOUR.name,), len(machines), 0, len(machines))
    offer = offer_jobs(jobs, machines, [fleet], CATALOG, LIMITS,
                       Shares({"a": Team(), "b": Team()}, held_gpus={"b": 30.0}, now=NOW))
    assert len(offer.kept) <= 1
