"""The whole mlfleet program for one stack: validated config in, resources and outputs out."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulumi
import pulumi_aws as aws

from components.alerts import SlackChannel, SlackChannelArgs
from components.ami import SOURCES, STOCK_GPU_AMI_PARAMETER, AmiChoice, choose_ami
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


@dataclass(frozen=True)
class FleetImage:
    """What the fleets need of the image a region boots, as EC2 describes it: its root device and that device's
    snapshot size. `source` says how the image was chosen (components/ami SOURCES)."""
    region: str
    source: str
    ami_id: str
    root_device_name: str | None
    root_device_type: str | None
    root_volume_gib: int | None  # None: the root device's mapping has no EBS volume size
    unreadable: str | None = None  # why EC2 did not describe the image (the provider's failure); None: it did


def fleet_image(region: str, choice: AmiChoice, image: Any) -> FleetImage:
    """The root device of aws.ec2.get_ami's result: the block device mapping named `root_device_name`, whose `ebs`
    is a map of strings (`ebs["volume_size"]`: pulumi_aws.ec2.GetAmiBlockDeviceMappingResult; terraform-provider-aws
    ec2_ami_data_source.go flattenAMIBlockDeviceMappings writes the size as a decimal string). An image may map
    other volumes too, larger ones among them, so the root is found by its name, never by position or size."""
    root = next((m for m in image.block_device_mappings or () if m.device_name == image.root_device_name), None)
    size = str((root.ebs or {}).get("volume_size") or "") if root is not None else ""
    return FleetImage(region, choice.source, choice.ami_id, image.root_device_name, image.root_device_type,
                      int(size) if size.isdigit() else None)


@dataclass(frozen=True)
class _Wording:
    """How the checks speak of the images of one source (components/ami SOURCES). Format strings over `region`,
    `ami`, `env` (the environment), `gib` (mlfleet:rootVolumeGiB), `parameter` (the stock image's) and `what` (an
    image that would do)."""
    label: str    # the source's images, in the header of a list of problems
    named: str    # one image: the stack key that chose it, or how it was found
    whose: str    # the source's images, in the root-size problem
    instead: str  # what to boot instead of an image that does not suit
    smaller: str  # the fix for a root too large, besides a larger mlfleet:rootVolumeGiB
    missing: str  # the fix for an image EC2 does not find


_BUILD = "make ami ENV={env}"
_WORDING = {
    "pinned": _Wording(
        label="the pinned AMIs", named="mlfleet:amiIds.{region}: {ami}", whose="the AMI mlfleet:amiIds pins",
        instead="pin {what}", smaller="pin an image whose root volume is at most {gib} GiB",
        missing="pin an image that exists in that region and that this account may launch"),
    "manifest": _Wording(
        label="the images packer/manifest.json records",
        named="{region}: the image packer/manifest.json records for {env!r}, {ami}",
        whose="the image packer/manifest.json records for {env!r}",
        instead=f"build {{what}} ({_BUILD} records it in packer/manifest.json) or pin one in mlfleet:amiIds.{{region}}",
        smaller=f"build one with a root_volume_gib of at most {{gib}} ({_BUILD} records it in packer/manifest.json), "
                "or pin one in mlfleet:amiIds",
        missing=f"build a new one ({_BUILD} records it in packer/manifest.json) or pin an image in "
                "mlfleet:amiIds.{region}"),
    "account": _Wording(
        label="the images this account built", named="{region}: the newest image this account built for {env!r}, {ami}",
        whose="the newest image this account built for {env!r}",
        instead=f"build {{what}} ({_BUILD}; the fleets take the newest) or pin one in mlfleet:amiIds.{{region}}",
        smaller=f"build one with a root_volume_gib of at most {{gib}} ({_BUILD}; the fleets take the newest), or pin "
                "one in mlfleet:amiIds",
        missing="it was listed a moment before: run again, or pin an image in mlfleet:amiIds.{region}"),
    "stock": _Wording(
        label="the stock ECS GPU AMI", named="{region}: the stock ECS GPU AMI ({parameter}), {ami}",
        whose="the stock ECS GPU AMI ({parameter})",
        instead=f"pin {{what}} in mlfleet:amiIds.{{region}}, or build mlfleet's image ({_BUILD})",
        smaller=f"pin an image whose root volume is at most {{gib}} GiB in mlfleet:amiIds, or build mlfleet's image "
                f"({_BUILD})",
        missing="the public parameter names an image EC2 does not find there: run again, or pin an image in "
                "mlfleet:amiIds.{region}"),
}


def _say(cfg: StackConfig, image: FleetImage, part: str, what: str = "") -> str:
    """`part` of the wording of `image`'s source (a _Wording field), filled in for `image`."""
    return getattr(_WORDING[image.source], part).format(
        region=image.region, ami=image.ami_id, env=cfg.environment, gib=cfg.root_volume_gib,
        parameter=STOCK_GPU_AMI_PARAMETER, what=what)


