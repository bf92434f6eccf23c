"""An EC2 instance joining an ECS cluster as the agent on mlfleet's GPU AMI makes it join, in moto.

The agent, with ECS_ENABLE_GPU_SUPPORT=true (components/compute/user_data.sh), registers the instance's
GPUs as `platformDevices` of type GPU (botocore's ecs model, RegisterContainerInstance.platformDevices,
PlatformDevice), and ECS then reports them in the container instance's `registeredResources` as the
resource "GPU", a STRINGSET of the GPU ids (ContainerInstance.registeredResources, Resource). moto
ignores `platformDevices` and registers CPU, MEMORY and ports only (moto/ecs/models.py ContainerInstance):
in AWS, a GPU machine whose agent registered no GPU, which runs no GPU task (lambdas/scheduler/state.py
registered_gpus). `register` adds the GPU resource to moto's record of the container instance, so that a
moto machine is what a healthy one is in AWS.
"""

from __future__ import annotations

import contextlib
import functools
import json

import boto3

from lambdas.common.catalog import load_catalog


def gpu_ids(count: int) -> list[str]:
    return [f"GPU-{n:08x}-0000-0000-0000-000000000000" for n in range(count)]


@functools.lru_cache(maxsize=None)
def _ec2(region: str):
    """One EC2 client per region for the whole test session. boto3.client() would make a new one from
    moto's fresh default session in every mock (tens of milliseconds each, three per fleet built); a client
    holds no moto state, moto answers whichever mock is active."""
    return boto3.session.Session().client("ec2", region_name=region)


def register(ecs, cluster: str, instance_id: str, region: str, *, gpus: int | None = None) -> dict:
    """Register `instance_id` with `cluster` as the agent does after boot; returns the container instance.
    `gpus`: how many GPUs its agent registers (default: its instance type's, from the catalog)."""
    if gpus is None:
        (reservation,) = _ec2(region).describe_instances(InstanceIds=[instance_id])["Reservations"]
        instance_type = reservation["Instances"][0]["InstanceType"]
        catalog = load_catalog()
        gpus = catalog.get(instance_type).gpus if instance_type in catalog else 0
    ids = gpu_ids(gpus)
    instance = ecs.register_container_instance(
        cluster=cluster, instanceIdentityDocument=json.dumps(
            {"instanceId": instance_id, "region": region, "availabilityZone": f"{region}a"}),
        platformDevices=[{"id": gpu, "type": "GPU"} for gpu in ids])["containerInstance"]
    if ids:  # what ECS reports of the devices the agent sent, which moto does not keep
        registered = {"name": "GPU", "type": "STRINGSET", "stringSetValue": ids}
        moto_record(instance["containerInstanceArn"]).registered_resources.append(registered)
        instance = {**instance, "registeredResources": [*instance.get("registeredResources", []), registered]}
    return instance


def moto_record(container_instance_arn: str):
    """moto's ContainerInstance for an ARN of the long format (arn:aws:ecs:REGION:ACCOUNT:container-instance/CLUSTER/ID)."""
    from moto.ecs.models import ecs_backends

    _, _, _, region, account, resource = container_instance_arn.split(":", 5)
    _, cluster, instance_id = resource.split("/")
    return ecs_backends[account][region].container_instances[cluster][instance_id]


# Tasks ECS is stopping. After StopTask, AWS keeps a task at desiredStatus STOPPED with its lastStatus RUNNING
# (then DEACTIVATING, STOPPING, DEPROVISIONING) until its containers have stopped, up to its stop timeout (the
# ECS developer guide, "Task lifecycle"). moto's StopTask sets lastStatus STOPPED at once, and each DescribeTasks
# moves a task's status on (its state manager, model "ecs::task"). These hold a task where AWS would have it.

@contextlib.contextmanager
def held_task_statuses():
    """moto's task statuses stay where they are set (AWS moves them as the task really goes)."""
    from moto.moto_api import state_manager

    state_manager.set_transition("ecs::task", {"progression": "manual", "times": 10**9})
    try:
        yield
    finally:
        state_manager.unset_transition("ecs::task")


def moto_task(task_arn: str):
    """moto's Task for an ARN of the long format (arn:aws:ecs:REGION:ACCOUNT:task/CLUSTER/ID)."""
    from moto.ecs.models import ecs_backends

    _, _, _, region, account, resource = task_arn.split(":", 5)
    cluster = resource.split("/")[1]
    return ecs_backends[account][region].tasks[cluster][task_arn]


def stopping(task_arn: str) -> None:
    """The task as AWS shows it after StopTask, within its stop timeout: desiredStatus STOPPED, still RUNNING."""
    task = moto_task(task_arn)
    assert task.desired_status == "STOPPED", f"{task_arn} was not asked to stop"
    task.last_status = "RUNNING"


def stopped(task_arn: str) -> None:
    moto_task(task_arn).last_status = "STOPPED"
