"""Write what the config model (components/config/model.py) is the one source of: the `config:` block
of Pulumi.yaml (components/config/project.py) and docs/configuration.md.

    python scripts/render_config.py          # rewrite both files
    python scripts/render_config.py --check  # exit 1 if either committed file is stale

The error examples on the page are produced here, by the loader itself, so they are real output.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from components.config import ConfigError, StackConfig, parse_stack_config, stack_keys  # noqa: E402 - after the sys.path line above
from components.config.project import declarations, render_pulumi_yaml, required_keys, undeclared_keys  # noqa: E402

# What the Pulumi CLI prints for the two rules it checks itself, from its source (config.go,
# missingStackConfigurationKeysError and validateStackConfigValue); tests/rules/test_pulumi_project.py
# checks these lines against the port of that source.
PULUMI_MISSING_KEY = "Stack 'dev' is missing configuration value 'maxHourlyUsd'"
PULUMI_WRONG_TYPE = "Stack 'dev' with configuration key 'maxHourlyUsd' must be of type 'integer'"

# A stack with mistakes the model catches; the page shows the message the program stops with.
BAD_STACK = """\
config:
  aws:region: us-east-1
  mlfleet:regions: [us-east-1]
  mlfleet:fleets:
    gpu1: {maxInstanses: 4, instanceTypes: [g5.2xlarg]}
  mlfleet:alertEmails: [ml-infra@example.com]
  mlfleet:maxHourlyUsd: 5
  mlfleet:monthlyBudgetUsd: 0
  mlfleet:jobMaxAttempts: 15"""

HEADER = """# Configuration reference

A stack file `stacks/Pulumi.<env>.yaml` sets `aws:region` (the home region) and `mlfleet:` keys. The
stack name is the environment name. Every key's type, default and description lives in one place, the
config model (`components/config/model.py`). This page and the `config:` block of `Pulumi.yaml` are
generated from it by `python scripts/render_config.py`; a test fails when either is stale.

## How defaults reach the program

Pulumi reads `Pulumi.yaml` before it runs the program. A key declared there with a `default` that a
stack does not set gets that default; a key declared without one is required, and Pulumi stops a stack
that leaves it out before the program runs. So `Pulumi.yaml` declares:

- the required keys without a default: {required};
- every key with a default, with the model's default (the program receives exactly what the model
  would have filled in: a test renders every stack from the config Pulumi would hand it);
- not the keys that are unset by default, because a declaration without a default would make them
  required: {undeclared}. A stack may set them; the model validates them.

Pulumi checks the declared types (`string`, `integer`, `boolean`, `array` with its `items`; a boolean as
written: `true` or `false`, not `True`). Object-valued keys have no type in `Pulumi.yaml`, because Pulumi
has none for objects: {objects}. The program
then validates the whole stack at once: unknown or misspelt keys (nested ones too), ranges, and the
rules between keys below. `tests/rules/pulumi_project.py` ports the CLI's rules from its source and runs
them on every stack in `make test`.

| key | default | what |
|---|---|---|
"""

ERRORS = """
## What an error looks like

Pulumi itself stops a stack that leaves out a required key, or sets a declared key to a value of the
wrong type:

```
{missing}
{wrong_type}
```

The program stops a stack with any other mistake before it declares a resource, with one message that
names every bad key and value. For example, a stack with

```yaml
{bad_stack}
```

stops with

```
{model_error}
```

A stack file that is not valid YAML, read by mlfleet's own tools (`make ami`, the tests), is one line
with the file, line and column:

```
stacks/Pulumi.dev.yaml:4:23: not valid YAML: expected ',' or ']', but got ':' (while parsing a flow sequence that starts at line 3, column 20)
```
"""

FOOTER = """
Limits the model enforces beyond types: fleet `minInstances <= maxInstances` and
`onDemandBaseCapacity <= maxInstances`; a fleet's instance types must be GPU types in the instance
catalog (`lambdas/common/data/instance_catalog.json`) with a price in each of its regions; a fleet's
`regions`, when given, not empty and without repeats, and every stack region runs at least one fleet;
`budgetAlertPercents` strictly increasing, between 1 and 1000, including 100 (the alert that stops job
admission), and at most ten Budgets notifications with the forecast one; at most ten `alertEmails`, each
once; `logRetentionDays` one of CloudWatch Logs' periods; `reaperScheduleMinutes` 10 to 15;
`releaseAfterEmptyMinutes`, when set, below `idleWindowMinutes` (docs/removal.md, "The release delay and the
reaper": at or past the window plus `idleGraceMinutes` the reaper always removes an empty machine first, and
inside the grace the release removes every machine the reaper has just marked and mailed about before the
grace that mail announced; 0 and unset are always below it); `jobMaxAttempts` at most what a job spec may ask for (`MAX_ATTEMPTS_LIMIT` in `lambdas/jobs/spec.py`);
`vpcCidr` an IPv4 block of /16 to /22 without host bits; `slackWorkspaceId` and `slackChannelId`
together, as the ids AWS Chatbot takes; `networks` and `amiIds` only for regions the stack lists;
without `natGateway`, `jobImage` from ECR Public or the region's own ECR (what a region without internet
egress can pull, docs/network.md). A number inside `fleets` or `teams` is a number, never `true`/`false`.

