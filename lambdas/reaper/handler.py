"""Lambda entry point: one idempotent reaper run over the region's fleets and standalone machines.

Triggers: the EventBridge schedule, or a fleet's idle alarm invoking the function directly (its event
has source "aws.cloudwatch" and "alarmData"); any trigger means "look at everything now".
Environment: ENVIRONMENT, CLUSTER_NAME, FLEET_ASG_NAMES, IDLE_WINDOW_MINUTES, IDLE_CPU_PERCENT,
IDLE_GPU_PERCENT, IDLE_GRACE_MINUTES, DRY_RUN, MAX_ACTIONS_PER_RUN, ALERT_TOPIC_ARN.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timezone

from lambdas.common.aws import client
from lambdas.common.logs import log_decision
from lambdas.common.settings import from_env
from lambdas.reaper import actions, inventory
from lambdas.reaper.idle import (
    MARK,
    REAP_FLEET,
    STOP_STANDALONE,
    UNMARK,
    Decision,
    IdleSettings,
    decide_all,
    summarize,
)


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
    dry_run: bool = False
    max_actions_per_run: int = 20

    @property
    def idle(self) -> IdleSettings:
        return IdleSettings(self.idle_window_minutes, self.idle_cpu_percent, self.idle_gpu_percent,
                            self.idle_grace_minutes)


def trigger_of(event) -> str:
    event = event or {}
    if event.get("source") == "aws.cloudwatch" and "alarmData" in event:
        return f"alarm {event.get('alarmArn', '').rsplit(':', 1)[-1]}"
    if event.get("detail-type") == "Scheduled Event":
        return "schedule"
    return "manual"


def run(settings: Settings, now: datetime, trigger: str = "manual") -> dict:
    ec2, ecs = client("ec2"), client("ecs")
    raws = inventory.environment_instances(ec2, settings.environment, settings.fleet_asg_names)
    registered = inventory.container_instances(ecs, settings.cluster_name)
    series = inventory.utilisation(client("cloudwatch"), raws, now, settings.idle)
    instances = inventory.to_instances(raws, registered, series)
    decisions = decide_all(instances, now, settings.idle, settings.max_actions_per_run)
    for d in decisions:
        log_decision(d.action, instance_id=d.instance_id, asg=d.asg_name, reason=d.reason,
                     dry_run=settings.dry_run, trigger=trigger)

    by_action = summarize(decisions)
    if not settings.dry_run:
        _act(settings, decisions, registered, now)
    _publish_counts(settings, instances, decisions, now)
    changed = [d for d in decisions if d.action in (MARK, UNMARK, REAP_FLEET, STOP_STANDALONE)]
    if changed:
        actions.notify(client("sns"), settings.alert_topic_arn, _subject(settings, by_action), _report(settings, decisions))
    return {"trigger": trigger, "dry_run": settings.dry_run, "instances": len(instances),
            "decisions": {action: sorted(ids) for action, ids in by_action.items()}}


def _act(settings: Settings, decisions: list[Decision], registered, now: datetime) -> None:
    ec2 = client("ec2")
    of = lambda action: [d.instance_id for d in decisions if d.action == action]  # noqa: E731
    actions.mark(ec2, of(MARK), now)
    actions.unmark(ec2, of(UNMARK))
    reap = of(REAP_FLEET)
    if reap:
        drain = [registered[i].arn for i in reap if i in registered]
        actions.drain(client("ecs"), settings.cluster_name, drain)
        autoscaling = client("autoscaling")
        for instance_id in reap:
            terminated = actions.terminate_in_group(autoscaling, instance_id)
            log_decision("terminated" if terminated else "already-gone", instance_id=instance_id)
    actions.stop(ec2, of(STOP_STANDALONE))


def _publish_counts(settings: Settings, instances, decisions: list[Decision], now: datetime) -> None:
    counts: Counter = Counter()
    for asg in settings.fleet_asg_names:
        for lifecycle in ("spot", "on-demand"):
            counts[("FleetInstances", asg, lifecycle)] = 0
        counts[("IdleMarkedInstances", asg)] = 0
        counts[("ReapedInstances", asg)] = 0
    for i in instances:
        if i.asg_name:
            counts[("FleetInstances", i.asg_name, i.lifecycle)] += 1
    for d in decisions:
        if d.asg_name and d.idle_since is not None and d.action not in (UNMARK,):
            counts[("IdleMarkedInstances", d.asg_name)] += 1
        if d.asg_name and d.action == REAP_FLEET and not settings.dry_run:
            counts[("ReapedInstances", d.asg_name)] += 1
    actions.publish_counts(client("cloudwatch"), settings.environment, counts, now)


def _subject(settings: Settings, by_action: dict[str, list[str]]) -> str:
    reaped = len(by_action.get(REAP_FLEET, [])) + len(by_action.get(STOP_STANDALONE, []))
    prefix = "[dry run] " if settings.dry_run else ""
    return (f"{prefix}mlfleet {settings.environment} reaper: {len(by_action.get(MARK, []))} marked idle, "
            f"{reaped} reaped")


def _report(settings: Settings, decisions: list[Decision]) -> str:
    titles = {
        MARK: "Marked idle (acted on after the grace period unless busy again)",
        REAP_FLEET: "Drained and terminated (group shrunk)" + (" [DRY RUN: not done]" if settings.dry_run else ""),
        STOP_STANDALONE: "Stopped (standalone)" + (" [DRY RUN: not done]" if settings.dry_run else ""),
        UNMARK: "Busy again: idle mark removed",
        "wait-grace": "Idle, waiting out the grace period",
        "spare": "Spared",
    }
    lines = [f"mlfleet {settings.environment} reaper run ({settings.cluster_name})", ""]
    for action, title in titles.items():
        chosen = [d for d in decisions if d.action == action]
        if chosen:
            lines.append(f"{title}:")
            lines += [f"  {d.instance_id} ({d.asg_name or 'standalone'}): {d.reason}" for d in chosen]
            lines.append("")
    lines.append("Keep a machine: aws ec2 create-tags --resources <id> --tags Key=mlfleet:keep-alive,Value=true")
    return "\n".join(lines)


def handler(event, context=None, settings: Settings | None = None, now: datetime | None = None):
    settings = settings or from_env(Settings)
    return run(settings, now or datetime.now(timezone.utc), trigger_of(event))
