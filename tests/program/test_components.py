"""Each component under Pulumi mocks: what it declares and the properties that keep it safe and cheap."""

from __future__ import annotations

import base64
import json

import pulumi
import pytest

from components.ami import STOCK_GPU_AMI_PARAMETER, AmiChoice, GpuAmi, GpuAmiArgs, choose_ami
from components.compute import EcsGpuCluster, EcsGpuClusterArgs, GpuSpotFleet, GpuSpotFleetArgs, render_user_data
from components.config import FleetConfig
from components.network import INTERFACE_ENDPOINT_SERVICES, Network, NetworkArgs
from components.network.network import plan_subnets, rank_zones
from components.providers import regional_provider
from pulumi_harness import COMPONENT_TAGS, STOCK_AMI, Image, RecordingMocks, packer_image, render_program
from pulumi_harness import render_in_region as _in_region

TAGS = COMPONENT_TAGS
ASG = "aws:autoscaling/group:Group"
LT = "aws:ec2/launchTemplate:LaunchTemplate"


# --- Network ------------------------------------------------------------------------------------

def test_plan_subnets_fits_the_vpc_and_never_overlaps():
    private, public = plan_subnets("10.80.0.0/16", 3)
    assert private == ["10.80.0.0/19", "10.80.32.0/19", "10.80.64.0/19"]
    assert public == ["10.80.224.0/22", "10.80.228.0/22", "10.80.232.0/22"]


def test_rank_zones_prefers_zones_offering_more_fleet_types():
    locations = ["z-a", "z-b", "z-b", "z-c", "z-c", "z-c"]
    assert rank_zones(["z-a", "z-b", "z-c", "z-d"], locations, 2) == ["z-c", "z-b"]
    assert rank_zones(["z-d"], locations, 2) == []


@pytest.mark.parametrize("nat", [False, True])
def test_created_network_has_private_subnets_only_and_a_way_to_aws(nat):
    rendering = _in_region(lambda opts: Network("net", NetworkArgs(
        region="us-west-2", instance_types=["g5.xlarge", "g6.xlarge"], tags=TAGS, availability_zone_count=3,
        nat_gateway=nat), opts=opts))
    subnets = rendering.of_type("aws:ec2/subnet:Subnet")
    private = [s for s in subnets if s.inputs["tags"]["mlfleet:tier"] == "private"]
    assert sorted(s.inputs["availabilityZone"] for s in private) == ["us-west-2a", "us-west-2b", "us-west-2c"]
    assert all(s.inputs["mapPublicIpOnLaunch"] is False for s in subnets)
    endpoints = {e.inputs["serviceName"]: e.inputs for e in rendering.of_type("aws:ec2/vpcEndpoint:VpcEndpoint")}
    assert endpoints["com.amazonaws.us-west-2.s3"]["vpcEndpointType"] == "Gateway"
    nats = rendering.of_type("aws:ec2/natGateway:NatGateway")
    if nat:
        assert len(nats) == 1 and len(endpoints) == 1
        default_routes = [r.inputs for r in rendering.of_type("aws:ec2/route:Route") if "natGatewayId" in r.inputs]
        assert len(default_routes) == 1 and default_routes[0]["destinationCidrBlock"] == "0.0.0.0/0"
    else:
        assert nats == [] and rendering.of_type("aws:ec2/internetGateway:InternetGateway") == []
        interface = {name for name, e in endpoints.items() if e["vpcEndpointType"] == "Interface"}
        assert interface == {f"com.amazonaws.us-west-2.{s}" for s in INTERFACE_ENDPOINT_SERVICES}
        assert all(endpoints[name]["privateDnsEnabled"] for name in interface)
        endpoint_sg = rendering.named("net-endpoints-sg").inputs
        assert endpoint_sg["ingress"][0]["fromPort"] == 443 and endpoint_sg["ingress"][0]["cidrBlocks"] == ["10.80.0.0/16"]


