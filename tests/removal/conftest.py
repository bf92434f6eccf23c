"""`fleet_aws`: moto for one test, fast (tests/removal/world.py)."""

import pytest
from removal.world import fleet_moto


@pytest.fixture
def fleet_aws(monkeypatch):
    with fleet_moto(monkeypatch):
        yield
