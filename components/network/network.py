"""A region's network for GPU instances: private subnets only, and a way out to AWS services.

Either the team's existing VPC and subnets (mlfleet adds nothing to them: egress is theirs), or a new
VPC with one private subnet per availability zone, chosen among the zones that offer the most of the
fleets' instance types. Instances never get a public IP. They reach the AWS services their agents and
jobs call (service_calls.py) through VPC endpoints, or through one NAT gateway when the config asks for
internet egress (pip, model hubs). The S3 gateway endpoint is always there: it is free and carries ECR
image layers.
"""

from __future__ import annotations

import ipaddress
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws

from components.resources import child, invoke

from .service_calls import interface_endpoint_services

# One interface endpoint per service the instances and jobs call (service_calls.py says who calls
# what, with the source), so that a region without internet egress reaches each of them.
INTERFACE_ENDPOINT_SERVICES = interface_endpoint_services()


@dataclass(frozen=True)
class NetworkArgs:
    region: str
    instance_types: Sequence[str]
    tags: Mapping[str, str]
    vpc_cidr: str = "10.80.0.0/16"
    availability_zone_count: int = 3
    nat_gateway: bool = False
    # The region's fleets' maxInstances added up: the private subnets must have an address for each.
    max_instances: int = 0
    # An existing network: both set, or neither.
    existing_vpc_id: str | None = None
    existing_subnet_ids: Sequence[str] = field(default_factory=tuple)
    # What plan_network found, when the program planned it before declaring anything (components/program.py);
    # None: the Network plans it itself.
    plan: NetworkPlan | None = None


class NetworkError(pulumi.RunError):
    """A region's network cannot be built as configured. A `pulumi.RunError`: Pulumi prints the message
    alone, not a traceback."""


@dataclass(frozen=True)
class NetworkPlan:
    """Where a new VPC's subnets and endpoints go: the chosen zones (from AWS's offerings), their subnet
    blocks, and for each interface endpoint the chosen zones its service is offered in (none with NAT)."""
    zones: tuple[str, ...]
    private_cidrs: tuple[str, ...]
    public_cidrs: tuple[str, ...]
    endpoint_zones: Mapping[str, tuple[str, ...]]


def plan_subnets(vpc_cidr: str, zone_count: int) -> tuple[list[str], list[str]]:
    """Private and public subnet CIDRs: eight equal private blocks, public /28s-or-larger from the last."""
    vpc = ipaddress.ip_network(vpc_cidr)
    blocks = list(vpc.subnets(prefixlen_diff=3))
    private = [str(b) for b in blocks[:zone_count]]
    public = [str(b) for b in list(blocks[-1].subnets(prefixlen_diff=3))[:zone_count]]
    return private, public


# AWS reserves the first four addresses and the last of every subnet ("Subnet CIDR blocks", Amazon VPC User Guide).
RESERVED_SUBNET_ADDRESSES = 5


def instance_room(private_cidrs: Sequence[str], interface_endpoints: int) -> int:
    """Instances the private subnets hold: each takes one address (its primary ENI; bridge-mode tasks take
    none of their own), each interface endpoint one in every subnet it is in (at most all of them)."""
    return sum(ipaddress.ip_network(c).num_addresses - RESERVED_SUBNET_ADDRESSES - interface_endpoints
               for c in private_cidrs)


def rank_zones(zone_names: Sequence[str], offered_locations: Sequence[str], count: int) -> list[str]:
    """The `count` zones offering the most of the fleet's instance types (ties by name)."""
    offers = Counter(offered_locations)
    ranked = sorted((z for z in zone_names if offers[z] > 0), key=lambda z: (-offers[z], z))
    return ranked[:count]