class _EndpointZoneMocks(RecordingMocks):
    """AWS as in an account where the ecs-agent endpoint service is not offered in zone b: "Interface
    endpoints ... might not be supported in all Availability Zones", and CreateVpcEndpoint refuses a subnet
    there ("The VPC endpoint service ... does not support the availability zone of the subnet";
    https://repost.aws/knowledge-center/interface-endpoint-availability-zone). DescribeVpcEndpointServices'
    AvailabilityZones lists where it is (pulumi_aws.ec2.get_vpc_endpoint_service, availability_zones)."""

    def call(self, args):
        if args.token == "aws:ec2/getVpcEndpointService:getVpcEndpointService" and \
                args.args.get("serviceName", "").endswith(".ecs-agent"):
            self.calls.append((args.token, dict(args.args)))
            return {"serviceName": args.args["serviceName"], "serviceType": "Interface",
                    "availabilityZones": ["us-west-2a", "us-west-2c", "us-west-2d"], "id": args.args["serviceName"]}
        return super().call(args)


def test_interface_endpoints_use_only_the_zones_their_service_offers():
    rendering = _in_region(lambda opts: Network("net", NetworkArgs(
        region="us-west-2", instance_types=["g5.xlarge", "g6.xlarge"], tags=TAGS, availability_zone_count=3),
        opts=opts), mocks=_EndpointZoneMocks())
    endpoints = {e.inputs["serviceName"]: e.inputs for e in rendering.of_type("aws:ec2/vpcEndpoint:VpcEndpoint")}
    agent = endpoints["com.amazonaws.us-west-2.ecs-agent"]
    assert agent["subnetIds"] == ["net-private-us-west-2a-id", "net-private-us-west-2c-id"]
    # The instances in zone b reach it through private DNS in the other zones (the endpoint's group admits the VPC).
    assert rendering.named("net-endpoints-sg").inputs["ingress"][0]["cidrBlocks"] == ["10.80.0.0/16"]
    # Services offered everywhere keep a subnet in every zone.
    ecs = endpoints["com.amazonaws.us-west-2.ecs"]
    assert ecs["subnetIds"] == [f"net-private-us-west-2{z}-id" for z in "abc"]


def test_an_endpoint_service_in_none_of_the_zones_fails_clearly():
    class Nowhere(RecordingMocks):
        def call(self, args):
            if args.token == "aws:ec2/getVpcEndpointService:getVpcEndpointService" and \
                    args.args.get("serviceName", "").endswith(".sts"):
                return {"serviceName": args.args["serviceName"], "availabilityZones": ["us-west-2d"],
                        "id": args.args["serviceName"]}
            return super().call(args)
    with pytest.raises(Exception, match="com.amazonaws.us-west-2.sts is offered in none of"):
        _in_region(lambda opts: Network("net", NetworkArgs(
            region="us-west-2", instance_types=["g5.xlarge", "g6.xlarge"], tags=TAGS, availability_zone_count=3),
            opts=opts), mocks=Nowhere())


@pytest.mark.parametrize("nat", [False, True])
def test_private_subnets_hold_the_regions_instance_caps_or_the_network_fails_clearly(nat):
    """Each instance takes one address of its zone's private subnet (bridge-mode tasks take none of their
    own), each interface endpoint one per subnet, and AWS reserves five per subnet ("Subnet CIDR blocks",
    Amazon VPC User Guide). The config allows a /22 (private /25s: 123 usable) and 1000 instances a fleet."""
    endpoints = 0 if nat else len(INTERFACE_ENDPOINT_SERVICES)
    room = 128 - 5 - endpoints  # one zone, one /25

    def network(max_instances):
        return lambda opts: Network("net", NetworkArgs(
            region="us-west-2", instance_types=["g5.xlarge"], tags=TAGS, vpc_cidr="10.80.0.0/22",
            availability_zone_count=1, nat_gateway=nat, max_instances=max_instances), opts=opts)

    assert _in_region(network(room)).of_type("aws:ec2/subnet:Subnet")
    with pytest.raises(Exception, match=rf"room for {room} instances .* maxInstances add up to {room + 1}"):
        _in_region(network(room + 1))


