"""Boot-test a built GPU image: launch one instance, run packer/scripts/validate.sh on it through SSM,
print the result, terminate the instance.

    python -m packer.ami_test --environment dev --region us-east-1 --subnet-id subnet-... \\
        --instance-profile NAME [--image-id ami-...] [--instance-type g4dn.xlarge] [--security-group-id sg-...]

THIS NEEDS AWS: credentials allowed to run, describe and terminate instances, pass the instance profile
and use SSM Run Command, and it starts one GPU instance (billed while it runs, usually for minutes). The
instance gets IMDSv2 only and no public IP, so the subnet must reach SSM (the stack's private subnets
do, through VPC endpoints or NAT) and the instance profile must allow the SSM agent
(AmazonSSMManagedInstanceCore). Without --image-id the image is the one packer/manifest.json records for
the environment and region, else the newest image this account built for the environment.

The expected versions come from the image's own tags (mlfleet:nvidia-driver, mlfleet:cuda,
mlfleet:nvidia-container-toolkit), so the test checks the image against what it claims to be.
Only the pure parts (request, command, expectations) are unit-tested; nothing here has run against AWS
in this repository's tests.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path

from botocore.exceptions import WaiterError

from lambdas.common.aws import client
from packer.ami_clean import AMI_ID, ENVIRONMENT, REGION, list_images
from packer.manifest import load_manifest

ROOT = Path(__file__).resolve().parent
VALIDATE_SCRIPT = ROOT / "scripts" / "validate.sh"
MANIFEST = ROOT / "manifest.json"
EXPECTED_FROM_TAGS = {
    "NVIDIA_DRIVER_VERSION": "mlfleet:nvidia-driver",
    "CUDA_VERSION": "mlfleet:cuda",
    "NVIDIA_CONTAINER_TOOLKIT_VERSION": "mlfleet:nvidia-container-toolkit",
}
SSM_REGISTRATION_TIMEOUT_S = 900
SSM_POLL_S = 15


def expectations_from_tags(image_id: str, tags: list[dict]) -> dict[str, str]:
    """validate.sh's expected versions from the image's tags; an image missing one is not ours to test."""
    values = {tag["Key"]: tag["Value"] for tag in tags}
    missing = [key for key in EXPECTED_FROM_TAGS.values() if not values.get(key)]
    if missing:
        raise ValueError(f"image {image_id} lacks tag(s) {missing}: it was not built by packer/gpu.pkr.hcl")
    return {variable: values[key] for variable, key in EXPECTED_FROM_TAGS.items()}


def run_instances_request(*, image_id: str, instance_type: str, subnet_id: str, instance_profile: str,
                          environment: str, security_group_id: str | None = None) -> dict:
    """RunInstances arguments: one instance, IMDSv2 only, no public IP, terminated on shutdown, tagged."""
    interface = {"DeviceIndex": 0, "SubnetId": subnet_id, "AssociatePublicIpAddress": False,
                 "DeleteOnTermination": True}
    if security_group_id:
        interface["Groups"] = [security_group_id]
    tags = [{"Key": "Name", "Value": f"mlfleet-{environment}-ami-test"},
            {"Key": "mlfleet:environment", "Value": environment},
            {"Key": "mlfleet:purpose", "Value": "ami-test"}]
    return {
        "ImageId": image_id,
        "InstanceType": instance_type,
        "MinCount": 1,
        "MaxCount": 1,
        "MetadataOptions": {"HttpTokens": "required", "HttpEndpoint": "enabled", "HttpPutResponseHopLimit": 1},
        "NetworkInterfaces": [interface],
        "IamInstanceProfile": {"Name": instance_profile},
        "InstanceInitiatedShutdownBehavior": "terminate",
        "TagSpecifications": [{"ResourceType": "instance", "Tags": tags}, {"ResourceType": "volume", "Tags": tags}],
    }


def validation_command(script: str, environment: dict[str, str]) -> str:
    """One shell command for AWS-RunShellScript: write validate.sh to a file and run it with bash."""
    delimiter = "MLFLEET_VALIDATE_SH"
    if delimiter in script:
        raise ValueError(f"validate.sh must not contain the heredoc delimiter {delimiter}")
    assignments = " ".join(f"{name}={shlex.quote(value)}" for name, value in sorted(environment.items()))
    return (f"cat > /tmp/mlfleet-validate.sh <<'{delimiter}'\n{script.rstrip()}\n{delimiter}\n"
            f"env {assignments} bash /tmp/mlfleet-validate.sh")


def default_image_id(environment: str, region: str) -> str:
    manifest = load_manifest(MANIFEST, environment)
    if region in manifest:
        return manifest[region].ami_id
    images = list_images(region, environment)
    if not images:
        raise SystemExit(f"no image for {environment} in {region}: run `make ami ENV={environment}` or pass --image-id")
    return max(images, key=lambda image: image.created).image_id


def wait_for_ssm(region: str, instance_id: str) -> None:
    """Wait until the instance's SSM agent has registered (SSM has no waiter for this)."""
    ssm = client("ssm", region)
    deadline = time.monotonic() + SSM_REGISTRATION_TIMEOUT_S
    while time.monotonic() < deadline:
        found = ssm.describe_instance_information(Filters=[{"Key": "InstanceIds", "Values": [instance_id]}])
        if any(info.get("PingStatus") == "Online" for info in found.get("InstanceInformationList", [])):
            return
        time.sleep(SSM_POLL_S)
    raise SystemExit(f"{instance_id} did not register with SSM within {SSM_REGISTRATION_TIMEOUT_S}s: "
                     "check the subnet reaches SSM and the instance profile allows the SSM agent")