def plan_network(args: NetworkArgs, opts: pulumi.InvokeOptions) -> NetworkPlan:
    """Ask AWS which zones offer the fleets' instance types and each endpoint service, choose the zones,
    and check that the VPC holds what the stack asks; NetworkError otherwise. It declares nothing, so the
    program runs it for every region before its first resource (components/program.py): a region that
    cannot be built stops `pulumi up` before anything is created, not halfway."""
    zones = aws.get_availability_zones(
        state="available",
        filters=[{"name": "opt-in-status", "values": ["opt-in-not-required"]}],
        opts=opts,
    )
    offerings = aws.ec2.get_instance_type_offerings(
        location_type="availability-zone",
        filters=[{"name": "instance-type", "values": list(args.instance_types)}],
        opts=opts,
    )
    chosen = rank_zones(zones.names, offerings.locations, args.availability_zone_count)
    if not chosen:
        raise NetworkError(
            f"no availability zone of {args.region} offers any of {list(args.instance_types)}; "
            "choose instance types this region has"
        )
    private_cidrs, public_cidrs = plan_subnets(args.vpc_cidr, len(chosen))
    room = instance_room(private_cidrs, 0 if args.nat_gateway else len(INTERFACE_ENDPOINT_SERVICES))
    if args.max_instances > room:
        # Past it an Auto Scaling group cannot launch (no free address in the subnets), below the cap the
        # scheduler counts on.
        raise NetworkError(
            f"the VPC {args.vpc_cidr} in {args.region} has room for {room} instances in its "
            f"{len(private_cidrs)} private subnet(s) ({', '.join(private_cidrs)}), but the region's fleets' "
            f"maxInstances add up to {args.max_instances}; give mlfleet:vpcCidr a larger block (a smaller prefix "
            "length) or raise mlfleet:availabilityZoneCount"
        )
    endpoint_zones: dict[str, tuple[str, ...]] = {}
    for service in () if args.nat_gateway else INTERFACE_ENDPOINT_SERVICES:
        service_name = f"com.amazonaws.{args.region}.{service}"
        # An AWS endpoint service is not offered in every zone of every account (DescribeVpcEndpointServices
        # lists where: botocore's ec2 model, ServiceDetail.AvailabilityZones), and CreateVpcEndpoint refuses a
        # subnet elsewhere: "The VPC endpoint service ... does not support the availability zone of the
        # subnet" (terraform-aws-modules/terraform-aws-vpc#462, #634). So each endpoint goes in the zones
        # its service offers; instances in another zone reach it through its private DNS name, which
        # answers with the endpoint's addresses in the zones it is in (the security group admits the VPC).
        offered = set(aws.ec2.get_vpc_endpoint_service(
            service_name=service_name, service_type="Interface", opts=opts).availability_zones)
        endpoint_zones[service] = tuple(zone for zone in chosen if zone in offered)
        if not endpoint_zones[service]:
            raise NetworkError(
                f"{service_name} is offered in none of the zones chosen in {args.region} ({', '.join(chosen)}; "
                f"it is in {', '.join(sorted(offered)) or 'none'}); raise availabilityZoneCount or give the "
                "region a NAT gateway (natGateway)"
            )
    return NetworkPlan(tuple(chosen), tuple(private_cidrs), tuple(public_cidrs), endpoint_zones)