def test_a_stack_whose_caps_outgrow_its_vpc_fails_at_preview():
    """Regression: a /22 in one zone with a fleet of 200 rendered, and its group stopped launching at 110."""
    from pulumi_harness import render_stack
    fleets = {"gpu1": {"instanceTypes": ["g6.xlarge", "g5.xlarge", "g4dn.xlarge"], "maxInstances": 200}}
    with pytest.raises(Exception, match=r"10\.80\.0\.0/22 in us-east-1 has room for 110 instances"):
        render_stack("dev", natGateway=False, vpcCidr="10.80.0.0/22", availabilityZoneCount=1, fleets=fleets)
    assert render_stack("dev", natGateway=False, vpcCidr="10.80.0.0/21", availabilityZoneCount=1, fleets=fleets).resources


def test_a_region_that_cannot_be_built_stops_the_program_before_any_resource():
    """Regression: the network's checks (zones, endpoint services, room for the caps) ran inside the region's
    Network, after the home region and the region's alert topic were declared; a real `pulumi up` creates each
    resource as it is registered, so the error left the stack half-deployed. plan_network now runs for every
    region first, and the error is a RunError (its message alone, no traceback)."""
    from pulumi_harness import render_config, stack_file_config

    from components.network import NetworkError

    values = stack_file_config("dev")
    values.update({"mlfleet:natGateway": "false", "mlfleet:vpcCidr": "10.80.0.0/22", "mlfleet:availabilityZoneCount": "1",
                   "mlfleet:fleets": json.dumps({"gpu1": {"instanceTypes": ["g6.xlarge"], "maxInstances": 200}})})
    mocks = RecordingMocks()
    with pytest.raises(NetworkError, match=r"has room for 110 instances"):
        render_config(values, "dev", mocks)
    assert issubclass(NetworkError, pulumi.RunError)
    assert {r.type for r in mocks.resources} == {"pulumi:providers:aws"}


def test_existing_network_is_used_as_is():
    rendering = _in_region(lambda opts: Network("net", NetworkArgs(
        region="us-west-2", instance_types=["g5.xlarge"], tags=TAGS,
        existing_vpc_id="vpc-0abc1234", existing_subnet_ids=("subnet-0aaa1111", "subnet-0bbb2222")), opts=opts))
    assert [r for r in rendering.resources if r.type.startswith("aws:")] == []


def test_region_without_the_instance_types_fails_clearly():
    with pytest.raises(Exception, match="no availability zone of us-west-2 offers any of"):
        _in_region(lambda opts: Network("net", NetworkArgs(
            region="us-west-2", instance_types=["g5.xlarge"], tags=TAGS, availability_zone_count=0), opts=opts))


# --- AMI ----------------------------------------------------------------------------------------

def _gpu_ami(choice: AmiChoice, mocks: RecordingMocks | None = None):
    """GpuAmi for an AMI choice, as FleetRegion declares it; (its id and source, the rendering)."""
    def build(opts):
        ami = GpuAmi("ami", GpuAmiArgs(region="us-west-2", environment="test", choice=choice), opts=opts)
        return {"id": ami.image_id, "source": ami.source}

    rendering = _in_region(build, mocks=mocks)
    return rendering.outputs, rendering


def test_stock_ami_boots_with_a_warning_and_no_lookup():
    mocks = RecordingMocks()
    outputs, rendering = _gpu_ami(AmiChoice("stock", STOCK_AMI), mocks)
    assert outputs == {"id": STOCK_AMI, "source": "stock"}
    assert any("stock ECS GPU AMI" in w for w in rendering.warnings)
    assert mocks.calls == []


@pytest.mark.parametrize("choice", [AmiChoice("pinned", "ami-0000000000000000a"),
                                    AmiChoice("manifest", "ami-0000000000000000b"),
                                    AmiChoice("account", "ami-0000000000000000c")], ids=lambda c: c.source)
def test_gpu_ami_boots_the_image_it_is_handed_and_looks_nothing_up(choice):
    """The choice is made before any resource (components/program.py deploy()); the component does not make it a
    second time: no invoke at all, no warning."""
    mocks = RecordingMocks(account_images={"us-west-2": {"ami-0000000000000000d": packer_image("test")}})
    outputs, rendering = _gpu_ami(choice, mocks)
    assert outputs == {"id": choice.ami_id, "source": choice.source}
    assert mocks.calls == [] and rendering.warnings == []


