"""packer.manifest: the AMI ids a Packer build recorded, or a clear error, never a silent stale image."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from packer.manifest import ManifestError, load_manifest


def build(environment: str, run_uuid: str, artifact_id: str, build_time: int = 1763830000, **custom) -> dict:
    # The shape Packer's manifest post-processor writes (packer/gpu.pkr.hcl sets custom_data).
    return {"name": "al2023_gpu", "builder_type": "amazon-ebs", "build_time": build_time, "files": None,
            "artifact_id": artifact_id, "packer_run_uuid": run_uuid,
            "custom_data": {"environment": environment, "git_revision": "0123abc", "nvidia_driver": "580.178.04",
                            "cuda": "13.2.0", **custom}}


def write(tmp_path, document) -> str:
    path = tmp_path / "manifest.json"
    path.write_text(document if isinstance(document, str) else json.dumps(document))
    return str(path)


def test_missing_file_is_the_documented_empty_fallback(tmp_path):
    assert load_manifest(tmp_path / "manifest.json", "dev") == {}


def test_one_build_in_two_regions(tmp_path):
    path = write(tmp_path, {"builds": [build("dev", "run-1", "us-east-1:ami-0123456789abcdef0,us-west-2:ami-0fedcba987654321")],
                            "last_run_uuid": "run-1"})
    images = load_manifest(path, "dev")
    assert {region: image.ami_id for region, image in images.items()} == {
        "us-east-1": "ami-0123456789abcdef0", "us-west-2": "ami-0fedcba987654321"}
    image = images["us-west-2"]
    assert (image.environment, image.run_uuid, image.git_revision, image.nvidia_driver, image.cuda) == (
        "dev", "run-1", "0123abc", "580.178.04", "13.2.0")


def test_the_root_volume_the_image_was_built_with_is_read_when_recorded(tmp_path):
    """Packer writes custom_data values as strings; manifests written before the key was recorded lack it."""
    path = write(tmp_path, {"builds": [build("dev", "r1", "us-east-1:ami-11111111"),
                                       build("staging", "r2", "us-east-1:ami-22222222", root_volume_gib="300")],
                            "last_run_uuid": "r2"})
    assert load_manifest(path, "dev")["us-east-1"].root_volume_gib is None
    assert load_manifest(path, "staging")["us-east-1"].root_volume_gib == 300


def test_later_runs_win(tmp_path):
    path = write(tmp_path, {"builds": [build("dev", "run-1", "us-east-1:ami-11111111"),
                                       build("dev", "run-2", "us-east-1:ami-22222222")],
                            "last_run_uuid": "run-2"})
    assert load_manifest(path, "dev")["us-east-1"].ami_id == "ami-22222222"


def test_last_run_uuid_decides_over_file_order(tmp_path):
    # Packer appends, so the last run is normally last; if an entry was edited in later, last_run_uuid wins.
    path = write(tmp_path, {"builds": [build("dev", "run-2", "us-east-1:ami-22222222"),
                                       build("dev", "run-1", "us-east-1:ami-11111111")],
                            "last_run_uuid": "run-2"})
    assert load_manifest(path, "dev")["us-east-1"].ami_id == "ami-22222222"


def test_each_environment_gets_its_own_newest_build(tmp_path):
    path = write(tmp_path, {"builds": [build("dev", "run-1", "us-east-1:ami-11111111"),
                                       build("prod", "run-2", "us-east-1:ami-22222222,us-west-2:ami-33333333"),
                                       build("dev", "run-3", "us-east-1:ami-44444444"),
                                       build("staging", "run-4", "us-east-1:ami-55555555")],
                            "last_run_uuid": "run-4"})
    assert load_manifest(path, "dev")["us-east-1"].ami_id == "ami-44444444"
    assert set(load_manifest(path, "prod")) == {"us-east-1", "us-west-2"}
    assert load_manifest(path, "staging")["us-east-1"].ami_id == "ami-55555555"


def test_builds_for_other_environments_only_record_nothing_for_this_one(tmp_path):
    path = write(tmp_path, {"builds": [build("staging", "r", "us-east-1:ami-11111111")], "last_run_uuid": "r"})
    assert load_manifest(path, "dev") == {}


@pytest.mark.parametrize(("document", "message"), [
    ("{not json", "not valid JSON"),
    ("[]", "top level must be an object"),
    ({"last_run_uuid": "r"}, "builds must be a list"),
    ({"builds": [], "last_run_uuid": ""}, "last_run_uuid must be a non-empty string"),
    ({"builds": ["x"], "last_run_uuid": "r"}, "builds[0] must be an object"),
    ({"builds": [build("dev", "r", "ami-11111111")], "last_run_uuid": "r"}, "builds[0].artifact_id must be REGION:AMI_ID"),
    ({"builds": [build("dev", "r", "us-east-1:ami-XYZ")], "last_run_uuid": "r"}, "AMI id 'ami-XYZ' for us-east-1"),
    ({"builds": [build("dev", "r", "US-EAST-1:ami-11111111")], "last_run_uuid": "r"}, "bad entry 'US-EAST-1:ami-11111111'"),
    ({"builds": [build("dev", "r", "us-east-1:ami-11111111,us-east-1:ami-22222222")], "last_run_uuid": "r"},
     "lists region 'us-east-1' twice"),
    ({"builds": [build("dev", "r", "")], "last_run_uuid": "r"}, "builds[0].artifact_id must be a non-empty string"),
    ({"builds": [{**build("dev", "r", "us-east-1:ami-11111111"), "custom_data": None}], "last_run_uuid": "r"},
     "builds[0].custom_data must be an object"),
    ({"builds": [build("", "r", "us-east-1:ami-11111111")], "last_run_uuid": "r"}, "custom_data.environment"),
    ({"builds": [build("dev", "r", "us-east-1:ami-11111111", build_time="yesterday")], "last_run_uuid": "r"},
     "builds[0].build_time must be an integer"),
    ({"builds": [build("dev", "r", "us-east-1:ami-11111111", root_volume_gib="lots")], "last_run_uuid": "r"},
     "builds[0].custom_data.root_volume_gib must be a whole number of GiB"),
    ({"builds": [build("dev", "r", "us-east-1:ami-11111111", root_volume_gib=300)], "last_run_uuid": "r"},
     "custom_data.root_volume_gib must be a whole number of GiB, got 300"),
])
def test_untrustworthy_manifest_is_a_clear_error(tmp_path, document, message):
    path = write(tmp_path, document)
    with pytest.raises(ManifestError) as error:
        load_manifest(path, "dev")
    assert path in str(error.value) and message in str(error.value)


def test_a_bad_entry_anywhere_fails_even_if_the_newest_build_is_fine(tmp_path):
    path = write(tmp_path, {"builds": [build("prod", "run-1", "us-east-1:ami-bad"), build("dev", "run-2", "us-east-1:ami-22222222")],
                            "last_run_uuid": "run-2"})
    with pytest.raises(ManifestError, match=r"builds\[0\]\.artifact_id has AMI id 'ami-bad'"):
        load_manifest(path, "dev")


regions = st.from_regex(r"\A[a-z]{2}-[a-z]{4,9}-[1-9]\Z")
ami_ids = st.from_regex(r"\Aami-[0-9a-f]{8,17}\Z")


@settings(max_examples=50, deadline=None)
@given(st.dictionaries(regions, ami_ids, min_size=1, max_size=6), st.integers(min_value=1, max_value=4))
def test_round_trip_of_what_packer_writes(tmp_path_factory, images, runs):
    artifact_id = ",".join(f"{region}:{ami}" for region, ami in images.items())
    builds = [build("dev", f"run-{n}", "us-east-1:ami-00000000") for n in range(runs - 1)]
    builds.append(build("dev", f"run-{runs}", artifact_id))
    path = write(tmp_path_factory.mktemp("m"), {"builds": builds, "last_run_uuid": f"run-{runs}"})
    assert {region: image.ami_id for region, image in load_manifest(path, "dev").items()} == images
