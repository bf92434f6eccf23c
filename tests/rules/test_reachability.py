"""Network reachability: in every rendered region without internet egress, the fleets reach every AWS
service their agents and jobs call.

The services come from components/network/service_calls.py (each entry cites the document that says
the caller needs it). The network rules are AWS's:
- a VPC without a route to the internet reaches an AWS service through a VPC endpoint; an interface
  endpoint answers the service's usual host name only with private DNS enabled, and only through its
  security groups (https://docs.aws.amazon.com/vpc/latest/privatelink/create-interface-endpoint.html,
  "Private DNS", "Security groups");
- an S3 gateway endpoint serves the subnets whose route tables it is attached to
  (https://docs.aws.amazon.com/vpc/latest/privatelink/vpc-endpoints-s3.html);
- security groups are stateful and deny what no rule allows: the instances' group must let 443 out and
  the endpoint's group must let it in (https://docs.aws.amazon.com/vpc/latest/userguide/vpc-security-groups.html);
- an instance reaches only its own region's ECR through the ecr endpoints (registries.py), so every job
  image of a task definition must be there, and a cached ECR Public image needs its pull-through rule.

A region whose fleets use the team's VPC (`mlfleet:networks`) is not rendered by mlfleet: the check
lists it, and docs/network.md says what that VPC must reach.
"""

from __future__ import annotations

import copy
import dataclasses
import ipaddress
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pytest
from rule_stacks import RULE_STACKS

from components.compute.cluster import job_secrets_policy
from components.config import parse_stack_config
from components.network import service_calls
from components.network.registries import PRIVATE_ECR
from components.network.service_calls import GATEWAY_SERVICES, interface_endpoint_services, required_services
from pulumi_harness import Recorded, Rendering, render_stack, stack_file_config

ROOT = Path(__file__).resolve().parents[2]
ASG = "aws:autoscaling/group:Group"
LT = "aws:ec2/launchTemplate:LaunchTemplate"
SUBNET = "aws:ec2/subnet:Subnet"
VPC = "aws:ec2/vpc:Vpc"
SG = "aws:ec2/securityGroup:SecurityGroup"
ENDPOINT = "aws:ec2/vpcEndpoint:VpcEndpoint"
ROUTE = "aws:ec2/route:Route"
ROUTE_TABLE = "aws:ec2/routeTable:RouteTable"
ASSOCIATION = "aws:ec2/routeTableAssociation:RouteTableAssociation"
TASK_DEFINITION = "aws:ecs/taskDefinition:TaskDefinition"
PULL_THROUGH_RULE = "aws:ecr/pullThroughCacheRule:PullThroughCacheRule"
FUNCTION = "aws:lambda/function:Function"
HTTPS = 443


def region_of(resource: Recorded) -> str:
    """Our providers are named aws-<region>; the mocks record the provider reference '<urn>::<id>'."""
    name = (resource.provider or "").split("::")[-2]
    assert name.startswith("aws-"), resource.provider
    return name.removeprefix("aws-")


@dataclass(frozen=True)
class FleetNetwork:
    """Where one fleet's instances live, as the rendering says."""
    region: str
    group: str
    subnet_ids: tuple[str, ...]
    security_group_ids: tuple[str, ...]


@dataclass
class Findings:
    checked: set[str] = dataclasses.field(default_factory=set)  # regions without egress, checked
    with_egress: set[str] = dataclasses.field(default_factory=set)
    team_vpc: set[str] = dataclasses.field(default_factory=set)  # regions on the team's own VPC
    problems: list[str] = dataclasses.field(default_factory=list)


class Index:
    def __init__(self, rendering: Rendering):
        self.rendering = rendering
        # The mocks give every resource the id "<name>-id"; names are unique per type.
        self.by_id = {(r.type, f"{r.name}-id"): r for r in rendering.resources}

    def get(self, type_token: str, resource_id: str) -> Recorded | None:
        return self.by_id.get((type_token, resource_id))

    def of_type(self, type_token: str, region: str | None = None) -> list[Recorded]:
        return [r for r in self.rendering.of_type(type_token) if region is None or region_of(r) == region]


