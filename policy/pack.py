"""CrossGuard policies over the pure rules in rules.py: adapt the arguments, report the violations.

Imported by __main__.py (which serves the pack) and by tests/policy (which call each policy's validate
with CrossGuard's own argument types). Runs from the policy/ folder, hence the top-level imports.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pulumi_policy import (
    EnforcementLevel,
    PolicyConfigSchema,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)
from pulumi_policy import proxy
from pulumi_policy.proxy import UNKNOWN_STRING_VALUE, UnknownValueError

import rules

MANDATORY = EnforcementLevel.MANDATORY
ADVISORY = EnforcementLevel.ADVISORY


# The sentinels CrossGuard puts where a preview value is unknown (its proxies raise on reading them).
UNKNOWN_SENTINELS = frozenset({
    proxy.UNKNOWN_BOOLEAN_VALUE, proxy.UNKNOWN_NUMBER_VALUE, proxy.UNKNOWN_STRING_VALUE, proxy.UNKNOWN_ARRAY_VALUE,
    proxy.UNKNOWN_ASSET_VALUE, proxy.UNKNOWN_ARCHIVE_VALUE, proxy.UNKNOWN_OBJECT_VALUE,
})


def plain(value: Any) -> Any:
    """CrossGuard's property proxies as plain dicts and lists, unknown preview values as rules.UNKNOWN.

    The proxies raise on reading an unknown value; their `__target` key holds the raw values instead.
    """
    if isinstance(value, (proxy._DictProxy, proxy._ListProxy)):
        value = value["__target"]
    if isinstance(value, Mapping):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, str):
        return [plain(item) for item in value]
    if isinstance(value, str) and value in UNKNOWN_SENTINELS:
        return rules.UNKNOWN
    return value


def _resource(resource_type: str, name: str, props: Mapping[str, Any], provider: Any, urn: str) -> rules.Resource:
    provider_props = plain(provider.props) if provider is not None else {}
    region = provider_props.get("region")
    return rules.Resource(
        type=resource_type,
        name=name,
        props=plain(props),
        region=region if isinstance(region, str) else None,
        default_tags=rules.provider_default_tags(provider_props),
        urn=urn,
    )


def _unknown_to_crossguard(error: rules.UnknownValue) -> UnknownValueError:
    return UnknownValueError(UNKNOWN_STRING_VALUE, error.path.split("."))


def resource_policy(name: str, rule: Callable[..., list[str]], level: EnforcementLevel,
                    config_schema: PolicyConfigSchema | None = None,
                    configure: Callable[[Mapping[str, Any]], dict[str, Any]] | None = None) -> ResourceValidationPolicy:
    def validate(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
        resource = _resource(args.resource_type, args.name, args.props, args.provider, args.urn)
        options = configure(args.get_config()) if configure else {}
        try:
            problems = rule(resource, **options)
        except rules.UnknownValue as error:
            raise _unknown_to_crossguard(error) from error
        for problem in problems:
            report_violation(f"{args.resource_type} {args.name}: {problem}", args.urn)

    return ResourceValidationPolicy(name=name, description=(rule.__doc__ or name).strip().splitlines()[0],
                                    validate=validate, enforcement_level=level, config_schema=config_schema)


def stack_policy(name: str, rule: Callable[..., list[rules.StackViolation]], level: EnforcementLevel,
                 config_schema: PolicyConfigSchema | None = None,
                 configure: Callable[[Mapping[str, Any]], dict[str, Any]] | None = None) -> StackValidationPolicy:
    def validate(args: StackValidationArgs, report_violation: ReportViolation) -> None:
        resources = [_resource(r.resource_type, r.name, r.props, r.provider, r.urn) for r in args.resources]
        options = configure(args.get_config()) if configure else {}
        try:
            violations = rule(resources, **options)
        except rules.UnknownValue as error:
            raise _unknown_to_crossguard(error) from error
        for message, resource in violations:
            report_violation(message, resource.urn if resource else None)

    return StackValidationPolicy(name=name, description=(rule.__doc__ or name).strip().splitlines()[0],
                                 validate=validate, enforcement_level=level, config_schema=config_schema)


# The CLI validates each policy's config with gojsonschema against {"type": "object", "properties": ...}
# (pulumi/pulumi pkg/resource/analyzer/config.go, validatePolicyConfig, convertSchema); the keywords here are
# JSON Schema draft 4's, which it reads with or without a $schema. tests/policy/cli_config.py checks them.
CEILING_SCHEMA = PolicyConfigSchema(properties={
    "maxSizeCeiling": {"type": "integer", "minimum": 1, "default": rules.DEFAULT_MAX_SIZE_CEILING,
                       "description": "Largest maxSize a fleet ASG of no listed fleet may declare (the stack's "
                                      "largest fleet maxInstances: scripts/policy_config.py)"},
    "fleetCeilings": {"type": "object", "additionalProperties": {"type": "integer", "minimum": 1}, "default": {},
                      "description": "Largest maxSize of each fleet's ASGs, by fleet name (the stack's maxInstances "
                                     "of each fleet: scripts/policy_config.py)"},
})
BUDGET_SCHEMA = PolicyConfigSchema(properties={
    "actualPercents": {"type": "array", "items": {"type": "integer", "minimum": 1},
                       "default": list(rules.QUARTER_PERCENTS),
                       "description": "Percents of the budget that need an ACTUAL notification (CI passes the "
                                      "stack's budgetAlertPercents: scripts/policy_config.py)"},
})

def fleet_ceilings(config: Mapping[str, Any]) -> dict[str, Any]:
    """fleet_capped's options from the policy's config (JSON numbers reach the pack as floats)."""
    return {"ceiling": int(config.get("maxSizeCeiling", rules.DEFAULT_MAX_SIZE_CEILING)),
            "fleet_ceilings": {fleet: int(cap) for fleet, cap in (config.get("fleetCeilings") or {}).items()}}


POLICIES = [
    resource_policy("imdsv2-required", rules.imdsv2_required, MANDATORY),
    resource_policy("ebs-volumes-encrypted", rules.volumes_encrypted, MANDATORY),
    resource_policy("no-public-ips", rules.no_public_ips, MANDATORY),
    resource_policy("sns-topics-encrypted", rules.topics_encrypted, MANDATORY),
    resource_policy("sqs-queues-encrypted", rules.queues_encrypted, MANDATORY),
    resource_policy("dynamodb-tables-kms-encrypted", rules.tables_encrypted_with_kms, MANDATORY),
    resource_policy("fleet-asg-capped", rules.fleet_capped, MANDATORY, CEILING_SCHEMA, fleet_ceilings),
    resource_policy("required-tags", rules.required_tags, MANDATORY),
    resource_policy("dev-fleets-spot-only", rules.dev_without_on_demand, ADVISORY),
    stack_policy("fleet-idle-alarm", rules.fleets_have_idle_alarms, MANDATORY),
    stack_policy("fleet-reaper", rules.fleets_have_reapers, MANDATORY),
    stack_policy("environment-budget", rules.environment_has_budget, MANDATORY, BUDGET_SCHEMA,
                 lambda c: {"actual_percents": tuple(c.get("actualPercents", rules.QUARTER_PERCENTS))}),
]
