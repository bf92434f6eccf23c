"""Test-wide options and fixtures. Topic folders (tests/reaper, tests/scheduler, ...) add their own."""

from __future__ import annotations

import gc
import os

import botocore.loaders
import pytest
from hypothesis import settings

# CI (.ci/run) draws the property tests' examples from a fixed seed, so that its verdict on a commit is the
# same every run. A local run draws fresh ones, as CI did when it found the rounding of the configuration
# bound (tests/benchmarks/test_benchmark_gpu_sharing.py); a failure prints its example, to be pinned with
# @example. Without the example database: examples a local run saved in .hypothesis/ would otherwise be
# replayed first (hypothesis/core.py, run_engine keys the database by the test even when derandomized), so
# the verdict would depend on the tree's history.
settings.register_profile("ci", derandomize=True, print_blob=True, database=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


# The suite's processes collect garbage less often: a young collection once 10,000 more container objects are alive
# than at the last one, not 700. Their heaps are large and grow through the run (moto's state and parsed models, the
# fault matrices' worlds, hypothesis's caches, Pulumi renderings), and at Python's default thresholds (700, 10, 10)
# the collector took 95 s of the CPU of the suite's tests, mostly in full collections (measured with gc.callbacks on
# both workers); at these, 42 s, and the suite took 247 s instead of 302 s (run back to back). (50,000, 20, 20) and
# (100,000, 5, 10) took 41 s and 48 s. Memory is not short (24 GiB), and nothing in the suite waits on the collector.
GC_THRESHOLDS = (10_000, 10, 10)


def pytest_configure(config: pytest.Config) -> None:
    gc.set_threshold(*GC_THRESHOLDS)


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


@pytest.fixture(autouse=True, scope="session")
def parsed_models_once():
    """Parse each botocore model and data file once per test session. moto gives every `mock_aws()` a new
    default boto3 session and the functions make a new session per moto context (reset_clients), and each
    new session parses the service models again (the EC2 model alone is megabytes of JSON): most of a moto
    test's time. Test-wide since the reaper's, the removal protocol's and the budget guard's moto tests make
    clients the same way (it began in tests/jobs). A loader already shares each parsed model among its
    clients (botocore's instance_cache), so sharing it among loaders of one kind changes nothing a client sees.
    `load_data_with_path` is the one cached for data files: `load_data` reads through it, and each new
    session's endpoint resolver calls it directly for endpoints.json (botocore/session.py,
    create_default_resolver), which was parsed again for every session, a third of the mlfleet command's
    tests' time. tests/moto_shortcuts.py keeps each service's client class and model the same way.
    Shared only among loaders of one kind (class, search paths, extras): a loader merges its extras into the
    model it loaded, in place (botocore/loaders.py, load_service_model), and moto's loader merges moto's
    (moto/core/loaders.py: S3's PostObject and CORS preflight operations, among others), which must not reach
    the clients botocore makes."""
    cache: dict = {}
    original_model = botocore.loaders.Loader.load_service_model
    original_data = botocore.loaders.Loader.load_data_with_path

    def kind(loader) -> tuple:
        return type(loader), tuple(loader.search_paths), tuple(loader.extras_types)

    def load_service_model(self, *args, **kwargs):
        key = ("model", kind(self), args, tuple(sorted(kwargs.items())))
        if key not in cache:
            cache[key] = original_model(self, *args, **kwargs)
        return cache[key]

    def load_data_with_path(self, name):
        key = ("data", kind(self), name)
        if key not in cache:
            cache[key] = original_data(self, name)
        return cache[key]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(botocore.loaders.Loader, "load_service_model", load_service_model)
        patch.setattr(botocore.loaders.Loader, "load_data_with_path", load_data_with_path)
        yield


@pytest.fixture(autouse=True, scope="session")
def moto_shortcuts():
    """moto writes DynamoDB's item values as they are, works out the names it looks a member up under once,
    and finds an action's method without listing its class; botocore makes each service's client class and
    model once (tests/moto_shortcuts.py, which says what each saves)."""
    import botocore.client
    import moto.core.responses
    from moto.core.serialize import AttributePicker, BaseJSONSerializer
    from moto_shortcuts import FunctionNames, create_client_class, load_service_model, pick, serialize_structure

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(botocore.client.ClientCreator, "_create_client_class", create_client_class)
        patch.setattr(botocore.client.ClientCreator, "_load_service_model", load_service_model)
        patch.setattr(BaseJSONSerializer, "_serialize_type_structure", serialize_structure)
        patch.setattr(AttributePicker, "__call__", pick)
        patch.setattr(moto.core.responses, "method_names_from_class", FunctionNames)
        yield


@pytest.fixture(autouse=True, scope="session")
def pulumi_without_stack_traces():
    """Resources are declared without the stack trace the Pulumi SDK sends the engine, which the mocks never read
    (tests/pulumi_harness.py, without_stack_traces, says what it saves)."""
    from pulumi_harness import without_stack_traces

    with without_stack_traces():
        yield


@pytest.fixture
def aws():
    """moto for the test's duration; cached boto3 clients are dropped on both sides."""
    from moto import mock_aws

    from lambdas.common.aws import reset_clients

    with mock_aws():
        reset_clients()
        yield
    reset_clients()


@pytest.fixture(autouse=True)
def forget_stopped_tasks():
    """The functions remember tasks seen stopped while their Lambda is warm (common.aws.still_stopping); a test's
    moto world is a new account, and one restored from a copy repeats its task ARNs."""
    from lambdas.common.aws import forget_stopped_tasks

    forget_stopped_tasks()
    yield
    forget_stopped_tasks()
