"""The Pulumi CLI's project-config rules (tests/rules/pulumi_project.py, ported from pulumi/pulumi) hold
for Pulumi.yaml, every committed stack and a stack made by the README's "Add an environment" steps;
the program renders from exactly the config the CLI would hand it; each rule fails on a broken copy."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from pulumi_harness import ROOT, STACKS, render_config, stack_file_config
from pulumi_project import (
    ItemsType,
    Key,
    PulumiConfigError,
    Value,
    check_stack,
    load_project,
    load_stack_config,
    merge_config,
    program_config,
    validate_config_value,
)

from components.config import ConfigError, parse_stack_config
from components.config.project import undeclared_keys

PROJECT_FILE = ROOT / "Pulumi.yaml"


def stack_file(stack: str) -> Path:
    return ROOT / "stacks" / f"Pulumi.{stack}.yaml"


def write(path: Path, document: dict) -> Path:
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def edited_stack(tmp_path: Path, stack: str, **changes) -> Path:
    """A copy of a committed stack file with `mlfleet:` keys set (a value) or removed (None)."""
    document = yaml.safe_load(stack_file(stack).read_text())
    for key, value in changes.items():
        if value is None:
            document["config"].pop(f"mlfleet:{key}")
        else:
            document["config"][f"mlfleet:{key}"] = value
    return write(tmp_path / f"Pulumi.{stack}.yaml", document)


def edited_project(tmp_path: Path, **declarations) -> Path:
    """A copy of Pulumi.yaml with some config declarations replaced (None removes one)."""
    document = yaml.safe_load(PROJECT_FILE.read_text())
    for key, declaration in declarations.items():
        if declaration is None:
            document["config"].pop(key)
        else:
            document["config"][key] = declaration
    return write(tmp_path / "Pulumi.yaml", document)


# --- what passes -----------------------------------------------------------------------------------

def test_pulumi_yaml_passes_the_project_file_rules():
    project = load_project(PROJECT_FILE)
    assert project.name == "mlfleet" and project.stack_config_dir == "stacks"
    assert project.config, "Pulumi.yaml declares no config"


@pytest.mark.parametrize("stack", STACKS)
def test_every_committed_stack_merges_and_the_program_renders_from_the_merged_config(stack, stack_renderings):
    values = check_stack(PROJECT_FILE, stack_file(stack), stack)
    # The program reads the same model from what the CLI hands it (project defaults included) as the
    # tests do from the stack file alone, and renders the same resources.
    assert parse_stack_config(values, stack) == parse_stack_config(stack_file_config(stack), stack)
    assert render_config(values, stack).snapshot() == stack_renderings[stack].snapshot()


def test_a_new_environment_made_by_the_readme_steps_merges_and_renders(tmp_path, renderings):
    """tests/rules/rule_stacks.py follows the README; the other rule checks run on the same rendering."""
    from rule_stacks import NEW_ENVIRONMENT, make, program_config, source_stack

    assert source_stack() in STACKS
    path = make(tmp_path)
    assert path.read_text() == stack_file(source_stack()).read_text()  # copy and rename, nothing else
    assert program_config(path) == check_stack(PROJECT_FILE, path, NEW_ENVIRONMENT)
    clusters = {r.inputs["name"] for r in renderings[NEW_ENVIRONMENT].of_type("aws:ecs/cluster:Cluster")}
    assert clusters == {f"mlfleet-{NEW_ENVIRONMENT}"}


def test_the_stack_with_its_home_outside_us_east_1_keeps_a_fleet_there(stack_configs):
    from rule_stacks import HOME_ELSEWHERE, HOME_ELSEWHERE_REGION

    config = stack_configs[HOME_ELSEWHERE]
    assert config["aws:region"] == HOME_ELSEWHERE_REGION
    assert "us-east-1" in json.loads(config["mlfleet:regions"])


def test_project_defaults_reach_the_program_as_the_models_defaults(tmp_path):
    """A stack that sets only the required keys: every default comes from Pulumi.yaml, and equals the model's."""
    minimal = write(tmp_path / "Pulumi.qa.yaml", {"config": {
        "aws:region": "us-east-1",
        "mlfleet:regions": ["us-east-1"],
        "mlfleet:fleets": {"gpu1": {"maxInstances": 2}},
        "mlfleet:alertEmails": ["ml@example.com"],
        "mlfleet:maxHourlyUsd": 10,
    }})
    values = check_stack(PROJECT_FILE, minimal, "qa")
    assert values["mlfleet:budgetAlertPercents"] == "[25,50,75,100]"
    assert values["mlfleet:natGateway"] == "false" and values["mlfleet:networks"] == "{}"
    without_defaults = {k: v for k, v in values.items() if k in load_stack_keys(minimal)}
    assert parse_stack_config(values, "qa") == parse_stack_config(without_defaults, "qa")
    assert not set(undeclared_keys()) & {k.removeprefix("mlfleet:") for k in values}


