"""Test-wide options and fixtures. Topic folders (tests/reaper, tests/scheduler, ...) add their own."""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

# CI (.ci/run) draws the property tests' examples from a fixed seed, so that its verdict on a commit is the
# same every run. A local run draws fresh ones, as CI did when it found the rounding of the configuration
# bound (tests/benchmarks/test_benchmark_gpu_sharing.py); a failure prints its example, to be pinned with
# @example.
settings.register_profile("ci", derandomize=True, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-snapshots",
        action="store_true",
        default=False,
        help="rewrite tests/snapshots/*.json from the current program instead of comparing",
    )


@pytest.fixture
def update_snapshots(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-snapshots"))


@pytest.fixture(autouse=True)
def fake_aws_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    """No test may reach a real account: fake credentials everywhere, moto or not."""
    for key, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                       "AWS_SECURITY_TOKEN": "testing", "AWS_SESSION_TOKEN": "testing",
                       "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(key, value)


@pytest.fixture
def aws():
    """moto for the test's duration; cached boto3 clients are dropped on both sides."""
    from moto import mock_aws

    from lambdas.common.aws import reset_clients

    with mock_aws():
        reset_clients()
        yield
    reset_clients()
