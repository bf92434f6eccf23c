from __future__ import annotations

import json
from pathlib import Path

import pytest

FIXTURES = Path(__file__).with_name("fixtures")


@pytest.fixture
def price_list_item() -> dict:
    """One GetProducts PriceList entry (decoded), see fixtures/README.md for where its shape comes from."""
    return json.loads((FIXTURES / "pricelist_g5_xlarge_us_east_1.json").read_text())
