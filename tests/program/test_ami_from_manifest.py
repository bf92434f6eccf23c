"""The whole program picks up the Packer manifest per region, and refuses a malformed one before
declaring anything (never a silent stale image)."""

from __future__ import annotations

import json

import pytest

import components.program as program
from pulumi_harness import RecordingMocks, render_config, render_stack, stack_file_config

MANIFEST = {
    "builds": [{"name": "al2023_gpu", "builder_type": "amazon-ebs", "build_time": 1763830000,
                "artifact_id": "us-east-1:ami-0aaaaaaaaaaaaaaaa,us-west-2:ami-0bbbbbbbbbbbbbbbb",
                "packer_run_uuid": "run-1", "custom_data": {"environment": "staging"}}],
    "last_run_uuid": "run-1",
}


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


def _manifest_with_root_volume(tmp_path, monkeypatch, gib: int) -> None:
    build = {**MANIFEST["builds"][0], "custom_data": {"environment": "staging", "root_volume_gib": str(gib)}}
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps({**MANIFEST, "builds": [build]}))
    monkeypatch.setattr(program, "PACKER_MANIFEST", path)


@pytest.mark.parametrize(("built", "configured"), [(300, 200), (201, 200)])
def test_a_root_volume_smaller_than_the_images_stops_the_program_before_any_resource(tmp_path, monkeypatch, built,
                                                                                    configured):
    """EC2 refuses a launch whose root volume is smaller than the image's snapshot (botocore ec2
    EbsBlockDevice.VolumeSize), so every instance of the fleets would fail to launch, found only when the
    scheduler buys. The mocks launch nothing, so the rule is checked here, before anything is declared."""
    _manifest_with_root_volume(tmp_path, monkeypatch, built)
    values = {**stack_file_config("staging"), "mlfleet:rootVolumeGiB": str(configured)}
    mocks = RecordingMocks()
    with pytest.raises(program.ProgramError) as error:
        render_config(values, "staging", mocks)
    message = str(error.value)
    assert f"mlfleet:rootVolumeGiB={configured}" in message and f"({built} GiB;" in message
    assert "us-east-1: ami-0aaaaaaaaaaaaaaaa" in message and mocks.resources == []


@pytest.mark.parametrize("built", [200, 100])
def test_a_root_volume_at_least_the_images_deploys_with_the_configured_size(tmp_path, monkeypatch, built):
    _manifest_with_root_volume(tmp_path, monkeypatch, built)
    rendering = render_config({**stack_file_config("staging"), "mlfleet:rootVolumeGiB": "200"}, "staging")
    sizes = {bdm["ebs"]["volumeSize"] for lt in rendering.of_type("aws:ec2/launchTemplate:LaunchTemplate")
             for bdm in lt.inputs["blockDeviceMappings"]}
    assert sizes == {200}


def test_a_pinned_ami_is_not_held_to_the_manifests_root_volume(tmp_path, monkeypatch):
    _manifest_with_root_volume(tmp_path, monkeypatch, 300)
    values = {**stack_file_config("staging"), "mlfleet:rootVolumeGiB": "200",
              "mlfleet:amiIds": json.dumps({"us-east-1": "ami-0cccccccccccccccc", "us-west-2": "ami-0dddddddddddddddd"})}
    rendering = render_config(values, "staging")
    assert rendering.outputs["regions"]["us-east-1"]["amiSource"] == "pinned"
