"""The stack configuration as one validated, immutable model.

Every `mlfleet:*` key of a stack file maps to one field here (camelCase in YAML, snake_case in
Python), with its type, default and description. Defaults live here and only here: Pulumi.yaml's
`config:` block is generated from this model (scripts/render_config.py, see
components/config/project.py). Cross-field rules (min <= max, fleet regions within the stack's
regions, ...) are model validators so that one error lists every problem at once.
"""

from __future__ import annotations

import difflib
import ipaddress
import re
import types
import typing
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from components.network.registries import DOCKER_HUB, reachable_without_egress, registry_of
from lambdas.common import tags as tag_keys
from lambdas.common.catalog import load_catalog
from lambdas.common.logs import shown  # a bad value cut to 120 characters, its length said
from lambdas.jobs.fleets import REBALANCE_TAG
from lambdas.jobs.spec import MAX_ATTEMPTS_LIMIT, TEAM_NAME as JOB_TEAM_NAME
from lambdas.scheduler.planning.headroom import MAX_JOBS as HEADROOM_MAX_JOBS
from lambdas.scheduler.planning.headroom import MAX_WINDOW_MINUTES as HEADROOM_MAX_WINDOW_MINUTES
from lambdas.scheduler.planning.purchase import COVER_MAX_CPU_SECONDS

from .regions import AWS_REGIONS

# 18 characters at most: Pulumi names resources `<env>-<region>-...` and adds 8 characters to the names it
# generates, so the longest region (14) leaves 18 for an EventBridge target id (64, `<env>-<region>-reaper-
# schedule-target`) and an instance role name (64, `<env>-<region>-<fleet>-instance`) (tests/rules).
# Single hyphens between letters and digits only: the name becomes an ECR repository prefix
# (mlfleet/<env>), whose pattern refuses a trailing or doubled separator (botocore ecr
# PullThroughCacheRuleRepositoryPrefix).
ENVIRONMENT_NAME = re.compile(r"^(?=.{2,18}$)[a-z][a-z0-9]*(-[a-z0-9]+)*$")
EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
AMI_ID = re.compile(r"^ami-[0-9a-f]{8}([0-9a-f]{9})?$")
VPC_ID = re.compile(r"^vpc-[0-9a-f]{8}([0-9a-f]{9})?$")
SUBNET_ID = re.compile(r"^subnet-[0-9a-f]{8}([0-9a-f]{9})?$")
FLEET_NAME = re.compile(r"^[a-z][a-z0-9]{0,11}$")
# AWS Chatbot's CreateSlackChannelConfiguration (botocore chatbot service-2.json): SlackTeamId
# [0-9A-Z]{1,255}, SlackChannelId [A-Za-z0-9]+ of 1-255 characters.
SLACK_WORKSPACE_ID = re.compile(r"^[0-9A-Z]{1,255}$")
SLACK_CHANNEL_ID = re.compile(r"^[A-Za-z0-9]{1,255}$")
# A VPC's IPv4 block is /16 to /28 (Amazon VPC User Guide, "VPC CIDR blocks"); mlfleet splits it into eight
# private subnets and eight public ones of an eighth of the last (plan_subnets), and a subnet is /28 at least.
VPC_PREFIX_LENGTHS = (16, 22)
# Job containers run in bridge mode on Docker's default bridge, 172.17.0.0/16 on the ECS GPU AMI: inside a
# container every address of it is on the bridge, so VPC addresses there (interface endpoints, the team's
# services) are never reached. "Some AWS services use the 172.17.0.0/16 CIDR range. To avoid future
# conflicts, don't use this range when creating your VPC." (Amazon VPC User Guide, "VPC CIDR blocks")
DOCKER_BRIDGE = ipaddress.IPv4Network("172.17.0.0/16")
# CloudWatch Logs accepts only these retention periods (PutRetentionPolicy).
LOG_RETENTION_DAYS = (1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653)
# AWS Budgets allows at most ten notifications per budget.
MAX_BUDGET_NOTIFICATIONS = 10
# The job functions receive every fleet-region pair with its instance types (FLEETS, in a Lambda environment
# AWS caps at 4 KB) and the job-service SSM parameter lists them too (4 KB for a standard parameter). With
# the longest names these counts fit both (tests/rules renders that stack and checks both sizes).
MAX_REGIONS = 8
MAX_FLEET_REGIONS = 8
MAX_FLEET_REGION_INSTANCE_TYPES = 40  # instance types summed over the fleet-region pairs
# AWS resources take 50 user tags (EC2 User Guide, "Tag restrictions"; an Auto Scaling group 50 too). mlfleet
# adds up to 4 of its own when it creates a resource (environment, managed-by, Name, and mlfleet:fleet or
# mlfleet:tier), and a fleet instance gets more while it runs: the functions' marks (their policies' aws:TagKeys)
# and the operators' mlfleet:keep-alive (docs/reaper.md). A tag past 50 is refused (TagLimitExceeded), so a
# release, a removal or an idle mark would fail on every instance.
RUN_TIME_INSTANCE_TAGS = (tag_keys.IDLE_SINCE, tag_keys.REMOVING, tag_keys.EMPTY_SINCE, tag_keys.DETACHED_AT,
                          tag_keys.START_REFUSED_AT, tag_keys.KEEP_ALIVE, REBALANCE_TAG)
