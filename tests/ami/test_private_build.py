"""How Packer reaches the build instance (connect_via): the template parsed with python-hcl2 and its few
expressions that depend on the mode evaluated for each mode, so the private build (Session Manager, no
public IP) and the public build (as before) are both checked; and `make ami` passing the mode through."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from make_recipes import dry_run, run_line

# tests/rules' lint by its own module name, as tests/rules imports it: `rules` is also the policy pack's module
# (tests/policy puts policy/ on sys.path), and whichever an xdist worker imported first hid the other.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "rules"))
from iam_lint import IDENTITY, Document, expand_action, lint  # noqa: E402 - after the sys.path line above

SUBNET = "subnet-0123456789abcdef0"


# --- the few HCL expressions the mode decides, evaluated -------------------------------------------------

def _python(expression: str) -> str:
    """An HCL expression of the subset the template uses here, as Python: var./local. references, string
    literals, ==, !=, !, &&, ||, one top-level `a ? b : c`, lists, one-line maps, and the functions below."""
    depth, question, colon, quoted = 0, None, None, False
    for index, char in enumerate(expression):
        if char == '"' and expression[index - 1] != "\\":
            quoted = not quoted
        elif not quoted and char in "([{":
            depth += 1
        elif not quoted and char in ")]}":
            depth -= 1
        elif not quoted and depth == 0 and char == "?" and question is None:
            question = index
        elif not quoted and depth == 0 and char == ":" and question is not None and colon is None:
            colon = index
    if question is not None:
        condition, then, other = expression[:question], expression[question + 1:colon], expression[colon + 1:]
        return f"(({_python(then)}) if ({_python(condition)}) else ({_python(other)}))"
    pieces = re.split(r'("(?:[^"\\]|\\.)*")', expression)  # string literals stay as they are
    for index in range(0, len(pieces), 2):
        code = pieces[index]
        code = re.sub(r"\bvar\.(\w+)", r'V["\1"]', code)
        code = re.sub(r"\blocal\.(\w+)", r'L("\1")', code)
        code = code.replace("&&", " and ").replace("||", " or ")
        code = re.sub(r"!(?!=)", " not ", code)
        code = re.sub(r"\bnull\b", "None", code).replace("true", "True").replace("false", "False")
        code = re.sub(r"^\s*=\s*$", ":", code) if index and index < len(pieces) - 1 else code
        pieces[index] = code
    return "".join(pieces)


def evaluate(value, variables: dict, locals_: dict):
    """A parsed template value with its ${...} expressions evaluated for the given variable values."""
    def local(name):
        return evaluate(locals_[name], variables, locals_)

    functions = {
        "V": variables, "L": local, "contains": lambda items, item: item in items,
        "regex": lambda pattern, text: (m := re.search(pattern, text)) and m.group(0),
        "can": lambda result: result is not None,
        "lookup": lambda mapping, key, default: mapping.get(key, default),
    }
    if isinstance(value, dict):
        return {key: evaluate(item, variables, locals_) for key, item in value.items()}
    if isinstance(value, list):
        return [evaluate(item, variables, locals_) for item in value]
    if not isinstance(value, str) or "${" not in value:
        return value
    whole = re.fullmatch(r"\$\{(.*)\}", value, flags=re.S)
    if whole and "${" not in whole.group(1):
        return eval(_python(whole.group(1)), functions)  # noqa: S307 - the repository's own template
    return re.sub(r"\$\{([^}]*)\}", lambda m: str(eval(_python(m.group(1)), functions)), value)  # noqa: S307


def mode_values(variables: dict, **given) -> dict:
    """Every variable's value for a build: the given ones, else the defaults, else a valid example."""
    examples = {"environment": "dev", "region": "us-east-1", "ami_regions": ["us-east-1"], "git_revision": "0123abc"}
    return {name: given.get(name, body.get("default", examples.get(name))) for name, body in variables.items()}


def valid(variables: dict, name: str, value) -> bool:
    (validation,) = variables[name]["validation"]
    return bool(evaluate(validation["condition"], {name: value}, {}))


# The source block's arguments the mode decides.
CONNECTION = ("ssh_interface", "associate_public_ip_address", "temporary_security_group_source_public_ip",
              "subnet_id", "iam_instance_profile")


def connection(source: dict, values: dict, locals_: dict) -> dict:
    return evaluate({key: source.get(key) for key in CONNECTION}, values, locals_)


@pytest.fixture(scope="module")
def private(variables, source, locals_):
    values = mode_values(variables, connect_via="session_manager", subnet_id=SUBNET)
    return values, connection(source, values, locals_)


