"""The CrossGuard adapter: policies get CrossGuard's own argument types (property proxies, providers with
JSON-encoded default tags, unknown preview values) and report through report_violation."""

from __future__ import annotations

import pytest
from pulumi_policy import (
    EnforcementLevel,
    PolicyCustomTimeouts,
    PolicyProviderResource,
    PolicyResource,
    PolicyResourceOptions,
    ResourceValidationArgs,
    StackValidationArgs,
)
from pulumi_policy.proxy import UNKNOWN_STRING_VALUE, UnknownValueError, unknown_checking_proxy

import pack

OPTS = PolicyResourceOptions(False, [], None, [], PolicyCustomTimeouts(0, 0, 0), [])
PROVIDER = PolicyProviderResource(
    "pulumi:providers:aws",
    unknown_checking_proxy({"region": "us-east-1", "defaultTags": '{"tags": {"mlfleet:environment": "dev", '
                                                                  '"mlfleet:managed-by": "pulumi"}}'}),
    "urn:provider", "aws-us-east-1")


def policy(name):
    return next(p for p in pack.POLICIES if p.name == name)


def run_resource_policy(name, resource_type, props, config=None):
    reports = []
    args = ResourceValidationArgs(resource_type, unknown_checking_proxy(props), f"urn:{name}", "res", OPTS,
                                  PROVIDER, config)
    policy(name).validate(args, lambda message, urn=None: reports.append((message, urn)))
    return reports


def test_policy_names_and_levels():
    levels = {p.name: p.enforcement_level for p in pack.POLICIES}
    assert levels.pop("dev-fleets-spot-only") == EnforcementLevel.ADVISORY
    assert set(levels.values()) == {EnforcementLevel.MANDATORY}
    assert len(levels) == 11


def test_resource_violation_is_reported_against_the_resource():
    reports = run_resource_policy("imdsv2-required", "aws:ec2/launchTemplate:LaunchTemplate",
                                  {"metadataOptions": {"httpTokens": "optional"}})
    assert reports == [("aws:ec2/launchTemplate:LaunchTemplate res: metadataOptions.httpTokens is 'optional'; "
                        "set it to 'required' (IMDSv2 only)", "urn:imdsv2-required")]


def test_provider_default_tags_satisfy_required_tags():
    assert run_resource_policy("required-tags", "aws:sns/topic:Topic", {"name": "t"}) == []


def test_unknown_key_arn_counts_as_set_during_preview():
    assert run_resource_policy("sns-topics-encrypted", "aws:sns/topic:Topic",
                               {"kmsMasterKeyId": UNKNOWN_STRING_VALUE}) == []


def test_unknown_value_a_rule_needs_becomes_crossguards_preview_diagnostic():
    with pytest.raises(UnknownValueError):
        run_resource_policy("fleet-asg-capped", "aws:autoscaling/group:Group", {"maxSize": UNKNOWN_STRING_VALUE})


@pytest.mark.parametrize("config, reported", [(None, 0), ({"maxSizeCeiling": 10}, 1)])
def test_fleet_ceiling_comes_from_policy_config(config, reported):
    assert len(run_resource_policy("fleet-asg-capped", "aws:autoscaling/group:Group", {"maxSize": 24}, config)) == reported


def test_each_fleets_ceiling_comes_from_policy_config_as_the_cli_passes_numbers():
    """The engine hands the config over as a protobuf Struct, whose numbers are floats."""
    group = {"name": "mlfleet-prod-gpu4", "maxSize": 12,
             "tags": [{"key": "mlfleet:fleet", "value": "gpu4", "propagateAtLaunch": True}]}
    config = {"maxSizeCeiling": 24.0, "fleetCeilings": {"gpu1": 24.0, "gpu4": 6.0}}
    (report,) = run_resource_policy("fleet-asg-capped", "aws:autoscaling/group:Group", group, config)
    assert "maxSize is 12, above the cap of fleet gpu4, 6 " in report[0]
    assert run_resource_policy("fleet-asg-capped", "aws:autoscaling/group:Group", group,
                               {"maxSizeCeiling": 24.0, "fleetCeilings": {"gpu4": 12.0}}) == []


def test_stack_policy_reports_each_uncovered_fleet_with_its_urn():
    asg = PolicyResource("aws:autoscaling/group:Group", unknown_checking_proxy({"name": "mlfleet-dev-gpu1", "maxSize": 4}),
                         "urn:asg", "asg", OPTS, PROVIDER, None, [], {})
    reports = []
    policy("fleet-idle-alarm").validate(StackValidationArgs([asg]), lambda message, urn=None: reports.append(urn))
    assert reports == ["urn:asg"]
