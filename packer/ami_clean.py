"""Deregister the GPU images this project built that no stack uses anymore, and delete their snapshots.

    python -m packer.ami_clean --environment dev --regions us-east-1,us-west-2 \\
        (--in-use ami-1,ami-2 | --in-use none | --in-use-from-stack-output outputs.json) \\
        [--keep-newest 1] [--yes] [--dry-run]

Images considered: owner self, tagged mlfleet:managed-by=packer and mlfleet:environment=<env> (the tags
packer/gpu.pkr.hcl writes). An image is removed only when it is not in use (the AMI ids the stack
outputs, `pulumi stack output --json` -> regions.<region>.amiId, or the ids given) and not among the
newest N of its region. The decision is `select_unused`, a pure function; the rest lists, prints, asks
and deletes. Deleting is idempotent: an image or snapshot already gone counts as done.

Needs AWS credentials with ec2:DescribeImages, ec2:DeregisterImage and ec2:DeleteSnapshot in each region.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from botocore.exceptions import ClientError

from lambdas.common.aws import client, paginate

ENVIRONMENT = re.compile(r"^(dev|staging|prod|[a-z][a-z0-9-]{1,15})$")
REGION = re.compile(r"^[a-z]{2}(-gov|-iso[a-z]*)?-[a-z]+-[0-9]$")
AMI_ID = re.compile(r"^ami-[0-9a-f]{8,17}$")

# Tags written by packer/gpu.pkr.hcl on every image and snapshot it builds.
ENVIRONMENT_TAG = "mlfleet:environment"
MANAGED_BY_TAG = "mlfleet:managed-by"
MANAGED_BY_PACKER = "packer"

# Error codes meaning "already gone": deleting twice is not an error.
IMAGE_GONE = {"InvalidAMIID.NotFound", "InvalidAMIID.Unavailable"}
SNAPSHOT_GONE = {"InvalidSnapshot.NotFound"}


@dataclass(frozen=True)
class Image:
    region: str
    image_id: str
    name: str
    created: str  # EC2 CreationDate, ISO-8601 UTC: sorts chronologically as text
    snapshot_ids: tuple[str, ...]


def select_unused(images: list[Image], in_use: set[str], keep_newest: int) -> list[Image]:
    """Images to remove: not in `in_use` and not among the `keep_newest` newest of their region.

    Returned by region (alphabetical), newest first within a region.
    """
    if keep_newest < 0:
        raise ValueError(f"keep_newest must be 0 or more, got {keep_newest}")
    by_region: dict[str, list[Image]] = defaultdict(list)
    for image in images:
        by_region[image.region].append(image)
    unused = []
    for region in sorted(by_region):
        newest_first = sorted(by_region[region], key=lambda image: (image.created, image.image_id), reverse=True)
        unused.extend(image for image in newest_first[keep_newest:] if image.image_id not in in_use)
    return unused


def in_use_from_stack_output(document: object, source: str) -> set[str]:
    """AMI ids from `pulumi stack output --json`: {"regions": {"<region>": {"amiId": "ami-..."}}}."""
    regions = document.get("regions") if isinstance(document, dict) else None
    if not isinstance(regions, dict):
        raise ValueError(f"{source}: expected an object with key 'regions' (pulumi stack output --json), "
                         f"got {document!r:.80}")
    ids = set()
    for region, outputs in regions.items():
        ami_id = outputs.get("amiId") if isinstance(outputs, dict) else None
        if not isinstance(ami_id, str) or not AMI_ID.match(ami_id):
            raise ValueError(f"{source}: regions.{region}.amiId must be an AMI id, got {ami_id!r}")
        ids.add(ami_id)
    return ids


def parse_in_use(value: str) -> set[str]:
    """--in-use: comma-separated AMI ids, or 'none' when no stack uses any image (after `pulumi destroy`)."""
    if value.strip() == "none":
        return set()
    ids = {item.strip() for item in value.split(",") if item.strip()}
    bad = sorted(item for item in ids if not AMI_ID.match(item))
    if bad or not ids:
        raise ValueError(f"--in-use must be AMI ids separated by commas, or 'none'; bad value {value!r}")
    return ids


def list_images(region: str, environment: str) -> list[Image]:
    """This account's images built by Packer for `environment` in `region` (one paginated, filtered read)."""
    ec2 = client("ec2", region)
    found = paginate(
        ec2, "describe_images", "Images", Owners=["self"],
        Filters=[{"Name": f"tag:{MANAGED_BY_TAG}", "Values": [MANAGED_BY_PACKER]},
                 {"Name": f"tag:{ENVIRONMENT_TAG}", "Values": [environment]}],
    )
    return [
        Image(region=region, image_id=image["ImageId"], name=image.get("Name", ""),
              created=image.get("CreationDate", ""),
              snapshot_ids=tuple(mapping["Ebs"]["SnapshotId"] for mapping in image.get("BlockDeviceMappings", [])
                                 if mapping.get("Ebs", {}).get("SnapshotId")))
        for image in found
    ]


