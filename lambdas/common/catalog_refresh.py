"""Refresh the GPU instance catalog from the AWS APIs.

    python -m lambdas.common.catalog_refresh [--regions us-east-1 us-east-2 us-west-2]
        [--types g5.xlarge ... | --families g4dn,g5,g6,g6e,p3,p4d,p5] [--output PATH] [--check]

- Specs: EC2 DescribeInstanceTypes (GpuInfo.Gpus[].Count/Name/MemoryInfo.SizeInMiB, VCpuInfo.DefaultVCpus,
  MemoryInfo.SizeInMiB), read in the first region, at most 100 types a request, paginated.
- On-demand: the Pricing API's GetProducts (us-east-1 endpoint) for Linux, shared tenancy, no
  pre-installed software, capacity status Used; the hourly USD of the price list's OnDemand term.
- Spot: EC2 DescribeSpotPriceHistory with StartTime = now in each region; the median over the region's
  Availability Zones (lambdas.common.spot_prices explains why the median).

Without --types/--families the committed catalog's types are refreshed. The JSON is written with sorted
keys so a refresh is a reviewable diff. --check fetches the same figures and exits 1 when specs or
on-demand prices differ from the committed file, or a spot price moved by more than --spot-tolerance.

Needs AWS credentials allowed pricing:GetProducts, ec2:DescribeInstanceTypes and
ec2:DescribeSpotPriceHistory (PERMISSIONS below). Nothing else is called; nothing is changed in AWS.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Iterable, Mapping
from datetime import date, datetime, timezone
from pathlib import Path

from .aws import chunks, client, paginate
from .catalog import CATALOG_PATH
from .permissions import needs
from .spot_prices import median_price, zone_spot_prices

PERMISSIONS = (
    needs("pricing:GetProducts", why="on-demand Linux prices per type and region"),
    needs("ec2:DescribeInstanceTypes", why="GPU count, model and memory, vCPUs, memory per type"),
    needs("ec2:DescribeSpotPriceHistory", why="the spot price in effect in each Availability Zone"),
)

DEFAULT_REGIONS = ("us-east-1", "us-east-2", "us-west-2")
DEFAULT_FAMILIES = ("g4dn", "g5", "g6", "g6e", "p3", "p4d", "p5")
PRICING_REGION = "us-east-1"  # the Pricing API's endpoint that serves every region's prices
TYPES_PER_DESCRIBE = 100  # DescribeInstanceTypes takes at most 100 InstanceTypes a request
DEFAULT_SPOT_TOLERANCE = 0.25

SOURCE_SPECS = "aws-ec2-describe-instance-types"
SOURCE_ON_DEMAND = "aws-pricing-get-products"
SOURCE_SPOT = "aws-ec2-spot-price-history"

_REGION = re.compile(r"[a-z]{2}(-[a-z]+)+-\d")
_TYPE = re.compile(r"[a-z][a-z0-9-]*\.[a-z0-9-]+")


class RefreshError(RuntimeError):
    pass


# ---- pure parsing -------------------------------------------------------------------------------

def parse_instance_type(record: Mapping) -> dict | None:
    """One DescribeInstanceTypes record -> catalog specs, or None for a type without a whole GPU."""
    gpus = record.get("GpuInfo", {}).get("Gpus", [])
    count = sum(int(g.get("Count", 0)) for g in gpus)
    if not gpus or count < 1:
        return None  # no GPU, or a fractional one (g6f): the scheduler places whole GPUs
    models = {g["Name"] for g in gpus}
    if len(models) != 1:
        raise RefreshError(f"{record['InstanceType']} mixes GPU models {sorted(models)}")
    return {
        "gpus": count,
        "gpu_model": models.pop(),
        "gpu_memory_mib": int(gpus[0]["MemoryInfo"]["SizeInMiB"]),
        "vcpus": int(record["VCpuInfo"]["DefaultVCpus"]),
        "memory_mib": int(record["MemoryInfo"]["SizeInMiB"]),
    }


def on_demand_hourly_usd(price_list_item: str) -> set[float]:
    """The hourly USD prices of one GetProducts PriceList entry's OnDemand terms (a JSON string)."""
    item = json.loads(price_list_item)
    prices = set()
    for term in item.get("terms", {}).get("OnDemand", {}).values():
        for dimension in term.get("priceDimensions", {}).values():
            usd = float(dimension.get("pricePerUnit", {}).get("USD", "0"))
            if dimension.get("unit") == "Hrs" and usd > 0:
                prices.add(usd)
    return prices


