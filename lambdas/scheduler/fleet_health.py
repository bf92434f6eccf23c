"""The circuit breaker's memory of degraded machines: which machines of each fleet a run first saw degraded,
when and why (docs/scheduler.md, "Caps and the circuit breaker").

A degraded machine (state.py degraded_reason: ECS registered fewer GPUs than its type has, none included;
its ECS health IMPAIRED; a start ECS refused for the machine) takes no job and is given back once empty,
without the release delay (planning/release.py). When every machine a fleet launches comes up so (a bad AMI
or launch template: an agent started without ECS_ENABLE_GPU_SUPPORT, a driver that fails at boot), each run
bought a machine for the waiting jobs, found it degraded, gave it back and bought again, limited only by the
caps, while the jobs waited for ever and nobody was told: those launches succeed, so the count of failed
launches never tripped the breaker. The breaker now also opens for a fleet in which at least `threshold`
(handler.BREAKER_FAILURES) distinct machines were first seen degraded within `window_s`
(handler.BREAKER_WINDOW), and closes by itself once fewer were, as for failed launches. The machines that
opened it open it once: after it closes, it opens again only on `threshold` machines first seen since. Without
that, once the oldest of three left the window, one more machine beside the two still in it would open it
again, and a fault that began unevenly would cost an alert per machine bought (`judge`).

Each such machine is given back within a run or two, so no run sees them together: the sightings are kept
between runs in one item of the job ledger table, key KEY (no job id can take it, lambdas/jobs/spec.py
_JOB_ID, and it has neither `state` nor `submission_id`, so the sparse indexes never list it), read once a
run (one GetItem) and written only when they changed. Per fleet, each machine first seen degraded, with when
and why, and when its breaker opened and last closed. A sighting is forgotten once it is older than the
window and its machine is not seen degraded any more (healthy again, or gone); a machine still degraded is
remembered past the window, so that it is never counted again as new, but is no longer counted. The item is
bounded (MAX_KEPT sightings, reasons cut to MAX_REASON characters): far under DynamoDB's 400 KB.

`judge` is the decision on plain data; `read` and `write` are the item's I/O.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from botocore.exceptions import BotoCoreError, ClientError

from ..common.logs import log_decision
from .kept_item import number

KEY = "#fleet-health/degraded-machines"
# No PERMISSIONS of its own: the item is read and written with the GetItem and PutItem on the whole table that
# the handler declares (ledger.py WRITE_PERMISSIONS). A statement scoped to this key, as the teams' and
# headroom's items have (kept_item.permission), would grant nothing more, add some 250 characters to a role
# policy at 9,510 of IAM's 10,240 (the staging stack's snapshot), and, declared here, reorder every statement
# of the scheduler's policy (components/functions collects them module by module). Should WRITE_PERMISSIONS
# ever be narrowed to job keys, this key needs its own statement: a denied read is logged each run
# (`fleet-health-read-failed`) and leaves the brake without memory.
# The most sightings kept, all fleets together: the newest, those inside the window first. A fleet with more
# machines degraded at once than this has its breaker open anyway.
MAX_KEPT = 1000
MAX_REASON = 200

FleetKey = tuple[str, str]  # (region, fleet)


@dataclass(frozen=True, order=True)
class Sighting:
    """A machine a run first saw degraded: when (epoch seconds) and why (state.degraded_reason)."""
    at: float
    instance_id: str
    reason: str = ""


@dataclass(frozen=True)
class FleetMemory:
    """What is kept of one fleet: its sightings, oldest first, one per machine, and its breaker's state."""
    sightings: tuple[Sighting, ...] = ()
    opened_at: float | None = None  # its degraded machines opened the breaker then, and it is open; None: closed
    closed_at: float | None = None  # it last closed then: the sightings up to then opened it once, and no more


Memory = dict[FleetKey, FleetMemory]


@dataclass(frozen=True)
class Degraded:
    """A machine this run finds degraded."""
    region: str
    fleet: str
    instance_id: str
    reason: str


@dataclass(frozen=True)
class Judgement:
    kept: Memory  # what to remember; fleets with nothing to remember left out
    # The fleets whose breaker their degraded machines hold open, each with its sightings inside the window.
    tripped: dict[FleetKey, tuple[Sighting, ...]]
    new: tuple[Degraded, ...] = ()  # machines first seen degraded this run
    opened: tuple[FleetKey, ...] = ()  # fleets whose breaker their degraded machines opened this run
    closed: tuple[FleetKey, ...] = ()  # ... and those whose breaker closed this run
    dropped: int = 0  # sightings left out past MAX_KEPT
    changed: bool = False  # kept differs from what was remembered: write it


def _earliest(sightings: Iterable[Sighting]) -> tuple[Sighting, ...]:
    machines: dict[str, Sighting] = {}
    for sighting in sightings:
        if sighting.instance_id not in machines or sighting < machines[sighting.instance_id]:
            machines[sighting.instance_id] = sighting
    return tuple(sorted(machines.values()))


