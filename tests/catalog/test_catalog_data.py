"""The committed catalog is self-consistent and every figure traces to a source.

The spot medians are recomputed from the transcribed source rows (docs/catalog-sources), so a hand
edit of a price that no longer matches its cited source fails here.
"""

from __future__ import annotations

import csv
import json
from collections import defaultdict
from pathlib import Path

import pytest

from lambdas.common.catalog import CATALOG_PATH, CatalogError, load_catalog, parse_catalog
from lambdas.common.spot_prices import median_price

REGIONS = ("us-east-1", "us-east-2", "us-west-2")
EXTRACT = Path(__file__).parents[2] / "docs" / "catalog-sources" / "skypilot-aws-vms-extract.csv"
SKYPILOT = "skypilot-catalog-aws-vms"

DOCUMENT = json.loads(CATALOG_PATH.read_text())
CATALOG = load_catalog()


def extract_rows() -> dict[tuple[str, str], list[dict]]:
    rows = defaultdict(list)
    with EXTRACT.open() as f:
        for row in csv.DictReader(f):
            rows[(row["InstanceType"], row["Region"])].append(row)
    return rows


@pytest.mark.parametrize("name", CATALOG.names())
def test_every_type_is_priced_in_every_fleet_region_or_says_why_not(name):
    entry = DOCUMENT["instance_types"][name]
    for region in REGIONS:
        assert region in entry["prices"] or region in entry.get("missing_regions", {}), (name, region)


@pytest.mark.parametrize("name", CATALOG.names())
def test_specs_and_prices_are_plausible(name):
    t = CATALOG.get(name)
    assert t.gpus >= 1 and t.vcpus >= 1 and t.memory_mib > 0 and t.gpu_memory_gib > 0
    for region in t.regions():
        assert 0 < t.spot_price(region) < t.on_demand_price(region), (name, region)
        assert t.schedulable_memory_mib > 0


@pytest.mark.parametrize("name", CATALOG.names())
def test_every_figure_cites_a_described_source(name):
    t = CATALOG.get(name)
    ids = {s.id for s in CATALOG.sources}
    assert t.specs_source in ids
    assert {o.region for o in t.price_origins} == set(t.regions())
    for origin in t.price_origins:
        assert {origin.on_demand_source, origin.spot_source} <= ids
        # A spot median is over at least one zone; an estimate says it is one.
        assert origin.spot_zones >= 1 or CATALOG.source_of(origin.spot_source).estimate


def test_untraceable_sources_are_flagged_and_scarce():
    untraceable = {s.id for s in CATALOG.sources if s.url is None}
    assert untraceable == {"initial-compilation", "family-spot-ratio"}
    figures = [(t.name, o.region, o.on_demand_source, o.spot_source) for t in CATALOG.types for o in t.price_origins]
    unsourced = [f for f in figures if {f[2], f[3]} & untraceable]
    # p3.16xlarge in three regions and g6e.48xlarge in us-east-1 were not transcribed; nothing else.
    assert sorted({(n, r) for n, r, _, _ in unsourced}) == [
        ("g6e.48xlarge", "us-east-1"), ("p3.16xlarge", "us-east-1"), ("p3.16xlarge", "us-east-2"), ("p3.16xlarge", "us-west-2")]


@pytest.mark.parametrize("name", [t.name for t in CATALOG.types if t.specs_source == SKYPILOT])
def test_sourced_figures_match_the_transcribed_rows(name):
    rows = extract_rows()
    t = CATALOG.get(name)
    for origin in t.price_origins:
        source_rows = rows[(name, origin.region)]
        if origin.on_demand_source == SKYPILOT:
            assert {float(r["Price"]) for r in source_rows} == {t.on_demand_price(origin.region)}
        if origin.spot_source == SKYPILOT:
            zones = {r["AvailabilityZone"]: float(r["SpotPrice"]) for r in source_rows if r["SpotPrice"]}
            assert origin.spot_zones == len(zones)
            assert t.spot_price(origin.region) == median_price(zones)
    row = next(rows[(name, region)][0] for region in t.regions() if rows[(name, region)])
    assert (int(row["AcceleratorCount"]), row["AcceleratorName"], int(row["vCPUs"]), int(float(row["MemoryGiB"]) * 1024),
            int(row["GpuMemoryMiB"])) == (t.gpus, t.gpu_model, t.vcpus, t.memory_mib, t.gpu_memory_mib)


@pytest.mark.parametrize("name", [t.name for t in CATALOG.types if t.gpu_memory_mib])
def test_stated_gpu_memory_agrees_with_the_api_figure(name):
    # AWS states 16 GiB for a T4 (16384 MiB in the API) but 24 GB for an A10G (22888 MiB = 24e9 bytes).
    t = CATALOG.get(name)
    as_gib, as_gb = t.gpu_memory_mib / 1024, t.gpu_memory_mib * 2**20 / 1e9
    assert t.gpu_memory_gib in (round(as_gib), round(as_gb))


def test_a_price_citing_an_unknown_source_is_refused():
    document = json.loads(CATALOG_PATH.read_text())
    document["instance_types"]["g5.xlarge"]["prices"]["us-east-1"]["spot_source"] = "my-memory"
    with pytest.raises(CatalogError, match="g5.xlarge us-east-1 spot cites source 'my-memory'"):
        parse_catalog(document)


def test_a_catalog_without_provenance_still_loads():
    # Older documents (and test doubles) carry only the figures.
    legacy = {"snapshot_date": "2026-01-01", "source": "test", "instance_types": {
        "g5.xlarge": {"gpus": 1, "gpu_model": "A10G", "gpu_memory_gib": 24, "vcpus": 4, "memory_mib": 16384,
                      "prices": {"us-east-1": {"on_demand": 1.0, "spot": 0.4}}}}}
    catalog = parse_catalog(legacy)
    assert catalog.get("g5.xlarge").spot_price("us-east-1") == 0.4
    assert catalog.get("g5.xlarge").price_origin("us-east-1") is None
