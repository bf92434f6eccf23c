"""A broken machine fails no job: the scheduler believes what ECS registered, and a start ECS refuses for
the machine blames the machine (lambdas/scheduler/state.py "Degraded machines", actions.py machine_refused).

Where moto differs from AWS: its container instances report no GPUs (no `registeredResources` "GPU", no
`gpuDevices`: it ignores the agent's `platformDevices`) and no `healthStatus`, and its StartTask never refuses
for resources. The fixtures register every instance as a healthy GPU agent does (tests/ecs_agent.py adds the
GPU resource to moto's record); the tests here change what a machine's agent registered in moto's
DescribeContainerInstances answer (faults.amends) and answer StartTask with ECS's `failures` themselves
(faults.stubs).
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest
from conftest import (
    ASG, ENV, HOME, aws_client, build_fleet, fleets_json, on_demand_fleets_json, open_admission, scheduler_settings,
)
from test_scheduler_release_inputs import later, run_held

from lambdas.common import tags
from lambdas.common.catalog import load_catalog
from lambdas.jobs import ledger as L
from lambdas.jobs.fleets import parse_fleets
from lambdas.jobs.spec import assign_ids, parse_spec
from lambdas.scheduler import handler as scheduler
from lambdas.scheduler import actions, starting, state

NOW = datetime(2026, 11, 22, 12, tzinfo=timezone.utc)
SUB = "sub-20261122115000-0d0e0f"


def ledger() -> L.Ledger:
    return L.Ledger(aws_client("dynamodb", HOME), f"mlfleet-{ENV}-jobs")


def queue_jobs(count: int, **extra) -> list[str]:
    spec = parse_spec({"image": "ghcr.io/team/train:1", "command": ["python", "train.py"], "gpus": 1, "vcpus": 1,
                       "memory_mib": 1024, **extra}, fleet_regions=(HOME,), catalog=load_catalog(), default_max_attempts=3)
    jobs = assign_ids(SUB, [spec] * count)
    for n, job in enumerate(jobs):
        assert ledger().put_new(L.new_record(job, (NOW - timedelta(minutes=10)).timestamp() + n))
    return [job.job_id for job in jobs]


def run(home, minutes: float = 0) -> dict:
    return scheduler.run(scheduler_settings(home), lambda: 170_000, now=NOW + timedelta(minutes=minutes))


def registers(faults, instances: dict[str, dict]) -> None:
    """What each machine's agent registered, added to moto's DescribeContainerInstances answers."""
    def amend(params, parsed):
        for ci in parsed.get("containerInstances", []):
            ci.update(instances.get(ci["ec2InstanceId"], {}))
    faults.amends[("ecs", "DescribeContainerInstances")] = amend


def gpu_ids(count: int) -> dict:
    return {"registeredResources": [{"name": "GPU", "type": "STRINGSET",
                                     "stringSetValue": [f"GPU-{n:08x}" for n in range(count)]}]}


# An agent that registered no GPU resource at all (started without ECS_ENABLE_GPU_SUPPORT, or no NVIDIA device
# found at boot): CPU, memory and ports, as moto registers every instance.
NO_GPU_RESOURCE = {"registeredResources": [
    {"name": "CPU", "type": "INTEGER", "integerValue": 49_152}, {"name": "MEMORY", "type": "INTEGER", "integerValue": 189_000},
    {"name": "PORTS", "type": "STRINGSET", "stringSetValue": ["22", "2375", "2376", "51678", "51679"]},
    {"name": "PORTS_UDP", "type": "STRINGSET", "stringSetValue": []}]}


def read() -> state.RegionView:
    return state.read_region(HOME, parse_fleets(fleets_json()), load_catalog(), {}, NOW)


def started_on(job_id: str) -> str | None:
    record = ledger().get(job_id)
    return record.placement.instance_id if record.state == L.RUNNING else None


@pytest.fixture
def world(home, faults):
    instances = build_fleet(size=1)  # one g5.12xlarge: 4 GPUs in the catalog
    open_admission()
    aws_client("sns", HOME).create_topic(Name=f"mlfleet-{ENV}-alerts")
    return home, faults, instances


@pytest.mark.parametrize("registered", [
    gpu_ids(3),  # one GPU fell off the bus (Xid 79) before the agent registered
    gpu_ids(0),  # the driver failed at boot
    NO_GPU_RESOURCE,  # the agent registered no GPU resource: ECS places no GPU task there
    {**NO_GPU_RESOURCE, "gpuDevices": [{"gpuId": f"GPU-{n}", "totalMemoryInMiB": 23_028} for n in range(2)]},
    {**gpu_ids(4), "healthStatus": {"overallStatus": "IMPAIRED", "details": [
        {"type": "CONTAINER_RUNTIME", "status": "IMPAIRED"}]}},
])
def test_nothing_is_placed_on_a_machine_ecs_registered_fewer_gpus_on_or_reports_impaired(world, registered, caplog):
    home, faults, instances = world
    (broken,) = instances
    registers(faults, {broken: registered})
    (job_id,) = queue_jobs(1)

    summary = run(home)

    assert summary["errors"] == [] and summary["started"] == [] and ledger().get(job_id).state == L.QUEUED
    assert faults.carried_out("ecs", "StartTask") == []
    lines = [json.loads(r.getMessage()) for r in caplog.records if '"degraded-machine"' in r.getMessage()]
    assert [(line["instance_id"], line["decision"]) for line in lines] == [(broken, "degraded-machine")]
    assert "GPUs" in lines[0]["reason"] or "IMPAIRED" in lines[0]["reason"]


def test_a_machine_whose_agent_registered_all_its_gpus_is_used(world):
    home, faults, instances = world
    (machine,) = instances
    registers(faults, {machine: {**gpu_ids(4), "healthStatus": {"overallStatus": "OK"}}})
    (job_id,) = queue_jobs(1)

    assert run(home)["started"] == [job_id] and started_on(job_id) == machine


def test_free_gpus_are_what_ecs_registered_less_what_tasks_asked(world):
    _, faults, instances = world
    (machine,) = instances
    registers(faults, {machine: gpu_ids(3)})

    (view,) = read().machines

    assert (view.gpus, view.free_gpus) == (3, 3) and "ECS registered 3 of its type's 4 GPUs" in view.degraded


def test_a_machine_registering_all_its_gpus_counts_its_type_s(world):
    (view,) = read().machines  # registered as a healthy agent does (tests/ecs_agent.py)

    assert (view.gpus, view.free_gpus, view.degraded) == (None, 4, "")


def test_a_machine_whose_agent_registered_no_gpu_resource_has_none_and_is_degraded(world):
    """A GPU instance whose container instance registers no "GPU" resource cannot run a task that asks for a
    GPU (ECS places it by the registered GPUs: botocore's ecs model, ContainerInstance.registeredResources).
    Before, it counted as its type's four GPUs, and jobs were placed there for ECS to refuse."""
    _, faults, instances = world
    (machine,) = instances
    registers(faults, {machine: NO_GPU_RESOURCE})

    (view,) = read().machines

    assert (view.gpus, view.free_gpus) == (0, 0)
    assert view.degraded.startswith("ECS registered no GPU resource of its type's 4 GPUs")


@pytest.mark.parametrize(("ci", "type_gpus", "registered", "degraded"), [
    (gpu_ids(4), 4, 4, ""),
    (gpu_ids(3), 4, 3, "ECS registered 3 of its type's 4 GPUs"),
    (gpu_ids(0), 4, 0, "ECS registered 0 of its type's 4 GPUs"),
    ({"gpuDevices": [{"gpuId": "GPU-0"}, {"gpuId": "GPU-1"}]}, 4, 2, "ECS registered 2 of its type's 4 GPUs"),
    (NO_GPU_RESOURCE, 4, 0, "ECS registered no GPU resource of its type's 4 GPUs"),
    ({}, 1, 0, "ECS registered no GPU resource of its type's 1 GPUs"),
    (NO_GPU_RESOURCE, 0, 0, ""),  # a type without GPUs registers none
    (NO_GPU_RESOURCE, None, 0, ""),  # a type the catalog does not know: nothing to compare with
])
def test_the_gpus_ecs_registered_and_whether_that_degrades_the_machine(ci, type_gpus, registered, degraded):
    assert state.registered_gpus(ci) == registered
    assert state.degraded_reason(ci, type_gpus, registered, None, NOW).startswith(degraded)
    assert bool(state.degraded_reason(ci, type_gpus, registered, None, NOW)) == bool(degraded)



def refuses(faults, reason: str) -> list[str]:
    """StartTask answers ECS's `failures` with `reason` on the first container instance it is asked for, and
    on that one alone from then on, as ECS does (no task, HTTP 200); moto starts the others. Returns the
    container instance each StartTask named."""
    asked: list[str] = []

    def start_task(params):
        (instance,) = params["containerInstances"]
        asked.append(instance)
        if instance == asked[0]:
            return {"tasks": [], "failures": [{"arn": instance, "reason": reason}]}
        return None

    faults.stubs[("ecs", "StartTask")] = start_task
    return asked


def tagged(instance_id: str) -> dict[str, str]:
    (reservation,) = aws_client("ec2", HOME).describe_instances(InstanceIds=[instance_id])["Reservations"]
    return {t["Key"]: t["Value"] for t in reservation["Instances"][0].get("Tags", [])}


@pytest.mark.parametrize("reason", ["RESOURCE:GPU", "RESOURCE:MEMORY", "AGENT", "MISSING", "INACTIVE"])
def test_a_start_refused_for_the_machine_never_fails_the_job_and_the_machine_is_left_while_marked(world, reason):
    home, faults, instances = world
    ((broken, arn),) = instances.items()
    asked = refuses(faults, reason)
    (job_id,) = queue_jobs(1)

    runs = [run(home, minute) for minute in range(starting.MAX_START_FAILURES + 1)]

    record = ledger().get(job_id)
    assert (record.state, record.start_failures, record.attempt) == (L.QUEUED, 0, 1)
    assert asked == [arn]  # refused once, then not chosen again while marked
    assert all(r["errors"] == [] for r in runs) and runs[0]["start_failed"] == [job_id]
    assert tagged(broken)[tags.START_REFUSED_AT] == NOW.isoformat(timespec="seconds")
    # Past the hold the machine is tried again: still refusing, it is marked again, the job still uncounted.
    hold = state.START_REFUSED_HOLD.total_seconds() / 60
    run(home, hold + 1)
    assert asked == [arn, arn] and ledger().get(job_id).start_failures == 0
    assert tagged(broken)[tags.START_REFUSED_AT] == (NOW + timedelta(minutes=hold + 1)).isoformat(timespec="seconds")


def test_a_job_refused_by_a_broken_machine_starts_on_another(home, faults):
    instances = build_fleet(size=2)
    open_admission()
    asked = refuses(faults, "RESOURCE:GPU")
    (job_id,) = queue_jobs(1)

    first, second = run(home), run(home, 1)

    (broken,) = [i for i, arn in instances.items() if arn == asked[0]]
    (healthy,) = set(instances) - {broken}
    assert first["started"] == [] and second["started"] == [job_id] and started_on(job_id) == healthy
    assert ledger().get(job_id).start_failures == 0 and tags.START_REFUSED_AT in tagged(broken)


def test_no_other_job_is_started_on_a_machine_in_the_run_it_refused_one(world):
    home, faults, instances = world
    asked = refuses(faults, "RESOURCE:GPU")
    jobs = queue_jobs(3)  # all fit its 4 GPUs

    summary = run(home)

    assert len(asked) == 1 and summary["errors"] == [] and summary["started"] == []
    assert {(ledger().get(j).state, ledger().get(j).start_failures) for j in jobs} == {(L.QUEUED, 0)}


def test_a_job_every_machine_refuses_fails_after_the_most_refusals_instead_of_buying_without_end(world):
    """A job ECS refuses for the machine's resources wherever it goes (it asks for more memory than the
    agents register: the catalog's estimate is above what ECS counts) must not wait for ever, each refusing
    machine marked and released and another bought: it fails after MAX_MACHINE_REFUSALS, dead-lettered with
    the reason. moto never refuses for resources: the stub answers every StartTask with ECS's failure."""
    home, faults, instances = world
    asked: list[str] = []

    def always_refuse(params):
        asked.extend(params["containerInstances"])
        return {"tasks": [], "failures": [{"arn": params["containerInstances"][0], "reason": "RESOURCE:MEMORY"}]}

    faults.stubs[("ecs", "StartTask")] = always_refuse
    (job_id,) = queue_jobs(1)
    hold = state.START_REFUSED_HOLD.total_seconds() / 60

    for n in range(starting.MAX_MACHINE_REFUSALS):
        assert ledger().get(job_id).state == L.QUEUED
        run(home, n * (hold + 1))

    record = ledger().get(job_id)
    assert (record.state, record.start_failures, record.machine_refusals) == (L.FAILED, 0, starting.MAX_MACHINE_REFUSALS)
    assert len(asked) == starting.MAX_MACHINE_REFUSALS
    assert f"{starting.MAX_MACHINE_REFUSALS} starts refused for their machines" in record.last_reason
    (message,) = aws_client("sqs", HOME).receive_message(
        QueueUrl=scheduler_settings(home).jobs_dlq_url, MaxNumberOfMessages=10)["Messages"]
    assert json.loads(message["Body"])["job_id"] == job_id


@pytest.mark.parametrize("reason", ["ATTRIBUTE", "an unforeseen reason"])
def test_a_start_refused_for_the_job_still_counts_and_fails_it_after_the_most(world, reason):
    home, faults, instances = world
    ((broken, _),) = instances.items()
    asked = refuses(faults, reason)
    (job_id,) = queue_jobs(1)

    for minute in range(starting.MAX_START_FAILURES):
        run(home, minute)

    record = ledger().get(job_id)
    assert (record.state, record.start_failures) == (L.FAILED, starting.MAX_START_FAILURES)
    assert len(asked) == starting.MAX_START_FAILURES and tags.START_REFUSED_AT not in tagged(broken)


@pytest.mark.parametrize(("reason", "by_machine"), [
    ("RESOURCE:CPU", True), ("RESOURCE:PORTS", True), ("RESOURCE:ENI", True), ("AGENT", True), ("MISSING", True),
    ("INACTIVE", True), ("DRAINING", True), ("TaskFailedToStart: RESOURCE:GPU", True), ("ATTRIBUTE", False),
    ("", False), ("Constraint unsatisfied", False),
])
def test_start_task_failure_reasons_are_the_machine_s_or_the_job_s(reason, by_machine):
    assert actions.machine_refused(reason) is by_machine


# The release runs below price the fleet on-demand, as moto reports its instances, with a job of known
# runtime: the kept-machine rule (docs/scheduler.md, "Kept empty machines") then lets it take the healthy
# empty machine (tests/jobs/test_scheduler_release_inputs.py does the same).
KEPT_MACHINE_TAKES_IT = {"release_after_empty_minutes": 60, "fleets": on_demand_fleets_json()}


def test_an_empty_degraded_machine_is_given_back_without_the_release_delay(home, faults):
    instances = build_fleet(size=2)
    open_admission()
    broken, healthy = sorted(instances)
    registers(faults, {broken: gpu_ids(3), healthy: gpu_ids(4)})
    (job_id,) = queue_jobs(1, expected_runtime_s=600)

    summary = run_held(home, later(), **KEPT_MACHINE_TAKES_IT)  # both just found empty: under the delay

    assert summary["started"] == [job_id] and started_on(job_id) == healthy and summary["released"] == [broken]
    group = aws_client("autoscaling", HOME).describe_auto_scaling_groups(AutoScalingGroupNames=[ASG])["AutoScalingGroups"][0]
    assert group["DesiredCapacity"] == 1 and [i["InstanceId"] for i in group["Instances"]] == [healthy]


def test_an_empty_machine_that_refused_a_start_is_given_back_by_the_next_run(home, faults):
    instances = build_fleet(size=2)
    open_admission()
    asked = refuses(faults, "RESOURCE:GPU")
    (job_id,) = queue_jobs(1, expected_runtime_s=600)
    now = later()

    first = run_held(home, now, **KEPT_MACHINE_TAKES_IT)
    second = run_held(home, now + timedelta(minutes=1), **KEPT_MACHINE_TAKES_IT)

    (broken,) = [i for i, arn in instances.items() if arn == asked[0]]
    assert first["released"] == [] and second["released"] == [broken]
    assert second["started"] == [job_id] and started_on(job_id) != broken
    assert ledger().get(job_id).start_failures == 0
