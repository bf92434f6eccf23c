"""The AMI ids a Packer build recorded, per region, for one environment.

Packer's `manifest` post-processor (packer/gpu.pkr.hcl) appends one entry per build to
packer/manifest.json and remembers the last run::

    {"builds": [{"name": "al2023_gpu", "builder_type": "amazon-ebs", "build_time": 1763830000,
                 "artifact_id": "us-east-1:ami-0abc...,us-west-2:ami-0def...",
                 "packer_run_uuid": "5b0c...", "custom_data": {"environment": "dev", ...}}],
     "last_run_uuid": "5b0c..."}

`load_manifest(path, environment)` returns {region: ManifestImage} from the newest build for that
environment: the build of the last run (`last_run_uuid`) when that run built the environment, otherwise
the latest earlier build for it (builds are appended in run order, so one manifest serves every
environment the team builds from this checkout).

- No file: an empty mapping. That is the documented fallback: the program then looks for the newest
  image the account built for the environment (by tag; components/ami choose_ami), then the stock AMI with
  a warning.
- A manifest holding builds for other environments only: an empty mapping too (same fallback).
- A file that exists but cannot be trusted (bad JSON, a missing key, a bad artifact id or AMI id)
  raises ManifestError naming the file, the key and the bad value:
  a half-readable manifest must never turn silently into an older image.

Standard library only: the Pulumi program imports this module.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

AMI_ID = re.compile(r"^ami-[0-9a-f]{8,17}$")
REGION = re.compile(r"^[a-z]{2}(-gov|-iso[a-z]*)?-[a-z]+-[0-9]$")


class ManifestError(ValueError):
    """packer/manifest.json exists but cannot be used; the message names the file, key and value."""


@dataclass(frozen=True)
class ManifestImage:
    region: str
    ami_id: str
    environment: str
    run_uuid: str
    build_time: int
    git_revision: str | None
    nvidia_driver: str | None
    cuda: str | None
    # The root volume the image was built with (Packer's root_volume_gib): its snapshot's size, which every
    # instance's root volume must at least have (botocore ec2 EbsBlockDevice.VolumeSize: "equal to or larger
    # than the snapshot size"). None in manifests written before it was recorded. A record for the reader: the
    # program checks the snapshot EC2 describes, recorded or not (components/program.py check_images).
    root_volume_gib: int | None = None


def load_manifest(path: str | Path, environment: str) -> dict[str, ManifestImage]:
    """{region: ManifestImage} of the newest build for `environment`; {} when the file does not exist."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    try:
        document = json.loads(text)
    except json.JSONDecodeError as error:
        raise ManifestError(f"{path}: not valid JSON ({error.msg} at line {error.lineno})") from None
    if not isinstance(document, dict):
        raise ManifestError(f"{path}: top level must be an object, got {_show(document)}")
    builds = document.get("builds")
    if not isinstance(builds, list):
        raise ManifestError(f"{path}: builds must be a list, got {_show(builds)}")
    last_run = document.get("last_run_uuid")
    if not isinstance(last_run, str) or not last_run:
        raise ManifestError(f"{path}: last_run_uuid must be a non-empty string, got {_show(last_run)}")

    parsed = [_parse_build(path, index, build) for index, build in enumerate(builds)]
    mine = [build for build in parsed if build.environment == environment]
    if not mine:
        # This checkout built images for other environments only: nothing recorded for this one, so the
        # AMI component goes on to the account's images tagged for it (never another environment's).
        return {}
    from_last_run = [build for build in mine if build.run_uuid == last_run]
    chosen = (from_last_run or mine)[-1]
    return {image.region: image for image in chosen.images}


@dataclass(frozen=True)
class _Build:
    environment: str
    run_uuid: str
    images: tuple[ManifestImage, ...]


def _parse_build(path: Path, index: int, build: object) -> _Build:
    where = f"builds[{index}]"
    if not isinstance(build, dict):
        raise ManifestError(f"{path}: {where} must be an object, got {_show(build)}")
    custom = build.get("custom_data")
    if not isinstance(custom, dict):
        raise ManifestError(f"{path}: {where}.custom_data must be an object, got {_show(custom)}")
    environment = custom.get("environment")
    if not isinstance(environment, str) or not environment:
        raise ManifestError(
            f"{path}: {where}.custom_data.environment must be a non-empty string, got {_show(environment)}")
    run_uuid = build.get("packer_run_uuid")
    if not isinstance(run_uuid, str) or not run_uuid:
        raise ManifestError(f"{path}: {where}.packer_run_uuid must be a non-empty string, got {_show(run_uuid)}")
    build_time = build.get("build_time")
    if not isinstance(build_time, int) or isinstance(build_time, bool):
        raise ManifestError(f"{path}: {where}.build_time must be an integer (Unix time), got {_show(build_time)}")
    artifact_id = build.get("artifact_id")
    if not isinstance(artifact_id, str) or not artifact_id:
        raise ManifestError(f"{path}: {where}.artifact_id must be a non-empty string, got {_show(artifact_id)}")

    # Packer writes custom_data values as strings.
    root_volume = custom.get("root_volume_gib")
    if root_volume is not None and not (isinstance(root_volume, str) and root_volume.isascii() and root_volume.isdigit()):
        raise ManifestError(
            f"{path}: {where}.custom_data.root_volume_gib must be a whole number of GiB, got {_show(root_volume)}")
    root_volume_gib = int(root_volume) if root_volume is not None else None

    images: dict[str, ManifestImage] = {}
    for entry in artifact_id.split(","):
        region, separator, ami_id = entry.strip().partition(":")
        if not separator or not REGION.match(region):
            raise ManifestError(
                f"{path}: {where}.artifact_id must be REGION:AMI_ID pairs separated by commas, got {artifact_id!r} "
                f"(bad entry {entry!r})"
            )
        if not AMI_ID.match(ami_id):
            raise ManifestError(
                f"{path}: {where}.artifact_id has AMI id {ami_id!r} for {region}, expected ami-<8 to 17 hex>")
        if region in images:
            raise ManifestError(f"{path}: {where}.artifact_id lists region {region!r} twice: {artifact_id!r}")
        images[region] = ManifestImage(
            region=region,
            ami_id=ami_id,
            environment=environment,
            run_uuid=run_uuid,
            build_time=build_time,
            git_revision=_optional_str(custom.get("git_revision")),
            nvidia_driver=_optional_str(custom.get("nvidia_driver")),
            cuda=_optional_str(custom.get("cuda")),
            root_volume_gib=root_volume_gib,
        )
    return _Build(environment=environment, run_uuid=run_uuid, images=tuple(images.values()))


def _optional_str(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