def test_an_ami_choice_is_a_source_with_an_id():
    for source, ami_id in (("stock", None), ("account", None), ("account", ""), ("newest", "ami-0000000000000000a")):
        with pytest.raises(ValueError, match="not an AMI choice"):
            AmiChoice(source, ami_id)


def _choose(account_images=(), pinned=None, manifest=None):
    """choose_ami in a region, as deploy() calls it; `account_images`: the ids of images this account built for
    the environment, newest first. (The choice, the mocks.)"""
    built = {ami: packer_image("test", f"2026-01-{31 - age:02d}T00:00:00.000Z")
             for age, ami in enumerate(account_images)}
    return _choose_among(built, pinned, manifest)


def _choose_among(images, pinned=None, manifest=None, mocks=None):
    mocks = mocks or RecordingMocks(account_images={"us-west-2": images})
    chosen = []
    _in_region(lambda opts: chosen.append(choose_ami("us-west-2", "test", pinned, manifest, pulumi.InvokeOptions(
        parent=opts.parent))), mocks=mocks)
    return chosen[0], mocks


@pytest.mark.parametrize(
    ("args", "account_images", "expected"),
    [
        ({"pinned": "ami-0000000000000000a", "manifest": "ami-0000000000000000b"},
         ["ami-0000000000000000c"], AmiChoice("pinned", "ami-0000000000000000a")),
        ({"manifest": "ami-0000000000000000b"}, ["ami-0000000000000000c"], AmiChoice("manifest", "ami-0000000000000000b")),
        ({}, ["ami-0000000000000000c", "ami-0000000000000000d"], AmiChoice("account", "ami-0000000000000000c")),
        ({}, [], AmiChoice("stock", STOCK_AMI)),
    ],
    ids=["pinned-beats-all", "manifest-beats-account", "newest-account-image", "stock-last"],
)
def test_ami_resolution_order(args, account_images, expected):
    choice, mocks = _choose(account_images, **args)
    assert choice == expected
    lookups = [token for token, _ in mocks.calls]
    assert lookups == ([] if args else ["aws:ec2/getAmiIds:getAmiIds"] + (
        ["aws:ssm/getParameter:getParameter"] if expected.source == "stock" else []))


def test_the_stock_image_is_the_public_parameter_s_read_in_the_region():
    choice, mocks = _choose([])
    assert choice == AmiChoice("stock", STOCK_AMI)
    assert STOCK_GPU_AMI_PARAMETER == "/aws/service/ecs/optimized-ami/amazon-linux-2023/gpu/recommended/image_id"
    assert ("aws:ssm/getParameter:getParameter", "us-west-2") in mocks.call_regions


def test_a_stock_parameter_that_cannot_be_read_is_one_error_naming_the_region_and_the_fix():
    from components.ami.gpu_ami import AmiLookupError

    mocks = RecordingMocks(regions_without_stock_parameter=frozenset({"us-west-2"}))
    with pytest.raises(AmiLookupError, match=r"us-west-2: .* the stock ECS GPU AMI's parameter .* cannot be read "
                                             r"there .*couldn't find resource.*mlfleet:amiIds.us-west-2"):
        _choose_among({}, mocks=mocks)


def test_account_images_are_looked_up_by_the_packer_tags_of_this_environment():
    _, mocks = _choose()
    (lookup,) = [call for token, call in mocks.calls if token == "aws:ec2/getAmiIds:getAmiIds"]
    assert lookup["owners"] == ["self"]
    filters = {f["name"]: f["values"] for f in lookup["filters"]}
    assert filters == {"tag:mlfleet:environment": ["test"], "tag:mlfleet:managed-by": ["packer"],
                       "state": ["available"]}
    assert mocks.call_regions[0] == ("aws:ec2/getAmiIds:getAmiIds", "us-west-2")


