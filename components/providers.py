"""One explicit AWS provider per region, carrying the environment's default tags."""

from __future__ import annotations

from collections.abc import Mapping

import pulumi
import pulumi_aws as aws


def regional_provider(region: str, tags: Mapping[str, str]) -> aws.Provider:
    return aws.Provider(f"aws-{region}", region=region, default_tags={"tags": dict(tags)})


def regional_providers(regions, tags: Mapping[str, str]) -> dict[str, aws.Provider]:
    return {region: regional_provider(region, tags) for region in dict.fromkeys(regions)}


def with_provider(provider: aws.Provider) -> pulumi.ResourceOptions:
    return pulumi.ResourceOptions(providers=[provider])
