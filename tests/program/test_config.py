"""The stack configuration model: committed stacks parse, every bad value fails with its key and value."""

from __future__ import annotations

import json
import runpy
import subprocess
import sys
import types
import typing

import pulumi
import pytest
import yaml
from pulumi_harness import ROOT, STACKS, RecordingMocks, render_config, render_program, render_stack, stack_file_config
from pydantic import ValidationError

from components import program
from components.config import ConfigError, StackConfig, StackFileError, parse_stack_config, read_stack_file, stack_keys
from components.config.model import DEFAULT_INSTANCE_TYPES
from components.config.project import render_pulumi_yaml
from lambdas.jobs.spec import MAX_ATTEMPTS_LIMIT

MINIMAL = {
    "aws:region": "us-east-1",
    "mlfleet:regions": json.dumps(["us-east-1"]),
    "mlfleet:fleets": json.dumps({"gpu1": {"maxInstances": 2}}),
    "mlfleet:alertEmails": json.dumps(["ml@example.com"]),
    "mlfleet:maxHourlyUsd": "10",
}


def with_values(**changes) -> dict:
    values = dict(MINIMAL)
    for key, value in changes.items():
        full = key if ":" in key else f"mlfleet:{key}"
        if value is None:
            values.pop(full, None)
        else:
            values[full] = value if isinstance(value, str) else json.dumps(value)
    return values


@pytest.mark.parametrize("stack", STACKS)
def test_committed_stacks_are_valid(stack):
    cfg = parse_stack_config(stack_file_config(stack), stack)
    assert cfg.environment == stack
    assert cfg.fleets


def test_dev_is_one_region_with_a_small_spot_only_cap_and_prod_has_three_regions():
    dev = parse_stack_config(stack_file_config("dev"), "dev")
    prod = parse_stack_config(stack_file_config("prod"), "prod")
    assert len(dev.regions) == 1
    assert all(f.max_instances <= 4 and f.on_demand_base_capacity == 0 and f.on_demand_percentage_above_base == 0
               for f in dev.fleets.values())
    assert len(prod.regions) >= 3


def test_defaults_live_in_the_model():
    cfg = parse_stack_config(MINIMAL, "dev")
    fleet = cfg.fleets["gpu1"]
    assert fleet.instance_types == DEFAULT_INSTANCE_TYPES and len(DEFAULT_INSTANCE_TYPES) >= 3
    assert (fleet.min_instances, fleet.on_demand_base_capacity, fleet.on_demand_percentage_above_base) == (0, 0, 0)
    assert cfg.budget_alert_percents == (25, 50, 75, 100)
    assert cfg.nat_gateway is False  # VPC endpoints, no internet egress, unless asked


def test_model_is_immutable():
    cfg = parse_stack_config(MINIMAL, "dev")
    with pytest.raises(ValidationError, match="frozen"):
        cfg.regions = ("us-west-2",)  # type: ignore[misc]
    with pytest.raises(ValidationError, match="frozen"):
        cfg.fleets["gpu1"].max_instances = 99  # type: ignore[misc]