MAX_COST_ALLOCATION_TAGS = 50 - 4 - len(RUN_TIME_INSTANCE_TAGS)
# Keys mlfleet no longer reads, with what to do instead.
REMOVED_KEYS = {
    "activateCostAllocationTag": "AWS activates a cost allocation tag only from the management account, once the tag "
    "has appeared in billing data; remove the key and run `make cost-tag` once, a day after the first deployment, "
    "with management-account credentials (docs/billing.md)",
}

# Teams share the fleets by weight and quota (docs/scheduler.md "Teams, shares and priorities"). Names as the
# job spec takes them. Ten at most: the scheduler gets them in its 4 KB Lambda environment and the mlfleet
# command in the 4 KB job-service parameter (tests/rules checks both).
TEAM_NAME = re.compile(rf"^{JOB_TEAM_NAME.pattern}$")
MAX_TEAMS = 10

DEFAULT_INSTANCE_TYPES = ("g6.2xlarge", "g5.2xlarge", "g4dn.2xlarge", "g6.4xlarge", "g5.4xlarge")


def removed_key_problem(key: str) -> str:
    """What replaced a key of REMOVED_KEYS, as its error line says it."""
    return f"mlfleet:{key} is no longer a stack key: {REMOVED_KEYS[key]}"


class Problems(ValueError):
    """Several independent problems found by one validator; the loader lists (and counts) each."""

    def __init__(self, problems: list[str]):
        super().__init__("\n  - ".join(problems))
        self.problems = tuple(problems)


def _known_region(region: str) -> str:
    if region not in AWS_REGIONS:
        raise ValueError(f"{shown(region)} is not an AWS region mlfleet knows")
    return region


def _gpu_instance_type(name: str) -> str:
    catalog = load_catalog()
    if name not in catalog:
        close = difflib.get_close_matches(name, catalog.names(), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else " (lambdas/common/data/instance_catalog.json lists them)"
        raise ValueError(f"{shown(name)} is not a GPU instance type in the catalog{hint}")
    return name


def _distinct(regions: tuple[str, ...]) -> tuple[str, ...]:
    duplicates = sorted({r for r in regions if regions.count(r) > 1})
    if duplicates:
        raise ValueError(f"lists {', '.join(duplicates)} more than once")
    return regions


Region = Annotated[str, AfterValidator(_known_region)]
GpuInstanceType = Annotated[str, AfterValidator(_gpu_instance_type)]
TagKey = Annotated[str, StringConstraints(min_length=1, max_length=128, pattern=r"^[\w .:/=+\-@]+$")]
TagValue = Annotated[str, StringConstraints(max_length=256, pattern=r"^[\w .:/=+\-@]*$")]


class _Model(BaseModel):
    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        alias_generator=to_camel,
        populate_by_name=False,
        str_strip_whitespace=True,
    )

    @field_validator("*", mode="before")
    @classmethod
    def _no_boolean_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        """YAML's true/false is not 1/0 (pydantic's lax mode takes it). Top-level keys arrive as text ("true"),
        which an int refuses anyway; this catches the numbers inside objects (fleets, teams)."""
        if isinstance(value, bool) and inner_type(cls.model_fields[info.field_name].annotation) in (int, float):
            raise ValueError(f"{str(value).lower()} is a boolean, not a number")
        return value


