"""The circuit breaker's memory of degraded machines, on plain data (lambdas/scheduler/fleet_health.py judge):
which fleets trip, given the sightings the last run kept, this run's degraded machines and the time.

The breaker opens for a fleet in which at least BREAKER_FAILURES distinct machines were first seen degraded
within BREAKER_WINDOW, and closes once fewer were; the machines that opened it open it once; a machine still
degraded is never counted again as new.
Each run's memory goes through the item's encoding (encode, decode), as between Lambda runs."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from lambdas.scheduler import fleet_health as fh
from lambdas.scheduler.handler import BREAKER_FAILURES, BREAKER_WINDOW

WINDOW = BREAKER_WINDOW.total_seconds()
GPU1, SMALL, WEST = ("us-east-1", "gpu1"), ("us-east-1", "small"), ("us-west-2", "gpu1")
NOW = 1_800_000_000.0
NO_GPU = "ECS registered no GPU resource of its type's 4 GPUs"


def judge(remembered, degraded, now=NOW, read=(GPU1, SMALL, WEST), unread=()):
    return fh.judge(remembered, degraded, now, window_s=WINDOW, threshold=BREAKER_FAILURES, read=read, unread=unread)


def down(*ids, fleet=GPU1, reason=NO_GPU):
    return [fh.Degraded(fleet[0], fleet[1], i, reason) for i in ids]


def seen(*pairs, reason=NO_GPU):
    """Sightings (instance id, minutes before NOW)."""
    return tuple(sorted(fh.Sighting(NOW - minutes * 60, i, reason) for i, minutes in pairs))


def mem(*pairs, opened=None, closed=None, reason=NO_GPU):
    """A fleet's memory: sightings (instance id, minutes before NOW), its breaker opened or closed minutes before."""
    return fh.FleetMemory(seen(*pairs, reason=reason), None if opened is None else NOW - opened * 60,
                          None if closed is None else NOW - closed * 60)


@pytest.mark.parametrize(("remembered", "degraded", "tripped"), [
    # This run alone: three degraded at once trip, two do not.
    ({}, down("i-1", "i-2", "i-3"), {GPU1: ("i-1", "i-2", "i-3")}),
    ({}, down("i-1", "i-2"), {}),
    # Remembered from earlier runs, given back since: they count while inside the window.
    ({GPU1: mem(("i-1", 20), ("i-2", 10))}, down("i-3"), {GPU1: ("i-1", "i-2", "i-3")}),
    ({GPU1: mem(("i-1", 30), ("i-2", 10))}, down("i-3"), {GPU1: ("i-1", "i-2", "i-3")}),  # at the window's edge
    ({GPU1: mem(("i-1", 31), ("i-2", 10))}, down("i-3"), {}),  # past it
    # Open: it stays open while three are inside the window, none of them degraded now, and closes on two.
    ({GPU1: mem(("i-1", 20), ("i-2", 10), ("i-3", 5), opened=5)}, [], {GPU1: ("i-1", "i-2", "i-3")}),
    ({GPU1: mem(("i-1", 31), ("i-2", 10), ("i-3", 5), opened=5)}, [], {}),
    # Closed 4 minutes ago: the two still inside the window opened it once; one more does not open it again...
    ({GPU1: mem(("i-2", 10), ("i-3", 5), closed=4)}, down("i-4"), {}),
    ({GPU1: mem(("i-2", 10), ("i-3", 5), ("i-4", 2), ("i-5", 1), closed=4)}, [], {}),
    # ... three first seen since it closed do; and a close past the window is forgotten.
    ({GPU1: mem(("i-2", 10), ("i-4", 3), ("i-5", 2), closed=4)}, down("i-6"), {GPU1: ("i-2", "i-4", "i-5", "i-6")}),
    ({GPU1: mem(("i-2", 29), ("i-4", 25), closed=31)}, down("i-6"), {GPU1: ("i-2", "i-4", "i-6")}),
    # Distinct machines: one seen degraded again is one.
    ({GPU1: mem(("i-1", 20), ("i-2", 10))}, down("i-1", "i-2"), {}),
    # A machine still degraded past the window is remembered, never counted again as new.
    ({GPU1: mem(("i-1", 45), ("i-2", 10))}, down("i-1", "i-3"), {}),
    # Per fleet: three over two fleets, or the same fleet name in two regions, trip nothing.
    ({GPU1: mem(("i-1", 20))}, [*down("i-2"), *down("i-3", fleet=SMALL)], {}),
    ({GPU1: mem(("i-1", 20), ("i-2", 10))}, down("i-3", fleet=WEST), {}),
    ({GPU1: mem(("i-1", 20), ("i-2", 10)), SMALL: mem(("i-4", 1))}, down("i-3"), {GPU1: ("i-1", "i-2", "i-3")}),
])
def test_which_fleets_trip(remembered, degraded, tripped):
    judged = judge(remembered, degraded)

    assert {key: tuple(s.instance_id for s in found) for key, found in judged.tripped.items()} == tripped