BAD_CASES = [
    pytest.param({"regions": ["us-east-9"]}, ["mlfleet:regions[0]", "'us-east-9'", "not an AWS region"], id="unknown-region"),
    pytest.param({"regions": []}, ["mlfleet:regions", "at least 1"], id="empty-region-list"),
    pytest.param({"regions": ["us-east-1", "us-west-2", "us-east-1"]}, ["mlfleet:regions", "us-east-1 more than once"], id="duplicate-regions"),
    pytest.param({"fleets": {"gpu1": {"maxInstances": 2, "instanceTypes": ["m5.xlarge"]}}},
                 ["mlfleet:fleets.gpu1.instanceTypes[0]", "'m5.xlarge'", "not a GPU instance type"], id="type-without-gpu"),
    pytest.param({"fleets": {"gpu1": {"maxInstances": 2, "instanceTypes": ["g5.2xlarg"]}}},
                 ["'g5.2xlarg'", "did you mean g5.2xlarge"], id="misspelt-type"),
    pytest.param({"fleets": {"gpu1": {"maxInstances": 2, "minInstances": 3}}},
                 ["mlfleet:fleets.gpu1", "minInstances (3) is above maxInstances (2)"], id="min-above-max"),
    pytest.param({"fleets": {"gpu1": {"maxInstances": 0}}}, ["mlfleet:fleets.gpu1.maxInstances", "greater than 0", "got 0"], id="zero-cap"),
    pytest.param({"fleets": {"gpu1": {"maxInstances": -3}}}, ["mlfleet:fleets.gpu1.maxInstances", "got -3"], id="negative-cap"),
    pytest.param({"maxHourlyUsd": "0"}, ["mlfleet:maxHourlyUsd", "greater than 0", "got '0'"], id="zero-dollar-cap"),
    pytest.param({"maxHourlyUsd": "-5"}, ["mlfleet:maxHourlyUsd", "got '-5'"], id="negative-dollar-cap"),
    pytest.param({"maxHourlyUsd": None}, ["mlfleet:maxHourlyUsd: required key is not set"], id="missing-dollar-cap"),
    pytest.param({"regionz": ["us-east-1"]}, ["mlfleet:regionz: unknown key (did you mean mlfleet:regions?)"], id="misspelt-key"),
    pytest.param({"colour": "blue"}, ["mlfleet:colour: unknown key"], id="unknown-key"),
    pytest.param({"fleets": {"gpu1": {"maxInstances": 2, "maxInstance": 3}}},
                 ["mlfleet:fleets.gpu1.maxInstance: unknown key (did you mean maxInstances?)"], id="misspelt-nested-key"),
    pytest.param({"fleets": {"gpu1": {"maxInstanses": 2}}},
                 ["1 configuration error", "mlfleet:fleets.gpu1.maxInstanses: unknown key (did you mean maxInstances?)"],
                 id="misspelt-required-nested-key-is-one-error"),
    pytest.param({"networks": {"us-east-1": {"vpcID": "vpc-12345678", "subnetIds": ["subnet-12345678"]}}},
                 ["1 configuration error", "mlfleet:networks.us-east-1.vpcID: unknown key (did you mean vpcId?)"],
                 id="misspelt-network-key"),
    pytest.param({"networks": {"us-east-1": {"vpcId": "vpc-12345678", "subnetIds": ["subnet-12345678"], "colour": 1}}},
                 ["mlfleet:networks.us-east-1.colour: unknown key"], id="unknown-network-key-without-a-close-one"),
    pytest.param({"fleets": {"gpu1": {"maxInstances": 2, "instanceTypes": ["g5.2xlarge", "g5.12xlarge"]}}},
                 ["mlfleet:fleets.gpu1.instanceTypes", "mixes GPU counts"], id="mixed-gpu-counts"),
    pytest.param({"fleets": {"gpu1": {"maxInstances": 2, "regions": ["us-west-2"]}}},
                 ["mlfleet:fleets.gpu1.regions", "'us-west-2' is not in regions"], id="fleet-region-outside-stack"),
    pytest.param({"fleets": {}}, ["mlfleet:fleets", "at least 1"], id="no-fleet"),
    # Regressions: `regions: []` ran the fleet in every region; a region listed twice counted the fleet twice
    # (worst-case cost, team quotas); a stack region no fleet runs in got a network and cluster for nothing.
    pytest.param({"fleets": {"gpu1": {"maxInstances": 2, "regions": []}}},
                 ["mlfleet:fleets.gpu1.regions: an empty list runs the fleet nowhere"], id="fleet-with-empty-regions"),
    pytest.param({"regions": ["us-east-1", "us-west-2"], "fleets": {"gpu1": {"maxInstances": 2, "regions": ["us-east-1", "us-east-1"]}}},
                 ["mlfleet:fleets.gpu1.regions: lists us-east-1 more than once"], id="fleet-with-a-region-twice"),
    pytest.param({"regions": ["us-east-1", "us-west-2"], "fleets": {"gpu1": {"maxInstances": 2, "regions": ["us-east-1"]}}},
                 ["1 configuration error", "mlfleet:regions: no fleet runs in 'us-west-2'"], id="stack-region-without-a-fleet"),
    pytest.param({"fleets": {"GPU-1": {"maxInstances": 1}}}, ["mlfleet:fleets.GPU-1", "pattern"], id="bad-fleet-name"),
    # A name that does not show (empty, a newline) is quoted: the message names it, on one line.
    pytest.param({"fleets": {"": {"maxInstances": 1}}}, ["mlfleet:fleets['']", "pattern"], id="empty-fleet-name"),
    pytest.param({"fleets": {"gpu\n1": {"maxInstances": 1}}}, ["mlfleet:fleets['gpu\\n1']", "pattern"],
                 id="fleet-name-with-a-newline"),
    pytest.param({"alertEmails": []}, ["mlfleet:alertEmails", "at least 1"], id="no-email"),
    pytest.param({"alertEmails": ["not-an-address"]}, ["mlfleet:alertEmails[0]", "not-an-address"], id="bad-email"),
    # Regression: accepted, then two subscriptions of one topic got the same name (a duplicate URN at `pulumi up`).
    pytest.param({"alertEmails": ["ml@example.com", "ops@example.com", "ml@example.com"]},
                 ["1 configuration error", "mlfleet:alertEmails: lists ml@example.com more than once"], id="same-email-twice"),
    pytest.param({"alertEmails": ["ml@example.com", "ML@Example.com"]},
                 ["mlfleet:alertEmails: lists ml@example.com more than once"], id="same-email-in-another-case"),
    pytest.param({"monthlyBudgetUsd": "0"}, ["mlfleet:monthlyBudgetUsd: 0 is not a budget",
                                             "left unset so that the budget is the worst case the caps allow for a month"],
                 id="zero-budget"),
    pytest.param({"monthlyBudgetUsd": "-100"}, ["mlfleet:monthlyBudgetUsd: -100 is not a budget"], id="negative-budget"),
    pytest.param({"jobMaxAttempts": str(MAX_ATTEMPTS_LIMIT + 5)},
                 [f"mlfleet:jobMaxAttempts: {MAX_ATTEMPTS_LIMIT + 5} is more attempts than a job may ask for",
                  f"at most {MAX_ATTEMPTS_LIMIT}"], id="default-attempts-above-the-job-limit"),
    pytest.param({"jobMaxAttempts": "0"}, ["mlfleet:jobMaxAttempts", "greater than or equal to 1"], id="zero-attempts"),
    pytest.param({"budgetAlertPercents": [50, 25, 75]}, ["mlfleet:budgetAlertPercents", "strictly increasing", "[50, 25, 75]"], id="thresholds-out-of-order"),
    pytest.param({"budgetAlertPercents": [25, 50, 75]}, ["mlfleet:budgetAlertPercents", "must include 100"], id="no-100-percent-alert"),
    pytest.param({"alertEmails": [f"a{i}@example.com" for i in range(11)]}, ["mlfleet:alertEmails", "at most 10"], id="too-many-emails"),
    pytest.param({"budgetAlertPercents": [10, 20, 30, 40, 50, 60, 70, 80, 90, 100]},
                 ["mlfleet:budgetAlertPercents", "11 notifications", "10 AWS Budgets allows"], id="too-many-notifications"),
    pytest.param({"logRetentionDays": "45"}, ["mlfleet:logRetentionDays", "45 is not a CloudWatch Logs retention period"], id="bad-retention"),
    pytest.param({"rootVolumeGiB": "20"}, ["mlfleet:rootVolumeGiB", "greater than or equal to 100"], id="root-volume-too-small"),
    # Regressions: these passed the model and raised a bare ValueError from ipaddress in the network component.
    pytest.param({"vpcCidr": "999.80.0.0/16"}, ["1 configuration error", "mlfleet:vpcCidr: '999.80.0.0/16' is not an IPv4 CIDR block"],
                 id="cidr-octet-above-255"),
    pytest.param({"vpcCidr": "010.80.0.0/16"}, ["mlfleet:vpcCidr: '010.80.0.0/16' is not an IPv4 CIDR block"],
                 id="cidr-with-leading-zeros"),
    pytest.param({"vpcCidr": "10.80.1.0/16"}, ["mlfleet:vpcCidr: '10.80.1.0/16' has host bits set", "write 10.80.0.0/16"],
                 id="cidr-with-host-bits"),
    pytest.param({"vpcCidr": "10.0.0.0/8"}, ["mlfleet:vpcCidr: '10.0.0.0/8' is a /8", "/16 to /22"], id="cidr-too-large"),
    pytest.param({"vpcCidr": "10.80.0.0/24"}, ["mlfleet:vpcCidr: '10.80.0.0/24' is a /24", "/16 to /22"], id="cidr-too-small"),
    pytest.param({"vpcCidr": "10.80.0.0"}, ["mlfleet:vpcCidr: '10.80.0.0' is not an IPv4 CIDR block"], id="cidr-without-prefix"),
    # Regressions: accepted, and then job containers (bridge mode, Docker's default bridge 172.17.0.0/16 on the
    # ECS GPU AMI) took every VPC address for one of the bridge's own and never reached an interface endpoint.
    pytest.param({"vpcCidr": "172.17.0.0/16"}, ["mlfleet:vpcCidr: '172.17.0.0/16' overlaps 172.17.0.0/16",
                                                "Docker's default bridge"], id="cidr-of-the-docker-bridge"),
    pytest.param({"vpcCidr": "172.17.128.0/20"}, ["mlfleet:vpcCidr: '172.17.128.0/20' overlaps 172.17.0.0/16"],
                 id="cidr-inside-the-docker-bridge"),
    pytest.param({"networks": {"us-east-1": {"vpcId": "vpc-1", "subnetIds": ["subnet-12345678"]}}},
                 ["mlfleet:networks.us-east-1.vpcId", "'vpc-1'"], id="bad-vpc-id"),
    pytest.param({"networks": {"eu-west-1": {"vpcId": "vpc-12345678", "subnetIds": ["subnet-12345678"]}}},
                 ["mlfleet:networks: 'eu-west-1' is not in regions"], id="network-for-unlisted-region"),
    pytest.param({"amiIds": {"us-east-1": "ami-xyz"}}, ["mlfleet:amiIds.us-east-1", "'ami-xyz'"], id="bad-ami-id"),
    pytest.param({"slackChannelId": "C01"}, ["slackWorkspaceId and mlfleet:slackChannelId must be set together"], id="half-slack"),
    # Regressions: accepted, and refused by AWS Chatbot at `pulumi up` (or, empty, no Slack without a word).
    pytest.param({"slackWorkspaceId": "ml-team", "slackChannelId": "#ml-alerts"},
                 ["2 configuration error", "mlfleet:slackWorkspaceId: 'ml-team' is not a Slack workspace id",
                  "mlfleet:slackChannelId: '#ml-alerts' is not a Slack channel id"], id="slack-names-instead-of-ids"),
    pytest.param({"slackWorkspaceId": "", "slackChannelId": "C0123456789"},
                 ["1 configuration error", "mlfleet:slackWorkspaceId: '' is not a Slack workspace id"], id="empty-slack-workspace"),
    pytest.param({"reaperScheduleMinutes": "5"}, ["mlfleet:reaperScheduleMinutes", "greater than or equal to 10"], id="reaper-too-often"),
    pytest.param({"costAllocationTags": {"aws:team": "x"}}, ["mlfleet:costAllocationTags", "reserved prefix"], id="reserved-tag"),
    pytest.param({"releaseAfterEmptyMinutes": "-1"}, ["mlfleet:releaseAfterEmptyMinutes", "greater than or equal to 0 (got '-1')"],
                 id="release-delay-negative"),
    # Regressions: a release delay the reaper's idle window outran was accepted (docs/removal.md, "The release
    # delay and the reaper"): at or past window + grace the release never acted first; inside the grace every
    # released machine was first marked idle and mailed about, then removed before the grace it announced.
    pytest.param({"releaseAfterEmptyMinutes": "120"},
                 ["1 configuration error", "mlfleet:releaseAfterEmptyMinutes: 120 is not below "
                  "mlfleet:idleWindowMinutes (90)", "removes it mlfleet:idleGraceMinutes (30) later, at 120 minutes, "
                  "so the release would never act first", "set it below 90"], id="release-delay-past-the-reaper"),
    pytest.param({"releaseAfterEmptyMinutes": "240", "idleWindowMinutes": "60", "idleGraceMinutes": "0"},
                 ["mlfleet:releaseAfterEmptyMinutes: 240 is not below mlfleet:idleWindowMinutes (60)",
                  "at 60 minutes, so the release would never act first", "raise mlfleet:idleWindowMinutes above 240"],
                 id="release-delay-past-the-reaper-without-grace"),
    pytest.param({"releaseAfterEmptyMinutes": "90"},
                 ["mlfleet:releaseAfterEmptyMinutes: 90 is not below mlfleet:idleWindowMinutes (90)",
                  "a release at 90 minutes would remove it inside the grace that mail announced"],
                 id="release-delay-inside-the-reapers-grace"),
    pytest.param({"disruptionBudgetPercent": "150"}, ["mlfleet:disruptionBudgetPercent", "less than or equal to 100 (got '150')"],
                 id="disruption-budget-over-100"),
    pytest.param({"headroomWindowMinutes": "-5"}, ["mlfleet:headroomWindowMinutes", "greater than or equal to 0 (got '-5')"],
                 id="headroom-window-negative"),
    pytest.param({"headroomMaxJobs": "500"}, ["mlfleet:headroomMaxJobs", "less than or equal to 100 (got '500')"],
                 id="headroom-too-many-jobs"),
    pytest.param({"purchaseSearchCpuSeconds": "45"},
                 ["mlfleet:purchaseSearchCpuSeconds", "less than or equal to 30 (got '45')"], id="purchase-search-too-long"),
    pytest.param({"purchaseSearchCpuSeconds": "-1"},
                 ["mlfleet:purchaseSearchCpuSeconds", "greater than or equal to 0 (got '-1')"], id="purchase-search-negative"),
    pytest.param({"natGateway": "maybe"}, ["mlfleet:natGateway", "'maybe'"], id="not-a-boolean"),
    # Regressions: YAML's true/false inside an object was taken as 1/0 (an on-demand instance for `true`).
    pytest.param({"fleets": {"gpu1": {"maxInstances": True}}},
                 ["1 configuration error", "mlfleet:fleets.gpu1.maxInstances: true is a boolean, not a number"],
                 id="boolean-cap"),
    pytest.param({"fleets": {"gpu1": {"maxInstances": 2, "onDemandBaseCapacity": True}}},
                 ["mlfleet:fleets.gpu1.onDemandBaseCapacity: true is a boolean, not a number"], id="boolean-on-demand-base"),
    pytest.param({"fleets": {"gpu1": {"maxInstances": 2, "minInstances": False}}},
                 ["mlfleet:fleets.gpu1.minInstances: false is a boolean, not a number"], id="boolean-floor"),
    pytest.param({"teams": {"nlp": {"weight": True, "maxGpus": True}}},
                 ["2 configuration error", "mlfleet:teams.nlp.weight: true is a boolean, not a number",
                  "mlfleet:teams.nlp.maxGpus: true is a boolean, not a number"], id="boolean-team-numbers"),
    pytest.param({"teams": {"nlp": {"weight": 1, "maxGPUs": 2}}},
                 ["1 configuration error", "mlfleet:teams.nlp.maxGPUs: unknown key (did you mean maxGpus?)"],
                 id="misspelt-team-key"),
    pytest.param({"teams": {"nlp": {"weight": 0}}}, ["mlfleet:teams.nlp.weight", "greater than 0", "got 0"],
                 id="zero-weight"),
    pytest.param({"teams": {"nlp": {"weight": -2}}}, ["mlfleet:teams.nlp.weight", "got -2"], id="negative-weight"),
    pytest.param({"teams": {"nlp": {"maxGpus": 0}}}, ["mlfleet:teams.nlp.maxGpus", "greater than or equal to 1"],
                 id="zero-quota"),
    pytest.param({"teams": {"nlp": {"maxGpus": 3}}},
                 ["mlfleet:teams.nlp.maxGpus: 3 is more GPUs than the fleets hold at their caps (2)"],
                 id="quota-above-the-fleets"),
    pytest.param({"teams": {"NLP": {}}}, ["mlfleet:teams.NLP", "pattern"], id="bad-team-name"),
    pytest.param({"teams": {f"t{i}": {} for i in range(11)}}, ["mlfleet:teams", "at most 10"], id="too-many-teams"),
    pytest.param({"teams": {"vision": {}, "nlp": {}}, "defaultTeam": "visoin"},
                 ["mlfleet:defaultTeam: 'visoin' is not one of mlfleet:teams (nlp, vision); did you mean vision?"],
                 id="misspelt-default-team"),
    pytest.param({"defaultTeam": "nlp"}, ["mlfleet:defaultTeam: 'nlp' is not one of mlfleet:teams (none: set "
                                          "mlfleet:teams first)"], id="default-team-without-teams"),
    pytest.param({"shareHalfLifeMinutes": "-1"}, ["mlfleet:shareHalfLifeMinutes", "greater than or equal to 0"],
                 id="negative-half-life"),
    pytest.param({"aws:region": None}, ["aws:region: required key is not set"], id="no-home-region"),
    pytest.param({"aws:region": "mars-1"}, ["aws:region", "'mars-1' is not an AWS region"], id="bad-home-region"),
    # Regressions: JSON Python will not build raised RecursionError or ValueError out of the loader.
    pytest.param({"regions": "[" * 5000}, ["mlfleet:regions: Input should be a valid tuple (got '[[["],
                 id="json-nested-past-the-stack"),
    pytest.param({"maxHourlyUsd": "[" + "1" * 5000 + "]"}, ["mlfleet:maxHourlyUsd", "(got '[111"],
                 id="json-integer-past-4300-digits"),
]