def fleet_networks(index: Index) -> list[FleetNetwork]:
    networks = []
    for group in index.of_type(ASG):
        spec = group.inputs["mixedInstancesPolicy"]["launchTemplate"]["launchTemplateSpecification"]
        template = index.get(LT, spec["launchTemplateId"])
        assert template is not None, f"{group.name}: launch template {spec['launchTemplateId']} not rendered"
        groups = [sg for nic in template.inputs.get("networkInterfaces", []) for sg in nic.get("securityGroups", [])]
        groups += template.inputs.get("vpcSecurityGroupIds", [])
        networks.append(FleetNetwork(region_of(group), group.name, tuple(group.inputs["vpcZoneIdentifiers"]), tuple(groups)))
    return networks


def route_tables_of(index: Index, subnet_ids: Iterable[str]) -> set[str]:
    wanted = set(subnet_ids)
    return {a.inputs["routeTableId"] for a in index.of_type(ASSOCIATION) if a.inputs.get("subnetId") in wanted}


def has_internet_route(index: Index, route_tables: set[str]) -> bool:
    """A default route to anything (NAT gateway, internet gateway, transit gateway, appliance)."""
    defaults = {"0.0.0.0/0", "::/0"}
    routes = [r.inputs for r in index.of_type(ROUTE) if r.inputs.get("routeTableId") in route_tables]
    for table in route_tables:
        rendered = index.get(ROUTE_TABLE, table)
        routes += rendered.inputs.get("routes", []) if rendered else []
    return any({r.get("destinationCidrBlock"), r.get("destinationIpv6CidrBlock")} & defaults for r in routes)


def _allows(rule: dict, peers_cidrs: list[ipaddress.IPv4Network], peer_groups: set[str]) -> bool:
    """Does one inline security-group rule allow HTTPS to or from every peer?"""
    protocol = str(rule.get("protocol"))
    if protocol in ("-1", "all"):
        port_ok = True
    elif protocol in ("tcp", "6"):
        port_ok = int(rule.get("fromPort", 0)) <= HTTPS <= int(rule.get("toPort", -1))
    else:
        port_ok = False
    if not port_ok:
        return False
    cidrs = [ipaddress.ip_network(c) for c in rule.get("cidrBlocks", [])]
    by_cidr = all(any(peer.subnet_of(c) for c in cidrs) for peer in peers_cidrs) if peers_cidrs else False
    by_group = bool(peer_groups) and peer_groups <= set(rule.get("securityGroups", []))
    return by_cidr or by_group


