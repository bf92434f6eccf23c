"""The checkpoint buckets under mocks: one per fleet region, their settings and policies, the job role's
access, the scheduler's CHECKPOINT_BUCKETS, and bucket names at the longest names the config allows.

The mocks echo the program's inputs, so the S3 naming rules below are taken from their owner, the S3 user
guide, and each is shown failing on a name that breaks it.
"""

from __future__ import annotations

import base64
import fnmatch
import ipaddress
import json
import re

import pytest

from components.compute.cluster import JOB_STOP_TIMEOUT_SECONDS
from components.config import ConfigError, parse_stack_config
from components.config.model import ENVIRONMENT_NAME
from components.config.regions import AWS_REGIONS
from lambdas.common.settings import from_env
from lambdas.job_events.handler import Settings as JobEventsSettings
from lambdas.jobs.checkpoints import ACCOUNT_REGIONAL, GLOBAL, NO_ACCOUNT_REGIONAL_NAMESPACE, bucket_namespace
from lambdas.jobs.checkpoints import bucket_name as checkpoint_bucket_name
from lambdas.scheduler.handler import Settings as SchedulerSettings
from pulumi_harness import ACCOUNT_ID, STACKS, committed_rendering
from test_config import with_values

S3 = "aws:s3/"
BUCKET = f"{S3}bucket:Bucket"
CONFIGURATION = {  # suffix of the resource name -> type, in the order they are applied
    "ownership": f"{S3}bucketOwnershipControls:BucketOwnershipControls",
    "public-access": f"{S3}bucketPublicAccessBlock:BucketPublicAccessBlock",
    "encryption": f"{S3}bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration",
    "lifecycle": f"{S3}bucketLifecycleConfiguration:BucketLifecycleConfiguration",
    "policy": f"{S3}bucketPolicy:BucketPolicy",
}


@pytest.fixture(scope="module", params=STACKS)
def stack(request):
    from pulumi_harness import stack_file_config

    return committed_rendering(request.param), parse_stack_config(stack_file_config(request.param), request.param)


def test_one_bucket_per_fleet_region_named_for_the_account_and_region(stack):
    rendering, cfg = stack
    buckets = {b.name: b.inputs for b in rendering.of_type(BUCKET)}
    assert sorted(buckets) == sorted(f"{cfg.environment}-{r}-checkpoints-bucket" for r in cfg.regions)
    for region in cfg.regions:
        bucket = buckets[f"{cfg.environment}-{region}-checkpoints-bucket"]
        assert bucket["bucket"] == checkpoint_bucket_name(cfg.environment, ACCOUNT_ID, region)
        assert bucket["bucketNamespace"] == bucket_namespace(region)
        assert bucket["forceDestroy"] is True  # checkpoints are disposable: destroy empties the bucket
        assert rendering.outputs["regions"][region]["checkpointBucket"] == bucket["bucket"]
    # Unversioned: no versioning resource at all (S3 creates buckets unversioned).
    assert rendering.of_type(f"{S3}bucketVersioning:BucketVersioning") == []
    assert rendering.of_type(f"{S3}bucketVersioningV2:BucketVersioningV2") == []


def test_buckets_are_private_owner_enforced_encrypted_and_expire(stack):
    rendering, cfg = stack
    for region in cfg.regions:
        name = f"{cfg.environment}-{region}-checkpoints"
        ownership = rendering.named(f"{name}-ownership").inputs
        assert ownership["rule"] == {"objectOwnership": "BucketOwnerEnforced"}
        block = rendering.named(f"{name}-public-access").inputs
        assert all(block[k] is True for k in ("blockPublicAcls", "blockPublicPolicy", "ignorePublicAcls",
                                              "restrictPublicBuckets"))
        (encryption,) = rendering.named(f"{name}-encryption").inputs["rules"]
        assert encryption["applyServerSideEncryptionByDefault"] == {"sseAlgorithm": "AES256"}
        (rule,) = rendering.named(f"{name}-lifecycle").inputs["rules"]
        assert rule["status"] == "Enabled" and rule["filter"] == {"prefix": "jobs/"}
        assert rule["expiration"] == {"days": cfg.checkpoint_retention_days}
        assert rule["abortIncompleteMultipartUpload"] == {"daysAfterInitiation": 1}
        for suffix in CONFIGURATION:
            assert rendering.named(f"{name}-{suffix}").inputs["bucket"] == f"{name}-bucket-id"


