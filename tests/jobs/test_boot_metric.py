"""Each scheduler run publishes, per fleet, how many of its machines came up degraded at boot: the metric the
fleet's instance refresh stops on (lambdas/scheduler/boot_health.py; the alarm in
components/compute/boot_alarm.py, tested in tests/program/test_refresh_rollback.py).

Where moto differs from AWS: it does not track GPUs at all (it ignores the agent's `platformDevices` and reports
no "GPU" in `registeredResources`). tests/ecs_agent.py adds the GPU resource for a healthy agent; a machine here
comes up degraded by registering with `gpus=0`, which adds none: in AWS, an agent that registered no GPU device
(an image without ECS_ENABLE_GPU_SUPPORT, a driver that found no device). moto launches a group's instances as
soon as its desired capacity is raised, with their real launch time, so "young" and "old" are the run's `now`
a few minutes or an hour after that.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import ecs_agent
import pytest
from conftest import ASG, CLUSTER, ENV, HOME, aws_client, build_fleet, open_admission
from test_scheduler_release_inputs import run_held

from lambdas.scheduler import boot_health


@pytest.fixture
def world(home, faults):
    build_fleet(size=0)
    open_admission()
    return home, faults


def launch(degraded: int, healthy: int) -> None:
    """Machines of the fleet's group, each registered by its agent: `degraded` with no GPU, `healthy` with its type's."""
    autoscaling, ecs = aws_client("autoscaling", HOME), aws_client("ecs", HOME)
    autoscaling.set_desired_capacity(AutoScalingGroupName=ASG, DesiredCapacity=degraded + healthy)
    (group,) = autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=[ASG])["AutoScalingGroups"]
    for n, member in enumerate(group["Instances"]):
        ecs_agent.register(ecs, CLUSTER, member["InstanceId"], HOME, gpus=0 if n < degraded else None)


def published(faults) -> list[dict]:
    return faults.carried_out("cloudwatch", "PutMetricData")


def fleet_datum(call: dict) -> dict:
    (datum,) = call["MetricData"]
    return datum


def test_a_run_publishes_the_fleet_s_machines_degraded_at_boot_once_with_the_alarm_s_dimensions(world):
    home, faults = world
    launch(degraded=2, healthy=1)

    summary = run_held(home, datetime.now(timezone.utc) + timedelta(minutes=5))

    assert summary["errors"] == []
    (call,) = published(faults)  # once a run, every fleet of the region in it
    assert call["Namespace"] == boot_health.NAMESPACE
    datum = fleet_datum(call)
    assert datum["MetricName"] == boot_health.METRIC and datum["Value"] == 2 and datum["Unit"] == "Count"
    assert {d["Name"]: d["Value"] for d in datum["Dimensions"]} == boot_health.dimensions(ENV, HOME, "gpu1", ASG)
    # moto keeps it: the alarm's metric has the point.
    (metric,) = aws_client("cloudwatch", HOME).list_metrics(Namespace=boot_health.NAMESPACE)["Metrics"]
    assert metric["MetricName"] == boot_health.METRIC


def test_machines_degraded_long_after_their_launch_are_not_counted_but_zero_is_published(world):
    home, faults = world
    launch(degraded=2, healthy=1)

    run_held(home, datetime.now(timezone.utc) + boot_health.YOUNG + timedelta(minutes=5))

    (call,) = published(faults)
    assert fleet_datum(call)["Value"] == 0  # a GPU lost by an old machine is no fault of the image; still data


def test_a_healthy_fleet_publishes_zero(world):
    home, faults = world
    launch(degraded=0, healthy=2)

    run_held(home, datetime.now(timezone.utc) + timedelta(minutes=5))

    (call,) = published(faults)
    assert fleet_datum(call)["Value"] == 0


@pytest.mark.parametrize("kind", ["throttle", "timeout"])
def test_a_publish_that_fails_is_one_error_of_the_run_and_the_run_goes_on(world, kind):
    home, faults = world
    launch(degraded=1, healthy=0)

    with faults.active(("cloudwatch", "PutMetricData"), kind):
        summary = run_held(home, datetime.now(timezone.utc) + timedelta(minutes=5))

    (error,) = summary["errors"]
    assert error["decision"] == "boot-metric-failed" and error["region"] == HOME
    # The run went on past it: the empty degraded machine was given back by the release stage.
    (group,) = aws_client("autoscaling", HOME).describe_auto_scaling_groups(AutoScalingGroupNames=[ASG])["AutoScalingGroups"]
    assert group["DesiredCapacity"] == 0


def test_the_count_is_per_fleet_and_only_of_young_degraded_machines():
    from types import SimpleNamespace as M

    from lambdas.jobs.fleets import parse_fleets
    now = datetime(2026, 11, 27, 12, tzinfo=timezone.utc)
    fleets = parse_fleets(
        '[{"region": "us-east-1", "fleet": "a", "asg_name": "mlfleet-dev-a", "cluster": "c", "task_family": "f",'
        ' "max_instances": 4, "instance_types": ["g5.12xlarge"]},'
        ' {"region": "us-east-1", "fleet": "b", "asg_name": "mlfleet-dev-b", "cluster": "c", "task_family": "f",'
        ' "max_instances": 4, "instance_types": ["g5.12xlarge"]}]')
    young, old = (now - timedelta(minutes=29)).timestamp(), (now - timedelta(minutes=31)).timestamp()
    machines = [M(region="us-east-1", fleet="a", degraded="no GPU", launched_at=young),
                M(region="us-east-1", fleet="a", degraded="no GPU", launched_at=old),
                M(region="us-east-1", fleet="a", degraded="", launched_at=young),
                M(region="us-east-1", fleet="a", degraded="no GPU", launched_at=None),
                M(region="us-east-1", fleet="zz", degraded="no GPU", launched_at=young)]
    assert boot_health.degraded_at_boot(machines, fleets, now) == {("us-east-1", "a"): 1, ("us-east-1", "b"): 0}
