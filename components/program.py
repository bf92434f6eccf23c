"""The whole mlfleet program for one stack: validated config in, resources and outputs out."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulumi
import pulumi_aws as aws

from components.alerts import SlackChannel, SlackChannelArgs
from components.ami import AmiChoice, choose_ami
from components.billing import estimate, monthly_budget, over_budget_warning, unreachable_fleets_warning
from components.compute.fleet import ROOT_DEVICE
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
    the fleet would fail to launch. Checked here for the images packer/manifest.json records; a pinned AMI wins
    over them and is checked by check_images, from what EC2 says of it."""
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


# The sources whose image deploy() reads from EC2 before any resource is declared. A `manifest` image is held to
# the root volume Packer recorded (check_root_volume); a `stock` one needs no read: its root is smaller than any
# mlfleet:rootVolumeGiB the config model accepts (components/ami STOCK_ROOT_VOLUME_GIB).
READ_SOURCES = ("pinned", "account")


@dataclass(frozen=True)
class FleetImage:
    """What the fleets need of the image a region boots, as EC2 describes it: its root device and that device's
    snapshot size. `source` says how the image was chosen (components/ami SOURCES): pinned or account."""
    region: str
    source: str
    ami_id: str
    root_device_name: str | None
    root_device_type: str | None
    root_volume_gib: int | None  # None: the root device's mapping has no EBS volume size


def fleet_image(region: str, choice: AmiChoice, image: Any) -> FleetImage:
    """The root device of aws.ec2.get_ami's result: the block device mapping named `root_device_name`, whose `ebs`
    is a map of strings (`ebs["volume_size"]`: pulumi_aws.ec2.GetAmiBlockDeviceMappingResult; terraform-provider-aws
    ec2_ami_data_source.go flattenAMIBlockDeviceMappings writes the size as a decimal string). An image may map
    other volumes too, larger ones among them, so the root is found by its name, never by position or size."""
    root = next((m for m in image.block_device_mappings or () if m.device_name == image.root_device_name), None)
    size = str((root.ebs or {}).get("volume_size") or "") if root is not None else ""
    return FleetImage(region, choice.source, choice.ami_id, image.root_device_name, image.root_device_type,
                      int(size) if size.isdigit() else None)


def _named(cfg: StackConfig, region: str, source: str, ami_id: str) -> str:
    """How an error names a region's image: by the key that pins it, or by how the account's image was found."""
    if source == "pinned":
        return f"mlfleet:amiIds.{region}: {ami_id}"
    return f"{region}: the newest image this account built for {cfg.environment!r}, {ami_id}"


def _instead(cfg: StackConfig, image: FleetImage, what: str) -> str:
    """What to boot instead of `image`: `what` describes an image that would do."""
    if image.source == "pinned":
        return f"pin {what}"
    return (f"build {what} (make ami ENV={cfg.environment}; the fleets take the newest) or pin one in "
            f"mlfleet:amiIds.{image.region}")


def read_images(cfg: StackConfig, choices: dict[str, AmiChoice], providers: dict) -> dict[str, FleetImage]:
    """Each region's image of READ_SOURCES as EC2 describes it, read once, through the region's provider (an AMI
    id is regional), before any resource is declared. An image-id filter finds exactly that image: the account's
    own, one shared with it, or a public one (DescribeImages); the provider fails when there is none."""
    images = {}
    for region, choice in sorted(choices.items()):
        if choice.source not in READ_SOURCES:
            continue
        try:
            found = aws.ec2.get_ami(filters=[{"name": "image-id", "values": [choice.ami_id]}],
                                    opts=pulumi.InvokeOptions(provider=providers[region]))
        except Exception as error:  # a failed invoke is a plain Exception (pulumi/runtime/invoke.py)
            fix = ("pin an image that exists in that region and that this account may launch"
                   if choice.source == "pinned" else
                   f"it was listed a moment before: run again, or pin an image in mlfleet:amiIds.{region}")
            raise ProgramError(f"{_named(cfg, region, choice.source, choice.ami_id)} cannot be read in {region} "
                               f"({error}); {fix}") from None
        images[region] = fleet_image(region, choice, found)
    return images


