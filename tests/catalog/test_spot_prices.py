"""live_spot_prices: the median over the region's zones of the price in effect now.

moto returns a dummy spot price (0.00001) with a 2006 timestamp for every zone a type is offered in,
so the moto test checks the reading (pagination, zones, types), and the Stubber test checks the
request and the arithmetic with real-looking answers.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import boto3
import pytest
from botocore.stub import Stubber
from hypothesis import given
from hypothesis import strategies as st

from lambdas.common import spot_prices
from lambdas.common.permissions import Permission
from lambdas.common.spot_prices import PERMISSIONS, availability_zone_of, latest_zone_prices, live_spot_prices

NOW = datetime(2026, 11, 22, 12, tzinfo=timezone.utc)


def record(zone: str, price: str, minutes_ago: int = 0, instance_type: str = "g5.xlarge") -> dict:
    return {"AvailabilityZone": zone, "InstanceType": instance_type, "ProductDescription": "Linux/UNIX",
            "SpotPrice": price, "Timestamp": NOW - timedelta(minutes=minutes_ago)}


def test_permissions_are_declared():
    assert PERMISSIONS == (Permission(actions=("ec2:DescribeSpotPriceHistory",), why=PERMISSIONS[0].why),)


@pytest.mark.parametrize("zone, regional", [
    ("us-east-1a", True), ("us-west-2d", True), ("us-west-2-lax-1a", False), ("us-east-1-atl-2a", False),
    ("us-east-2a", False),  # another region's zone
])
def test_only_the_regions_own_zones_count(zone, regional):
    assert availability_zone_of("us-east-1" if zone.startswith("us-east") else "us-west-2", zone) is regional


def test_the_latest_price_per_zone_wins_and_local_zones_are_left_out():
    history = [record("us-west-2a", "0.50", 60), record("us-west-2a", "0.40", 5), record("us-west-2b", "0.45"),
               record("us-west-2-lax-1a", "0.06")]
    assert latest_zone_prices(history, "us-west-2") == {"g5.xlarge": {"us-west-2a": 0.40, "us-west-2b": 0.45}}


@given(st.lists(st.tuples(st.sampled_from("abcdef"), st.integers(0, 10_000), st.integers(1, 10**6)), min_size=1))
def test_whatever_the_order_the_most_recent_record_of_each_zone_is_kept(entries):
    history = [record(f"us-east-1{zone}", f"{price / 10**4:.4f}", minutes) for zone, minutes, price in entries]
    latest = latest_zone_prices(history, "us-east-1")["g5.xlarge"]
    for zone in {z for z, _, _ in entries}:
        newest = min(m for z, m, _ in entries if z == zone)
        assert latest[f"us-east-1{zone}"] in {float(f"{p / 10**4:.4f}") for z, m, p in entries if z == zone and m == newest}


def test_request_and_median_through_the_stubber(monkeypatch):
    ec2 = boto3.client("ec2", region_name="us-west-2")
    monkeypatch.setattr(spot_prices, "client", lambda service, region=None: ec2)
    expected = {"InstanceTypes": ["g5.xlarge", "g6.xlarge"], "ProductDescriptions": ["Linux/UNIX"], "StartTime": NOW}
    with Stubber(ec2) as stubber:
        stubber.add_response("describe_spot_price_history", {"NextToken": "page-2", "SpotPriceHistory": [
            record("us-west-2a", "0.4857"), record("us-west-2b", "0.5134"), record("us-west-2-lax-1a", "0.0600")]}, expected)
        stubber.add_response("describe_spot_price_history", {"SpotPriceHistory": [record("us-west-2c", "0.4829")]},
                             {**expected, "NextToken": "page-2"})
        assert live_spot_prices("us-west-2", ["g6.xlarge", "g5.xlarge", "g5.xlarge"], now=NOW) == {"g5.xlarge": 0.4857}
        stubber.assert_no_pending_responses()


def test_live_prices_against_moto(aws):
    prices = live_spot_prices("us-east-1", ["g5.xlarge", "p5.48xlarge", "g6e.xlarge"])
    assert set(prices) == {"g5.xlarge", "p5.48xlarge", "g6e.xlarge"}
    assert all(p == 0.00001 for p in prices.values())  # moto's dummy price, not a market price
    zones = spot_prices.zone_spot_prices("us-east-1", ["g5.xlarge"])["g5.xlarge"]
    assert len(zones) >= 3 and all(availability_zone_of("us-east-1", z) for z in zones)
