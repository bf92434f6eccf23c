"""Everything mlfleet declares in one fleet region: network, AMI, ECS cluster and its GPU fleets, and the
checkpoint bucket the region's jobs save to."""

from __future__ import annotations

from dataclasses import dataclass, replace

import pulumi
import pulumi_aws as aws

from components.alerts import AlertTopic, AlertTopicArgs
from components.ami import AmiChoice, GpuAmi, GpuAmiArgs
from components.compute import (
    EcsGpuCluster,
    EcsGpuClusterArgs,
    GpuSpotFleet,
    GpuSpotFleetArgs,
    cluster_name,
    fleet_group_name,
)
from components.config import StackConfig
from components.dashboard import FleetDashboard, FleetDashboardArgs
from components.idle import Reaper, ReaperArgs
from components.jobs.jobs import ledger_name, queue_name
from components.network import ImageCache, ImageCacheArgs, Network, NetworkArgs, NetworkPlan
from components.resources import child, invoke
from components.storage import CheckpointBucket, CheckpointBucketArgs
from lambdas.jobs import checkpoints


@dataclass(frozen=True)
class FleetRegionArgs:
    region: str
    config: StackConfig
    # The region's image, chosen before anything was declared (components/program.py, components/ami choose_ami).
    ami: AmiChoice
    # The home region's alert topic when this is the home region; otherwise None, and the region gets
    # its own (CloudWatch alarms can only notify a topic in their region).
    alert_topic_arn: pulumi.Input[str] | None = None
    # Where the new VPC's subnets and endpoints go, planned before anything was declared (components/program.py).
    network_plan: NetworkPlan | None = None


def network_args(cfg: StackConfig, region: str) -> NetworkArgs:
    """The region's network as the stack config describes it (the team's VPC, or a new one)."""
    fleets = cfg.fleets_in(region)
    existing = cfg.networks.get(region)
    return NetworkArgs(
        region=region,
        instance_types=sorted({t for fleet in fleets.values() for t in fleet.instance_types}),
        tags=cfg.base_tags(),
        vpc_cidr=cfg.vpc_cidr,
        availability_zone_count=cfg.availability_zone_count,
        nat_gateway=cfg.nat_gateway,
        max_instances=sum(fleet.max_instances for fleet in fleets.values()),
        existing_vpc_id=existing.vpc_id if existing else None,
        existing_subnet_ids=existing.subnet_ids if existing else (),
    )