def check_images(cfg: StackConfig, images: dict[str, FleetImage]) -> None:
    """An image a region boots must suit the fleets' launch template: its root device is the one the template sizes
    and encrypts (components/compute/fleet.py ROOT_DEVICE), and mlfleet:rootVolumeGiB holds its snapshot (EC2
    refuses a smaller one: botocore ec2 EbsBlockDevice.VolumeSize, "equal to or larger than the snapshot size").
    The same rules for a pinned image and for the account's; every problem of every image in one error."""
    problems, too_big = [], {source: {} for source in READ_SOURCES}  # problems: (source, message)
    for region, image in sorted(images.items()):
        named = _named(cfg, region, image.source, image.ami_id)
        if image.root_device_name != ROOT_DEVICE:
            fix = _instead(cfg, image, f"an image whose root device is {ROOT_DEVICE}")
            if image.source == "pinned":
                fix += f" (mlfleet's build, make ami ENV={cfg.environment}, or the ECS GPU AMI)"
            problems.append((image.source, (
                f"{named} boots from {image.root_device_name}, and the fleets' launch template sizes and encrypts "
                f"{ROOT_DEVICE}: the image's root would keep its own size and every instance would get an extra "
                f"empty {cfg.root_volume_gib} GiB volume; {fix}")))
        elif image.root_volume_gib is None:
            problems.append((image.source, (
                f"{named}'s root device {image.root_device_name} has no EBS volume ({image.root_device_type}); the "
                f"fleets boot from an EBS root volume at {ROOT_DEVICE}, so "
                f"{_instead(cfg, image, 'an EBS-backed image')}")))
        elif image.root_volume_gib > cfg.root_volume_gib:
            too_big[image.source][region] = image
    sizes = []  # listed first: one fix, a larger mlfleet:rootVolumeGiB, mends them all
    for source, found in too_big.items():
        if not found:
            continue
        listed = ", ".join(f"{r}: {i.ami_id}, {i.root_volume_gib} GiB" for r, i in sorted(found.items()))
        largest = max(i.root_volume_gib for i in found.values())
        if source == "pinned":
            whose = "the AMI mlfleet:amiIds pins"
            fix = f"pin an image whose root volume is at most {cfg.root_volume_gib} GiB"
        else:
            whose = f"the newest image this account built for {cfg.environment!r}"
            fix = (f"build one with a root_volume_gib of at most {cfg.root_volume_gib} (make ami "
                   f"ENV={cfg.environment}; the fleets take the newest), or pin one in mlfleet:amiIds")
        sizes.append((source, (
            f"mlfleet:rootVolumeGiB={cfg.root_volume_gib} is smaller than the root volume of {whose} ({listed}), and "
            f"EC2 refuses to launch an instance whose root volume is smaller than its image's snapshot, so no fleet "
            f"instance would launch; set mlfleet:rootVolumeGiB to {largest} or more, or {fix}")))
    problems = sizes + problems
    if len(problems) == 1:
        raise ProgramError(problems[0][1])
    if problems:
        which = " and ".join(label for source, label in (("pinned", "the pinned AMIs"),
                                                          ("account", "the images this account built"))
                             if any(s == source for s, _ in problems))
        raise ProgramError(f"{len(problems)} problems with {which}:\n  - " + "\n  - ".join(m for _, m in problems))


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
    # Each region's image is chosen, and a pinned or account image read, through the region's provider (the
    # providers are declared, nothing else yet): an image the fleets cannot boot stops the program here, not at the
    # scheduler's first purchase, and a lookup that fails leaves nothing half-created (pulumi/pulumi#7050, below).
    amis = {
        region: choose_ami(region, cfg.environment, cfg.ami_ids.get(region),
                           built[region].ami_id if region in built else None,
                           pulumi.InvokeOptions(provider=providers[region]))
        for region in cfg.regions
    }
    check_images(cfg, read_images(cfg, amis, providers))
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
                ami=amis[region],
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