@pytest.mark.parametrize("changes, expected", BAD_CASES)
def test_bad_values_fail_with_one_message_naming_key_and_value(changes, expected):
    with pytest.raises(ConfigError) as error:
        parse_stack_config(with_values(**changes), "dev")
    message = str(error.value)
    for fragment in expected:
        assert fragment in message, f"{fragment!r} missing from:\n{message}"


def test_teams_parse_with_their_defaults_and_quotas_count_every_fleet_region():
    cfg = parse_stack_config(with_values(
        regions=["us-east-1", "us-west-2"], fleets={"gpu4": {"maxInstances": 2, "instanceTypes": ["g6.12xlarge"]}},
        teams={"vision": {"weight": 3, "maxGpus": 16}, "nlp": {}}, defaultTeam="nlp"), "dev")
    assert cfg.fleet_gpus() == 16  # 2 instances x 4 GPUs in each of two regions
    assert cfg.teams["vision"].weight == 3.0 and cfg.teams["vision"].max_gpus == 16
    assert cfg.teams["nlp"].weight == 1.0 and cfg.teams["nlp"].max_gpus is None
    assert cfg.default_team == "nlp" and cfg.share_half_life_minutes == 60
    assert parse_stack_config(with_values(), "dev").teams == {}


def test_the_teams_parameter_is_what_the_scheduler_reads():
    from components.jobs.jobs import teams_document
    from lambdas.scheduler.planning import Team
    from lambdas.jobs.teams import parse_teams

    cfg = parse_stack_config(with_values(
        fleets={"gpu4": {"maxInstances": 4, "instanceTypes": ["g6.12xlarge"]}},
        teams={"vision": {"weight": 3, "maxGpus": 16}, "nlp": {}}, defaultTeam="nlp", shareHalfLifeMinutes=30), "dev")
    settings = parse_teams(teams_document(cfg))
    assert settings.teams == {"vision": Team(3.0, 16), "nlp": Team(1.0, None)}
    assert (settings.default_team, settings.half_life_s) == ("nlp", 1800.0)
    assert parse_teams(teams_document(parse_stack_config(with_values(), "dev"))).teams == {}


