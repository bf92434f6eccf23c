"""The whole program picks up the Packer manifest per region, and refuses a malformed one before
declaring anything (never a silent stale image)."""

from __future__ import annotations

import json

import pytest

import components.program as program
from pulumi_harness import render_stack

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
