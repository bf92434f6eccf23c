"""packer.ami_clean: the pure choice of unused images, and the clean-up end to end against moto."""

from __future__ import annotations

import itertools
import json

import boto3
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from moto import mock_aws

from lambdas.common.aws import reset_clients
from packer.ami_clean import (Image, delete_image, in_use_from_stack_output, list_images, main, parse_in_use,
                               select_unused)


def image(region: str, image_id: str, created: str) -> Image:
    return Image(region=region, image_id=image_id, name=f"mlfleet-dev-gpu-{created}", created=created, snapshot_ids=("snap-1",))


A = image("us-east-1", "ami-aaaaaaaa", "2026-11-01T00:00:00.000Z")
B = image("us-east-1", "ami-bbbbbbbb", "2026-11-08T00:00:00.000Z")
C = image("us-east-1", "ami-cccccccc", "2026-11-15T00:00:00.000Z")
D = image("us-west-2", "ami-dddddddd", "2026-11-02T00:00:00.000Z")


@pytest.mark.parametrize(("in_use", "keep_newest", "removed"), [
    (set(), 1, [B, A]),                       # newest per region kept: C in us-east-1, D in us-west-2
    ({"ami-aaaaaaaa"}, 1, [B]),               # in use is kept whatever its age
    (set(), 0, [C, B, A, D]),                 # teardown: nothing kept
    ({"ami-cccccccc", "ami-dddddddd"}, 0, [B, A]),
    (set(), 3, []),
    ({"ami-aaaaaaaa", "ami-bbbbbbbb", "ami-cccccccc", "ami-dddddddd"}, 0, []),
])
def test_select_unused(in_use, keep_newest, removed):
    assert select_unused([A, B, C, D], in_use, keep_newest) == removed


def test_select_unused_rejects_negative_keep():
    with pytest.raises(ValueError, match="keep_newest must be 0 or more, got -1"):
        select_unused([A], set(), -1)


images_strategy = st.lists(
    st.builds(image, st.sampled_from(["us-east-1", "us-west-2", "eu-west-1"]),
              st.from_regex(r"\Aami-[0-9a-f]{8}\Z"), st.from_regex(r"\A2026-1[0-2]-[0-2][1-9]T00:00:00\.000Z\Z")),
    max_size=12, unique_by=lambda item: item.image_id)


@settings(max_examples=50, deadline=None)
@given(images_strategy, st.integers(min_value=0, max_value=4), st.data())
def test_select_unused_properties(images, keep_newest, data):
    in_use = set(data.draw(st.lists(st.sampled_from([i.image_id for i in images]), unique=True))) if images else set()
    removed = select_unused(images, in_use, keep_newest)
    assert not {i.image_id for i in removed} & in_use, "an image in use is never removed"
    assert set(removed) <= set(images)
    for region in {i.region for i in images}:
        mine = sorted((i for i in images if i.region == region), key=lambda i: (i.created, i.image_id), reverse=True)
        assert not set(mine[:keep_newest]) & set(removed), "the newest N of each region stay"
        assert set(mine[keep_newest:]) - set(removed) <= {i for i in mine if i.image_id in in_use}, "the rest go unless in use"


def test_in_use_from_stack_output():
    outputs = {"regions": {"us-east-1": {"amiId": "ami-0123456789abcdef0", "clusterName": "x"},
                           "us-west-2": {"amiId": "ami-0fedcba987654321"}}, "other": 1}
    assert in_use_from_stack_output(outputs, "out.json") == {"ami-0123456789abcdef0", "ami-0fedcba987654321"}
    with pytest.raises(ValueError, match=r"out.json: expected an object with key 'regions'"):
        in_use_from_stack_output({}, "out.json")
    with pytest.raises(ValueError, match=r"out.json: regions.us-east-1.amiId must be an AMI id, got None"):
        in_use_from_stack_output({"regions": {"us-east-1": {}}}, "out.json")


def test_parse_in_use():
    assert parse_in_use("none") == set()
    assert parse_in_use("ami-11111111, ami-22222222") == {"ami-11111111", "ami-22222222"}
    for bad in ("", "ami-1", "latest", "ami-11111111,sg-22222222"):
        with pytest.raises(ValueError, match="--in-use must be AMI ids"):
            parse_in_use(bad)


@pytest.mark.parametrize(("argv", "message"), [
    (["--environment", "Dev", "--regions", "us-east-1", "--in-use", "none"], "--environment must be"),
    (["--environment", "dev", "--regions", "us-east", "--in-use", "none"], "--regions must be AWS region names"),
    (["--environment", "dev", "--regions", "us-east-1"], "say which images are in use"),
    (["--environment", "dev", "--regions", "us-east-1", "--in-use", "none", "--keep-newest", "-1"], "--keep-newest must be 0"),
])
def test_bad_arguments_fail_before_any_aws_call(capsys, argv, message):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2 and message in capsys.readouterr().err


