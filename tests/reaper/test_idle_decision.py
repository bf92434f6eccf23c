"""The idle contract as a pure function: one case per rule, and properties over arbitrary instances."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lambdas.reaper.idle import (
    BUSY, DESTRUCTIVE, LEFT_RUNNING, MARK, REAP_FLEET, REFUSAL_REMINDER, SPARE, STOP_STANDALONE, TERMINATE_STANDALONE,
    UNMARK, WAIT_GRACE, IdleSettings, Instance, decide, decide_all, keep_alive_protects, stop_refused, window_periods,
)

NOW = datetime(2026, 11, 22, 12, 2, 30, tzinfo=timezone.utc)
SETTINGS = IdleSettings(window_minutes=60, cpu_percent=10, gpu_percent=5, grace_minutes=30)
PERIODS = window_periods(NOW, SETTINGS)


def series(value=1.0, drop=()):
    return {p: value for i, p in enumerate(PERIODS) if i not in drop}


def instance(**overrides):
    base = dict(instance_id="i-0aaa", launch_time=NOW - timedelta(hours=3), lifecycle="spot",
                asg_name="mlfleet-dev-gpu1", tags={}, running_tasks=0, cpu=series(), gpu=series())
    base.update(overrides)
    return Instance(**base)


def marked(minutes_ago):
    return {"mlfleet:idle-since": (NOW - timedelta(minutes=minutes_ago)).isoformat()}


def test_window_is_the_last_complete_periods():
    assert len(PERIODS) == 12
    assert PERIODS[-1] == datetime(2026, 11, 22, 11, 55, tzinfo=timezone.utc)
    assert PERIODS[0] == datetime(2026, 11, 22, 11, 0, tzinfo=timezone.utc)


@pytest.mark.parametrize(
    ("overrides", "action", "reason_part"),
    [
        ({}, MARK, "no tasks"),
        ({"running_tasks": 1}, BUSY, "1 ECS task(s) running"),
        ({"running_tasks": None}, BUSY, "task count unknown"),
        ({"cpu": {**series(), PERIODS[3]: 10.0}}, BUSY, "CPU peaked at 10.0%"),
        ({"gpu": {**series(), PERIODS[-1]: 80.0}}, BUSY, "GPU peaked at 80.0%"),
        ({"gpu": series(drop={5})}, BUSY, "GPU data missing for 1 of 12"),
        ({"cpu": series(drop=set(range(6)))}, BUSY, "CPU data missing for 6 of 12"),
        ({"gpu": None}, BUSY, "no GPU metric"),
        ({"cpu": None}, BUSY, "no CPU metric"),
        ({"launch_time": NOW - timedelta(minutes=59)}, BUSY, "younger than the 60-minute window"),
        ({"tags": {"mlfleet:keep-alive": "true"}}, SPARE, "keep-alive=true"),
        ({"tags": {"mlfleet:keep-alive": "TRUE"}}, SPARE, "keep-alive=true"),
        ({"tags": {"mlfleet:keep-alive": "2026-11-23T00:00:00Z"}}, SPARE, "keep-alive until"),
        ({"tags": {"mlfleet:keep-alive": "2026-11-21T00:00:00Z"}}, MARK, "keep-alive expired"),
        ({"tags": {"mlfleet:keep-alive": "tomorrow"}}, SPARE, "kept to be safe"),
        ({"tags": marked(10)}, WAIT_GRACE, "min of grace left"),
        ({"tags": marked(30)}, REAP_FLEET, "grace over"),
        ({"tags": marked(45), "asg_name": None}, STOP_STANDALONE, "grace over"),
        ({"tags": {**marked(45), "mlfleet:keep-alive": "true"}}, UNMARK, "idle mark removed"),
        ({"tags": marked(45), "running_tasks": 2}, UNMARK, "2 ECS task(s) running; idle mark removed"),
        ({"tags": {"mlfleet:idle-since": "garbage"}}, MARK, "unreadable idle-since"),
    ],
    ids=["idle-first-seen", "task", "unregistered", "cpu-at-threshold", "gpu-busy", "one-gpu-gap",
         "partial-window", "no-gpu-series", "no-cpu-series", "young", "keep-alive", "keep-alive-case",
         "keep-alive-future", "keep-alive-expired", "keep-alive-garbage", "in-grace", "reap", "standalone-stop",
         "keep-alive-unmarks", "busy-again-unmarks", "bad-mark"],
)
def test_each_rule(overrides, action, reason_part):
    decision = decide(instance(**overrides), NOW, SETTINGS)
    assert decision.action == action
    assert reason_part in decision.reason


def test_mark_records_now():
    assert decide(instance(), NOW, SETTINGS).idle_since == NOW


def test_keep_alive_parsing():
    assert keep_alive_protects(None, NOW) == (False, "")
    assert keep_alive_protects("2026-11-22T13:00:00", NOW)[0]  # naive = UTC
    assert not keep_alive_protects("2026-11-22T12:00:00+00:00", NOW)[0]


def test_action_cap_spares_the_most_recently_idle_first():
    fleet = [instance(instance_id=f"i-{n}", tags=marked(30 + n)) for n in range(5)]
    decisions = {d.instance_id: d for d in decide_all(fleet, NOW, SETTINGS, max_actions=2)}
    assert {i for i, d in decisions.items() if d.action == REAP_FLEET} == {"i-4", "i-3"}
    for spared in ("i-0", "i-1", "i-2"):
        assert decisions[spared].action == SPARE and "action cap of 2" in decisions[spared].reason


# --- properties --------------------------------------------------------------------------------

values = st.floats(min_value=0, max_value=100, allow_nan=False)
maybe_series = st.one_of(st.none(), st.dictionaries(st.sampled_from(PERIODS), values))
tags = st.dictionaries(
    st.sampled_from(["mlfleet:keep-alive", "mlfleet:idle-since", "team"]),
    st.one_of(st.just("true"), st.text(max_size=8),
              st.datetimes(min_value=datetime(2026, 1, 1), max_value=datetime(2027, 1, 1)).map(lambda d: d.isoformat())),
)
instances = st.builds(
    Instance,
    instance_id=st.from_regex(r"i-[0-9a-f]{6}", fullmatch=True),
    launch_time=st.datetimes(min_value=datetime(2026, 11, 20), max_value=datetime(2026, 11, 22, 12)).map(
        lambda d: d.replace(tzinfo=timezone.utc)),
    lifecycle=st.sampled_from(["spot", "on-demand"]),
    asg_name=st.sampled_from([None, "mlfleet-dev-gpu1"]),
    tags=tags,
    running_tasks=st.one_of(st.none(), st.integers(0, 4)),
    cpu=maybe_series,
    gpu=maybe_series,
    spot_request_id=st.sampled_from([None, "sir-0aaa"]),
    spot_request_type=st.sampled_from([None, "one-time", "persistent"]),
)


def _has_gap(i: Instance) -> bool:
    return any(s is None or any(p not in s for p in PERIODS) for s in (i.cpu, i.gpu))


@settings(max_examples=300, deadline=None)
@given(instances)
def test_running_task_keep_alive_or_gap_is_never_acted_on_nor_marked(i):
    decision = decide(i, NOW, SETTINGS)
    protected = keep_alive_protects(i.tags.get("mlfleet:keep-alive"), NOW)[0]
    if (i.running_tasks != 0) or protected or _has_gap(i):
        assert decision.action not in (*DESTRUCTIVE, MARK, WAIT_GRACE)


@settings(max_examples=200, deadline=None)
@given(st.lists(instances, max_size=12, unique_by=lambda i: i.instance_id), st.integers(0, 5))
def test_cap_holds_and_every_instance_gets_exactly_one_decision(fleet, cap):
    decisions = decide_all(fleet, NOW, SETTINGS, cap)
    assert sorted(d.instance_id for d in decisions) == sorted(i.instance_id for i in fleet)
    assert sum(d.destructive for d in decisions) <= cap


# --- standalone machines: stopped when EC2 can stop them, terminated when it cannot ---------------------

ONE_TIME = {"lifecycle": "spot", "spot_request_id": "sir-0one", "spot_request_type": "one-time"}


@pytest.mark.parametrize(
    ("overrides", "action", "reason_part"),
    [
        ({"lifecycle": "on-demand"}, STOP_STANDALONE, "stopped (on-demand"),
        ({"lifecycle": "spot", "spot_request_id": "sir-0per", "spot_request_type": "persistent"}, STOP_STANDALONE,
         "stopped (Spot request sir-0per is persistent"),
        (ONE_TIME, TERMINATE_STANDALONE,
         "terminated: a Spot Instance of a one-time request (Spot request sir-0one) cannot be stopped, and its data "
         "would not survive a Spot interruption either"),
        ({"lifecycle": "spot", "spot_request_type": None}, STOP_STANDALONE,
         "stopped (its Spot request could not be read: terminated instead if EC2 refuses the stop)"),
        ({**ONE_TIME, "asg_name": "mlfleet-dev-gpu1"}, REAP_FLEET, "grace over"),  # the removal protocol's
    ],
    ids=["on-demand", "persistent-spot", "one-time-spot", "spot-request-unread", "fleet-member"],
)
def test_an_idle_standalone_machine_is_stopped_only_when_ec2_can_stop_it(overrides, action, reason_part):
    """Before: every standalone machine was stopped, and EC2 refuses to stop a Spot Instance of a one-time
    request (UnsupportedOperation), so it ran idle for ever, failing every run."""
    decision = decide(instance(**{"asg_name": None, "tags": marked(45), **overrides}), NOW, SETTINGS)
    assert decision.action == action
    assert "grace over" in decision.reason and reason_part in decision.reason


@pytest.mark.parametrize("minutes_ago", [None, 10, 29])
def test_a_one_time_spot_machine_waits_the_same_window_and_grace_as_a_stop(minutes_ago):
    tags = {} if minutes_ago is None else marked(minutes_ago)
    decision = decide(instance(asg_name=None, tags=tags, **ONE_TIME), NOW, SETTINGS)
    assert decision.action == (MARK if minutes_ago is None else WAIT_GRACE)


def test_a_stop_ec2_refuses_terminates_a_spot_machine_and_leaves_any_other_running():
    refusal = "UnsupportedOperation: the instance cannot be stopped"
    unread = instance(asg_name=None, tags=marked(45), lifecycle="spot")
    stop = decide(unread, NOW, SETTINGS)
    instead = stop_refused(stop, unread, refusal, NOW)
    assert instead.action == TERMINATE_STANDALONE and instead.idle_since == stop.idle_since
    assert "grace over; terminated: EC2 refused to stop this Spot Instance (UnsupportedOperation" in instead.reason
    assert "stopped (" not in instead.reason
    on_demand = instance(asg_name=None, tags=marked(45), lifecycle="on-demand")
    left = stop_refused(decide(on_demand, NOW, SETTINGS), on_demand, refusal, NOW)
    assert left.action == LEFT_RUNNING and left.action not in DESTRUCTIVE  # never terminated
    assert "grace over; UnsupportedOperation: the instance cannot be stopped; EC2 refused to stop it at" in left.reason
    assert f"reported again from {(NOW + REFUSAL_REMINDER).isoformat()}" in left.reason and "stopped (" not in left.reason
    assert stop_refused(decide(instance(asg_name=None, lifecycle="spot"), NOW, SETTINGS), unread, refusal, NOW) is None


def refused(hours_ago) -> dict:
    return {**marked(24 * 60 + 45), "mlfleet:stop-refused-at": (NOW - timedelta(hours=hours_ago)).isoformat()}


@pytest.mark.parametrize("hours_ago", [0, 1, 23.9])
def test_a_machine_ec2_refused_to_stop_is_left_running_without_trying_again_for_a_day(hours_ago):
    decision = decide(instance(asg_name=None, tags=refused(hours_ago), lifecycle="on-demand"), NOW, SETTINGS)
    assert decision.action == LEFT_RUNNING and decision.action not in DESTRUCTIVE
    refused_at = NOW - timedelta(hours=hours_ago)
    assert f"EC2 refused to stop it at {refused_at.isoformat()}" in decision.reason
    assert f"reported again from {(refused_at + REFUSAL_REMINDER).isoformat()}" in decision.reason


@pytest.mark.parametrize("tags", [refused(24), refused(30), {**refused(1), "mlfleet:stop-refused-at": "not a time"}],
                         ids=["a-day-on", "later", "unreadable"])
def test_a_day_after_the_refusal_or_without_a_readable_one_the_stop_is_tried_and_reported_again(tags):
    assert decide(instance(asg_name=None, tags=tags, lifecycle="on-demand"), NOW, SETTINGS).action == STOP_STANDALONE


def test_a_machine_left_running_that_is_busy_again_is_unmarked_and_a_fleet_machine_never_left_running():
    busy = instance(asg_name=None, tags=refused(1), lifecycle="on-demand", running_tasks=1)
    assert decide(busy, NOW, SETTINGS).action == UNMARK
    assert decide(instance(tags=refused(1)), NOW, SETTINGS).action == REAP_FLEET


@settings(max_examples=300, deadline=None)
@given(instances)
def test_a_machine_is_terminated_as_a_standalone_only_when_it_would_otherwise_be_stopped_and_cannot_be(i):
    """Terminating is the stop of a machine EC2 cannot stop: the same idle contract, window and grace."""
    decision = decide(i, NOW, SETTINGS)
    as_on_demand = decide(Instance(**{**i.__dict__, "lifecycle": "on-demand"}), NOW, SETTINGS)
    if decision.action == TERMINATE_STANDALONE:
        assert i.asg_name is None and i.lifecycle == "spot" and i.spot_request_type == "one-time"
        assert as_on_demand.action == STOP_STANDALONE
    if as_on_demand.action == STOP_STANDALONE:
        assert decision.action in (STOP_STANDALONE, TERMINATE_STANDALONE)
    else:
        assert decision.action == as_on_demand.action


def test_the_reasons_docs_reaper_md_quotes_are_the_ones_logged_with_the_default_settings():
    from pathlib import Path

    from components.config.model import StackConfig

    fields = StackConfig.model_fields
    defaults = IdleSettings(window_minutes=fields["idle_window_minutes"].default,
                            cpu_percent=fields["idle_cpu_percent"].default,
                            gpu_percent=fields["idle_gpu_percent"].default,
                            grace_minutes=fields["idle_grace_minutes"].default)
    cap = fields["reaper_max_actions_per_run"].default
    document = (Path(__file__).resolve().parents[2] / "docs" / "reaper.md").read_text()
    young = decide(instance(launch_time=NOW - timedelta(minutes=10)), NOW, defaults).reason
    quiet = {period: 1.0 for period in window_periods(NOW, defaults)}
    fleet = [instance(instance_id=f"i-{n}", tags=marked(60 + n), cpu=quiet, gpu=quiet) for n in range(cap + 1)]
    spared = next(d.reason for d in decide_all(fleet, NOW, defaults, max_actions=cap) if d.action == SPARE)
    assert f'busy: "{young}"' in document
    assert f'are spared "{spared.split(";")[0]}"' in document
