"""What a job needs and where it may run: resources, fit, fullness, and the job's constraints.

Shared by every stage. GPU counts come from the caller (catalog minus known tasks), never from ECS's
remaining resources.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from .model import JobRequest, Resources

GPU_WEIGHT, VCPU_WEIGHT, MEMORY_WEIGHT = 0.6, 0.2, 0.2


def planning_order(jobs: Iterable[JobRequest]) -> list[JobRequest]:
    """Largest first (GPUs, then vCPUs, then memory), oldest first among equals: first-fit-decreasing
    order packs near-optimally."""
    return sorted(jobs, key=lambda j: (-j.gpus, -j.vcpus, -j.memory_mib, j.submitted_at, j.job_id))


def capacity_of(catalog, instance_type: str) -> Resources:
    spec = catalog.get(instance_type)
    return spec.gpus, float(spec.schedulable_vcpus), spec.schedulable_memory_mib


def demand_of(job: JobRequest) -> Resources:
    return job.gpus, job.vcpus, job.memory_mib


def fits(free: Sequence[float], need: Sequence[float]) -> bool:
    return free[0] >= need[0] and free[1] >= need[1] and free[2] >= need[2]


def weighted_share(capacity: Resources, amounts: Sequence[float]) -> float:
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
    return job.instance_type_pattern, job.regions, job.lifecycle, job.checkpoint_region
