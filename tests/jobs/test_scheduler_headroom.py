"""Headroom in the scheduler Lambda, against moto: a run that buys for a job keeps its shape in the ledger's
headroom item; later runs keep room for such a job (buying ahead within the caps) until the window passes;
off by default; an unreadable item costs the run its headroom, nothing else.

Where moto differs from AWS: moto's Auto Scaling launches the instances of a raised desired capacity at
once, but nothing registers them with ECS, so they stay "launching" to the scheduler (as a booting instance
is), which is what these runs need. And moto registers every container instance with 4 vCPUs and 7,482 MiB
whatever its type (AWS registers what the type has, less what the agent reserves), so the jobs here are small.
"""

from __future__ import annotations

from datetime import timedelta

import boto3
from botocore.exceptions import ClientError
import pytest
from conftest import ASG, HOME, build_fleet, open_admission
from test_scheduler_release_inputs import later, run_held, spec

from lambdas.jobs import ledger as L
from lambdas.jobs.spec import assign_ids
from lambdas.scheduler import actions, headroom
from lambdas.scheduler.planning.headroom import RecentWait

WINDOW = 60  # minutes


@pytest.fixture
def fleet_empty(aws):
    """The fleet's group and cluster with no instance yet, and admission open."""
    build_fleet(size=0)
    open_admission()


def desired() -> int:
    return boto3.client("autoscaling", HOME).describe_auto_scaling_groups(
        AutoScalingGroupNames=[ASG])["AutoScalingGroups"][0]["DesiredCapacity"]


def queue_whole_box_job(home: dict, now) -> None:
    """A job that takes all four GPUs of the fleet's g5.12xlarge: nothing else fits beside it."""
    ledger = L.Ledger(boto3.client("dynamodb", HOME), home["table"])
    for job in assign_ids("sub-20261126070000-abcdef", [spec(gpus=4)]):
        ledger.put_new(L.new_record(job, now.timestamp()))


def waits(home: dict) -> list[RecentWait]:
    return headroom.read_waits(boto3.client("dynamodb", HOME), home["table"])


def test_room_is_bought_ahead_for_a_job_like_the_last_one_bought_for_until_the_window_passes(aws, home, fleet_empty):
    now = later()
    queue_whole_box_job(home, now)
    run_held(home, now, headroom_window_minutes=WINDOW)
    assert desired() == 1  # bought for the job (its instance is still launching)
    (kept,) = waits(home)
    assert (kept.gpus, kept.at) == (4, now.timestamp())
    # The next run keeps room for one more such job: the launching instance is the real job's, so one more.
    run_held(home, now + timedelta(minutes=1), headroom_window_minutes=WINDOW)
    assert desired() == 2
    run_held(home, now + timedelta(minutes=2), headroom_window_minutes=WINDOW)
    assert desired() == 2  # the placeholder waits on the instance bought ahead: nothing more
    # Past the window, no placeholder is left and nothing more is bought.
    run_held(home, now + timedelta(minutes=WINDOW + 1), headroom_window_minutes=WINDOW)
    assert desired() == 2 and waits(home) == []  # and the item forgets the job


def test_a_purchase_the_group_did_not_take_is_remembered_once_by_the_run_that_buys(aws, home, fleet_empty,
                                                                                  monkeypatch):
    # The group reached its cap between the run's read and its raise (another writer): nothing was bought,
    # the job stays unreserved, and the next run buys for it. Remembering the plan's purchase instead of
    # the group's would keep the job twice, and buy ahead for a second job that never came.
    now = later()
    queue_whole_box_job(home, now)
    raise_desired_capacity = actions.raise_desired_capacity
    monkeypatch.setattr(actions, "raise_desired_capacity", lambda *args: None)
    run_held(home, now, headroom_window_minutes=WINDOW)
    assert desired() == 0 and waits(home) == []
    monkeypatch.setattr(actions, "raise_desired_capacity", raise_desired_capacity)
    run_held(home, now + timedelta(minutes=1), headroom_window_minutes=WINDOW)
    assert desired() == 1 and [w.at for w in waits(home)] == [(now + timedelta(minutes=1)).timestamp()]
    run_held(home, now + timedelta(minutes=2), headroom_window_minutes=WINDOW)
    assert desired() == 2 and len(waits(home)) == 1  # room for one more such job, not two


def test_off_by_default_nothing_is_kept_or_bought_ahead(aws, home, fleet_empty):
    now = later()
    queue_whole_box_job(home, now)
    run_held(home, now)
    run_held(home, now + timedelta(minutes=1))
    assert desired() == 1 and waits(home) == []


def test_an_undecodable_wait_is_dropped_and_replaced_without_failing_the_run(aws, home, fleet_empty):
    now = later()
    boto3.client("dynamodb", HOME).put_item(TableName=home["table"], Item={
        "job_id": {"S": headroom.WAITS_KEY}, "at": {"N": "1"}, "waits": {"L": [{"M": {"gpus": {"S": "four"}}}]}})
    queue_whole_box_job(home, now)
    summary = run_held(home, now, headroom_window_minutes=WINDOW)
    assert desired() == 1 and summary["errors"] == []
    assert [w.gpus for w in waits(home)] == [4]


def test_an_unreadable_headroom_item_costs_the_run_its_headroom_only(aws, home, fleet_empty, monkeypatch):
    def throttled(*args, **kwargs):
        raise ClientError({"Error": {"Code": "ProvisionedThroughputExceededException", "Message": "slow down"}},
                          "GetItem")
    monkeypatch.setattr(headroom, "read_waits", throttled)
    now = later()
    queue_whole_box_job(home, now)
    summary = run_held(home, now, headroom_window_minutes=WINDOW)
    assert desired() == 1  # the job was still bought for
    assert [e["decision"] for e in summary["errors"]] == ["read-headroom-failed"]


def test_an_empty_machine_a_placeholder_fits_is_kept_until_the_window_passes(aws, home):
    instances = build_fleet(size=1)
    open_admission()
    now = later()
    tag = (now - timedelta(hours=1)).isoformat(timespec="seconds")
    boto3.client("ec2", HOME).create_tags(Resources=list(instances), Tags=[{"Key": "mlfleet:empty-since", "Value": tag}])
    # A job like this one was bought for ten minutes ago (what an earlier run keeps in the item).
    headroom.write_waits(boto3.client("dynamodb", HOME), home["table"],
                         [RecentWait(now.timestamp() - 600, gpus=1, vcpus=1, memory_mib=1024)], now.timestamp() - 600)
    kept = run_held(home, now, headroom_window_minutes=WINDOW, release_after_empty_minutes=5)
    assert kept["released"] == [] and desired() == 1
    # A wait older than the window holds nothing: released through the removal protocol like any empty
    # machine. (The wait is made older rather than the run later: the run's removals act only while the
    # placement lease, taken at the real time, is valid at the run's time.)
    headroom.write_waits(boto3.client("dynamodb", HOME), home["table"],
                         [RecentWait(now.timestamp() - 60 * WINDOW - 1, gpus=1, vcpus=1, memory_mib=1024)],
                         now.timestamp() + 1)
    assert run_held(home, now, headroom_window_minutes=WINDOW, release_after_empty_minutes=5)["released"] == \
        list(instances)