def load_stack_keys(path: Path) -> set[str]:
    return {str(key) for key in load_stack_config(path)}


# --- the CLI's rules, each seen to fail ----------------------------------------------------------------

def test_a_stack_that_omits_a_required_key_is_stopped_by_the_cli(tmp_path):
    with pytest.raises(PulumiConfigError, match=r"^Stack 'dev' is missing configuration value 'maxHourlyUsd'$"):
        check_stack(PROJECT_FILE, edited_stack(tmp_path, "dev", maxHourlyUsd=None), "dev")
    with pytest.raises(PulumiConfigError,
                       match=r"^Stack 'dev' is missing configuration values 'alertEmails', 'fleets' and 'regions'$"):
        check_stack(PROJECT_FILE, edited_stack(tmp_path, "dev", alertEmails=None, fleets=None, regions=None), "dev")


def test_the_project_file_as_it_was_stops_every_stack(tmp_path):
    """Issue 12's finding on a broken copy: Pulumi.yaml's declarations without their defaults. Every key a
    stack leaves out is then required, so dev stops before the program runs."""
    document = yaml.safe_load(PROJECT_FILE.read_text())
    for declaration in document["config"].values():
        declaration.pop("default", None)
    project = write(tmp_path / "Pulumi.yaml", document)
    unset = sorted(set(document["config"]) - {key.name for key in load_stack_config(stack_file("dev"))})
    assert len(unset) > 1
    with pytest.raises(PulumiConfigError) as stopped:
        check_stack(project, stack_file("dev"), "dev")
    assert str(stopped.value) == ("Stack 'dev' is missing configuration values "
                                  + ", ".join(f"'{k}'" for k in unset[:-1]) + f" and '{unset[-1]}'")


def test_a_key_declared_without_default_is_required_even_where_the_model_has_one(tmp_path):
    """Why keys whose model default is None are not declared: a declaration makes the CLI require them."""
    project = edited_project(tmp_path, monthlyBudgetUsd={"type": "integer", "description": "budget"})
    with pytest.raises(PulumiConfigError, match="missing configuration value 'monthlyBudgetUsd'"):
        check_stack(project, edited_stack(tmp_path, "prod", monthlyBudgetUsd=None), "prod")
    # `default: null` is Go's nil: still no default.
    project = edited_project(tmp_path, monthlyBudgetUsd={"type": "integer", "description": "budget", "default": None})
    with pytest.raises(PulumiConfigError, match="missing configuration value 'monthlyBudgetUsd'"):
        check_stack(project, edited_stack(tmp_path, "prod", monthlyBudgetUsd=None), "prod")


@pytest.mark.parametrize("key, value, type_name", [
    ("maxHourlyUsd", "five", "integer"),
    ("maxHourlyUsd", "2.5", "integer"),
    ("regions", "us-east-1", "array<string>"),
    ("budgetAlertPercents", [25, "half", 100], "array<integer>"),
    ("natGateway", "yes please", "boolean"),
])
def test_a_value_of_the_wrong_type_is_stopped_by_the_cli(tmp_path, key, value, type_name):
    with pytest.raises(PulumiConfigError, match=rf"^Stack 'dev' with configuration key '{key}' must be of type "
                                                 rf"'{re.escape(type_name)}'$"):
        check_stack(PROJECT_FILE, edited_stack(tmp_path, "dev", **{key: value}), "dev")


