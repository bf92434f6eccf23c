"""Jobs that share a GPU, from `mlfleet submit --gpu-memory` to a shared GPU, against moto with the real
scheduler: the revision it registers and the StartTask it sends carry the `nvidiaMps` sharing strategy, the
next run counts the memory each shared GPU has left, and a machine whose agent cannot share is never used
for such jobs, nor is its fleet bought from.

Where moto differs from AWS: container instances have no GPUs and no `gpuDevices` (the scheduler counts
GPUs from the catalog and the tasks it knows, as it does on AWS), tasks carry no `gpuIds` (so the next run
counts each sharing task on a GPU of its own: less room than AWS would show, never more), and the agent's
`ecs.capability.gpu-sharing-mps` attribute is put by the test (the ECS agent advertises it on AWS).
botocore validates every request against its ECS model before moto answers, so the sharing strategy's
shape is AWS's.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import boto3
import pytest
from conftest import ASG, CLUSTER, ENV, FAMILY, HOME, build_fleet, run_mlfleet, scheduler_settings, small_definition_defaults

from lambdas.common.catalog import load_catalog
from lambdas.jobs import ledger as L
from lambdas.jobs.fleets import parse_fleets
from lambdas.scheduler import state
from lambdas.scheduler.planning import NO_FLEET
from lambdas.scheduler.handler import run as run_scheduler

NOW = datetime(2026, 11, 22, 12, tzinfo=timezone.utc)
IMAGE = "ghcr.io/team/infer:7"
A10G = load_catalog().get("g5.12xlarge").shareable_gpu_memory_mib


def scheduler(home, minutes: int) -> dict:
    return run_scheduler(scheduler_settings(home), lambda: 170_000, now=NOW + timedelta(minutes=minutes))


def ledger() -> L.Ledger:
    return L.Ledger(boto3.client("dynamodb", HOME), f"mlfleet-{ENV}-jobs")


def advertise_sharing(container_instance: str) -> None:
    """What the ECS agent does on an instance whose AMI enables nvidia-mps.service."""
    boto3.client("ecs", HOME).put_attributes(cluster=CLUSTER, attributes=[
        {"name": state.GPU_SHARING_CAPABILITY, "targetId": container_instance}])


def occupy(container_instance: str, gpus: int) -> None:
    boto3.client("ecs", HOME).start_task(
        cluster=CLUSTER, taskDefinition=FAMILY, containerInstances=[container_instance], startedBy="other",
        overrides={"containerOverrides": [{"name": "job", "resourceRequirements": [{"type": "GPU", "value": str(gpus)}]}]})


def task_of(job_id: str) -> dict:
    ecs = boto3.client("ecs", HOME)
    (arn,) = ecs.list_tasks(cluster=CLUSTER, startedBy=job_id)["taskArns"]
    return ecs.describe_tasks(cluster=CLUSTER, tasks=[arn])["tasks"][0]


def submit(*argv: str) -> list[str]:
    code, out, err = run_mlfleet("submit", "--image", IMAGE, "--vcpus", "0.5", "--memory", "512MiB", *argv,
                                 "--", "python", "serve.py")
    assert code == 0, err
    return [r.job_id for r in ledger().by_submission(out[0].split(":")[0])]


@pytest.fixture
def fleet(service):
    instances = build_fleet(size=1, max_size=3)  # one g5.12xlarge: 4 A10G GPUs
    ((instance_id, arn),) = instances.items()
    occupy(arn, 3)  # another workload holds 3 of the 4 GPUs
    small_definition_defaults()
    return service, instance_id, arn


def test_jobs_asking_for_gpu_memory_share_the_machines_last_gpu(fleet):
    home, instance_id, arn = fleet
    advertise_sharing(arn)
    jobs = submit("--gpu-memory", "8000MiB", "--gpu-compute-percent", "50", "--sweep", "replica=a,b", "--env",
                  "REPLICA={replica}")
    assert {ledger().get(j).spec.gpu_memory_mib for j in jobs} == {8000}

    first = scheduler(home, 0)
    assert sorted(first["started"]) == sorted(jobs) and first["scaled"] == []  # both on the one free GPU
    ecs = boto3.client("ecs", HOME)
    sharing = {"type": "GPU", "sharingStrategy": {"nvidiaMps": {"memory": 8000, "maxComputePercent": 50}}}
    for job_id in jobs:
        task = task_of(job_id)
        assert task["containerInstanceArn"] == arn and ledger().get(job_id).placement.instance_id == instance_id
        assert task["overrides"]["containerOverrides"][0]["resourceRequirements"] == [sharing]
        definition = ecs.describe_task_definition(taskDefinition=task["taskDefinitionArn"])["taskDefinition"]
        assert definition["family"] == FAMILY and definition["containerDefinitions"][0]["resourceRequirements"] == [sharing]

    # The next run reads the machine back: 3 GPUs held whole, and the two sharing tasks (on GPUs of their
    # own, as moto reports no gpuIds) with A10G - 8000 MiB left each. A third sharing job still fits there; a
    # whole-GPU job does not (a shared GPU takes only sharing jobs), and is bought for.
    (view,) = state.read_region(HOME, parse_fleets(scheduler_settings(home).fleets), load_catalog(), {}).machines
    assert (view.free_gpus, view.gpu_memory_mib, sorted(view.shared_gpus)) == (0, A10G, [A10G - 8000] * 2)
    third = submit("--gpu-memory", "8000MiB")
    whole = submit("--gpus", "1")
    second = scheduler(home, 1)
    assert second["started"] == third and task_of(third[0])["containerInstanceArn"] == arn
    assert [s["asg"] for s in second["scaled"]] == [ASG] and ledger().get(whole[0]).state == L.QUEUED


def test_a_machine_whose_agent_cannot_share_is_not_used_and_its_fleet_not_bought_for(fleet, caplog):
    home, instance_id, arn = fleet  # no gpu-sharing-mps attribute: an AMI without nvidia-mps.service
    jobs = submit("--gpu-memory", "4GiB")
    caplog.set_level("INFO", logger="mlfleet")
    run = scheduler(home, 0)
    assert run["started"] == [] and run["scaled"] == [] and ledger().get(jobs[0]).state == L.QUEUED
    decisions = [json.loads(r.getMessage()) for r in caplog.records if r.name == "mlfleet"]
    assert {"decision": "no-gpu-sharing", "fleet": "gpu1", "instance_id": instance_id} == {
        k: v for d in decisions if d["decision"] == "no-gpu-sharing" for k, v in d.items() if k in ("decision", "fleet", "instance_id")}
    assert [d["reason"] for d in decisions if d["decision"] == "wait"] == [NO_FLEET]
    group = boto3.client("autoscaling", HOME).describe_auto_scaling_groups(AutoScalingGroupNames=[ASG])
    assert group["AutoScalingGroups"][0]["DesiredCapacity"] == 1


def test_asking_for_more_gpu_memory_than_a_fleet_gpu_has_is_refused_before_anything_is_written(service):
    code, out, err = run_mlfleet("submit", "--image", IMAGE, "--vcpus", "1", "--memory", "2GiB", "--gpu-memory",
                                 "40GiB", "--", "serve")
    assert code == 2 and "gpu_memory_mib=40960: more GPU memory than one GPU" in "\n".join(err)
    assert ledger().by_state(L.QUEUED) == []
    code, out, err = run_mlfleet("submit", "--image", IMAGE, "--vcpus", "1", "--memory", "2GiB", "--gpus", "1",
                                 "--gpu-memory", "4GiB", "--", "serve")
    assert code == 2 and "not both" in "\n".join(err)
