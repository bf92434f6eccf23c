"""Lambda entry point: one idempotent reaper run over the region's fleets and standalone machines.

Triggers: the EventBridge schedule, or a fleet's idle alarm invoking the function directly (its event
has source "aws.cloudwatch" and "alarmData"); any trigger means "look at everything now".

The reaper is the safety net for every machine the scheduler does not release itself (docs/removal.md):
it proposes fleet instances by its idle contract (idle.py) and removes them through the one removal
protocol (lambdas/removal: group minimum, disruption budget, drain, re-check under the placement lease,
terminate with decrement), which also finishes the removals a previous run left half-done. A run that
cannot take the placement lease leaves its removals to its next run. Standalone machines are stopped, or
terminated when EC2 cannot stop them (a Spot Instance of a one-time request: idle.standalone_action); an
on-demand one EC2 cannot stop is left running and reported once a day (idle.REFUSAL_REMINDER).
Every failure is per machine: the others, the standalone stops and the summary still happen.

Environment: ENVIRONMENT, CLUSTER_NAME, FLEET_ASG_NAMES, IDLE_WINDOW_MINUTES, IDLE_CPU_PERCENT,
IDLE_GPU_PERCENT, IDLE_GRACE_MINUTES, ALERT_TOPIC_ARN, JOBS_TABLE and HOME_REGION (the job ledger, which
holds the placement lease), DRY_RUN, MAX_ACTIONS_PER_RUN, DISRUPTION_BUDGET_PERCENT.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

from botocore.exceptions import BotoCoreError, ClientError

from ..common import alerts, lease
from ..common import tags as tag_keys
from ..common.aws import client
from ..common.logs import log_decision
from ..common.settings import SettingsError, from_env
from . import actions, inventory
from .idle import (
    BUSY, LEFT_RUNNING, MARK, REAP_FLEET, REFUSAL_REMINDER, STOP_STANDALONE, TERMINATE_STANDALONE, UNMARK, Decision,
    IdleSettings, decide_all, stop_refused, summarize,
)
from ..removal import decide as removal
from ..removal import execute
from ..removal.execute import Outcome

# The removal protocol's calls and the placement lease (a function's policy is collected from its own
# folder's PERMISSIONS, components/functions).
PERMISSIONS = (*execute.PERMISSIONS, *lease.PERMISSIONS)

# The lease is held for the removals only, not the whole run: a scheduler run waits at most this long
# (plus the lease's clock margin) if a reaper run dies holding it.
REMOVAL_LEASE_SECONDS = 120
# As the safety net, the reaper finishes a removal another method started and left this long ago.
ADOPT_AFTER = timedelta(minutes=30)


@dataclass(frozen=True)
class Settings:
    environment: str
    cluster_name: str
    fleet_asg_names: tuple[str, ...]
    idle_window_minutes: int
    idle_cpu_percent: int
    idle_gpu_percent: int
    idle_grace_minutes: int
    alert_topic_arn: str
    jobs_table: str
    home_region: str
    dry_run: bool = False
    max_actions_per_run: int = 20
    disruption_budget_percent: int = removal.DEFAULT_BUDGET_PERCENT

    def __post_init__(self) -> None:
        if not 0 < self.disruption_budget_percent <= 100:
            raise SettingsError(f"DISRUPTION_BUDGET_PERCENT={self.disruption_budget_percent!r}: must be 1 to 100")

    @property
    def idle(self) -> IdleSettings:
        return IdleSettings(self.idle_window_minutes, self.idle_cpu_percent, self.idle_gpu_percent,
                            self.idle_grace_minutes)


def trigger_of(event) -> str:
    """What started the run, for its log and report; any event means "look at everything now", so an
    event of another shape (anyone allowed to invoke the function chooses it) is a manual run."""
    if not isinstance(event, Mapping):
        return "manual"
    if event.get("source") == "aws.cloudwatch" and "alarmData" in event:
        alarm = event.get("alarmArn")
        return f"alarm {alarm.rsplit(':', 1)[-1][:200] if isinstance(alarm, str) else '?'}"
    if event.get("detail-type") == "Scheduled Event":
        return "schedule"
    return "manual"


@dataclass
class Run:
    """What one run did, for its counts and its summary."""
    decisions: list[Decision]
    removal: Outcome
    failed: dict[str, str]  # instance id -> the mark, unmark, stop or terminate that failed, and why
    refused: list[str] = field(default_factory=list)  # standalone machines whose stop EC2 refused this run, left running


def run(settings: Settings, now: datetime, trigger: str = "manual", request_id: str = "",
        remaining_ms: Callable[[], int] = lambda: 600_000) -> dict:
    region = client("ec2").meta.region_name  # the function's own: the fleets it reaps are there
    ec2, ecs = client("ec2", region), client("ecs", region)
    raws = inventory.environment_instances(ec2, settings.environment, settings.fleet_asg_names)
    registered = inventory.container_instances(ecs, settings.cluster_name)
    series = inventory.utilisation(client("cloudwatch", region), raws, now, settings.idle)
    instances = inventory.to_instances(raws, registered, series, inventory.spot_request_types(ec2, raws))
    decisions = decide_all(instances, now, settings.idle, settings.max_actions_per_run)
    for d in decisions:
        log_decision(d.action, instance_id=d.instance_id, asg=d.asg_name, reason=d.reason,
                     dry_run=settings.dry_run, trigger=trigger)

    done = Run(decisions, Outcome(), {})
    if not settings.dry_run:
        of = lambda action: [d.instance_id for d in decisions if d.action == action]  # noqa: E731
        done.failed.update({i: f"mark: {e}" for i, e in actions.mark(ec2, of(MARK), now).items()})
        done.failed.update({i: f"unmark: {e}" for i, e in actions.unmark(ec2, of(UNMARK)).items()})
    in_flight = any(tag_keys.REMOVING in {t["Key"] for t in raw.get("Tags", [])} for raw in raws)
    candidates = [removal.Candidate(d.instance_id, registered[d.instance_id].arn, region, d.asg_name, removal.IDLE,
                                    d.reason)
                  for d in decisions if d.action == REAP_FLEET and d.instance_id in registered]
    if candidates or in_flight:
        try:
            # A removal in flight is re-checked for tasks, jobs and keep-alives, not for utilisation: a machine the
            # idle contract holds busy now (busy, or its mark removed) is kept, never finished.
            busy = {d.instance_id: d.reason for d in decisions if d.action in (BUSY, UNMARK)}
            done.removal = _remove(settings, region, candidates, {i: ci.arn for i, ci in registered.items()}, now,
                                   request_id or f"local-{uuid.uuid4()}", remaining_ms, busy)
        except Exception as error:  # noqa: BLE001 (the safety net's other work must still happen)
            # The executor handles AWS errors machine by machine; anything else it could not have
            # foreseen is reported, and the standalone stops and the summary still happen.
            log_decision("removal-error", step="remove", reason=f"{type(error).__name__}: {error}")
            done.removal.left.update({c.instance_id: f"removal failed: {type(error).__name__}: {error}"
                                      for c in candidates})
    if not settings.dry_run:
        _act_on_standalone(ec2, settings, done, {i.instance_id: i for i in instances}, trigger, now)
    for instance_id, reason in sorted(done.failed.items()):
        log_decision("reaper-error", instance_id=instance_id, reason=reason)

    by_action = summarize(done.decisions)
    _best_effort("publish-counts", lambda: _publish_counts(settings, region, instances, done, now))
    changed = [d for d in done.decisions if d.action in (MARK, UNMARK, REAP_FLEET, STOP_STANDALONE, TERMINATE_STANDALONE)]
    if changed or done.removal.terminated or done.removal.reactivated or done.failed or done.refused:
        _best_effort("notify", lambda: alerts.publish_alert(client("sns", region), settings.alert_topic_arn,
                                                            _subject(settings, by_action, done), _report(settings, done)))
    return {"trigger": trigger, "dry_run": settings.dry_run, "instances": len(instances),
            "decisions": {action: sorted(ids) for action, ids in by_action.items()},
            "terminated": sorted(done.removal.terminated), "kept": dict(sorted(done.removal.reactivated.items())),
            "not_removed": dict(sorted({**done.removal.dropped, **done.removal.left}.items())),
            "failed": dict(sorted(done.failed.items()))}


def _remove(settings: Settings, region: str, candidates: list[removal.Candidate], registered: dict[str, str],
            now: datetime, request_id: str, remaining_ms: Callable[[], int],
            busy: Mapping[str, str] | None = None) -> Outcome:
    """The removal protocol, under the placement lease (none needed for a dry run, which changes nothing)."""
    scope = execute.Scope(region, settings.cluster_name, settings.fleet_asg_names, removal.IDLE,
                          settings.disruption_budget_percent, adopt_after=ADOPT_AFTER, dry_run=settings.dry_run)
    ledger = execute.LedgerSource(settings.home_region, settings.jobs_table)
    if settings.dry_run:
        return execute.remove(candidates, scope, registered=registered, ledger=ledger, lease_expires_at=0.0, now=now,
                              busy=busy)
    dynamodb = client("dynamodb", settings.home_region)
    seconds = min(REMOVAL_LEASE_SECONDS, remaining_ms() / 1000 - execute.LEASE_MARGIN_SECONDS)
    try:
        taken = lease.acquire(dynamodb, settings.jobs_table, f"reaper:{region}:{request_id}", now=time.time(),
                              run_seconds=max(1.0, seconds))
    except (ClientError, BotoCoreError) as error:
        taken, why = None, f"placement lease unreadable ({type(error).__name__}: {error})"
    else:
        holder = taken.holder.owner if taken.holder else "another actor"
        why = f"placement lease held by {holder}"
    if taken is None or not taken.granted:
        outcome = Outcome()
        for c in candidates:
            outcome.left[c.instance_id] = f"{why}: left for the next run"
            log_decision("removal-deferred", instance_id=c.instance_id, asg=c.asg_name, reason=outcome.left[c.instance_id])
        if not candidates:
            log_decision("removal-deferred", reason=f"{why}: removals in flight left for the next run")
        return outcome
    try:
        return execute.remove(candidates, scope, registered=registered, ledger=ledger,
                              lease_expires_at=taken.lease.expires_at - lease.CLOCK_SKEW_SECONDS, now=now, busy=busy)
    finally:
        lease.release(dynamodb, settings.jobs_table, taken.lease)


def _act_on_standalone(ec2, settings: Settings, done: Run, instances: Mapping, trigger: str, now: datetime) -> None:
    """Stop the standalone machines decided stopped, then terminate those decided terminated, with those
    whose stop EC2 refused as unsupported (idle.stop_refused: a Spot Instance whose request was unreadable).
    Any other machine whose stop EC2 refused is left running, the refusal noted on it so that it is reported
    once a day, not every run; a note that fails leaves it failed, tried and reported again next run."""
    failed, refused = actions.stop(ec2, [d.instance_id for d in done.decisions if d.action == STOP_STANDALONE])
    done.failed.update({i: f"stop: {e}" for i, e in failed.items()})
    for n, d in enumerate(done.decisions):
        if d.instance_id in refused:
            instead = stop_refused(d, instances[d.instance_id], refused[d.instance_id], now)
            if instead is None:
                done.failed[d.instance_id] = f"stop: {refused[d.instance_id]}"
                continue
            done.decisions[n] = instead
            if instead.action == LEFT_RUNNING:
                done.refused.append(instead.instance_id)
            log_decision(instead.action, instance_id=instead.instance_id, asg=None, reason=instead.reason,
                         dry_run=settings.dry_run, trigger=trigger)
    for instance_id, error in actions.note_stop_refused(ec2, done.refused, now).items():
        done.failed[instance_id] = (f"stop: {refused[instance_id]}; the refusal could not be noted on it ({error}): "
                                    "tried and reported again next run")
    terminated = actions.terminate(ec2, [d.instance_id for d in done.decisions if d.action == TERMINATE_STANDALONE])
    done.failed.update({i: f"terminate: {e}" for i, e in terminated.items()})


def _best_effort(step: str, action: Callable[[], object]) -> None:
    """Counts and the summary report on the run; their failure is logged, never raised over its work."""
    try:
        action()
    except (ClientError, BotoCoreError) as error:
        log_decision("reaper-error", step=step, reason=f"{type(error).__name__}: {error}")


def _publish_counts(settings: Settings, region: str, instances, done: Run, now: datetime) -> None:
    counts: Counter = Counter()
    for asg in settings.fleet_asg_names:
        for lifecycle in ("spot", "on-demand"):
            counts[("FleetInstances", asg, lifecycle)] = 0
        counts[("IdleMarkedInstances", asg)] = 0
        counts[("ReapedInstances", asg)] = 0
    for i in instances:
        if i.asg_name:
            counts[("FleetInstances", i.asg_name, i.lifecycle)] += 1
    asg_of = {i.instance_id: i.asg_name for i in instances}
    for d in done.decisions:
        if d.asg_name and d.idle_since is not None and d.action not in (UNMARK,):
            counts[("IdleMarkedInstances", d.asg_name)] += 1
    for instance_id in done.removal.terminated:
        if asg_of.get(instance_id):
            counts[("ReapedInstances", asg_of[instance_id])] += 1
    actions.publish_counts(client("cloudwatch", region), settings.environment, counts, now)


def _subject(settings: Settings, by_action: dict[str, list[str]], done: Run) -> str:
    standalone = by_action.get(STOP_STANDALONE, []) + by_action.get(TERMINATE_STANDALONE, [])
    if settings.dry_run:
        reaped = len(by_action.get(REAP_FLEET, [])) + len(standalone)
    else:
        reaped = len(done.removal.terminated) + len([i for i in standalone if i not in done.failed])
    prefix = "[dry run] " if settings.dry_run else ""
    return (f"{prefix}mlfleet {settings.environment} reaper: {len(by_action.get(MARK, []))} marked idle, "
            f"{reaped} reaped")


def _report(settings: Settings, done: Run) -> str:
    dry = " [DRY RUN: not done]" if settings.dry_run else ""
    sections: list[tuple[str, list[tuple[str, str]]]] = []
    by = {d.instance_id: d for d in done.decisions}

    def chosen(action: str) -> list[tuple[str, str]]:
        return [(d.instance_id, d.reason) for d in done.decisions if d.action == action]

    sections.append(("Marked idle (acted on after the grace period unless busy again)", chosen(MARK)))
    if settings.dry_run:
        sections.append(("Would be drained and terminated (group shrunk)" + dry, chosen(REAP_FLEET)))
    else:
        sections.append(("Drained and terminated (group shrunk)",
                         [(i, by[i].reason if i in by else "a removal in flight, finished") for i in done.removal.terminated]))
        sections.append(("Kept after the drain (gained work, protected, or refused): re-activated",
                         sorted(done.removal.reactivated.items())))
        sections.append(("Not removed this run", sorted({**done.removal.dropped, **done.removal.left}.items())))
    sections.append(("Stopped (standalone)" + dry,
                     [(i, r) for i, r in chosen(STOP_STANDALONE) if i not in done.failed]))
    sections.append(("Terminated (standalone Spot Instance EC2 cannot stop: one-time Spot request)" + dry,
                     [(i, r) for i, r in chosen(TERMINATE_STANDALONE) if i not in done.failed]))
    sections.append((f"Left running idle: EC2 refused to stop it, and the reaper never terminates an on-demand machine "
                     f"(reported again {REFUSAL_REMINDER.total_seconds() / 3600:.0f} hours after the refusal)",
                     [(i, r) for i, r in chosen(LEFT_RUNNING) if i not in done.failed]))
    sections.append(("Busy again: idle mark removed", chosen(UNMARK)))
    sections.append(("Idle, waiting out the grace period", chosen("wait-grace")))
    sections.append(("Spared", chosen("spare")))
    sections.append(("Failed (retried next run)", sorted(done.failed.items())))
    lines = [f"mlfleet {settings.environment} reaper run ({settings.cluster_name})", ""]
    for title, items in sections:
        if items:
            lines.append(f"{title}:")
            lines += [f"  {i} ({(by[i].asg_name or 'standalone') if i in by else 'fleet'}): {reason}" for i, reason in items]
            lines.append("")
    lines.append("Keep a machine: aws ec2 create-tags --resources <id> --tags Key=mlfleet:keep-alive,Value=true")
    return "\n".join(lines)


def handler(event, context=None, settings: Settings | None = None, now: datetime | None = None):
    settings = settings or from_env(Settings)
    remaining = context.get_remaining_time_in_millis if context is not None else (lambda: 600_000)
    return run(settings, now or datetime.now(timezone.utc), trigger_of(event),
               getattr(context, "aws_request_id", "") or "", remaining)
