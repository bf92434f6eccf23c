"""The whole program per committed stack, and the committed snapshot of what each stack declares.

The snapshot (tests/snapshots/<stack>.json: type, name and inputs of every resource) is what a pull
request reviewer reads to see what a change does to the infrastructure without cloud credentials.
Update it after an intended change with `make snapshots` (pytest --update-snapshots).
"""

from __future__ import annotations

import difflib
import json

import pytest

from components.config import parse_stack_config
from pulumi_harness import ROOT, STACKS, committed_rendering, stack_file_config

SNAPSHOTS = ROOT / "tests" / "snapshots"


@pytest.fixture(scope="module", params=STACKS)
def rendering(request):
    return committed_rendering(request.param)


def test_every_fleet_region_gets_a_cluster_and_its_fleets(rendering):
    cfg = parse_stack_config(stack_file_config(rendering.stack), rendering.stack)
    clusters = rendering.of_type("aws:ecs/cluster:Cluster")
    assert len(clusters) == len(cfg.regions)
    expected_groups = sorted(f"{cfg.environment}-{region}-{fleet}-asg" for region in cfg.regions for fleet in cfg.fleets_in(region))
    assert sorted(r.name for r in rendering.of_type("aws:autoscaling/group:Group")) == expected_groups


def test_outputs_name_cluster_asg_and_task_family_per_region(rendering):
    cfg = parse_stack_config(stack_file_config(rendering.stack), rendering.stack)
    regions = rendering.outputs["regions"]
    assert set(regions) == set(cfg.regions)
    for region, out in regions.items():
        assert out["clusterName"] == f"mlfleet-{cfg.environment}"
        assert out["clusterArn"].startswith(f"arn:aws:ecs:{region}:")
        assert out["taskDefinitionFamily"] == f"mlfleet-{cfg.environment}-gpu-job"
        assert set(out["fleets"]) == set(cfg.fleets_in(region))
        assert all(f["asgName"] for f in out["fleets"].values())


def _expected_region(name: str, cfg) -> str:
    """Fleet-region resources are named <env>-<region>-...; home resources <env>-home-..., except the
    billing alarms and their topic, which live in us-east-1 with the billing metrics."""
    for region in cfg.regions:
        if name.startswith(f"{cfg.environment}-{region}-"):
            return region
    if "estimated-charges" in name or name.startswith(f"{cfg.environment}-home-billing-alerts"):
        return "us-east-1"
    return cfg.home_region


def test_every_resource_uses_the_provider_of_its_own_region(rendering):
    cfg = parse_stack_config(stack_file_config(rendering.stack), rendering.stack)
    for resource in rendering.resources:
        if not resource.type.startswith("aws:"):
            continue
        assert resource.provider, f"{resource.name} would use the default provider"
        region = resource.provider.split("::")[-2].removeprefix("aws-")
        assert region == _expected_region(resource.name, cfg), f"{resource.name} is declared through the {region} provider"


def test_every_taggable_resource_carries_the_environment_tag(rendering):
    for resource in rendering.resources:
        tags = resource.inputs.get("tags")
        if tags is None:
            continue
        if isinstance(tags, list):  # ASG tag blocks
            tags = {t["key"]: t["value"] for t in tags}
        assert tags.get("mlfleet:environment") == rendering.stack, resource.name
        assert tags.get("mlfleet:managed-by") == "pulumi", resource.name


def test_no_instance_can_get_a_public_ip(rendering):
    for lt in rendering.of_type("aws:ec2/launchTemplate:LaunchTemplate"):
        assert all(nic["associatePublicIpAddress"] == "false" for nic in lt.inputs["networkInterfaces"])
    for subnet in rendering.of_type("aws:ec2/subnet:Subnet"):
        assert subnet.inputs["mapPublicIpOnLaunch"] is False


