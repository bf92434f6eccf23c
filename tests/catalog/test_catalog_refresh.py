"""catalog_refresh: pure parsing, the Pricing API through botocore's Stubber, EC2 against moto.

moto differs from AWS here, and the tests do not lean on those gaps:
- Pricing GetProducts is not implemented in moto 5.2 (it answers 404 "Not yet implemented"), so the
  Pricing client is stubbed with botocore's Stubber and the expected request parameters are asserted.
- DescribeInstanceTypes returns AWS's recorded specs, GpuInfo included, for every type of the catalog
  except the p3 family, which moto's data lacks (InvalidInstanceType).
- DescribeSpotPriceHistory returns a dummy price (0.00001) with a 2006 timestamp for every zone, and
  labels it "Linux/UNIX (Amazon VPC)" whatever ProductDescriptions asked for.
"""

from __future__ import annotations

import json
from datetime import date

import boto3
import pytest
from botocore.stub import Stubber
from hypothesis import given
from hypothesis import strategies as st

from lambdas.common import catalog_refresh
from lambdas.common.catalog import load_catalog, parse_catalog
from lambdas.common.catalog_refresh import (
    RefreshError, build_document, drift, dumps, fetch_specs, on_demand_hourly_usd, on_demand_price,
    parse_instance_type, parser,
)


# ---- pure parsing -------------------------------------------------------------------------------

def test_the_on_demand_hourly_price_is_read_from_the_price_list_item(price_list_item):
    # The Reserved term in the same item is ignored.
    assert on_demand_hourly_usd(json.dumps(price_list_item)) == {1.006}


def test_several_items_with_one_price_agree_and_two_prices_are_an_error(price_list_item):
    item = json.dumps(price_list_item)
    assert on_demand_price([item, item], "g5.xlarge", "us-east-1") == 1.006
    assert on_demand_price([], "g5.xlarge", "us-east-1") is None
    other = json.loads(item)
    next(iter(next(iter(other["terms"]["OnDemand"].values()))["priceDimensions"].values()))["pricePerUnit"]["USD"] = "2.0"
    with pytest.raises(RefreshError, match="several on-demand prices"):
        on_demand_price([item, json.dumps(other)], "g5.xlarge", "us-east-1")


@pytest.mark.parametrize("record, expected", [
    ({"InstanceType": "g5.12xlarge", "VCpuInfo": {"DefaultVCpus": 48}, "MemoryInfo": {"SizeInMiB": 196608},
      "GpuInfo": {"Gpus": [{"Name": "A10G", "Count": 4, "MemoryInfo": {"SizeInMiB": 22888}}]}},
     {"gpus": 4, "gpu_model": "A10G", "gpu_memory_mib": 22888, "vcpus": 48, "memory_mib": 196608}),
    # A fractional GPU (g6f: Count 0) and no GPU at all are not catalog material.
    ({"InstanceType": "g6f.large", "VCpuInfo": {"DefaultVCpus": 2}, "MemoryInfo": {"SizeInMiB": 8192},
      "GpuInfo": {"Gpus": [{"Name": "L4", "Count": 0, "MemoryInfo": {"SizeInMiB": 2861}}]}}, None),
    ({"InstanceType": "m5.large", "VCpuInfo": {"DefaultVCpus": 2}, "MemoryInfo": {"SizeInMiB": 8192}}, None),
])
def test_instance_type_records_become_specs(record, expected):
    assert parse_instance_type(record) == expected


SPECS = {"g5.xlarge": {"gpus": 1, "gpu_model": "A10G", "gpu_memory_mib": 22888, "vcpus": 4, "memory_mib": 16384}}


def test_a_region_without_a_price_is_documented_not_dropped_silently():
    document = build_document(
        SPECS,
        on_demand={("g5.xlarge", "us-east-1"): 1.006, ("g5.xlarge", "us-east-2"): 1.006, ("g5.xlarge", "us-west-2"): None},
        spot_zones={("g5.xlarge", "us-east-1"): {"us-east-1a": 0.40, "us-east-1b": 0.50, "us-east-1c": 0.45}},
        regions=["us-east-1", "us-east-2", "us-west-2"], previous=None, today=date(2026, 11, 22))
    entry = document["instance_types"]["g5.xlarge"]
    assert entry["prices"] == {"us-east-1": {"on_demand": 1.006, "on_demand_source": "aws-pricing-get-products",
                                             "spot": 0.45, "spot_source": "aws-ec2-spot-price-history", "spot_zones": 3}}
    assert entry["missing_regions"] == {"us-east-2": "no spot price in any Availability Zone",
                                        "us-west-2": "no on-demand Linux price in the Pricing API"}
    # Without a previous catalog the stated GPU memory falls back to the API's figure in whole GiB.
    assert entry["gpu_memory_gib"] == 22
    assert parse_catalog(document).get("g5.xlarge").spot_price("us-east-1") == 0.45


