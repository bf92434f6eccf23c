"""What the release stage and duration-aware placement read from AWS and the ledger, against moto.

Where moto differs from AWS: moto records no `stoppedAt` on a stopped task (AWS does), so a machine
whose stopped tasks are listed has an unknown empty time there, and is kept; registeredAt is moto's
wall clock at registration, so the tests plan at a time after it.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import boto3
from conftest import ASG, CLUSTER, FAMILY, HOME, build_fleet, fleets_json, open_admission, scheduler_settings

from lambdas.common.catalog import load_catalog
from lambdas.jobs import ledger as L
from lambdas.jobs.fleets import parse_fleets
from lambdas.jobs.spec import assign_ids, parse_spec
from lambdas.scheduler import state
from lambdas.scheduler.handler import run


def later(minutes: float = 10) -> datetime:
    return datetime.now(timezone.utc) + timedelta(minutes=minutes)


def tag(instance_id: str, key: str, value: str) -> None:
    boto3.client("ec2", HOME).create_tags(Resources=[instance_id], Tags=[{"Key": key, "Value": value}])


def read(now: datetime) -> state.RegionView:
    return state.read_region(HOME, parse_fleets(fleets_json()), load_catalog(), {}, now)


def test_an_empty_machine_reports_since_when_and_its_launch_and_tags(aws):
    instances = build_fleet(size=3)
    first, second, third = sorted(instances)
    tag(first, "mlfleet:keep-alive", "true")
    tag(second, state.REMOVING_TAG, "release@2026-11-23T00:00:00Z")
    now = later()
    view = read(now)
    by_id = {m.instance_id: m for m in view.machines}
    assert by_id[first].protected and not by_id[third].protected
    assert by_id[second].removing and not by_id[third].removing
    # Nothing ever ran there: empty since it registered (moto's clock), which is before `now`.
    assert by_id[third].empty_since is not None and by_id[third].empty_since <= now.timestamp()
    assert by_id[third].launched_at is not None and by_id[third].launched_at <= now.timestamp()
    (fleet,) = view.fleets
    # The machine being removed is neither usable nor on its way; it counts against the budget.
    assert (fleet.current_instances, fleet.pending_instances, fleet.removing_instances, fleet.min_size) == (2, 0, 1, 0)


def test_a_machine_with_a_stopped_task_whose_stop_time_is_unknown_is_not_empty_for_sure(aws):
    instances = build_fleet(size=1)
    ecs = boto3.client("ecs", HOME)
    (arn,) = instances.values()
    task = ecs.start_task(cluster=CLUSTER, taskDefinition=FAMILY, containerInstances=[arn],
                          startedBy="sub-20261122120000-abcdef-00000")["tasks"][0]
    assert read(later()).machines[0].empty_since is None  # running: not empty
    ecs.stop_task(cluster=CLUSTER, task=task["taskArn"], reason="done")
    # AWS would give the task's stoppedAt; moto gives none, and unknown means kept.
    assert read(later()).machines[0].empty_since is None


def test_a_run_with_nothing_queued_proposes_the_empty_machines_for_release(aws, home, caplog):
    build_fleet(size=2)
    open_admission()
    summary = run(scheduler_settings(home), lambda: 170_000, now=later(10))
    proposed = {c["container_instance_arn"] for c in summary["releases"]}
    # Budget: 10% of two machines rounds up to one at a time.
    assert len(proposed) == 1 and all(c["method"] == "release" and c["asg_name"] == ASG for c in summary["releases"])
    assert "\"decision\": \"removal-propose\"" in caplog.text
    # Within the release delay nothing is proposed.
    assert run(scheduler_settings(home), lambda: 170_000, now=datetime.now(timezone.utc))["releases"] == []


def test_a_machine_that_gets_a_job_is_not_released(aws, home):
    build_fleet(size=1)
    open_admission()
    spec = parse_spec({"image": "ghcr.io/team/train:1", "command": ["python"], "gpus": 1, "vcpus": 1,
                       "memory_mib": 1024, "expected_runtime_s": 600}, fleet_regions=(HOME,), catalog=load_catalog(),
                      default_max_attempts=3)
    ledger = L.Ledger(boto3.client("dynamodb", HOME), home["table"])
    now = later(10)
    for job in assign_ids("sub-20261122120000-abcdef", [spec]):
        ledger.put_new(L.new_record(job, now.timestamp()))
    summary = run(scheduler_settings(home), lambda: 170_000, now=now)
    assert len(summary["started"]) == 1 and summary["releases"] == []


def test_the_ledger_says_when_a_run_started_and_how_long_a_finished_one_took(aws, home):
    spec = parse_spec({"image": "i:1", "gpus": 1, "vcpus": 1, "memory_mib": 1024}, fleet_regions=(HOME,),
                      catalog=load_catalog(), default_max_attempts=3)
    ledger = L.Ledger(boto3.client("dynamodb", HOME), home["table"])
    (job,) = assign_ids("sub-20261122120000-abcdef", [spec])
    ledger.put_new(L.new_record(job, 100.0))
    assert ledger.get(job.job_id).started_at is None and ledger.get(job.job_id).run_seconds is None
    ledger.transition(job.job_id, L.STARTING, expect_states=[L.QUEUED], expect_attempt=0, reason="r", now=110.0,
                      attempt=1)
    ledger.transition(job.job_id, L.RUNNING, expect_states=[L.STARTING], expect_attempt=1, reason="r", now=120.0)
    assert ledger.get(job.job_id).started_at == 120.0 and ledger.get(job.job_id).run_seconds is None
    ledger.transition(job.job_id, L.SUCCEEDED, expect_states=[L.RUNNING], expect_attempt=1, reason="r", now=720.0)
    assert ledger.get(job.job_id).run_seconds == 600.0
    assert json.loads(json.dumps(ledger.get(job.job_id).spec.to_document())).get("expected_runtime_s") is None