def check_region(index: Index, region: str, fleets: list[FleetNetwork], findings: Findings) -> None:
    """Every required service reachable from every fleet of a region without internet egress."""
    problems = findings.problems
    subnet_ids = {s for f in fleets for s in f.subnet_ids}
    subnets = [index.get(SUBNET, s) for s in sorted(subnet_ids)]
    vpc_ids = {s.inputs["vpcId"] for s in subnets}
    assert len(vpc_ids) == 1, f"{region}: the fleets' subnets span VPCs {vpc_ids}"
    (vpc_id,) = vpc_ids
    subnet_cidrs = [ipaddress.ip_network(s.inputs["cidrBlock"]) for s in subnets]
    vpc_subnets = {f"{s.name}-id" for s in index.of_type(SUBNET, region) if s.inputs["vpcId"] == vpc_id}
    route_tables = route_tables_of(index, subnet_ids)
    instance_groups = {g for f in fleets for g in f.security_group_ids}

    def endpoint_reachable(endpoint: Recorded) -> bool:
        groups = [index.get(SG, g) for g in endpoint.inputs.get("securityGroupIds", [])]
        inbound = any(_allows(rule, subnet_cidrs, instance_groups) for g in groups if g for rule in g.inputs.get("ingress", []))
        endpoint_cidrs = [ipaddress.ip_network(index.get(SUBNET, s).inputs["cidrBlock"])
                          for s in endpoint.inputs.get("subnetIds", []) if index.get(SUBNET, s)]
        outbound = all(
            any(_allows(rule, endpoint_cidrs, set(endpoint.inputs.get("securityGroupIds", [])))
                for rule in index.get(SG, g).inputs.get("egress", []))
            for g in instance_groups
        )
        return inbound and outbound

    endpoints = [e for e in index.of_type(ENDPOINT, region) if e.inputs.get("vpcId") == vpc_id]
    for service in required_services():
        name = f"com.amazonaws.{region}.{service}"
        candidates = [e for e in endpoints if e.inputs.get("serviceName") == name]
        gateway_ok = service in GATEWAY_SERVICES and any(
            e.inputs.get("vpcEndpointType") == "Gateway" and route_tables <= set(e.inputs.get("routeTableIds", []))
            for e in candidates
        )
        interface = [e for e in candidates if e.inputs.get("vpcEndpointType") == "Interface"]
        interface_ok = any(
            e.inputs.get("privateDnsEnabled") is True
            and e.inputs.get("subnetIds") and set(e.inputs["subnetIds"]) <= vpc_subnets
            and endpoint_reachable(e)
            for e in interface
        )
        if gateway_ok or interface_ok:
            continue
        if not candidates:
            reason = "no endpoint"
        elif service in GATEWAY_SERVICES and not interface:
            reason = "the gateway endpoint is not on the fleet subnets' route tables"
        elif not any(e.inputs.get("privateDnsEnabled") is True for e in interface):
            reason = "private DNS is off"
        else:
            reason = "the instances cannot reach it on 443 (security groups or subnets)"
        callers = sorted({c.caller for c in service_calls.SERVICE_CALLS if c.service == service})
        problems.append(f"{region}: {name} unreachable from vpc {vpc_id} ({reason}); needed by {', '.join(callers)}")

    rules = {r.inputs["ecrRepositoryPrefix"] for r in index.of_type(PULL_THROUGH_RULE, region)
             if r.inputs.get("upstreamRegistryUrl") == "public.ecr.aws"}
    for task in index.of_type(TASK_DEFINITION, region):
        for container in json.loads(task.inputs["containerDefinitions"]):
            registry, _, repository = container["image"].partition("/")
            private = PRIVATE_ECR.match(registry)
            if not private or private["region"] != region:
                problems.append(f"{region}: {task.name} image {container['image']!r} is not in {region}'s ECR, "
                                "the only registry its instances reach")
            elif repository.startswith("mlfleet/") and not any(repository.startswith(f"{p}/") for p in rules):
                problems.append(f"{region}: {task.name} image {container['image']!r} has no pull-through cache rule")


def reachability(rendering: Rendering) -> Findings:
    index = Index(rendering)
    findings = Findings()
    by_region: dict[str, list[FleetNetwork]] = {}
    for fleet in fleet_networks(index):
        by_region.setdefault(fleet.region, []).append(fleet)
    for region, fleets in sorted(by_region.items()):
        subnets = {s for f in fleets for s in f.subnet_ids}
        if not all(index.get(SUBNET, s) for s in subnets):
            findings.team_vpc.add(region)  # mlfleet renders nothing of it: docs/network.md lists its needs
        elif has_internet_route(index, route_tables_of(index, subnets)):
            findings.with_egress.add(region)
        else:
            findings.checked.add(region)
            check_region(index, region, fleets, findings)
    # The Lambda functions call AWS from the Lambda service's network (service_calls.py): none is in a VPC.
    for function in index.of_type(FUNCTION):
        if function.inputs.get("vpcConfig"):
            findings.problems.append(f"{function.name} runs in a VPC; declare its calls in service_calls.py")
    return findings


# --- the committed stacks ------------------------------------------------------------------------

def expected_classes(config: dict[str, str], stack: str) -> tuple[set[str], set[str], set[str]]:
    """(regions to check, regions with egress, team-VPC regions) as the config intends them: the check
    reads routes, not the config, so comparing the two keeps it from passing by skipping a region."""
    cfg = parse_stack_config(config, stack)
    fleet_regions = {r for fleet in cfg.fleets.values() for r in cfg.fleet_regions(fleet)}
    team_vpc = fleet_regions & set(cfg.networks)
    with_egress = fleet_regions - team_vpc if cfg.nat_gateway else set()
    return fleet_regions - team_vpc - with_egress, with_egress, team_vpc


@pytest.mark.parametrize("stack", RULE_STACKS)
def test_every_region_without_egress_reaches_every_declared_service(renderings, stack_configs, stack):
    findings = reachability(renderings[stack])
    assert findings.problems == []
    assert (findings.checked, findings.with_egress, findings.team_vpc) == expected_classes(stack_configs[stack], stack)


