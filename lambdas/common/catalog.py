"""The GPU instance catalog: what each EC2 GPU type holds and what it costs, per region.

The data lives in `data/instance_catalog.json` (refreshed by `python -m lambdas.common.catalog_refresh`
from the AWS Pricing and EC2 APIs). Specs are facts of the instance type; prices are a dated snapshot.
Config validation, the worst-case cost estimate, the scheduler and its benchmark all read this one file.

Every figure names where it came from: the document's `sources` maps a source id to its URL and
retrieval note, and each type's `specs_source` and each price's `on_demand_source` / `spot_source`
name one of those ids. A spot price is the median of the latest spot price over the region's
Availability Zones (`spot_zones` of them); a spot price whose source is an estimate (`estimate: true`
on the source) is not a measured market price. docs/catalog.md explains each source.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path

CATALOG_PATH = Path(__file__).with_name("data") / "instance_catalog.json"

# GPU memory a job sharing a GPU (ECS's `nvidiaMps` sharing strategy) may be planned onto, per GPU: the
# smaller of the stated and the API figure, less what the GPU and its driver keep. ECC on GDDR memory
# takes 6.25% of it (CUDA C++ Best Practices Guide, "Device Memory Spaces": "On GPUs with GDDR memory with
# ECC enabled the available DRAM is reduced by 6.25%"), and the driver keeps a little more: a g4dn's T4
# (16,384 MiB) reports 15,079 MiB in nvidia-smi (forums.developer.nvidia.com/t/173099), 92.0% of it. ECS
# places `nvidiaMps` containers by the total its agent reports, which "can be less than the nominal memory
# of the GPU" (ECS API reference, GpuDevice.totalMemoryInMiB): planning at 92% keeps a purchase within it.
# A live machine's own report, when ECS gives one, bounds it further (lambdas/scheduler/state.py).
SHAREABLE_GPU_MEMORY_SHARE = 0.92
# GPUs ECS cannot share with MPS: fractional vGPU slices ("GPU sharing does not work on ... G6f fractional
# GPU instances": the ECS developer guide's GPU sharing page; the ECS agent refuses to advertise
# ecs.capability.gpu-sharing-mps on an instance with an NVIDIA vGPU slice, agent/gpu/nvidia_gpu_manager.go).
VGPU_FAMILIES = ("g6f", "gr6f")

# Memory the ECS agent, the Docker daemon and the OS keep for themselves; a task can never use it.
# Matches ECS_RESERVED_MEMORY in the fleet's user data plus the kernel's share (~4% on these types).
ECS_RESERVED_MEMORY_MIB = 1024


class UnknownInstanceType(KeyError):
    pass


class UnknownRegion(KeyError):
    pass


@dataclass(frozen=True)
class Source:
    """Where figures came from: a URL (None for figures nobody can trace) and what was taken from it."""

    id: str
    url: str | None
    note: str
    estimate: bool = False


@dataclass(frozen=True)
class PriceOrigin:
    region: str
    on_demand_source: str
    spot_source: str
    spot_zones: int  # Availability Zones the spot median was taken over (0 for an estimate)


@dataclass(frozen=True)
class InstanceType:
    name: str
    gpus: int
    gpu_model: str
    gpu_memory_gib: int  # per GPU, as AWS's instance type pages state it
    vcpus: int
    memory_mib: int
    # region -> (on-demand $/h, spot $/h)
    prices: tuple[tuple[str, float, float], ...]
    gpu_memory_mib: int = 0  # per GPU, as DescribeInstanceTypes reports it (0 when not recorded)
    specs_source: str = ""
    price_origins: tuple[PriceOrigin, ...] = ()

    @property
    def family(self) -> str:
        return self.name.split(".", 1)[0]

    @property
    def schedulable_memory_mib(self) -> int:
        """Memory a task can reserve on this type: nominal minus what the OS and ECS agent keep."""
        return int(self.memory_mib * 0.96) - ECS_RESERVED_MEMORY_MIB

    @property
    def schedulable_vcpus(self) -> int:
        return self.vcpus

    @property
    def nominal_gpu_memory_mib(self) -> int:
        """Memory per GPU: the smaller of AWS's stated GiB and what DescribeInstanceTypes reports."""
        stated = self.gpu_memory_gib * 1024
        return min(stated, self.gpu_memory_mib) if self.gpu_memory_mib else stated

    @property
    def shareable_gpu_memory_mib(self) -> int:
        """GPU memory per GPU that jobs sharing it may be planned onto (0: its GPUs cannot be shared)."""
        if self.family in VGPU_FAMILIES:
            return 0
        return int(self.nominal_gpu_memory_mib * SHAREABLE_GPU_MEMORY_SHARE)

    def gpu_fraction(self, gpu_memory_mib: int) -> float:
        """The part of one of its GPUs a job sharing it holds with this much memory (a whole GPU when its
        GPUs cannot be shared): what the job costs and counts for its team."""
        shareable = self.shareable_gpu_memory_mib
        return min(1.0, gpu_memory_mib / shareable) if shareable else 1.0

    def regions(self) -> tuple[str, ...]:
        return tuple(region for region, _, _ in self.prices)

    def on_demand_price(self, region: str) -> float:
        return self._price(region)[0]

    def spot_price(self, region: str) -> float:
        return self._price(region)[1]

    def price_origin(self, region: str) -> PriceOrigin | None:
        return next((o for o in self.price_origins if o.region == region), None)

    def _price(self, region: str) -> tuple[float, float]:
        for name, on_demand, spot in self.prices:
            if name == region:
                return on_demand, spot
        raise UnknownRegion(f"{self.name} has no price for region {region!r} in the catalog")


