from __future__ import annotations

import json
from pathlib import Path

import pytest
from moto import mock_aws

from lambdas.common.aws import reset_clients

FIXTURES = Path(__file__).with_name("fixtures")


@pytest.fixture(autouse=True)
def aws_credentials(monkeypatch):
    for key, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                       "AWS_SECURITY_TOKEN": "testing", "AWS_SESSION_TOKEN": "testing",
                       "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(key, value)


@pytest.fixture
def aws():
    with mock_aws():
        reset_clients()
        yield
    reset_clients()


@pytest.fixture
def price_list_item() -> dict:
    """One GetProducts PriceList entry (decoded), see fixtures/README.md for where its shape comes from."""
    return json.loads((FIXTURES / "pricelist_g5_xlarge_us_east_1.json").read_text())