class FleetRegion(pulumi.ComponentResource):
    """Receives the region's provider in `opts.providers`; every child reaches it through the parent."""

    def __init__(self, name: str, args: FleetRegionArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("mlfleet:region:FleetRegion", name, None, opts)
        cfg, region = args.config, args.region
        tags = cfg.base_tags()
        fleets = cfg.fleets_in(region)

        if args.alert_topic_arn is None:
            self.alert_topic_arn = AlertTopic(
                f"{name}-alerts",
                AlertTopicArgs(topic_name=f"mlfleet-{cfg.environment}-alerts-{region}", emails=cfg.alert_emails, tags=tags),
                opts=child(self),
            ).topic_arn
        else:
            self.alert_topic_arn = pulumi.Output.from_input(args.alert_topic_arn)

        self.network = Network(
            f"{name}-net", replace(network_args(cfg, region), plan=args.network_plan), opts=child(self))
        self.ami = GpuAmi(
            f"{name}-ami",
            GpuAmiArgs(region=region, environment=cfg.environment, choice=args.ami),
            opts=child(self),
        )
        self.image_cache = ImageCache(
            f"{name}-images",
            ImageCacheArgs(region=region, environment=cfg.environment, tags=tags),
            opts=child(self),
        )
        # The bucket's policy names the job role and the role's policy names the bucket: the name is
        # computed first, then the cluster (job role), then the bucket.
        account_id = aws.get_caller_identity_output(opts=invoke(self)).account_id
        bucket_name = account_id.apply(lambda account: checkpoints.bucket_name(cfg.environment, account, region))
        self.cluster = EcsGpuCluster(
            f"{name}-ecs",
            EcsGpuClusterArgs(
                region=region,
                environment=cfg.environment,
                job_image=self.image_cache.image(cfg.job_image),
                log_retention_days=cfg.log_retention_days,
                tags=tags,
                checkpoint_bucket=bucket_name,
                account_id=account_id,
                pull_through_repositories_arn=self.image_cache.repositories_arn,
            ),
            opts=child(self),
        )
        self.checkpoints = CheckpointBucket(
            f"{name}-checkpoints",
            CheckpointBucketArgs(region=region, bucket_name=bucket_name, writer_role_arn=self.cluster.job_role_arn,
                                 retention_days=cfg.checkpoint_retention_days, tags=tags),
            opts=child(self),
        )
        self.fleets: dict[str, GpuSpotFleet] = {}
        for fleet_name, fleet in fleets.items():
            self.fleets[fleet_name] = GpuSpotFleet(
                f"{name}-{fleet_name}",
                GpuSpotFleetArgs(
                    region=region,
                    environment=cfg.environment,
                    fleet_name=fleet_name,
                    fleet=fleet,
                    cluster_name=cluster_name(cfg.environment),
                    vpc_id=self.network.vpc_id,
                    subnet_ids=self.network.private_subnet_ids,
                    image_id=self.ami.image_id,
                    root_volume_gib=cfg.root_volume_gib,
                    tags=tags,
                    alert_topic_arn=self.alert_topic_arn,
                    refresh_min_healthy_percent=cfg.ami_refresh_min_healthy_percent,
                    cluster=self.cluster.cluster,
                ),
                opts=child(self),
            )
        self.reaper = Reaper(
            f"{name}-reaper",
            ReaperArgs(
                region=region,
                environment=cfg.environment,
                cluster_name=self.cluster.cluster_name,
                fleets={fleet_name: fleet.asg_name for fleet_name, fleet in self.fleets.items()},
                alert_topic_arn=self.alert_topic_arn,
                window_minutes=cfg.idle_window_minutes,
                cpu_percent=cfg.idle_cpu_percent,
                gpu_percent=cfg.idle_gpu_percent,
                grace_minutes=cfg.idle_grace_minutes,
                schedule_minutes=cfg.reaper_schedule_minutes,
                dry_run=cfg.reaper_dry_run,
                max_actions_per_run=cfg.reaper_max_actions_per_run,
                log_retention_days=cfg.log_retention_days,
                tags=tags,
                home_region=cfg.home_region,
                jobs_table=ledger_name(cfg.environment),
                disruption_budget_percent=cfg.disruption_budget_percent,
            ),
            opts=child(self),
        )
        self.dashboard = FleetDashboard(
            f"{name}-dashboard",
            FleetDashboardArgs(
                environment=cfg.environment,
                region=region,
                home_region=cfg.home_region,
                asg_names={fleet_name: fleet_group_name(cfg.environment, fleet_name) for fleet_name in fleets},
                queue_name=queue_name(cfg.environment),
                dead_letter_queue_name=queue_name(cfg.environment, dead_letter=True),
            ),
            opts=child(self),
        )
        self.register_outputs(self.outputs())

    def outputs(self) -> dict:
        return {
            "clusterName": self.cluster.cluster_name,
            "clusterArn": self.cluster.cluster_arn,
            "taskDefinitionFamily": self.cluster.task_definition_family,
            "amiId": self.ami.image_id,
            "amiSource": self.ami.source,
            "vpcId": self.network.vpc_id,
            "checkpointBucket": self.checkpoints.bucket_name,
            "alertTopicArn": self.alert_topic_arn,
            "fleets": {name: {"asgName": fleet.asg_name, "idleAlarm": self.reaper.alarm_names[name]}
                       for name, fleet in self.fleets.items()},
            "reaperFunction": self.reaper.function_name,
            "dashboard": self.dashboard.dashboard_name,
        }