def test_the_newest_available_image_of_this_environment_is_the_account_image():
    """The mocks select by get_ami_ids' owners and filters and sort by creation date, as the provider does, so
    the choice is the newest available image of this environment, whatever order the account lists them in."""
    choice, _ = _choose_among({"ami-0000000000000000e": packer_image("test", "2026-02-01T00:00:00.000Z"),
                               "ami-0000000000000000f": packer_image("test", "2026-03-01T00:00:00.000Z"),
                               "ami-00000000000000010": packer_image("prod", "2026-04-01T00:00:00.000Z"),
                               "ami-00000000000000011": packer_image("test", "2026-05-01T00:00:00.000Z",
                                                                     state="pending"),
                               "ami-00000000000000012": Image(creation_date="2026-06-01T00:00:00.000Z")})
    assert choice == AmiChoice("account", "ami-0000000000000000f")


@pytest.mark.parametrize(("token", "result"), [("aws:ec2/getAmiIds:getAmiIds", "GetAmiIdsResult"),
                                               ("aws:ec2/getAmi:getAmi", "GetAmiResult")])
def test_the_mocks_answer_the_ami_lookups_with_the_providers_fields(token, result):
    """Every field the mocks answer is one the provider's result declares (pulumi_aws.ec2, the getters' names)."""
    import pulumi_aws as aws

    fields = {getattr(member.fget, "_pulumi_name", None) for member in vars(getattr(aws.ec2, result)).values()
              if isinstance(member, property)}
    mocks = RecordingMocks(account_images={"us-west-2": {"ami-0000000000000000e": packer_image("test")}})
    args = {"owners": ["self"], "filters": [{"name": "image-id", "values": ["ami-0000000000000000e"]}]}
    if token.endswith("getAmiIds"):
        args["filters"] = [{"name": "tag:mlfleet:environment", "values": ["test"]}]
    answer = mocks.call(pulumi.runtime.MockCallArgs(token=token, args=args, provider="urn::aws-us-west-2::id"))
    assert set(answer) <= fields
    assert answer["ids" if token.endswith("getAmiIds") else "imageId"] in (["ami-0000000000000000e"],
                                                                          "ami-0000000000000000e")


def test_pinned_ami_wins_without_a_warning():
    outputs, rendering = _gpu_ami(AmiChoice("pinned", "ami-0fedcba9876543210"))
    assert outputs["id"] == "ami-0fedcba9876543210"
    assert rendering.warnings == []


# --- ECS cluster ----------------------------------------------------------------------------------

def test_cluster_has_container_insights_logs_with_retention_and_a_gpu_job_family():
    rendering = _in_region(lambda opts: {"family": EcsGpuCluster("ecs", EcsGpuClusterArgs(
        region="us-west-2", environment="test", job_image="nvidia/cuda:12.6.3-base-ubuntu24.04",
        log_retention_days=14, tags=TAGS, checkpoint_bucket="mlfleet-test-123456789012-us-west-2-an",
        account_id="123456789012"), opts=opts).task_definition_family})
    cluster = rendering.of_type("aws:ecs/cluster:Cluster")[0].inputs
    assert cluster["name"] == "mlfleet-test"
    assert {"name": "containerInsights", "value": "enabled"} in cluster["settings"]
    assert rendering.of_type("aws:cloudwatch/logGroup:LogGroup")[0].inputs["retentionInDays"] == 14
    task = rendering.of_type("aws:ecs/taskDefinition:TaskDefinition")[0].inputs
    assert rendering.outputs["family"] == task["family"] == "mlfleet-test-gpu-job"
    assert task["requiresCompatibilities"] == ["EC2"]
    (container,) = json.loads(task["containerDefinitions"])
    assert container["resourceRequirements"] == [{"type": "GPU", "value": "1"}]
    assert container["logConfiguration"]["logDriver"] == "awslogs"
    assert container["logConfiguration"]["options"]["awslogs-group"] == "/mlfleet/test/jobs"
    assert container["stopTimeout"] <= 120
    execution_policies = [a.inputs["policyArn"] for a in rendering.of_type("aws:iam/rolePolicyAttachment:RolePolicyAttachment")]
    assert execution_policies == ["arn:aws:iam::aws:policy/service-role/AmazonECSTaskExecutionRolePolicy"]
    assert rendering.of_type("aws:ecs/capacityProvider:CapacityProvider") == []


# --- GPU spot fleet --------------------------------------------------------------------------------

