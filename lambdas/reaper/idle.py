"""The idle contract (DESIGN.md "Idle"), as a pure function: plain data in, one decision per instance out.

An instance is idle only when, over the whole window, no ECS task runs on it and CPU and GPU both
stay below their thresholds, with a datapoint for every period of the window (missing or partial data
means busy), it is older than the window, and `mlfleet:keep-alive` does not protect it. The reaper
marks first (`mlfleet:idle-since`) and acts only after the grace period; a busy instance is unmarked.

How it acts on a standalone machine (no group) is decided here too (standalone_action): stopped when EC2
can stop it, terminated when it cannot (a Spot Instance of a one-time Spot request). The one machine it can
neither stop nor terminate (on-demand, with an instance-store root) is left running and reported once a
day until someone acts (stop_refused, REFUSAL_REMINDER).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone

from ..common import tags as tag_keys
from ..common.keep_alive import keep_alive_protects, parse_time

PERIOD_SECONDS = 300  # the metrics' period; the window holds window_period_count(window_minutes) points

# Decisions. Only REAP_FLEET, STOP_STANDALONE and TERMINATE_STANDALONE touch a machine; MARK and UNMARK only
# tag it; LEFT_RUNNING is an idle standalone machine EC2 refused to stop, which the reaper may not terminate.
BUSY = "busy"
UNMARK = "unmark"
MARK = "mark"
WAIT_GRACE = "wait-grace"
SPARE = "spare"
REAP_FLEET = "reap-fleet"
STOP_STANDALONE = "stop-standalone"
TERMINATE_STANDALONE = "terminate-standalone"
LEFT_RUNNING = "left-running"
DESTRUCTIVE = (REAP_FLEET, STOP_STANDALONE, TERMINATE_STANDALONE)

# A Spot request's Type (botocore's ec2 model, SpotInstanceType: one-time | persistent). EC2 stops a Spot
# Instance only when its request is persistent (or it belongs to an EC2 Fleet / Spot Fleet of type
# maintain); StopInstances refuses one of a one-time request with UnsupportedOperation (EC2 User Guide,
# "Stop a Spot Instance", https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/stop-spot-instances.html).
ONE_TIME, PERSISTENT = "one-time", "persistent"
# Why terminating one is no loss beyond what the Spot market could do any time: a one-time request's
# instance is terminated at an interruption (stop and hibernate need a persistent request, same page).
NO_WORSE = "its data would not survive a Spot interruption either (EC2 terminates it then)"
# An idle standalone machine EC2 refused to stop, and the reaper may not terminate (on-demand: its policy
# allows TerminateInstances on Spot Instances only), is left running: EC2 refuses the same stop every run (an
# instance-store root cannot be stopped: EC2 User Guide, "Stop and start Amazon EC2 instances"), so trying and
# reporting it every run (every few minutes) is an alert nobody reads. It is tried and reported again this
# long after the refusal (tag_keys.STOP_REFUSED_AT): a daily reminder of a machine that costs money idle.
REFUSAL_REMINDER = timedelta(hours=24)


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
    # A Spot Instance's request (DescribeSpotInstanceRequests): its id and Type; None when not read or not
    # found. Read for standalone Spot Instances only, the ones the reaper stops or terminates itself.
    spot_request_id: str | None = None
    spot_request_type: str | None = None


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
    reason = f"{idle_reason}; idle since {marked_at.isoformat()}, grace over"
    if instance.asg_name:
        return decision(REAP_FLEET, reason)
    refused_raw = instance.tags.get(tag_keys.STOP_REFUSED_AT)
    refused_at = parse_time(refused_raw) if refused_raw is not None else None
    if refused_at is not None and now - refused_at < REFUSAL_REMINDER:
        return decision(LEFT_RUNNING, f"{reason}; {left_running(refused_at)}")
    action, how = standalone_action(instance)
    return decision(action, f"{reason}; {how}")


def _spot_request(instance: Instance) -> str:
    return f"Spot request {instance.spot_request_id}" if instance.spot_request_id else "its Spot request"


def standalone_action(instance: Instance) -> tuple[str, str]:
    """How an idle standalone machine is acted on, and why: stopped (its disks kept) when EC2 can stop it;
    terminated when it cannot, a Spot Instance of a one-time request, since otherwise it would run idle for
    ever (NO_WORSE). A Spot Instance whose request could not
    be read is stopped, and terminated if EC2 refuses the stop (stop_refused)."""
    if instance.lifecycle != "spot":
        return STOP_STANDALONE, "stopped (on-demand: its disks are kept)"
    if instance.spot_request_type == PERSISTENT:
        return STOP_STANDALONE, f"stopped ({_spot_request(instance)} is persistent: its disks are kept)"
    if instance.spot_request_type == ONE_TIME:
        return TERMINATE_STANDALONE, (f"terminated: a Spot Instance of a one-time request ({_spot_request(instance)}) "
                                      f"cannot be stopped, and {NO_WORSE}")
    return STOP_STANDALONE, (f"stopped ({_spot_request(instance)} could not be read: terminated instead if EC2 "
                             f"refuses the stop)")


def left_running(refused_at: datetime) -> str:
    return (f"EC2 refused to stop it at {refused_at.isoformat()} and the reaper never terminates an on-demand "
            f"machine: left running, and reported again from {(refused_at + REFUSAL_REMINDER).isoformat()}; "
            "terminate it, or keep it with mlfleet:keep-alive")


def stop_refused(decision: Decision, instance: Instance, error: str, now: datetime) -> Decision | None:
    """A stop EC2 refused as unsupported. A Spot Instance's is the one-time request's case (its request
    could not be read up front): it is terminated instead, in the same run (the same idle window and grace,
    the same action under the cap). Any other machine (on-demand, an instance-store root) is left running:
    the reaper never terminates an on-demand machine, and reports it again after REFUSAL_REMINDER. None for
    a decision that was not a stop (nothing to say instead)."""
    if decision.action != STOP_STANDALONE:
        return None
    grace_over = decision.reason.rsplit("; ", 1)[0]  # decide's reason less standalone_action's part
    if instance.lifecycle != "spot":
        return replace(decision, action=LEFT_RUNNING, reason=f"{grace_over}; {error}; {left_running(now)}")
    return replace(decision, action=TERMINATE_STANDALONE,
                   reason=f"{grace_over}; terminated: EC2 refused to stop this Spot Instance ({error}), as it does "
                          f"for one of a one-time request, and {NO_WORSE}")


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
