"""What a job spec says about checkpoints, and what every attempt's overrides carry."""

from __future__ import annotations

import pytest

from lambdas.common.catalog import load_catalog
from lambdas.jobs import ledger as L
from lambdas.jobs.spec import SpecError, assign_ids, parse_spec, spec_from_document
from lambdas.scheduler.actions import overrides

GOOD = {"image": "ghcr.io/team/train:1.0", "command": ["python", "train.py"], "gpus": 1, "vcpus": 4,
        "memory_mib": 16384}
URI = "s3://mlfleet-dev-123456789012-us-east-1-an/jobs/sub-20261122120000-abcdef-00000/"


def parse(**changes):
    return parse_spec({**GOOD, **changes}, fleet_regions=("us-east-1",), catalog=load_catalog(), default_max_attempts=3)


def test_the_interval_is_optional_and_survives_the_ledger():
    assert parse().checkpoint_interval_minutes is None
    assert "checkpoint_interval_minutes" not in parse().to_document()  # records of older jobs look the same
    spec = parse(checkpoint_interval_minutes=30)
    (job,) = assign_ids("sub-20261122120000-abcdef", [spec])
    assert spec_from_document(spec.to_document()) == spec
    assert L.decode(L.encode(L.new_record(job, 0.0))).spec.checkpoint_interval_minutes == 30


@pytest.mark.parametrize(("value", "fragment"), [
    (0, "checkpoint_interval_minutes=0: must be >= 1"),
    (1441, "checkpoint_interval_minutes=1441: must be <= 1440"),
    (2.5, "checkpoint_interval_minutes=2.5: must be an integer"),
    ("30", "checkpoint_interval_minutes='30': must be an integer"),
    (True, "checkpoint_interval_minutes=True: must be an integer"),
])
def test_a_bad_interval_is_named_with_its_value(value, fragment):
    with pytest.raises(SpecError) as refused:
        parse(checkpoint_interval_minutes=value)
    assert any(fragment in problem for problem in refused.value.problems), refused.value.problems


@pytest.mark.parametrize("name", ["MLFLEET_CHECKPOINT_URI", "MLFLEET_CHECKPOINT_INTERVAL_MINUTES"])
def test_a_spec_cannot_set_the_checkpoint_variables(name):
    with pytest.raises(SpecError, match=f"environment key '{name}': set by mlfleet"):
        parse(environment={name: "s3://elsewhere/"})


@pytest.mark.parametrize(("interval", "expected"), [(None, {}), (20, {"MLFLEET_CHECKPOINT_INTERVAL_MINUTES": "20"})])
def test_every_attempt_gets_the_location_and_the_declared_interval(interval, expected):
    (job,) = assign_ids("sub-20261122120000-abcdef", [parse(checkpoint_interval_minutes=interval,
                                                             environment={"LR": "0.1"})])
    record = L.new_record(job, 0.0)
    for attempt in (1, 2):
        (override,) = overrides(record, "job", attempt, URI)["containerOverrides"]
        assert {v["name"]: v["value"] for v in override["environment"]} == {
            "LR": "0.1", "MLFLEET_JOB_ID": job.job_id, "MLFLEET_ATTEMPT": str(attempt), "MLFLEET_CHECKPOINT_URI": URI,
            **expected}