def _fleet(**fleet_overrides):
    fleet = FleetConfig.model_validate({"maxInstances": 6, **fleet_overrides})
    return _in_region(lambda opts: {"asg": GpuSpotFleet("gpu1", GpuSpotFleetArgs(
        region="us-west-2", environment="test", fleet_name="gpu1", fleet=fleet, cluster_name="mlfleet-test",
        vpc_id="vpc-0abc1234", subnet_ids=["subnet-0aaa1111", "subnet-0bbb2222"], image_id="ami-0fedcba9876543210",
        root_volume_gib=250, tags=TAGS), opts=opts).asg_name})


def test_launch_template_is_imdsv2_encrypted_gp3_without_public_ip():
    lt = _fleet().of_type(LT)[0].inputs
    assert lt["metadataOptions"] == {"httpEndpoint": "enabled", "httpTokens": "required",
                                     "httpPutResponseHopLimit": 2, "instanceMetadataTags": "disabled"}
    (root,) = lt["blockDeviceMappings"]
    assert root["deviceName"] == "/dev/xvda"
    assert root["ebs"] == {"volumeSize": 250, "volumeType": "gp3", "encrypted": "true", "deleteOnTermination": "true"}
    (nic,) = lt["networkInterfaces"]
    assert nic["associatePublicIpAddress"] == "false"
    assert lt["imageId"] == "ami-0fedcba9876543210"
    assert "iamInstanceProfile" in lt
    assert {spec["resourceType"] for spec in lt["tagSpecifications"]} == {"instance", "volume", "network-interface"}


def test_user_data_joins_the_cluster_with_gpu_support_and_spot_draining():
    lt = _fleet().of_type(LT)[0].inputs
    script = base64.b64decode(lt["userData"]).decode()
    assert script == render_user_data("mlfleet-test", "test", "gpu1")
    for line in ("ECS_CLUSTER=mlfleet-test", "ECS_ENABLE_GPU_SUPPORT=true", "ECS_ENABLE_SPOT_INSTANCE_DRAINING=true"):
        assert f"\n{line}\n" in script
    assert "@@" not in script
    assert "-d 169.254.169.254/32 -j DROP" in script


def test_instance_role_has_ecs_agent_cloudwatch_agent_and_ssm():
    attached = {a.inputs["policyArn"] for a in _fleet().of_type("aws:iam/rolePolicyAttachment:RolePolicyAttachment")}
    assert attached == {
        "arn:aws:iam::aws:policy/service-role/AmazonEC2ContainerServiceforEC2Role",
        "arn:aws:iam::aws:policy/CloudWatchAgentServerPolicy",
        "arn:aws:iam::aws:policy/AmazonSSMManagedInstanceCore",
    }


def test_instances_accept_no_inbound_traffic():
    (sg,) = _fleet().of_type("aws:ec2/securityGroup:SecurityGroup")
    assert sg.inputs["ingress"] == []


def test_asg_is_a_capped_spot_first_mixed_fleet_owned_by_the_scheduler():
    rendering = _fleet(instanceTypes=["g6.2xlarge", "g5.2xlarge", "g4dn.2xlarge"], onDemandBaseCapacity=1)
    (asg,) = rendering.of_type(ASG)
    group = asg.inputs
    assert rendering.outputs["asg"] == group["name"] == "mlfleet-test-gpu1"
    assert (group["minSize"], group["maxSize"]) == (0, 6)
    assert "desiredCapacity" not in group
    assert group["protectFromScaleIn"] is True
    # The hard cap: nothing launches before it terminates (tests/rules/test_hard_cap.py has the rules).
    assert group["capacityRebalance"] is False and group["suspendedProcesses"] == ["AZRebalance"]
    assert group["vpcZoneIdentifiers"] == ["subnet-0aaa1111", "subnet-0bbb2222"]
    policy = group["mixedInstancesPolicy"]
    assert policy["instancesDistribution"] == {
        "onDemandBaseCapacity": 1, "onDemandPercentageAboveBaseCapacity": 0,
        "onDemandAllocationStrategy": "lowest-price", "spotAllocationStrategy": "price-capacity-optimized"}
    assert [o["instanceType"] for o in policy["launchTemplate"]["overrides"]] == ["g6.2xlarge", "g5.2xlarge", "g4dn.2xlarge"]
    spec = policy["launchTemplate"]["launchTemplateSpecification"]
    assert spec["version"] == "1" and "$Latest" not in json.dumps(group)
    tags = {t["key"]: t for t in group["tags"]}
    assert tags["mlfleet:environment"]["value"] == "test" and tags["mlfleet:fleet"]["value"] == "gpu1"
    assert all(t["propagateAtLaunch"] for t in tags.values())


