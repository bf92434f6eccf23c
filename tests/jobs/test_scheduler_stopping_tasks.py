"""Tasks ECS is stopping still hold their GPUs: after StopTask a task runs up to its stop timeout (110 s here)
with desiredStatus STOPPED, and ECS frees its resources only once its lastStatus is STOPPED (the ECS developer
guide, "Amazon ECS container instance state change events"). The scheduler's region view counts them on their
machine (lambdas/scheduler/state.py, module docstring "GPU accounting"), so a job is not started on GPUs ECS
would refuse it (RESOURCE:GPU), which would mark the machine start-refused for 30 minutes.

Where moto differs from AWS: its StopTask sets lastStatus STOPPED at once, and each DescribeTasks moves a
task's lastStatus on. The tests make a stopped task "stopping" by setting moto's task back to RUNNING and
holding every task's status where it is (moto's state manager, `ecs::task` transitions) until they let it
stop (tests/ecs_agent.py: stopping, stopped; the held_statuses fixture). moto reports no GPUs and no `gpuIds`: the
scheduler counts GPUs from the catalog and the tasks it knows, and a sharing task on a GPU of its own.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import boto3
import pytest
from conftest import CLUSTER, ENV, HOME, build_fleet, run_mlfleet, scheduler_settings, small_definition_defaults
from ecs_agent import stopped, stopping

from lambdas.common import aws
from lambdas.common.catalog import load_catalog
from lambdas.jobs import ledger as L
from lambdas.jobs.fleets import parse_fleets
from lambdas.scheduler import state
from lambdas.scheduler.handler import run as run_scheduler

NOW = datetime(2026, 11, 22, 12, tzinfo=timezone.utc)
A10G = load_catalog().get("g5.12xlarge").shareable_gpu_memory_mib


def ledger() -> L.Ledger:
    return L.Ledger(boto3.client("dynamodb", HOME), f"mlfleet-{ENV}-jobs")


def submit(*argv: str) -> str:
    code, out, err = run_mlfleet("submit", "--image", "ghcr.io/team/train:7", "--vcpus", "0.5", "--memory", "512MiB",
                                 *argv, "--", "python", "train.py")
    assert code == 0, err
    (record,) = ledger().by_submission(out[0].split(":")[0])
    return record.job_id


def scheduler(home, minutes: int) -> dict:
    # One machine and no more: only its room could serve a job.
    return run_scheduler(scheduler_settings(home, max_instances=1), lambda: 170_000, now=NOW + timedelta(minutes=minutes))


def view(home) -> state.MachineView:
    (machine,) = state.read_region(HOME, parse_fleets(scheduler_settings(home, max_instances=1).fleets),
                                   load_catalog(), {}, NOW).machines
    return machine


@pytest.fixture
def machine(service, held_statuses):
    ((instance_id, arn),) = build_fleet(size=1, max_size=1).items()  # one g5.12xlarge: 4 A10G GPUs
    small_definition_defaults()
    return service, instance_id, arn


def test_the_gpus_of_a_cancelled_task_still_stopping_are_not_placed_onto_until_it_has_stopped(machine):
    """The race: `mlfleet cancel` stops a running job's task and the ledger says CANCELLED at once, while the
    task holds its GPUs up to its stop timeout. A job started there meanwhile is refused by ECS."""
    home, instance_id, arn = machine
    first = submit("--gpus", "4")
    assert scheduler(home, 0)["started"] == [first]
    task = ledger().get(first).placement.task_arn
    code, out, err = run_mlfleet("cancel", first)
    assert code == 0 and ledger().get(first).state == L.CANCELLED, (out, err)
    stopping(task)

    machine_view = view(home)
    assert (machine_view.free_gpus, machine_view.jobs, machine_view.submissions) == (0, frozenset(), frozenset())
    second = submit("--gpus", "4")
    run = scheduler(home, 1)
    assert run["started"] == [] and ledger().get(second).state == L.QUEUED, run["errors"]

    stopped(task)  # ECS frees them
    assert view(home).free_gpus == 4
    run = scheduler(home, 2)
    assert run["started"] == [second] and ledger().get(second).placement.instance_id == instance_id, run["errors"]


def test_a_stopping_task_sharing_a_gpu_holds_its_memory_until_it_has_stopped(machine):
    home, instance_id, arn = machine
    boto3.client("ecs", HOME).put_attributes(cluster=CLUSTER, attributes=[
        {"name": state.GPU_SHARING_CAPABILITY, "targetId": arn}])
    job = submit("--gpu-memory", "8000MiB")
    assert scheduler(home, 0)["started"] == [job]
    task = ledger().get(job).placement.task_arn
    assert run_mlfleet("cancel", job)[0] == 0
    stopping(task)

    machine_view = view(home)
    assert (machine_view.free_gpus, machine_view.shared_gpus) == (3, (A10G - 8000,))

    stopped(task)
    machine_view = view(home)
    assert (machine_view.free_gpus, machine_view.shared_gpus) == (4, ())


def test_the_region_view_names_the_tasks_it_counts_as_stopping(machine):
    home, instance_id, arn = machine
    job = submit("--gpus", "1")
    assert scheduler(home, 0)["started"] == [job]
    task = ledger().get(job).placement.task_arn
    fleets = parse_fleets(scheduler_settings(home, max_instances=1).fleets)
    assert state.read_region(HOME, fleets, load_catalog(), {}, NOW).stopping == set()
    assert run_mlfleet("cancel", job)[0] == 0
    stopping(task)
    region = state.read_region(HOME, fleets, load_catalog(), {}, NOW)
    assert (region.stopping, region.tasks) == ({task}, {})
    stopped(task)
    assert state.read_region(HOME, fleets, load_catalog(), {}, NOW).stopping == set()


def test_a_task_seen_stopped_is_not_described_again_while_the_function_is_warm(machine):
    """ECS lists an hour of stopped tasks to every run; STOPPED is the end of a task's lifecycle, so each is
    described once (common.aws.still_stopping), and a run describes only the tasks stopped since."""
    home, instance_id, arn = machine
    ecs = boto3.client("ecs", HOME)
    described: list[str] = []
    ecs.meta.events.register("before-parameter-build.ecs.DescribeTasks",
                             lambda params, **_: described.extend(params["tasks"]))
    tasks = [ecs.start_task(cluster=CLUSTER, taskDefinition=f"mlfleet-{ENV}-gpu-job", containerInstances=[arn],
                            startedBy="someone")["tasks"][0]["taskArn"] for _ in range(2)]
    for task in tasks:
        ecs.stop_task(cluster=CLUSTER, task=task)
    stopping(tasks[1])
    listed = ecs.list_tasks(cluster=CLUSTER, desiredStatus="STOPPED")["taskArns"]
    assert [t["taskArn"] for t in aws.still_stopping(ecs, CLUSTER, listed)] == [tasks[1]]
    assert sorted(described) == sorted(tasks)

    described.clear()
    assert [t["taskArn"] for t in aws.still_stopping(ecs, CLUSTER, listed)] == [tasks[1]]
    assert described == [tasks[1]], "the task seen STOPPED was described again"
    stopped(tasks[1])
    assert aws.still_stopping(ecs, CLUSTER, listed) == []
    described.clear()
    assert aws.still_stopping(ecs, CLUSTER, listed) == [] and described == []
