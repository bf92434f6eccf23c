"""The GPU series the reaper and the fleet idle alarm query must be one the AMI's CloudWatch agent publishes.

CloudWatch matches a query on the exact set of dimensions: a query for a set the agent never publishes finds
nothing, and for the reaper nothing is "no GPU metric", busy forever (for the alarm, INSUFFICIENT_DATA).
moto cannot show this: no agent runs in it, and it answers whatever put_metric_data stored, so the moto tests
write the series the reaper asks for. The agent's rule is therefore modelled here from its source:

- nvidia_gpu points carry the GPU's `index` and `name` (and `host`, which `omit_hostname` and the ec2tagger
  drop): github.com/aws/amazon-cloudwatch-agent issue 981;
- the ec2tagger appends InstanceId and InstanceType from IMDS, and AutoScalingGroupName only from the
  instance's `aws:autoscaling:groupName` tag, so a machine outside a group gets none
  (plugins/processors/ec2tagger/ec2tagger.go, updateTags and updateOtelAttributes);
- each `aggregation_dimensions` group is published only when the point has every attribute of the group
  and more besides (processor/rollupprocessor/processor.go, buildRollup: "If the data point does not have
  the configured attribute, then that group will not be created").
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lambdas.reaper import inventory

AGENT_CONFIG = Path(__file__).resolve().parents[2] / "packer" / "files" / "cloudwatch" / "amazon-cloudwatch-agent.json"
GPU_ATTRIBUTES = {"index", "name"}


def published_gpu_dimension_sets(in_group: bool) -> set[frozenset[str]]:
    """The dimension sets under which the agent publishes nvidia_smi_utilization_gpu on one machine."""
    metrics = json.loads(AGENT_CONFIG.read_text())["metrics"]
    appended = {key for key in metrics["append_dimensions"] if key != "AutoScalingGroupName" or in_group}
    point = GPU_ATTRIBUTES | appended
    rollups = {frozenset(group) for group in metrics.get("aggregation_dimensions", [])
               if set(group) <= point and len(group) < len(point)}
    return {frozenset(point)} | rollups


@pytest.mark.parametrize(("asg_name", "why"), [
    ("mlfleet-dev-gpu1", "fleet member"),
    (None, "standalone machine: no aws:autoscaling:groupName tag, so no AutoScalingGroupName dimension"),
], ids=["fleet", "standalone"])
def test_the_reaper_queries_a_gpu_series_the_agent_publishes(asg_name, why):
    (gpu,) = [q for q in inventory.metric_queries("i-0abc", asg_name, 0) if q["Id"].startswith("gpu")]
    metric = gpu["MetricStat"]["Metric"]
    assert (metric["Namespace"], metric["MetricName"]) == ("CWAgent", "nvidia_smi_utilization_gpu")
    queried = frozenset(d["Name"] for d in metric["Dimensions"])
    assert queried in published_gpu_dimension_sets(in_group=asg_name is not None), why


def test_the_fleet_idle_alarm_queries_a_gpu_series_the_agent_publishes():
    # components/idle/alarms.py queries the fleet's maximum by AutoScalingGroupName alone
    # (tests/program/test_idle_and_dashboard.py checks the rendered alarm).
    assert frozenset({"AutoScalingGroupName"}) in published_gpu_dimension_sets(in_group=True)
