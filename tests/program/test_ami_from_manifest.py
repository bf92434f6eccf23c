"""The whole program picks up the Packer manifest per region, and refuses a malformed one before
declaring anything (never a silent stale image). A pinned AMI, and without a pin or a manifest the newest image
this account built (aws.ec2.get_ami_ids), is read from EC2 (aws.ec2.get_ami; both answered by the mocks in the
provider's shape: tests/pulumi_harness.py Image) and refused, before any resource, when the fleets' launch
template cannot boot it."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

import components.program as program
from components.ami import STOCK_GPU_AMI_PARAMETER
from pulumi_harness import (STOCK_AMI, Image, RecordingMocks, packer_image, render_config, render_stack,
                            stack_file_config)

MANIFEST = {
    "builds": [{"name": "al2023_gpu", "builder_type": "amazon-ebs", "build_time": 1763830000,
                "artifact_id": "us-east-1:ami-0aaaaaaaaaaaaaaaa,us-west-2:ami-0bbbbbbbbbbbbbbbb",
                "packer_run_uuid": "run-1", "custom_data": {"environment": "staging"}}],
    "last_run_uuid": "run-1",
}


def _declared(mocks) -> set[str]:
    return {r.type for r in mocks.resources}


def _launch_template_amis(rendering):
    return {lt.name: lt.inputs["imageId"] for lt in rendering.of_type("aws:ec2/launchTemplate:LaunchTemplate")}


def test_each_region_boots_the_image_the_manifest_recorded_for_it(tmp_path, monkeypatch):
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(MANIFEST))
    monkeypatch.setattr(program, "PACKER_MANIFEST", path)
    rendering = render_stack("staging")
    regions = rendering.outputs["regions"]
    assert regions["us-east-1"]["amiId"] == "ami-0aaaaaaaaaaaaaaaa" and regions["us-east-1"]["amiSource"] == "manifest"
    assert regions["us-west-2"]["amiId"] == "ami-0bbbbbbbbbbbbbbbb"
    amis = _launch_template_amis(rendering)
    assert all(ami in ("ami-0aaaaaaaaaaaaaaaa", "ami-0bbbbbbbbbbbbbbbb") for ami in amis.values())
    assert not any("stock ECS GPU AMI" in w for w in rendering.warnings)


def test_a_malformed_manifest_stops_the_program_with_the_file_and_the_fix(tmp_path, monkeypatch):
    path = tmp_path / "manifest.json"
    path.write_text("{not json")
    monkeypatch.setattr(program, "PACKER_MANIFEST", path)
    with pytest.raises(Exception) as error:
        render_stack("staging")
    assert str(path) in str(error.value) and "make ami ENV=staging" in str(error.value)


MANIFEST_AMIS = {"us-east-1": "ami-0aaaaaaaaaaaaaaaa", "us-west-2": "ami-0bbbbbbbbbbbbbbbb"}


def _manifest_with_root_volume(tmp_path, monkeypatch, gib: int | None) -> None:
    """packer/manifest.json with MANIFEST's build, recording `gib` as its root_volume_gib (None: not recorded, as in
    manifests written before it was)."""
    custom = {"environment": "staging", **({"root_volume_gib": str(gib)} if gib is not None else {})}
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps({**MANIFEST, "builds": [{**MANIFEST["builds"][0], "custom_data": custom}]}))
    monkeypatch.setattr(program, "PACKER_MANIFEST", path)


def _from_manifest(tmp_path, monkeypatch, images: dict, recorded: int | None = None, root_volume_gib: int = 200):
    """Render staging from the manifest's images, described by `images` (region -> Image, or None: EC2 does not
    find it). (The error or None, the mocks.)"""
    _manifest_with_root_volume(tmp_path, monkeypatch, recorded)
    mocks = RecordingMocks(images={MANIFEST_AMIS[region]: image for region, image in images.items()})
    try:
        render_config({**stack_file_config("staging"), "mlfleet:rootVolumeGiB": str(root_volume_gib)}, "staging",
                      mocks)
    except program.ProgramError as error:
        return str(error), mocks
    return None, mocks


@pytest.mark.parametrize(("built", "configured"), [(300, 200), (201, 200)])
def test_a_root_volume_smaller_than_the_images_stops_the_program_before_any_resource(tmp_path, monkeypatch, built,
                                                                                    configured):
    """EC2 refuses a launch whose root volume is smaller than the image's snapshot (botocore ec2
    EbsBlockDevice.VolumeSize), so every instance of the fleets would fail to launch, found only when the
    scheduler buys. The mocks launch nothing, so the rule is checked here, before anything is declared, on the
    snapshot EC2 describes (the size the manifest records says the same)."""
    message, mocks = _from_manifest(tmp_path, monkeypatch, {"us-east-1": Image(root_volume_gib=built)}, built,
                                    configured)
    assert message == (
        f"mlfleet:rootVolumeGiB={configured} is smaller than the root volume of the image packer/manifest.json records "
        f"for 'staging' (us-east-1: ami-0aaaaaaaaaaaaaaaa, {built} GiB), and EC2 refuses to launch an instance whose "
        f"root volume is smaller than its image's snapshot, so no fleet instance would launch; set "
        f"mlfleet:rootVolumeGiB to {built} or more, or build one with a root_volume_gib of at most {configured} "
        "(make ami ENV=staging records it in packer/manifest.json), or pin one in mlfleet:amiIds")
    assert _declared(mocks) == {"pulumi:providers:aws"}


@pytest.mark.parametrize("built", [200, 100])
def test_a_root_volume_at_least_the_images_deploys_with_the_configured_size(tmp_path, monkeypatch, built):
    message, mocks = _from_manifest(tmp_path, monkeypatch, {r: Image(root_volume_gib=built) for r in MANIFEST_AMIS},
                                    built)
    assert message is None
    sizes = {bdm["ebs"]["volumeSize"] for r in mocks.resources if r.type == "aws:ec2/launchTemplate:LaunchTemplate"
             for bdm in r.inputs["blockDeviceMappings"]}
    assert sizes == {200}


def test_a_manifest_image_without_a_recorded_root_volume_is_read_and_checked(tmp_path, monkeypatch):
    """Regression: a manifest written before root_volume_gib was recorded held nothing to check, and its images were
    not read: one larger than mlfleet:rootVolumeGiB, or booting from another device, deployed and no fleet instance
    launched. Each is now read by its id through its region's provider, and held to the rules of every image."""
    message, mocks = _from_manifest(tmp_path, monkeypatch, {"us-east-1": Image(root_device_name="/dev/sda1"),
                                                            "us-west-2": Image(root_volume_gib=300)})
    assert message is not None, "deployed"
    header, *lines = message.splitlines()
    assert header == "2 problems with the images packer/manifest.json records:"
    assert lines[0].startswith("  - mlfleet:rootVolumeGiB=200 is smaller than the root volume of the image "
                               "packer/manifest.json records for 'staging' (us-west-2: ami-0bbbbbbbbbbbbbbbb, 300 GiB)")
    assert lines[1] == (
        "  - us-east-1: the image packer/manifest.json records for 'staging', ami-0aaaaaaaaaaaaaaaa boots from "
        "/dev/sda1, and the fleets' launch template sizes and encrypts /dev/xvda: the image's root would keep its own "
        "size and every instance would get an extra empty 200 GiB volume; build an image whose root device is "
        "/dev/xvda (make ami ENV=staging records it in packer/manifest.json) or pin one in mlfleet:amiIds.us-east-1")
    assert _declared(mocks) == {"pulumi:providers:aws"}
    reads = {region: call["filters"] for (token, call), (_, region) in zip(mocks.calls, mocks.call_regions)
             if token == "aws:ec2/getAmi:getAmi"}
    assert reads == {region: [{"name": "image-id", "values": [ami]}] for region, ami in MANIFEST_AMIS.items()}


