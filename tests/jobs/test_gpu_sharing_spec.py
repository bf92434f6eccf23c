"""Jobs that share a GPU, without AWS: the spec's keys and errors, what ECS is sent, the scheduler's per-GPU
accounting of what it reads (tasks, `gpuDevices`, the agent's capability), costs and team shares."""

from __future__ import annotations

import pytest

from lambdas.common.catalog import load_catalog
from lambdas.jobs.costs import dominant_share
from lambdas.jobs.ledger import JobRecord, Placement
from lambdas.jobs.spec import SpecError, container_overrides, parse_spec, spec_from_document
from lambdas.jobs.teams import TeamsSettings
from lambdas.scheduler.actions import WHOLE_GPU, _gpu_requirement, gpu_key
from lambdas.scheduler.state import GPU_SHARING_CAPABILITY, machine_gpu_memory, requested_resources, shared_gpus
from lambdas.scheduler.teams import gpus_held, held_gpus

CATALOG = load_catalog()
A10G = CATALOG.get("g5.xlarge").shareable_gpu_memory_mib
BASE = {"image": "ghcr.io/team/infer:7", "command": ["serve"], "vcpus": 2, "memory_mib": 4096}
G5 = {"us-east-1": ["g5.xlarge", "g5.12xlarge"]}


def spec(fleet_types=G5, **keys):
    return parse_spec({**BASE, **keys}, fleet_regions=("us-east-1",), catalog=CATALOG, default_max_attempts=3,
                      fleet_types=fleet_types)


def test_a_job_asks_for_gpu_memory_instead_of_gpus_and_round_trips_through_the_ledger():
    shared = spec(gpu_memory_mib=6000, gpu_compute_percent=40)
    assert (shared.gpus, shared.gpu_memory_mib, shared.gpu_compute_percent, shared.shares_gpu) == (0, 6000, 40, True)
    assert spec_from_document(shared.to_document()) == shared
    whole = spec(gpus=1)
    assert "gpu_memory_mib" not in whole.to_document() and spec_from_document(whole.to_document()) == whole


@pytest.mark.parametrize(("keys", "fragment"), [
    ({"gpus": 1, "gpu_memory_mib": 6000}, "whole GPUs (gpus) or for part of one (gpu_memory_mib), not both"),
    ({"gpu_memory_mib": 0}, "gpu_memory_mib=0: must be >= 1"),
    ({"gpu_memory_mib": "6GiB"}, "gpu_memory_mib='6GiB': must be an integer"),
    ({"gpu_memory_mib": 6000, "gpu_compute_percent": 101}, "gpu_compute_percent=101: must be <= 100"),
    ({"gpus": 1, "gpu_compute_percent": 50}, "only for a job that shares a GPU"),
    ({"gpu_memory_mib": A10G + 1}, f"largest: {A10G:,} MiB per GPU, g5.12xlarge, g5.xlarge"),
    ({"gpu_memory_mib": 6000, "vcpus": 64}, "with that much GPU memory to share holds that much"),
])
def test_what_a_job_sharing_a_gpu_may_not_ask_is_named(keys, fragment):
    with pytest.raises(SpecError) as error:
        spec(**keys)
    assert fragment in str(error.value)


def test_a_stack_whose_types_cannot_share_refuses_a_sharing_job_and_says_what_to_ask_for(monkeypatch):
    monkeypatch.setattr("lambdas.common.catalog.VGPU_FAMILIES", ("g5",))  # as if g5 were a vGPU slice
    with pytest.raises(SpecError, match="can share its GPUs .*ask for whole GPUs with gpus instead"):
        spec(gpu_memory_mib=6000)


def test_ecs_is_sent_the_nvidia_mps_strategy_and_never_a_value_beside_it():
    shared = spec(gpu_memory_mib=6000, gpu_compute_percent=40)
    (override,) = container_overrides(shared, "sub-x-00000", 1, "s3://b/p")["containerOverrides"]
    assert override["resourceRequirements"] == [
        {"type": "GPU", "sharingStrategy": {"nvidiaMps": {"memory": 6000, "maxComputePercent": 40}}}]
    assert _gpu_requirement(gpu_key(shared)) == override["resourceRequirements"][0]
    (whole,) = container_overrides(spec(gpus=2), "sub-x-00000", 1, "s3://b/p")["containerOverrides"]
    assert whole["resourceRequirements"] == [{"type": "GPU", "value": "2"}] and gpu_key(spec(gpus=2)) == WHOLE_GPU


