"""A stack rendered under the mocks (tests/pulumi_harness.py), as the plain resources the rules take."""

from __future__ import annotations

from pulumi_harness import Rendering, _region_of

import rules


def rendered_resources(rendering: Rendering) -> list[rules.Resource]:
    """Cloud resources with their region and their provider's default tags, as CrossGuard would see them."""
    providers = {r.name: r.inputs for r in rendering.of_type("pulumi:providers:aws")}
    resources = []
    for recorded in rendering.resources:
        if not recorded.type.startswith("aws:"):
            continue  # components and providers carry no AWS properties
        region = _region_of(recorded.provider)
        provider_inputs = providers.get(f"aws-{region}", {})
        resources.append(rules.Resource(
            type=recorded.type,
            name=recorded.name,
            props=recorded.inputs,
            region=region,
            default_tags=rules.provider_default_tags(provider_inputs),
            urn=recorded.name,
        ))
    return resources
