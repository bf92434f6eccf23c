"""The release stage (lambdas/scheduler/planning/release.py): one case per rule of docs/removal.md,
and properties over random cluster states: never below a group's minimum, never a machine with work,
never over the disruption budget, never a machine twice. The group rule is the removal protocol's own
(lambdas.removal.decide.room, tested with the executor's validation in tests/removal/test_decide.py)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lambdas.common.catalog import load_catalog
from lambdas.scheduler.planning import Fleet, JobRequest, Limits, Machine, ReleasePolicy, plan
from lambdas.removal.decide import disruption_budget
from lambdas.scheduler.planning.release import givable, propose_releases, why_kept

CATALOG = load_catalog()
NOW = 100_000.0
POLICY = ReleasePolicy(after_empty_s=180)
GPUS = {"g5.xlarge": 1, "g5.12xlarge": 4}


def machine(key="m1", instance_type="g5.12xlarge", *, fleet="gpu4", empty_for=600.0, up_for=3600.0, **kw):
    spec = CATALOG.get(instance_type)
    fields = dict(key=key, instance_id=f"i-{key}", region="us-east-1", fleet=fleet, instance_type=instance_type,
                  availability_zone="us-east-1a", lifecycle="spot", free_gpus=spec.gpus, free_vcpus=spec.vcpus,
                  free_memory_mib=spec.schedulable_memory_mib, price_per_hour=spec.spot_price("us-east-1"),
                  launched_at=NOW - up_for, empty_since=None if empty_for is None else NOW - empty_for)
    fields.update(kw)
    return Machine(**fields)


def group(fleet="gpu4", *, current=5, pending=0, min_size=0, removing=0, terminating=0, types=("g5.12xlarge",)):
    return Fleet("us-east-1", fleet, f"mlfleet-dev-{fleet}", types, current, pending, 50, min_size=min_size,
                 removing_instances=removing, terminating_instances=terminating)


def test_an_empty_machine_past_the_delay_is_proposed_with_the_protocol_names():
    (candidate,) = propose_releases([machine()], [group()], CATALOG, NOW, POLICY, placed_on=())
    assert (candidate.instance_id, candidate.container_instance_arn, candidate.region, candidate.asg_name,
            candidate.method) == ("i-m1", "m1", "us-east-1", "mlfleet-dev-gpu4", "release")
    assert "no queued job fits it" in candidate.reason


@pytest.mark.parametrize(("changes", "placed_on", "why"), [
    ({"draining": True}, (), "draining"),
    ({"removing": True}, (), "already being removed"),
    ({}, ("m1",), "placed on it"),
    ({"free_gpus": 3}, (), "runs a task"),
    ({"submissions": frozenset({"sub-1"})}, (), "runs a task"),
    ({"empty_for": None}, (), "empty time is unknown"),
    ({"empty_for": 179.0}, (), "under the release delay"),
    ({"up_for": 59.0}, (), "first billed minute"),
    ({"launched_at": None}, (), "launch time is unknown"),
    ({"protected": True}, (), "keep-alive"),
], ids=["draining", "removing", "placed-this-run", "busy", "running-submission", "empty-unknown", "under-delay",
        "billing-minimum", "launch-unknown", "keep-alive"])
def test_each_rule_keeps_the_machine(changes, placed_on, why):
    candidate = machine(**changes)
    assert why in why_kept(candidate, CATALOG, NOW, POLICY, placed_on)
    assert propose_releases([candidate], [group()], CATALOG, NOW, POLICY, placed_on) == ()


def test_never_below_the_group_minimum_and_instances_launching_do_not_count_toward_it():
    machines = [machine(f"m{i}") for i in range(3)]
    unbudgeted = ReleasePolicy(after_empty_s=180, budget_percent=100)
    # Minimum 1, three in service: two may go, and a fourth still launching changes nothing (it may never boot).
    assert len(propose_releases(machines, [group(current=3, min_size=1)], CATALOG, NOW, unbudgeted, ())) == 2
    assert len(propose_releases(machines, [group(current=3, pending=1, min_size=1)], CATALOG, NOW, unbudgeted, ())) == 2
    assert propose_releases(machines, [group(current=3, min_size=3)], CATALOG, NOW, unbudgeted, ()) == ()
    # One already being removed counts against the minimum until it is gone.
    assert len(propose_releases(machines, [group(current=3, min_size=1, removing=1)], CATALOG, NOW, unbudgeted,
                                ())) == 2
    assert len(propose_releases(machines, [group(current=2, min_size=1, removing=1)], CATALOG, NOW, unbudgeted,
                                ())) == 1


def test_the_configured_budget_percent_is_the_one_applied():
    machines = [machine(f"m{i}") for i in range(20)]
    fleet = group(current=20)
    assert len(propose_releases(machines, [fleet], CATALOG, NOW, ReleasePolicy(180, budget_percent=25), ())) == 5
    assert len(propose_releases(machines, [fleet], CATALOG, NOW, ReleasePolicy(180, budget_percent=1), ())) == 1


def test_the_disruption_budget_counts_removals_in_flight_and_the_dearest_go_first():
    machines = [machine(f"m{i}", price_per_hour=float(i + 1)) for i in range(20)]
    fleet = group(current=30)  # 10% of 30: three at once
    assert [c.container_instance_arn for c in propose_releases(machines, [fleet], CATALOG, NOW, POLICY, ())] == \
        ["m19", "m18", "m17"]
    busy_removing = group(current=28, removing=2)  # two already draining: one more
    assert len(propose_releases(machines, [busy_removing], CATALOG, NOW, POLICY, ())) == 1
    assert disruption_budget(0) == 1 and disruption_budget(10) == 1 and disruption_budget(11) == 2


def test_members_terminating_count_against_the_budget_as_the_executor_counts_them():
    """Three may go in a group of 30 (10%); two members still terminating (Terminating:Wait, held by a
    lifecycle hook) take two of them, as in the executor's validation (lambdas.removal.decide.room). They are
    in no other count (not usable, not pending, not being removed), so the minimum is not touched."""
    machines = [machine(f"m{i}", price_per_hour=float(i + 1)) for i in range(20)]
    assert [c.container_instance_arn for c in propose_releases(machines, [group(current=30, terminating=2)], CATALOG,
                                                               NOW, POLICY, ())] == ["m19"]
    unbudgeted = ReleasePolicy(after_empty_s=180, budget_percent=100)
    # 100% of the 5 desired less 2 terminating leaves 3; the minimum leaves 3 in service - 1 = 2.
    assert len(propose_releases(machines, [group(current=3, pending=2, min_size=1, terminating=2)], CATALOG, NOW,
                                unbudgeted, ())) == 2


def test_a_machine_of_an_unknown_fleet_is_not_released():
    assert propose_releases([machine(fleet="other")], [group()], CATALOG, NOW, POLICY, ()) == ()


def test_bad_policies_are_refused():
    with pytest.raises(ValueError, match="after_empty_s=-1"):
        ReleasePolicy(after_empty_s=-1)
    with pytest.raises(ValueError, match="budget_percent=0"):
        ReleasePolicy(after_empty_s=1, budget_percent=0)
    with pytest.raises(ValueError, match="budget_percent=101"):
        ReleasePolicy(after_empty_s=1, budget_percent=101)


def test_the_plan_never_releases_a_machine_it_placed_a_job_on():
    empty = machine("m1", empty_for=3600)
    job = JobRequest("j1", "sub-1", 1, 4, 8192)
    result = plan([job], [empty], [group(current=1)], CATALOG, Limits(100, 0), now=NOW, release=POLICY)
    assert [p.machine_key for p in result.placements] == ["m1"] and result.releases == ()
    # Nothing queued: the same machine is given back.
    assert [c.container_instance_arn for c in plan([], [empty], [group(current=1)], CATALOG, Limits(100, 0),
                                                   now=NOW, release=POLICY).releases] == ["m1"]


def test_releases_go_on_while_admission_is_closed_and_not_without_a_policy():
    empty = machine("m1")
    closed = plan([JobRequest("j1", "s", 1, 4, 8192)], [empty], [group(current=1)], CATALOG,
                  Limits(100, 0, admission_open=False), now=NOW, release=POLICY)
    assert closed.placements == () and [c.instance_id for c in closed.releases] == ["i-m1"]
    assert plan([], [empty], [group(current=1)], CATALOG, Limits(100, 0), now=NOW).releases == ()


def test_a_machine_being_removed_is_never_placed_onto():
    result = plan([JobRequest("j1", "s", 1, 4, 8192)], [machine("m1", removing=True)], [], CATALOG, Limits(100, 0))
    assert result.placements == ()


DEGRADED = "ECS registered 3 of its type's 4 GPUs"


def test_a_degraded_machine_takes_no_job_and_once_empty_is_released_without_the_delay():
    job = JobRequest("j1", "s", 1, 4, 8192)
    broken = machine("m1", empty_for=10.0, gpus=3, free_gpus=3, degraded=DEGRADED)  # just emptied, under the delay
    result = plan([job], [broken], [group(current=1)], CATALOG, Limits(100, 0), now=NOW, release=POLICY)
    assert result.placements == () and [c.instance_id for c in result.releases] == ["i-m1"]
    assert DEGRADED in result.releases[0].reason
    # A healthy machine just emptied is kept for the delay (and takes the job).
    healthy = machine("m1", empty_for=10.0)
    assert plan([job], [healthy], [group(current=1)], CATALOG, Limits(100, 0), now=NOW,
                release=POLICY).placements[0].machine_key == "m1"


@pytest.mark.parametrize("changes", [
    {"free_gpus": 2}, {"empty_for": None}, {"protected": True}, {"up_for": 59.0}, {"draining": True},
], ids=["busy", "empty-unknown", "keep-alive", "billing-minimum", "draining"])
def test_a_degraded_machine_is_kept_by_every_other_rule(changes):
    broken = machine(**{"gpus": 3, "free_gpus": 3, "degraded": DEGRADED, **changes})
    assert propose_releases([broken], [group()], CATALOG, NOW, POLICY, ()) == ()


def test_degraded_machines_go_first_within_the_group_s_minimum_and_budget():
    healthy = [machine(f"m{i}", price_per_hour=10.0 + i) for i in range(3)]
    broken = machine("b", price_per_hour=1.0, degraded="ECS reports its health IMPAIRED")
    machines = [*healthy, broken]
    assert [c.container_instance_arn for c in propose_releases(machines, [group(current=4)], CATALOG, NOW, POLICY,
                                                               ())] == ["b"]  # budget: one at once
    assert propose_releases([broken], [group(current=1, min_size=1)], CATALOG, NOW, POLICY, ()) == ()


# --- properties over random cluster states --------------------------------------------------------

machine_st = st.builds(
    lambda n, fleet, used, empty_for, up_for, flags, rebalance: machine(
        f"m{n}", "g5.12xlarge" if fleet == "gpu4" else "g5.xlarge", fleet=fleet,
        free_gpus=max(0, GPUS["g5.12xlarge" if fleet == "gpu4" else "g5.xlarge"] - used),
        submissions=frozenset({"s"}) if used else frozenset(), empty_for=None if used else empty_for, up_for=up_for,
        draining=flags == 1, removing=flags == 2, protected=flags == 3, rebalance_recommended=rebalance),
    st.integers(0, 10**6), st.sampled_from(["gpu4", "gpu1"]), st.integers(0, 4),
    st.one_of(st.none(), st.floats(0, 7200)), st.floats(0, 7200), st.integers(0, 6), st.booleans())
fleet_st = st.builds(lambda fleet, pending, min_size, removing, terminating: (fleet, pending, min_size, removing,
                                                                            terminating),
                     st.sampled_from(["gpu4", "gpu1"]), st.integers(0, 3), st.integers(0, 8), st.integers(0, 3),
                     st.integers(0, 3))


@settings(max_examples=300, deadline=None)
@given(st.lists(machine_st, max_size=30, unique_by=lambda m: m.key), st.lists(fleet_st, max_size=2,
       unique_by=lambda f: f[0]), st.floats(0, 600), st.sets(st.integers(0, 10**6)))
def test_never_below_min_never_with_work_never_over_budget_never_twice(machines, fleet_specs, delay, placed):
    fleets = []
    for name, pending, min_size, removing, terminating in fleet_specs:
        mine = [m for m in machines if m.fleet == name]
        usable = sum(1 for m in mine if not (m.draining or m.removing))
        in_flight = max(removing, sum(1 for m in mine if m.removing))
        fleets.append(group(name, current=usable, pending=pending, min_size=min(min_size, usable + pending),
                            removing=in_flight, terminating=terminating,
                            types=("g5.12xlarge",) if name == "gpu4" else ("g5.xlarge",)))
    placed_on = {f"m{n}" for n in placed}
    policy = ReleasePolicy(after_empty_s=delay)
    releases = propose_releases(machines, fleets, CATALOG, NOW, policy, placed_on)
    by_key = {m.key: m for m in machines}
    assert len({c.container_instance_arn for c in releases}) == len(releases)  # never twice
    for candidate in releases:
        m = by_key[candidate.container_instance_arn]
        assert m.free_gpus == GPUS[m.instance_type] and not m.submissions and m.key not in placed_on  # no work
        assert not (m.draining or m.removing or m.protected)
        assert NOW - m.empty_since >= delay and NOW - m.launched_at >= 60
    for fleet in fleets:
        released = sum(1 for c in releases if c.asg_name == fleet.asg_name)
        # In service: the usable machines and those being removed; launching ones may never boot.
        in_service = fleet.current_instances + fleet.removing_instances
        assert in_service - fleet.removing_instances - released >= fleet.min_size or released == 0  # minimum
        desired = fleet.current_instances + fleet.pending_instances + fleet.removing_instances
        budget = max(1, math.ceil(0.1 * desired))
        disrupted = fleet.removing_instances + fleet.terminating_instances  # what the budget already holds
        assert disrupted + released <= max(budget, disrupted)  # within the budget


def test_givable_is_what_the_group_s_minimum_and_protection_leave_dearest_first():
    big, small, guarded = (machine("big"), machine("small", "g5.xlarge"), machine("guarded", protected=True))
    draining = machine("draining", draining=True)
    busy = machine("busy", "g5.48xlarge", free_gpus=0, submissions=frozenset({"s"}), empty_for=None)
    everything = [big, small, guarded, draining, busy]
    assert givable(everything, [group(current=5)], CATALOG) == {"big", "small"}
    # Three in service above a minimum of two: one may go, the dearest empty one (the busy one never goes).
    assert givable(everything, [group(current=3, min_size=2)], CATALOG) == {"big"}
    assert givable(everything, [group(current=2, min_size=2)], CATALOG) == frozenset()
    assert givable(everything, [group("other")], CATALOG) == frozenset()  # a group the plan does not know