def read_images(choices: dict[str, AmiChoice], providers: dict) -> dict[str, FleetImage]:
    """Each region's chosen image, whatever its source, as EC2 describes it, read once, through the region's
    provider (an AMI id is regional), before any resource is declared. An image-id filter finds exactly that image:
    the account's own, one shared with it, or a public one such as the stock ECS GPU AMI (botocore ec2
    DescribeImages: "public images, private images that you own, and private images owned by other Amazon Web
    Services accounts for which you have explicit launch permissions"); the provider fails when there is none
    (pulumi_aws.ec2.get_ami: "If more or less than a single match is returned by the search, this call will fail"),
    and that failure is kept on the image for check_images to list with the other problems."""
    images = {}
    for region, choice in sorted(choices.items()):
        try:
            found = aws.ec2.get_ami(filters=[{"name": "image-id", "values": [choice.ami_id]}],
                                    opts=pulumi.InvokeOptions(provider=providers[region]))
        except Exception as error:  # a failed invoke is a plain Exception (pulumi/runtime/invoke.py)
            images[region] = FleetImage(region, choice.source, choice.ami_id, None, None, None, str(error))
            continue
        images[region] = fleet_image(region, choice, found)
    return images


def check_images(cfg: StackConfig, images: dict[str, FleetImage]) -> None:
    """An image a region boots must suit the fleets' launch template: EC2 finds it, its root device is the one the
    template sizes and encrypts (components/compute/fleet.py ROOT_DEVICE; botocore ec2 Image.RootDeviceName), that
    root is an EBS volume (Image.RootDeviceType, "ebs" or "instance-store"), and mlfleet:rootVolumeGiB holds its
    snapshot (EC2 refuses a smaller one: botocore ec2 EbsBlockDevice.VolumeSize, "equal to or larger than the
    snapshot size"). The same rules for every source, pinned, manifest, account and stock; every problem of every
    image in one error, each naming the stack key or the source, the bad value and the fix."""
    problems, too_big = [], {source: {} for source in SOURCES}  # problems: (source, message)
    for region, image in sorted(images.items()):
        named = _say(cfg, image, "named")
        if image.unreadable is not None:
            problems.append((image.source, (
                f"{named} cannot be read in {region} ({image.unreadable}); {_say(cfg, image, 'missing')}")))
        elif image.root_device_name != ROOT_DEVICE:
            fix = _say(cfg, image, "instead", f"an image whose root device is {ROOT_DEVICE}")
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
                f"{_say(cfg, image, 'instead', 'an EBS-backed image')}")))
        elif image.root_volume_gib > cfg.root_volume_gib:
            too_big[image.source][region] = image
    sizes = []  # listed first: one fix, a larger mlfleet:rootVolumeGiB, mends them all
    for source, found in too_big.items():
        if not found:
            continue
        listed = ", ".join(f"{r}: {i.ami_id}, {i.root_volume_gib} GiB" for r, i in sorted(found.items()))
        largest = max(i.root_volume_gib for i in found.values())
        first = found[min(found)]
        sizes.append((source, (
            f"mlfleet:rootVolumeGiB={cfg.root_volume_gib} is smaller than the root volume of "
            f"{_say(cfg, first, 'whose')} ({listed}), and EC2 refuses to launch an instance whose root volume is "
            f"smaller than its image's snapshot, so no fleet instance would launch; set mlfleet:rootVolumeGiB to "
            f"{largest} or more, or {_say(cfg, first, 'smaller')}")))
    problems = sizes + problems
    if len(problems) == 1:
        raise ProgramError(problems[0][1])
    if problems:
        labels = [_WORDING[source].label for source in SOURCES if any(s == source for s, _ in problems)]
        which = labels[0] if len(labels) == 1 else ", ".join(labels[:-1]) + " and " + labels[-1]
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

    providers = regional_providers([cfg.home_region, *cfg.regions, BILLING_METRICS_REGION], cfg.base_tags(),
                                   cfg.aws_provider.provider_args())
    # Each region's image is chosen and read, whatever its source, through the region's provider (the providers are
    # declared, nothing else yet): an image the fleets cannot boot stops the program here, not at the scheduler's
    # first purchase, and a lookup that fails leaves nothing half-created (pulumi/pulumi#7050, below).
    amis = {
        region: choose_ami(region, cfg.environment, cfg.ami_ids.get(region),
                           built[region].ami_id if region in built else None,
                           pulumi.InvokeOptions(provider=providers[region]))
        for region in cfg.regions
    }
    check_images(cfg, read_images(amis, providers))
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
