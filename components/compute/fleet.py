"""A GPU spot fleet: an Auto Scaling group over diversified GPU instance types, joined to an ECS cluster.

Who owns the group's desired capacity (DESIGN.md asks for exactly one owner per number):
- the scheduler Lambda is the only writer of DesiredCapacity, and only ever raises it, capped by
  `max_size` (a hard cap AWS enforces) and the environment's dollars-per-hour cap;
- the reaper never writes DesiredCapacity: it removes one chosen instance at a time with
  TerminateInstanceInAutoScalingGroup(ShouldDecrementDesiredCapacity=True), an atomic decrement;
- Pulumi sets min and max but ignores desired capacity after creation, so `pulumi up` never resets
  what the scheduler asked for; no ECS capacity provider, so ECS managed scaling never joins in.
Instances are protected from scale-in so that nothing but the reaper's targeted termination (after
draining) removes a machine that runs a job. Nothing in the group launches before it terminates
(Capacity Rebalancing off, AZRebalance suspended, an instance refresh a full fleet can do by
terminating first), so `max_size` is a hard cap and no zone rebalancing kills a busy machine.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pulumi
import pulumi_aws as aws

from components.compute.boot_alarm import boot_alarm
from components.config import FleetConfig
from components.resources import asg_tags, assume_role_policy, child, managed_policy
from lambdas.common import tags as tag_keys
from lambdas.common.catalog import ECS_RESERVED_MEMORY_MIB

USER_DATA_TEMPLATE = Path(__file__).with_name("user_data.sh")
# Written by the user data: the iptables rule that keeps job containers off IMDS, and the unit that
# applies it at every boot.
BLOCK_IMDS_SCRIPT = Path(__file__).with_name("block_imds.sh")
BLOCK_IMDS_UNIT = Path(__file__).with_name("mlfleet-block-imds.service")
ROOT_DEVICE = "/dev/xvda"  # root device of the Amazon Linux 2023 ECS GPU AMI
INSTANCE_POLICIES = (
    "service-role/AmazonEC2ContainerServiceforEC2Role",  # the ECS agent
    "CloudWatchAgentServerPolicy",  # CPU, memory, disk and nvidia_gpu metrics
    "AmazonSSMManagedInstanceCore",  # Session Manager instead of SSH
)
# Processes the groups never run (see the group below).
SUSPENDED_PROCESSES = ("AZRebalance",)
# Group metrics are free at one-minute granularity; the dashboard charts them.
GROUP_METRICS = (
    "GroupDesiredCapacity",
    "GroupInServiceInstances",
    "GroupPendingInstances",
    "GroupTerminatingInstances",
    "GroupTotalInstances",
    "GroupInServiceCapacity",
)


def fleet_group_name(environment: str, fleet: str) -> str:
    return f"mlfleet-{environment}-{fleet}"


def refresh_min_healthy_percent(configured: int, max_instances: int) -> int:
    """The instance refresh's minimum healthy percentage for a fleet: the configured share, lowered so that
    a fleet at max_size can still replace an instance by terminating it first.

    The provider always sends MaxHealthyPercentage (100 here; terraform-provider-aws
    internal/service/autoscaling/group.go: schema Default 100, expandRefreshPreferences), and with it
    set, "when it is mathematically impossible to replace instances while honoring both bounds, Auto
    Scaling launches a new instance before terminating an old one (temporarily exceeding the desired
    capacity)" (botocore autoscaling service-2.json, RefreshPreferences.MaxHealthyPercentage). With the
    minimum rounded up, a full fleet of M can drop one instance only if ceil(M * p / 100) <= M - 1,
    which holds for every p <= 100 * (M - 1) / M (0 for a fleet of one)."""
    return min(configured, 100 * (max_instances - 1) // max_instances)


def render_user_data(cluster_name: str, environment: str, fleet: str) -> str:
    script = USER_DATA_TEMPLATE.read_text()
    for marker, value in {
        "CLUSTER_NAME": cluster_name,
        "ENVIRONMENT": environment,
        "FLEET": fleet,
        "RESERVED_MEMORY_MIB": str(ECS_RESERVED_MEMORY_MIB),
        "BLOCK_IMDS_SCRIPT": BLOCK_IMDS_SCRIPT.read_text().rstrip("\n"),
        "BLOCK_IMDS_UNIT": BLOCK_IMDS_UNIT.read_text().rstrip("\n"),
    }.items():
        script = script.replace(f"@@{marker}@@", value)
    return script


@dataclass(frozen=True)
class GpuSpotFleetArgs:
    region: str
    environment: str
    fleet_name: str
    fleet: FleetConfig
    cluster_name: str
    vpc_id: pulumi.Input[str]
    subnet_ids: pulumi.Input[Sequence[str]]
    image_id: pulumi.Input[str]
    root_volume_gib: int
    tags: Mapping[str, str]
    refresh_min_healthy_percent: int = 90
    # The region's alert topic: the fleet's boot alarm tells it (boot_alarm.py). None: nobody is told.
    alert_topic_arn: pulumi.Input[str] | None = None
    # The ECS cluster the instances join: the group is created after it and deleted before it (a
    # cluster with registered container instances cannot be deleted).
    cluster: pulumi.Resource | None = None


class GpuSpotFleet(pulumi.ComponentResource):
    asg_name: pulumi.Output[str]
    asg_arn: pulumi.Output[str]
    boot_alarm_name: pulumi.Output[str]
    launch_template_id: pulumi.Output[str]
    launch_template_version: pulumi.Output[int]
    instance_role_name: pulumi.Output[str]

    def __init__(self, name: str, args: GpuSpotFleetArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("mlfleet:compute:GpuSpotFleet", name, None, opts)
        fleet = args.fleet
        tags = {**args.tags, tag_keys.FLEET: args.fleet_name}

        role = aws.iam.Role(
            f"{name}-instance",
            assume_role_policy=assume_role_policy("ec2.amazonaws.com"),
            description=f"GPU instances of fleet {args.fleet_name} in {args.region}",
            force_detach_policies=True,
            tags=tags,
            opts=child(self),
        )
        for policy in INSTANCE_POLICIES:
            aws.iam.RolePolicyAttachment(
                f"{name}-instance-{policy.rsplit('/', 1)[-1]}",
                role=role.name,
                policy_arn=managed_policy(policy),
                opts=child(self),
            )
        profile = aws.iam.InstanceProfile(f"{name}-instance", role=role.name, tags=tags, opts=child(self))

        security_group = aws.ec2.SecurityGroup(
            f"{name}-instances",
            vpc_id=args.vpc_id,
            description=f"mlfleet {args.environment} GPU fleet {args.fleet_name}: no inbound, outbound to AWS and egress",
            ingress=[],
            egress=[{"protocol": "-1", "from_port": 0, "to_port": 0, "cidr_blocks": ["0.0.0.0/0"],
                     "description": "ECR, ECS, CloudWatch, SSM, S3 and (with NAT) package mirrors"}],
            tags=tags,
            opts=child(self),
        )

        launch_template = aws.ec2.LaunchTemplate(
            f"{name}-lt",
            description=f"mlfleet {args.environment} {args.fleet_name} GPU instances",
            image_id=args.image_id,
            iam_instance_profile={"arn": profile.arn},
            user_data=base64.b64encode(
                render_user_data(args.cluster_name, args.environment, args.fleet_name).encode()
            ).decode(),
            metadata_options={
                "http_endpoint": "enabled",
                "http_tokens": "required",  # IMDSv2 only
                # Two hops so that host-networked agents in containers reach IMDS; bridge-mode job
                # containers are cut off from it by the user data's iptables rule.
                "http_put_response_hop_limit": 2,
                # Off: nothing on the instance reads its tags from IMDS (the ECS and CloudWatch agents call
                # ec2:DescribeTags, components/network/service_calls.py), and with it on EC2 refuses to launch
                # an instance whose tag key has a space or '/' ("non-compliance will result in failed
                # launches", EC2 User Guide, "View tags for your EC2 instances using instance metadata"),
                # which mlfleet:costAllocationTags accepts (config TagKey, AWS's general tag characters).
                "instance_metadata_tags": "disabled",
            },
            block_device_mappings=[
                {
                    "device_name": ROOT_DEVICE,
                    "ebs": {
                        "volume_size": args.root_volume_gib,
                        "volume_type": "gp3",
                        "encrypted": "true",
                        "delete_on_termination": "true",
                    },
                }
            ],
            network_interfaces=[
                {
                    "device_index": 0,
                    "associate_public_ip_address": "false",
                    "delete_on_termination": "true",
                    "security_groups": [security_group.id],
                }
            ],
            tag_specifications=[
                {"resource_type": kind, "tags": tags} for kind in ("instance", "volume", "network-interface")
            ],
            update_default_version=True,
            tags=tags,
            opts=child(self),
        )

        group_name = fleet_group_name(args.environment, args.fleet_name)
        # Declared before the group, which names it in its instance refresh (below).
        degraded_at_boot = boot_alarm(f"{name}-degraded-at-boot", environment=args.environment, region=args.region,
                                      fleet=args.fleet_name, asg_name=group_name, tags=tags, parent=self,
                                      alert_topic_arn=args.alert_topic_arn)

        group = aws.autoscaling.Group(
            f"{name}-asg",
            name=group_name,
            min_size=fleet.min_instances,
            max_size=fleet.max_instances,
            vpc_zone_identifiers=args.subnet_ids,
            # max_size is a hard cap only if nothing launches before it terminates. Capacity Rebalancing
            # launches a replacement first and may exceed max_size by up to 10% (https://docs.aws.amazon.com/
            # autoscaling/ec2/userguide/ec2-auto-scaling-capacity-rebalancing.html); mlfleet answers rebalance
            # recommendations itself: lambdas/job_events tags the instance and the scheduler places no new
            # job on it, without buying a machine outside the caps.
            capacity_rebalance=False,
            # AZRebalance, after the reaper's terminate-with-decrement leaves the zones uneven, would
            # launch above max_size and terminate instances running jobs in other zones: "rebalancing might
            # terminate instances in other zones" (TerminateInstanceInAutoScalingGroup, https://docs.aws.
            # amazon.com/autoscaling/ec2/APIReference/API_TerminateInstanceInAutoScalingGroup.html;
            # https://docs.aws.amazon.com/autoscaling/ec2/userguide/as-suspend-resume-processes.html).
            # Launches still go to the least-used zone the group can launch in.
            suspended_processes=list(SUSPENDED_PROCESSES),
            protect_from_scale_in=True,
            # The scheduler owns the group's size, so pulumi up never waits for it. With the provider's default
            # ("10m"), it waits after a create for min_size healthy instances, and after an update of min_size for
            # exactly max(min_size, desired capacity in the state: stale, the scheduler's) of them, failing at
            # once on any failed scaling activity such as a spot launch refused for capacity
            # (terraform-provider-aws internal/service/autoscaling/group.go, statusGroupCapacity). "0" skips
            # every capacity wait.
            wait_for_capacity_timeout="0",
            # Teardown: delete the group with its (scale-in protected) instances in one pass.
            force_delete=True,
            health_check_type="EC2",
            health_check_grace_period=300,
            enabled_metrics=list(GROUP_METRICS),
            metrics_granularity="1Minute",
            mixed_instances_policy={
                "instances_distribution": {
                    "on_demand_base_capacity": fleet.on_demand_base_capacity,
                    "on_demand_percentage_above_base_capacity": fleet.on_demand_percentage_above_base,
                    "on_demand_allocation_strategy": "lowest-price",
                    "spot_allocation_strategy": "price-capacity-optimized",
                },
                "launch_template": {
                    "launch_template_specification": {
                        "launch_template_id": launch_template.id,
                        # The number, not "$Latest": a new template version shows in the preview diff.
                        "version": launch_template.latest_version.apply(str),
                    },
                    "overrides": [{"instance_type": t} for t in fleet.instance_types],
                },
            },
            # A new launch-template version (a new AMI) starts a rolling instance refresh. Every instance
            # is scale-in protected, so "Refresh" replaces protected ones too ("Ignore" would roll
            # nothing out). max 100% and a minimum a full fleet can honour (refresh_min_healthy_percent):
            # never above max_size, so the fleet cap holds. Jobs on a replaced machine go back to the
            # queue (lambdas/job_events), attempt counted.
            #
            # A new image whose machines boot but register no (or fewer) GPUs passes EC2's health checks, so
            # the refresh is held to the fleet's boot alarm (boot_alarm.py, on the scheduler's count of machines
            # degraded at boot): "CloudWatch alarms can be used to identify any issues and fail the operation if an
            # alarm threshold is met" (botocore autoscaling RefreshPreferences.AlarmSpecification). The alarm is
            # what stops the refresh, after the first machines, before it replaces the whole fleet.
            #
            # No auto_rollback. It "replaces the instances that have been deployed so far" with "the configuration
            # that you last saved on the Auto Scaling group before starting the instance refresh" (EC2 Auto Scaling
            # User Guide, "Undo changes with a manual or auto rollback"), but the provider saves the new launch
            # template version on the group (UpdateAutoScalingGroup) before it starts the refresh
            # (terraform-provider-aws internal/service/autoscaling/group.go, resourceGroupUpdate;
            # hashicorp/terraform-provider-aws#34189, open; its fix #39007 closed unmerged). The "last saved"
            # configuration is then the new image: a rollback would relaunch it on the machines deployed so far
            # and report RollbackSuccessful. Going back to the previous image is pinning it (docs/ami.md,
            # "Rolling out"); the alarm, which also tells the region's alert topic, stops the refresh.
            #
            # skip_matching stays: neither the model (RefreshPreferences.SkipMatching, AutoRollback) nor the
            # guide's rollback considerations or its "Use an instance refresh with skip matching" page list it as
            # conflicting with a rollback; with a desired configuration it skips the machines already on it.
            instance_refresh={
                "strategy": "Rolling",
                "preferences": {
                    "min_healthy_percentage": refresh_min_healthy_percent(args.refresh_min_healthy_percent,
                                                                          fleet.max_instances),
                    "max_healthy_percentage": 100,
                    "instance_warmup": "300",
                    "skip_matching": True,
                    "scale_in_protected_instances": "Refresh",
                    "standby_instances": "Terminate",
                    # From the alarm's output, so the alarm exists before a refresh names it.
                    "alarm_specification": {"alarms": [degraded_at_boot.name]},
                },
            },
            # No instance maintenance policy and no max_instance_lifetime: without a policy the group
            # replaces an instance that fails its health check by terminating it first, so replacements
            # never go above max_size either ("Instance maintenance event default behaviors",
            # https://docs.aws.amazon.com/autoscaling/ec2/userguide/instance-maintenance-policy-overview-and-considerations.html).
            tags=asg_tags({**tags, "Name": f"mlfleet-{args.environment}-{args.fleet_name}"}),
            opts=child(self, ignore_changes=["desired_capacity"],
                       depends_on=[args.cluster] if args.cluster is not None else None),
        )

        self.asg_name = group.name
        self.boot_alarm_name = degraded_at_boot.name
        self.asg_arn = group.arn
        self.launch_template_id = launch_template.id
        self.launch_template_version = launch_template.latest_version
        self.instance_role_name = role.name
        self.register_outputs({"asg_name": self.asg_name, "asg_arn": self.asg_arn})