@pytest.fixture(scope="module")
def public(variables, source, locals_):
    values = mode_values(variables)
    return values, connection(source, values, locals_)


def temporary_policy(source: dict, values: dict, locals_: dict) -> dict | None:
    """The temporary instance profile's policy document the dynamic block renders, or None."""
    (dynamic,) = [d["temporary_iam_instance_profile_policy_document"] for d in source["dynamic"]
                  if "temporary_iam_instance_profile_policy_document" in d]
    documents = evaluate(dynamic["for_each"], values, locals_)
    if not documents:
        return None
    (content,) = dynamic["content"]
    (statements,) = [d["Statement"] for d in content["dynamic"]]
    assert statements["for_each"] == "${temporary_iam_instance_profile_policy_document.value}"
    (fields,) = statements["content"]
    assert fields == {key: f"${{Statement.value.{key}}}" for key in ("Effect", "Action", "Resource")}
    (document,) = documents
    return {"Version": content["Version"], "Statement": document}


# --- the variable ---------------------------------------------------------------------------------------

def test_connect_via_accepts_the_two_ways_and_rejects_anything_else(variables):
    assert variables["connect_via"]["default"] == "public_ip", "today's build keeps working without the variable"
    for good in ("public_ip", "session_manager"):
        assert valid(variables, "connect_via", good)
    for bad in ("private_ip", "public_dns", "ssm", "session-manager", "Session_Manager", "", "public_ip "):
        assert not valid(variables, "connect_via", bad), bad
    (validation,) = variables["connect_via"]["validation"]
    assert "connect_via" in validation["error_message"]
    assert "session_manager" in validation["error_message"] and "public_ip" in validation["error_message"]
    # Packer requires error messages to be sentences (hcl2template/types.variables.go, looksLikeSentences).
    assert validation["error_message"][0].isupper() and validation["error_message"].endswith(".")


def test_instance_profile_names_are_validated_as_iam_does(variables):
    # botocore iam GetInstanceProfile.InstanceProfileName: 1 to 128 of [\w+=,.@-].
    for good in ("", "mlfleet-dev-ami-build", "a", "x" * 128, "name+=,.@_-"):
        assert valid(variables, "iam_instance_profile", good), good
    for bad in ("x" * 129, "arn:aws:iam::123456789012:instance-profile/x", "path/name", "has space"):
        assert not valid(variables, "iam_instance_profile", bad), bad


# --- the private build ----------------------------------------------------------------------------------

def test_the_private_build_has_no_public_ip_and_ssh_goes_through_session_manager(private):
    _, built = private
    assert built["ssh_interface"] == "session_manager"
    assert built["associate_public_ip_address"] is False
    assert built["subnet_id"] == SUBNET


def test_the_private_build_opens_no_inbound_rule_and_asks_no_address(private, source, locals_):
    """With session_manager and an instance profile the builder adds no rule to its temporary security group
    (builder/ebs/builder.go SkipSSHRuleCreation = SSMAgentEnabled()); without a profile it refuses to start
    (builder/common/run_config.go Prepare). The checkip.amazonaws.com lookup is for the public build only."""
    values, built = private
    assert built.get("iam_instance_profile") or temporary_policy(source, values, locals_)
    assert built["temporary_security_group_source_public_ip"] is False
    assert "temporary_security_group_source_cidrs" not in source and "security_group_id" not in source
    assert "security_group_ids" not in source and "security_group_filter" not in source


def test_the_private_build_gets_a_temporary_profile_that_only_lets_the_ssm_agent_talk(private, source, locals_):
    values, built = private
    assert built["iam_instance_profile"] is None
    document = temporary_policy(source, values, locals_)
    actions = sorted(a for statement in document["Statement"] for a in statement["Action"])
    # AWS's managed policy for exactly this, AWSCloud9SSMInstanceProfile.
    assert actions == ["ssm:UpdateInstanceInformation", "ssmmessages:CreateControlChannel",
                       "ssmmessages:CreateDataChannel", "ssmmessages:OpenControlChannel",
                       "ssmmessages:OpenDataChannel"]
    assert all(statement["Effect"] == "Allow" for statement in document["Statement"])
    for action in actions:
        assert expand_action(action) == (action,), f"{action} is not in the IAM reference"
    findings = lint(Document("packer temporary_iam_instance_profile_policy_document", IDENTITY, document))
    assert not findings, "\n".join(map(str, findings))
    # Packer's Statement has Effect, Action and Resource only (builder/common/run_config.go).
    assert all(set(statement) == {"Effect", "Action", "Resource"} for statement in document["Statement"])


