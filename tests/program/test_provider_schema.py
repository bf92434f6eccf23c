"""What the mocks cannot check: every input the program sets exists in the pulumi_aws API.

Pulumi mocks accept any property name and value. The installed pulumi_aws SDK carries the provider's
schema in its signatures and docstrings, so each recorded input (nested objects included) is checked
against the resource's argument types, and the enum values we rely on against their documentation.
"""

from __future__ import annotations

import importlib
import inspect
import re

import pulumi_aws
import pytest

from pulumi_harness import STACKS, committed_rendering

ARGS_REF = re.compile(r"ForwardRef\('(\w+Args)'\)")


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)([A-Z])", r"_\1", name).lower()


def _module_of(type_token: str):
    package, module_and_kind, _ = type_token.split(":")
    module = module_and_kind.split("/")[0]
    if package == "pulumi" and module == "providers":
        return pulumi_aws
    module = {"index": "", "lambda": "lambda_"}.get(module, module)
    return importlib.import_module(f"pulumi_aws.{module}" if module else "pulumi_aws")


def _resource_class(type_token: str):
    if type_token == "pulumi:providers:aws":
        return pulumi_aws.Provider
    return getattr(_module_of(type_token), type_token.split(":")[2])


def _parameters(function) -> dict[str, str]:
    return {name: str(p.annotation) for name, p in inspect.signature(function).parameters.items()}


def _check(inputs: dict, parameters: dict[str, str], inputs_module, path: str, problems: list[str]) -> None:
    for key, value in inputs.items():
        name = _snake(key)
        if name not in parameters:
            problems.append(f"{path}.{key} is not an argument (known: {sorted(p for p in parameters if p not in ('self', '__self__'))})")
            continue
        match = ARGS_REF.search(parameters[name])
        if not match:
            continue
        nested = getattr(inputs_module, match.group(1))
        items = value if isinstance(value, list) else [value]
        for index, item in enumerate(items):
            if isinstance(item, dict):
                _check(item, _parameters(nested.__init__), inputs_module, f"{path}.{key}[{index}]", problems)


@pytest.mark.parametrize("stack", STACKS)
def test_every_input_is_a_real_argument_of_the_aws_provider(stack):
    problems: list[str] = []
    for resource in committed_rendering(stack).resources:
        if not (resource.type.startswith("aws:") or resource.type == "pulumi:providers:aws"):
            continue
        cls = _resource_class(resource.type)
        module = _module_of(resource.type)
        inputs_module = importlib.import_module(f"{module.__name__}._inputs")
        _check(resource.inputs, _parameters(cls._internal_init), inputs_module, f"{resource.type} {resource.name}", problems)
    assert not problems, "\n".join(problems)


def _doc_of(args_class, field: str) -> str:
    prop = getattr(args_class, field)
    return prop.fget.__doc__ or ""


# (class holding the documented field, field, the value mlfleet sets): values the provider validates.
DOCUMENTED_VALUES = [
    (pulumi_aws.autoscaling.GroupMixedInstancesPolicyInstancesDistributionArgs, "spot_allocation_strategy", "price-capacity-optimized"),
    (pulumi_aws.autoscaling.GroupMixedInstancesPolicyInstancesDistributionArgs, "on_demand_allocation_strategy", "lowest-price"),
    (pulumi_aws.ec2.LaunchTemplateMetadataOptionsArgs, "http_tokens", "required"),
    (pulumi_aws.ec2.LaunchTemplateMetadataOptionsArgs, "instance_metadata_tags", "disabled"),
    (pulumi_aws.ec2.LaunchTemplateBlockDeviceMappingEbsArgs, "volume_type", "gp3"),
    (pulumi_aws.ecs.TaskDefinitionArgs, "network_mode", "bridge"),
    (pulumi_aws.ecs.ClusterSettingArgs, "name", "containerInsights"),
    (pulumi_aws.ecs.ClusterSettingArgs, "value", "enabled"),
    (pulumi_aws.ec2.VpcEndpointArgs, "vpc_endpoint_type", "Interface"),
    (pulumi_aws.ec2.NatGatewayArgs, "connectivity_type", "public"),
]


@pytest.mark.parametrize("args_class, field, value", DOCUMENTED_VALUES, ids=lambda v: getattr(v, "__name__", str(v)))
def test_enum_values_we_use_are_documented_by_the_provider(args_class, field, value):
    assert value in _doc_of(args_class, field), f"{args_class.__name__}.{field} does not document {value!r}"


def test_group_metrics_and_granularity_are_documented():
    import botocore.session

    from components.compute.fleet import GROUP_METRICS

    assert "`1Minute`" in _doc_of(pulumi_aws.autoscaling.GroupArgs, "metrics_granularity")
    model = botocore.session.get_session().get_service_model("autoscaling")
    documented = model.operation_model("EnableMetricsCollection").input_shape.members["Metrics"].documentation
    for metric in GROUP_METRICS:
        assert f"<code>{metric}</code>" in documented, metric


@pytest.mark.parametrize("value", ["instance", "volume", "network-interface"])
def test_launch_template_tag_resource_types_are_ec2_enum_values(value):
    # The provider's docstring does not list them; the EC2 API model (botocore) does.
    import botocore.session

    model = botocore.session.get_session().get_service_model("ec2")
    assert value in model.shape_for("ResourceType").enum
