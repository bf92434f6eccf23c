"""The fleet idle alarm and the regional dashboard, under mocks."""

from __future__ import annotations

import json

from components.dashboard import dashboard_body
from components.idle import FleetIdleAlarm, FleetIdleAlarmArgs, idle_expression
from pulumi_harness import COMPONENT_TAGS as TAGS, render_in_region as _in_region

ALARM = "aws:cloudwatch/metricAlarm:MetricAlarm"


def _alarm(window_minutes=90):
    def build(opts):
        alarm = FleetIdleAlarm("idle", FleetIdleAlarmArgs(
            environment="test", fleet="gpu1", asg_name="mlfleet-test-gpu1", window_minutes=window_minutes,
            cpu_percent=10, gpu_percent=5, alert_topic_arn="arn:aws:sns:us-west-2:123456789012:alerts",
            reaper_arn="arn:aws:lambda:us-west-2:123456789012:function:mlfleet-test-reaper", tags=TAGS), opts=opts)
        return {"name": alarm.alarm_name}

    (alarm,) = _in_region(build).of_type(ALARM)
    return alarm.inputs


def test_idle_alarm_needs_cpu_and_gpu_low_over_the_whole_window():
    alarm = _alarm(window_minutes=90)
    assert alarm["name"] == "mlfleet-test-gpu1-idle"
    queries = {q["id"]: q for q in alarm["metricQueries"]}
    assert queries["idle"]["expression"] == idle_expression(10, 5) == "IF(cpu < 10 AND gpu < 5, 1, 0)"
    assert queries["idle"]["returnData"] is True
    cpu, gpu = queries["cpu"]["metric"], queries["gpu"]["metric"]
    assert (cpu["namespace"], cpu["metricName"]) == ("AWS/EC2", "CPUUtilization")
    assert (gpu["namespace"], gpu["metricName"]) == ("CWAgent", "nvidia_smi_utilization_gpu")
    for metric in (cpu, gpu):
        # The maximum over the fleet: one busy instance keeps the fleet from looking idle.
        assert metric["stat"] == "Maximum" and metric["dimensions"] == {"AutoScalingGroupName": "mlfleet-test-gpu1"}
    # 90 minutes of 5-minute periods, every one of them idle.
    assert alarm["evaluationPeriods"] == alarm["datapointsToAlarm"] == 18
    assert alarm["comparisonOperator"] == "GreaterThanOrEqualToThreshold" and alarm["threshold"] == 1


def test_missing_data_never_fires_the_idle_alarm():
    assert _alarm()["treatMissingData"] == "notBreaching"


def test_idle_alarm_tells_people_and_wakes_the_reaper():
    actions = _alarm()["alarmActions"]
    assert any(":sns:" in a for a in actions) and any(":lambda:" in a for a in actions)


def test_dashboard_shows_utilisation_lifecycle_reaper_and_queue():
    body = json.loads(dashboard_body(environment="dev", region="us-west-2", asg_names={"gpu1": "mlfleet-dev-gpu1"},
                                     home_region="us-east-1", queue_name="mlfleet-dev-jobs",
                                     dead_letter_queue_name="mlfleet-dev-jobs-dlq"))
    metrics = {tuple(m[:2]): m for w in body["widgets"] for m in w["properties"]["metrics"]}
    assert ("CWAgent", "nvidia_smi_utilization_gpu") in metrics and ("AWS/EC2", "CPUUtilization") in metrics
    lifecycles = {m[7] for w in body["widgets"] for m in w["properties"]["metrics"] if m[1] == "FleetInstances"}
    assert lifecycles == {"spot", "on-demand"}
    assert ("mlfleet", "IdleMarkedInstances") in metrics and ("mlfleet", "ReapedInstances") in metrics
    queue_widget = next(w for w in body["widgets"] if "Job queue" in w["properties"]["title"])
    assert queue_widget["properties"]["region"] == "us-east-1"
    assert {m[3] for m in queue_widget["properties"]["metrics"]} == {"mlfleet-dev-jobs", "mlfleet-dev-jobs-dlq"}
    # Widgets on a 24-column grid, none overlapping.
    cells = set()
    for w in body["widgets"]:
        assert w["x"] + w["width"] <= 24
        area = {(x, y) for x in range(w["x"], w["x"] + w["width"]) for y in range(w["y"], w["y"] + w["height"])}
        assert not cells & area
        cells |= area


def test_idle_alarm_and_reaper_cover_at_least_the_whole_configured_window():
    """mlfleet:idleWindowMinutes takes any minute count from 30 to 1440 (components/config/model.py), and the
    metrics come in 5-minute periods. Rounding the window down to whole periods fired the alarm (and let the
    reaper mark) after 30 idle minutes of a 34-minute window; both must look back at least the window, and
    at the same periods."""
    from components.idle.alarms import PERIOD_SECONDS
    from lambdas.reaper.idle import IdleSettings

    for window in (30, 34, 89, 90, 91, 1439, 1440):
        alarm = _alarm(window_minutes=window)
        periods = alarm["evaluationPeriods"]
        assert periods * PERIOD_SECONDS >= window * 60, window
        assert (periods - 1) * PERIOD_SECONDS < window * 60, window  # no more than the window needs
        assert periods == IdleSettings(window, 10, 5, 30).periods, window
        # PutMetricAlarm (botocore cloudwatch, Period): under one-hour periods, at most one day evaluated.
        assert periods * PERIOD_SECONDS <= 86_400, window