Keys of other namespaces: `aws:region` is required; `pulumi:disable-default-providers: ["aws"]` is set
in every committed stack so that no resource can silently use an unconfigured provider (mlfleet
declares one explicit provider per region). An mlfleet key under a misspelt namespace (`mlfeet:`) or
another one (`aws:natGateway`) is an unknown key, not ignored. The model's `environment`, `homeRegion` and
`awsProvider` are no `mlfleet:` keys either: the stack's name, `aws:region` and the `aws:` keys below give
them. A key whose name does not show (empty, a newline, a trailing space) is quoted in the error:
`mlfleet:'natGateway '`.

Explicit providers read no stack config (pulumi/pulumi-aws#1307), so mlfleet passes these `aws:` keys to
each of its providers itself: `aws:profile`, `aws:allowedAccountIds` or `aws:forbiddenAccountIds`
(account ids as quoted strings), `aws:assumeRoles` (`[{roleArn, sessionName, externalId}]`),
`aws:sharedConfigFiles` and `aws:sharedCredentialsFiles`. Any other `aws:` key would be read by no
provider, and is an error rather than ignored. Static keys (`aws:accessKey`, `aws:secretKey`, `aws:token`)
are refused: give credentials in the environment (`AWS_PROFILE`, SSO, a CI role through OIDC). Setting
`aws:allowedAccountIds` to the environment's account makes a deploy with the wrong credentials stop
before it changes anything:

```yaml
config:
  aws:region: us-east-1
  aws:allowedAccountIds: ["012345678901"]
```
"""


def _default(field) -> str:
    if field.is_required():
        return "**required**"
    value = field.get_default(call_default_factory=True)
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, tuple):
        value = list(value)
    return f"`{value}`"


def model_error_example() -> str:
    """The loader's message for BAD_STACK, given as Pulumi hands config over (strings, objects as JSON)."""
    config = yaml.safe_load(BAD_STACK)["config"]
    values = {key: value if isinstance(value, str) else json.dumps(value) for key, value in config.items()}
    try:
        parse_stack_config(values, "dev")
    except ConfigError as error:
        return str(error)
    raise AssertionError("BAD_STACK is valid: the example shows no error")


def render() -> str:
    quoted = ", ".join(f"`{key}`" for key in required_keys())
    rows = []
    for field in StackConfig.model_fields.values():
        if field.alias in stack_keys():
            rows.append(f"| `mlfleet:{field.alias}` | {_default(field)} | {field.description} |")
    header = HEADER.format(required=quoted,
                           undeclared=", ".join(f"`{key}`" for key in undeclared_keys()),
                           objects=", ".join(f"`{key}`" for key, d in declarations().items() if "type" not in d))
    errors = ERRORS.format(missing=PULUMI_MISSING_KEY, wrong_type=PULUMI_WRONG_TYPE, bad_stack=BAD_STACK,
                           model_error=model_error_example())
    return header + "\n".join(rows) + "\n" + errors + FOOTER


def main() -> int:
    pulumi_yaml, reference = ROOT / "Pulumi.yaml", ROOT / "docs" / "configuration.md"
    targets = {pulumi_yaml: render_pulumi_yaml(pulumi_yaml.read_text()), reference: render()}
    if "--check" in sys.argv:
        stale = [str(path.relative_to(ROOT)) for path, text in targets.items() if path.read_text() != text]
        if stale:
            print(f"{' and '.join(stale)} stale: run python scripts/render_config.py")
        return 1 if stale else 0
    for path, text in targets.items():
        path.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
