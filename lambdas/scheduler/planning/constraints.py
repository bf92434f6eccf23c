"""What a job needs and where it may run: resources, fit, fullness, and the job's constraints.

Shared by every stage. GPU counts come from the caller (the catalog's, or fewer where ECS registered
fewer, minus known tasks), never from ECS's remaining resources.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from .model import JobRequest, Resources

GPU_WEIGHT, VCPU_WEIGHT, MEMORY_WEIGHT = 0.6, 0.2, 0.2


def planning_order(jobs: Iterable[JobRequest]) -> list[JobRequest]:
    """Largest first (GPUs, then GPU memory of jobs sharing a GPU, then vCPUs, then memory), oldest first
    among equals: first-fit-decreasing order packs near-optimally."""
    return sorted(jobs, key=lambda j: (-j.gpus, -j.gpu_memory_mib, -j.vcpus, -j.memory_mib, j.submitted_at,
                                       j.job_id))


def capacity_of(catalog, instance_type: str) -> Resources:
    spec = catalog.get(instance_type)
    return spec.gpus, float(spec.schedulable_vcpus), spec.schedulable_memory_mib


def gpus_of(machine, catalog) -> int:
    """A machine's GPUs: those ECS registered where it reports them (Machine.gpus), else its type's."""
    return machine.gpus if machine.gpus is not None else capacity_of(catalog, machine.instance_type)[0]


def demand_of(job: JobRequest) -> Resources:
    """Whole GPUs, vCPUs and MiB (a job sharing a GPU asks for no whole GPU: see gpu_share and holds)."""
    return job.gpus, job.vcpus, job.memory_mib


def shareable_memory(catalog, instance_type: str) -> int:
    """Per-GPU memory that jobs sharing a GPU may be planned onto (0: the type cannot share)."""
    return catalog.get(instance_type).shareable_gpu_memory_mib


def gpu_share(job: JobRequest, gpu_memory_mib: int) -> float:
    """The GPUs a job takes on a machine whose GPUs have this much shareable memory: its whole GPUs, or
    the part of one GPU its memory is (what it costs and how full it makes a machine)."""
    if not job.shares_gpu:
        return float(job.gpus)
    return min(1.0, job.gpu_memory_mib / gpu_memory_mib) if gpu_memory_mib else 1.0


def holds(capacity: Resources, gpu_memory_mib: int, job: JobRequest) -> bool:
    """Could an empty machine of this capacity (and per-GPU shareable memory) run the job?"""
    if not fits(capacity, demand_of(job)) or gpu_memory_mib < job.gpu_memory_mib:
        return False
    return not job.shares_gpu or capacity[0] >= 1


def gpu_room(free_gpus: float, shared: Sequence[int], gpu_memory_mib: int, job: JobRequest) -> bool:
    """Has a machine a GPU for the job: whole free GPUs, or for a job sharing one, a GPU already shared
    with that much memory left or a free GPU to start sharing (a shared GPU takes only sharing jobs)."""
    if gpu_memory_mib < job.gpu_memory_mib:
        return False  # a sharing job, or a bundle of them, needs GPUs that can share that much
    if not job.shares_gpu:
        return free_gpus >= job.gpus
    return free_gpus >= 1 or any(left >= job.gpu_memory_mib for left in shared)


def take_gpu(free_gpus: float, shared: list[int], gpu_memory_mib: int, job: JobRequest) -> float:
    """Take the job's GPU from a machine's room (gpu_room said there is one): its whole GPUs, or for a job
    sharing one, the shared GPU with the least memory left that holds it (best fit), else a free GPU
    that starts sharing. `shared` is updated in place; returns the free whole GPUs left."""
    if not job.shares_gpu:
        return free_gpus - job.gpus
    fitting = [n for n, left in enumerate(shared) if left >= job.gpu_memory_mib]
    if fitting:
        best = min(fitting, key=lambda n: (shared[n], n))
        shared[best] -= job.gpu_memory_mib
        return free_gpus
    shared.append(gpu_memory_mib - job.gpu_memory_mib)
    return free_gpus - 1


def fits(free: Sequence[float], need: Sequence[float]) -> bool:
    return free[0] >= need[0] and free[1] >= need[1] and free[2] >= need[2]


def weighted_share(capacity: Sequence[float], amounts: Sequence[float]) -> float:
    """Weighted share of a machine's capacity that `amounts` make up (a resource it lacks counts full)."""
    total = 0.0
    for weight, cap, amount in zip((GPU_WEIGHT, VCPU_WEIGHT, MEMORY_WEIGHT), capacity, amounts):
        total += weight * (amount / cap if cap else 1.0)
    return total


class Patterns:
    """Compiled instance-type patterns and their verdicts, computed once per plan."""

    def __init__(self) -> None:
        self._compiled: dict[str, re.Pattern] = {}
        self._verdicts: dict[tuple[str, str], bool] = {}

    def accepts(self, job: JobRequest, instance_type: str, region: str, lifecycle: str | None) -> bool:
        if job.regions and region not in job.regions:
            return False
        if job.checkpoint_region is not None and region != job.checkpoint_region:
            return False
        if job.lifecycle is not None and lifecycle is not None and job.lifecycle != lifecycle:
            return False
        pattern = job.instance_type_pattern
        if pattern is None:
            return True
        key = (pattern, instance_type)
        if key not in self._verdicts:
            compiled = self._compiled.setdefault(pattern, re.compile(pattern))
            self._verdicts[key] = compiled.fullmatch(instance_type) is not None
        return self._verdicts[key]


def constraint_key(job: JobRequest) -> tuple:
    return job.instance_type_pattern, job.regions, job.lifecycle, job.checkpoint_region, job.shares_gpu
