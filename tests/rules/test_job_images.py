"""Job images a region can pull: the ECR Public pull-through cache, the default image, jobImage checks."""

from __future__ import annotations

import json
import re

import botocore.loaders
import pytest

from components.config import StackConfig
from components.config.loader import ConfigError, parse_stack_config
from components.config.model import ENVIRONMENT_NAME
from components.network.image_cache import PULL_THROUGH_ACTIONS, cache_prefix, lifecycle_policy
from components.network.registries import reachable_without_egress, registry_of, through_cache
from pulumi_harness import ACCOUNT_ID, stack_file_config

ECR = botocore.loaders.create_loader().load_service_model("ecr", "service-2")["shapes"]
RULE = "aws:ecr/pullThroughCacheRule:PullThroughCacheRule"
TEMPLATE = "aws:ecr/repositoryCreationTemplate:RepositoryCreationTemplate"


# --- which registry an image comes from (Docker's rule) -------------------------------------------

@pytest.mark.parametrize(("image", "registry"), [
    ("ubuntu", "docker.io"),
    ("nvidia/cuda:12.6.3-base-ubuntu24.04", "docker.io"),
    ("docker.io/nvidia/cuda:12", "docker.io"),
    ("index.docker.io/nvidia/cuda:12", "docker.io"),
    ("localhost/train:1", "localhost"),
    ("localhost:5000/train:1", "localhost:5000"),
    ("Team/train:1", "Team"),
    ("ghcr.io/team/train:3", "ghcr.io"),
    ("nvcr.io/nvidia/pytorch:24.08-py3", "nvcr.io"),
    ("public.ecr.aws/nvidia/cuda:12", "public.ecr.aws"),
    ("123456789012.dkr.ecr.us-east-2.amazonaws.com/team/train@sha256:" + "a" * 64,
     "123456789012.dkr.ecr.us-east-2.amazonaws.com"),
])
def test_registry_of(image, registry):
    assert registry_of(image) == registry


@pytest.mark.parametrize(("image", "region", "reachable"), [
    ("public.ecr.aws/nvidia/cuda:12", "us-west-2", True),
    ("123456789012.dkr.ecr.us-west-2.amazonaws.com/team/train:1", "us-west-2", True),
    ("123456789012.dkr.ecr-fips.us-east-1.amazonaws.com/team/train:1", "us-east-1", True),
    ("123456789012.dkr.ecr.us-east-1.amazonaws.com/team/train:1", "us-west-2", False),
    ("nvidia/cuda:12", "us-east-1", False),
    ("ghcr.io/team/train:3", "us-east-1", False),
    ("registry-1.docker.io/library/ubuntu:24.04", "us-east-1", False),
])
def test_reachable_without_egress(image, region, reachable):
    assert reachable_without_egress(image, region) is reachable


def test_through_cache_rewrites_only_ecr_public():
    registry = f"{ACCOUNT_ID}.dkr.ecr.us-east-2.amazonaws.com"
    assert through_cache("public.ecr.aws/nvidia/cuda:12", registry, "mlfleet/prod") == f"{registry}/mlfleet/prod/nvidia/cuda:12"
    assert through_cache("ghcr.io/team/train:3", registry, "mlfleet/prod") == "ghcr.io/team/train:3"


# --- the cache rule, template and permissions, rendered --------------------------------------------

def test_every_fleet_region_caches_ecr_public_for_its_environment(stack_renderings):
    for stack, rendering in stack_renderings.items():
        regions = json.loads(stack_file_config(stack)["mlfleet:regions"])
        rules = rendering.of_type(RULE)
        assert sorted(r.name.split(f"{stack}-", 1)[1].split("-images")[0] for r in rules) == sorted(regions)
        assert {(r.inputs["ecrRepositoryPrefix"], r.inputs["upstreamRegistryUrl"]) for r in rules} == {
            (f"mlfleet/{stack}", "public.ecr.aws")}


def test_the_default_job_image_goes_through_the_region_cache(stack_renderings):
    default = StackConfig.model_fields["job_image"].default
    assert registry_of(default) == "public.ecr.aws"
    for stack, rendering in stack_renderings.items():
        for task in rendering.of_type("aws:ecs/taskDefinition:TaskDefinition"):
            region = re.search(r"-(\w+-\w+-\d)-ecs-", task.name)[1]
            (container,) = json.loads(task.inputs["containerDefinitions"])
            assert container["image"] == through_cache(
                default, f"{ACCOUNT_ID}.dkr.ecr.{region}.amazonaws.com", f"mlfleet/{stack}")


def test_created_repositories_are_encrypted_tagged_and_expire(stack_renderings):
    prod = stack_renderings["prod"]
    for template in prod.of_type(TEMPLATE):
        inputs = template.inputs
        assert inputs["prefix"] == "mlfleet/prod" and inputs["appliedFors"] == ["PULL_THROUGH_CACHE"]
        assert inputs["encryptionConfigurations"] == [{"encryptionType": "AES256"}]
        assert inputs["imageTagMutability"] == "MUTABLE"
        assert inputs["resourceTags"]["mlfleet:environment"] == "prod"
        # Tags need a role ECR assumes (repository-creation-templates-create-iam.html).
        role_name = template.name.replace("-ecr-public", "-ecr-templates")
        assert inputs["customRoleArn"].endswith(f"{role_name}-mock")
        (role,) = [r for r in prod.of_type("aws:iam/role:Role") if r.name == role_name]
        assert json.loads(role.inputs["assumeRolePolicy"])["Statement"][0]["Principal"] == {"Service": "ecr.amazonaws.com"}


