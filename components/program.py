"""The whole mlfleet program for one stack: validated config in, resources and outputs out."""

from __future__ import annotations

import pulumi

from components.config import StackConfig
from components.providers import regional_providers, with_provider
from components.region import FleetRegion, FleetRegionArgs


def deploy(cfg: StackConfig) -> dict:
    """Declare every resource of the stack and export what users need. Returns the outputs."""
    providers = regional_providers([cfg.home_region, *cfg.regions], cfg.base_tags())
    regions = {
        region: FleetRegion(
            f"{cfg.environment}-{region}",
            FleetRegionArgs(region=region, config=cfg),
            opts=with_provider(providers[region]),
        )
        for region in cfg.regions
    }
    outputs = {
        "environment": cfg.environment,
        "homeRegion": cfg.home_region,
        "regions": {region: component.outputs() for region, component in regions.items()},
    }
    for key, value in outputs.items():
        pulumi.export(key, value)
    return outputs