def test_a_boolean_is_checked_as_written_so_True_is_refused_where_the_model_would_accept_it(tmp_path):
    path = tmp_path / "Pulumi.dev.yaml"
    path.write_text(stack_file("dev").read_text().replace("mlfleet:natGateway: true", "mlfleet:natGateway: True"))
    assert "natGateway: True" in path.read_text()
    with pytest.raises(PulumiConfigError, match="'natGateway' must be of type 'boolean'"):
        check_stack(PROJECT_FILE, path, "dev")


def test_a_secret_key_needs_an_encrypted_value(tmp_path):
    declaration = {"type": "string", "description": "d", "secret": True}
    project = edited_project(tmp_path, slackWorkspaceId=declaration)
    with pytest.raises(PulumiConfigError,
                       match=r"^Stack 'prod' with configuration key 'slackWorkspaceId' must be encrypted as it's secret$"):
        check_stack(project, stack_file("prod"), "prod")
    encrypted = edited_stack(tmp_path, "prod", slackWorkspaceId={"secure": "v1:ciphertext"})
    merged = merge_config("prod", load_project(project), load_stack_config(encrypted),
                          decrypter={"v1:ciphertext": "T0123456789"}.__getitem__)
    assert merged[Key("mlfleet", "slackWorkspaceId")] == Value("v1:ciphertext", secure=True)
    assert program_config(merged, {"v1:ciphertext": "T0123456789"}.__getitem__)["mlfleet:slackWorkspaceId"] == "T0123456789"


@pytest.mark.parametrize("declaration, message", [
    ({"type": "integer", "description": "d", "default": "three"},
     "The default value specified for configuration key 'availabilityZoneCount' is not of the expected type 'integer'"),
    ({"type": "integer", "description": "d", "default": 2.5},
     "The default value specified for configuration key 'availabilityZoneCount' is not of the expected type 'integer'"),
    ({"type": "array", "items": {"type": "integer"}, "default": [1, "two"]},
     "not of the expected type 'array<integer>'"),
    ({"type": "array", "description": "d"}, "declares an array but does not specify the underlying type"),
    ({"type": "integer", "default": 3, "value": 3}, "cannot have both a 'default' and 'value' attribute"),
    ({"type": "object", "description": "d"}, "#/config/availabilityZoneCount/type: value must be one of"),
    ({"type": "integer", "descripton": "d"}, "additionalProperties 'descripton' not allowed"),
    ({"type": "array", "items": {"type": "array"}}, "#/config/availabilityZoneCount/items: missing properties: 'items'"),
])
def test_a_broken_declaration_is_refused_by_the_cli(tmp_path, declaration, message):
    with pytest.raises(PulumiConfigError, match=re.escape(message)):
        load_project(edited_project(tmp_path, availabilityZoneCount=declaration))


def test_other_namespaces_take_only_a_value(tmp_path):
    with pytest.raises(PulumiConfigError, match="'aws:region' is not namespaced by the project and should not define a type"):
        load_project(edited_project(tmp_path, **{"aws:region": {"type": "string", "value": "us-east-1"}}))
    with pytest.raises(PulumiConfigError, match="Did you mean to use the 'value' attribute instead of 'default'"):
        load_project(edited_project(tmp_path, **{"aws:region": {"default": "us-east-1"}}))
    # The short form is a value for another namespace, filled in where a stack leaves it out.
    project = edited_project(tmp_path, **{"aws:region": "us-west-2"})
    stack = write(tmp_path / "Pulumi.dev.yaml", {"config": {
        k: v for k, v in yaml.safe_load(stack_file("dev").read_text())["config"].items() if k != "aws:region"}})
    assert check_stack(project, stack, "dev")["aws:region"] == "us-west-2"


def test_a_stack_file_the_port_does_not_cover_is_refused_not_guessed(tmp_path):
    document = yaml.safe_load(stack_file("dev").read_text())
    with pytest.raises(PulumiConfigError, match="ESC environments are not ported"):
        check_stack(PROJECT_FILE, write(tmp_path / "Pulumi.dev.yaml", {**document, "environment": ["team/dev"]}), "dev")
    path = tmp_path / "Pulumi.dev.yaml"
    path.write_text(stack_file("dev").read_text().replace("maxInstances: 4\n", "maxInstances: [4\n"))
    with pytest.raises(PulumiConfigError, match=r"Pulumi\.dev\.yaml:\d+:\d+: not valid YAML"):
        check_stack(PROJECT_FILE, path, "dev")