def test_bad_stack_name_is_reported():
    with pytest.raises(ConfigError, match="stack name 'Prod_EU'"):
        parse_stack_config(MINIMAL, "Prod_EU")


def test_every_problem_is_listed_at_once():
    with pytest.raises(ConfigError) as error:
        parse_stack_config(with_values(regions=["us-east-9"], maxHourlyUsd="0", colour="x"), "dev")
    assert "3 configuration error(s)" in str(error.value)


def test_the_count_is_the_number_of_problems_listed_even_when_one_validator_finds_several():
    values = with_values(networks={"eu-west-1": {"vpcId": "vpc-12345678", "subnetIds": ["subnet-12345678"]}},
                         amiIds={"ap-south-1": "ami-12345678"}, slackChannelId="C01")
    with pytest.raises(ConfigError) as error:
        parse_stack_config(values, "dev")
    header, *lines = str(error.value).splitlines()
    assert header == f"stack 'dev' has {len(lines)} configuration error(s):" and len(lines) == 3
    assert all(line.startswith("  - mlfleet:") for line in lines), lines


def test_a_bad_mapping_key_is_named_once_without_pydantics_key_marker():
    # Regression: pydantic's '[key]' location part was shown as `mlfleet:amiIds.us-east1['[key]']`.
    values = with_values(amiIds={"us-east1": "ami-12345678"}, fleets={"GPU1": {"maxInstances": 1}})
    with pytest.raises(ConfigError) as error:
        parse_stack_config(values, "dev")
    assert str(error.value).splitlines()[1:] == [
        "  - mlfleet:fleets.GPU1: String should match pattern '^[a-z][a-z0-9]{0,11}$' (got 'GPU1')",
        "  - mlfleet:amiIds.us-east1: 'us-east1' is not an AWS region mlfleet knows",
    ]


