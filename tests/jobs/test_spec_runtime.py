"""The optional runtime estimate of a job spec (`expected_runtime_s`): validated, stored, read back."""

from __future__ import annotations

import pytest

from lambdas.common.catalog import load_catalog
from lambdas.jobs.spec import MAX_EXPECTED_RUNTIME_S, SpecError, parse_spec, spec_from_document

GOOD = {"image": "ghcr.io/team/train:1.0", "gpus": 1, "vcpus": 4, "memory_mib": 16384}


def parse(**changes):
    return parse_spec({**GOOD, **changes}, fleet_regions=("us-east-1",), catalog=load_catalog(), default_max_attempts=3)


def test_an_estimate_is_kept_and_survives_the_ledger():
    spec = parse(expected_runtime_s=5400)
    assert spec.expected_runtime_s == 5400.0
    assert spec_from_document(spec.to_document()) == spec
    assert parse().expected_runtime_s is None and "expected_runtime_s" not in parse().to_document()


@pytest.mark.parametrize(("value", "fragment"), [
    (0, "expected_runtime_s=0: must be > 0"),
    (-60, "expected_runtime_s=-60: must be > 0"),
    ("1h", "expected_runtime_s='1h': must be a number"),
    (True, "expected_runtime_s=True: must be a number"),
    (MAX_EXPECTED_RUNTIME_S + 1, f"must be <= {MAX_EXPECTED_RUNTIME_S}"),
])
def test_a_bad_estimate_is_one_clear_error_naming_the_key_and_value(value, fragment):
    with pytest.raises(SpecError) as error:
        parse(expected_runtime_s=value)
    assert len(error.value.problems) == 1 and fragment in error.value.problems[0]