def test_a_manifest_image_ec2_does_not_find_is_refused_with_the_providers_reason(tmp_path, monkeypatch):
    message, mocks = _from_manifest(tmp_path, monkeypatch, {"us-west-2": None})
    assert message is not None and message.startswith(
        "us-west-2: the image packer/manifest.json records for 'staging', ami-0bbbbbbbbbbbbbbbb cannot be read in "
        "us-west-2 (")
    assert "Your query returned no results" in message and message.endswith(
        "build a new one (make ami ENV=staging records it in packer/manifest.json) or pin an image in "
        "mlfleet:amiIds.us-west-2")
    assert _declared(mocks) == {"pulumi:providers:aws"}


def test_a_pinned_ami_is_not_held_to_the_manifests_root_volume(tmp_path, monkeypatch):
    _manifest_with_root_volume(tmp_path, monkeypatch, 300)
    values = {**stack_file_config("staging"), "mlfleet:rootVolumeGiB": "200",
              "mlfleet:amiIds": json.dumps({"us-east-1": "ami-0cccccccccccccccc", "us-west-2": "ami-0dddddddddddddddd"})}
    rendering = render_config(values, "staging")
    assert rendering.outputs["regions"]["us-east-1"]["amiSource"] == "pinned"


PINNED = {"us-east-1": "ami-0cccccccccccccccc", "us-west-2": "ami-0dddddddddddddddd"}