def task(requirement, gpu_ids=None):
    container = {"name": "job"} if gpu_ids is None else {"name": "job", "gpuIds": gpu_ids}
    return {"taskDefinitionArn": "td", "containers": [container],
            "overrides": {"containerOverrides": [{"name": "job", "cpu": 1024, "memoryReservation": 2048,
                                                  "resourceRequirements": [requirement]}]}}


DEFINITION = {"containerDefinitions": [{"name": "job", "cpu": 256, "memoryReservation": 512,
                                        "resourceRequirements": [{"type": "GPU", "value": "1"}]}]}
MPS = {"type": "GPU", "sharingStrategy": {"nvidiaMps": {"memory": 5000}}}


def test_a_sharing_task_holds_memory_on_the_gpu_ecs_gave_it():
    use = requested_resources(task(MPS, ["GPU-a"]), lambda _: DEFINITION)
    assert (use.gpus, use.vcpus, use.memory_mib, use.shared) == (0, 1.0, 2048, [("GPU-a", 5000)])
    assert requested_resources(task(MPS), lambda _: DEFINITION).shared == [(None, 5000)]  # moto: no gpuIds
    assert requested_resources(task({"type": "GPU", "value": "2"}), lambda _: DEFINITION).gpus == 2


@pytest.mark.parametrize(("uses", "devices", "left"), [
    ([("a", 5000), ("a", 4000), ("b", 1000)], [], [A10G - 9000, A10G - 1000]),  # per GPU, by gpuIds
    ([(None, 5000), (None, 4000)], [], [A10G - 5000, A10G - 4000]),  # unknown GPU: each on its own
    ([("a", 5000)], [{"gpuId": "a", "sharingMode": "NVIDIA_MPS", "remainingMemoryInMiB": 3000}], [3000]),  # ECS's less
    ([("a", 5000)], [{"gpuId": "a", "sharingMode": "NVIDIA_MPS", "remainingMemoryInMiB": A10G}], [A10G - 5000]),
    ([], [{"gpuId": "c", "sharingMode": "NVIDIA_MPS", "remainingMemoryInMiB": 7000}], [7000]),  # another's task
    ([], [{"gpuId": "d", "sharingMode": "IDLE", "remainingMemoryInMiB": A10G}], []),
])
def test_each_shared_gpus_memory_left_is_the_least_of_ours_and_ecss(uses, devices, left):
    assert sorted(shared_gpus(uses, A10G, devices)) == sorted(left)


def test_a_machine_shares_only_with_the_agents_capability_and_within_the_total_ecs_reports():
    g5 = CATALOG.get("g5.xlarge")
    capable = {"attributes": [{"name": GPU_SHARING_CAPABILITY}]}
    assert machine_gpu_memory(g5, capable) == A10G
    assert machine_gpu_memory(g5, {**capable, "gpuDevices": [{"gpuId": "a", "totalMemoryInMiB": 20_000}]}) == 20_000
    assert machine_gpu_memory(g5, {"attributes": [{"name": "ecs.capability.docker-plugin.local"}]}) == 0
    assert machine_gpu_memory(None, capable) == 0  # a type the catalog does not know


def record(spec_, instance_type=None) -> JobRecord:
    placement = Placement("us-east-1", "gpu", "mlfleet-dev", "arn:ci", "i-1", instance_type,
                          lifecycle="spot") if instance_type else None
    return JobRecord("sub-20261122120000-abcdef-00000", "sub-20261122120000-abcdef", 0, "RUNNING", 1, 1, 0, 0.0,
                     0.0, spec_, placement=placement)


def test_a_sharing_job_counts_for_its_team_and_its_cost_as_the_part_of_a_gpu_it_holds():
    shared = spec(gpu_memory_mib=A10G // 4, vcpus=1, memory_mib=1024)
    g5 = CATALOG.get("g5.xlarge")
    assert gpus_held(record(shared, "g5.xlarge"), CATALOG) == pytest.approx(0.25)
    assert gpus_held(record(shared), CATALOG) == 1.0  # not placed yet: a whole GPU at most
    assert held_gpus([record(shared, "g5.xlarge"), record(spec(gpus=1))], TeamsSettings({}, None, 0), CATALOG) == {
        "default": pytest.approx(1.25)}
    assert dominant_share(shared, g5) == pytest.approx(0.25)  # its GPU memory dominates 1 vCPU of 4