def delete_image(image: Image) -> list[str]:
    """Deregister the image, then delete its snapshots (an image holds its snapshots until deregistered)."""
    ec2 = client("ec2", image.region)
    done = []
    try:
        ec2.deregister_image(ImageId=image.image_id)
        done.append(f"deregistered {image.image_id}")
    except ClientError as error:
        if error.response["Error"]["Code"] not in IMAGE_GONE:
            raise
        done.append(f"{image.image_id} already deregistered")
    for snapshot_id in image.snapshot_ids:
        try:
            ec2.delete_snapshot(SnapshotId=snapshot_id)
            done.append(f"deleted {snapshot_id}")
        except ClientError as error:
            if error.response["Error"]["Code"] not in SNAPSHOT_GONE:
                raise
            done.append(f"{snapshot_id} already deleted")
    return done


def table(images: list[Image], unused: list[Image], in_use: set[str]) -> str:
    remove = {image.image_id for image in unused}
    rows = [("REGION", "IMAGE", "CREATED", "SNAPSHOTS", "NAME", "ACTION")]
    for image in sorted(images, key=lambda image: (image.region, image.created)):
        if image.image_id in remove:
            action = "remove"
        else:
            action = "keep (in use)" if image.image_id in in_use else "keep (newest)"
        snapshots = ",".join(image.snapshot_ids) or "-"
        rows.append((image.region, image.image_id, image.created, snapshots, image.name, action))
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m packer.ami_clean", description=__doc__.split("\n\n")[0])
    parser.add_argument("--environment", required=True, help="environment whose images to clean (dev, prod, ...)")
    parser.add_argument("--regions", required=True, help="comma-separated regions, e.g. us-east-1,us-west-2")
    parser.add_argument("--in-use", help="AMI ids still used, comma-separated, or 'none'")
    parser.add_argument("--in-use-from-stack-output", type=Path, metavar="FILE",
                        help="JSON of `pulumi stack output --json`; its regions.<region>.amiId are in use")
    parser.add_argument("--keep-newest", type=int, default=1,
                        help="newest images kept per region even if unused (default 1)")
    parser.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    parser.add_argument("--dry-run", action="store_true", help="only print what would be removed")
    args = parser.parse_args(argv)
    if not ENVIRONMENT.match(args.environment):
        parser.error(f"--environment must be dev, staging, prod or a short lowercase name, got {args.environment!r}")
    args.regions = [region.strip() for region in args.regions.split(",") if region.strip()]
    bad = [region for region in args.regions if not REGION.match(region)]
    if bad or not args.regions:
        parser.error(f"--regions must be AWS region names separated by commas, bad value {bad or args.regions!r}")
    if args.keep_newest < 0:
        parser.error(f"--keep-newest must be 0 or more, got {args.keep_newest}")
    if args.in_use is None and args.in_use_from_stack_output is None:
        parser.error("say which images are in use: --in-use-from-stack-output FILE, --in-use ami-..., "
                     "or --in-use none after `pulumi destroy`")
    try:
        in_use = parse_in_use(args.in_use) if args.in_use is not None else set()
        if args.in_use_from_stack_output is not None:
            source = str(args.in_use_from_stack_output)
            try:
                document = json.loads(args.in_use_from_stack_output.read_text(encoding="utf-8"))
            except (OSError, json.JSONDecodeError) as error:
                raise ValueError(f"{source}: cannot read stack outputs: {error}") from None
            in_use |= in_use_from_stack_output(document, source)
    except ValueError as error:
        parser.error(str(error))
    args.in_use_ids = in_use
    return args


def main(argv: list[str] | None = None, confirm=input) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    images = [image for region in args.regions for image in list_images(region, args.environment)]
    unused = select_unused(images, args.in_use_ids, args.keep_newest)
    if not images:
        print(f"no images tagged {ENVIRONMENT_TAG}={args.environment}, {MANAGED_BY_TAG}={MANAGED_BY_PACKER} "
              f"in {', '.join(args.regions)}")
        return 0
    print(table(images, unused, args.in_use_ids))
    snapshots = sum(len(image.snapshot_ids) for image in unused)
    if not unused:
        print("nothing to remove")
        return 0
    summary = f"deregister {len(unused)} image(s) and delete {snapshots} snapshot(s)"
    if args.dry_run:
        print(f"dry run: would {summary}")
        return 0
    if not args.yes and confirm(f"{summary}? type 'yes' to continue: ").strip() != "yes":
        print("nothing removed")
        return 1
    for image in unused:
        for line in delete_image(image):
            print(f"{image.region}: {line}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