def test_bucket_configuration_is_applied_one_call_at_a_time(stack):
    rendering, cfg = stack
    for region in cfg.regions:
        name = f"{cfg.environment}-{region}-checkpoints"
        order = list(CONFIGURATION.items())
        for (before, _), (suffix, kind) in zip(order, order[1:]):
            assert rendering.options[(kind, f"{name}-{suffix}")].depends_on == (f"{name}-{before}",)


def test_bucket_policy_allows_only_tls_and_only_the_regions_job_role_writes(stack):
    rendering, cfg = stack
    for region in cfg.regions:
        bucket = checkpoint_bucket_name(cfg.environment, ACCOUNT_ID, region)
        policy = json.loads(rendering.named(f"{cfg.environment}-{region}-checkpoints-policy").inputs["policy"])
        tls, writes = policy["Statement"]
        assert tls == {"Sid": "DenyInsecureTransport", "Effect": "Deny", "Principal": "*", "Action": "s3:*",
                       "Resource": [f"arn:aws:s3:::{bucket}", f"arn:aws:s3:::{bucket}/*"],
                       "Condition": {"Bool": {"aws:SecureTransport": "false"}}}
        assert writes["Effect"] == "Deny" and writes["Principal"] == "*"
        assert set(writes["Action"]) == {"s3:PutObject", "s3:ReplicateObject"}
        assert writes["Resource"] == f"arn:aws:s3:::{bucket}/*"
        # The region's own job role (the mocks give it this ARN), no other principal.
        assert writes["Condition"] == {"ArnNotEquals": {
            "aws:PrincipalArn": f"arn:aws:iam:{region}:{ACCOUNT_ID}:{cfg.environment}-{region}-ecs-job-mock"}}
        # Deletes and the bucket's own configuration are not denied: `pulumi destroy` removes this policy,
        # then empties the bucket (force_destroy); operators may remove a broken checkpoint.
        assert not {"s3:DeleteObject", "s3:DeleteBucketPolicy", "s3:PutBucketPolicy"} & set(writes["Action"])


def test_job_role_reads_and_writes_its_regions_jobs_prefix_only(stack):
    rendering, cfg = stack
    for region in cfg.regions:
        bucket = f"arn:aws:s3:::{checkpoint_bucket_name(cfg.environment, ACCOUNT_ID, region)}"
        grant = rendering.named(f"{cfg.environment}-{region}-ecs-job-checkpoints").inputs
        assert grant["role"] == f"{cfg.environment}-{region}-ecs-job-id"
        objects, listing = json.loads(grant["policy"])["Statement"]
        own = {"aws:ResourceAccount": ACCOUNT_ID}
        assert objects == {"Sid": "CheckpointObjects", "Effect": "Allow",
                           "Action": ["s3:AbortMultipartUpload", "s3:DeleteObject", "s3:GetObject", "s3:PutObject"],
                           "Resource": f"{bucket}/jobs/*", "Condition": {"StringEquals": own}}
        assert listing == {"Sid": "ListCheckpoints", "Effect": "Allow", "Action": "s3:ListBucket", "Resource": bucket,
                           "Condition": {"StringEquals": own, "StringLike": {"s3:prefix": "jobs/*"}}}
    # Only the job roles hold S3 permissions on the checkpoint buckets, but for the job-events function's
    # listing within jobs/ (did an interrupted job save in its run: lambdas/job_events/decide.py).
    holders = {p.name: p for p in rendering.of_type("aws:iam/rolePolicy:RolePolicy")
               if "arn:aws:s3:::" in p.inputs["policy"]}
    listing_only = f"{cfg.environment}-jobs-job-events-policy"
    assert sorted(holders) == sorted([listing_only, *(f"{cfg.environment}-{r}-ecs-job-checkpoints" for r in cfg.regions)])
    (statement,) = [s for s in json.loads(holders[listing_only].inputs["policy"])["Statement"]
                    if any(r.startswith("arn:aws:s3:::") for r in s["Resource"])]
    assert statement["Action"] == ["s3:ListBucket"]
    assert statement["Resource"] == [f"arn:aws:s3:::mlfleet-{cfg.environment}-{ACCOUNT_ID}-*"]
    assert statement["Condition"] == {"StringEquals": {"aws:ResourceAccount": ACCOUNT_ID},
                                      "StringLike": {"s3:prefix": "jobs/*"}}
    for region in cfg.regions:  # the pattern covers every bucket the program declares
        assert fnmatch.fnmatchcase(checkpoint_bucket_name(cfg.environment, ACCOUNT_ID, region),
                                   f"mlfleet-{cfg.environment}-{ACCOUNT_ID}-*")