class FleetConfig(_Model):
    """One GPU spot fleet (an Auto Scaling group) per region it runs in.

    All instance types of a fleet must have the same GPU count: the ASG, not the scheduler, picks the
    type at launch, so the scheduler plans new capacity by the smallest shape of the fleet.
    """

    instance_types: tuple[GpuInstanceType, ...] = Field(default=DEFAULT_INSTANCE_TYPES, min_length=1)
    min_instances: int = Field(default=0, ge=0)
    max_instances: int = Field(gt=0, le=1000)
    on_demand_base_capacity: int = Field(default=0, ge=0)
    on_demand_percentage_above_base: int = Field(default=0, ge=0, le=100)
    # Regions this fleet runs in; None means every region of the stack.
    regions: tuple[Region, ...] | None = None

    @field_validator("instance_types")
    @classmethod
    def _distinct_same_gpu_count(cls, types: tuple[str, ...]) -> tuple[str, ...]:
        if len(set(types)) != len(types):
            raise ValueError(f"lists an instance type twice: {list(types)}")
        catalog = load_catalog()
        counts = {name: catalog.get(name).gpus for name in types}
        if len(set(counts.values())) > 1:
            raise ValueError(f"mixes GPU counts {counts}; split them into one fleet per GPU count")
        return types

    @field_validator("regions")
    @classmethod
    def _some_distinct_regions(cls, regions: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if regions is not None and not regions:
            raise ValueError("an empty list runs the fleet nowhere (leave regions out to run it in every stack region, "
                             "or remove the fleet)")
        return regions if regions is None else _distinct(regions)

    @model_validator(mode="after")
    def _bounds(self) -> FleetConfig:
        if self.min_instances > self.max_instances:
            raise ValueError(f"minInstances ({self.min_instances}) is above maxInstances ({self.max_instances})")
        if self.on_demand_base_capacity > self.max_instances:
            raise ValueError(
                f"onDemandBaseCapacity ({self.on_demand_base_capacity}) is above maxInstances ({self.max_instances})"
            )
        return self

    @property
    def gpus_per_instance(self) -> int:
        return load_catalog().get(self.instance_types[0]).gpus


# An AWS account id, as the provider's allowedAccountIds and forbiddenAccountIds take it.
ACCOUNT_ID = re.compile(r"^[0-9]{12}$")
# An IAM role's ARN (any partition). STS AssumeRole takes any ARN of 20-2048 characters (botocore sts
# service-2.json, arnType); a role's is `arn:<partition>:iam::<account>:role/<path and name>`.
ROLE_ARN = re.compile(r"^arn:aws[a-z-]*:iam::[0-9]{12}:role/[\w+=,.@/-]{1,576}$")
# STS AssumeRole (botocore sts service-2.json): roleSessionNameType 2-64 characters [\w+=,.@-]*,
# externalIdType 2-1224 characters [\w+=,.@:/-]*.
ROLE_SESSION_NAME = StringConstraints(min_length=2, max_length=64, pattern=r"^[\w+=,.@-]+$")
EXTERNAL_ID = StringConstraints(min_length=2, max_length=1224, pattern=r"^[\w+=,.@:/-]+$")


class AssumeRoleConfig(_Model):
    """One role of `aws:assumeRoles`, as the provider's `assume_roles` takes it (pulumi_aws ProviderAssumeRoleArgs)."""

    role_arn: str
    session_name: Annotated[str, ROLE_SESSION_NAME] | None = None
    external_id: Annotated[str, EXTERNAL_ID] | None = None

    @field_validator("role_arn")
    @classmethod
    def _role_arn(cls, arn: str) -> str:
        if not ROLE_ARN.match(arn):
            raise ValueError(f"{shown(arn)} is not an IAM role ARN like arn:aws:iam::123456789012:role/deployer")
        return arn


def _account_ids(ids: tuple[str, ...]) -> tuple[str, ...]:
    bad = [i for i in ids if not ACCOUNT_ID.match(i)]
    if bad:
        raise ValueError(f"{', '.join(map(shown, bad))}: an AWS account id is 12 digits, written as a string")
    return ids


class AwsProviderConfig(_Model):
    """The stack's `aws:` keys that mlfleet's per-region providers take.

    Pulumi's explicit providers read no stack config (pulumi/pulumi-aws#1307, #3259: by design, only the
    default provider reads `aws:*`), and every committed stack disables the default provider. Without
    this, `aws:profile` or `aws:allowedAccountIds` would be ignored without a word and the program would
    deploy with whatever credentials the shell has, to whichever account they reach.
    """

    profile: Annotated[str, StringConstraints(min_length=1)] | None = None
    allowed_account_ids: tuple[str, ...] = ()
    forbidden_account_ids: tuple[str, ...] = ()
    assume_roles: tuple[AssumeRoleConfig, ...] = ()
    shared_config_files: tuple[Annotated[str, StringConstraints(min_length=1)], ...] = ()
    shared_credentials_files: tuple[Annotated[str, StringConstraints(min_length=1)], ...] = ()

    @field_validator("allowed_account_ids", "forbidden_account_ids", mode="before")
    @classmethod
    def _ids_as_text(cls, ids: Any) -> Any:
        numbers = [i for i in ids if isinstance(i, int) and not isinstance(i, bool)] if isinstance(ids, list) else []
        if numbers:  # an unquoted id is a number in YAML, and a number has no leading zero
            raise ValueError(f"{', '.join(map(str, numbers))}: write each account id as a string in quotes, "
                             "\"012345678901\" (a number loses a leading zero)")
        return ids

    _valid_account_ids = field_validator("allowed_account_ids", "forbidden_account_ids")(_account_ids)

    @field_validator("forbidden_account_ids")
    @classmethod
    def _one_account_list(cls, ids: tuple[str, ...], info: ValidationInfo) -> tuple[str, ...]:
        # The provider refuses both: the Terraform AWS provider that pulumi_aws bridges declares
        # allowed_account_ids `ConflictsWith: forbidden_account_ids` (hashicorp/terraform-provider-aws,
        # internal/provider/provider.go).
        if ids and info.data.get("allowed_account_ids"):
            raise ValueError("set together with aws:allowedAccountIds, which the provider refuses: keep one")
        return ids

    def provider_args(self) -> dict[str, Any]:
        """The keyword arguments of `pulumi_aws.Provider` these settings give (only those set)."""
        args: dict[str, Any] = {}
        if self.profile:
            args["profile"] = self.profile
        for name in ("allowed_account_ids", "forbidden_account_ids", "shared_config_files", "shared_credentials_files"):
            if getattr(self, name):
                args[name] = list(getattr(self, name))
        if self.assume_roles:
            args["assume_roles"] = [{k: v for k, v in role.model_dump().items() if v is not None}
                                    for role in self.assume_roles]
        return args


class ExistingNetwork(_Model):
    """A VPC the team already has. mlfleet adds no route, NAT or endpoint to it: egress is theirs."""

    vpc_id: Annotated[str, StringConstraints(pattern=VPC_ID.pattern)]
    subnet_ids: tuple[Annotated[str, StringConstraints(pattern=SUBNET_ID.pattern)], ...] = Field(min_length=1)


class TeamConfig(_Model):
    """A team sharing the environment's GPUs: its weight among the teams with work waiting, and a quota."""

    weight: float = Field(default=1.0, gt=0, le=1000)
    # None: no quota; the fleets' caps and the fair share bound what it holds.
    max_gpus: int | None = Field(default=None, ge=1)


class StackConfig(_Model):
    """Everything one stack (one environment) declares.

    Each stack key's description lives here with its type and default; scripts/render_config.py writes
    them into Pulumi.yaml and docs/configuration.md.
    """

    # Not stack keys: filled by the loader from the stack name, `aws:region` and the provider's `aws:` keys.
    environment: str
    home_region: Region
    aws_provider: AwsProviderConfig = Field(default_factory=AwsProviderConfig)

    regions: tuple[Region, ...] = Field(
        min_length=1,
        description="Regions that run GPU fleets, at most 8 (each gets a VPC or uses `networks`, an ECS cluster and "
        "the fleets).")
    fleets: dict[Annotated[str, StringConstraints(pattern=FLEET_NAME.pattern)], FleetConfig] = Field(
        min_length=1,
        description="GPU fleets: `{name: {instanceTypes, minInstances, maxInstances, onDemandBaseCapacity, "
        "onDemandPercentageAboveBase, regions}}`. Fleet names are 1-12 lowercase letters/digits, starting with a "
        "letter; all types of a fleet have the same GPU count; `maxInstances` (1-1000) is the per-region hard cap; "
        "`regions` defaults to every stack region. At most 8 fleet-region pairs and 40 instance types summed over them (the job functions get "
        "every fleet in a 4 KB environment).")
    networks: dict[Region, ExistingNetwork] = Field(
        default_factory=dict,
        description="Existing VPCs: `{region: {vpcId, subnetIds}}`. mlfleet adds no route, NAT or endpoint to them.")
    vpc_cidr: str = Field(
        default="10.80.0.0/16",
        description="CIDR of the VPC created in regions without an entry in `networks` (/16 to /22, outside Docker's "
        "default bridge 172.17.0.0/16, which job containers use).")
    availability_zone_count: int = Field(
        default=3, ge=1, le=6,
        description="How many availability zones a created VPC spans (zones that offer the fleets' instance types first).")
    nat_gateway: bool = Field(
        default=False,
        description="Give created VPCs a NAT gateway for internet egress; without it, instances reach AWS through VPC "
        "endpoints only.")
    root_volume_gib: int = Field(
        default=200, ge=100, le=16384, alias="rootVolumeGiB",
        description="Size of each GPU instance's encrypted gp3 root volume (container images live there).")
    ami_ids: dict[Region, Annotated[str, StringConstraints(pattern=AMI_ID.pattern)]] = Field(
        default_factory=dict,
        description="AMI pinned per region: `{region: ami-id}`; wins over every other source.")
    # A new AMI rolls out through an ASG instance refresh that keeps this share of the fleet in service.
    ami_refresh_min_healthy_percent: int = Field(
        default=90, ge=0, le=100,
        description="Share of a fleet (0-100) an instance refresh keeps in service while it rolls a new AMI out, "
        "lowered for small fleets so that a refresh never launches above maxInstances.")
    # From ECR Public, which every region reaches through its pull-through cache (components/network).
    job_image: str = Field(
        default="public.ecr.aws/nvidia/cuda:12.6.3-base-ubuntu24.04", min_length=1,
        description="Default container image of the GPU job task-definition family (jobs name their own). ECR "
        "Public images are pulled through each region's ECR pull-through cache.")
    log_retention_days: int = Field(
        default=30,
        description="Retention of job and function log groups, one of CloudWatch Logs' allowed periods.")

    cost_allocation_tags: dict[TagKey, TagValue] = Field(
        default_factory=dict, max_length=MAX_COST_ALLOCATION_TAGS,
        description=f"The team's cost allocation tags, added to everything taggable (at most {MAX_COST_ALLOCATION_TAGS}: "
        f"AWS takes 50 per resource, and a fleet instance carries up to {50 - MAX_COST_ALLOCATION_TAGS} of mlfleet's). "
        "Keys must not start with `aws:` or `mlfleet:`.")
    # AWS Budgets takes at most ten e-mail subscribers per notification.
    alert_emails: tuple[Annotated[str, StringConstraints(pattern=EMAIL.pattern)], ...] = Field(
        min_length=1, max_length=10,
        description="E-mail addresses for budget alerts, idle alarms and reaper summaries (each confirms once per topic).")
    slack_workspace_id: str | None = Field(
        default=None,
        description="AWS Chatbot Slack workspace id (authorised once in the Chatbot console); set with slackChannelId.")
    slack_channel_id: str | None = Field(
        default=None,
        description="Slack channel id that receives the environment's notifications through AWS Chatbot.")

    # Money. The budget may be derived from the caps (None: the worst case the caps allow, components/billing/cost.py).
    monthly_budget_usd: int | None = Field(
        default=None,
        description="Expected monthly spend in dollars; alerts at each of its budgetAlertPercents (each quarter by "
        "default). Unset means the worst case the caps allow for a month: the fleets at maxInstances, at most "
        "maxHourlyUsd (docs/billing.md).")
    budget_alert_percents: tuple[int, ...] = Field(
        default=(25, 50, 75, 100),
        description="Percents of the monthly budget (actual spend) that send an alert, strictly increasing.")
    budget_forecast_percent: int | None = Field(
        default=100, gt=0, le=1000,
        description="Percent of the monthly budget that forecast spend must reach to send an alert.")
    max_hourly_usd: int = Field(
        gt=0,
        description="Hard cap on the environment's instance spend in dollars per hour; the scheduler never scales past "
        "it.")

    # Idleness (DESIGN.md "Idle").
    idle_window_minutes: int = Field(
        default=90, ge=30, le=1440,
        description="How long an instance must be idle (no task, CPU and GPU under threshold, complete data) before "
        "it is marked.")
    idle_cpu_percent: int = Field(
        default=10, ge=1, le=99, description="CPU utilisation below which an instance counts as idle.")
    idle_gpu_percent: int = Field(
        default=5, ge=1, le=99, description="GPU utilisation below which an instance counts as idle.")
    idle_grace_minutes: int = Field(
        default=30, ge=0, le=1440,
        description="Time between marking an instance idle (and notifying) and reaping it.")
    reaper_schedule_minutes: int = Field(
        default=10, ge=10, le=15, description="How often the reaper runs (10 to 15 minutes).")
    reaper_dry_run: bool = Field(
        default=False, description="Log and notify what the reaper would do, but change nothing.")
    reaper_max_actions_per_run: int = Field(
        default=20, gt=0, le=500,
        description="Cap on instances the reaper drains, terminates or stops in one run.")

    # Giving capacity back: the scheduler's releases and the reaper share one removal protocol (docs/removal.md).
    release_after_empty_minutes: int | None = Field(
        default=None, ge=0, le=1440,
        description="How long an instance the scheduler bought stays empty before it gives it back. Unset: the "
        "fleets' boot time as measured on their running instances (docs/removal.md, \"The release delay\"). 0: at "
        "the first scheduler run that finds it empty and no queued job for it (a little cheaper on the "
        "benchmark's traces; a job that comes soon after waits for a boot). Below idleWindowMinutes, so that the "
        "release acts before the reaper marks the machine idle.")
    disruption_budget_percent: int = Field(
        default=10, ge=1, le=100,
        description="Share of a fleet group (rounded up, at least one instance) that removals may drain at once; "
        "instances already terminating count against it.")
    # Headroom trades dollars for waits (lambdas/scheduler/planning/headroom.py); its bounds are the scheduler's.
    headroom_window_minutes: int = Field(
        default=0, ge=0, le=HEADROOM_MAX_WINDOW_MINUTES,
        description="Keep room ready for jobs like those the scheduler bought instances for in the last this many "
        "minutes, so the next ones start without waiting for a boot; it costs more (docs/scheduler.md, \"Headroom\"). "
        "0: no headroom.")
    headroom_max_jobs: int = Field(
        default=8, ge=1, le=HEADROOM_MAX_JOBS,
        description="With headroom: room for at most this many of those recent jobs.")
    # What a scheduler run may spend on a cheaper purchase for a big burst (lambdas/scheduler/planning/purchase.py).
    purchase_search_cpu_seconds: int = Field(
        default=int(COVER_MAX_CPU_SECONDS), ge=0, le=int(COVER_MAX_CPU_SECONDS),
        description="The most CPU seconds a scheduler run spends looking for a cheaper way to buy instances for a "
        "burst of jobs, beyond its quick plan (docs/scheduler.md, \"Cover\"): big, diverse bursts use up to this, "
        "small purchases well under a second. Lower it to ask for a big burst's instances sooner, at a dearer "
        "purchase; 0: the quick plan alone.")

    # Jobs. A job spec may ask for at most MAX_ATTEMPTS_LIMIT attempts; the stack's default must be one it could ask for.
    job_max_attempts: int = Field(
        default=3, ge=1,
        description="Default number of attempts a job gets (spot interruptions count) before it is dead-lettered.")
    rebalance_timeout_minutes: int = Field(
        default=30, ge=5, le=360,
        description="How long an instance under a rebalance recommendation is avoided before the scheduler trusts it "
        "again.")
    # 14 days like the dead-letter queue: a dead-lettered job's last checkpoint stays as long as its message.
    checkpoint_retention_days: int = Field(
        default=14, ge=1, le=365,
        description="Days a job's checkpoint objects live after their last write in their region's checkpoint bucket "
        "(components/storage); a running job rewrites its checkpoint, so only abandoned ones expire.")

    # Teams (lambdas/scheduler/planning/shares.py).
    teams: dict[Annotated[str, StringConstraints(pattern=TEAM_NAME.pattern)], TeamConfig] = Field(
        default_factory=dict, max_length=MAX_TEAMS,
        description="Teams sharing the GPUs: `{name: {weight, maxGpus}}`, at most 10. Among teams with jobs waiting, "
        "GPUs go by weighted fair share of recent GPU use (`weight` > 0, default 1); a team never holds more than "
        "`maxGpus` (unset: no quota; at most what the fleets hold at their caps). Names are 1-30 lowercase letters, "
        "digits and '-', starting with a letter. Unset: one team, `default`, takes every job.")
    default_team: str | None = Field(
        default=None,
        description="The team of jobs submitted without `--team` (one of `teams`). Unset with `teams` set: "
        "`mlfleet submit` requires a team; a queued job of no team or of a team no longer listed runs as team "
        "`default` (weight 1, no quota, unless `teams` lists it).")
    share_half_life_minutes: int = Field(
        default=60, ge=0, le=10080,
        description="Half-life of the recent GPU use that fair shares compare: a team that has just held more than "
        "its share pays it back (as AWS Batch's shareDecaySeconds); 0 counts only what each team holds now.")

    # Teardown: keep the job ledger when the stack is destroyed (prod), and take a kept one back on the
    # next `pulumi up` (an import, docs/runbook.md "Tearing down an environment").
    retain_job_ledger: bool = Field(
        default=False, description="Keep the DynamoDB job ledger when the stack is destroyed (set in prod).")
    adopt_job_ledger: bool = Field(
        default=False,
        description="Import the ledger a destroyed stack kept (retainJobLedger) on the next up instead of creating "
        "it; needs retainJobLedger.")

    @model_validator(mode="before")
    @classmethod
    def _removed_keys(cls, document):
        """A key mlfleet no longer reads says what replaced it, instead of "unknown key". The loader lists these
        beside the stack's other problems (components/config/loader.py); this covers a model built directly."""
        present = [key for key in REMOVED_KEYS if isinstance(document, dict) and key in document]
        if present:
            raise Problems([removed_key_problem(key) for key in present])
        return document

    @field_validator("environment")
    @classmethod
    def _environment_name(cls, name: str) -> str:
        if not ENVIRONMENT_NAME.match(name):
            raise ValueError(f"stack name {name!r} must be 2-18 characters of a-z and 0-9, starting with a letter, "
                             "with single '-' between them (not at the end)")
        return name

    @field_validator("regions")
    @classmethod
    def _distinct_regions(cls, regions: tuple[str, ...]) -> tuple[str, ...]:
        return _distinct(regions)

    @field_validator("vpc_cidr")
    @classmethod
    def _vpc_cidr(cls, cidr: str) -> str:
        """An IPv4 block mlfleet can split (components/network/network.py plan_subnets), written as EC2 keeps it."""
        try:
            network = ipaddress.IPv4Network(cidr, strict=False)
        except ValueError:
            network = None
        if network is None or "/" not in cidr:
            raise ValueError(f"{shown(cidr)} is not an IPv4 CIDR block like 10.80.0.0/16")
        if not VPC_PREFIX_LENGTHS[0] <= network.prefixlen <= VPC_PREFIX_LENGTHS[1]:
            raise ValueError(f"{cidr!r} is a /{network.prefixlen}; mlfleet's VPCs are /{VPC_PREFIX_LENGTHS[0]} to "
                             f"/{VPC_PREFIX_LENGTHS[1]}")
        if network.overlaps(DOCKER_BRIDGE):
            raise ValueError(f"{cidr!r} overlaps {DOCKER_BRIDGE}, Docker's default bridge, which job containers use "
                             "(bridge mode): they could not reach the VPC's endpoints; choose a block outside it, "
                             "such as 10.80.0.0/16")
        if str(network) != cidr:
            # EC2 "modif[ies] the specified CIDR block to its canonical form" (botocore ec2 CreateVpc, CidrBlock),
            # so the written form would differ from the VPC's on every preview.
            why = "has host bits set" if str(network.network_address) != cidr.split("/")[0] else "is not in CIDR notation"
            raise ValueError(f"{cidr!r} {why} (EC2 would keep {network}); write {network}")
        return cidr

    @field_validator("job_image")
    @classmethod
    def _job_image_reachable(cls, image: str, info: ValidationInfo) -> str:
        """Regions whose VPC mlfleet creates without a NAT gateway reach only ECR (components/network/
        registries.py); a team's own VPC (networks) is the team's to route."""
        if info.data.get("nat_gateway", True) or "regions" not in info.data:
            return image
        closed = [r for r in info.data["regions"] if r not in info.data.get("networks", {})]
        unreachable = [r for r in closed if not reachable_without_egress(image, r)]
        if unreachable:
            registry = registry_of(image)
            fixes = ["an ECR Public image (public.ecr.aws/...: each region pulls it through its ECR cache)"]
            if len(closed) == 1:
                fixes.append(f"an image in {closed[0]}'s own ECR")
            raise ValueError(
                f"{shown(image)} comes from {'Docker Hub' if registry == DOCKER_HUB else registry}, which "
                f"{', '.join(unreachable)} cannot reach without internet egress (natGateway is false); "
                f"use {' or '.join(fixes)}, or set mlfleet:natGateway: true"
            )
        return image

    @field_validator("slack_workspace_id", "slack_channel_id")
    @classmethod
    def _slack_ids(cls, value: str | None, info: ValidationInfo) -> str | None:
        """Ids, not names: Slack shows them in a channel's details, the Chatbot console in the workspace's."""
        workspace = info.field_name == "slack_workspace_id"
        if value is not None and not (SLACK_WORKSPACE_ID if workspace else SLACK_CHANNEL_ID).match(value):
            example = "T0123456789: digits and upper-case letters" if workspace else "C0123456789: letters and digits"
            raise ValueError(f"{shown(value)} is not a Slack {'workspace' if workspace else 'channel'} id (like {example}, "
                             "as AWS Chatbot takes it)")
        return value

    @field_validator("alert_emails")
    @classmethod
    def _distinct_emails(cls, emails: tuple[str, ...]) -> tuple[str, ...]:
        """Each address is one SNS subscription per topic, named after it (components/alerts/topic.py): the same
        address twice is a duplicate resource; in another case, the same mailbox subscribed twice."""
        folded = [email.casefold() for email in emails]
        duplicates = sorted({emails[folded.index(f)] for f in folded if folded.count(f) > 1})
        if duplicates:
            raise ValueError(f"lists {', '.join(duplicates)} more than once")
        return emails

    @field_validator("monthly_budget_usd")
    @classmethod
    def _positive_budget(cls, budget: int | None) -> int | None:
        if budget is not None and budget <= 0:
            raise ValueError(
                f"{budget} is not a budget: it must be a positive number of dollars, or left unset so that the "
                "budget is the worst case the caps allow for a month (the fleets at maxInstances, at most maxHourlyUsd)"
            )
        return budget

    @field_validator("job_max_attempts")
    @classmethod
    def _attempts_a_job_may_ask_for(cls, attempts: int) -> int:
        if attempts > MAX_ATTEMPTS_LIMIT:
            raise ValueError(
                f"{attempts} is more attempts than a job may ask for (at most {MAX_ATTEMPTS_LIMIT}, the job spec's "
                "limit), so every submission that takes the default would be refused"
            )
        return attempts

    @field_validator("log_retention_days")
    @classmethod
    def _retention(cls, days: int) -> int:
        if days not in LOG_RETENTION_DAYS:
            raise ValueError(f"{days} is not a CloudWatch Logs retention period (one of {LOG_RETENTION_DAYS})")
        return days

    @field_validator("budget_alert_percents")
    @classmethod
    def _ascending_percents(cls, percents: tuple[int, ...]) -> tuple[int, ...]:
        if not percents:
            raise ValueError("needs at least one threshold")
        if any(p <= 0 or p > 1000 for p in percents):
            raise ValueError(f"thresholds must be between 1 and 1000 percent, got {shown(list(percents))}")
        if list(percents) != sorted(set(percents)):
            raise ValueError(f"thresholds must be strictly increasing, got {shown(list(percents))}")
        if 100 not in percents:
            raise ValueError(f"must include 100 (the alert that stops job admission), got {shown(list(percents))}")
        return percents

    @field_validator("cost_allocation_tags")
    @classmethod
    def _no_reserved_tag_prefix(cls, tags: dict[str, str]) -> dict[str, str]:
        reserved = [key for key in tags if key.lower().startswith(("aws:", "mlfleet:"))]
        if reserved:
            raise ValueError(f"tag keys {shown(reserved)} use a reserved prefix (aws:, mlfleet:)")
        return tags

    @model_validator(mode="after")
    def _cross_field(self) -> StackConfig:
        problems = []
        stack_regions = set(self.regions)
        for name, fleet in self.fleets.items():
            for region in fleet.regions or ():
                if region not in stack_regions:
                    problems.append(f"mlfleet:fleets.{name}.regions: {region!r} is not in regions {list(self.regions)}")
            catalog = load_catalog()
            for region in fleet.regions or self.regions:
                unpriced = [t for t in fleet.instance_types if region not in catalog.get(t).regions()]
                if unpriced:
                    problems.append(
                        f"mlfleet:fleets.{name}: the catalog has no price for {unpriced} in {region!r}; "
                        "refresh it with `python -m lambdas.common.catalog_refresh`"
                    )
        for region in self.regions if not problems else ():  # a fleet problem above (a region outside the stack) says it already
            if not self.fleets_in(region):
                problems.append(f"mlfleet:regions: no fleet runs in {region!r} (each fleet's regions leaves it out), so "
                                "it would get a network and a cluster for nothing; remove it, or add it to a fleet's regions")
        for section, mapping in (("networks", self.networks), ("amiIds", self.ami_ids)):
            for region in mapping:
                if region not in stack_regions:
                    problems.append(f"mlfleet:{section}: {region!r} is not in regions {list(self.regions)}")
        if (self.slack_workspace_id is None) != (self.slack_channel_id is None):
            problems.append("mlfleet:slackWorkspaceId and mlfleet:slackChannelId must be set together")
        notifications = len(self.budget_alert_percents) + (1 if self.budget_forecast_percent else 0)
        if notifications > MAX_BUDGET_NOTIFICATIONS:
            problems.append(
                f"mlfleet:budgetAlertPercents: {notifications} notifications (with the forecast one) exceed the "
                f"{MAX_BUDGET_NOTIFICATIONS} AWS Budgets allows per budget"
            )
        if (release := self._release_after_the_reapers_mark()) is not None:
            problems.append(release)
        if self.adopt_job_ledger and not self.retain_job_ledger:
            problems.append("mlfleet:adoptJobLedger takes back a ledger kept by retainJobLedger: true; set both (the "
                            "import needs the declared table to match the kept one: deletion protection and "
                            "point-in-time recovery on)")
        if problems:
            raise Problems(problems)
        return self

    def _release_after_the_reapers_mark(self) -> str | None:
        """The scheduler's release delay must end before the reaper's idle window (docs/removal.md, "The release
        delay and the reaper"). An empty machine is idle to the reaper once the window has passed (docs/reaper.md,
        the idle contract): it marks it, mails that it acts after idleGraceMinutes, and acts then. A delay at or
        past window + grace never acts first, so the key would do nothing; one inside the grace removes every
        machine it releases before the grace the reaper's mail announced. Unset (the measured boot time) and 0
        are the documented choices and always below the window (30 minutes at least)."""
        delay, window, grace = self.release_after_empty_minutes, self.idle_window_minutes, self.idle_grace_minutes
        if delay is None or delay < window:
            return None
        if delay >= window + grace:
            why = (f"the reaper marks an empty machine idle after {window} minutes and removes it "
                   f"mlfleet:idleGraceMinutes ({grace}) later, at {window + grace} minutes, so the release would never "
                   "act first")
        else:
            why = (f"the reaper marks every empty machine idle after {window} minutes and mails that it removes it "
                   f"after mlfleet:idleGraceMinutes ({grace}); a release at {delay} minutes would remove it inside "
                   "the grace that mail announced")
        return (f"mlfleet:releaseAfterEmptyMinutes: {delay} is not below mlfleet:idleWindowMinutes ({window}): {why}; "
                f"set it below {window} (or leave it unset: the fleets' measured boot time), or raise "
                f"mlfleet:idleWindowMinutes above {delay}")

    @model_validator(mode="after")
    def _fits_the_job_functions(self) -> StackConfig:
        pairs = [(name, region) for name, fleet in self.fleets.items() for region in self.fleet_regions(fleet)]
        types = sum(len(self.fleets[name].instance_types) for name, _ in pairs)
        why = "the job functions get every fleet in a 4 KB Lambda environment"
        problems = []
        if len(self.regions) > MAX_REGIONS:
            problems.append(f"mlfleet:regions: {len(self.regions)} regions, at most {MAX_REGIONS} ({why})")
        if len(pairs) > MAX_FLEET_REGIONS:
            problems.append(f"mlfleet:fleets: {len(pairs)} fleet-region pairs, at most {MAX_FLEET_REGIONS} ({why})")
        if types > MAX_FLEET_REGION_INSTANCE_TYPES:
            problems.append(f"mlfleet:fleets: {types} instance types over the fleet-region pairs, at most "
                            f"{MAX_FLEET_REGION_INSTANCE_TYPES} ({why})")
        if problems:
            raise Problems(problems)
        return self

    @model_validator(mode="after")
    def _teams_fit_the_fleets(self) -> StackConfig:
        problems = []
        if self.default_team is not None and self.default_team not in self.teams:
            listed = ", ".join(sorted(self.teams)) or "none: set mlfleet:teams first"
            close = difflib.get_close_matches(self.default_team, list(self.teams), n=1)
            problems.append(f"mlfleet:defaultTeam: {shown(self.default_team)} is not one of mlfleet:teams ({listed})"
                            + (f"; did you mean {close[0]}?" if close else ""))
        capacity = self.fleet_gpus()
        for name, team in sorted(self.teams.items()):
            if team.max_gpus is not None and team.max_gpus > capacity:
                problems.append(f"mlfleet:teams.{name}.maxGpus: {team.max_gpus} is more GPUs than the fleets hold at "
                                f"their caps ({capacity}); lower it, or leave it unset for no quota")
        if problems:
            raise Problems(problems)
        return self

    def fleet_gpus(self) -> int:
        """GPUs the fleets hold at their caps, every fleet in every region it runs in."""
        return sum(fleet.max_instances * fleet.gpus_per_instance * len(self.fleet_regions(fleet))
                   for fleet in self.fleets.values())

    def fleet_regions(self, fleet: FleetConfig) -> tuple[str, ...]:
        return fleet.regions or self.regions

    def fleets_in(self, region: str) -> dict[str, FleetConfig]:
        return {name: fleet for name, fleet in self.fleets.items() if region in self.fleet_regions(fleet)}

    def base_tags(self) -> dict[str, str]:
        """Tags on everything taggable (DESIGN.md "Names users see")."""
        return {
            **self.cost_allocation_tags,
            tag_keys.ENVIRONMENT: self.environment,
            tag_keys.MANAGED_BY: tag_keys.MANAGED_BY_VALUE,
        }


def inner_type(annotation: Any) -> Any:
    """A field's type without Annotated[...] constraints and without `| None`: `tuple[str, ...]`, a model class."""
    while True:
        origin = typing.get_origin(annotation)
        if origin is typing.Annotated:
            annotation = typing.get_args(annotation)[0]
        elif origin in (typing.Union, types.UnionType):
            annotation = next(a for a in typing.get_args(annotation) if a is not type(None))
        else:
            return annotation


# Filled by the loader (stack name, `aws:region`, the other `aws:` keys), not set as `mlfleet:` keys.
DERIVED_FIELDS = ("environment", "home_region", "aws_provider")


def stack_keys() -> tuple[str, ...]:
    """The `mlfleet:` keys a stack file may set, in camelCase."""
    return tuple(f.alias for name, f in StackConfig.model_fields.items() if name not in DERIVED_FIELDS)
