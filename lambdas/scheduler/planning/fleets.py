"""Fleets as things to buy: a box of the capacity every type of the fleet guarantees, at its worst price.

The group may launch any of its types, so a new instance is planned as the component-wise minimum of
their capacities (and of their GPUs' shareable memory), priced at the dearest (spot price for a spot fleet, on-demand for an on-demand or a
mixed one). A job may use a fleet only if every type of the fleet matches its pattern, the region is
one it accepts, and the fleet's lifecycle is the one it insists on (a mixed fleet promises none).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .constraints import Patterns, capacity_of, holds, shareable_memory
from .model import Fleet, JobRequest, Machine, Resources


@dataclass
class Option:
    """One fleet as something to buy: a box of guaranteed capacity at its worst-case price."""
    fleet: Fleet
    capacity: Resources
    price: float
    room: int  # instances the cap still allows
    gpu_memory: int = 0  # shareable memory per GPU of any instance it launches (0: cannot share)

    def holds(self, job: JobRequest) -> bool:
        """Does one instance of the fleet, empty, hold the job (size, and a GPU it may share)?"""
        return holds(self.capacity, self.gpu_memory, job)


def fleet_lifecycle(fleet: Fleet) -> str | None:
    """What a new instance of the fleet will be: spot, on-demand, or either (mixed)."""
    if fleet.on_demand_percent_above_base >= 100:
        return "on-demand"
    if fleet.on_demand_base == 0 and fleet.on_demand_percent_above_base == 0:
        return "spot"
    return None


def worst_price(catalog, prices: Mapping | None, region: str, instance_type: str, lifecycle: str | None) -> float:
    spec = catalog.get(instance_type)
    if lifecycle == "spot":
        return (prices or {}).get((region, instance_type), spec.spot_price(region))
    return spec.on_demand_price(region)  # on-demand, or a mix: the worst case


def guaranteed_capacity(catalog, fleet: Fleet) -> Resources:
    """What any instance of the fleet holds at least, whichever of its types the group launches."""
    capacities = [capacity_of(catalog, t) for t in fleet.instance_types]
    return (min(c[0] for c in capacities), min(c[1] for c in capacities), min(c[2] for c in capacities))


def guaranteed_gpu_memory(catalog, fleet: Fleet) -> int:
    """Shareable memory per GPU any instance of the fleet has (0 when one of its types, or its AMI, cannot share)."""
    if not fleet.gpu_sharing:
        return 0
    return min(shareable_memory(catalog, t) for t in fleet.instance_types)


def purchase_options(fleets: Sequence[Fleet], catalog, prices) -> list[Option]:
    options = []
    for fleet in sorted(fleets, key=lambda f: (f.region, f.fleet)):
        lifecycle = fleet_lifecycle(fleet)
        price = max(worst_price(catalog, prices, fleet.region, t, lifecycle) for t in fleet.instance_types)
        # The group's desired capacity also counts the instances a removal is draining, until their
        # terminate decrements it (TerminateInstanceInAutoScalingGroup with ShouldDecrementDesiredCapacity,
        # botocore's autoscaling model; state.py: pending = desired - usable - removing); the cap bounds all three.
        room = max(0, fleet.max_instances - fleet.current_instances - fleet.pending_instances - fleet.removing_instances)
        options.append(Option(fleet, guaranteed_capacity(catalog, fleet), price, room,
                              guaranteed_gpu_memory(catalog, fleet)))
    return options


def may_run(job: JobRequest, option: Option, patterns: Patterns) -> bool:
    """May an instance of this fleet run the job, whichever of its types the group launches?"""
    fleet = option.fleet
    lifecycle = fleet_lifecycle(fleet)
    if job.lifecycle is not None and lifecycle != job.lifecycle:
        return False  # a mixed fleet cannot promise the lifecycle the job insists on
    return all(patterns.accepts(job, t, fleet.region, lifecycle) for t in fleet.instance_types)


def cheapest_alone(job: JobRequest, options: Sequence[Option], patterns: Patterns) -> float | None:
    """$/h of the cheapest fleet that may run the job on an instance of its own (None: no fleet can)."""
    prices = [o.price for o in options if o.holds(job) and may_run(job, o, patterns)]
    return min(prices) if prices else None


def box_machine(catalog, option: Option, key: str) -> Machine:
    """A box as a machine to pack onto: the fleet's guaranteed capacity, empty."""
    fleet = option.fleet
    smallest = min(fleet.instance_types, key=lambda t: capacity_of(catalog, t))
    return Machine(key, "", fleet.region, fleet.fleet, smallest, "", fleet_lifecycle(fleet) or "mixed",
                   *option.capacity, option.price, gpu_memory_mib=option.gpu_memory)