def _pinned(images: dict, root_volume_gib: int = 200):
    """Render staging with both regions pinned; (the error or None, the mocks)."""
    values = {**stack_file_config("staging"), "mlfleet:rootVolumeGiB": str(root_volume_gib),
              "mlfleet:amiIds": json.dumps(PINNED)}
    mocks = RecordingMocks(images=images)
    try:
        render_config(values, "staging", mocks)
    except program.ProgramError as error:
        return str(error), mocks
    return None, mocks


@pytest.mark.parametrize(("snapshot", "configured"), [(300, 200), (201, 200)])
def test_a_pinned_ami_larger_than_the_root_volume_stops_the_program_before_any_resource(snapshot, configured):
    """Regression: a pinned AMI was not checked at all, and EC2 refuses every launch whose root volume is smaller
    than the image's snapshot (botocore ec2 EbsBlockDevice.VolumeSize: "equal to or larger than the snapshot
    size"): the stack deployed and no fleet instance ever launched."""
    message, mocks = _pinned({PINNED["us-west-2"]: Image(root_volume_gib=snapshot)}, configured)
    assert message is not None, "deployed"
    assert f"mlfleet:rootVolumeGiB={configured} is smaller than the root volume of the AMI mlfleet:amiIds pins " \
           f"(us-west-2: ami-0dddddddddddddddd, {snapshot} GiB)" in message
    assert f"set mlfleet:rootVolumeGiB to {snapshot} or more" in message and "us-east-1" not in message
    assert _declared(mocks) == {"pulumi:providers:aws"}


def test_each_pinned_ami_is_read_by_its_id_through_its_regions_provider():
    message, mocks = _pinned({})
    assert message is None
    reads = {region: call["filters"] for (token, call), (_, region) in zip(mocks.calls, mocks.call_regions)
             if token == "aws:ec2/getAmi:getAmi"}
    assert reads == {region: [{"name": "image-id", "values": [ami]}] for region, ami in PINNED.items()}


@pytest.mark.parametrize("snapshot", [200, 100])
def test_a_pinned_ami_the_root_volume_holds_deploys_with_the_configured_size(snapshot):
    message, mocks = _pinned({ami: Image(root_volume_gib=snapshot) for ami in PINNED.values()})
    assert message is None
    sizes = {bdm["ebs"]["volumeSize"] for r in mocks.resources if r.type == "aws:ec2/launchTemplate:LaunchTemplate"
             for bdm in r.inputs["blockDeviceMappings"]}
    assert sizes == {200}


def test_only_the_root_device_of_a_pinned_ami_counts():
    """DescribeImages lists every mapping of the image, a data volume larger than the root among them."""
    message, _ = _pinned({PINNED["us-east-1"]: Image(root_volume_gib=150, data_volumes=(("/dev/sdf", 500),))})
    assert message is None


def test_a_pinned_ami_booting_from_another_device_is_refused():
    """The launch template sizes and encrypts /dev/xvda (components/compute/fleet.py ROOT_DEVICE); on an image
    that boots from /dev/sda1 that mapping is an extra empty volume and the root keeps the image's own size."""
    message, mocks = _pinned({PINNED["us-east-1"]: Image(root_device_name="/dev/sda1")})
    assert message is not None and message.startswith("mlfleet:amiIds.us-east-1: ami-0cccccccccccccccc boots from "
                                                      "/dev/sda1")
    assert "pin an image whose root device is /dev/xvda" in message
    assert _declared(mocks) == {"pulumi:providers:aws"}