def test_an_mlfleet_key_in_a_misspelt_or_other_namespace_is_an_error():
    # Regression: the loader read only the `mlfleet:` namespace and skipped these, so NAT stayed off without a word.
    values = with_values(**{"mlfeet:natGateway": "true", "MLFleet:reaperDryRun": "true", "aws:idleWindowMinutes": "60"})
    with pytest.raises(ConfigError) as error:
        parse_stack_config(values, "dev")
    assert str(error.value).splitlines() == [
        "stack 'dev' has 3 configuration error(s):",
        "  - mlfeet:natGateway: unknown key (did you mean mlfleet:natGateway?)",
        "  - MLFleet:reaperDryRun: unknown key (did you mean mlfleet:reaperDryRun?)",
        "  - aws:idleWindowMinutes: unknown key (did you mean mlfleet:idleWindowMinutes?)",
    ]
    # Listed with the model's own problems, in one message.
    with pytest.raises(ConfigError, match=r"has 2 configuration error\(s\)"):
        parse_stack_config(with_values(**{"mlfleets:natGateway": "true"}, maxHourlyUsd="0"), "dev")
    # Other keys of other namespaces are Pulumi's and the providers'.
    assert parse_stack_config(with_values(**{"pulumi:tags": "{}", "aws:region": "us-west-2"}), "dev")