@pytest.mark.parametrize(("region", "partition"), [
    ("us-east-1", "aws"), ("eu-central-1", "aws"), ("us-gov-west-1", "aws-us-gov"), ("cn-north-1", "aws-cn"),
    ("us-iso-east-1", "aws-iso"), ("us-isob-east-1", "aws-iso-b"),
])
def test_the_agent_may_update_only_instances_of_the_build_region_and_partition(variables, locals_, region,
                                                                               partition):
    values = mode_values(variables, connect_via="session_manager", subnet_id=SUBNET, region=region)
    statements = evaluate(locals_["ssm_agent_statements"], values, locals_)
    (update,) = [s for s in statements if s["Action"] == ["ssm:UpdateInstanceInformation"]]
    assert update["Resource"] == [f"arn:{partition}:ec2:{region}:*:instance/*"]


def test_a_given_profile_replaces_the_temporary_one(variables, source, locals_):
    values = mode_values(variables, connect_via="session_manager", subnet_id=SUBNET,
                         iam_instance_profile="mlfleet-dev-ami-build")
    built = connection(source, values, locals_)
    assert built["iam_instance_profile"] == "mlfleet-dev-ami-build"
    assert temporary_policy(source, values, locals_) is None


# --- the public build, as it was ------------------------------------------------------------------------

def test_the_public_build_is_unchanged(public, source, locals_):
    """With `ssh_interface = "public_ip"` the builder connects only to a public address and otherwise stops
    with "couldn't determine address for instance" (packer-plugin-amazon builder/common/ssh.go, SSHHost). So
    the instance gets one in any subnet given, and SSH is admitted from the address running Packer only."""
    values, built = public
    assert built["ssh_interface"] == "public_ip"
    assert built["associate_public_ip_address"] is True
    assert built["temporary_security_group_source_public_ip"] is True
    assert built["subnet_id"] is None
    assert built["iam_instance_profile"] is None and temporary_policy(source, values, locals_) is None


# --- make ami -------------------------------------------------------------------------------------------

def make_ami(*arguments: str) -> str:
    return dry_run("ami", "ENV=dev", *arguments)


def packer_build(commands: str) -> str:
    return " ".join(commands[commands.index("packer build"):].replace("\\\n", " ").split())


def test_make_ami_passes_the_way_subnet_and_profile_to_packer():
    command = packer_build(make_ami("CONNECT=session_manager", f"SUBNET={SUBNET}", "PROFILE=build"))
    assert f"-var connect_via=session_manager -var subnet_id={SUBNET} -var iam_instance_profile=build" in command
    assert command.endswith(" packer/")


def test_make_ami_without_connect_leaves_the_default_to_the_template():
    command = packer_build(make_ami())
    assert "connect_via" not in command and "subnet_id" not in command and "iam_instance_profile" not in command


@pytest.mark.parametrize(("connect", "passes"), [("", True), ("public_ip", True), ("session_manager", True),
                                                 ("ssm", False), ("private_ip", False)])
def test_make_ami_names_a_bad_connect_value(connect, passes):
    result = run_line(make_ami(f"CONNECT={connect}", f"SUBNET={SUBNET}"), "is not a way to reach", "/usr/bin:/bin")
    assert (result.returncode == 0) is passes
    if not passes:
        assert f"CONNECT={connect} is not a way to reach the build instance" in result.stdout


def test_make_ami_private_needs_a_subnet():
    marker = "SUBNET=<private subnet"
    result = run_line(make_ami("CONNECT=session_manager"), marker, "/usr/bin:/bin")
    assert result.returncode == 2 and "usage: make ami ENV=dev CONNECT=session_manager SUBNET=" in result.stdout
    assert run_line(make_ami("CONNECT=session_manager", f"SUBNET={SUBNET}"), marker, "/usr/bin:/bin").returncode == 0
    assert run_line(make_ami(), marker, "/usr/bin:/bin").returncode == 0


def test_make_ami_private_needs_the_session_manager_plugin(tmp_path):
    plugin = tmp_path / "session-manager-plugin"
    plugin.write_text("#!/bin/sh\n")
    plugin.chmod(0o755)
    commands = make_ami("CONNECT=session_manager", f"SUBNET={SUBNET}")
    missing = run_line(commands, "session-manager-plugin is missing", "/usr/bin:/bin")
    assert missing.returncode == 1 and "session-manager-plugin is missing" in missing.stdout
    assert run_line(commands, "session-manager-plugin is missing", f"{tmp_path}:/usr/bin:/bin").returncode == 0
    # The public build does not need it.
    assert run_line(make_ami(), "session-manager-plugin is missing", "/usr/bin:/bin").returncode == 0