def test_every_problem_of_the_pinned_amis_is_listed_in_one_error():
    message, _ = _pinned({PINNED["us-east-1"]: Image(root_device_type="instance-store"),
                          PINNED["us-west-2"]: Image(root_volume_gib=500)})
    assert message is not None
    header, *lines = message.splitlines()
    assert header == "2 problems with the pinned AMIs:"
    assert lines[0].startswith("  - mlfleet:rootVolumeGiB=200 is smaller") and "500 GiB" in lines[0]
    assert lines[1] == ("  - mlfleet:amiIds.us-east-1: ami-0cccccccccccccccc's root device /dev/xvda has no EBS "
                        "volume (instance-store); the fleets boot from an EBS root volume at /dev/xvda, so pin an "
                        "EBS-backed image")


def test_a_pinned_ami_ec2_does_not_find_is_refused_with_the_key_and_the_providers_reason():
    message, mocks = _pinned({PINNED["us-east-1"]: None})
    assert message is not None
    assert message.startswith("mlfleet:amiIds.us-east-1: ami-0cccccccccccccccc cannot be read in us-east-1 (")
    assert "Your query returned no results" in message
    assert _declared(mocks) == {"pulumi:providers:aws"}


# --- The newest image this account built (no pin, no manifest) ---------------------------------------------

ACCOUNT = {"us-east-1": "ami-0eeeeeeeeeeeeeeee", "us-west-2": "ami-0ffffffffffffffff"}
OLDER = {"us-east-1": "ami-0e0000000000000ee", "us-west-2": "ami-0f0000000000000ff"}


def _account(monkeypatch, tmp_path, images: dict, root_volume_gib: int = 200, pinned: dict | None = None):
    """Render staging without a manifest. Each region's newest image of this account is ACCOUNT's, described by
    `images` (region -> Image; the build's tags and a creation date are added), with an older image beside it that
    would boot; `pinned`: region -> (AMI id, Image) pinned in mlfleet:amiIds. (The error or None, the mocks.)"""
    monkeypatch.setattr(program, "PACKER_MANIFEST", tmp_path / "no-manifest.json")
    tags = packer_image("staging").tags
    account = {region: {ACCOUNT[region]: replace(images.get(region, Image()), tags=tags,
                                                 creation_date="2026-03-01T00:00:00.000Z"),
                        OLDER[region]: packer_image("staging", "2026-02-01T00:00:00.000Z", root_volume_gib=30)}
               for region in ACCOUNT}
    values = {**stack_file_config("staging"), "mlfleet:rootVolumeGiB": str(root_volume_gib)}
    if pinned:
        values["mlfleet:amiIds"] = json.dumps({region: ami for region, (ami, _) in pinned.items()})
    mocks = RecordingMocks(account_images=account, images={ami: image for ami, image in (pinned or {}).values()})
    try:
        render_config(values, "staging", mocks)
    except program.ProgramError as error:
        return str(error), mocks
    return None, mocks


@pytest.mark.parametrize(("snapshot", "configured"), [(300, 200), (201, 200)])
def test_an_account_image_larger_than_the_root_volume_stops_the_program_before_any_resource(
        monkeypatch, tmp_path, snapshot, configured):
    """Regression: the newest image this account built was looked up inside the region's GpuAmi, after resources
    were declared, and never checked: the stack deployed and EC2 refused every launch (botocore ec2
    EbsBlockDevice.VolumeSize). It is now chosen and read before any resource (an error raised among the declared
    resources would leave `pulumi up` half-done: pulumi/pulumi#7050) and held to the pinned images' rules."""
    message, mocks = _account(monkeypatch, tmp_path, {"us-west-2": Image(root_volume_gib=snapshot)}, configured)
    assert message is not None, "deployed"
    assert message == (
        f"mlfleet:rootVolumeGiB={configured} is smaller than the root volume of the newest image this account built "
        f"for 'staging' (us-west-2: ami-0ffffffffffffffff, {snapshot} GiB), and EC2 refuses to launch an instance "
        f"whose root volume is smaller than its image's snapshot, so no fleet instance would launch; set "
        f"mlfleet:rootVolumeGiB to {snapshot} or more, or build one with a root_volume_gib of at most {configured} "
        "(make ami ENV=staging; the fleets take the newest), or pin one in mlfleet:amiIds")
    assert _declared(mocks) == {"pulumi:providers:aws"}


