"""The stock AMI id reaches the preview in clear (issue 12: reviewers saw `[secret]` in launch-template diffs).

pulumi-aws marks the `value` of an SSM parameter secret whatever its type; the test mocks answer the same
way (tests/pulumi_harness.py), so these tests see what a real preview would show.
"""

from __future__ import annotations

import pulumi
import pulumi_aws as aws
from pulumi_harness import STOCK_AMI, render_in_region

from components.ami import GpuAmi, GpuAmiArgs, choose_ami
from components.ami.gpu_ami import STOCK_GPU_AMI_PARAMETER


def _doc(field: str) -> str:
    return getattr(aws.ssm.GetParameterResult, field).fget.__doc__ or ""


def test_the_mock_marks_secret_what_the_provider_marks_secret():
    # The harness answers getParameter with a secret `value` and a plain `insecureValue` because the
    # provider documents exactly that; if the provider changes, this test says so.
    assert "always marked as sensitive" in _doc("value")
    assert "never marked as sensitive" in _doc("insecure_value")


def _secretness(build) -> dict:
    return render_in_region(lambda opts: {k: pulumi.Output.from_input(v.is_secret()) for k, v in build(opts).items()}).outputs


def _stock_ami(opts) -> dict:
    choice = choose_ami("us-west-2", "test", None, None, pulumi.InvokeOptions(parent=opts.parent))
    return {"id": GpuAmi("ami", GpuAmiArgs(region="us-west-2", environment="test", choice=choice),
                         opts=opts).image_id}


def test_stock_ami_id_is_not_secret():
    assert render_in_region(_stock_ami).outputs == {"id": STOCK_AMI}
    assert _secretness(_stock_ami) == {"id": False}


def test_the_output_form_of_the_lookup_would_be_secret_even_for_insecure_value():
    # Why choose_ami uses the plain invoke: an invoke *output* is secret as a whole when any field is.
    def lookup(opts):
        result = aws.ssm.get_parameter_output(name=STOCK_GPU_AMI_PARAMETER, opts=pulumi.InvokeOutputOptions(parent=opts.parent))
        return {"value": result.value, "insecure": result.insecure_value}

    assert _secretness(lookup) == {"value": True, "insecure": True}


# Every rendered launch template showing its image id in clear, and the check failing on the lookup as it
# was, are in tests/rules/test_launch_templates.py (on every rule stack).
