"""Job specs: validation names every bad key and value; expansion counts and covers exactly."""

from __future__ import annotations

import itertools
import json
import re
from dataclasses import replace
from datetime import datetime, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lambdas.common.catalog import load_catalog
from test_properties import json_value

from lambdas.jobs.spec import (BATCH_END_ENV, BATCH_START_ENV, DEFAULT_PRIORITY, KEYS, RegionPulls, SpecError, assign_ids,
                               closest_types, expand, expand_batches, expand_sweep, is_job_id, new_submission_id,
                               parse_batches, parse_memory, parse_spec, parse_sweep, spec_from_document)

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
    ({"image": ...}, "image: missing: the container image to run (--image REF"),
    ({"gpus": None}, "gpus: missing: the whole GPUs each job reserves (--gpus N"),
    ({"image": ""}, "image=''"),
    ({"gpus": 0}, "gpus=0: must be >= 1"),
    ({"gpus": -2}, "gpus=-2"),
    ({"gpus": 1.5}, "gpus=1.5: must be an integer"),
    ({"gpus": 0.5}, "gpus=0.5: must be a whole number of GPUs; for part of one GPU ask for its memory instead "
                    "(gpu_memory_mib: in the spec file, --gpu-memory 8GiB"),
    ({"vcpus": 0}, "vcpus=0: must be > 0"),
    ({"memory_mib": -1}, "memory_mib=-1: must be > 0"),
    ({"gpus": 64}, "gpus=64: more GPUs than any catalog instance has"),
    ({"regions": ["eu-west-9"]}, "regions: 'eu-west-9' is not a region of this stack's fleets"),
    ({"lifecycle": "reserved"}, "lifecycle='reserved'"),
    ({"instance_type_pattern": "g5\\.("}, "instance_type_pattern='g5\\\\.(': not a regular expression"),
    ({"instance_type_pattern": "z9\\..*"}, "instance_type_pattern='z9\\\\..*': matches no catalog instance type in "),
    ({"memory_mib": 10_000_000}, "no catalog instance type"),
    ({"max_attempts": 11}, "max_attempts=11: must be <= 10"),
    ({"max_attempts": 0}, "max_attempts=0"),
    ({"environment": {"MLFLEET_JOB_ID": "x"}}, "set by mlfleet"),
    ({"priority": 10}, "priority=10: must be <= 9"),
    ({"priority": -1}, "priority=-1: must be >= 0"),
    ({"priority": "high"}, "priority='high': must be an integer"),
    ({"priority": True}, "priority=True: must be an integer"),
    ({"team": "ML Platform"}, "team='ML Platform': must be a short name"),
    ({"environment": {"A": 1}}, "environment A=1"),
    ({"gpu": 1}, "gpu=1: unknown key (did you mean gpus?)"),
    ({"memroy_mib": 1}, "memroy_mib=1: unknown key (did you mean memory_mib?)"),
    ({"colour": "blue"}, "colour='blue': unknown key (known: image, command, environment"),
    ({"command": "python train.py --lr 0.1"},
     "command='python train.py --lr 0.1': must be a list of strings, one per argument: "
     'command: ["python", "train.py", "--lr", "0.1"]'),
])
def test_bad_spec_names_key_and_value(changes, fragment):
    with pytest.raises(SpecError) as error:
        parse(**changes)
    assert fragment in str(error.value)


def test_priority_and_team_are_kept_through_the_ledger_and_default_for_old_records():
    spec = parse(priority=9, team="vision")
    assert (spec.priority, spec.team) == (9, "vision")
    assert spec_from_document(spec.to_document()) == spec
    old = {k: v for k, v in parse().to_document().items() if k not in ("priority", "team")}
    assert (spec_from_document(old).priority, spec_from_document(old).team) == (DEFAULT_PRIORITY, None)
    assert parse().priority == DEFAULT_PRIORITY == 5


