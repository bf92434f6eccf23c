"""The stack configuration as one validated, immutable model.

Every `mlfleet:*` key of a stack file maps to one field here (camelCase in YAML, snake_case in
Python). Defaults live here and only here: Pulumi.yaml declares types and descriptions, never
defaults. Cross-field rules (min <= max, fleet regions within the stack's regions, ...) are model
validators so that one error lists every problem at once.
"""

from __future__ import annotations

import difflib
import re
from typing import Annotated

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

from .regions import AWS_REGIONS

ENVIRONMENT_NAME = re.compile(r"^[a-z][a-z0-9-]{1,19}$")
EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
AMI_ID = re.compile(r"^ami-[0-9a-f]{8}([0-9a-f]{9})?$")
VPC_ID = re.compile(r"^vpc-[0-9a-f]{8}([0-9a-f]{9})?$")
SUBNET_ID = re.compile(r"^subnet-[0-9a-f]{8}([0-9a-f]{9})?$")
FLEET_NAME = re.compile(r"^[a-z][a-z0-9]{0,11}$")
# CloudWatch Logs accepts only these retention periods (PutRetentionPolicy).
LOG_RETENTION_DAYS = (1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653)
# AWS Budgets allows at most ten notifications per budget.
MAX_BUDGET_NOTIFICATIONS = 10

DEFAULT_INSTANCE_TYPES = ("g6.2xlarge", "g5.2xlarge", "g4dn.2xlarge", "g6.4xlarge", "g5.4xlarge")


def _known_region(region: str) -> str:
    if region not in AWS_REGIONS:
        raise ValueError(f"{region!r} is not an AWS region mlfleet knows")
    return region


def _gpu_instance_type(name: str) -> str:
    catalog = load_catalog()
    if name not in catalog:
        close = difflib.get_close_matches(name, catalog.names(), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else " (lambdas/common/data/instance_catalog.json lists them)"
        raise ValueError(f"{name!r} is not a GPU instance type in the catalog{hint}")
    return name


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


class ExistingNetwork(_Model):
    """A VPC the team already has. mlfleet adds no route, NAT or endpoint to it: egress is theirs."""

    vpc_id: Annotated[str, StringConstraints(pattern=VPC_ID.pattern)]
    subnet_ids: tuple[Annotated[str, StringConstraints(pattern=SUBNET_ID.pattern)], ...] = Field(min_length=1)


class StackConfig(_Model):
    """Everything one stack (one environment) declares."""

    # Not stack keys: filled by the loader from the stack name and `aws:region`.
    environment: str
    home_region: Region

    regions: tuple[Region, ...] = Field(min_length=1)
    fleets: dict[Annotated[str, StringConstraints(pattern=FLEET_NAME.pattern)], FleetConfig] = Field(min_length=1)
    networks: dict[Region, ExistingNetwork] = Field(default_factory=dict)
    vpc_cidr: Annotated[str, StringConstraints(pattern=r"^\d{1,3}(\.\d{1,3}){3}/(1[6-9]|2[0-2])$")] = "10.80.0.0/16"
    availability_zone_count: int = Field(default=3, ge=1, le=6)
    nat_gateway: bool = False
    root_volume_gib: int = Field(default=200, ge=100, le=16384, alias="rootVolumeGiB")
    ami_ids: dict[Region, Annotated[str, StringConstraints(pattern=AMI_ID.pattern)]] = Field(default_factory=dict)
    # A new AMI rolls out through an ASG instance refresh that keeps this share of the fleet in service.
    ami_refresh_min_healthy_percent: int = Field(default=90, ge=0, le=100)
    # From ECR Public, which every region reaches through its pull-through cache (components/network).
    job_image: str = Field(default="public.ecr.aws/nvidia/cuda:12.6.3-base-ubuntu24.04", min_length=1)
    log_retention_days: int = 30

    cost_allocation_tags: dict[TagKey, TagValue] = Field(default_factory=dict)
    # AWS Budgets takes at most ten e-mail subscribers per notification.
    alert_emails: tuple[Annotated[str, StringConstraints(pattern=EMAIL.pattern)], ...] = Field(min_length=1, max_length=10)
    slack_workspace_id: str | None = None
    slack_channel_id: str | None = None

    # Money. The budget may be derived from the caps (None: the fleets' worst-case monthly cost).
    monthly_budget_usd: int | None = Field(default=None, gt=0)
    budget_alert_percents: tuple[int, ...] = (25, 50, 75, 100)
    budget_forecast_percent: int | None = Field(default=100, gt=0, le=1000)
    # Activating needs the tag to have appeared in billing data once (up to a day after first use).
    activate_cost_allocation_tag: bool = False
    max_hourly_usd: int = Field(gt=0)

    # Idleness (DESIGN.md "Idle").
    idle_window_minutes: int = Field(default=90, ge=30, le=1440)
    idle_cpu_percent: int = Field(default=10, ge=1, le=99)
    idle_gpu_percent: int = Field(default=5, ge=1, le=99)
    idle_grace_minutes: int = Field(default=30, ge=0, le=1440)
    reaper_schedule_minutes: int = Field(default=10, ge=10, le=15)
    reaper_dry_run: bool = False
    reaper_max_actions_per_run: int = Field(default=20, gt=0, le=500)

    # Jobs.
    job_max_attempts: int = Field(default=3, ge=1, le=20)
    rebalance_timeout_minutes: int = Field(default=30, ge=5, le=360)

    # Teardown: keep the job ledger when the stack is destroyed (prod).
    retain_job_ledger: bool = False

    @field_validator("environment")
    @classmethod
    def _environment_name(cls, name: str) -> str:
        if not ENVIRONMENT_NAME.match(name):
            raise ValueError(f"stack name {name!r} must be 2-20 characters of a-z, 0-9 and '-', starting with a letter")
        return name

    @field_validator("regions")
    @classmethod
    def _distinct_regions(cls, regions: tuple[str, ...]) -> tuple[str, ...]:
        duplicates = sorted({r for r in regions if regions.count(r) > 1})
        if duplicates:
            raise ValueError(f"lists {', '.join(duplicates)} more than once")
        return regions

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
                f"{image!r} comes from {'Docker Hub' if registry == DOCKER_HUB else registry}, which "
                f"{', '.join(unreachable)} cannot reach without internet egress (natGateway is false); "
                f"use {' or '.join(fixes)}, or set mlfleet:natGateway: true"
            )
        return image

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
            raise ValueError(f"thresholds must be between 1 and 1000 percent, got {list(percents)}")
        if list(percents) != sorted(set(percents)):
            raise ValueError(f"thresholds must be strictly increasing, got {list(percents)}")
        if 100 not in percents:
            raise ValueError(f"must include 100 (the alert that stops job admission), got {list(percents)}")
        return percents

    @field_validator("cost_allocation_tags")
    @classmethod
    def _no_reserved_tag_prefix(cls, tags: dict[str, str]) -> dict[str, str]:
        reserved = [key for key in tags if key.lower().startswith(("aws:", "mlfleet:"))]
        if reserved:
            raise ValueError(f"tag keys {reserved} use a reserved prefix (aws:, mlfleet:)")
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
        if problems:
            raise ValueError("\n  - ".join(problems))
        return self

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


# Filled by the loader (stack name, `aws:region`), not set as `mlfleet:` keys.
DERIVED_FIELDS = ("environment", "home_region")


def stack_keys() -> tuple[str, ...]:
    """The `mlfleet:` keys a stack file may set, in camelCase."""
    return tuple(f.alias for name, f in StackConfig.model_fields.items() if name not in DERIVED_FIELDS)
