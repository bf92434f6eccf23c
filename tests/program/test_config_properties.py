"""Property: any stack config yields a valid StackConfig or one ConfigError, one line per problem, each naming a key.

The engineering standard: bad input gets one clear error naming the key and the bad value, before any resource
is touched. Each example starts from a committed stack file, as Pulumi hands it to the program (strings, objects
and lists as JSON text), and perturbs it: a value replaced by any JSON (None, booleans, huge, negative and
non-finite numbers, long, unicode and empty strings, lists, nested objects) or by text that is not JSON, a value
deep inside an object changed, dropped or given an unknown key (a fleet's instanceTypes[i], a team, a network, an
AMI id, an assumed role), a key removed, an unknown key added. No other exception may escape parse_stack_config
(TypeError, KeyError, RecursionError, pydantic's ValidationError), and a config it returns is the stack's own.
"""

from __future__ import annotations

import json
import re
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st
from pulumi_harness import STACKS, stack_file_config

from components.config import ConfigError, parse_stack_config, stack_keys
from components.config.loader import AWS_PROVIDER_KEYS, AWS_STATIC_CREDENTIALS

COMMITTED = {stack: stack_file_config(stack) for stack in STACKS}
PLAIN = re.compile(r"[A-Za-z0-9_.:/-]+")
AWS_KEYS = ("region", *AWS_PROVIDER_KEYS, *AWS_STATIC_CREDENTIALS)
# Objects the committed stacks leave out, so that their insides get perturbed too.
SEEDS = {
    "mlfleet:teams": {"nlp": {"weight": 2, "maxGpus": 1}, "vision": {}},
    "mlfleet:networks": {"us-east-1": {"vpcId": "vpc-12345678", "subnetIds": ["subnet-12345678", "subnet-87654321"]}},
    "mlfleet:amiIds": {"us-east-1": "ami-12345678"},
    "mlfleet:budgetAlertPercents": [25, 50, 75, 100],
    "mlfleet:costAllocationTags": {"team": "ml"},
    "aws:assumeRoles": [{"roleArn": "arn:aws:iam::123456789012:role/deployer", "sessionName": "ci"}],
    "aws:allowedAccountIds": ["123456789012"],
    "aws:sharedConfigFiles": ["~/.aws/config"],
}

texts = st.one_of(
    st.text(max_size=20),
    st.sampled_from(["", " ", "true", "false", "null", "NaN", "-1", "0", "1e400", "-inf", "us-east-1", "g5.2xlarge",
                     "ami-12345678", "10.80.0.0/16", "gpu1", "ml@example.com", "\n", "a\nb", "é☃\u0000"]),
    st.integers(200, 6000).map(lambda n: "9" * n),  # past Python's 4,300-digit limit for int(str)
)
numbers = st.one_of(st.integers(-10, 2000), st.integers(), st.integers(10**18, 10**400),
                    st.floats(allow_nan=True, allow_infinity=True))
leaves = st.one_of(st.none(), st.booleans(), numbers, texts)
json_values = st.recursive(
    leaves,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.one_of(texts, st.sampled_from(
        ["maxInstances", "instanceTypes", "weight", "maxGpus", "vpcId", "subnetIds", "roleArn", "us-east-1"])),
        inner, max_size=4)),
    max_leaves=12,
)
not_json = st.one_of(
    st.sampled_from(["[", "{", "[1,", '{"a":', "{'gpu1': 1}", "[us-east-1]", "{gpu1: {maxInstances: 2}}", "[NaN",
                     "{}}", "[]]", '{"a": 1e99999}']),
    st.text(max_size=20).map(lambda t: "[" + t),
    st.text(max_size=20).map(lambda t: "{" + t),
    st.integers(900, 20_000).map(lambda depth: "[" * depth + "]" * depth),  # past json's and the interpreter's stack
    st.integers(4_000, 6_000).map(lambda n: "[" + "1" * n + "]"),
)
raw_values = st.one_of(json_values.map(json.dumps), texts, not_json)
key_names = st.one_of(st.sampled_from(stack_keys()), st.sampled_from(AWS_KEYS),
                      st.sampled_from(["environment", "homeRegion", "awsProvider", "config:regions", "regionz",
                                       "activateCostAllocationTag", ""]),
                      st.text(max_size=12))
namespaces = st.one_of(st.sampled_from(["mlfleet", "aws", "mlfeet", "MLFleet", "pulumi", "kubernetes"]), st.text(max_size=8))
keys = st.one_of(st.tuples(namespaces, key_names).map(":".join), st.text(max_size=12))