def parse_for_teams(teams, default_team=None, **changes):
    return parse_spec({**GOOD, **changes}, fleet_regions=REGIONS, catalog=load_catalog(), default_max_attempts=3,
                      teams=teams, default_team=default_team)


@pytest.mark.parametrize("teams, default_team, given, expected", [
    ((), None, None, None),  # no teams configured: any team name, or none
    ((), None, "anything", "anything"),
    (("nlp", "vision"), None, "vision", "vision"),
    (("nlp", "vision"), "nlp", None, "nlp"),  # the stack's default team is recorded on the job
    (("nlp", "vision"), "nlp", "vision", "vision"),
])
def test_the_team_is_one_of_the_stacks(teams, default_team, given, expected):
    changes = {} if given is None else {"team": given}
    assert parse_for_teams(teams, default_team, **changes).team == expected


@pytest.mark.parametrize("default_team, changes, fragment", [
    (None, {"team": "visoin"}, "team='visoin': not a team of this environment (nlp, vision); did you mean vision?"),
    (None, {"team": "audio"}, "team='audio': not a team of this environment (nlp, vision)"),
    (None, {}, "team: not given, and this environment shares its GPUs between teams (nlp, vision) with no default "
               "team: name yours with --team"),
])
def test_an_unknown_or_missing_team_is_refused_with_the_teams(default_team, changes, fragment):
    with pytest.raises(SpecError) as error:
        parse_for_teams(("nlp", "vision"), default_team, **changes)
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


@pytest.mark.parametrize("name", ["learning-rate", "1st", "", "lr rate"])
def test_a_sweep_parameter_that_is_no_name_gets_one_problem(name):
    """Regression: `--sweep learning-rate=...` with {learning-rate} in the command was also told, wrongly, that no
    {learning-rate} was in the command."""
    with pytest.raises(SpecError) as error:
        expand(parse(command=["train", f"--lr={{{name}}}"]), sweep={name: ["0.1", "0.01"]})
    assert error.value.problems == (f"sweep parameter {name!r}: must be a name like lr or batch_size",)


def test_a_batch_variable_the_spec_sets_itself_is_refused_with_batches_not_overwritten():
    """Regression: the spec's own MLFLEET_BATCH_START was replaced by each range's without a word."""
    spec = parse(command=["infer"], environment={BATCH_START_ENV: "7"})
    with pytest.raises(SpecError, match=re.escape(f"environment key '{BATCH_START_ENV}': set by --batches to each "
                                                  "range's start and end, cannot be given with --batches")):
        expand(spec, batches="0:10:5")
    with pytest.raises(SpecError, match=re.escape(f"secrets key '{BATCH_END_ENV}': set by --batches")):
        expand(replace(parse(command=["infer"]), secrets={BATCH_END_ENV: "/mlfleet/dev/x"}), batches="0:10:5")
    assert expand(spec) == [spec]  # without batches the name is the spec's own


@pytest.mark.parametrize("text", ["0:10", "a:b:c", "0:100:0", "0:100:-5", "100:100:10", "50:10:5", ""])
def test_bad_batch_ranges(text):
    with pytest.raises(SpecError, match="batches="):
        parse_batches(text)


def test_batches_past_the_submission_cap_are_refused_before_their_ranges_are_listed():
    """Regression: 0:1000000000000:1 listed a trillion ranges (memory, minutes) before expand() counted them."""
    assert len(parse_batches("0:10000:1")) == 10_000
    with pytest.raises(SpecError, match=re.escape("batches='0:10001:1': 10,001 ranges, more than 10,000 jobs")):
        parse_batches("0:10001:1")
    with pytest.raises(SpecError, match="1,000,000,000,000 ranges"):
        parse_batches("0:1000000000000:1")


