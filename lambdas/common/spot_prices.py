"""Live spot prices from EC2 DescribeSpotPriceHistory, for the scheduler when it can reach the API.

`live_spot_prices(region, types)` returns each type's spot price in the region: the median, over the
region's Availability Zones, of the price in effect now. The catalog's spot prices are built the same
way (lambdas.common.catalog_refresh), so a live figure and a catalog figure mean the same thing and
the caller can fall back from one to the other (types with no spot offer in the region are absent).

Why the median across zones: the fleet's Auto Scaling group spreads instances over every zone of its
subnets (price-capacity-optimized), so the price paid is not the cheapest zone's; a zone whose pool is
exhausted reports a price at or near on-demand, and the median is not dragged by one such zone the way
a mean is, nor flattered by one cheap zone the way a minimum is.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Iterable, Mapping
from datetime import datetime, timezone

from .aws import chunks, client, paginate
from .permissions import needs

PERMISSIONS = (
    needs("ec2:DescribeSpotPriceHistory", why="read the spot price in effect in each Availability Zone"),
)

LINUX = "Linux/UNIX"
# DescribeSpotPriceHistory takes any number of types; batches keep each request's pages small.
TYPES_PER_REQUEST = 100


def availability_zone_of(region: str, zone: str) -> bool:
    """True for the region's own zones (us-east-1a), false for Local and Wavelength Zones
    (us-west-2-lax-1a), whose spot market is separate and where the fleet has no subnets."""
    return re.fullmatch(re.escape(region) + r"[a-z]", zone) is not None


def latest_zone_prices(history: Iterable[Mapping], region: str) -> dict[str, dict[str, float]]:
    """type -> zone -> the most recent spot price in the history, regional zones only."""
    latest: dict[tuple[str, str], tuple[datetime, float]] = {}
    for record in history:
        zone = record["AvailabilityZone"]
        if not availability_zone_of(region, zone):
            continue
        key = (record["InstanceType"], zone)
        stamp = record["Timestamp"]
        if key not in latest or stamp > latest[key][0]:
            latest[key] = (stamp, float(record["SpotPrice"]))
    prices: dict[str, dict[str, float]] = {}
    for (instance_type, zone), (_, price) in sorted(latest.items()):
        prices.setdefault(instance_type, {})[zone] = price
    return prices


def median_price(zone_prices: Mapping[str, float]) -> float:
    return round(statistics.median(zone_prices.values()), 6)


def zone_spot_prices(region: str, instance_types: Iterable[str],
                     now: datetime | None = None) -> dict[str, dict[str, float]]:
    """type -> zone -> spot price in effect now (Linux/UNIX), read page by page."""
    ec2 = client("ec2", region)
    start = now or datetime.now(timezone.utc)
    history = []
    for batch in chunks(sorted(set(instance_types)), TYPES_PER_REQUEST):
        # StartTime = now returns, per zone, the price in effect at that moment.
        history.extend(paginate(ec2, "describe_spot_price_history", "SpotPriceHistory",
                                InstanceTypes=batch, ProductDescriptions=[LINUX], StartTime=start))
    return latest_zone_prices(history, region)


def live_spot_prices(region: str, instance_types: Iterable[str], now: datetime | None = None) -> dict[str, float]:
    """type -> median spot price over the region's zones; types without a spot offer are left out."""
    return {t: median_price(z) for t, z in zone_spot_prices(region, instance_types, now).items()}