def test_snapshot_matches(rendering, update_snapshots):
    path = SNAPSHOTS / f"{rendering.stack}.json"
    current = json.dumps(rendering.snapshot(), indent=1, sort_keys=True) + "\n"
    if update_snapshots or not path.exists():
        path.write_text(current)
        if not update_snapshots:
            pytest.fail(f"{path.name} did not exist; it has been written: review and commit it")
        return
    committed = path.read_text()
    if committed != current:
        diff = "".join(difflib.unified_diff(committed.splitlines(True), current.splitlines(True),
                                            f"committed {path.name}", "rendered now", n=2))
        pytest.fail(f"stack {rendering.stack!r} renders differently from its snapshot "
                    f"(run `make snapshots` if intended):\n{diff[:20000]}")


def test_the_job_service_is_discoverable_by_the_mlfleet_command(rendering):
    env = rendering.stack
    (parameter,) = [p for p in rendering.of_type("aws:ssm/parameter:Parameter")
                    if p.inputs["name"] == f"/mlfleet/{env}/job-service"]
    value = json.loads(parameter.inputs["insecureValue"])
    cfg = parse_stack_config(stack_file_config(env), env)
    assert value["ledgerTable"] == f"mlfleet-{env}-jobs" and value["schedulerFunction"] == f"mlfleet-{env}-scheduler"
    assert value["homeRegion"] == cfg.home_region and value["jobLogGroup"] == f"/mlfleet/{env}/jobs"
    assert value["admissionParameter"] == f"/mlfleet/{env}/admission"
    assert {f["region"] for f in value["fleets"]} == set(cfg.regions)
    assert value["defaultMaxAttempts"] == cfg.job_max_attempts
    # What each region's machines can pull: egress through a NAT gateway (or a team's VPC), else ECR only,
    # ECR Public through the region's cache (the prefix the cache rule declares).
    rules = {r.name.split(f"{env}-", 1)[1].split("-images")[0]: r.inputs["ecrRepositoryPrefix"]
             for r in rendering.of_type("aws:ecr/pullThroughCacheRule:PullThroughCacheRule")}
    assert set(rules.values()) == {value["images"]["cachePrefix"]} and value["images"]["account"] == "123456789012"
    assert value["images"]["regionsWithoutEgress"] == [r for r in cfg.regions if not (cfg.nat_gateway or r in cfg.networks)]
    topics = {t.inputs["name"] for t in rendering.of_type("aws:sns/topic:Topic")}
    assert value["notifications"]["email"].rsplit(":", 1)[1] == f"mlfleet-{env}-job-notifications" in topics
    assert (value["notifications"]["slack"] or ":").rsplit(":", 1)[1] == (
        f"mlfleet-{env}-job-notifications-slack" if cfg.slack_channel_id else "")
    # The mlfleet command reads it as this environment's, and a dry run from the stack file sees the same.
    from lambdas.jobs.cli.service import describe, from_stack_file, service_mismatches

    service = describe(env, value)
    assert service_mismatches(service, env, cfg.home_region, env) == []
    dry = from_stack_file(env)
    assert (dry.fleets, dry.default_max_attempts, {r: p.internet_egress for r, p in dry.regions.items()}) == (
        service.fleets, service.default_max_attempts, {r: p.internet_egress for r, p in service.regions.items()})
    assert set(dry.notification_topics) == set(service.notification_topics)


def test_the_ledger_streams_ended_jobs_to_the_job_events_function(rendering):
    env = rendering.stack
    (table,) = rendering.of_type("aws:dynamodb/table:Table")
    assert (table.inputs["streamEnabled"], table.inputs["streamViewType"]) == (True, "NEW_IMAGE")
    (mapping,) = rendering.of_type("aws:lambda/eventSourceMapping:EventSourceMapping")
    assert mapping.inputs["functionName"].endswith(f"mlfleet-{env}-job_events")  # the function's ARN
    assert mapping.inputs["bisectBatchOnFunctionError"] and mapping.inputs["maximumRetryAttempts"] == 5
    (pattern,) = [json.loads(f["pattern"]) for f in mapping.inputs["filterCriteria"]["filters"]]
    # The states a job never leaves: a quarantined one ends its submission too (lambdas/job_events/submissions.py).
    assert pattern == {"dynamodb": {"NewImage": {"state": {"S": ["CANCELLED", "FAILED", "QUARANTINED", "SUCCEEDED"]}}}}
