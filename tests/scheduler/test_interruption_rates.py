"""Interruption rates as data (lambdas/common/interruption_rates.py) and their refresh from the Spot
Instance Advisor feed. The feed documents here are shaped like the published one (ranges, spot_advisor
.<region>.Linux.<type>.r); their values are made up for the test, not readings."""

from __future__ import annotations

import copy
import json
import math

import pytest

from lambdas.common.interruption_rates import (
    RATES_PATH, InterruptionRatesError, load_interruption_rates, parse_rates,
)
from lambdas.common.interruption_rates_refresh import readings_from_feed

DOCUMENT = json.loads(RATES_PATH.read_text())
RANGES = [{"index": 0, "label": "<5%", "dots": 0, "max": 5}, {"index": 1, "label": "5-10%", "dots": 1, "max": 11},
          {"index": 2, "label": "10-15%", "dots": 2, "max": 16}, {"index": 3, "label": "15-20%", "dots": 3, "max": 22},
          {"index": 4, "label": ">20%", "dots": 4, "max": 100}]


def test_the_committed_file_loads_and_says_where_its_figures_come_from():
    rates = load_interruption_rates()
    assert DOCUMENT["sources"]["aws-spot-instance-advisor"]["url"].startswith("https://aws.amazon.com/")
    assert [b.label for b in rates.bands] == ["<5%", "5-10%", "10-15%", "15-20%", ">20%"]
    # A monthly share p is the hazard -ln(1 - p) / 730 per hour.
    assert rates.bands[0].per_hour == pytest.approx(-math.log(0.95) / 730)
    # No reading committed yet: every pool takes the worst band.
    assert rates.per_hour("us-east-1", "g5.xlarge") == rates.bands[4].per_hour


@pytest.mark.parametrize(("change", "fragment"), [
    (lambda d: d.update(default_band=9), "default_band=9"),
    (lambda d: d["bands"][1].update(monthly_share=1.5), "bands[1]"),
    (lambda d: d.update(readings={"us-east-1": {"g5.xlarge": 7}}), "readings.us-east-1.g5.xlarge=7"),
    (lambda d: d.update(readings=[]), "readings=[]"),
])
def test_a_malformed_file_is_refused_naming_the_key(change, fragment):
    document = copy.deepcopy(DOCUMENT)
    change(document)
    with pytest.raises(InterruptionRatesError, match=fragment.replace("[", r"\[").replace("]", r"\]")):
        parse_rates(document)


def test_readings_come_from_the_feed_for_catalog_types_only():
    feed = {"ranges": RANGES, "spot_advisor": {"us-east-1": {"Linux": {"g5.xlarge": {"s": 70, "r": 1},
                                                                       "m5.large": {"s": 60, "r": 0}},
                                                             "Windows": {"g5.xlarge": {"s": 10, "r": 4}}}}}
    readings = readings_from_feed(feed, DOCUMENT["bands"], ["us-east-1", "us-west-2"], {"g5.xlarge"})
    assert readings == {"us-east-1": {"g5.xlarge": 1}}
    document = {**DOCUMENT, "readings": readings}
    assert parse_rates(document).per_hour("us-east-1", "g5.xlarge") == pytest.approx(-math.log(0.9) / 730)


def test_a_feed_whose_bands_changed_is_refused():
    feed = {"ranges": RANGES[:4], "spot_advisor": {}}
    with pytest.raises(InterruptionRatesError, match="not the file's bands"):
        readings_from_feed(feed, DOCUMENT["bands"], ["us-east-1"], {"g5.xlarge"})