def test_each_account_image_is_found_and_read_once_through_its_regions_provider(monkeypatch, tmp_path):
    message, mocks = _account(monkeypatch, tmp_path, {})
    assert message is None
    lookups = [(token, region, call) for (token, call), (_, region) in zip(mocks.calls, mocks.call_regions)
               if token in ("aws:ec2/getAmiIds:getAmiIds", "aws:ec2/getAmi:getAmi")]
    assert sorted((token, region) for token, region, _ in lookups) == sorted(
        (token, region) for region in ACCOUNT for token in ("aws:ec2/getAmiIds:getAmiIds", "aws:ec2/getAmi:getAmi"))
    reads = {region: call["filters"] for token, region, call in lookups if token == "aws:ec2/getAmi:getAmi"}
    assert reads == {region: [{"name": "image-id", "values": [ami]}] for region, ami in ACCOUNT.items()}


def test_an_account_image_the_root_volume_holds_boots_the_fleets(monkeypatch, tmp_path):
    monkeypatch.setattr(program, "PACKER_MANIFEST", tmp_path / "no-manifest.json")
    account = {region: {ami: packer_image("staging", root_volume_gib=200)} for region, ami in ACCOUNT.items()}
    rendering = render_config({**stack_file_config("staging"), "mlfleet:rootVolumeGiB": "200"}, "staging",
                              RecordingMocks(account_images=account))
    assert {region: (r["amiId"], r["amiSource"]) for region, r in rendering.outputs["regions"].items()} == {
        region: (ami, "account") for region, ami in ACCOUNT.items()}
    templates = rendering.of_type("aws:ec2/launchTemplate:LaunchTemplate")
    assert templates and {lt.inputs["imageId"] for lt in templates} == set(ACCOUNT.values())
    assert {bdm["ebs"]["volumeSize"] for lt in templates for bdm in lt.inputs["blockDeviceMappings"]} == {200}
    assert not any("stock ECS GPU AMI" in w for w in rendering.warnings)


def test_an_account_image_booting_from_another_device_is_refused(monkeypatch, tmp_path):
    message, mocks = _account(monkeypatch, tmp_path, {"us-east-1": Image(root_device_name="/dev/sda1")})
    assert message is not None and message.startswith(
        "us-east-1: the newest image this account built for 'staging', ami-0eeeeeeeeeeeeeeee boots from /dev/sda1")
    assert message.endswith("build an image whose root device is /dev/xvda (make ami ENV=staging; the fleets take "
                            "the newest) or pin one in mlfleet:amiIds.us-east-1")
    assert _declared(mocks) == {"pulumi:providers:aws"}


def test_the_problems_of_pinned_and_account_images_are_listed_in_one_error(monkeypatch, tmp_path):
    """One check for both sources: a pinned image and an account image too large, and an account image with no
    EBS root, in one error; the fix that mends both sizes first."""
    message, mocks = _account(monkeypatch, tmp_path, {"us-west-2": Image(root_volume_gib=400)},
                              pinned={"us-east-1": (PINNED["us-east-1"], Image(root_volume_gib=300))})
    assert message is not None
    header, *lines = message.splitlines()
    assert header == "2 problems with the pinned AMIs and the images this account built:"
    assert lines[0].startswith("  - mlfleet:rootVolumeGiB=200 is smaller than the root volume of the AMI "
                               "mlfleet:amiIds pins (us-east-1: ami-0cccccccccccccccc, 300 GiB)")
    assert lines[1].startswith("  - mlfleet:rootVolumeGiB=200 is smaller than the root volume of the newest image "
                               "this account built for 'staging' (us-west-2: ami-0ffffffffffffffff, 400 GiB)")
    assert _declared(mocks) == {"pulumi:providers:aws"}
    message, _ = _account(monkeypatch, tmp_path, {"us-west-2": Image(root_device_type="instance-store")})
    assert message == ("us-west-2: the newest image this account built for 'staging', ami-0ffffffffffffffff's root "
                       "device /dev/xvda has no EBS volume (instance-store); the fleets boot from an EBS root volume "
                       "at /dev/xvda, so build an EBS-backed image (make ami ENV=staging; the fleets take the newest) "
                       "or pin one in mlfleet:amiIds.us-west-2")