def on_demand_price(price_list: Iterable[str], instance_type: str, region: str) -> float | None:
    """The one on-demand hourly price the filtered price list holds; None when it holds none."""
    prices = set().union(*(on_demand_hourly_usd(item) for item in price_list))
    if len(prices) > 1:
        raise RefreshError(f"{instance_type} in {region}: the price list holds several on-demand prices "
                           f"{sorted(prices)}")
    return prices.pop() if prices else None


def build_document(specs: Mapping[str, dict], on_demand: Mapping[tuple[str, str], float | None],
                   spot_zones: Mapping[tuple[str, str], Mapping[str, float]], regions: Iterable[str],
                   previous: Mapping | None, today: date) -> dict:
    """The catalog document. A type keeps a region only with both prices; otherwise the region is
    listed under `missing_regions` with the reason, so a gap is documented, never silent."""
    previous_types = (previous or {}).get("instance_types", {})
    types = {}
    for name, spec in sorted(specs.items()):
        entry = dict(spec)
        # AWS states GPU memory per GPU in its own units (24 GB for an A10G, 22888 MiB in the API);
        # keep the stated figure from the previous catalog, else the API's, rounded down to GiB.
        entry["gpu_memory_gib"] = previous_types.get(name, {}).get("gpu_memory_gib", spec["gpu_memory_mib"] // 1024)
        entry["specs_source"] = SOURCE_SPECS
        prices, missing = {}, {}
        for region in regions:
            price, zones = on_demand.get((name, region)), spot_zones.get((name, region), {})
            if price is None:
                missing[region] = "no on-demand Linux price in the Pricing API"
            elif not zones:
                missing[region] = "no spot price in any Availability Zone"
            else:
                prices[region] = {"on_demand": price, "on_demand_source": SOURCE_ON_DEMAND,
                                  "spot": median_price(zones), "spot_source": SOURCE_SPOT, "spot_zones": len(zones)}
        if not prices:
            continue
        entry["prices"] = prices
        if missing:
            entry["missing_regions"] = missing
        types[name] = entry
    stamp = today.isoformat()
    return {
        "snapshot_date": stamp,
        "source": f"AWS APIs on {stamp} via python -m lambdas.common.catalog_refresh",
        "sources": api_sources(next(iter(regions)), stamp),
        "instance_types": types,
    }


def api_sources(specs_region: str, stamp: str) -> dict:
    reference = "https://docs.aws.amazon.com/{}/latest/APIReference/{}.html"
    return {
        SOURCE_SPECS: {
            "url": reference.format("AWSEC2", "API_DescribeInstanceTypes"),
            "note": f"DescribeInstanceTypes in {specs_region} on {stamp}; gpu_memory_gib is AWS's stated per-GPU "
                    "figure kept from the previous catalog (the API reports gpu_memory_mib)"},
        SOURCE_ON_DEMAND: {
            "url": reference.format("aws-cost-management", "API_pricing_GetProducts"),
            "note": f"GetProducts on {stamp}: Linux, Shared tenancy, preInstalledSw NA, capacitystatus Used"},
        SOURCE_SPOT: {
            "url": reference.format("AWSEC2", "API_DescribeSpotPriceHistory"),
            "note": f"Linux/UNIX price in effect on {stamp}, median over the region's Availability Zones"},
    }


def drift(committed: Mapping, fresh: Mapping, spot_tolerance: float) -> list[str]:
    """What differs between the committed catalog and a fresh one, one line per difference."""
    lines = []
    old, new = committed.get("instance_types", {}), fresh.get("instance_types", {})
    for name in sorted(set(old) | set(new)):
        if name not in new:
            lines.append(f"{name}: in the committed catalog, not in AWS's answer")
            continue
        if name not in old:
            lines.append(f"{name}: new in AWS's answer")
            continue
        for key in ("gpus", "gpu_model", "gpu_memory_mib", "vcpus", "memory_mib"):
            if key in old[name] and old[name][key] != new[name][key]:
                lines.append(f"{name}: {key} {old[name][key]} -> {new[name][key]}")
        old_prices, new_prices = old[name].get("prices", {}), new[name].get("prices", {})
        for region in sorted(set(old_prices) | set(new_prices)):
            if region not in old_prices or region not in new_prices:
                lines.append(f"{name} {region}: priced in only one of the two catalogs")
                continue
            a, b = old_prices[region], new_prices[region]
            if abs(a["on_demand"] - b["on_demand"]) > 1e-6:
                lines.append(f"{name} {region}: on-demand {a['on_demand']} -> {b['on_demand']}")
            if abs(a["spot"] - b["spot"]) > spot_tolerance * a["spot"]:
                lines.append(f"{name} {region}: spot {a['spot']} -> {b['spot']} (more than {spot_tolerance:.0%})")
    return lines


def dumps(document: Mapping) -> str:
    return json.dumps(document, indent=1, sort_keys=True) + "\n"


# ---- AWS reads ----------------------------------------------------------------------------------

def fetch_specs(region: str, types: Iterable[str] = (), families: Iterable[str] = ()) -> dict[str, dict]:
    ec2 = client("ec2", region)
    records: list[dict] = []
    for batch in chunks(sorted(set(types)), TYPES_PER_DESCRIBE):
        records.extend(paginate(ec2, "describe_instance_types", "InstanceTypes", InstanceTypes=batch))
    if families:
        patterns = [f"{family}.*" for family in sorted(set(families))]
        records.extend(paginate(ec2, "describe_instance_types", "InstanceTypes",
                                Filters=[{"Name": "instance-type", "Values": patterns}]))
    specs = {}
    for record in records:
        spec = parse_instance_type(record)
        if spec is not None:
            specs[record["InstanceType"]] = spec
    missing = set(types) - set(specs)
    if missing:
        raise RefreshError(f"DescribeInstanceTypes in {region} returned no whole-GPU type for {sorted(missing)}")
    return specs


def fetch_on_demand(instance_type: str, region: str) -> float | None:
    pricing = client("pricing", PRICING_REGION)
    filters = [{"Type": "TERM_MATCH", "Field": field, "Value": value} for field, value in (
        ("instanceType", instance_type), ("regionCode", region), ("operatingSystem", "Linux"),
        ("tenancy", "Shared"), ("preInstalledSw", "NA"), ("capacitystatus", "Used"))]
    items = paginate(pricing, "get_products", "PriceList", ServiceCode="AmazonEC2", Filters=filters)
    return on_demand_price(items, instance_type, region)


def refresh(regions: list[str], types: list[str], families: list[str], previous: Mapping | None,
            now: datetime | None = None) -> dict:
    now = now or datetime.now(timezone.utc)
    specs = fetch_specs(regions[0], types, families)
    on_demand = {(t, r): fetch_on_demand(t, r) for t in specs for r in regions}
    spot = {}
    for region in regions:
        for instance_type, zones in zone_spot_prices(region, specs, now).items():
            spot[(instance_type, region)] = zones
    return build_document(specs, on_demand, spot, regions, previous, now.date())


# ---- command line -------------------------------------------------------------------------------

def _regions(text: str) -> str:
    if not _REGION.fullmatch(text):
        raise argparse.ArgumentTypeError(f"--regions: {text!r} is not an AWS region name such as us-east-1")
    return text


def _types(text: str) -> str:
    if not _TYPE.fullmatch(text):
        raise argparse.ArgumentTypeError(f"--types: {text!r} is not an instance type such as g5.xlarge")
    return text


def _families(text: str) -> list[str]:
    families = [f for f in text.split(",") if f]
    bad = [f for f in families if not re.fullmatch(r"[a-z][a-z0-9-]*", f)]
    if not families or bad:
        raise argparse.ArgumentTypeError(f"--families: {bad or text!r} is not a comma-separated list such as g5,g6")
    return families


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m lambdas.common.catalog_refresh", description=__doc__.split("\n\n")[0])
    p.add_argument("--regions", nargs="+", type=_regions, default=list(DEFAULT_REGIONS))
    which = p.add_mutually_exclusive_group()
    which.add_argument("--types", nargs="+", type=_types, help="instance types (default: the committed catalog's)")
    which.add_argument("--families", type=_families,
                       help=f"comma-separated families, e.g. {','.join(DEFAULT_FAMILIES)}")
    p.add_argument("--output", type=Path, default=CATALOG_PATH, help="catalog file to write or --check against")
    p.add_argument("--check", action="store_true", help="compare with --output instead of writing; exit 1 on drift")
    p.add_argument("--spot-tolerance", type=float, default=DEFAULT_SPOT_TOLERANCE,
                   help="relative spot move --check accepts (spot prices move daily)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    previous = json.loads(args.output.read_text()) if args.output.exists() else None
    types = args.types or ([] if args.families else sorted((previous or {}).get("instance_types", {})))
    if not types and not args.families:
        raise SystemExit(f"--types or --families is needed: {args.output} lists no instance types")
    document = refresh(args.regions, types, args.families or [], previous)
    if args.check:
        lines = drift(previous or {}, document, args.spot_tolerance)
        print("\n".join(lines) if lines else f"{args.output}: no drift")
        return 1 if lines else 0
    args.output.write_text(dumps(document))
    print(f"wrote {len(document['instance_types'])} types to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
