"""packer.ami_test's pure parts. The boot test itself needs AWS and is not run here."""

from __future__ import annotations

import subprocess

import boto3
import pytest

from packer.ami_test import (VALIDATE_SCRIPT, expectations_from_tags, parse_args, run_instances_request,
                              validation_command)


def test_request_is_one_imdsv2_instance_without_public_ip():
    request = run_instances_request(image_id="ami-0123456789abcdef0", instance_type="g4dn.xlarge",
                                    subnet_id="subnet-0123456789abcdef0", instance_profile="mlfleet-dev-gpu",
                                    environment="dev", security_group_id="sg-0123456789abcdef0")
    assert (request["MinCount"], request["MaxCount"]) == (1, 1)
    assert request["MetadataOptions"]["HttpTokens"] == "required"
    (interface,) = request["NetworkInterfaces"]
    assert interface["AssociatePublicIpAddress"] is False and interface["Groups"] == ["sg-0123456789abcdef0"]
    assert request["InstanceInitiatedShutdownBehavior"] == "terminate"
    # Every key and enum value is one the EC2 API accepts (botocore validates without sending anything).
    ec2 = boto3.client("ec2", region_name="us-east-1")
    ec2.meta.events.register("before-send.ec2.RunInstances", lambda **kwargs: _stop())
    with pytest.raises(_Stopped):
        ec2.run_instances(**request)


class _Stopped(Exception):
    pass


def _stop():
    raise _Stopped


def test_expectations_come_from_the_image_tags():
    tags = [{"Key": "mlfleet:nvidia-driver", "Value": "580.178.04"}, {"Key": "mlfleet:cuda", "Value": "13.2.0"},
            {"Key": "mlfleet:nvidia-container-toolkit", "Value": "1.19.0"}, {"Key": "Name", "Value": "x"}]
    assert expectations_from_tags("ami-1", tags) == {
        "NVIDIA_DRIVER_VERSION": "580.178.04", "CUDA_VERSION": "13.2.0", "NVIDIA_CONTAINER_TOOLKIT_VERSION": "1.19.0"}
    with pytest.raises(ValueError, match=r"image ami-1 lacks tag\(s\) \['mlfleet:cuda'\]"):
        expectations_from_tags("ami-1", [t for t in tags if t["Key"] != "mlfleet:cuda"])


def test_validation_command_runs_the_script_with_its_inputs(tmp_path):
    # Run the generated command locally with a stand-in script: the heredoc must carry the script
    # byte for byte and the variables must arrive quoted.
    script = '#!/usr/bin/env bash\nset -euo pipefail\necho "driver=$NVIDIA_DRIVER_VERSION images=$PREPULL_IMAGES $((1 + 1))"\n'
    command = validation_command(script, {"NVIDIA_DRIVER_VERSION": "580.178.04", "PREPULL_IMAGES": "a:1 b:2"})
    command = command.replace("/tmp/mlfleet-validate.sh", str(tmp_path / "validate.sh"))
    result = subprocess.run(["bash", "-c", command], capture_output=True, text=True, check=True)
    assert result.stdout == "driver=580.178.04 images=a:1 b:2 2\n"
    assert "MLFLEET_VALIDATE_SH" not in VALIDATE_SCRIPT.read_text()


def test_arguments_are_checked():
    with pytest.raises(SystemExit):
        parse_args(["--environment", "dev", "--region", "us-east-1", "--subnet-id", "subnet-1",
                    "--instance-profile", "p", "--image-id", "latest"])
    args = parse_args(["--environment", "dev", "--region", "us-east-1", "--subnet-id", "subnet-1", "--instance-profile", "p"])
    assert args.image_id is None and args.instance_type == "g4dn.xlarge"
