"""A fleet whose every machine comes up degraded stops buying: the circuit breaker trips on machines first seen
degraded, not only on failed launches (lambdas/scheduler/fleet_health.py, handler.circuit_breaker).

A bad image or launch template (an agent started without ECS_ENABLE_GPU_SUPPORT, a driver that fails at boot)
makes every machine the fleet launches register no GPU with ECS: each is degraded, takes no job and is given
back once empty; before, the scheduler bought the next one for the waiting jobs, run after run, and told no
one. Its launches succeed, so DescribeScalingActivities reports no failure (moto records none either).

Where moto differs from AWS: it does not track GPUs at all (it ignores the agent's `platformDevices` and reports
no "GPU" in `registeredResources`). tests/ecs_agent.py adds the GPU resource for a healthy agent; here a machine
"boots" by registering with `gpus=0`, which adds none: in AWS, an agent that registered no GPU device. moto's
groups launch their instances as soon as their desired capacity is raised, and never register them with ECS:
`boot` does what the agent would. Its instances' LaunchTime is the wall clock's while the runs' `now` moves on
by STEP, so `boot` dates each machine's launch to the run that bought it in DescribeInstances' answers: the
breaker counts only machines that came up degraded, launched within the last 30 minutes.
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime, timedelta

import boto3
import ecs_agent
import pytest
from alert_delivery import published
from conftest import ASG, CLUSTER, ENV, HOME, TABLE, aws_client, build_fleet, fleets_json, open_admission, scheduler_settings
from test_degraded_machines import ledger, queue_jobs
from test_scheduler_release_inputs import later, run_held

from lambdas.jobs import ledger as L
from lambdas.jobs.fleets import parse_fleets
from lambdas.scheduler import fleet_health as fh
from lambdas.scheduler import handler as scheduler
from lambdas.scheduler import state
from lambdas.scheduler.state import SCALING_PAUSED_TAG

STEP = timedelta(minutes=2)  # a run every other minute: a machine boots between two


LAUNCHED: dict[str, datetime] = {}  # instance id -> the simulated time of the run that bought it


@pytest.fixture
def world(home, faults):
    build_fleet(size=0)  # an empty fleet of at most 4 g5.12xlarge (4 GPUs each)
    open_admission()
    topic = aws_client("sns", HOME).create_topic(Name=f"mlfleet-{ENV}-alerts")["TopicArn"]
    LAUNCHED.clear()

    def dated(params, parsed):
        for reservation in parsed.get("Reservations", []):
            for instance in reservation["Instances"]:
                if instance["InstanceId"] in LAUNCHED:
                    instance["LaunchTime"] = LAUNCHED[instance["InstanceId"]]
    faults.amends[("ec2", "DescribeInstances")] = dated
    return home, faults, topic


def group() -> dict:
    return aws_client("autoscaling", HOME).describe_auto_scaling_groups(AutoScalingGroupNames=[ASG])["AutoScalingGroups"][0]


def boot(healthy: bool = False, at: datetime | None = None) -> list[str]:
    """The group's instances not yet in the cluster join it, as their agent does after boot; without `healthy`,
    registering no GPU (moto tracks none: with gpus=0, tests/ecs_agent.py adds no GPU resource)."""
    ecs = aws_client("ecs", HOME)
    arns = ecs.list_container_instances(cluster=CLUSTER)["containerInstanceArns"]
    joined = {ci["ec2InstanceId"] for ci in ecs.describe_container_instances(
        cluster=CLUSTER, containerInstances=arns)["containerInstances"]} if arns else set()
    booted = [i["InstanceId"] for i in group()["Instances"]
              if i["InstanceId"] not in joined and i["LifecycleState"] == "InService"]
    for instance_id in booted:
        ecs_agent.register(ecs, CLUSTER, instance_id, HOME, gpus=None if healthy else 0)
        if at is not None:
            LAUNCHED[instance_id] = at
    return booted


def runs(home, count: int, start, launched: list[str], healthy: bool = False) -> list[dict]:
    """`count` runs a STEP apart from `start`, each followed by the boot of what it bought."""
    summaries = []
    for n in range(count):
        summaries.append(run_held(home, start + n * STEP))
        launched += boot(healthy, at=start + n * STEP)
    return summaries


def breaker_lines(caplog) -> list[dict]:
    return [json.loads(r.getMessage()) for r in caplog.records if '"circuit-breaker"' in r.getMessage()]


def paused() -> bool:
    return any(t["Key"] == SCALING_PAUSED_TAG for t in group().get("Tags", []))


def test_a_fleet_whose_machines_all_come_up_degraded_stops_buying_alerts_once_and_resumes_after_the_window(
        world, caplog):
    home, faults, topic = world
    (job_id,) = queue_jobs(1)
    start, launched = later(), []

    first = runs(home, 12, start, launched)  # 22 minutes: before, a machine bought every other run or so

    assert len(launched) == scheduler.BREAKER_FAILURES, launched  # then no more
    assert all(s["errors"] == [] for s in first) and ledger().get(job_id).state == L.QUEUED
    assert group()["DesiredCapacity"] == 0 and paused()  # each given back; the mark set
    # One alert, naming the machines and why, and what to check.
    ((subject, message),) = published(topic)
    assert subject == f"mlfleet {ENV}: scaling of gpu1 in {HOME} stopped"
    text = message["default"]
    assert f"{scheduler.BREAKER_FAILURES} machines of Auto Scaling group {ASG} came up degraded in the last 30 minutes" in text
    assert all(f"- {i}, first seen degraded at" in text for i in launched)
    assert text.count("ECS registered no GPU resource of its type's 4 GPUs") == scheduler.BREAKER_FAILURES
    assert "the AMI" in text and "ECS_ENABLE_GPU_SUPPORT" in text
    # A structured line each run while it is open, with the machines.
    lines = breaker_lines(caplog)
    assert lines and all(line["causes"] == ["degraded-machines"] and line["scaling_stopped"] for line in lines)
    assert sum(line["newly_opened"] for line in lines) == 1
    assert {m["instance_id"] for m in lines[0]["degraded_machines"]} == set(launched)
    # The job's wait line says why it waits: the breaker, not a cap the fleet is nowhere near.
    waits = [json.loads(r.getMessage()) for r in caplog.records if '"decision": "wait"' in r.getMessage()]
    reason = waits[-1]["reason"]
    assert waits[-1]["job_id"] == job_id and "circuit breaker is open" in reason and "at its cap" not in reason, reason

    # Past the window the breaker closes by itself: the mark goes, and the fleet buys again; this time the
    # image is fixed, the machine healthy, and the job starts.
    second = runs(home, 2, start + timedelta(minutes=60), launched, healthy=True)

    assert not paused() and len(launched) == scheduler.BREAKER_FAILURES + 1
    assert second[0]["scaled"] and second[1]["started"] == [job_id] and len(published(topic)) == 1
    assert breaker_lines(caplog)[-1]["scaling_stopped"] is False  # the run that closed it says so


def test_a_fault_that_stays_costs_three_machines_and_one_alert_per_opening(world, caplog):
    """The breaker closes once fewer than three are in the window, and the fleet buys again: with the image still
    bad, it opens again only on three machines first seen since it closed, with one more alert."""
    home, faults, topic = world
    queue_jobs(1)
    launched: list[str] = []

    runs(home, 30, later(), launched)  # 58 minutes: an opening at about 6 minutes, a close at 34, again at 40

    lines = breaker_lines(caplog)
    openings = [line for line in lines if line["newly_opened"]]
    assert len(openings) == len(published(topic)) == 2 and len(launched) == 2 * scheduler.BREAKER_FAILURES
    assert [m["instance_id"] for m in openings[1]["degraded_machines"]] == launched[3:]
    assert [line["scaling_stopped"] for line in lines].count(False) == 1  # one close between the two openings


def test_healthy_machines_are_read_for_once_a_run_trip_nothing_and_write_no_memory(world, caplog):
    home, faults, topic = world
    (job_id,) = queue_jobs(1)
    launched: list[str] = []

    runs(home, 3, later(), launched, healthy=True)

    assert ledger().get(job_id).state == L.RUNNING
    assert len([p for p in faults.carried_out("dynamodb", "GetItem") if p["Key"]["job_id"]["S"] == fh.KEY]) == 3
    assert not [p for p in faults.carried_out("dynamodb", "PutItem") if p["Item"]["job_id"]["S"] == fh.KEY]
    assert breaker_lines(caplog) == [] and published(topic) == []


def test_the_sightings_are_one_item_read_once_a_run_and_written_only_when_they_change(world):
    home, faults, _ = world
    queue_jobs(1)
    launched: list[str] = []

    runs(home, 6, later(), launched)

    gets = [p for p in faults.carried_out("dynamodb", "GetItem") if p["Key"]["job_id"]["S"] == fh.KEY]
    puts = [p for p in faults.carried_out("dynamodb", "PutItem") if p["Item"]["job_id"]["S"] == fh.KEY]
    assert len(gets) == 6 and len(puts) == len(launched) == scheduler.BREAKER_FAILURES  # one per new sighting
    kept = fh.read(boto3.client("dynamodb", HOME), TABLE)
    assert kept.version == len(puts) and [s.instance_id for s in kept.memory[(HOME, "gpu1")].sightings] == launched


def test_an_unreadable_memory_stops_neither_the_run_nor_the_breaker_on_what_the_run_sees(world):
    """Read failing: no memory this run (fail open: handler.judge_fleet_health says why), logged as the run's
    one error; the rest of the run as usual (the degraded machine it sees is given back, not bought again for
    nothing: the breaker stays closed on one sighting); and its write, conditional on a version it never read,
    replaces nothing."""
    home, faults, topic = world
    queue_jobs(1)
    launched: list[str] = []
    start = later()
    runs(home, 3, start, launched)  # two machines seen degraded and given back; the third booted, not yet seen
    kept = fh.read(boto3.client("dynamodb", HOME), TABLE)
    assert [s.instance_id for s in kept.memory[(HOME, "gpu1")].sightings] == launched[:2]

    with faults.active(("dynamodb", "GetItem"), "throttle", when=lambda p: p.get("Key", {}).get("job_id") == {"S": fh.KEY}):
        summary = run_held(home, start + 3 * STEP)

    assert [e["decision"] for e in summary["errors"]] == ["fleet-health-read-failed"]
    assert summary["errors"][0]["action"].startswith("no memory of degraded machines this run")
    assert summary["released"] == [launched[2]] and not paused() and published(topic) == []
    assert fh.read(boto3.client("dynamodb", HOME), TABLE) == kept  # nothing replaced

    # The run bought another for the waiting job. The next run reads the memory again and opens the breaker on
    # the two remembered and that fourth machine: the third's sighting is what failing open lost.
    assert summary["scaled"]
    launched += boot()
    assert run_held(home, start + 4 * STEP)["errors"] == [] and paused()
    ((_, message),) = published(topic)
    assert [i for i in launched if f"- {i}, first seen" in message["default"]] == [*launched[:2], launched[3]]


def test_one_alert_names_both_causes_when_launches_fail_and_machines_come_up_degraded(world, monkeypatch):
    home, faults, topic = world
    monkeypatch.setattr(state, "failed_launches", lambda *_: 4)  # moto records no failed launches
    (config,) = parse_fleets(fleets_json())
    view = state.FleetView(config=config, desired=1, current_instances=1, pending_instances=0, max_instances=4,
                           hourly_usd=0.0)
    now = later()
    degraded = tuple(fh.Sighting(now.timestamp() - 60 * n, f"i-{n}", "ECS reports its health IMPAIRED") for n in (3, 2, 1))

    assert scheduler.circuit_breaker(view, now, scheduler_settings(home), degraded) is True
    assert scheduler.circuit_breaker(replace(view, scaling_paused=True), now, scheduler_settings(home), degraded) is True

    ((_, message),) = published(topic)  # once per opening
    text = message["default"]
    assert text.startswith(f"4 launches of Auto Scaling group {ASG} failed and 3 of its machines came up degraded "
                           "in the last 30 minutes")
    assert "- i-3, first seen degraded at" in text and "activity history" in text and "the AMI" in text
    assert text.endswith("once fewer than 3 launches failed and fewer than 3 machines were first seen degraded in "
                         "the window.")


def test_machines_that_degrade_long_after_their_launch_never_stop_the_fleet_s_purchases(home, faults, caplog):
    """Three machines of a busy fleet that degrade while they run (a GPU fallen off the bus, a start ECS refused)
    within the window are each their own fault: each is given back, and the fleet keeps buying. Only machines
    that came up degraded (launched within boot_health.YOUNG) count toward the breaker; before, any did."""
    from test_degraded_machines import gpu_ids, registers

    instances = build_fleet(size=3, max_size=6)  # launched now, by the wall clock: old to runs an hour later
    open_admission()
    topic = aws_client("sns", HOME).create_topic(Name=f"mlfleet-{ENV}-alerts")["TopicArn"]
    registers(faults, {instance_id: gpu_ids(3) for instance_id in instances})  # each lost one of its 4 GPUs
    queue_jobs(1)

    start = later(60)
    summaries = [run_held(home, start + n * STEP) for n in range(3)]

    assert breaker_lines(caplog) == [] and not paused() and published(topic) == []
    assert any(s["scaled"] for s in summaries)  # the fleet still buys for the waiting job