def run(args: argparse.Namespace) -> int:
    ec2 = client("ec2", args.region)
    image_id = args.image_id or default_image_id(args.environment, args.region)
    image = ec2.describe_images(ImageIds=[image_id])["Images"][0]
    expected = expectations_from_tags(image_id, image.get("Tags", []))
    expected.update(OPEN_FILES_LIMIT=str(args.open_files_limit), LOGIN_USER="ec2-user",
                    PREPULL_IMAGES=" ".join(args.prepull_images))
    command = validation_command(VALIDATE_SCRIPT.read_text(encoding="utf-8"), expected)

    request = run_instances_request(image_id=image_id, instance_type=args.instance_type, subnet_id=args.subnet_id,
                                    instance_profile=args.instance_profile, environment=args.environment,
                                    security_group_id=args.security_group_id)
    instance_id = ec2.run_instances(**request)["Instances"][0]["InstanceId"]
    print(f"launched {instance_id} from {image_id} in {args.region}")
    try:
        ec2.get_waiter("instance_running").wait(InstanceIds=[instance_id])
        wait_for_ssm(args.region, instance_id)
        ssm = client("ssm", args.region)
        command_id = ssm.send_command(InstanceIds=[instance_id], DocumentName="AWS-RunShellScript",
                                      Parameters={"commands": [command]}, TimeoutSeconds=600,
                                      Comment=f"mlfleet ami-test {image_id}")["Command"]["CommandId"]
        try:
            ssm.get_waiter("command_executed").wait(CommandId=command_id, InstanceId=instance_id,
                                                   WaiterConfig={"Delay": 5, "MaxAttempts": 120})
        except WaiterError:
            pass  # a failed validation ends the waiter too; the invocation below has the status and output
        result = ssm.get_command_invocation(CommandId=command_id, InstanceId=instance_id)
        print(result.get("StandardOutputContent", ""))
        if result.get("StandardErrorContent"):
            print(result["StandardErrorContent"], file=sys.stderr)
        print(f"validation {result['Status']} on {image_id}")
        return 0 if result["Status"] == "Success" else 1
    finally:
        ec2.terminate_instances(InstanceIds=[instance_id])
        print(f"terminated {instance_id}")


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m packer.ami_test", description=__doc__.split("\n\n")[0])
    parser.add_argument("--environment", required=True)
    parser.add_argument("--region", required=True, help="the stack's first fleet region (where `make ami` builds)")
    parser.add_argument("--subnet-id", required=True, help="a private subnet that reaches SSM (VPC endpoints or NAT)")
    parser.add_argument("--instance-profile", required=True, help="instance profile name allowing the SSM agent")
    parser.add_argument("--image-id", help="image to test (default: the manifest's, else the environment's newest)")
    parser.add_argument("--instance-type", default="g4dn.xlarge")
    parser.add_argument("--security-group-id", help="default: the VPC's default security group")
    parser.add_argument("--open-files-limit", type=int, default=1048576,
                        help="the image's open_files_limit (default: Packer's default)")
    parser.add_argument("--prepull-images", nargs="*", default=[], help="images the build pre-pulled")
    args = parser.parse_args(argv)
    if not ENVIRONMENT.match(args.environment):
        parser.error(f"--environment must be dev, staging, prod or a short lowercase name, got {args.environment!r}")
    if not REGION.match(args.region):
        parser.error(f"--region must be an AWS region name, got {args.region!r}")
    if args.image_id is not None and not AMI_ID.match(args.image_id):
        parser.error(f"--image-id must be an AMI id, got {args.image_id!r}")
    return args


def main(argv: list[str] | None = None) -> int:
    return run(parse_args(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    raise SystemExit(main())
