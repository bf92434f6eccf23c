"""Job specs: validation names every bad key and value; expansion counts and covers exactly."""

from __future__ import annotations

import itertools
from datetime import datetime, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lambdas.common.catalog import load_catalog
from lambdas.jobs.spec import (BATCH_END_ENV, BATCH_START_ENV, SpecError, assign_ids, expand, expand_batches,
                               expand_sweep, is_job_id, new_submission_id, parse_batches, parse_memory, parse_spec,
                               spec_from_document)

REGIONS = ("us-east-1", "us-west-2")
GOOD = {"image": "ghcr.io/team/train:1.0", "command": ["python", "train.py"], "gpus": 1, "vcpus": 4,
        "memory_mib": 16384}


def parse(**changes):
    document = {**GOOD, **changes}
    return parse_spec({k: v for k, v in document.items() if v is not ...}, fleet_regions=REGIONS,
                      catalog=load_catalog(), default_max_attempts=3)


def test_good_spec_gets_defaults():
    spec = parse()
    assert (spec.gpus, spec.vcpus, spec.memory_mib, spec.max_attempts, spec.regions, spec.lifecycle) == (1, 4.0, 16384, 3, (), None)
    assert spec_from_document(spec.to_document()) == spec


@pytest.mark.parametrize("changes, fragment", [
    ({"image": ...}, "image=None"),
    ({"image": ""}, "image=''"),
    ({"gpus": 0}, "gpus=0: must be >= 1"),
    ({"gpus": -2}, "gpus=-2"),
    ({"gpus": 1.5}, "gpus=1.5: must be an integer"),
    ({"vcpus": 0}, "vcpus=0: must be > 0"),
    ({"memory_mib": -1}, "memory_mib=-1: must be > 0"),
    ({"gpus": 64}, "gpus=64: more GPUs than any catalog instance has"),
    ({"regions": ["eu-west-9"]}, "regions: 'eu-west-9' is not a region of this stack's fleets"),
    ({"lifecycle": "reserved"}, "lifecycle='reserved'"),
    ({"instance_type_pattern": "g5\\.("}, "instance_type_pattern='g5\\\\.(': not a regular expression"),
    ({"instance_type_pattern": "z9\\..*"}, "no catalog instance type matching"),
    ({"memory_mib": 10_000_000}, "no catalog instance type"),
    ({"max_attempts": 11}, "max_attempts=11: must be <= 10"),
    ({"max_attempts": 0}, "max_attempts=0"),
    ({"environment": {"MLFLEET_JOB_ID": "x"}}, "set by mlfleet"),
    ({"environment": {"A": 1}}, "environment A=1"),
    ({"gpu": 1}, "gpu=1: unknown key"),
])
def test_bad_spec_names_key_and_value(changes, fragment):
    with pytest.raises(SpecError) as error:
        parse(**changes)
    assert fragment in str(error.value)


def test_every_problem_is_reported_at_once():
    with pytest.raises(SpecError) as error:
        parse(image="", gpus=0, vcpus=-1, regions=["mars-1"])
    assert len(error.value.problems) == 4


def test_sweep_substitutes_command_and_environment():
    spec = parse(command=["python", "train.py", "--lr", "{lr}", "--bs={bs}", "${HOME}", "{{literal}}"],
                 environment={"TAG": "run-{lr}"})
    jobs = expand_sweep(spec, {"lr": ["0.1", "0.01"], "bs": ["32", "64"]})
    assert len(jobs) == 4
    assert jobs[0].command == ("python", "train.py", "--lr", "0.1", "--bs=32", "${HOME}", "{literal}")
    assert {(j.command[3], j.command[4], j.environment["TAG"]) for j in jobs} == {
        (lr, f"--bs={bs}", f"run-{lr}") for lr in ("0.1", "0.01") for bs in ("32", "64")}


def test_unknown_placeholder_is_an_error():
    with pytest.raises(SpecError, match=r"placeholder \{epochs\} has no value"):
        expand_sweep(parse(command=["train", "{lr}", "{epochs}"]), {"lr": ["1"]})


def test_plain_spec_is_one_job_and_not_rewritten():
    spec = parse(command=["echo", "{not-a-placeholder}", "{x}"])
    assert expand(spec) == [spec]


def test_batches_give_twenty_jobs_with_offsets():
    jobs = expand_batches(parse(command=["infer", "--start", "{start}", "--end", "{end}"]), "0:10000:500")
    assert len(jobs) == 20
    assert jobs[0].command[2:] == ("0", "--end", "500") and jobs[-1].command[2:] == ("9500", "--end", "10000")
    assert (jobs[3].environment[BATCH_START_ENV], jobs[3].environment[BATCH_END_ENV]) == ("1500", "2000")


@pytest.mark.parametrize("text", ["0:10", "a:b:c", "0:100:0", "0:100:-5", "100:100:10", "50:10:5", ""])
def test_bad_batch_ranges(text):
    with pytest.raises(SpecError, match="batches="):
        parse_batches(text)


def test_sweep_times_batches_and_the_submission_cap():
    assert len(expand(parse(), sweep={"lr": ["1", "2", "3"]}, batches="0:10:5")) == 6
    with pytest.raises(SpecError, match="more than 10000"):
        expand(parse(), sweep={"a": [str(i) for i in range(200)], "b": [str(i) for i in range(51)]})


@given(st.dictionaries(st.from_regex(r"[a-z]{1,6}", fullmatch=True),
                       st.lists(st.from_regex(r"[a-z0-9.]{1,4}", fullmatch=True), min_size=1, max_size=4),
                       min_size=1, max_size=3))
def test_sweep_count_is_the_product_of_list_lengths(params):
    spec = parse(command=["run", *[f"--{name}={{{name}}}" for name in params]])
    expected = 1
    for values in params.values():
        expected *= len(values)
    jobs = expand_sweep(spec, params)
    assert len(jobs) == expected
    for position, (name, values) in enumerate(params.items(), start=1):
        assert {j.command[position].split("=", 1)[1] for j in jobs} == set(values)
    assert len({j.command for j in jobs}) == len(set(itertools.product(*(set(v) for v in params.values()))))


@given(st.integers(-1000, 1000), st.integers(1, 3000), st.integers(1, 700))
def test_batches_cover_the_range_exactly_without_overlap(start, length, step):
    ranges = parse_batches(f"{start}:{start + length}:{step}")
    assert ranges[0][0] == start and ranges[-1][1] == start + length
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
    assert all(lo < hi <= lo + step for lo, hi in ranges)
    assert len(ranges) == -(-length // step)


def test_ids():
    submission = new_submission_id(datetime(2026, 11, 22, 19, 11, 3, tzinfo=timezone.utc), "0a1b2c")
    assert submission == "sub-20261122191103-0a1b2c"
    jobs = assign_ids(submission, [parse(), parse()])
    assert [j.job_id for j in jobs] == [f"{submission}-00000", f"{submission}-00001"] and is_job_id(jobs[1].job_id)
    assert len(jobs[1].job_id) <= 128  # StartTask startedBy limit


@pytest.mark.parametrize("text, mib", [("16GiB", 16384), ("512MiB", 512), ("2048", 2048), ("1.5G", 1536)])
def test_parse_memory(text, mib):
    assert parse_memory(text) == mib


@pytest.mark.parametrize("text", ["", "lots", "0.3MiB", "16TB"])
def test_parse_memory_refuses(text):
    with pytest.raises(SpecError, match="memory="):
        parse_memory(text)