def test_the_breaker_s_state_is_remembered_when_it_opens_and_closes():
    opening = judge({GPU1: mem(("i-1", 20), ("i-2", 10))}, down("i-3"))
    assert opening.opened == (GPU1,) and opening.kept[GPU1].opened_at == NOW and opening.changed

    still = judge(opening.kept, [], now=NOW + 60)
    assert still.opened == () and still.kept[GPU1].opened_at == NOW and not still.changed

    closing = judge(still.kept, [], now=NOW + 11 * 60)  # i-1 leaves the window
    assert closing.closed == (GPU1,) and closing.tripped == {}
    assert (closing.kept[GPU1].opened_at, closing.kept[GPU1].closed_at) == (None, NOW + 11 * 60)

    forgotten = judge(closing.kept, [], now=NOW + 42 * 60)  # everything past the window: nothing left
    assert forgotten.kept == {} and forgotten.changed


def test_a_machine_first_seen_now_is_remembered_with_now_and_its_reason():
    judged = judge({GPU1: mem(("i-1", 20))}, down("i-2", reason="ECS reports its health IMPAIRED"))

    assert judged.kept == {GPU1: fh.FleetMemory((fh.Sighting(NOW - 1200, "i-1", NO_GPU),
                                                fh.Sighting(NOW, "i-2", "ECS reports its health IMPAIRED")))}
    assert judged.new == tuple(down("i-2", reason="ECS reports its health IMPAIRED")) and judged.changed


def test_a_machine_seen_degraded_again_keeps_its_first_sighting_and_nothing_changes():
    remembered = {GPU1: mem(("i-1", 20))}

    judged = judge(remembered, down("i-1", reason="ECS reports its health IMPAIRED"))

    assert judged.kept == remembered and judged.new == () and not judged.changed


def test_sightings_are_forgotten_past_the_window_once_their_machine_is_not_degraded():
    judged = judge({GPU1: mem(("gone", 31), ("still", 31), ("recent", 29))}, down("still"))

    assert [s.instance_id for s in judged.kept[GPU1].sightings] == ["still", "recent"] and judged.changed


def test_an_unread_fleet_is_kept_as_it_is_and_an_unconfigured_fleet_forgotten():
    remembered = {WEST: mem(("w-1", 45), ("w-2", 40), ("w-3", 35), opened=35), ("eu-west-1", "old"): mem(("o-1", 5))}

    judged = judge(remembered, [], read=(GPU1,), unread=(WEST,))

    assert judged.kept == {WEST: remembered[WEST]} and judged.tripped == {}


def test_reasons_are_cut_and_the_memory_is_bounded(monkeypatch):
    monkeypatch.setattr(fh, "MAX_KEPT", 5)
    old = {GPU1: mem(*((f"old-{n}", 40 + n) for n in range(4)))}  # still degraded, past the window

    judged = judge(old, [*down(*(f"old-{n}" for n in range(4))), *down("new-1", "new-2", reason="x" * 500)])

    assert len(judged.kept[GPU1].sightings) == 5 and judged.dropped == 1
    assert {s.instance_id for s in judged.kept[GPU1].sightings} == {"new-1", "new-2", "old-0", "old-1", "old-2"}
    assert all(len(s.reason) == fh.MAX_REASON for s in judged.kept[GPU1].sightings if s.instance_id.startswith("new"))


def test_the_item_s_encoding_round_trips_and_what_cannot_be_decoded_is_dropped():
    memory = {GPU1: mem(("i-1", 20), ("i-2", 0.5), opened=0.5), WEST: mem(("i-3", 90), closed=10, reason=""),
              SMALL: mem(closed=3)}
    value = fh.encode(memory)
    assert fh.decode(value) == memory

    value["M"]["us-east-1"]["M"]["gpu1"]["M"]["machines"]["M"]["i-1"] = {"M": {"why": {"S": "no time"}}}
    value["M"]["us-east-1"]["M"]["small"]["M"]["closed_at"] = {"S": "yesterday"}
    assert fh.decode(value) == {GPU1: mem(("i-2", 0.5), opened=0.5), WEST: memory[WEST]}


def test_merging_keeps_each_machine_s_earliest_sighting_and_errs_toward_an_open_breaker():
    ours = {GPU1: mem(("i-1", 5), ("i-2", 3), opened=3)}
    theirs = {GPU1: mem(("i-1", 9), closed=1), SMALL: mem(("i-9", 1))}

    assert fh.merge(ours, theirs) == {GPU1: mem(("i-1", 9), ("i-2", 3), opened=3, closed=1), SMALL: mem(("i-9", 1))}


# --- properties over runs -------------------------------------------------------------------------------------