def test_the_stated_gpu_memory_is_kept_from_the_previous_catalog():
    previous = {"instance_types": {"g5.xlarge": {"gpu_memory_gib": 24}}}
    document = build_document(SPECS, {("g5.xlarge", "us-east-1"): 1.006}, {("g5.xlarge", "us-east-1"): {"us-east-1a": 0.4}},
                              ["us-east-1"], previous, date(2026, 11, 22))
    assert document["instance_types"]["g5.xlarge"]["gpu_memory_gib"] == 24


def test_drift_reports_spec_and_on_demand_changes_and_large_spot_moves():
    committed = json.loads(dumps({"instance_types": {"g5.xlarge": {**SPECS["g5.xlarge"], "prices": {
        "us-east-1": {"on_demand": 1.006, "spot": 0.40}, "us-west-2": {"on_demand": 1.006, "spot": 0.40}}}}}))
    fresh = json.loads(json.dumps(committed))
    assert drift(committed, fresh, 0.25) == []
    fresh["instance_types"]["g5.xlarge"]["prices"]["us-east-1"]["spot"] = 0.45  # within 25%
    assert drift(committed, fresh, 0.25) == []
    fresh["instance_types"]["g5.xlarge"]["prices"]["us-west-2"] = {"on_demand": 1.1, "spot": 0.6}
    fresh["instance_types"]["g5.xlarge"]["vcpus"] = 8
    fresh["instance_types"]["g6.xlarge"] = {}
    assert drift(committed, fresh, 0.25) == [
        "g5.xlarge: vcpus 4 -> 8",
        "g5.xlarge us-west-2: on-demand 1.006 -> 1.1",
        "g5.xlarge us-west-2: spot 0.4 -> 0.6 (more than 25%)",
        "g6.xlarge: new in AWS's answer",
    ]


def test_the_document_is_written_deterministically():
    document = json.loads(catalog_refresh.CATALOG_PATH.read_text())
    assert dumps(document) == catalog_refresh.CATALOG_PATH.read_text()


@pytest.mark.parametrize("argv, message", [
    (["--regions", "us-east"], "--regions: 'us-east' is not an AWS region name"),
    (["--types", "g5xlarge"], "--types: 'g5xlarge' is not an instance type"),
    (["--families", "g5,G6"], "--families: ['G6'] is not a comma-separated list"),
    (["--types", "g5.xlarge", "--families", "g5"], "not allowed with argument"),
])
def test_bad_arguments_are_one_clear_error(argv, message, capsys):
    with pytest.raises(SystemExit):
        parser().parse_args(argv)
    assert message in capsys.readouterr().err


# ---- Pricing API through the Stubber ------------------------------------------------------------

def pricing_filters(instance_type: str, region: str) -> list[dict]:
    return [{"Type": "TERM_MATCH", "Field": f, "Value": v} for f, v in (
        ("instanceType", instance_type), ("regionCode", region), ("operatingSystem", "Linux"),
        ("tenancy", "Shared"), ("preInstalledSw", "NA"), ("capacitystatus", "Used"))]


@pytest.fixture
def stubbed_pricing(monkeypatch, aws):
    """A real Pricing client with a Stubber; EC2 stays on moto."""
    pricing = boto3.client("pricing", region_name="us-east-1")
    stubber = Stubber(pricing)
    real_client = catalog_refresh.client
    monkeypatch.setattr(catalog_refresh, "client", lambda service, region=None: pricing if service == "pricing" else real_client(service, region))
    with stubber:
        yield stubber
    stubber.assert_no_pending_responses()


