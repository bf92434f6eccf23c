"""Which AMI a region's GPU fleets boot.

The choice is made once per region, at preview time, so a new image shows up in `pulumi preview` as a
launch-template change. Resolution order: an AMI pinned for the region in the stack config, then the
stock Amazon ECS GPU-optimized Amazon Linux 2023 AMI from its public SSM parameter (with a warning).
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from components.resources import invoke

STOCK_GPU_AMI_PARAMETER = "/aws/service/ecs/optimized-ami/amazon-linux-2023/gpu/recommended/image_id"


@dataclass(frozen=True)
class GpuAmiArgs:
    region: str
    environment: str
    pinned_ami_id: str | None = None


class GpuAmi(pulumi.ComponentResource):
    image_id: pulumi.Output[str]
    source: str

    def __init__(self, name: str, args: GpuAmiArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("mlfleet:ami:GpuAmi", name, None, opts)
        if args.pinned_ami_id:
            self.source = "pinned"
            self.image_id = pulumi.Output.from_input(args.pinned_ami_id)
        else:
            self.source = "stock"
            pulumi.log.warn(
                f"{args.region}: fleets boot the stock ECS GPU AMI ({STOCK_GPU_AMI_PARAMETER}); "
                "build mlfleet's image with `make ami` for tuned limits, pinned drivers and GPU metrics",
                resource=self,
            )
            parameter = aws.ssm.get_parameter_output(name=STOCK_GPU_AMI_PARAMETER, opts=invoke(self))
            self.image_id = parameter.value
        self.register_outputs({"image_id": self.image_id, "source": self.source})