def test_a_new_launch_template_version_rolls_out_by_instance_refresh_within_the_cap():
    (asg,) = _fleet().of_type(ASG)
    refresh = asg.inputs["instanceRefresh"]
    assert refresh["strategy"] == "Rolling"
    preferences = refresh["preferences"]
    # 90 configured, lowered so that a full fleet of 6 replaces by terminating first: 100 * 5 // 6.
    assert preferences["minHealthyPercentage"] == 83
    assert preferences["maxHealthyPercentage"] == 100
    # Every fleet instance is scale-in protected: "Ignore" (the default) would replace none of them.
    assert preferences["scaleInProtectedInstances"] == "Refresh"
    assert preferences["skipMatching"] is True


def test_default_fleet_diversifies_over_at_least_three_types():
    (asg,) = _fleet().of_type(ASG)
    assert len(asg.inputs["mixedInstancesPolicy"]["launchTemplate"]["overrides"]) >= 3


def test_regional_provider_carries_default_tags():
    rendering = render_program(lambda: regional_provider("eu-west-1", TAGS) and None)
    (provider,) = rendering.of_type("pulumi:providers:aws")
    assert provider.inputs["region"] == "eu-west-1"
    assert json.loads(provider.inputs["defaultTags"])["tags"] == TAGS


# EC2 User Guide, "View tags for your EC2 instances using instance metadata" (work-with-tags-in-IMDS):
# with tags allowed in instance metadata, an instance tag key "can only include letters (a-z, A-Z), numbers
# (0-9), and the following characters: + - = . , _ : @", "can't contain spaces or /", and "can't consist only
# of . (one period), .. (two periods), or _index"; "non-compliance will result in failed launches for new
# instances".
IMDS_TAG_KEY = r"^[A-Za-z0-9+\-=.,_:@]+$"


def test_every_tag_key_the_config_accepts_can_go_on_a_fleet_instance():
    import re

    from pulumi_harness import render_stack

    # Keys the stack config accepts (model.TagKey: AWS's general tag characters, spaces and '/' included).
    rendering = render_stack("dev", costAllocationTags={"cost center": "cc-4711", "team/project": "vision"})
    for lt in rendering.of_type(LT):
        if lt.inputs["metadataOptions"].get("instanceMetadataTags") != "enabled":
            continue
        (instance,) = [s for s in lt.inputs["tagSpecifications"] if s["resourceType"] == "instance"]
        groups = [g for g in rendering.of_type(ASG)
                  if g.inputs["mixedInstancesPolicy"]["launchTemplate"]["launchTemplateSpecification"]
                  ["launchTemplateId"] == lt.generated.get("id", lt.inputs.get("id"))]
        keys = set(instance["tags"]) | {t["key"] for g in groups for t in g.inputs["tags"] if t["propagateAtLaunch"]}
        bad = sorted(k for k in keys if not re.match(IMDS_TAG_KEY, k) or k in (".", "..", "_index"))
        assert not bad, f"{lt.name}: tags in instance metadata are enabled, so EC2 refuses to launch with keys {bad}"


def _go_duration_seconds(text: str) -> float:
    """time.ParseDuration for the units a timeout uses ("0", "10m", "1h30m", "90s")."""
    import re

    if text == "0":
        return 0.0
    parts = re.findall(r"(\d+(?:\.\d+)?)(h|m|s|ms)", text)
    assert parts and "".join(n + u for n, u in parts) == text, f"{text!r} is not a Go duration"
    return sum(float(n) * {"h": 3600, "m": 60, "s": 1, "ms": 0.001}[u] for n, u in parts)