def test_prod_is_checked_in_every_region():
    """prod runs without internet egress: the stack the check exists for is never skipped."""
    assert expected_classes(stack_file_config("prod"), "prod") == ({"us-east-1", "us-east-2", "us-west-2"}, set(), set())


def test_prod_gets_an_ec2_endpoint_for_describe_tags(stack_renderings):
    """The finding of issue 12: the ECS and CloudWatch agents call ec2:DescribeTags."""
    services = {e.inputs["serviceName"] for e in stack_renderings["prod"].of_type(ENDPOINT)}
    assert {f"com.amazonaws.{r}.ec2" for r in ("us-east-1", "us-east-2", "us-west-2")} <= services


def test_endpoints_are_derived_from_the_declared_calls():
    assert set(interface_endpoint_services()) == {c.service for c in service_calls.SERVICE_CALLS} - set(GATEWAY_SERVICES)
    assert {"ec2", "ecs", "ecs-agent", "ecs-telemetry", "ecr.api", "ecr.dkr", "logs", "monitoring", "ssm",
            "ssmmessages", "ec2messages", "sts", "secretsmanager"} == set(interface_endpoint_services())
    for call in service_calls.SERVICE_CALLS:
        assert call.source.startswith(("https://", "github.com/", "docs/")), call


def test_every_service_the_execution_role_reads_job_secrets_from_is_declared():
    """The ECS agent fetches a task's `secrets` on the instance, with the task execution role, from the
    service the reference names: amazon-ecs-agent agent/taskresource/asmsecret/asmsecret.go (Create ->
    retrieveASMSecretValue -> NewASMClient(region) -> GetSecretValue) and agent/taskresource/ssmsecret
    (GetParameters). So each service job_secrets_policy grants is one the instances call, and a region
    without egress needs its endpoint ("You must create the interface VPC endpoints for Secrets Manager",
    https://docs.aws.amazon.com/AmazonECS/latest/developerguide/secrets-app-secrets-manager.html); KMS is
    called by SSM and Secrets Manager on the role's behalf (kms:ViaService), not from the instance."""
    policy = json.loads(job_secrets_policy("prod", "123456789012"))
    called = set()
    for statement in policy["Statement"]:
        actions = [statement["Action"]] if isinstance(statement["Action"], str) else statement["Action"]
        if "kms:ViaService" in statement.get("Condition", {}).get("StringLike", {}):
            continue
        called |= {action.split(":")[0] for action in actions}
    assert called == {"ssm", "secretsmanager"}
    declared = {c.service for c in service_calls.SERVICE_CALLS if c.caller.startswith("ECS agent")}
    assert called <= declared, f"the ECS agent reads job secrets from {sorted(called - declared)} without an endpoint"


# --- the check fails on broken copies ------------------------------------------------------------

def _without(rendering: Rendering, drop) -> Rendering:
    return dataclasses.replace(rendering, resources=[r for r in rendering.resources if not drop(r)])


def _changed(rendering: Rendering, match, change) -> Rendering:
    """A copy where every resource `match` accepts has its inputs rewritten by `change` (on a deep copy)."""
    resources = []
    for r in rendering.resources:
        if match(r):
            inputs = copy.deepcopy(r.inputs)
            change(inputs)
            r = dataclasses.replace(r, inputs=inputs)
        resources.append(r)
    return dataclasses.replace(rendering, resources=resources)


def _named(suffix: str):
    return lambda r: r.name.endswith(suffix)


def test_a_removed_endpoint_is_found(stack_renderings):
    broken = _without(stack_renderings["prod"], _named("prod-us-east-1-net-ec2"))
    (problem,) = reachability(broken).problems
    assert problem.startswith("us-east-1: com.amazonaws.us-east-1.ec2 unreachable")
    assert "no endpoint" in problem and "ECS agent" in problem and "CloudWatch agent" in problem


def test_an_endpoint_without_private_dns_is_found(stack_renderings):
    broken = _changed(stack_renderings["prod"], _named("prod-us-west-2-net-ecr-dkr"),
                      lambda inputs: inputs.update(privateDnsEnabled=False))
    (problem,) = reachability(broken).problems
    assert "com.amazonaws.us-west-2.ecr.dkr" in problem and "private DNS is off" in problem