def normal(memory: Mapping[FleetKey, FleetMemory]) -> Memory:
    """One sighting per machine (its earliest), oldest first; fleets with nothing to remember left out."""
    found = {key: FleetMemory(_earliest(fleet.sightings), fleet.opened_at, fleet.closed_at)
             for key, fleet in sorted(memory.items())}
    return {key: fleet for key, fleet in found.items() if fleet != FleetMemory()}


def merge(*memories: Mapping[FleetKey, FleetMemory]) -> Memory:
    """What different runs kept, together: each machine's earliest sighting; a breaker open if any run had it
    open (since the earliest), and closed at the earliest close, so that the next run, judging again, errs
    toward a stopped fleet rather than one more machine bought."""
    together: dict[FleetKey, FleetMemory] = {}
    for memory in memories:
        for key, fleet in memory.items():
            before = together.get(key, FleetMemory())
            together[key] = FleetMemory((*before.sightings, *fleet.sightings),
                                        _first(before.opened_at, fleet.opened_at), _first(before.closed_at, fleet.closed_at))
    return normal(together)


def _first(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else min(a, b)


def judge(remembered: Mapping[FleetKey, FleetMemory], degraded: Iterable[Degraded], now: float, *, window_s: float,
          threshold: int, read: Collection[FleetKey], unread: Collection[FleetKey] = ()) -> Judgement:
    """Which fleets' breakers their degraded machines hold open, and what to remember for the next run.

    `remembered`: what the last run kept; `degraded`: the machines this run finds degraded; `read`: the fleets
    this run read (their machines are all in `degraded`, or healthy, or gone); `unread`: the fleets configured
    whose region this run could not read, kept as they are (their machines' state is unknown). A fleet in
    neither is no longer configured: forgotten.

    Sightings: a machine degraded this run and not remembered is first seen now; a remembered one keeps its
    first sighting while it is degraded, and is forgotten once it is not and the sighting is older than
    `window_s`. The breaker: a closed one opens when at least `threshold` sightings are at most `window_s` old
    and newer than its last close; an open one closes once fewer than `threshold` sightings are at most
    `window_s` old. So the machines that opened it open it once: after it closes it opens again only on
    `threshold` machines first seen since, never on one more beside two that are still in the window (which
    would alert once per machine, each time the oldest leaves the window)."""
    remembered = normal(remembered)
    now_degraded: dict[FleetKey, dict[str, str]] = {}
    for machine in degraded:
        now_degraded.setdefault((machine.region, machine.fleet), {}).setdefault(machine.instance_id, machine.reason)
    sightings: dict[FleetKey, list[Sighting]] = {}
    new: list[Degraded] = []
    for key in sorted(set(remembered) | set(now_degraded)):
        seen = now_degraded.get(key, {})
        before = remembered.get(key, FleetMemory())
        if key not in read and not seen:
            continue
        fleet = [s for s in before.sightings if s.instance_id in seen or now - s.at <= window_s]
        known = {s.instance_id for s in before.sightings}
        for instance_id, reason in sorted(seen.items()):
            if instance_id not in known:
                fleet.append(Sighting(now, instance_id, reason[:MAX_REASON]))
                new.append(Degraded(key[0], key[1], instance_id, reason))
        sightings[key] = fleet
    sightings, dropped = bounded(sightings, now, window_s)

    kept: dict[FleetKey, FleetMemory] = {key: remembered[key] for key in remembered
                                         if key in unread and key not in read and key not in now_degraded}
    tripped, opened, closed = {}, [], []
    for key, fleet in sightings.items():
        before = remembered.get(key, FleetMemory())
        recent = tuple(s for s in fleet if now - s.at <= window_s)
        closed_at = before.closed_at if before.closed_at is not None and now - before.closed_at <= window_s else None
        if before.opened_at is not None:
            is_open = len(recent) >= threshold
        else:
            is_open = sum(1 for s in recent if closed_at is None or s.at > closed_at) >= threshold
        if is_open:
            tripped[key] = recent
            if before.opened_at is None:
                opened.append(key)
        elif before.opened_at is not None:
            closed.append(key)
            closed_at = now
        kept[key] = FleetMemory(fleet, (before.opened_at if before.opened_at is not None else now) if is_open else None,
                                closed_at)
    kept_normal = normal(kept)
    return Judgement(kept_normal, tripped, tuple(new), tuple(opened), tuple(closed), dropped, kept_normal != remembered)


def bounded(sightings: dict[FleetKey, list[Sighting]], now: float,
            window_s: float) -> tuple[dict[FleetKey, tuple[Sighting, ...]], int]:
    """At most MAX_KEPT sightings: those inside the window first, then the newest; and how many were left out."""
    every = [(key, s) for key, fleet in sightings.items() for s in _earliest(fleet)]
    every.sort(key=lambda ks: (now - ks[1].at > window_s, -ks[1].at, ks[0], ks[1].instance_id))
    return ({key: _earliest(s for k, s in every[:MAX_KEPT] if k == key) for key in sightings},
            max(0, len(every) - MAX_KEPT))


# --- the item ------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Kept:
    memory: Memory
    version: int = 0  # the item's; 0 when there is none


def encode(memory: Mapping[FleetKey, FleetMemory]) -> dict:
    """{region: {fleet: {machines: {instance id: {at, why}}, opened_at?, closed_at?}}} as a DynamoDB map."""
    regions: dict[str, dict] = {}
    for (region, fleet), kept in normal(memory).items():
        value = {"machines": {"M": {s.instance_id: {"M": {"at": number(s.at), "why": {"S": s.reason}}}
                                    for s in kept.sightings}}}
        for name in ("opened_at", "closed_at"):
            if getattr(kept, name) is not None:
                value[name] = number(getattr(kept, name))
        regions.setdefault(region, {})[fleet] = {"M": value}
    return {"M": {region: {"M": fleets} for region, fleets in regions.items()}}


def decode(value: Mapping) -> Memory:
    """The memory of an encoded map; what cannot be decoded (written by hand, or by another version) is
    logged and left out: this run's write replaces it."""
    found: dict[FleetKey, FleetMemory] = {}
    for region, fleets in (value.get("M") or {}).items():
        for fleet, kept in (fleets.get("M") or {}).items():
            try:
                fields = kept["M"]
                times = {name: float(fields[name]["N"]) if name in fields else None for name in ("opened_at", "closed_at")}
                machines = fields.get("machines", {}).get("M") or {}
            except (KeyError, TypeError, ValueError, AttributeError) as error:
                log_decision("fleet-health-undecodable", region=region, fleet=fleet, entry=str(kept)[:200],
                             error=repr(error), action="dropped")
                continue
            sightings = []
            for instance_id, entry in machines.items():
                try:
                    sightings.append(Sighting(float(entry["M"]["at"]["N"]), instance_id,
                                              str(entry["M"].get("why", {}).get("S", ""))))
                except (KeyError, TypeError, ValueError, AttributeError) as error:
                    log_decision("fleet-health-undecodable", region=region, fleet=fleet, instance_id=instance_id,
                                 entry=str(entry)[:200], error=repr(error), action="dropped")
            found[(region, fleet)] = FleetMemory(tuple(sightings), times["opened_at"], times["closed_at"])
    return normal(found)


def read(dynamodb, table: str) -> Kept:
    """What the last run kept, and the item's version; nothing before the first."""
    item = dynamodb.get_item(TableName=table, Key={"job_id": {"S": KEY}}, ConsistentRead=True).get("Item")
    if not item:
        return Kept({})
    try:
        version = int(item.get("version", {}).get("N", "0"))
    except (TypeError, ValueError, AttributeError):
        version = 0
    return Kept(decode(item.get("fleets") or {}), version)


def write(dynamodb, table: str, memory: Mapping[FleetKey, FleetMemory], version: int, now: float) -> bool:
    """Keep `memory` if the item is still at `version` (the one read); False when it could not be written.

    Scheduler runs hold the placement lease (handler.handler), so no two write this item at once; but `run`
    may be called without it (by hand, in tests), and a run's lease lapses at its Lambda deadline, which a
    host's clock only bounds. So the put is conditional on the version read: one that loses reads the item
    again and merges (merge: no run's sighting is lost) and tries once more."""
    for _ in range(2):
        try:
            dynamodb.put_item(
                TableName=table,
                Item={"job_id": {"S": KEY}, "version": {"N": str(version + 1)}, "at": number(now),
                      "fleets": encode(memory)},
                ConditionExpression="attribute_not_exists(#version) OR #version = :version",
                ExpressionAttributeNames={"#version": "version"},
                ExpressionAttributeValues={":version": {"N": str(version)}})
            return True
        except dynamodb.exceptions.ConditionalCheckFailedException:
            try:
                theirs = read(dynamodb, table)
            except (BotoCoreError, ClientError) as error:
                log_decision("fleet-health-write-failed", error=str(error)[:500],
                             reason="another run wrote it, and it could not be read again")
                return False
            merged = merge(theirs.memory, memory)
            log_decision("fleet-health-merged", version=theirs.version,
                         reason="another run wrote the item since this run read it: both runs' sightings kept")
            if merged == theirs.memory:
                return True
            memory, version = merged, theirs.version
        except (BotoCoreError, ClientError) as error:
            log_decision("fleet-health-write-failed", error=str(error)[:500],
                         then="the next run starts from the sightings last kept")
            return False
    log_decision("fleet-health-write-failed", reason="the item changed again while this run merged: the next run "
                                                     "starts from the sightings last kept")
    return False
