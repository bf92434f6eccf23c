"""The policy pack's config for one stack, derived from its stack file: `python scripts/policy_config.py dev`.

The pack's mandatory policies take their limits from their config (policy/pack.py): `fleet-asg-capped`'s
`fleetCeilings` and `maxSizeCeiling`, `environment-budget`'s `actualPercents`. Their defaults (64 instances,
25/50/75/100 %) refused stacks the config model accepts (maxInstances up to 1000; any increasing
budgetAlertPercents with 100), so the values come from the stack itself, through the model (the program's own
defaults included):
- `fleetCeilings`: each fleet's `maxInstances`, by fleet name: the cap its groups declare as their maxSize, in
  every region it runs in (components/compute/fleet.py). The pack holds each group to the cap of its own fleet
  (its mlfleet:fleet tag and its name mlfleet-<env>-<fleet>: policy/rules.py fleets_named_by), so a group above
  what the stack file, reviewed in the pull request, allows its fleet is refused, even when another fleet of
  the stack may go higher. Raising a fleet's cap is one change, to the stack file.
- `maxSizeCeiling`: the largest `maxInstances` of the stack's fleets, for a group of no listed fleet (before
  `fleetCeilings` it was the only limit, so a fleet at 4 could declare 64 when another fleet was at 64).
- `actualPercents`: the stack's `budgetAlertPercents`, each of which must reach a subscriber as an ACTUAL alert.

Prints the JSON the Pulumi CLI takes with `--policy-pack-config` (one file per `--policy-pack`, in the same
order: pulumi/pulumi pkg/cmd/pulumi/operations/up.go and preview.go, validatePolicyPackConfig; the file maps a
policy's name to its properties: pkg/resource/analyzer/config.go, parsePolicyPackConfig). The CLI validates
the properties against each policy's schema but ignores a policy name the pack does not have, so
tests/policy/test_policy_config.py checks every name and property here against the pack's own.
CI (.github/workflows), `make preview` and `make up` (mk/policy.mk) pass it; docs/ci.md.

Exits 2 with one message for an unknown stack, a stack file that is not valid YAML or an invalid stack.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

FLEET_CEILING_POLICY, FLEET_CEILING, FLEET_CEILINGS = "fleet-asg-capped", "maxSizeCeiling", "fleetCeilings"
BUDGET_POLICY, BUDGET_PERCENTS = "environment-budget", "actualPercents"


def pack_config(cfg) -> dict:
    """The pack's config for a validated stack (components.config.StackConfig)."""
    return {
        FLEET_CEILING_POLICY: {
            FLEET_CEILINGS: {name: fleet.max_instances for name, fleet in cfg.fleets.items()},
            FLEET_CEILING: max(fleet.max_instances for fleet in cfg.fleets.values()),
        },
        BUDGET_POLICY: {BUDGET_PERCENTS: list(cfg.budget_alert_percents)},
    }


def stack_pack_config(stack: str) -> dict:
    """The pack's config for a committed stack file, read as Pulumi hands it to the program."""
    from components.config import parse_stack_config, read_stack_file, stack_path

    raw = read_stack_file(stack_path(stack))
    values = {key: value if isinstance(value, str) else json.dumps(value) for key, value in raw.items()}
    return pack_config(parse_stack_config(values, stack))


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python scripts/policy_config.py STACK  (prints the policy pack's config for the stack)",
              file=sys.stderr)
        return 2
    try:
        from components.config import ConfigError, StackFileError
    except ImportError as error:
        print(f"{error}: run with the program's virtualenv (make venv, or pulumi install)", file=sys.stderr)
        return 2
    try:
        config = stack_pack_config(argv[0])
    except (ConfigError, StackFileError) as error:
        print(error, file=sys.stderr)
        return 2
    print(json.dumps(config, indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