# --- against moto ---------------------------------------------------------------------------------
# moto's RegisterImage ignores BlockDeviceMappings and TagSpecifications: it attaches a snapshot of its
# own and no tags, so the tests tag with CreateTags and read the snapshot ids back, as the tool does.

def register(region: str, name: str, tags: dict[str, str]) -> tuple[str, list[str]]:
    ec2 = boto3.client("ec2", region_name=region)
    image_id = ec2.register_image(Name=name, RootDeviceName="/dev/xvda")["ImageId"]
    if tags:
        ec2.create_tags(Resources=[image_id], Tags=[{"Key": k, "Value": v} for k, v in tags.items()])
    (described,) = ec2.describe_images(ImageIds=[image_id])["Images"]
    return image_id, [m["Ebs"]["SnapshotId"] for m in described["BlockDeviceMappings"]]


def ours(environment: str) -> dict[str, str]:
    return {"mlfleet:environment": environment, "mlfleet:managed-by": "packer", "mlfleet:image": "gpu"}


def remaining(region: str) -> set[str]:
    """Image and snapshot ids this account still has in the region."""
    ec2 = boto3.client("ec2", region_name=region)
    return ({i["ImageId"] for i in ec2.describe_images(Owners=["self"])["Images"]}
            | {s["SnapshotId"] for s in ec2.describe_snapshots(OwnerIds=["self"])["Snapshots"]})


@pytest.fixture(scope="module")
def moto_account():
    # One moto account for the module: creating moto's EC2 backend for a region costs seconds, so the
    # tests share it and each works in an environment of its own (see `account`).
    with mock_aws():
        yield
    reset_clients()


environments = itertools.count(1)


@pytest.fixture
def account(moto_account):
    reset_clients()
    env = f"test-{next(environments)}"
    return {
        "env": env,
        "in_use": register("us-east-1", f"mlfleet-{env}-gpu-1", ours(env)),
        "old_1": register("us-east-1", f"mlfleet-{env}-gpu-2", ours(env)),
        "old_2": register("us-east-1", f"mlfleet-{env}-gpu-3", ours(env)),
        "west": register("us-west-2", f"mlfleet-{env}-gpu-4", ours(env)),
        "other_env": register("us-east-1", f"mlfleet-other-{env}-gpu-1", ours(f"other-{env}")),
        "hand_made": register("us-east-1", f"someone-elses-image-{env}", {"mlfleet:environment": env}),
    }


def test_lists_only_this_environments_packer_images(account):
    listed = {i.image_id for i in list_images("us-east-1", account["env"])}
    assert listed == {account[k][0] for k in ("in_use", "old_1", "old_2")}
    (west,) = list_images("us-west-2", account["env"])
    assert west.snapshot_ids == tuple(account["west"][1]) and west.created


def test_clean_removes_unused_images_and_their_snapshots(account, tmp_path, capsys):
    outputs = tmp_path / "outputs.json"
    outputs.write_text(json.dumps({"regions": {"us-east-1": {"amiId": account["in_use"][0]}}}))
    code = main(["--environment", account["env"], "--regions", "us-east-1,us-west-2",
                 "--in-use-from-stack-output", str(outputs), "--keep-newest", "0", "--yes"])
    assert code == 0
    east, west = remaining("us-east-1"), remaining("us-west-2")
    for key in ("old_1", "old_2"):
        image_id, snapshots = account[key]
        assert not {image_id, *snapshots} & east
    assert not {account["west"][0], *account["west"][1]} & west
    for key in ("in_use", "other_env", "hand_made"):
        image_id, snapshots = account[key]
        assert {image_id, *snapshots} <= east
    printed = capsys.readouterr().out
    assert "keep (in use)" in printed and f"deregistered {account['old_1'][0]}" in printed


def test_dry_run_and_refused_confirmation_remove_nothing(account, capsys):
    argv = ["--environment", account["env"], "--regions", "us-east-1", "--in-use", "none", "--keep-newest", "0"]
    assert main([*argv, "--dry-run"]) == 0
    assert "dry run: would deregister 3 image(s) and delete 3 snapshot(s)" in capsys.readouterr().out
    assert main(argv, confirm=lambda prompt: "no") == 1
    assert len(list_images("us-east-1", account["env"])) == 3
    assert main(argv, confirm=lambda prompt: "yes") == 0
    assert list_images("us-east-1", account["env"]) == []


def test_keep_newest_keeps_one_per_region(account):
    assert main(["--environment", account["env"], "--regions", "us-west-2", "--in-use", "none", "--yes"]) == 0
    assert account["west"][0] in remaining("us-west-2"), "the only image of the region is its newest"


def test_delete_is_idempotent(account):
    (west,) = list_images("us-west-2", account["env"])
    first = delete_image(west)
    second = delete_image(west)
    assert first[0].startswith("deregistered") and second == [
        f"{west.image_id} already deregistered", *(f"{s} already deleted" for s in west.snapshot_ids)]