def test_a_pinned_region_does_not_look_for_the_accounts_images(monkeypatch, tmp_path):
    """The pin wins: the account's newest image of a pinned region is neither listed nor held to the rules."""
    message, mocks = _account(monkeypatch, tmp_path, {"us-east-1": Image(root_volume_gib=900)},
                              pinned={"us-east-1": (PINNED["us-east-1"], Image())})
    assert message is None
    assert ("aws:ec2/getAmiIds:getAmiIds", "us-east-1") not in mocks.call_regions


# --- The stock image ----------------------------------------------------------------------------------------

def test_a_stock_parameter_that_cannot_be_read_stops_the_program_before_any_resource(monkeypatch, tmp_path):
    """Regression: the stock image's public parameter was read inside GpuAmi, after the home region and the
    region's network had been declared, so a region where it cannot be read (not published there, or the deploy
    role denied ssm:GetParameter) stopped `pulumi up` half-done (pulumi/pulumi#7050). choose_ami reads it with the
    other lookups, before any resource."""
    from components.ami.gpu_ami import AmiLookupError

    monkeypatch.setattr(program, "PACKER_MANIFEST", tmp_path / "no-manifest.json")
    mocks = RecordingMocks(regions_without_stock_parameter=frozenset({"us-east-1"}))
    with pytest.raises(AmiLookupError, match=r"^us-east-1: no mlfleet image pinned, in packer/manifest.json or "
                                             r"built by this account, and the stock ECS GPU AMI's parameter"):
        render_config(stack_file_config("staging"), "staging", mocks)
    assert _declared(mocks) == {"pulumi:providers:aws"}


def _stock(monkeypatch, tmp_path, image: Image | None, root_volume_gib: int = 200, pinned: dict | None = None):
    """Render staging with no image of its own in any region (no manifest, no account image), so that each region
    not `pinned` (region -> (AMI id, Image)) boots the stock parameter's image, STOCK_AMI, described by `image`
    (None: EC2 does not find it). (The error or None, the mocks.)"""
    monkeypatch.setattr(program, "PACKER_MANIFEST", tmp_path / "no-manifest.json")
    values = {**stack_file_config("staging"), "mlfleet:rootVolumeGiB": str(root_volume_gib)}
    if pinned:
        values["mlfleet:amiIds"] = json.dumps({region: ami for region, (ami, _) in pinned.items()})
    mocks = RecordingMocks(images={STOCK_AMI: image, **{ami: pin for ami, pin in (pinned or {}).values()}})
    try:
        render_config(values, "staging", mocks)
    except program.ProgramError as error:
        return str(error), mocks
    return None, mocks


def test_a_region_without_an_image_of_its_own_boots_the_stock_ami_read_and_checked(monkeypatch, tmp_path):
    """The stock image as AWS builds it (one 30 GiB root at /dev/xvda: tests/pulumi_harness.py STOCK_IMAGE) boots the
    fleets; it is read by the id its public parameter names, through each region's provider, like every image."""
    monkeypatch.setattr(program, "PACKER_MANIFEST", tmp_path / "no-manifest.json")
    mocks = RecordingMocks()
    rendering = render_config(stack_file_config("staging"), "staging", mocks)
    assert {r["amiSource"] for r in rendering.outputs["regions"].values()} == {"stock"}
    reads = sorted((region, call["filters"][0]["values"][0]) for (token, call), (_, region)
                   in zip(mocks.calls, mocks.call_regions) if token == "aws:ec2/getAmi:getAmi")
    assert reads == [(region, STOCK_AMI) for region in sorted(rendering.outputs["regions"])]
    assert any("stock ECS GPU AMI" in w for w in rendering.warnings)