@pytest.mark.parametrize("type_name, items, value, valid", [
    ("string", None, "x", True), ("string", None, 1, False),
    ("integer", None, "5", True), ("integer", None, "-5", True), ("integer", None, "5.0", False),
    ("integer", None, " 5", False), ("integer", None, 5.0, True), ("integer", None, 5.5, False),
    ("integer", None, True, False), ("integer", None, "99999999999999999999", False),
    ("boolean", None, "true", True), ("boolean", None, "True", False), ("boolean", None, False, True),
    ("array", ItemsType("string"), ["a"], True), ("array", ItemsType("string"), [1], False),
    ("array", None, ["a"], False), ("array", ItemsType("array", ItemsType("integer")), [[1], [2.0]], True),
    ("object", None, {}, True), ("object", None, [], False),
])
def test_validate_config_value_follows_the_go_function(type_name, items, value, valid):
    assert validate_config_value(type_name, items, value) is valid


def test_stack_values_are_read_as_the_cli_reads_them(tmp_path):
    path = tmp_path / "Pulumi.x.yaml"
    path.write_text("config:\n  a:n: 5\n  a:b: True\n  a:e:\n  a:l: [1, yes]\n  a:s: {secure: v1:abc}\n"
                    "  a:m: {z: 1, a: {secure: v1:x}}\n  a:config:legacy: x\n")
    assert load_stack_config(path) == {
        Key("a", "n"): Value("5"), Key("a", "b"): Value("True"), Key("a", "e"): Value(""),
        Key("a", "l"): Value("[1,true]", object=True), Key("a", "s"): Value("v1:abc", secure=True),
        Key("a", "m"): Value('{"a":{"secure":"v1:x"},"z":1}', secure=True, object=True),
        Key("a", "legacy"): Value("x"),
    }
    assert json.loads(load_stack_config(path)[Key("a", "l")].value) == [1, True]


def test_the_errors_docs_configuration_md_shows_are_what_the_cli_and_the_program_print(tmp_path):
    from scripts import render_config as reference  # the generator of docs/configuration.md

    docs = (ROOT / "docs" / "configuration.md").read_text()
    with pytest.raises(PulumiConfigError) as missing:
        check_stack(PROJECT_FILE, edited_stack(tmp_path, "dev", maxHourlyUsd=None), "dev")
    with pytest.raises(PulumiConfigError) as wrong_type:
        check_stack(PROJECT_FILE, edited_stack(tmp_path, "dev", maxHourlyUsd="five"), "dev")
    assert (str(missing.value), str(wrong_type.value)) == (reference.PULUMI_MISSING_KEY, reference.PULUMI_WRONG_TYPE)
    assert f"{reference.PULUMI_MISSING_KEY}\n{reference.PULUMI_WRONG_TYPE}\n" in docs
    # The example stack gets past the CLI: its mistakes are the program's to report, as the page says.
    bad = tmp_path / "Pulumi.dev.yaml"
    bad.write_text(reference.BAD_STACK + "\n")
    with pytest.raises(ConfigError) as error:
        parse_stack_config(check_stack(PROJECT_FILE, bad, "dev"), "dev")
    assert f"```\n{error.value}\n```" in docs


def test_the_errors_the_readme_shows_are_what_the_cli_and_the_program_print(tmp_path):
    readme = (ROOT / "README.md").read_text().split("## Configuration\n", 1)[1].split("\n## ", 1)[0]
    with pytest.raises(PulumiConfigError) as missing:
        check_stack(PROJECT_FILE, edited_stack(tmp_path, "dev", maxHourlyUsd=None), "dev")
    assert f"```\n{missing.value}\n```" in readme
    # dev with a misspelt instance type and a misspelt optional key: past the CLI, stopped by the program.
    document = yaml.safe_load(stack_file("dev").read_text())
    document["config"]["mlfleet:fleets"]["gpu1"]["instanceTypes"] = ["g5.2xlarg"]
    document["config"]["mlfleet:natGatway"] = document["config"].pop("mlfleet:natGateway")
    values = check_stack(PROJECT_FILE, write(tmp_path / "Pulumi.dev.yaml", document), "dev")
    with pytest.raises(ConfigError) as error:
        parse_stack_config(values, "dev")
    assert f"```\n{error.value}\n```" in readme