def test_job_events_names_the_buckets_the_program_declares(stack):
    """The job-events function finds an interrupted job's checkpoint in the bucket its region has."""
    rendering, cfg = stack
    (function,) = [f for f in rendering.of_type("aws:lambda/function:Function") if f.name.endswith("-job-events-function")]
    settings = from_env(JobEventsSettings, function.inputs["environment"]["variables"])
    declared = {b.name: b.inputs["bucket"] for b in rendering.of_type(BUCKET)}
    assert settings.account_id == ACCOUNT_ID
    for region in cfg.regions:
        assert declared[f"{cfg.environment}-{region}-checkpoints-bucket"] == checkpoint_bucket_name(
            settings.environment, settings.account_id, region)


def test_the_scheduler_names_the_buckets_the_program_declares(stack):
    rendering, cfg = stack
    (scheduler,) = [f for f in rendering.of_type("aws:lambda/function:Function") if f.name.endswith("-scheduler-function")]
    settings = from_env(SchedulerSettings, scheduler.inputs["environment"]["variables"])
    declared = {b.name: b.inputs["bucket"] for b in rendering.of_type(BUCKET)}
    for region in cfg.regions:
        bucket = declared[f"{cfg.environment}-{region}-checkpoints-bucket"]
        assert settings.checkpoint_uri(region, "sub-1-00000") == f"s3://{bucket}/jobs/sub-1-00000/"


def test_jobs_get_sigterm_and_their_stop_timeout_and_the_agent_drains_on_the_notice(stack):
    """What the stacks set for the spot notice (tests/jobs/test_spot_notice.py checks the path around it)."""
    rendering, _ = stack
    for definition in rendering.of_type("aws:ecs/taskDefinition:TaskDefinition"):
        (container,) = json.loads(definition.inputs["containerDefinitions"])
        assert container["stopTimeout"] == JOB_STOP_TIMEOUT_SECONDS
    templates = rendering.of_type("aws:ec2/launchTemplate:LaunchTemplate")
    assert templates
    for template in templates:
        config = base64.b64decode(template.inputs["userData"]).decode().splitlines()
        assert f"ECS_CONTAINER_STOP_TIMEOUT={JOB_STOP_TIMEOUT_SECONDS}s" in config
        assert "ECS_ENABLE_SPOT_INSTANCE_DRAINING=true" in config


# --- names at the edges of the config, against S3's naming rules ---------------------------------------

# https://docs.aws.amazon.com/AmazonS3/latest/userguide/bucketnamingrules.html ("General purpose buckets
# naming rules") and https://docs.aws.amazon.com/AmazonS3/latest/userguide/gpbucketnamespaces.html.
RESERVED_PREFIXES = ("xn--", "sthree-", "amzn-s3-demo-")
RESERVED_SUFFIXES = ("-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3")