# Regression (found by tests/program/test_config_properties.py): the fields the loader fills were also read from
# `mlfleet:` keys, which overwrote them without a word: `mlfleet:environment: prod` in the dev stack file named
# (and tagged) dev's resources prod; `mlfleet:homeRegion` moved the home region away from aws:region.
@pytest.mark.parametrize("key, value, expected", [
    ("mlfleet:environment", "prod", "mlfleet:environment: unknown key (the stack's name is the environment: 'dev')"),
    ("mlfleet:environment", "", "mlfleet:environment: unknown key"),
    ("mlfleet:homeRegion", "us-west-2", "mlfleet:homeRegion: unknown key (aws:region sets the home region)"),
    ("mlfleet:awsProvider", '{"profile": "ml"}', "mlfleet:awsProvider: unknown key (the providers take aws:profile"),
    ("mlfleet:config:environment", "prod", "mlfleet:config:environment: unknown key"),
])
def test_a_field_the_loader_fills_is_not_a_stack_key(key, value, expected):
    with pytest.raises(ConfigError) as error:
        parse_stack_config({**stack_file_config("dev"), key: value}, "dev")
    header, *lines = str(error.value).splitlines()
    assert header == "stack 'dev' has 1 configuration error(s):" and lines[0].startswith(f"  - {expected}"), lines


def test_every_field_the_loader_fills_is_refused_as_a_key():
    from components.config.loader import _FILLED_BY_THE_LOADER
    from components.config.model import DERIVED_FIELDS

    assert set(_FILLED_BY_THE_LOADER) == {StackConfig.model_fields[name].alias for name in DERIVED_FIELDS}


# Regression (found by tests/program/test_config_properties.py): a stack key's own name was shown as written, so a
# newline in it broke the one line of its problem in two (and the count no longer matched the lines) and a trailing
# space did not show. Names inside objects were quoted already (test_bad_values_..., fleet-name-with-a-newline).
@pytest.mark.parametrize("key, expected", [
    ("mlfleet:\n", "mlfleet:'\\n': unknown key"),
    ("mlfleet:", "mlfleet:'': unknown key"),
    ("mlfleet:nat\nGateway", "mlfleet:'nat\\nGateway': unknown key (did you mean mlfleet:natGateway?)"),
    ("mlfleet:natGateway ", "mlfleet:'natGateway ': unknown key (did you mean mlfleet:natGateway?)"),
    ("aws:profile\n", "aws:'profile\\n': not read by mlfleet's per-region providers (did you mean aws:profile?"),
    ("mlfeet:natGateway\n", "mlfeet:'natGateway\\n': unknown key (did you mean mlfleet:natGateway?)"),
    ("ml\nfleet:natGateway", "'ml\\nfleet:natGateway': unknown key (did you mean mlfleet:natGateway?)"),
])
def test_a_key_whose_name_does_not_show_is_quoted_on_its_one_line(key, expected):
    with pytest.raises(ConfigError) as error:
        parse_stack_config({**stack_file_config("dev"), key: "1"}, "dev")
    header, *lines = str(error.value).split("\n")
    assert header == "stack 'dev' has 1 configuration error(s):" and len(lines) == 1, str(error.value)
    assert lines[0].startswith(f"  - {expected}"), lines[0]


def test_the_count_covers_both_limits_of_the_job_functions():
    # Regression: too many fleet-region pairs and instance types were counted as one error and listed as two.
    values = with_values(regions=["us-east-1", "us-east-2", "us-west-2"],
                         fleets={name: {"maxInstances": 1} for name in ("a", "b", "c")})
    with pytest.raises(ConfigError) as error:
        parse_stack_config(values, "dev")
    header, *lines = str(error.value).splitlines()
    assert header == "stack 'dev' has 2 configuration error(s):", str(error.value)
    assert lines == ["  - mlfleet:fleets: 9 fleet-region pairs, at most 8 (the job functions get every fleet in a 4 KB "
                     "Lambda environment)",
                     "  - mlfleet:fleets: 45 instance types over the fleet-region pairs, at most 40 (the job functions "
                     "get every fleet in a 4 KB Lambda environment)"]


