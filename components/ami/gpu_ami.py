"""Which AMI a region's GPU fleets boot.

The choice is made once per region, at preview time, so a new image shows up in `pulumi preview` as a
launch-template change (and the ASG's instance refresh rolls it out). choose_ami makes it, every lookup included,
before any resource is declared (components/program.py deploy()), and hands it to GpuAmi, which looks nothing up:
a lookup that fails then stops `pulumi up` with nothing half-created. Resolution order, first match wins:

1. `pinned`: the AMI the stack config pins for the region (`mlfleet:amiIds`);
2. `manifest`: the AMI the last Packer build recorded for the region in `packer/manifest.json`
   (the program reads it with packer.manifest, which fails on a malformed file: never a silent stale image);
3. `account`: the newest available image this account built for the environment with mlfleet's Packer
   template, found by its tags;
4. `stock`: the Amazon ECS GPU-optimized Amazon Linux 2023 AMI from its public SSM parameter, with a
   warning in the preview (no tuned limits, no pinned driver, no GPU metrics: the reaper then sees the
   fleet as busy, never idle).

deploy() reads the chosen image from EC2 whatever its source, and refuses one whose root the fleets' launch template
cannot boot (components/program.py read_images, check_images).
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from lambdas.common import tags as tag_keys

STOCK_GPU_AMI_PARAMETER = "/aws/service/ecs/optimized-ami/amazon-linux-2023/gpu/recommended/image_id"
# Tags mlfleet's Packer build puts on every image (packer/gpu.pkr.hcl).
PACKER_MANAGED_BY = "packer"
SOURCES = ("pinned", "manifest", "account", "stock")


def account_image_filters(environment: str) -> list[dict]:
    return [
        {"name": f"tag:{tag_keys.ENVIRONMENT}", "values": [environment]},
        {"name": f"tag:{tag_keys.MANAGED_BY}", "values": [PACKER_MANAGED_BY]},
        {"name": "state", "values": ["available"]},
    ]


@dataclass(frozen=True)
class AmiChoice:
    """Where a region's image comes from (one of SOURCES) and its id."""
    source: str
    ami_id: str

    def __post_init__(self):
        if self.source not in SOURCES or not self.ami_id:
            raise ValueError(f"not an AMI choice: {self}; the source is one of {SOURCES}, with an id")


class AmiLookupError(pulumi.RunError):
    """A region's image could not be looked up: one message naming the region and the lookup, no traceback."""


def choose_ami(region: str, environment: str, pinned_ami_id: str | None, manifest_ami_id: str | None,
               opts: pulumi.InvokeOptions) -> AmiChoice:
    """A region's image, first match of the resolution order (module docstring). `opts` reach the region's
    provider: an AMI id is regional, and so are the account's newest image and the public parameter. Without a
    pinned or manifest image it lists the account's (aws.ec2.get_ami_ids), and without one of those it reads the
    stock image's public parameter: one invoke or two, each raising AmiLookupError when it fails, so call it
    before any resource is declared."""
    if pinned_ami_id:
        return AmiChoice("pinned", pinned_ami_id)
    if manifest_ami_id:
        return AmiChoice("manifest", manifest_ami_id)
    try:
        # Newest first (get_ami_ids sorts by creation date, descending, by default).
        built = aws.ec2.get_ami_ids(owners=["self"], filters=account_image_filters(environment), opts=opts).ids
    except Exception as error:  # a failed invoke is a plain Exception (pulumi/runtime/invoke.py)
        raise AmiLookupError(f"{region}: the images this account built for {environment!r} cannot be listed "
                             f"({error}); check the deploy role may call ec2:DescribeImages there") from None
    if built:
        return AmiChoice("account", built[0])
    try:
        # `insecure_value` of the plain invoke: pulumi-aws marks `value` secret whatever the parameter's type,
        # and an invoke *output* is secret as a whole when any field is, so the output form would make the
        # preview show `[secret]` where reviewers need the image id (a public AMI id is no secret). The
        # plain invoke drops the mark today (pulumi/runtime/invoke.py unwraps secrets); insecure_value is
        # the field the provider documents as never sensitive, so it stays in clear if that changes.
        stock = aws.ssm.get_parameter(name=STOCK_GPU_AMI_PARAMETER, opts=opts).insecure_value
    except Exception as error:
        raise AmiLookupError(f"{region}: no mlfleet image pinned, in packer/manifest.json or built by this account, "
                             f"and the stock ECS GPU AMI's parameter {STOCK_GPU_AMI_PARAMETER} cannot be read there "
                             f"({error}); pin an image in mlfleet:amiIds.{region} or build one (make ami "
                             f"ENV={environment})") from None
    return AmiChoice("stock", stock)


@dataclass(frozen=True)
class GpuAmiArgs:
    region: str
    environment: str
    choice: AmiChoice  # choose_ami's answer for the region


class GpuAmi(pulumi.ComponentResource):
    image_id: pulumi.Output[str]
    source: str  # one of SOURCES

    def __init__(self, name: str, args: GpuAmiArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("mlfleet:ami:GpuAmi", name, None, opts)
        self.source, image_id = args.choice.source, args.choice.ami_id
        if self.source == "stock":
            pulumi.log.warn(
                f"{args.region}: no mlfleet image pinned, in packer/manifest.json or built by this account for "
                f"{args.environment!r}; fleets boot the stock ECS GPU AMI ({STOCK_GPU_AMI_PARAMETER}) without "
                "GPU metrics, so the reaper treats them as busy. Build mlfleet's image with `make ami ENV=...`",
                resource=self,
            )
        self.image_id = pulumi.Output.from_input(image_id)
        pulumi.log.info(f"{args.region}: GPU AMI from {self.source}", resource=self)
        self.register_outputs({"image_id": self.image_id, "source": self.source})