def naming_problems(name: str, namespace: str, account: str, region: str) -> list[str]:
    problems = []
    if not 3 <= len(name) <= 63:
        problems.append(f"{len(name)} characters: bucket names are 3 to 63 characters long")
    if not re.fullmatch(r"[a-z0-9.-]+", name):
        problems.append("only lowercase letters, numbers, dots and hyphens")
    if not re.fullmatch(r"[a-z0-9].*[a-z0-9]", name):
        problems.append("must begin and end with a letter or number")
    if ".." in name:
        problems.append("two adjacent periods")
    try:
        ipaddress.ip_address(name)
        problems.append("formatted as an IP address")
    except ValueError:
        pass
    problems += [f"reserved prefix {p}" for p in RESERVED_PREFIXES if name.startswith(p)]
    problems += [f"reserved suffix {s}" for s in RESERVED_SUFFIXES if name.endswith(s)]
    if namespace == ACCOUNT_REGIONAL and not name.endswith(f"-{account}-{region}-an"):
        problems.append("an account regional bucket's name ends with -<account id>-<region>-an")
    if namespace == GLOBAL and name.endswith("-an"):
        problems.append("the -an suffix is reserved for the account regional namespace")
    return problems


def longest_environment() -> str:
    name = "e"
    while ENVIRONMENT_NAME.fullmatch(name + "x"):
        name += "x"
    return name


@pytest.mark.parametrize("region", sorted(AWS_REGIONS))
def test_bucket_names_obey_s3_rules_at_the_longest_environment_name(region):
    environment = longest_environment()
    assert ENVIRONMENT_NAME.fullmatch(environment) and not ENVIRONMENT_NAME.fullmatch(environment + "x")
    # The config's longest name, and 20 characters (the limit before tests/rules found others at 18).
    for name in (environment, "e" * 20):
        bucket = checkpoint_bucket_name(name, ACCOUNT_ID, region)
        assert naming_problems(bucket, bucket_namespace(region), ACCOUNT_ID, region) == []


def test_the_middle_east_regions_without_the_account_namespace_use_the_global_one():
    assert {r for r in AWS_REGIONS if bucket_namespace(r) == GLOBAL} == NO_ACCOUNT_REGIONAL_NAMESPACE
    assert checkpoint_bucket_name("dev", ACCOUNT_ID, "me-south-1") == f"mlfleet-dev-{ACCOUNT_ID}-me-south-1"
    assert checkpoint_bucket_name("dev", ACCOUNT_ID, "us-east-1") == f"mlfleet-dev-{ACCOUNT_ID}-us-east-1-an"


@pytest.mark.parametrize(("name", "namespace", "problem"), [
    ("mlfleet-" + "x" * 30 + f"-{ACCOUNT_ID}-ap-southeast-1-an", ACCOUNT_REGIONAL, "3 to 63"),
    ("ab", GLOBAL, "3 to 63"),
    ("Mlfleet-dev", GLOBAL, "lowercase"),
    ("mlfleet-dev-", GLOBAL, "begin and end"),
    ("mlfleet..dev", GLOBAL, "adjacent periods"),
    ("192.168.5.4", GLOBAL, "IP address"),
    ("xn--mlfleet", GLOBAL, "reserved prefix"),
    ("mlfleet-dev-s3alias", GLOBAL, "reserved suffix"),
    (f"mlfleet-dev-{ACCOUNT_ID}-us-east-1", ACCOUNT_REGIONAL, "ends with -<account id>-<region>-an"),
    (f"mlfleet-dev-{ACCOUNT_ID}-us-west-2-an", ACCOUNT_REGIONAL, "ends with -<account id>-<region>-an"),
    (f"mlfleet-dev-{ACCOUNT_ID}-me-south-1-an", GLOBAL, "reserved for the account regional"),
])
def test_the_naming_check_refuses_each_broken_name(name, namespace, problem):
    assert any(problem in p for p in naming_problems(name, namespace, ACCOUNT_ID, "us-east-1"))


# --- the retention key --------------------------------------------------------------------------

def test_retention_defaults_to_two_weeks_and_is_validated():
    assert parse_stack_config(with_values(), "dev").checkpoint_retention_days == 14
    assert parse_stack_config(with_values(checkpointRetentionDays=3), "dev").checkpoint_retention_days == 3
    for bad in (0, 366, "two"):
        with pytest.raises(ConfigError) as raised:
            parse_stack_config(with_values(checkpointRetentionDays=bad), "dev")
        assert "checkpointRetentionDays" in str(raised.value) and str(bad) in str(raised.value)