@pytest.mark.parametrize("min_instances", [0, 2])
def test_pulumi_up_never_waits_for_the_schedulers_capacity(min_instances):
    # terraform-provider-aws internal/service/autoscaling/group.go: wait_for_capacity_timeout defaults to
    # "10m", and unless it parses to 0 the provider waits after a create for min_size healthy InService
    # instances, and after any update of min_size for *exactly* max(min_size, desired_capacity) of them,
    # desired_capacity being the value in the state (ignore_changes here: the scheduler's, long changed);
    # while waiting, any failed scaling activity since the update began (a spot launch refused for
    # InsufficientInstanceCapacity) fails the update at once (statusGroupCapacity, unless
    # ignore_failed_scaling_activities). The scheduler owns the group's size, so pulumi up must not wait.
    (asg,) = _fleet(minInstances=min_instances).of_type(ASG)
    timeout = asg.inputs.get("waitForCapacityTimeout", "10m")
    assert _go_duration_seconds(timeout) == 0, f"pulumi up waits up to {timeout} for the group's capacity"


# "Maximum number of tags per resource: 50" for EC2 resources (EC2 User Guide, "Tag restrictions"; keys with
# the aws: prefix do not count) and for an Auto Scaling group ("You can add up to 50 tags to each Auto
# Scaling group", Amazon EC2 Auto Scaling User Guide, "Tag Auto Scaling groups and instances").
MAX_TAGS_PER_RESOURCE = 50


def _keys_written_at_run_time(rendering, action: str) -> set[str]:
    """The tag keys the stack's own policies let its functions add with `action` (aws:TagKeys conditions)."""
    keys: set[str] = set()
    for policy in rendering.of_type("aws:iam/rolePolicy:RolePolicy"):
        for statement in json.loads(policy.inputs["policy"])["Statement"]:
            actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
            if action in actions:
                keys.update(statement["Condition"]["ForAllValues:StringEquals"]["aws:TagKeys"])
    return keys


def test_fleet_instances_and_groups_keep_room_for_the_tags_mlfleet_adds_at_run_time():
    from components.config import model
    from lambdas.common import tags as tag_keys
    from pulumi_harness import render_stack

    rendering = render_stack("dev", costAllocationTags={f"cost-tag-{i}": "x" for i in range(model.MAX_COST_ALLOCATION_TAGS)})
    # The functions' tags, and the one operators add by hand (docs/reaper.md, `aws ec2 create-tags ... mlfleet:keep-alive`).
    # The reaper notes a refused stop on standalone machines only (lambdas/reaper/idle.py: a fleet instance is
    # removed, never stopped; tests/reaper/test_idle_decision.py), so that key takes no room on a fleet instance.
    written = _keys_written_at_run_time(rendering, "ec2:CreateTags")
    assert tag_keys.STOP_REFUSED_AT in written
    on_instances = written - {tag_keys.STOP_REFUSED_AT} | {tag_keys.KEEP_ALIVE}
    on_groups = _keys_written_at_run_time(rendering, "autoscaling:CreateOrUpdateTags")
    assert {tag_keys.EMPTY_SINCE, tag_keys.REMOVING, tag_keys.IDLE_SINCE} <= on_instances and on_groups
    templates = {lt.name.removesuffix("-lt"): lt for lt in rendering.of_type(LT)}
    groups = rendering.of_type(ASG)
    assert groups and len(groups) == len(templates)
    for group in groups:
        lt = templates[group.name.removesuffix("-asg")]
        (instance,) = [s for s in lt.inputs["tagSpecifications"] if s["resourceType"] == "instance"]
        at_launch = set(instance["tags"]) | {t["key"] for t in group.inputs["tags"] if t["propagateAtLaunch"]}
        on_instance = {k for k in at_launch | on_instances if not k.lower().startswith("aws:")}
        assert len(on_instance) <= MAX_TAGS_PER_RESOURCE, (
            f"{group.name}: {len(at_launch)} tags at launch + {len(on_instances)} added later on an instance")
        on_group = {t["key"] for t in group.inputs["tags"]} | on_groups
        assert len(on_group) <= MAX_TAGS_PER_RESOURCE, f"{group.name}: {len(on_group)} tags on the group"
