"""The whole mlfleet program for one stack: validated config in, resources and outputs out."""

from __future__ import annotations

from pathlib import Path

import pulumi
import pulumi_aws as aws

from components.alerts import SlackChannel, SlackChannelArgs
from components.billing import estimate, monthly_budget, over_budget_warning, unreachable_fleets_warning
from components.config import StackConfig
from components.config.regions import BILLING_METRICS_REGION
from components.home import HomeRegion, HomeRegionArgs
from components.jobs import EventForwarder, EventForwarderArgs, JobService, JobServiceArgs
from components.providers import regional_providers, with_provider
from components.network import plan_network
from components.region import FleetRegion, FleetRegionArgs, network_args
from packer.manifest import ManifestError, load_manifest

# Written by `make ami` (Packer's manifest post-processor); absent in a fresh clone.
PACKER_MANIFEST = Path(__file__).resolve().parent.parent / "packer" / "manifest.json"


class ProgramError(pulumi.RunError):
    """A problem found before any resource is declared (the preview stops with this message).

    A `pulumi.RunError`, so Pulumi prints the message alone, not a traceback (see components/config/loader.py).
    """


def check_root_volume(cfg: StackConfig, built: dict) -> None:
    """The fleets' root volume must hold the image's snapshot: EC2 refuses a launch whose root volume is smaller
    (botocore ec2 EbsBlockDevice.VolumeSize: "equal to or larger than the snapshot size"), so every instance of
    the fleet would fail to launch. Checked for the images packer/manifest.json records (a pinned AMI wins over
    them and is not checked: its size is not known before the launch)."""
    too_big = {region: image for region, image in built.items()
               if region in cfg.regions and region not in cfg.ami_ids
               and image.root_volume_gib is not None and image.root_volume_gib > cfg.root_volume_gib}
    if too_big:
        images = ", ".join(f"{r}: {i.ami_id}" for r, i in sorted(too_big.items()))
        largest = max(i.root_volume_gib for i in too_big.values())
        raise ProgramError(
            f"mlfleet:rootVolumeGiB={cfg.root_volume_gib} is smaller than the root volume the AMI was built with "
            f"({largest} GiB; {images} in {PACKER_MANIFEST.name}), and EC2 refuses to launch an instance whose root "
            f"volume is smaller than its image's snapshot; set mlfleet:rootVolumeGiB to {largest} or more, or build "
            f"the image with a smaller root_volume_gib (make ami ENV={cfg.environment})")


def deploy(cfg: StackConfig) -> dict:
    """Declare every resource of the stack and export what users need. Returns the outputs."""
    cost = estimate(cfg)
    for warning in (over_budget_warning(cfg, cost), unreachable_fleets_warning(cost)):
        if warning:
            pulumi.log.warn(warning)

    try:
        built = load_manifest(PACKER_MANIFEST, cfg.environment)
    except ManifestError as error:
        raise ProgramError(f"{error}; fix or delete it (make ami ENV={cfg.environment} writes a new one)") from None
    check_root_volume(cfg, built)

    providers = regional_providers([cfg.home_region, *cfg.regions, BILLING_METRICS_REGION], cfg.base_tags(),
                                   cfg.aws_provider.provider_args())
    # Each new VPC's zones and endpoints come from AWS's offerings: planned for every region before the first
    # resource is declared, so that a region that cannot be built (plan_network's NetworkError) stops
    # `pulumi up` before anything is created. The engine starts creating each resource as it is declared
    # (resources are registered while the program runs), so an error raised later would leave the stack
    # half-deployed (pulumi/pulumi#7050: the resources declared before a program's exception are created).
    network_plans = {
        region: plan_network(args, pulumi.InvokeOptions(provider=providers[region]))
        for region in cfg.regions
        if (args := network_args(cfg, region)).existing_vpc_id is None
    }
    home = HomeRegion(
        f"{cfg.environment}-home",
        HomeRegionArgs(config=cfg, cost=cost, billing_provider=providers[BILLING_METRICS_REGION]),
        opts=with_provider(providers[cfg.home_region]),
    )
    # A fleet region alerts on its own topic, mlfleet-<env>-alerts-<region>, except the home region (the home
    # topic) and us-east-1 when home is elsewhere: the billing topic there already has that name, and SNS
    # would hand a second CreateTopic the same topic, owned by two resources.
    region_topics = {BILLING_METRICS_REGION: home.billing_topic_arn, cfg.home_region: home.alert_topic_arn}
    regions = {
        region: FleetRegion(
            f"{cfg.environment}-{region}",
            FleetRegionArgs(
                region=region,
                config=cfg,
                alert_topic_arn=region_topics.get(region),
                manifest_ami_id=built[region].ami_id if region in built else None,
                network_plan=network_plans.get(region),
            ),
            opts=with_provider(providers[region]),
        )
        for region in cfg.regions
    }
    account_id = aws.get_caller_identity_output(opts=pulumi.InvokeOptions(provider=providers[cfg.home_region])).account_id
    jobs = JobService(
        f"{cfg.environment}-jobs",
        JobServiceArgs(config=cfg, alert_topic_arn=home.alert_topic_arn, admission_parameter=home.admission_parameter,
                       cluster_arns=[r.cluster.cluster_arn for r in regions.values()],
                       account_id=account_id),
        opts=with_provider(providers[cfg.home_region]),
    )
    for region, component in regions.items():
        if region != cfg.home_region:
            EventForwarder(
                f"{cfg.environment}-{region}-job-events",
                EventForwarderArgs(environment=cfg.environment, region=region, home_region=cfg.home_region,
                                   account_id=account_id, cluster_arn=component.cluster.cluster_arn,
                                   tags=cfg.base_tags()),
                opts=with_provider(providers[region]),
            )
    if cfg.slack_workspace_id and cfg.slack_channel_id:
        # The billing topic is the alert topic when home is us-east-1: SlackChannel takes each topic once.
        topics = [home.alert_topic_arn, home.billing_topic_arn]
        topics += [r.alert_topic_arn for name, r in regions.items() if name not in region_topics]
        topics.append(jobs.slack_notification_topic_arn)  # submissions that asked for --notify slack
        SlackChannel(
            f"{cfg.environment}-slack",
            SlackChannelArgs(environment=cfg.environment, workspace_id=cfg.slack_workspace_id,
                             channel_id=cfg.slack_channel_id, topic_arns=topics, tags=cfg.base_tags()),
            opts=with_provider(providers[cfg.home_region]),
        )

    outputs = {
        "environment": cfg.environment,
        "homeRegion": cfg.home_region,
        "alertTopicArn": home.alert_topic_arn,
        "admissionParameter": home.admission_parameter,
        "jobs": {"queueUrl": jobs.queue_url, "deadLetterQueueUrl": jobs.dead_letter_queue_url,
                 "ledger": jobs.ledger_name, "scheduler": jobs.scheduler_name},
        "budget": {"name": home.billing.budget_name, "monthlyUsd": monthly_budget(cfg, cost)},
        "cost": cost.outputs(),
        "regions": {region: component.outputs() for region, component in regions.items()},
    }
    for key, value in outputs.items():
        pulumi.export(key, value)
    return outputs