def test_on_demand_prices_are_read_across_pages_with_the_documented_filters(stubbed_pricing, price_list_item):
    item = json.dumps(price_list_item)
    expected = {"ServiceCode": "AmazonEC2", "Filters": pricing_filters("g5.xlarge", "us-east-1")}
    stubbed_pricing.add_response("get_products", {"PriceList": [item], "FormatVersion": "aws_v1", "NextToken": "page-2"}, expected)
    stubbed_pricing.add_response("get_products", {"PriceList": [item], "FormatVersion": "aws_v1"}, {**expected, "NextToken": "page-2"})
    assert catalog_refresh.fetch_on_demand("g5.xlarge", "us-east-1") == 1.006


def test_refresh_end_to_end_writes_then_checks(stubbed_pricing, price_list_item, tmp_path, capsys):
    regions = ["us-east-1", "us-east-2"]
    for region in regions:
        stubbed_pricing.add_response("get_products", {"PriceList": [json.dumps(price_list_item)]},
                                     {"ServiceCode": "AmazonEC2", "Filters": pricing_filters("g5.xlarge", region)})
    output = tmp_path / "catalog.json"
    assert catalog_refresh.main(["--regions", *regions, "--types", "g5.xlarge", "--output", str(output)]) == 0
    document = json.loads(output.read_text())
    entry = document["instance_types"]["g5.xlarge"]
    assert (entry["gpus"], entry["gpu_model"], entry["gpu_memory_mib"], entry["vcpus"], entry["memory_mib"]) == (1, "A10G", 22888, 4, 16384)
    # moto's dummy spot price; the median is over every zone moto offers g5.xlarge in.
    assert entry["prices"]["us-east-1"]["spot"] == 0.00001 and entry["prices"]["us-east-1"]["spot_zones"] >= 3
    assert output.read_text() == dumps(document)

    # --check against the file just written: the same answers, no drift.
    for region in regions:
        stubbed_pricing.add_response("get_products", {"PriceList": [json.dumps(price_list_item)]},
                                     {"ServiceCode": "AmazonEC2", "Filters": pricing_filters("g5.xlarge", region)})
    assert catalog_refresh.main(["--regions", *regions, "--output", str(output), "--check"]) == 0
    assert "no drift" in capsys.readouterr().out

    # A changed on-demand price is drift: exit 1 with the difference.
    changed = json.loads(json.dumps(price_list_item))
    dimension = next(iter(next(iter(changed["terms"]["OnDemand"].values()))["priceDimensions"].values()))
    dimension["pricePerUnit"]["USD"] = "1.2120000000"
    for region in regions:
        stubbed_pricing.add_response("get_products", {"PriceList": [json.dumps(changed)]},
                                     {"ServiceCode": "AmazonEC2", "Filters": pricing_filters("g5.xlarge", region)})
    assert catalog_refresh.main(["--regions", *regions, "--output", str(output), "--check"]) == 1
    assert "g5.xlarge us-east-1: on-demand 1.006 -> 1.212" in capsys.readouterr().out


# ---- EC2 against moto ---------------------------------------------------------------------------

def test_committed_specs_agree_with_the_specs_moto_recorded_from_aws(aws):
    # An independent check of the transcription: moto ships DescribeInstanceTypes data recorded from
    # AWS. p3 is absent from moto's data (see the module docstring).
    catalog = load_catalog()
    names = [n for n in catalog.names() if not n.startswith("p3.")]
    specs = fetch_specs("us-east-1", names)
    for name in names:
        t = catalog.get(name)
        assert specs[name] == {"gpus": t.gpus, "gpu_model": t.gpu_model, "gpu_memory_mib": t.gpu_memory_mib,
                               "vcpus": t.vcpus, "memory_mib": t.memory_mib}, name


def test_families_expand_to_their_whole_gpu_types(aws):
    specs = fetch_specs("us-east-1", families=["g6e", "p5"])
    assert {"g6e.xlarge", "g6e.48xlarge", "p5.48xlarge"} <= set(specs)
    assert all(name.split(".")[0] in {"g6e", "p5"} for name in specs)


def test_a_type_without_a_whole_gpu_is_refused(aws):
    with pytest.raises(RefreshError, match=r"no whole-GPU type for \['m5.large'\]"):
        fetch_specs("us-east-1", ["g5.xlarge", "m5.large"])


@given(st.dictionaries(st.sampled_from(["a", "b", "c", "d", "e", "f"]), st.floats(0.0001, 100), min_size=1))
def test_the_spot_median_lies_between_the_cheapest_and_dearest_zone(zones):
    from lambdas.common.spot_prices import median_price
    assert min(zones.values()) - 1e-6 <= median_price(zones) <= max(zones.values()) + 1e-6