def test_lifecycle_policy_expires_everything_and_evaluates_any_last():
    rules = json.loads(lifecycle_policy())["rules"]
    assert [r["selection"]["tagStatus"] for r in sorted(rules, key=lambda r: r["rulePriority"])][-1] == "any"
    assert all(r["action"] == {"type": "expire"} for r in rules)
    assert len(lifecycle_policy()) <= ECR["LifecyclePolicyTextForRepositoryCreationTemplate"]["max"]


def test_the_execution_role_may_pull_through_its_region_cache_only(stack_renderings):
    """ecr:BatchImportUpstreamImage and ecr:CreateRepository (first pull), ecr:TagResource (the template
    tags): https://docs.aws.amazon.com/AmazonECR/latest/userguide/pull-through-cache-iam.html"""
    prod = stack_renderings["prod"]
    policies = [r for r in prod.of_type("aws:iam/rolePolicy:RolePolicy") if r.name.endswith("task-execution-pull-through")]
    assert len(policies) == 3
    for policy in policies:
        region = re.search(r"prod-(\w+-\w+-\d)-ecs", policy.name)[1]
        (statement,) = json.loads(policy.inputs["policy"])["Statement"]
        assert statement["Effect"] == "Allow"
        assert sorted(statement["Action"]) == sorted(PULL_THROUGH_ACTIONS) == [
            "ecr:BatchImportUpstreamImage", "ecr:CreateRepository", "ecr:TagResource"]
        assert statement["Resource"] == f"arn:aws:ecr:{region}:{ACCOUNT_ID}:repository/mlfleet/prod/*"
        assert policy.inputs["role"] == policy.name.replace("-pull-through", "-id")


@pytest.mark.parametrize("environment", ["dev-", "ml--team", "a" * 19, "-dev", "Dev"])
def test_environment_names_that_would_make_an_invalid_ecr_prefix_are_refused(environment):
    assert not ENVIRONMENT_NAME.match(environment)


@pytest.mark.parametrize("environment", ["dev", "a" * 18, "ml-team-2", "a1-b2-c3-d4-e5-f6g"])
def test_the_cache_prefix_is_a_valid_ecr_prefix(environment):
    """Checked against botocore's ECR model at the longest environment name the config allows."""
    assert ENVIRONMENT_NAME.match(environment)
    shape = ECR["PullThroughCacheRuleRepositoryPrefix"]
    prefix = cache_prefix(environment)
    assert shape["min"] <= len(prefix) <= shape["max"]
    assert re.fullmatch(shape["pattern"], prefix)
    assert re.fullmatch(ECR["Prefix"]["pattern"], prefix)  # the creation template's prefix


# --- a user-set jobImage in a stack without egress --------------------------------------------------

def _prod(**overrides) -> dict:
    values = stack_file_config("prod")
    for key, value in overrides.items():
        values[f"mlfleet:{key}"] = value if isinstance(value, str) else json.dumps(value)
    return values


@pytest.mark.parametrize("image", ["nvidia/cuda:12.6.3-base-ubuntu24.04", "ghcr.io/team/train:3",
                                   f"{ACCOUNT_ID}.dkr.ecr.eu-west-1.amazonaws.com/team/train:1"])
def test_an_unreachable_job_image_is_a_config_error_naming_key_value_and_fix(image):
    with pytest.raises(ConfigError) as error:
        parse_stack_config(_prod(jobImage=image), "prod")
    (line,) = [text for text in str(error.value).splitlines() if "mlfleet:jobImage" in text]
    assert f"mlfleet:jobImage: {image!r} comes from " in line
    assert "us-east-1, us-east-2, us-west-2 cannot reach without internet egress" in line
    assert "public.ecr.aws/" in line and "mlfleet:natGateway: true" in line


def test_a_single_region_may_use_its_own_ecr_and_is_told_so():
    image = f"{ACCOUNT_ID}.dkr.ecr.us-east-1.amazonaws.com/team/train:1"
    assert parse_stack_config(_prod(regions=["us-east-1"], fleets={"gpu1": {"maxInstances": 2}}, jobImage=image),
                              "prod").job_image == image
    with pytest.raises(ConfigError, match="an image in us-east-1's own ECR"):
        parse_stack_config(_prod(regions=["us-east-1"], fleets={"gpu1": {"maxInstances": 2}}, jobImage="ubuntu"), "prod")


@pytest.mark.parametrize("overrides", [
    {"natGateway": True},
    # The team's own VPCs route as they like: mlfleet cannot tell, docs/network.md says what they need.
    {"networks": {r: {"vpcId": "vpc-0123456789abcdef0", "subnetIds": ["subnet-0123456789abcdef0"]}
                  for r in ("us-east-1", "us-east-2", "us-west-2")}},
])
def test_docker_hub_is_fine_where_the_network_has_egress(overrides):
    assert parse_stack_config(_prod(jobImage="nvidia/cuda:12", **overrides), "prod").job_image == "nvidia/cuda:12"
