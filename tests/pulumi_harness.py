"""Render the mlfleet program under Pulumi mocks (no cloud, no CLI) and record every resource.

    rendering = render_stack("dev")            # stacks/Pulumi.dev.yaml
    rendering = render_config({...}, "dev")   # any raw config
    rendering.of_type("aws:autoscaling/group:Group")

Mocks do not validate what the AWS provider would reject: tests that matter assert property names and
values checked against the pulumi_aws API docs (see tests/test_provider_schema.py).
"""

from __future__ import annotations

import base64
import contextlib
import functools
import json
import logging
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
import pytest

ROOT = Path(__file__).resolve().parent.parent
STACKS = ("dev", "staging", "prod")
ACCOUNT_ID = "123456789012"
STOCK_AMI = "ami-0123456789abcdef0"


def stack_file_config(stack: str) -> dict[str, Any]:
    """A stack file's own keys as Pulumi hands them to the program: strings, objects as JSON text.

    Pulumi also hands over Pulumi.yaml's defaults for the keys a stack leaves out; they are the model's
    own, which tests/rules/test_pulumi_project.py checks with a port of the CLI's merge.
    """
    from components.config import read_stack_file, stack_path

    config = read_stack_file(stack_path(stack))
    return {key: value if isinstance(value, str) else json.dumps(value) for key, value in config.items()}


@dataclass(frozen=True)
class Image:
    """An AMI as DescribeImages describes it, for the mocks' answers to aws.ec2.get_ami and get_ami_ids. The
    default is an image as mlfleet's Packer build makes it by default (packer/variables.pkr.hcl root_volume_gib,
    /dev/xvda), without tags: packer_image() gives one the tags the build puts on it."""
    root_volume_gib: int = 100
    root_device_name: str = "/dev/xvda"
    root_device_type: str = "ebs"  # "instance-store": the root mapping has no EBS volume
    # Other EBS volumes the image maps (device -> GiB), listed before the root, as DescribeImages may.
    data_volumes: tuple[tuple[str, int], ...] = ()
    tags: tuple[tuple[str, str], ...] = ()
    creation_date: str = "2026-01-01T00:00:00.000Z"  # DescribeImages' CreationDate (ISO 8601)
    state: str = "available"


# The image the stock parameter names (STOCK_AMI), as DescribeImages describes it: AWS builds the ECS GPU AMI on
# Amazon Linux 2023 with one gp3 root at /dev/xvda of block_device_size_gb, 30 GiB (aws/amazon-ecs-ami
# al2023gpu.pkr.hcl launch_block_device_mappings, variables.pkr.hcl). The mocks answer aws.ec2.get_ami for its id
# with it unless a test describes that id otherwise (RecordingMocks `images`; None: EC2 does not find it).
STOCK_IMAGE = Image(root_volume_gib=30)


def packer_image(environment: str, creation_date: str = "2026-01-01T00:00:00.000Z", **image) -> Image:
    """An image mlfleet's Packer build made for `environment`, with the tags packer/gpu.pkr.hcl puts on it."""
    tags = (("mlfleet:environment", environment), ("mlfleet:managed-by", "packer"), ("mlfleet:image", "gpu"))
    return Image(tags=tags, creation_date=creation_date, **image)


@dataclass
class Recorded:
    type: str
    name: str
    inputs: dict[str, Any]
    provider: str | None
    # What the mocks answered that the program did not set (id, ARN, URL, ...): in a real run AWS assigns
    # these, so rule checks treat them as references, not as values mlfleet chose.
    generated: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Options:
    """The resource options teardown depends on, as the program set them (recorded by a transformation)."""
    protect: bool
    retain_on_delete: bool
    depends_on: tuple[str, ...]  # names of the explicit dependencies
    parent: str | None
    import_id: str | None = None  # the `import_` option: the ID of an existing resource to adopt


