"""Every rendered launch template (RULE_STACKS) shows its image id in clear and installs the instance
metadata block that survives a reboot (issue 12); each check is shown failing on a broken copy.

- Image id: pulumi-aws marks an SSM parameter's `value` sensitive ("always marked as sensitive") and its
  `insecure_value` never (pulumi_aws.ssm.GetParameterResult docstrings; tests/program/test_ami_not_secret.py
  keeps the harness's mocks to that), and an invoke output is secret as a whole when any field is
  (pulumi/runtime/invoke.py invoke_output), so a secret image id is what the preview shows as [secret].
- Metadata block: user data runs once per instance and iptables rules live in memory, so the rule is
  applied by a systemd unit enabled at boot (systemd.unit(5): [Install] WantedBy= takes effect through
  `systemctl enable`); tests/program/test_block_imds.py checks the unit and the script themselves.
"""

from __future__ import annotations

import base64
import dataclasses
import re
import types

import pulumi
import pulumi_aws as aws
import pytest
from pulumi.runtime import rpc
from rule_stacks import RULE_STACKS

from components.compute.fleet import BLOCK_IMDS_SCRIPT, BLOCK_IMDS_UNIT
from pulumi_harness import Rendering, render_stack

LT = "aws:ec2/launchTemplate:LaunchTemplate"
UNIT_PATH = "/etc/systemd/system/mlfleet-block-imds.service"
SCRIPT_PATH = "/usr/local/sbin/mlfleet-block-imds"
ENABLE = "systemctl enable --now mlfleet-block-imds.service"


def secret_image_ids(rendering: Rendering) -> list[str]:
    """Launch templates whose image id the preview would show as [secret] (or that name no AMI)."""
    return [t.name for t in rendering.of_type(LT)
            if rpc.is_rpc_secret(t.inputs["imageId"]) or not str(t.inputs["imageId"]).startswith("ami-")]


def _heredoc(script: str, target: str) -> str | None:
    match = re.search(rf"^cat > {re.escape(target)} <<'(\w+)'\n(.*?)\n\1$", script, re.S | re.M)
    return match[2] if match else None


def imds_block_problems(rendering: Rendering) -> list[str]:
    """Launch templates whose user data does not install and enable the boot-time metadata block."""
    problems = []
    for template in rendering.of_type(LT):
        script = base64.b64decode(template.inputs["userData"]).decode()
        lines = script.splitlines()
        if _heredoc(script, SCRIPT_PATH) != BLOCK_IMDS_SCRIPT.read_text().rstrip("\n"):
            problems.append(f"{template.name}: does not write {SCRIPT_PATH} as components/compute has it")
        if _heredoc(script, UNIT_PATH) != BLOCK_IMDS_UNIT.read_text().rstrip("\n"):
            problems.append(f"{template.name}: does not write {UNIT_PATH} as components/compute has it")
        if ENABLE not in lines or "systemctl daemon-reload" not in lines or \
                lines.index("systemctl daemon-reload") > lines.index(ENABLE):
            problems.append(f"{template.name}: does not reload systemd and `{ENABLE}`: the rule is gone after a reboot")
    return problems


@pytest.mark.parametrize("stack", RULE_STACKS)
def test_every_launch_template_shows_its_image_id_in_clear(renderings, stack):
    assert renderings[stack].of_type(LT)
    assert secret_image_ids(renderings[stack]) == [], "the preview would show [secret] for the image id"


@pytest.mark.parametrize("stack", RULE_STACKS)
def test_every_launch_template_installs_the_metadata_block_at_boot(renderings, stack):
    assert imds_block_problems(renderings[stack]) == []


# --- the checks on broken copies ----------------------------------------------------------------------

def test_the_image_check_finds_the_lookup_as_it_was(monkeypatch):
    """The stock AMI id from the invoke output's `value`, as the program read it before the fix."""
    from components.ami import gpu_ami

    def old_lookup(name, opts=None):
        output = aws.ssm.get_parameter_output(name=name, opts=pulumi.InvokeOutputOptions(parent=opts.parent))
        return types.SimpleNamespace(insecure_value=output.value)

    monkeypatch.setattr(gpu_ami.aws.ssm, "get_parameter", old_lookup)
    rendering = render_stack("dev")
    templates = [t.name for t in rendering.of_type(LT)]
    assert templates and secret_image_ids(rendering) == templates


def _with_user_data(rendering: Rendering, edit) -> Rendering:
    resources = []
    for r in rendering.resources:
        if r.type == LT:
            script = edit(base64.b64decode(r.inputs["userData"]).decode())
            r = dataclasses.replace(r, inputs={**r.inputs, "userData": base64.b64encode(script.encode()).decode()})
        resources.append(r)
    return dataclasses.replace(rendering, resources=resources)


@pytest.mark.parametrize(("edit", "problem"), [
    # the user data as it was: the rule applied once, nothing at boot
    (lambda s: s.replace(ENABLE + "\n", ""), "gone after a reboot"),
    (lambda s: s.replace("RequiredBy=docker.service", ""), f"does not write {UNIT_PATH}"),
    (lambda s: s.replace("-I DOCKER-USER 1", "-A DOCKER-USER"), f"does not write {SCRIPT_PATH}"),
], ids=["not-enabled", "unit-changed", "script-changed"])
def test_the_metadata_block_check_finds_a_broken_user_data(stack_renderings, edit, problem):
    broken = _with_user_data(stack_renderings["prod"], edit)
    problems = imds_block_problems(broken)
    assert problems and len(problems) == len(broken.of_type(LT)) and all(problem in p for p in problems)
