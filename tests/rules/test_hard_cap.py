"""The fleets' cap is hard: no setting of a rendered Auto Scaling group lets it launch above max_size.

Each rule comes from its owner:
- Capacity Rebalancing launches a replacement before terminating, and "can exceed the maximum capacity
  by up to 10%" (https://docs.aws.amazon.com/autoscaling/ec2/userguide/ec2-auto-scaling-capacity-rebalancing.html,
  "Capacity Rebalancing behavior");
- AZRebalance launches before terminating, may exceed max_size by 10% (or one instance), and after a
  TerminateInstanceInAutoScalingGroup with a decrement "might terminate instances in other zones"
  (https://docs.aws.amazon.com/autoscaling/ec2/APIReference/API_TerminateInstanceInAutoScalingGroup.html;
  https://docs.aws.amazon.com/autoscaling/ec2/userguide/as-suspend-resume-processes.html);
- an instance refresh or an instance maintenance policy above 100% launches before terminating; with
  MaxHealthyPercentage set (terraform-provider-aws always sends it: Default 100 in
  internal/service/autoscaling/group.go) and a minimum that cannot be honoured, Auto Scaling "launches
  a new instance before terminating an old one" (botocore autoscaling service-2.json,
  RefreshPreferences.MaxHealthyPercentage; the minimum is rounded up, per the older API reference of
  RefreshPreferences.MinHealthyPercentage);
- a warm pool keeps instances besides the group's (https://docs.aws.amazon.com/autoscaling/ec2/userguide/ec2-auto-scaling-warm-pools.html);
- scheduled actions rewrite MaxSize (PutScheduledUpdateGroupAction) and predictive scaling with
  IncreaseMaxCapacity raises it (botocore: PredictiveScalingConfiguration.MaxCapacityBreachBehavior).
"""

from __future__ import annotations

import copy
import dataclasses
import math

import botocore.loaders
import pytest

from rule_stacks import RULE_STACKS

from components.compute.fleet import refresh_min_healthy_percent
from pulumi_harness import Recorded, Rendering

ASG = "aws:autoscaling/group:Group"
# Resources that change a group's size or max_size besides Pulumi's min/max and the scheduler.
SIZE_WRITERS = ("aws:autoscaling/schedule:Schedule", "aws:autoscaling/policy:Policy")


def cap_problems(rendering: Rendering) -> list[str]:
    problems = []
    for group in rendering.of_type(ASG):
        inputs, name = group.inputs, group.name
        max_size = int(inputs["maxSize"])
        if inputs.get("capacityRebalance"):
            problems.append(f"{name}: Capacity Rebalancing launches before it terminates, above max_size")
        if "AZRebalance" not in inputs.get("suspendedProcesses", []):
            problems.append(f"{name}: AZRebalance is not suspended (launches above max_size, kills busy machines)")
        preferences = (inputs.get("instanceRefresh") or {}).get("preferences", {})
        if inputs.get("instanceRefresh"):
            high = int(preferences.get("maxHealthyPercentage", 100))
            low = int(preferences.get("minHealthyPercentage", 90))
            if high > 100:
                problems.append(f"{name}: instance refresh may run {high}% of the group, above max_size")
            elif math.ceil(max_size * low / 100) > max_size - 1:
                problems.append(f"{name}: instance refresh keeps {low}% of a full group of {max_size} healthy, "
                                "so it launches before it terminates, above max_size")
        policy = inputs.get("instanceMaintenancePolicy")
        if policy and int(policy.get("maxHealthyPercentage", -1)) > 100:
            problems.append(f"{name}: instance maintenance policy replaces above 100% of the group")
        if inputs.get("warmPool"):
            problems.append(f"{name}: a warm pool keeps instances besides the group's")
    for kind in SIZE_WRITERS:
        for writer in rendering.of_type(kind):
            problems.append(f"{writer.name}: {kind} changes a group's size or max_size")
    return problems


@pytest.mark.parametrize("stack", RULE_STACKS)
def test_no_group_can_launch_above_its_max(renderings, stack):
    groups = renderings[stack].of_type(ASG)
    assert groups
    assert cap_problems(renderings[stack]) == []


def _broken(rendering: Rendering, change) -> Rendering:
    resources = []
    for r in rendering.resources:
        if r.type == ASG and r.name == "prod-us-west-2-gpu8-asg":
            inputs = copy.deepcopy(r.inputs)
            change(inputs)
            r = dataclasses.replace(r, inputs=inputs)
        resources.append(r)
    return dataclasses.replace(rendering, resources=resources)


@pytest.mark.parametrize(("change", "expected"), [
    (lambda i: i.update(capacityRebalance=True), "Capacity Rebalancing"),
    (lambda i: i.update(suspendedProcesses=[]), "AZRebalance"),
    (lambda i: i["instanceRefresh"]["preferences"].update(maxHealthyPercentage=110), "refresh may run 110%"),
    (lambda i: i["instanceRefresh"]["preferences"].update(minHealthyPercentage=90), "keeps 90% of a full group of 2"),
    (lambda i: i.update(instanceMaintenancePolicy={"minHealthyPercentage": 100, "maxHealthyPercentage": 110}),
     "maintenance policy"),
    (lambda i: i.update(warmPool={"poolState": "Stopped"}), "warm pool"),
], ids=["capacity-rebalance", "az-rebalance", "refresh-above-100", "refresh-minimum-too-high", "maintenance",
        "warm-pool"])
def test_each_way_above_the_cap_is_found(stack_renderings, change, expected):
    (problem,) = cap_problems(_broken(stack_renderings["prod"], change))
    assert problem.startswith("prod-us-west-2-gpu8-asg:") and expected in problem


def test_a_scheduled_action_is_found(stack_renderings):
    prod = stack_renderings["prod"]
    schedule = Recorded("aws:autoscaling/schedule:Schedule", "night", {"maxSize": 40}, None)
    (problem,) = cap_problems(dataclasses.replace(prod, resources=[*prod.resources, schedule]))
    assert problem.startswith("night:")


@pytest.mark.parametrize(("configured", "max_instances", "expected"),
                         [(90, 1, 0), (90, 2, 50), (90, 3, 66), (90, 6, 83), (90, 24, 90), (50, 24, 50), (0, 1, 0)])
def test_refresh_minimum_lets_a_full_fleet_terminate_first(configured, max_instances, expected):
    percent = refresh_min_healthy_percent(configured, max_instances)
    assert percent == expected
    assert math.ceil(max_instances * percent / 100) <= max_instances - 1


def test_the_refresh_rule_is_still_what_botocore_documents():
    """The minimum-percentage rule rests on this sentence of the owner's API model; if AWS rewrites it,
    re-read the rule."""
    shapes = botocore.loaders.create_loader().load_service_model("autoscaling", "service-2")["shapes"]
    documentation = shapes["RefreshPreferences"]["members"]["MaxHealthyPercentage"]["documentation"]
    assert "launches a new instance before terminating an old one" in documentation
    assert "AZRebalance" in shapes["ProcessType"]["members"]["ProcessName"]["documentation"]
