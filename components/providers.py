"""One explicit AWS provider per region, carrying the environment's default tags and the stack's `aws:`
credential and account settings (explicit providers read no stack config: components/config/model.py,
AwsProviderConfig)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pulumi
import pulumi_aws as aws


def regional_provider(region: str, tags: Mapping[str, str], settings: Mapping[str, Any] | None = None) -> aws.Provider:
    """`settings`: keyword arguments of aws.Provider from the stack (AwsProviderConfig.provider_args)."""
    settings = dict(settings or {})
    if "assume_roles" in settings:
        # As typed args: a provider's object inputs go to the engine as JSON, and a plain dict would keep its
        # snake_case keys there, where the provider reads roleArn (tests/program/test_aws_provider_config.py).
        settings["assume_roles"] = [aws.ProviderAssumeRoleArgs(**role) for role in settings["assume_roles"]]
    return aws.Provider(f"aws-{region}", region=region, default_tags={"tags": dict(tags)}, **settings)


def regional_providers(regions, tags: Mapping[str, str], settings: Mapping[str, Any] | None = None) -> dict[str, aws.Provider]:
    return {region: regional_provider(region, tags, settings) for region in dict.fromkeys(regions)}


def with_provider(provider: aws.Provider) -> pulumi.ResourceOptions:
    return pulumi.ResourceOptions(providers=[provider])