MACHINES = [f"i-{n}" for n in range(8)]
FLEETS = [GPU1, SMALL]
runs = st.lists(st.tuples(st.floats(min_value=0, max_value=20 * 60),  # seconds since the last run
                          st.sets(st.tuples(st.sampled_from(FLEETS), st.sampled_from(MACHINES)))),
                min_size=1, max_size=25)


def replay(history):
    """Each run judged from the memory the last run kept, through the item's encoding; yields per run its time,
    its degraded machines and the judgement."""
    memory, now = {}, NOW
    for gap, machines in history:
        now += gap
        degraded = [fh.Degraded(k[0], k[1], i, f"reason of {i}") for k, i in sorted(machines)]
        judged = judge(memory, degraded, now=now, read=FLEETS)
        yield now, machines, judged
        memory = fh.decode(fh.encode(judged.kept))


@settings(max_examples=300, deadline=None)
@given(runs)
@example([(0, {(GPU1, "i-1"), (GPU1, "i-2"), (GPU1, "i-3")})])
@example([(0, {(GPU1, "i-1")}), (600, {(GPU1, "i-2")}), (600, {(GPU1, "i-3")}), (660, set()), (0, set())])
@example([(0, {(GPU1, "i-1")}), (1200, {(GPU1, "i-2")}), (300, {(GPU1, "i-3")}), (360, set()), (240, {(GPU1, "i-4")}),
          (960, set()), (240, {(GPU1, "i-5")})])  # an uneven start: no reopening on one machine at a time
def test_a_fleet_s_breaker_opens_on_machines_first_seen_degraded_in_the_window_and_once_on_each(history):
    """Sound: every machine counted was degraded at a run inside the window. Once: an opening counts at least
    BREAKER_FAILURES machines first seen since the last close. It closes as soon as fewer are in the window.
    Exactly, against a per-machine model: a machine's sighting starts at the first run that finds it degraded
    and ends at a run that does not, once older than the window."""
    past: list[tuple[float, tuple, str]] = []  # (time, fleet, machine) of every run that found it degraded
    since: dict[tuple, float] = {}  # (fleet, machine) -> the start of its sighting
    is_open = {key: False for key in FLEETS}
    closed_at: dict[tuple, float] = {}
    for now, machines, judged in replay(history):
        past += [(now, key, machine) for key, machine in machines]
        for fleet_machine in [k for k, start in since.items() if k not in machines and now - start > WINDOW]:
            del since[fleet_machine]
        for fleet_machine in machines:
            since.setdefault(fleet_machine, now)
        for key in FLEETS:
            recent = {m: t for (k, m), t in since.items() if k == key and now - t <= WINDOW}
            fresh = {m for m, t in recent.items() if key not in closed_at or now - closed_at[key] > WINDOW
                     or t > closed_at[key]}
            was_open = is_open[key]
            is_open[key] = len(recent) >= BREAKER_FAILURES if was_open else len(fresh) >= BREAKER_FAILURES
            if was_open and not is_open[key]:
                closed_at[key] = now
            counted = [s.instance_id for s in judged.tripped.get(key, ())]

            assert set(counted) == (set(recent) if is_open[key] else set()) and len(counted) == len(set(counted))
            assert set(counted) <= {m for t, k, m in past if k == key and now - t <= WINDOW}
            assert (key in judged.opened) == (is_open[key] and not was_open)
            if key in judged.opened:
                assert len(fresh) >= BREAKER_FAILURES
            assert (key in judged.closed) == (was_open and len(recent) < BREAKER_FAILURES)


@settings(max_examples=200, deadline=None)
@given(runs)
def test_a_run_that_sees_nothing_new_writes_nothing_and_a_machine_is_never_counted_twice(history):
    for now, machines, judged in replay(history):
        again = judge(judged.kept, [fh.Degraded(k[0], k[1], i, "again") for k, i in machines], now=now, read=FLEETS)
        assert again.kept == judged.kept and not again.changed and again.new == ()
        assert again.tripped == judged.tripped and again.opened == again.closed == ()
        for key, kept in judged.kept.items():
            assert len({s.instance_id for s in kept.sightings}) == len(kept.sightings)
            assert {i for k, i in machines if k == key} <= {s.instance_id for s in kept.sightings}


@settings(max_examples=200, deadline=None)
@given(runs, st.floats(min_value=0, max_value=3 * 3600))
def test_without_new_degraded_machines_the_breaker_only_closes_and_is_closed_after_the_window(history, later):
    *_, (now, _, judged) = replay(history)
    quiet = judge(judged.kept, [], now=now + later, read=FLEETS)

    assert set(quiet.tripped) <= set(judged.tripped) and quiet.opened == ()
    if later > WINDOW:
        assert quiet.tripped == {} and all(not m.sightings and m.opened_at is None for m in quiet.kept.values())