@pytest.mark.parametrize(("snapshot", "configured"), [(300, 200), (201, 200)])
def test_a_stock_image_larger_than_the_root_volume_stops_the_program_before_any_resource(monkeypatch, tmp_path,
                                                                                        snapshot, configured):
    """Regression: the stock image was never read, on the grounds that its root (30 GiB today) is below any
    mlfleet:rootVolumeGiB; a stock image AWS publishes with a larger root would have deployed, and EC2 refuses every
    launch whose root volume is smaller than the image's snapshot (botocore ec2 EbsBlockDevice.VolumeSize)."""
    message, mocks = _stock(monkeypatch, tmp_path, Image(root_volume_gib=snapshot), configured)
    assert message is not None, "deployed"
    assert message == (
        f"mlfleet:rootVolumeGiB={configured} is smaller than the root volume of the stock ECS GPU AMI "
        f"({STOCK_GPU_AMI_PARAMETER}) (us-east-1: {STOCK_AMI}, {snapshot} GiB, us-west-2: {STOCK_AMI}, {snapshot} "
        "GiB), and EC2 refuses to launch an instance whose root volume is smaller than its image's snapshot, so no "
        f"fleet instance would launch; set mlfleet:rootVolumeGiB to {snapshot} or more, or pin an image whose root "
        f"volume is at most {configured} GiB in mlfleet:amiIds, or build mlfleet's image (make ami ENV=staging)")
    assert _declared(mocks) == {"pulumi:providers:aws"}


def test_a_stock_image_booting_from_another_device_is_refused(monkeypatch, tmp_path):
    """Regression: the stock image's root device was assumed to be the launch template's (/dev/xvda); one booting
    from another would keep its own root size and every instance would get an extra empty volume."""
    message, mocks = _stock(monkeypatch, tmp_path, Image(root_volume_gib=30, root_device_name="/dev/sda1"),
                            pinned={"us-west-2": (PINNED["us-west-2"], Image())})
    assert message == (
        f"us-east-1: the stock ECS GPU AMI ({STOCK_GPU_AMI_PARAMETER}), {STOCK_AMI} boots from /dev/sda1, and the "
        "fleets' launch template sizes and encrypts /dev/xvda: the image's root would keep its own size and every "
        "instance would get an extra empty 200 GiB volume; pin an image whose root device is /dev/xvda in "
        "mlfleet:amiIds.us-east-1, or build mlfleet's image (make ami ENV=staging)")
    assert _declared(mocks) == {"pulumi:providers:aws"}


def test_a_stock_image_ec2_does_not_find_is_refused_with_the_providers_reason(monkeypatch, tmp_path):
    message, mocks = _stock(monkeypatch, tmp_path, None, pinned={"us-west-2": (PINNED["us-west-2"], Image())})
    assert message is not None and message.startswith(
        f"us-east-1: the stock ECS GPU AMI ({STOCK_GPU_AMI_PARAMETER}), {STOCK_AMI} cannot be read in us-east-1 (")
    assert "Your query returned no results" in message and message.endswith(
        "the public parameter names an image EC2 does not find there: run again, or pin an image in "
        "mlfleet:amiIds.us-east-1")
    assert _declared(mocks) == {"pulumi:providers:aws"}


def test_the_problems_of_a_pinned_and_a_stock_image_are_listed_in_one_error(monkeypatch, tmp_path):
    """One check for every source: the stock image's root too large and a pinned image with no EBS root, in one
    error, the size first."""
    message, mocks = _stock(monkeypatch, tmp_path, Image(root_volume_gib=400),
                            pinned={"us-west-2": (PINNED["us-west-2"], Image(root_device_type="instance-store"))})
    assert message is not None
    header, *lines = message.splitlines()
    assert header == "2 problems with the pinned AMIs and the stock ECS GPU AMI:"
    assert lines[0].startswith("  - mlfleet:rootVolumeGiB=200 is smaller than the root volume of the stock ECS GPU "
                               f"AMI ({STOCK_GPU_AMI_PARAMETER}) (us-east-1: {STOCK_AMI}, 400 GiB)")
    assert lines[1].startswith("  - mlfleet:amiIds.us-west-2: ami-0dddddddddddddddd's root device /dev/xvda has no "
                               "EBS volume (instance-store)")
    assert _declared(mocks) == {"pulumi:providers:aws"}


def test_every_source_of_an_image_is_worded_in_the_order_problems_are_listed():
    from components.ami import SOURCES

    assert tuple(program._WORDING) == SOURCES