def test_sweep_times_batches_and_the_submission_cap():
    assert len(expand(parse(command=["run", "{lr}"]), sweep={"lr": ["1", "2", "3"]}, batches="0:10:5")) == 6
    # Regression (found by the spec-file property): the problem named neither the sweep nor the batches
    # ('submission expands into 20000 jobs, more than 10000 per submission').
    with pytest.raises(SpecError) as refused:
        expand(parse(command=["run", "{a}", "{b}"]), sweep={"a": [str(i) for i in range(200)],
                                                            "b": [str(i) for i in range(51)]})
    assert refused.value.problems == (
        "sweep: 200 values of a x 51 values of b make 10,200 jobs, more than 10,000 per submission",)
    with pytest.raises(SpecError) as refused:
        expand(parse(command=["run", "{s}"]), sweep={"s": [str(i) for i in range(200)]}, batches="0:100:1")
    assert refused.value.problems == (
        "sweep and batches: 200 values of s x 100 ranges of 0:100:1 make 20,000 jobs, more than 10,000 per submission",)


@given(st.dictionaries(st.from_regex(r"[a-z]{1,6}", fullmatch=True),
                       st.lists(st.from_regex(r"[a-z0-9.]{1,4}", fullmatch=True), min_size=1, max_size=4,
                                unique=True),
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


# --- image references (distribution/reference's grammar) ------------------------------------------

@pytest.mark.parametrize("image", [
    "ubuntu", "ghcr.io/team/train:3", "nvcr.io/nvidia/pytorch:24.08-py3", "localhost:5000/train",
    "123456789012.dkr.ecr.us-east-1.amazonaws.com/team/train@sha256:" + "a" * 64, "[::1]:5000/a/b:c",
    "GHCR.IO/team/train:v1.2_x", "a/b__c/d-e.f:" + "t" * 128,
])
def test_valid_image_references(image):
    assert parse(image=image).image == image


@pytest.mark.parametrize("image, fragment", [
    ("ghcr.io/Team/train:3", "must be lower case"),
    ("Ubuntu", "must be lower case"),
    ("train:", "not an image reference"),
    ("a b", "not an image reference"),
    ("ghcr.io//train", "not an image reference"),
    ("-train", "not an image reference"),
    ("train:" + "t" * 129, "not an image reference"),
    ("train@sha256:abc", "not an image reference"),  # a digest has at least 32 hex digits
    ("a" * 256, "more than 255"),
    (7, "image=7"),
])
def test_invalid_image_references_are_refused(image, fragment):
    with pytest.raises(SpecError, match=re.escape(fragment)):
        parse(image=image)


# --- sizing errors name what comes closest --------------------------------------------------------

DEV_TYPES = {"us-east-1": ["g6.xlarge", "g5.xlarge", "g4dn.xlarge", "g6.2xlarge", "g5.2xlarge"]}


def test_a_request_just_too_big_names_the_closest_types_and_the_request_that_fits():
    with pytest.raises(SpecError) as error:
        parse_spec({**GOOD, "vcpus": 8, "memory_mib": 30 * 1024}, fleet_regions=("us-east-1",), catalog=load_catalog(),
                   default_max_attempts=3, fleet_types=DEV_TYPES)
    (problem,) = error.value.problems
    closest, second = problem.split("closest:\n")[1].splitlines()
    assert closest.strip().startswith("g5.2xlarge, g6.2xlarge schedule 1 GPU, 8 vCPUs, 30,433 MiB (29.7 GiB)")
    assert "memory_mib is 287 MiB over; ask for memory_mib <= 30433 (e.g. --memory 29GiB)" in closest
    assert second.strip().startswith("g4dn.xlarge, g5.xlarge, g6.xlarge schedule 1 GPU, 4 vCPUs")
    # ... and what it suggests is accepted
    assert parse_spec({**GOOD, "vcpus": 8, "memory_mib": 29 * 1024}, fleet_regions=("us-east-1",),
                      catalog=load_catalog(), default_max_attempts=3, fleet_types=DEV_TYPES).memory_mib == 29696


def test_closest_types_rank_by_the_tightest_dimension():
    catalog = load_catalog()
    types = [catalog.get(n) for n in ("g5.xlarge", "g5.12xlarge", "g5.2xlarge")]
    text = closest_types(types, gpus=1, vcpus=10, memory_mib=10_000)
    lines = text.split("closest:\n")[1].splitlines()
    assert lines[0].strip().startswith("g5.2xlarge") and "vcpus is 2 over" in lines[0] and "--vcpus 8" in lines[0]
    assert lines[1].strip().startswith("g5.xlarge")
    assert not any("g5.12xlarge" in line for line in lines)  # it fits: never "closest"
    assert closest_types([], 1, 1, 1) == ""


def test_too_many_gpus_names_the_largest_types():
    with pytest.raises(SpecError, match=r"gpus=2: more GPUs than any instance type of this stack's fleets has "
                                        r"\(largest: 1, g4dn.xlarge, g5.2xlarge"):
        parse_spec({**GOOD, "gpus": 2}, fleet_regions=("us-east-1",), catalog=load_catalog(), default_max_attempts=3,
                   fleet_types=DEV_TYPES)


# --- sweeps: every parameter used, every value once; spec files -----------------------------------

def test_a_sweep_parameter_the_command_never_uses_is_refused():
    with pytest.raises(SpecError) as error:
        expand(parse(command=["train", "--lr", "{lr}"]), sweep={"lr": ["1", "2"], "seed": ["1", "2", "3"]})
    assert error.value.problems == (
        "sweep parameter seed: no {seed} in the command or environment, so its 3 values would queue identical "
        "jobs; put {seed} where the value belongs, or drop the parameter",)


def test_a_sweep_parameter_used_in_the_environment_only_is_accepted():
    jobs = expand(parse(command=["train"], environment={"SEED": "{seed}"}), sweep={"seed": ["1", "2"]})
    assert [j.environment["SEED"] for j in jobs] == ["1", "2"]


def test_a_literal_brace_or_a_shell_variable_does_not_count_as_using_a_parameter():
    with pytest.raises(SpecError, match="no {lr}"):
        expand(parse(command=["echo", "{{lr}}", "${lr}"]), sweep={"lr": ["1", "2"]})


def test_a_sweep_value_given_twice_is_refused():
    with pytest.raises(SpecError, match=r"sweep parameter lr: '0\.1' given twice"):
        expand(parse(command=["train", "{lr}"]), sweep={"lr": ["0.1", "0.01", "0.1"]})


def test_a_sweep_parameter_yaml_reads_as_a_boolean_is_refused_not_merged_into_another():
    """Regression (found writing the spec-file property): `sweep: {on: [1, 2], "True": [3]}` became one parameter
    "True" with the values [3], the 1 and 2 dropped without a word."""
    with pytest.raises(SpecError) as refused:
        parse_sweep({True: [1, 2], "True": [3], None: [4]})
    assert refused.value.problems == (
        "sweep.True: not a parameter name (YAML reads yes, no, on, off, true, false and null as values: quote it)",
        "sweep.None: not a parameter name (YAML reads yes, no, on, off, true, false and null as values: quote it)")


def test_a_sweep_parameter_or_variable_that_is_no_name_is_named_on_one_line():
    """Regression: a name with a line break was printed as it is ('sweep parameter a\nb: has no values',
    'environment \n=1: value must be a string'), breaking the problem over two lines."""
    with pytest.raises(SpecError) as refused:
        expand(parse(command=["train"]), sweep={"a\nb": []})
    assert refused.value.problems == ("sweep parameter 'a\\nb': must be a name like lr or batch_size",
                                      "sweep parameter 'a\\nb': has no values")
    with pytest.raises(SpecError) as refused:
        parse(environment={"\n": 1})
    assert refused.value.problems == ("environment key '\\n': not a valid variable name",)


def test_a_spec_file_sweep_becomes_strings():
    assert parse_sweep({"lr": [0.1, 0.01], "model": ["a", "b"], "seed": 7}) == {
        "lr": ["0.1", "0.01"], "model": ["a", "b"], "seed": ["7"]}


@pytest.mark.parametrize("value, fragment", [
    ([1, 2], "must be a mapping"),
    ({"flag": [True, False]}, "sweep.flag=[True, False]: must be a list of strings or numbers (quote"),
    ({"x": [{"a": 1}]}, "sweep.x"),
    # Regression: the name as it was, its line break splitting the message ('sweep.\n=None').
    ({"\n": None}, "sweep.'\\n'=None: must be a list"),
])
def test_a_spec_file_sweep_that_is_not_lists_of_values_is_refused(value, fragment):
    with pytest.raises(SpecError, match=re.escape(fragment)):
        parse_sweep(value)


def test_sweep_is_a_submission_key_not_a_job_key():
    assert parse(sweep={"lr": [1]}) == parse()  # parse_spec leaves it to the caller


# --- retry rules, team, notify --------------------------------------------------------------------

def test_retry_rules_team_and_notify_are_kept_and_read_back():
    with pytest.raises(SpecError, match="no Slack channel"):  # the environment offers no channel
        parse(notify=["slack"])
    spec = parse_spec({**GOOD, "retry_on_exit_codes": [137, 143], "team": "ml-platform",
                       "notify": ["ana@example.com", "slack"]}, fleet_regions=REGIONS, catalog=load_catalog(),
                      default_max_attempts=3, notify_channels=("email", "slack"))
    assert (spec.retry_on_exit_codes, spec.team, spec.notify) == ((137, 143), "ml-platform", ("ana@example.com", "slack"))
    assert spec_from_document(spec.to_document()) == spec


@pytest.mark.parametrize("changes, fragment", [
    ({"retry_on_exit_codes": 137}, "retry_on_exit_codes=137: must be a list of exit codes"),
    ({"retry_on_exit_codes": [0, 256]}, "0, 256 not an exit code a failed run returns (1-255; 0 is success)"),
    ({"retry_on_exit_codes": [137, 137]}, "137 given twice"),
    ({"retry_on_exit_codes": ["137"]}, "must be a list of exit codes"),
    ({"retry_on_exit_codes": [True]}, "must be a list of exit codes"),
    ({"retry_on_exit_codes": [137], "max_attempts": 1}, "max_attempts is 1, so no run is ever retried"),
    ({"team": "ML Platform"}, "team='ML Platform': must be a short name"),
    ({"team": "a" * 31}, "must be a short name"),
    ({"notify": "ana@example.com"}, "must be a list of e-mail addresses"),
    ({"notify": ["ana"]}, "'ana' is neither an e-mail address nor 'slack'"),
    ({"notify": ["slack"]}, "this environment has no Slack channel"),
    ({"notify": ["a@example.com", "a@example.com"]}, "'a@example.com' given twice"),
])
def test_bad_retry_rules_team_and_notify_are_refused(changes, fragment):
    with pytest.raises(SpecError, match=re.escape(fragment)):
        parse_spec({**GOOD, **changes}, fleet_regions=REGIONS, catalog=load_catalog(), default_max_attempts=3,
                   notify_channels=("email",))


# --- images every region can pull -----------------------------------------------------------------

CACHE = "123456789012.dkr.ecr.{region}.amazonaws.com"
CLOSED = {r: RegionPulls(internet_egress=False, cache_registry=CACHE.format(region=r), cache_prefix="mlfleet/prod")
          for r in REGIONS}


def parse_in(pulls, **changes):
    return parse_spec({**GOOD, **changes}, fleet_regions=REGIONS, catalog=load_catalog(), default_max_attempts=3,
                      pulls=pulls)


def test_ecr_public_images_are_pulled_through_each_regions_cache():
    spec = parse_in(CLOSED, image="public.ecr.aws/nvidia/cuda:12.6.3-base-ubuntu24.04")
    assert spec.images == {r: f"{CACHE.format(region=r)}/mlfleet/prod/nvidia/cuda:12.6.3-base-ubuntu24.04"
                           for r in REGIONS}
    assert spec.image_for("us-west-2").startswith("123456789012.dkr.ecr.us-west-2")
    assert spec.image_for("eu-west-1") == spec.image  # a region without a cache pulls it as given


def test_an_image_a_region_without_egress_cannot_pull_is_refused_with_the_fixes():
    pulls = {**CLOSED, "us-east-1": RegionPulls(internet_egress=True)}
    with pytest.raises(SpecError) as error:
        parse_in(pulls, image="ghcr.io/team/train:3")
    assert error.value.problems == (
        "image='ghcr.io/team/train:3': us-west-2 cannot pull from ghcr.io (no internet egress there); use an ECR "
        "Public image (public.ecr.aws/..., pulled through each region's ECR cache) or an image pushed to "
        "us-west-2's own ECR (<account>.dkr.ecr.us-west-2.amazonaws.com/...) or regions the image can be pulled in "
        "(--regions us-east-1)",)
    # the fixes it names are accepted
    assert parse_in(pulls, image="ghcr.io/team/train:3", regions=["us-east-1"]).images == {}
    assert parse_in(pulls, image=CACHE.format(region="us-west-2") + "/team/train:3", regions=["us-west-2"]).images == {}


def test_docker_hub_and_another_regions_ecr_are_unreachable_without_egress():
    with pytest.raises(SpecError, match="us-east-1, us-west-2 cannot pull from Docker Hub"):
        parse_in(CLOSED, image="nvidia/cuda:12")
    with pytest.raises(SpecError, match="us-west-2 cannot pull from 123456789012.dkr.ecr.us-east-1"):
        parse_in(CLOSED, image=CACHE.format(region="us-east-1") + "/team/train:3")


def test_ecr_public_without_a_cache_is_unreachable_without_egress():
    with pytest.raises(SpecError, match="cannot pull from public.ecr.aws"):
        parse_in({r: RegionPulls(internet_egress=False) for r in REGIONS}, image="public.ecr.aws/a/b:1")


# --- any document: a spec, or one SpecError naming keys ---------------------------------------------------

@pytest.mark.parametrize("changes, fragment", [
    # Found by the property below; each raised OverflowError or RecursionError, or was accepted.
    ({"vcpus": 10**400}, "vcpus=1000"),
    ({"gpus": 10**400}, "gpus=1000"),
    ({"memory_mib": 10**400}, "memory_mib=1000"),
    ({"vcpus": float("nan")}, "vcpus=nan: must be a finite number"),
    ({"expected_runtime_s": float("nan")}, "expected_runtime_s=nan: must be a finite number"),
    ({"instance_type_pattern": "g5{99999999999}"}, "instance_type_pattern='g5{99999999999}': not a regular expression"),
    # Found by the spec-file property: accepted, then boto3 raised decimal.Underflow writing it to the ledger.
    ({"vcpus": 1e-300}, "vcpus=1e-300: too small (the ledger stores numbers from 1e-130)"),
    ({"expected_runtime_s": 5e-324}, "expected_runtime_s=5e-324: too small"),
    ({"instance_type_pattern": "(" * 5000 + ")" * 5000}, "not a regular expression"),
])
def test_numbers_and_patterns_python_cannot_hold_are_refused_by_key(changes, fragment):
    with pytest.raises(SpecError, match=re.escape(fragment)):
        parse(**changes)


def test_a_huge_value_is_shown_by_its_beginning_and_end_not_echoed_whole():
    """Regression (found by the spec-file property): a spec file's 240 KB value was echoed whole, the key and
    what is wrong with it 240 KB apart on one line of the error."""
    with pytest.raises(SpecError) as refused:
        parse(lifecycle="ab" * 120_000)
    (problem,) = refused.value.problems
    assert problem.startswith("lifecycle='abab") and problem.endswith("abab': must be one of spot, on-demand")
    assert " ... (239,044 characters left out) ... " in problem and len(problem) < 1100


@pytest.mark.parametrize("regions", [[["us-east-1"]], [{}], ["eu-west-9"]])
def test_a_region_that_is_not_a_name_is_refused_by_key_against_the_stacks_fleets(regions):
    """Regression: `regions: [[us-east-1]]` (YAML nesting) raised TypeError (unhashable) where the stack's fleet
    types and pulls are looked up by region, as the CLI always does; a bad region also said "gpus=1: more GPUs
    than any instance type ... (largest: 0, none)"."""
    with pytest.raises(SpecError) as error:
        parse_spec({**GOOD, "regions": regions}, fleet_regions=REGIONS, catalog=load_catalog(), default_max_attempts=3,
                   fleet_types={r: ["g5.2xlarge"] for r in REGIONS}, pulls={r: RegionPulls(True) for r in REGIONS})
    assert error.value.problems == (f"regions: {regions[0]!r} is not a region of this stack's fleets (us-east-1, "
                                    "us-west-2)",)


SPECIAL = st.sampled_from([float("nan"), float("inf"), -float("inf"), 10**400, -(10**400), 1e308, 2**63, 0.5, -0.0,
                           "", "(", "g5{99999999999}", "(" * 3000, "\x00", "slack", "spot"])
spec_values = st.one_of(SPECIAL, json_value, st.lists(st.one_of(SPECIAL, json_value), max_size=3),
                        st.dictionaries(st.one_of(st.text(max_size=8), st.integers(), st.none()),
                                        st.one_of(SPECIAL, json_value), max_size=3))
spec_documents = st.dictionaries(st.one_of(st.sampled_from([*KEYS, "sweep"]), st.text(max_size=8)), spec_values,
                                 max_size=5).map(lambda changes: {**GOOD, **changes})


# What the CLI passes for a deployed stack: its fleets' types and how each region pulls images.
STACK = {"fleet_types": {"us-east-1": ["g5.xlarge", "g5.12xlarge"], "us-west-2": ["g6.xlarge"]},
         "pulls": {"us-east-1": RegionPulls(internet_egress=False), "us-west-2": RegionPulls(internet_egress=True)}}


def names_a_key(problem: str, document) -> bool:
    """The problem begins with a known key, or with a key of the document as it shows (quoted when not plain)."""
    return re.split(r"[=:, ]", problem, maxsplit=1)[0] in KEYS or any(
        problem.startswith(f"{key}=") or problem.startswith(f"{key!r}=") for key in document)


@settings(max_examples=300, deadline=None)
@given(document=spec_documents, teams=st.sampled_from([(), ("nlp", "vision")]),
       environment=st.sampled_from([None, "dev"]), stack=st.booleans())
def test_any_document_is_a_spec_or_one_spec_error_naming_its_keys(document, teams, environment, stack):
    """Whatever a spec file or a caller holds (wrong types, NaN, numbers past float, nested junk, regexes
    sre cannot compile): parse_spec returns a spec the ledger stores and reads back, or raises SpecError
    whose every problem begins with the key it is about; never another exception."""
    try:
        spec = parse_spec(document, fleet_regions=REGIONS, catalog=load_catalog(), default_max_attempts=3,
                          teams=teams, environment=environment, notify_channels=("email", "slack"),
                          **(STACK if stack else {}))
    except SpecError as error:
        assert error.problems and all(names_a_key(p, document) for p in error.problems), error.problems
        return
    json.dumps(spec.to_document(), allow_nan=False)  # DynamoDB stores no NaN or Infinity
    assert spec_from_document(spec.to_document()) == spec


@pytest.mark.parametrize("key", ["", " ", "gpus\n", 7], ids=["empty", "space", "newline", "number"])
def test_an_unknown_key_that_does_not_show_is_quoted(key):
    with pytest.raises(SpecError) as error:
        parse(**{key: 1}) if isinstance(key, str) else parse_spec(
            {**GOOD, key: 1}, fleet_regions=REGIONS, catalog=load_catalog(), default_max_attempts=3)
    assert f"{key!r}=1: unknown key" in str(error.value)
