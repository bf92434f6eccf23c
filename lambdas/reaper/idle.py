"""The idle contract (DESIGN.md "Idle"), as a pure function: plain data in, one decision per instance out.

An instance is idle only when, over the whole window, no ECS task runs on it and CPU and GPU both
stay below their thresholds, with a datapoint for every period of the window (missing or partial data
means busy), it is older than the window, and `mlfleet:keep-alive` does not protect it. The reaper
marks first (`mlfleet:idle-since`) and acts only after the grace period; a busy instance is unmarked.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from ..common import tags as tag_keys
from ..common.keep_alive import keep_alive_protects, parse_time

PERIOD_SECONDS = 300  # the metrics' period; the window holds window_period_count(window_minutes) points

# Decisions. Only REAP_FLEET and STOP_STANDALONE touch a machine; MARK and UNMARK only tag it.
BUSY = "busy"
UNMARK = "unmark"
MARK = "mark"
WAIT_GRACE = "wait-grace"
SPARE = "spare"
REAP_FLEET = "reap-fleet"
STOP_STANDALONE = "stop-standalone"
DESTRUCTIVE = (REAP_FLEET, STOP_STANDALONE)


@dataclass(frozen=True)
class IdleSettings:
    window_minutes: int
    cpu_percent: float
    gpu_percent: float
    grace_minutes: int

    @property
    def periods(self) -> int:
        return window_period_count(self.window_minutes)


def window_period_count(window_minutes: int) -> int:
    """The whole periods that cover the window: rounded up, so a window that is not a multiple of the
    period (mlfleet:idleWindowMinutes takes any minute count) is never shortened. The fleet idle alarm
    (components/idle/alarms.py) evaluates the same count."""
    return max(1, -(-window_minutes * 60 // PERIOD_SECONDS))


@dataclass(frozen=True)
class Instance:
    instance_id: str
    launch_time: datetime
    lifecycle: str  # "spot" | "on-demand"
    asg_name: str | None  # None: a standalone machine carrying the environment tag
    tags: Mapping[str, str]
    # ECS tasks running on it; None when unknown (a fleet instance whose agent is not registered).
    running_tasks: int | None
    # Maximum per period, keyed by the period's start; None when there is no series at all.
    cpu: Mapping[datetime, float] | None
    gpu: Mapping[datetime, float] | None


@dataclass(frozen=True)
class Decision:
    instance_id: str
    action: str
    reason: str
    asg_name: str | None = None
    idle_since: datetime | None = None  # for MARK: the time to write; for waits/acts: the mark read

    @property
    def destructive(self) -> bool:
        return self.action in DESTRUCTIVE


def window_periods(now: datetime, settings: IdleSettings) -> list[datetime]:
    """The period starts the window must hold: the last `periods` complete periods before `now`."""
    epoch = int(now.timestamp()) // PERIOD_SECONDS * PERIOD_SECONDS
    last_complete = datetime.fromtimestamp(epoch - PERIOD_SECONDS, tz=timezone.utc)
    return [last_complete - timedelta(seconds=PERIOD_SECONDS * i) for i in range(settings.periods)][::-1]


def _busy_reason(instance: Instance, now: datetime, settings: IdleSettings) -> str | None:
    """Why the instance is not idle, or None when it is idle over the whole window."""
    if instance.running_tasks is None:
        return "ECS task count unknown (not registered with the cluster): busy"
    if instance.running_tasks > 0:
        return f"{instance.running_tasks} ECS task(s) running"
    if now - instance.launch_time < timedelta(minutes=settings.window_minutes):
        return f"younger than the {settings.window_minutes}-minute window"
    for name, series, threshold in (("CPU", instance.cpu, settings.cpu_percent),
                                    ("GPU", instance.gpu, settings.gpu_percent)):
        if series is None:
            return f"no {name} metric: missing data means busy"
        expected = window_periods(now, settings)
        missing = [p for p in expected if p not in series]
        if missing:
            return f"{name} data missing for {len(missing)} of {len(expected)} periods: busy"
        peak = max(series[p] for p in expected)
        if peak >= threshold:
            return f"{name} peaked at {peak:.1f}% >= {threshold}% in the window"
    return None


def decide(instance: Instance, now: datetime, settings: IdleSettings) -> Decision:
    """The decision for one instance (before the per-run action cap)."""
    marked_raw = instance.tags.get(tag_keys.IDLE_SINCE)
    marked_at = parse_time(marked_raw) if marked_raw is not None else None

    def decision(action: str, reason: str, idle_since: datetime | None = marked_at) -> Decision:
        return Decision(instance.instance_id, action, reason, instance.asg_name, idle_since)

    protected, keep_reason = keep_alive_protects(instance.tags.get(tag_keys.KEEP_ALIVE), now)
    busy = _busy_reason(instance, now, settings)
    if protected or busy:
        reason = keep_reason if protected else busy
        if marked_raw is not None:
            return decision(UNMARK, f"{reason}; idle mark removed")
        return decision(SPARE if protected else BUSY, reason)

    idle_reason = (f"no tasks; CPU < {settings.cpu_percent}% and GPU < {settings.gpu_percent}% "
                   f"for {settings.window_minutes} minutes" + (f" ({keep_reason})" if keep_reason else ""))
    if marked_at is None:
        note = "" if marked_raw is None else f" (unreadable idle-since {marked_raw!r} replaced)"
        return decision(MARK, idle_reason + note, idle_since=now)
    waited = now - marked_at
    if waited < timedelta(minutes=settings.grace_minutes):
        left = timedelta(minutes=settings.grace_minutes) - waited
        return decision(WAIT_GRACE, f"{idle_reason}; marked {marked_at.isoformat()}, "
                                    f"{int(left.total_seconds() // 60)} min of grace left")
    action = REAP_FLEET if instance.asg_name else STOP_STANDALONE
    return decision(action, f"{idle_reason}; idle since {marked_at.isoformat()}, grace over")


def decide_all(instances: Iterable[Instance], now: datetime, settings: IdleSettings,
               max_actions: int) -> list[Decision]:
    """Every instance's decision, with destructive ones capped at `max_actions` per run.

    The longest-idle instances go first; the rest are spared this run with the reason, and the next
    run picks them up (nothing is lost, nothing is rushed).
    """
    decisions = [decide(i, now, settings) for i in sorted(instances, key=lambda i: i.instance_id)]
    destructive = sorted((d for d in decisions if d.destructive), key=lambda d: (d.idle_since, d.instance_id))
    over_cap = {d.instance_id for d in destructive[max_actions:]}
    return [
        Decision(d.instance_id, SPARE, f"action cap of {max_actions} per run reached; {d.reason}", d.asg_name,
                 d.idle_since) if d.instance_id in over_cap else d
        for d in decisions
    ]


def summarize(decisions: Sequence[Decision]) -> dict[str, list[str]]:
    """Instance ids per action, for the run's notification and return value."""
    out: dict[str, list[str]] = {}
    for d in decisions:
        out.setdefault(d.action, []).append(d.instance_id)
    return out