def perturb_inside(data: st.DataObject, value: Any) -> Any:
    """`value` (a decoded object or list) with one thing changed at a random depth: replaced, dropped or added."""
    if isinstance(value, dict) and value and data.draw(st.booleans()):
        name = data.draw(st.sampled_from(sorted(value)))
        return {**value, name: perturb_inside(data, value[name])}
    if isinstance(value, list) and value and data.draw(st.booleans()):
        index = data.draw(st.integers(0, len(value) - 1))
        return [*value[:index], perturb_inside(data, value[index]), *value[index + 1:]]
    how = data.draw(st.sampled_from(["replace", "drop", "add"]))
    if how == "drop" and isinstance(value, dict) and value:
        name = data.draw(st.sampled_from(sorted(value)))
        return {k: v for k, v in value.items() if k != name}
    if how == "drop" and isinstance(value, list) and value:
        return value[:-1]
    if how == "add" and isinstance(value, dict):
        return {**value, data.draw(st.one_of(key_names, st.sampled_from(sorted(value) or ["x"]))): data.draw(json_values)}
    if how == "add" and isinstance(value, list):
        return [*value, data.draw(json_values)]
    return data.draw(json_values)


@st.composite
def documents(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    """A committed stack's raw values, seeded with the optional objects and perturbed one to four times."""
    stack = draw(st.sampled_from(STACKS))
    values = dict(COMMITTED[stack])
    for key in draw(st.lists(st.sampled_from(sorted(SEEDS)), unique=True, max_size=3)):
        values[key] = json.dumps(SEEDS[key])
    data = draw(st.data())
    for _ in range(draw(st.integers(1, 4))):
        how = draw(st.sampled_from(["inside", "inside", "replace", "remove", "add"]))
        if how == "inside":
            key = draw(st.sampled_from(sorted(values)))
            try:
                decoded = json.loads(values[key])
            except (ValueError, RecursionError):
                decoded = values[key]
            values[key] = json.dumps(perturb_inside(data, decoded)) if isinstance(decoded, (dict, list)) \
                else draw(raw_values)
        elif how == "replace":
            values[draw(st.sampled_from(sorted(values)))] = draw(raw_values)
        elif how == "remove":
            values.pop(draw(st.sampled_from(sorted(values))), None)
        else:
            values[draw(keys)] = draw(raw_values)
    return stack, values


def key_pattern(values: dict[str, Any]) -> re.Pattern[str]:
    """A line of the error starts with a key: one of the model's (a required one may be missing) or one the
    stack wrote (an unknown key, a misspelt namespace), followed by its path, `:` or a space."""
    named = {f"mlfleet:{k}" for k in stack_keys()} | {f"aws:{k}" for k in AWS_KEYS}
    for key in values:
        namespace, _, name = key.partition(":")
        name = name.removeprefix("config:")
        # As written when every character shows, else quoted: the name (mlfleet:'natGateway '), or the whole key.
        named |= {f"{namespace}:{name!r}", repr(key)}
        if PLAIN.fullmatch(key):
            named |= {key, f"{namespace}:{name}"}
    alternatives = "|".join(re.escape(k) for k in sorted(named, key=len, reverse=True))
    return re.compile(rf"  - (?:{alternatives})(?=[:.\[ ])")


def check(stack: str, values: dict[str, Any]) -> None:
    try:
        config = parse_stack_config(values, stack)
    except ConfigError as error:
        header, *lines = str(error).split("\n")
        assert header == f"stack {stack!r} has {len(lines)} configuration error(s):", str(error)
        starts_with_key = key_pattern(values)
        for line in lines:
            assert starts_with_key.match(line), f"a line names no key of the stack:\n{line}\nin:\n{error}"
        return
    # Accepted: it is this stack's config, and every key it was given is one the model reads.
    assert config.environment == stack and config.home_region == values["aws:region"].strip()
    for key in values:
        namespace, _, name = key.partition(":")
        if namespace == "mlfleet":
            assert name.removeprefix("config:") in stack_keys(), f"{key} accepted"


# Found by this test (tests/program/test_config.py pins each with its message): a field the loader fills, read from
# an `mlfleet:` key, overwrote it without a word; a newline in a key's name broke its line of the error in two.
@example(document=("dev", {**COMMITTED["dev"], "mlfleet:environment": "prod"}))
@example(document=("prod", {**COMMITTED["prod"], "mlfleet:homeRegion": "us-west-2"}))
@example(document=("dev", {**COMMITTED["dev"], "mlfleet:\n": "null"}))
@settings(max_examples=300, deadline=None)  # about 1.3 s; CI derandomizes (tests/conftest.py)
@given(documents())
def test_any_stack_config_is_valid_or_one_error_naming_each_key(document):
    check(*document)