@pytest.mark.parametrize("changes", [
    {"releaseAfterEmptyMinutes": "0"},  # at the first run that finds it empty (docs/removal.md)
    {"releaseAfterEmptyMinutes": "89"},  # just before the default 90-minute window
    {"releaseAfterEmptyMinutes": "200", "idleWindowMinutes": "240"},
    {"releaseAfterEmptyMinutes": "29", "idleWindowMinutes": "30", "idleGraceMinutes": "0"},
    {},  # unset: the measured boot time
])
def test_a_release_delay_below_the_reapers_window_is_accepted(changes):
    cfg = parse_stack_config(with_values(**changes), "dev")
    assert cfg.release_after_empty_minutes == (int(changes["releaseAfterEmptyMinutes"]) if changes else None)


def test_a_release_delay_the_reaper_outruns_stops_the_program_before_any_resource():
    mocks = RecordingMocks()
    with pytest.raises(ConfigError, match="mlfleet:releaseAfterEmptyMinutes: 120 is not below"):
        render_config({**stack_file_config("dev"), "mlfleet:releaseAfterEmptyMinutes": "120",
                       "mlfleet:idleWindowMinutes": "60"}, "dev", mocks)
    assert mocks.resources == []


def test_the_default_attempts_may_be_anything_a_job_may_ask_for():
    assert parse_stack_config(with_values(jobMaxAttempts=str(MAX_ATTEMPTS_LIMIT)), "dev").job_max_attempts == MAX_ATTEMPTS_LIMIT


# --- errors reach the user as Pulumi prints them ---------------------------------------------------
# Pulumi's Python program runner (pulumi/pulumi sdk/python/cmd/pulumi-language-python-exec) logs
# `str(e)` for a pulumi.RunError and "Program failed with an unhandled exception" plus the stack trace
# for anything else.

def test_a_config_error_from_the_real_entry_point_is_a_run_error_carrying_the_whole_message():
    bad = with_values(regions=["us-east-9"], colour="x")
    with pytest.raises(pulumi.RunError) as error:
        render_program(lambda: runpy.run_path(str(ROOT / "__main__.py"), run_name="__main__"), "dev", bad)
    assert isinstance(error.value, ConfigError) and isinstance(error.value, ValueError)
    assert str(error.value).splitlines() == [
        "stack 'dev' has 2 configuration error(s):",
        "  - mlfleet:regions[0]: 'us-east-9' is not an AWS region mlfleet knows",
        "  - mlfleet:colour: unknown key",
    ]


def test_a_program_error_is_a_run_error(tmp_path, monkeypatch):
    manifest = tmp_path / "manifest.json"
    manifest.write_text("{not json")
    monkeypatch.setattr(program, "PACKER_MANIFEST", manifest)
    with pytest.raises(pulumi.RunError) as error:
        render_stack("dev")
    assert isinstance(error.value, program.ProgramError) and "make ami ENV=dev" in str(error.value)


# --- stack files read by our own tools -------------------------------------------------------------

BROKEN_YAML = "config:\n  aws:region: us-east-1\n  mlfleet:regions: [us-east-1\n  mlfleet:maxHourlyUsd: 5\n"


def test_a_yaml_syntax_error_in_a_stack_file_is_one_message_with_file_line_and_column(tmp_path):
    path = tmp_path / "Pulumi.dev.yaml"
    path.write_text(BROKEN_YAML)
    with pytest.raises(StackFileError) as error:
        read_stack_file(path)
    assert str(error.value) == (
        f"{path}:4:23: not valid YAML: expected ',' or ']', but got ':' "
        "(while parsing a flow sequence that starts at line 3, column 20)"
    )
    path.write_text("config: [a\n")
    with pytest.raises(StackFileError, match=r"Pulumi\.dev\.yaml:2:1: not valid YAML"):
        read_stack_file(path)
    path.write_text("- just a list\n")
    with pytest.raises(StackFileError, match="a stack file is a mapping whose `config:` maps keys to values"):
        read_stack_file(path)


def test_stack_value_script_prints_the_yaml_error_not_a_traceback(tmp_path):
    """scripts/stack_value.py (Make's reader) with the system Python's needs only: PyYAML."""
    (tmp_path / "scripts").mkdir()
    (tmp_path / "components" / "config").mkdir(parents=True)
    (tmp_path / "stacks").mkdir()
    (tmp_path / "scripts" / "stack_value.py").write_text((ROOT / "scripts" / "stack_value.py").read_text())
    stack_file = ROOT / "components" / "config" / "stack_file.py"
    (tmp_path / "components" / "config" / "stack_file.py").write_text(stack_file.read_text())
    (tmp_path / "stacks" / "Pulumi.dev.yaml").write_text(BROKEN_YAML)
    result = subprocess.run([sys.executable, "scripts/stack_value.py", "dev", "aws:region"], cwd=tmp_path,
                            capture_output=True, text=True, check=False)
    assert result.returncode == 2
    assert result.stderr == ("stacks/Pulumi.dev.yaml:4:23: not valid YAML: expected ',' or ']', but got ':' "
                             "(while parsing a flow sequence that starts at line 3, column 20)\n")
    assert f"```\n{result.stderr}```" in (ROOT / "docs" / "configuration.md").read_text()
    result = subprocess.run([sys.executable, "scripts/stack_value.py", "qa", "aws:region"], cwd=tmp_path,
                            capture_output=True, text=True, check=False)
    assert (result.returncode, result.stderr) == (2, "no stack file stacks/Pulumi.qa.yaml\n")


