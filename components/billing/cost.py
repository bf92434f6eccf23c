"""What the caps allow the environment to spend (pure: config and catalog in, dollars out).

Every fleet at its hard cap (`maxInstances` in each of its regions), each instance priced at the most
expensive type the fleet may launch: that is what the Auto Scaling groups alone could cost. The
scheduler also stops at `maxHourlyUsd`, so the environment's worst case is the smaller of the two.
Spot is priced too (spot never costs more than on-demand, so on-demand is the bound that matters).
"""

from __future__ import annotations

from dataclasses import dataclass

from components.config import StackConfig
from lambdas.common.catalog import Catalog, load_catalog

HOURS_PER_MONTH = 730  # AWS's convention for monthly prices


@dataclass(frozen=True)
class FleetCost:
    region: str
    fleet: str
    max_instances: int
    on_demand_hourly: float
    spot_hourly: float
    # The fleet's cheapest instance type there, one instance on spot at the catalog's price: $/h, type.
    cheapest_spot_hourly: float
    cheapest_type: str


@dataclass(frozen=True)
class CostEstimate:
    fleets: tuple[FleetCost, ...]
    scheduler_cap_hourly: float

    @property
    def caps_on_demand_hourly(self) -> float:
        return round(sum(f.on_demand_hourly for f in self.fleets), 2)

    @property
    def caps_spot_hourly(self) -> float:
        return round(sum(f.spot_hourly for f in self.fleets), 2)

    @property
    def worst_case_hourly(self) -> float:
        """The most the environment can spend per hour: fleet caps or the scheduler's dollar cap."""
        return round(min(self.caps_on_demand_hourly, self.scheduler_cap_hourly), 2)

    @property
    def worst_case_monthly(self) -> float:
        return round(self.worst_case_hourly * HOURS_PER_MONTH, 2)

    def outputs(self) -> dict:
        return {
            "fleetCapsHourlyUsd": {"onDemand": self.caps_on_demand_hourly, "spot": self.caps_spot_hourly},
            "fleetCapsMonthlyUsd": {
                "onDemand": round(self.caps_on_demand_hourly * HOURS_PER_MONTH, 2),
                "spot": round(self.caps_spot_hourly * HOURS_PER_MONTH, 2),
            },
            "schedulerCapHourlyUsd": self.scheduler_cap_hourly,
            "worstCaseHourlyUsd": self.worst_case_hourly,
            "worstCaseMonthlyUsd": self.worst_case_monthly,
        }


def estimate(cfg: StackConfig, catalog: Catalog | None = None) -> CostEstimate:
    catalog = catalog or load_catalog()
    rows = []
    for fleet_name, fleet in cfg.fleets.items():
        for region in cfg.fleet_regions(fleet):
            types = [catalog.get(t) for t in fleet.instance_types]
            rows.append(FleetCost(
                region=region,
                fleet=fleet_name,
                max_instances=fleet.max_instances,
                on_demand_hourly=round(fleet.max_instances * max(t.on_demand_price(region) for t in types), 4),
                spot_hourly=round(fleet.max_instances * max(t.spot_price(region) for t in types), 4),
                cheapest_spot_hourly=min(t.spot_price(region) for t in types),
                cheapest_type=min(types, key=lambda t: t.spot_price(region)).name,
            ))
    return CostEstimate(fleets=tuple(rows), scheduler_cap_hourly=float(cfg.max_hourly_usd))


def monthly_budget(cfg: StackConfig, cost: CostEstimate) -> float:
    """The configured budget, or the worst case the caps allow when none is configured."""
    return float(cfg.monthly_budget_usd) if cfg.monthly_budget_usd else cost.worst_case_monthly


def unreachable_fleets_warning(cost: CostEstimate) -> str | None:
    """Fleets whose cheapest instance costs more an hour than the scheduler's cap: it never buys for them.

    A warning, not an error: the scheduler prices by the live spot price when it is plausible
    (lambdas/common/spot_prices.py), which may fall below the catalog's, and on-demand costs more."""
    cap = cost.scheduler_cap_hourly
    over = [f for f in cost.fleets if f.cheapest_spot_hourly > cap]
    if not over:
        return None
    named = "; ".join(f"{f.fleet} in {f.region} ({f.cheapest_type} at ${f.cheapest_spot_hourly:,.2f}/h on spot)"
                      for f in over)
    return (f"mlfleet:maxHourlyUsd ${cap:,.0f}/h is below the cheapest instance of {named}: the scheduler will not "
            "buy for these fleets, and their jobs wait; raise the cap or drop the fleets")


def over_budget_warning(cfg: StackConfig, cost: CostEstimate) -> str | None:
    if cfg.monthly_budget_usd is None or cost.worst_case_monthly <= cfg.monthly_budget_usd:
        return None
    return (
        f"the caps allow ${cost.worst_case_monthly:,.0f}/month (${cost.worst_case_hourly:,.2f}/h: fleet caps "
        f"${cost.caps_on_demand_hourly:,.2f}/h on demand, scheduler cap ${cost.scheduler_cap_hourly:,.2f}/h), "
        f"more than the ${cfg.monthly_budget_usd:,}/month budget; the budget alerts and the admission stop "
        "at 100% are what keep spend in check"
    )