def test_an_endpoint_security_group_without_https_is_found(stack_renderings):
    broken = _changed(stack_renderings["prod"], _named("prod-us-east-2-net-endpoints-sg"),
                      lambda inputs: inputs["ingress"][0].update(fromPort=22, toPort=22))
    problems = reachability(broken).problems
    assert len(problems) == len(interface_endpoint_services())
    assert all(p.startswith("us-east-2:") and "cannot reach it on 443" in p for p in problems)


def test_instances_without_outbound_https_are_found(stack_renderings):
    broken = _changed(stack_renderings["prod"], _named("prod-us-east-1-gpu8-instances"),
                      lambda inputs: inputs.update(egress=[]))
    problems = reachability(broken).problems
    assert len(problems) == len(interface_endpoint_services())
    assert all(p.startswith("us-east-1:") for p in problems)


def test_an_s3_gateway_off_the_fleet_route_table_is_found(stack_renderings):
    broken = _changed(stack_renderings["prod"], _named("prod-us-west-2-net-s3"),
                      lambda inputs: inputs.update(routeTableIds=[]))
    (problem,) = reachability(broken).problems
    assert "com.amazonaws.us-west-2.s3" in problem and "route tables" in problem


def test_a_docker_hub_job_image_is_found(stack_renderings):
    def docker_hub(inputs):
        containers = json.loads(inputs["containerDefinitions"])
        containers[0]["image"] = "nvidia/cuda:12.6.3-base-ubuntu24.04"
        inputs["containerDefinitions"] = json.dumps(containers)
    broken = _changed(stack_renderings["prod"], lambda r: r.type == TASK_DEFINITION and "us-east-2" in r.name, docker_hub)
    (problem,) = reachability(broken).problems
    assert problem.startswith("us-east-2:") and "is not in us-east-2's ECR" in problem


def test_a_cached_image_without_its_pull_through_rule_is_found(stack_renderings):
    broken = _without(stack_renderings["prod"], lambda r: r.type == PULL_THROUGH_RULE and "us-west-2" in r.name)
    (problem,) = reachability(broken).problems
    assert problem.startswith("us-west-2:") and "no pull-through cache rule" in problem


def test_a_function_in_a_vpc_is_found(stack_renderings):
    broken = _changed(stack_renderings["dev"], lambda r: r.type == FUNCTION and "reaper" in r.name,
                      lambda inputs: inputs.update(vpcConfig={"subnetIds": ["subnet-1"], "securityGroupIds": ["sg-1"]}))
    (problem,) = reachability(broken).problems
    assert "runs in a VPC" in problem


def test_a_default_route_counts_as_egress(stack_renderings):
    """The classification is read from the routes, not from the config: add a NAT route to prod."""
    nat_route = Recorded(ROUTE, "prod-us-east-1-net-private-default", {
        "routeTableId": "prod-us-east-1-net-private-rt-id", "destinationCidrBlock": "0.0.0.0/0",
        "natGatewayId": "nat-1"}, stack_renderings["prod"].of_type(ENDPOINT)[0].provider)
    prod = stack_renderings["prod"]
    with_nat = dataclasses.replace(prod, resources=[*prod.resources, nat_route])
    findings = reachability(with_nat)
    assert "us-east-1" in findings.with_egress and "us-east-1" not in findings.checked


def test_a_team_vpc_region_is_listed_not_checked():
    rendering = render_stack("prod", networks={"us-east-2": {"vpcId": "vpc-0123456789abcdef0",
                                                              "subnetIds": ["subnet-0123456789abcdef0"]}})
    findings = reachability(rendering)
    assert findings.team_vpc == {"us-east-2"}
    assert findings.checked == {"us-east-1", "us-west-2"}
    assert findings.problems == []


# --- what a team's own VPC must reach --------------------------------------------------------------

def test_docs_list_every_service_a_team_vpc_must_reach():
    """docs/network.md carries the table service_calls.py renders; first-deploy.md checks it."""
    table = service_calls.markdown_table()
    assert table in (ROOT / "docs" / "network.md").read_text(), f"docs/network.md needs this table:\n{table}"
    checklist = (ROOT / "docs" / "first-deploy.md").read_text()
    for service in required_services():
        assert f"`{service}`" in checklist, service