def test_bad_config_fails_before_any_resource_is_declared():
    mocks = RecordingMocks()
    with pytest.raises(Exception) as error:
        render_config(with_values(fleets={"gpu1": {"maxInstances": 2, "minInstances": 5}}), "dev", mocks)
    assert "minInstances (5) is above maxInstances (2)" in str(error.value)
    assert [r.type for r in mocks.resources if r.type != "pulumi:pulumi:Stack"] == []


# --- Pulumi.yaml's config block is generated from the model ----------------------------------------
# (tests/rules/test_pulumi_project.py checks it, and every stack, against the Pulumi CLI's own rules.)


def _pulumi_type(annotation) -> str:
    """The Pulumi project type a model annotation needs, worked out here independently of the generator."""
    origin = typing.get_origin(annotation)
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if origin in (typing.Union, types.UnionType) and len(args) == 1:
        return _pulumi_type(args[0])
    if origin is typing.Annotated:
        return _pulumi_type(args[0])
    if origin is tuple:
        return "array"
    if origin is dict:
        return "object"
    return {bool: "boolean", int: "integer", str: "string"}[annotation]


def _plain(value):
    return [_plain(v) for v in value] if isinstance(value, tuple) else value


def test_the_generator_restores_a_hand_edited_default():
    text = (ROOT / "Pulumi.yaml").read_text()
    assert render_pulumi_yaml(text) == text
    stale = text.replace("    default: 90\n", "    default: 80\n", 1)
    assert stale != text and render_pulumi_yaml(stale) == text


def test_pulumi_yaml_declares_each_key_with_the_models_type_and_default():
    project = yaml.safe_load((ROOT / "Pulumi.yaml").read_text())
    assert project["name"] == "mlfleet"
    assert project["stackConfigDir"] == "stacks"
    assert project["runtime"]["name"] == "python" and project["runtime"]["options"]["virtualenv"] == "venv"
    declared = project["config"]
    fields = {f.alias: f for f in StackConfig.model_fields.values() if f.alias in stack_keys()}
    unset_by_default = {key for key, f in fields.items() if not f.is_required() and f.get_default() is None}
    assert unset_by_default == {"monthlyBudgetUsd", "slackWorkspaceId", "slackChannelId", "releaseAfterEmptyMinutes",
                                "defaultTeam"}
    assert set(declared) == set(fields) - unset_by_default, "Pulumi.yaml and components/config/model.py disagree"
    for key, declaration in declared.items():
        field = fields[key]
        assert declaration.get("description") == field.description and field.description, key
        if field.is_required():
            assert "default" not in declaration, f"{key} is required: Pulumi must name it when a stack omits it"
        else:
            assert declaration["default"] == _plain(field.get_default(call_default_factory=True)), key
        expected = _pulumi_type(field.annotation)
        if expected == "object":
            assert "type" not in declaration, f"{key}: Pulumi has no object type"
        else:
            assert declaration["type"] == expected, key
        if expected == "array":
            assert declaration["items"]["type"] in ("string", "integer")
    for key in unset_by_default:
        assert f"mlfleet:{key}: {fields[key].description}" in (ROOT / "Pulumi.yaml").read_text()


def test_stacks_disable_the_default_aws_provider():
    for stack in STACKS:
        values = stack_file_config(stack)
        assert json.loads(values["pulumi:disable-default-providers"]) == ["aws"]


def test_pulumi_yaml_and_the_configuration_reference_are_what_the_generator_writes():
    result = subprocess.run([sys.executable, "scripts/render_config.py", "--check"], cwd=ROOT,
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_long_bad_value_is_shown_cut_short_with_its_length():
    """A 500-digit number named in full made the error a screenful; the key and the start of the value say it."""
    values = stack_file_config("dev")
    values["mlfleet:idleWindowMinutes"] = "9" * 500
    with pytest.raises(ConfigError) as error:
        parse_stack_config(values, "dev")
    (line,) = [line for line in str(error.value).splitlines() if "idleWindowMinutes" in line]
    assert line.endswith("'" + "9" * 119 + "... (502 characters))") and len(line) < 250


@pytest.mark.parametrize("key, value, fragment", [
    ("mlfleet:regions", json.dumps(["x" * 5000]), "is not an AWS region"),
    ("mlfleet:defaultTeam", "t" * 5000, "mlfleet:defaultTeam"),
    ("mlfleet:budgetAlertPercents", json.dumps(list(range(1, 2000))), "between 1 and 1000 percent"),
    ("mlfleet:slackChannelId", "c" * 5000, "is not a Slack channel id"),
])
def test_a_long_bad_value_is_cut_short_in_the_validators_own_messages_too(key, value, fragment):
    """The validators' own messages named their value in full: a 5,000-character region was a screenful."""
    values = stack_file_config("dev")
    values[key] = value
    with pytest.raises(ConfigError) as error:
        parse_stack_config(values, "dev")
    (line,) = [line for line in str(error.value).splitlines() if fragment in line]
    assert "characters)" in line and len(line) < 600, line


def test_a_key_given_in_both_forms_is_refused_naming_both():
    """mlfleet:regions and its pre-3.0 form mlfleet:config:regions in one stack: the later won without a word."""
    values = stack_file_config("dev")
    values["mlfleet:config:regions"] = json.dumps(["us-west-2"])
    with pytest.raises(ConfigError) as error:
        parse_stack_config(values, "dev")
    assert "mlfleet:config:regions: the same key as mlfleet:regions; keep one of them" in str(error.value)
