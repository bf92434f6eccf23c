"""The stack's `aws:` keys reach mlfleet's per-region providers, or are refused.

Pulumi's explicit providers read no stack config (pulumi/pulumi-aws#1307 and #3259, "by design"), and every
committed stack disables the default provider. Before this, `aws:profile: prod` or `aws:allowedAccountIds`
were ignored without a word: the program deployed with the shell's credentials to whichever account they
reached. Now the settings the providers can take are passed to each of them, and any other `aws:` key is an
error naming it.
"""

from __future__ import annotations

import inspect
import json

import pulumi_aws
import pytest

from components.config import ConfigError, parse_stack_config
from pulumi_harness import render_config, stack_file_config

ACCOUNT = "012345678901"
ROLE = f"arn:aws:iam::{ACCOUNT}:role/mlfleet-deployer"
SETTINGS = {
    "aws:profile": "ml-prod",
    "aws:allowedAccountIds": f'["{ACCOUNT}"]',
    "aws:assumeRoles": f'[{{"roleArn": "{ROLE}", "sessionName": "mlfleet", "externalId": "ml-infra"}}]',
}


def test_the_settings_become_the_provider_s_arguments():
    cfg = parse_stack_config({**stack_file_config("prod"), **SETTINGS}, "prod")
    assert cfg.aws_provider.provider_args() == {
        "profile": "ml-prod",
        "allowed_account_ids": [ACCOUNT],
        "assume_roles": [{"role_arn": ROLE, "session_name": "mlfleet", "external_id": "ml-infra"}],
    }


def test_a_stack_without_them_gives_the_provider_nothing_more():
    assert parse_stack_config(stack_file_config("dev"), "dev").aws_provider.provider_args() == {}


def test_every_regional_provider_carries_them():
    providers = [r for r in render_config({**stack_file_config("prod"), **SETTINGS}, "prod").resources
                 if r.type == "pulumi:providers:aws"]
    assert len(providers) >= 2  # the home region's, the fleets', the billing metrics' (us-east-1)
    for provider in providers:
        # A provider's inputs other than strings go to the engine as JSON text (as "skipRegionValidation": "true").
        inputs = {k: json.loads(v) if k != "profile" else v for k, v in provider.inputs.items()
                  if k in ("profile", "allowedAccountIds", "assumeRoles")}
        assert inputs == {"profile": "ml-prod", "allowedAccountIds": [ACCOUNT],
                          "assumeRoles": [{"roleArn": ROLE, "sessionName": "mlfleet", "externalId": "ml-infra"}]}, provider.name


def test_the_arguments_are_the_aws_provider_s_own():
    """Mocks take any name: the names are checked against the installed pulumi_aws (the provider's schema)."""
    cfg = parse_stack_config({**stack_file_config("prod"), **SETTINGS,
                              "aws:sharedConfigFiles": '["/etc/aws/config"]',
                              "aws:sharedCredentialsFiles": '["/etc/aws/credentials"]'}, "prod")
    args = cfg.aws_provider.provider_args()
    provider_parameters = inspect.signature(pulumi_aws.ProviderArgs.__init__).parameters
    role_parameters = inspect.signature(pulumi_aws.ProviderAssumeRoleArgs.__init__).parameters
    assert set(args) <= set(provider_parameters)
    assert len(args) == 5
    for role in args["assume_roles"]:
        assert set(role) <= set(role_parameters)


@pytest.mark.parametrize("values, expected", [
    ({"aws:allowedAccountIds": "[12345678901]"}, "aws:allowedAccountIds: 12345678901: write each account id as a string"),
    ({"aws:allowedAccountIds": '["1234"]'}, "aws:allowedAccountIds: '1234': an AWS account id is 12 digits"),
    ({"aws:allowedAccountIds": f'["{ACCOUNT}"]', "aws:forbiddenAccountIds": '["123456789012"]'},
     "aws:forbiddenAccountIds: set together with aws:allowedAccountIds"),
    ({"aws:assumeRoles": '[{"roleArn": "mlfleet-deployer"}]'},
     "aws:assumeRoles[0].roleArn: 'mlfleet-deployer' is not an IAM role ARN"),
    ({"aws:assumeRoles": f'[{{"roleArn": "{ROLE}", "sessionName": "ml fleet"}}]'}, "aws:assumeRoles[0].sessionName"),
    ({"aws:assumeRoles": f'[{{"roleArn": "{ROLE}", "durationSeconds": 3600}}]'}, "aws:assumeRoles[0].durationSeconds: unknown key"),
    ({"aws:profile": ""}, "aws:profile: String should have at least 1 character"),
    ({"aws:accessKey": "AKIAIOSFODNN7EXAMPLE"}, "aws:accessKey: mlfleet's per-region providers do not read keys"),
    ({"aws:secretKey": "x"}, "aws:secretKey: mlfleet's per-region providers do not read keys"),
    ({"aws:defaultTags": '{"tags": {"team": "ml"}}'}, "aws:defaultTags: not read by mlfleet's per-region providers"),
    ({"aws:profil": "ml-prod"}, "aws:profil: not read by mlfleet's per-region providers (did you mean aws:profile?"),
])
def test_a_bad_or_unread_aws_key_is_one_error_naming_it(values, expected):
    with pytest.raises(ConfigError) as error:
        parse_stack_config({**stack_file_config("dev"), **values}, "dev")
    assert "1 configuration error(s)" in str(error.value)
    assert expected in str(error.value)