@dataclass(frozen=True)
class Catalog:
    snapshot_date: str
    source: str
    types: tuple[InstanceType, ...]
    sources: tuple[Source, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_name", {t.name: t for t in self.types})

    def get(self, name: str) -> InstanceType:
        try:
            return self._by_name[name]  # type: ignore[attr-defined]
        except KeyError:
            raise UnknownInstanceType(name) from None

    def __contains__(self, name: object) -> bool:
        return name in self._by_name  # type: ignore[attr-defined]

    def names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.types)

    def regions(self) -> tuple[str, ...]:
        seen: dict[str, None] = {}
        for t in self.types:
            for region in t.regions():
                seen.setdefault(region)
        return tuple(seen)

    def max_gpus(self) -> int:
        return max(t.gpus for t in self.types)


    def source_of(self, source_id: str) -> Source:
        for source in self.sources:
            if source.id == source_id:
                return source
        raise KeyError(f"the catalog has no source {source_id!r}")


class CatalogError(ValueError):
    pass


def parse_catalog(document: dict) -> Catalog:
    sources = tuple(
        Source(id=key, url=value.get("url"), note=value.get("note", ""), estimate=bool(value.get("estimate", False)))
        for key, value in sorted(document.get("sources", {}).items())
    )
    known = {s.id for s in sources}

    def cited(where: str, source_id: str) -> str:
        # A figure citing a source the document does not describe is untraceable: refuse the file.
        if sources and source_id not in known:
            raise CatalogError(f"{where} cites source {source_id!r}, which the catalog's `sources` does not list")
        return source_id

    types = []
    for name, spec in sorted(document["instance_types"].items()):
        regions = sorted(spec["prices"].items())
        prices = tuple((region, float(p["on_demand"]), float(p["spot"])) for region, p in regions)
        origins = tuple(
            PriceOrigin(
                region=region,
                on_demand_source=cited(f"{name} {region} on_demand", p.get("on_demand_source", "")),
                spot_source=cited(f"{name} {region} spot", p.get("spot_source", "")),
                spot_zones=int(p.get("spot_zones", 0)),
            )
            for region, p in regions
            if "on_demand_source" in p
        )
        types.append(
            InstanceType(
                name=name,
                gpus=int(spec["gpus"]),
                gpu_model=spec["gpu_model"],
                gpu_memory_gib=int(spec["gpu_memory_gib"]),
                vcpus=int(spec["vcpus"]),
                memory_mib=int(spec["memory_mib"]),
                prices=prices,
                gpu_memory_mib=int(spec.get("gpu_memory_mib", 0)),
                specs_source=cited(f"{name} specs", spec["specs_source"]) if "specs_source" in spec else "",
                price_origins=origins,
            )
        )
    return Catalog(snapshot_date=document["snapshot_date"], source=document["source"], types=tuple(types),
                   sources=sources)


@functools.lru_cache(maxsize=1)
def load_catalog(path: str | None = None) -> Catalog:
    return parse_catalog(json.loads(Path(path or CATALOG_PATH).read_text()))