@dataclass
class Rendering:
    stack: str
    resources: list[Recorded]
    outputs: dict[str, Any]
    warnings: list[str] = field(default_factory=list)
    # (type, name) -> options, for every resource and component
    options: dict[tuple[str, str], Options] = field(default_factory=dict)

    def of_type(self, type_token: str) -> list[Recorded]:
        return [r for r in self.resources if r.type == type_token]

    def named(self, name: str) -> Recorded:
        matches = [r for r in self.resources if r.name == name]
        assert len(matches) == 1, f"{len(matches)} resources named {name!r}"
        return matches[0]

    def snapshot(self) -> list[dict[str, Any]]:
        """Type, name and inputs of every resource, stable and readable (user data decoded)."""
        rows = []
        for r in sorted(self.resources, key=lambda r: (r.type, r.name)):
            rows.append({"type": r.type, "name": r.name, "inputs": _readable(r.inputs)})
        return rows


def _readable(value: Any) -> Any:
    if isinstance(value, pulumi.AssetArchive):
        return {"archive": sorted(value.assets)}  # the file list, not contents: code edits stay out of snapshots
    if isinstance(value, (pulumi.FileAsset, pulumi.FileArchive)):
        return {"path": value.path}
    if isinstance(value, dict):
        out = {}
        for key, item in sorted(value.items()):
            if key == "userData" and isinstance(item, str):
                out[key] = base64.b64decode(item).decode().splitlines()
            elif isinstance(item, str) and item[:1] in "[{":
                try:  # policies and container definitions are JSON strings: show them as JSON
                    out[key] = _readable(json.loads(item))
                except json.JSONDecodeError:
                    out[key] = item
            else:
                out[key] = _readable(item)
        return out
    if isinstance(value, list):
        return [_readable(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)  # the Pulumi wire format carries every number as a float
    return value


class RecordingMocks(pulumi.runtime.Mocks):
    """Answers like AWS would, enough for the program to run, and records every resource."""

    def __init__(self, account_images: dict[str, dict[str, Image]] | None = None,
                 images: dict[str, Image | None] | None = None,
                 regions_without_stock_parameter: frozenset[str] = frozenset()) -> None:
        self.resources: list[Recorded] = []
        self.calls: list[tuple[str, dict]] = []
        self.call_regions: list[tuple[str, str | None]] = []  # (token, region of the provider it went to)
        # region -> {AMI id: image} this account owns there: what aws.ec2.get_ami_ids with owners ["self"] selects
        # from (by its filters, newest first), and what aws.ec2.get_ami finds by id in that region.
        self.account_images = account_images or {}
        # AMI id -> the image aws.ec2.get_ami finds in any region (None: none, as for an id that does not exist);
        # the stock parameter's image is STOCK_IMAGE unless given here; an id listed neither here nor in the region's
        # account images is an Image() with its defaults.
        self.images = {STOCK_AMI: STOCK_IMAGE, **(images or {})}
        # Regions where the stock AMI's public SSM parameter is not published: GetParameter answers
        # ParameterNotFound, which the provider turns into a failed invoke.
        self.regions_without_stock_parameter = regions_without_stock_parameter

    def new_resource(self, args: pulumi.runtime.MockResourceArgs):
        inputs = dict(args.inputs)
        recorded = Recorded(args.typ, args.name, inputs, args.provider)
        self.resources.append(recorded)
        region = _region_of(args.provider) or inputs.get("region", "us-east-1")
        state = dict(inputs)
        physical = inputs.get("name") or f"{args.name}-mock"
        state.setdefault("name", physical)
        state.setdefault("arn", f"arn:aws:{args.typ.split(':')[1].split('/')[0]}:{region}:{ACCOUNT_ID}:{physical}")
        if args.typ == "aws:ec2/launchTemplate:LaunchTemplate":
            state["latestVersion"] = 1
        if args.typ == "aws:sqs/queue:Queue":
            state["url"] = f"https://sqs.{region}.amazonaws.com/{ACCOUNT_ID}/{physical}"
        if args.typ == "aws:dynamodb/table:Table" and inputs.get("streamEnabled"):
            # A stream's ARN: the table's, /stream/ and a label DynamoDB picks (a creation time).
            state["streamArn"] = f"arn:aws:dynamodb:{region}:{ACCOUNT_ID}:table/{physical}/stream/2026-01-01T00:00:00.000"
        recorded.generated = {"id": f"{args.name}-id", **{k: v for k, v in state.items() if k not in inputs}}
        return [f"{args.name}-id", state]

    def call(self, args: pulumi.runtime.MockCallArgs):
        self.calls.append((args.token, dict(args.args)))
        self.call_regions.append((args.token, _region_of(args.provider)))
        region = _region_of(args.provider) or args.args.get("region") or "us-east-1"
        zones = [f"{region}{suffix}" for suffix in "abcd"]
        if args.token == "aws:index/getAvailabilityZones:getAvailabilityZones":
            return {"names": zones, "zoneIds": [f"use1-az{i}" for i in range(1, 5)], "id": region}
        if args.token == "aws:ec2/getInstanceTypeOfferings:getInstanceTypeOfferings":
            types = args.args["filters"][0]["values"]
            # Zone "d" offers only the first type, so zone ranking has something to rank.
            locations = [z for z in zones[:3] for _ in types] + [zones[3]]
            return {"locations": locations, "instanceTypes": [*types * 3, types[0]], "locationTypes": [], "id": region}
        if args.token == "aws:ec2/getVpcEndpointService:getVpcEndpointService":
            # AWS's endpoint services, offered in every zone (tests model one that is not).
            return {"serviceName": args.args["serviceName"], "serviceType": args.args.get("serviceType", "Interface"),
                    "availabilityZones": zones, "id": args.args["serviceName"]}
        if args.token == "aws:ssm/getParameter:getParameter":
            if region in self.regions_without_stock_parameter:
                return {}, [("", f"reading SSM Parameter ({args.args['name']}): couldn't find resource")]
            # Like the provider: `value` is always secret, whatever the parameter's type; `insecureValue`
            # never is (pulumi_aws.ssm.GetParameterResult docstrings).
            return {"name": args.args["name"], "value": _secret(STOCK_AMI), "insecureValue": STOCK_AMI,
                    "type": "String", "id": args.args["name"]}
        if args.token == "aws:index/getCallerIdentity:getCallerIdentity":
            return {"accountId": ACCOUNT_ID, "arn": f"arn:aws:iam::{ACCOUNT_ID}:user/ci", "userId": "AIDA", "id": ACCOUNT_ID}
        if args.token == "aws:index/getPartition:getPartition":
            return {"partition": "aws", "dnsSuffix": "amazonaws.com", "id": "aws"}
        if args.token == "aws:ec2/getAmiIds:getAmiIds":
            return self._list_images(args.args, region)
        if args.token == "aws:ec2/getAmi:getAmi":
            return self._describe_image(args.args, region)
        raise NotImplementedError(f"the test mocks do not answer {args.token}")


    def _describe_image(self, inputs: dict, region: str):
        """aws.ec2.get_ami's answer for an `image-id` filter, in the provider's shape (pulumi_aws.ec2.get_ami
        GetAmiResult; terraform-provider-aws ec2_ami_data_source.go flattenAMIBlockDeviceMappings): camelCase
        fields, one block device mapping per device, the `ebs` of a mapping a map of strings with snake_case keys
        (`ebs["volume_size"]`), no `ebs` on an instance-store mapping. No image: the provider's failure."""
        ids = [v for f in inputs.get("filters") or () if f["name"] == "image-id" for v in f["values"]]
        own = self.account_images.get(region, {})
        image = (own[ids[0]] if ids[0] in own else self.images.get(ids[0], Image())) if len(ids) == 1 else None
        if image is None:
            return {}, [("", "Your query returned no results. Please change your search criteria and try again.")]
        ami_id, suffix = ids[0], ids[0].removeprefix("ami-")

        def ebs(gib: int, snapshot: str) -> dict:
            return {"delete_on_termination": "true", "encrypted": "true", "iops": "3000", "snapshot_id": snapshot,
                    "throughput": "125", "volume_size": str(gib), "volume_type": "gp3"}

        mappings = [{"deviceName": device, "virtualName": "", "ebs": ebs(gib, f"snap-{i}{suffix}")}
                    for i, (device, gib) in enumerate(image.data_volumes, start=1)]
        root = {"deviceName": image.root_device_name, "virtualName": ""}
        if image.root_device_type == "ebs":
            root["ebs"] = ebs(image.root_volume_gib, f"snap-0{suffix}")
        mappings += [root, {"deviceName": "/dev/sdb", "virtualName": "ephemeral0"}]
        return {"id": ami_id, "imageId": ami_id, "arn": f"arn:aws:ec2:{region}::image/{ami_id}",
                "architecture": "x86_64", "blockDeviceMappings": mappings, "filters": inputs.get("filters"),
                "name": f"mlfleet-gpu-{suffix}", "ownerId": ACCOUNT_ID, "state": image.state,
                "creationDate": image.creation_date, "tags": dict(image.tags),
                "rootDeviceName": image.root_device_name, "rootDeviceType": image.root_device_type,
                "rootSnapshotId": f"snap-0{suffix}" if image.root_device_type == "ebs" else "",
                "virtualizationType": "hvm"}

    def _list_images(self, inputs: dict, region: str):
        """aws.ec2.get_ami_ids' answer, as the provider makes it (pulumi_aws.ec2.get_ami_ids GetAmiIdsResult;
        terraform-provider-aws ec2_ami_ids_data_source.go): the ids of the images DescribeImages selects by owners
        and filters, sorted by creation date, newest first unless sort_ascending; the id a hash of the request;
        the arguments in the answer with their defaults. Only this account's images are modelled (owner `self`
        or its id), and a filter the mocks do not know fails rather than selecting everything."""
        owners = list(inputs.get("owners") or ())
        images = self.account_images.get(region, {}) if {"self", ACCOUNT_ID} & set(owners) else {}

        def selected(image: Image) -> bool:
            tags = dict(image.tags)
            for f in inputs.get("filters") or ():
                name, values = f["name"], f["values"]
                if name.startswith("tag:"):
                    if tags.get(name.removeprefix("tag:")) not in values:
                        return False
                elif name == "state":
                    if image.state not in values:
                        return False
                else:
                    raise NotImplementedError(f"the test mocks do not filter images by {name!r}")
            return True

        ascending = bool(inputs.get("sortAscending"))
        found = sorted(((i.creation_date, ami) for ami, i in images.items() if selected(i)), reverse=not ascending)
        return {"id": str(zlib.crc32(json.dumps(inputs, sort_keys=True).encode())),
                "ids": [ami for _, ami in found], "owners": owners, "filters": inputs.get("filters"),
                "includeDeprecated": bool(inputs.get("includeDeprecated")), "sortAscending": ascending,
                "region": region}


def _secret(value: Any) -> dict:
    """A value as the engine marks a secret on the wire (what a provider returns for a sensitive output)."""
    from pulumi.runtime import rpc

    return {rpc._special_sig_key: rpc._special_secret_sig, "value": value}


def _region_of(provider_ref: str | None) -> str | None:
    """Provider references look like 'urn:...::aws-us-west-2::<id>'; our providers are named by region."""
    if not provider_ref:
        return None
    urn = provider_ref.split("::")
    for part in urn:
        if part.startswith("aws-"):
            return part.removeprefix("aws-")
    return None


class _WarningCollector(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


# What the SDK's _get_stack_trace is, once without_stack_traces has replaced it (for the test that compares the two).
SDK_STACK_TRACE = None


@contextlib.contextmanager
def without_stack_traces():
    """Resources declared meanwhile send the engine an empty stack trace.

    The Pulumi SDK sends the engine the Python stack of each resource's declaration, for its source position
    (pulumi/runtime/resource.py, _get_stack_trace: traceback.extract_stack, which reads every frame's source
    line). Under a test's stack of pytest, xdist and hypothesis frames, that was a quarter of a rendering's
    time (py-spy over the suite; test_ami_from_manifest.py took 21 s instead of 24). The mocks' monitor never
    reads it (pulumi/runtime/mocks.py, MockMonitor.RegisterResource reads the type, name, parent, provider,
    inputs, import id and transforms). tests/ci/test_pulumi_stack_traces.py renders a stack both ways."""
    global SDK_STACK_TRACE
    from pulumi.runtime import resource
    from pulumi.runtime.proto import source_pb2

    SDK_STACK_TRACE = SDK_STACK_TRACE or resource._get_stack_trace
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(resource, "_get_stack_trace", source_pb2.StackTrace)
        yield


def render_program(program, stack: str = "test", config: dict[str, Any] | None = None,
                   mocks: RecordingMocks | None = None) -> Rendering:
    """Run `program()` (which declares resources and may return outputs) under fresh mocks."""
    mocks = mocks or RecordingMocks()
    logger = logging.getLogger(f"pulumi-mocks-{stack}")
    collector = _WarningCollector()
    logger.handlers = [collector]
    logger.propagate = False
    # A fresh root stack per rendering: set_mocks keeps the previous one, and with it every stack
    # transformation registered before, so an earlier rendering's options would be overwritten by a later one
    # of the same resource names (pulumi/runtime/mocks.py set_mocks, stack.py register_stack_transformation).
    pulumi.runtime.settings.ROOT.set(None)
    pulumi.runtime.set_mocks(mocks, project="mlfleet", stack=stack, preview=False, logger=logger)
    pulumi.runtime.set_all_config(dict(config or {}))
    captured: dict[str, Any] = {}
    options: dict[tuple[str, str], Options] = {}

    def record_options(args: pulumi.ResourceTransformationArgs):
        opts = args.opts or pulumi.ResourceOptions()
        depends_on = opts.depends_on if isinstance(opts.depends_on, list) else [opts.depends_on] if opts.depends_on else []
        options[(args.type_, args.name)] = Options(
            protect=bool(opts.protect),
            retain_on_delete=bool(opts.retain_on_delete),
            depends_on=tuple(getattr(d, "_name", str(d)) for d in depends_on),
            parent=getattr(opts.parent, "_name", None),
            import_id=opts.import_,
        )
        return None

    @pulumi.runtime.test
    def run():
        pulumi.runtime.register_stack_transformation(record_options)
        outputs = program()
        outputs = outputs if isinstance(outputs, dict) else {}
        return pulumi.Output.from_input(outputs).apply(captured.update)

    run()
    return Rendering(stack=stack, resources=mocks.resources, outputs=captured, warnings=collector.messages,
                     options=options)


def render_config(values: dict[str, Any], stack: str, mocks: RecordingMocks | None = None) -> Rendering:
    """Run the whole program for `stack` with raw config `values`, as `pulumi up` would."""
    from components.config import load_stack_config
    from components.program import deploy

    return render_program(lambda: deploy(load_stack_config()), stack, values, mocks)


def render_stack(stack: str, **overrides: Any) -> Rendering:
    """Render a committed stack file, optionally with some `mlfleet:` keys changed."""
    values = stack_file_config(stack)
    for key, value in overrides.items():
        values[f"mlfleet:{key}"] = value if isinstance(value, str) else json.dumps(value)
    return render_config(values, stack)


@functools.cache
def committed_rendering(stack: str) -> Rendering:
    """render_stack(stack) as committed, once per test process, for tests that only read it: the program is
    deterministic, and each stack took 0.7-2.2 s to render for each of the dozen modules that read it. A test
    that patches what the program reads (the Packer manifest, a lookup's answer) renders its own."""
    return render_stack(stack)


COMPONENT_TAGS = {"mlfleet:environment": "test", "mlfleet:managed-by": "pulumi"}


def render_in_region(build, region: str = "us-west-2", mocks: RecordingMocks | None = None) -> Rendering:
    """Declare a component the way FleetRegion does: under a component that carries the region's provider.

    `build(opts)` declares it with the given options and returns the outputs to capture.
    """
    from components.providers import regional_provider, with_provider

    def program():
        provider = regional_provider(region, COMPONENT_TAGS)
        holder = pulumi.ComponentResource("mlfleet:test:Holder", "holder", None, with_provider(provider))
        return build(pulumi.ResourceOptions(parent=holder))

    return render_program(program, mocks=mocks)