class Network(pulumi.ComponentResource):
    vpc_id: pulumi.Output[str]
    private_subnet_ids: pulumi.Output[list[str]]

    def __init__(self, name: str, args: NetworkArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("mlfleet:network:Network", name, None, opts)
        if args.existing_vpc_id:
            self.vpc_id = pulumi.Output.from_input(args.existing_vpc_id)
            self.private_subnet_ids = pulumi.Output.from_input(list(args.existing_subnet_ids))
            self.zones: list[str] = []
        else:
            self._create(name, args)
        self.register_outputs({"vpc_id": self.vpc_id, "private_subnet_ids": self.private_subnet_ids})

    def _create(self, name: str, args: NetworkArgs) -> None:
        plan = args.plan or plan_network(args, invoke(self))
        self.zones = list(plan.zones)
        private_cidrs, public_cidrs = plan.private_cidrs, plan.public_cidrs
        tags = dict(args.tags)

        vpc = aws.ec2.Vpc(
            f"{name}-vpc",
            cidr_block=args.vpc_cidr,
            enable_dns_hostnames=True,
            enable_dns_support=True,
            tags={**tags, "Name": f"{name}-vpc"},
            opts=child(self),
        )
        # Lock down the default security group AWS creates with every VPC (no rules at all).
        aws.ec2.DefaultSecurityGroup(f"{name}-default-sg", vpc_id=vpc.id, tags=tags, opts=child(self))

        private_routes = aws.ec2.RouteTable(
            f"{name}-private-rt", vpc_id=vpc.id, tags={**tags, "Name": f"{name}-private"}, opts=child(self)
        )
        private_subnets = []
        for zone, cidr in zip(self.zones, private_cidrs):
            subnet = aws.ec2.Subnet(
                f"{name}-private-{zone}",
                vpc_id=vpc.id,
                cidr_block=cidr,
                availability_zone=zone,
                map_public_ip_on_launch=False,
                tags={**tags, "Name": f"{name}-private-{zone}", "mlfleet:tier": "private"},
                opts=child(self),
            )
            aws.ec2.RouteTableAssociation(
                f"{name}-private-{zone}-rta", subnet_id=subnet.id, route_table_id=private_routes.id, opts=child(self)
            )
            private_subnets.append(subnet)

        aws.ec2.VpcEndpoint(
            f"{name}-s3",
            vpc_id=vpc.id,
            service_name=f"com.amazonaws.{args.region}.s3",
            vpc_endpoint_type="Gateway",
            route_table_ids=[private_routes.id],
            tags={**tags, "Name": f"{name}-s3"},
            opts=child(self),
        )
        if args.nat_gateway:
            self._nat(name, args, vpc, private_routes, public_cidrs, tags)
        else:
            self._interface_endpoints(name, args, vpc, private_subnets, plan.endpoint_zones, tags)

        self.vpc_id = vpc.id
        self.private_subnet_ids = pulumi.Output.all(*[s.id for s in private_subnets])

    def _nat(self, name, args, vpc, private_routes, public_cidrs, tags) -> None:
        """One NAT gateway in the first zone: GPU fleets are spot and zone-diverse already, and a NAT
        per zone would triple the fixed cost for an outage that only delays downloads."""
        igw = aws.ec2.InternetGateway(f"{name}-igw", vpc_id=vpc.id, tags={**tags, "Name": f"{name}-igw"}, opts=child(self))
        public_routes = aws.ec2.RouteTable(
            f"{name}-public-rt", vpc_id=vpc.id, tags={**tags, "Name": f"{name}-public"}, opts=child(self)
        )
        aws.ec2.Route(
            f"{name}-public-default", route_table_id=public_routes.id, destination_cidr_block="0.0.0.0/0",
            gateway_id=igw.id, opts=child(self),
        )
        zone = self.zones[0]
        public_subnet = aws.ec2.Subnet(
            f"{name}-public-{zone}",
            vpc_id=vpc.id,
            cidr_block=public_cidrs[0],
            availability_zone=zone,
            # Only the NAT gateway lives here; nothing launched in it gets a public address by default.
            map_public_ip_on_launch=False,
            tags={**tags, "Name": f"{name}-public-{zone}", "mlfleet:tier": "public"},
            opts=child(self),
        )
        aws.ec2.RouteTableAssociation(
            f"{name}-public-{zone}-rta", subnet_id=public_subnet.id, route_table_id=public_routes.id, opts=child(self)
        )
        eip = aws.ec2.Eip(f"{name}-nat-ip", domain="vpc", tags={**tags, "Name": f"{name}-nat"}, opts=child(self, depends_on=[igw]))
        nat = aws.ec2.NatGateway(
            f"{name}-nat", allocation_id=eip.id, subnet_id=public_subnet.id, connectivity_type="public",
            tags={**tags, "Name": f"{name}-nat"}, opts=child(self),
        )
        aws.ec2.Route(
            f"{name}-private-default", route_table_id=private_routes.id, destination_cidr_block="0.0.0.0/0",
            nat_gateway_id=nat.id, opts=child(self),
        )

    def _interface_endpoints(self, name, args, vpc, private_subnets, endpoint_zones, tags) -> None:
        endpoint_sg = aws.ec2.SecurityGroup(
            f"{name}-endpoints-sg",
            vpc_id=vpc.id,
            description="HTTPS from the VPC to AWS service endpoints",
            ingress=[{"protocol": "tcp", "from_port": 443, "to_port": 443, "cidr_blocks": [args.vpc_cidr],
                      "description": "HTTPS from instances in the VPC"}],
            egress=[],
            tags={**tags, "Name": f"{name}-endpoints"},
            opts=child(self),
        )
        for service, zones in endpoint_zones.items():
            service_name = f"com.amazonaws.{args.region}.{service}"
            subnets = [s for zone, s in zip(self.zones, private_subnets) if zone in zones]
            aws.ec2.VpcEndpoint(
                f"{name}-{service.replace('.', '-')}",
                vpc_id=vpc.id,
                service_name=service_name,
                vpc_endpoint_type="Interface",
                private_dns_enabled=True,
                subnet_ids=[s.id for s in subnets],
                security_group_ids=[endpoint_sg.id],
                tags={**tags, "Name": f"{name}-{service}"},
                opts=child(self),
            )
