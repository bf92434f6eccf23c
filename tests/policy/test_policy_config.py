"""scripts/policy_config.py: the policy pack's config CI passes for a stack, derived from its stack file."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from cli_config import pack_config, policy_config, schema_problems, stack_pack_config
from pulumi_harness import ROOT, STACKS, stack_file_config

import pack
from components.config import parse_stack_config

SCRIPT = ROOT / "scripts" / "policy_config.py"
POLICIES = {p.name: p for p in pack.POLICIES}


@pytest.mark.parametrize("stack", STACKS)
def test_every_policy_and_property_it_sets_is_the_packs_and_valid_for_the_cli(stack):
    """The CLI validates a configured property against its policy's schema, but a policy name the pack does not
    have is ignored without a word (pulumi/pulumi pkg/resource/analyzer/config.go): a misspelt name here would
    leave the defaults in force."""
    derived = stack_pack_config(stack)
    for name, properties in derived.items():
        assert name in POLICIES, f"the pack has no policy {name!r}"
        schema = POLICIES[name].config_schema
        assert schema is not None and set(properties) <= set(schema.properties), (name, properties)
        assert schema_problems(POLICIES[name], policy_config(POLICIES[name], derived)) == []


def test_each_fleets_cap_the_largest_as_the_ceiling_and_the_percents_the_stacks():
    values = {**stack_file_config("prod"), "mlfleet:budgetAlertPercents": "[10, 50, 100, 120]"}
    derived = pack_config(parse_stack_config(values, "prod"))
    assert derived == {"fleet-asg-capped": {"fleetCeilings": {"gpu1": 24, "gpu4": 6, "gpu8": 2}, "maxSizeCeiling": 24},
                       "environment-budget": {"actualPercents": [10, 50, 100, 120]}}
    # The model's own defaults count: a stack that leaves budgetAlertPercents out alerts at each quarter.
    assert stack_pack_config("dev")["environment-budget"] == {"actualPercents": [25, 50, 75, 100]}


@pytest.mark.parametrize("ceilings, problem", [
    ({"gpu1": 4}, None),
    ({"gpu1": 0}, "fleet-asg-capped.fleetCeilings: gpu1: 0 is below the minimum 1"),
    ({"gpu1": "4"}, "fleet-asg-capped.fleetCeilings: gpu1: '4' is not an integer"),
    ([4], "fleet-asg-capped.fleetCeilings: [4] is not an object"),
])
def test_the_fleet_ceilings_schema_refuses_what_the_cli_would(ceilings, problem):
    """The schema check the test above relies on, seen failing on known-bad values."""
    capped = POLICIES["fleet-asg-capped"]
    problems = schema_problems(capped, policy_config(capped, {"fleet-asg-capped": {"fleetCeilings": ceilings}}))
    assert problems == ([problem] if problem else [])


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, cwd=Path("/"))


def test_the_script_prints_the_json_the_cli_reads():
    result = _run("staging")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == stack_pack_config("staging")


@pytest.mark.parametrize("args, message", [
    (("qa",), "no stack file stacks/Pulumi.qa.yaml"),
    ((), "usage: python scripts/policy_config.py STACK"),
])
def test_a_stack_it_cannot_read_is_one_message_and_exit_2(args, message):
    result = _run(*args)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.strip().startswith(message), result.stderr
