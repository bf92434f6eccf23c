"""Read a stack's Pulumi config into the StackConfig model, or fail with one readable error.

ConfigError is a `pulumi.RunError`: Pulumi's Python program runner prints only the message of a RunError
and a traceback for any other exception (pulumi/pulumi sdk/python/cmd/pulumi-language-python-exec:
`except pulumi.RunError as e: pulumi.log.error(str(e))`, then `except Exception:` logs
"Program failed with an unhandled exception" with the stack trace). tests/rules/test_language_host.py
checks it against a port of that handler.
"""

from __future__ import annotations

import difflib
import json
import re
import typing
from collections.abc import Mapping
from typing import Any

import pulumi
from pydantic import BaseModel, ValidationError

from .model import REMOVED_KEYS, Problems, StackConfig, inner_type, removed_key_problem, shown, stack_keys

PROJECT = "mlfleet"


class ConfigError(pulumi.RunError, ValueError):
    """The stack configuration is invalid. The message names every bad key and value.

    Still a ValueError, so callers that caught the config's ValueErrors keep working.
    """


def _decode(raw: Any) -> Any:
    """Pulumi hands config values over as strings; objects and arrays arrive as JSON text."""
    if isinstance(raw, str) and raw[:1] in ("[", "{"):
        try:
            return json.loads(raw)
        except (ValueError, RecursionError):
            # Not JSON (JSONDecodeError), or JSON Python will not build: an integer of more than 4,300
            # digits (ValueError), nesting past the interpreter's stack (RecursionError). The model then
            # names the key and the text.
            return raw
    return raw


# Where the two derived fields come from, for error messages.
_DERIVED_KEYS = {"environment": "stack name", "homeRegion": "aws:region"}
# The `aws:` keys mlfleet's per-region providers take (AwsProviderConfig); `aws:region` is the home region.
AWS_PROVIDER_KEYS = ("profile", "allowedAccountIds", "forbiddenAccountIds", "assumeRoles", "sharedConfigFiles",
                     "sharedCredentialsFiles")
AWS_STATIC_CREDENTIALS = ("accessKey", "secretKey", "token")
# The model's fields the loader fills (model.DERIVED_FIELDS) are not `mlfleet:` keys: where each comes from instead.
_FILLED_BY_THE_LOADER = {
    "environment": lambda stack: f"the stack's name is the environment: {stack!r}",
    "homeRegion": lambda stack: "aws:region sets the home region",
    "awsProvider": lambda stack: f"the providers take {', '.join('aws:' + k for k in AWS_PROVIDER_KEYS)}",
}
_PLAIN = re.compile(r"[A-Za-z0-9_.:/-]+")


def _written(key: str) -> str:
    """A stack key as the file writes it, with a name that is not plain (empty, a newline, a trailing space) quoted,
    as the names inside objects are: the error shows it, and on its one line."""
    namespace, colon, name = key.partition(":")
    if not (colon and _PLAIN.fullmatch(namespace)):
        return repr(key)
    return key if _PLAIN.fullmatch(name) else f"{namespace}:{name!r}"


def _format_location(loc: tuple[Any, ...]) -> str:
    if loc[-1:] == ("[key]",):  # pydantic's marker for a mapping's key (rather than its value): the key is named
        loc = loc[:-1]
    head, *rest = loc or ("(stack)",)
    if head == "awsProvider" and rest:  # an `aws:` key the providers take: named as the stack file has it
        head, *rest = rest
        key = _written(f"aws:{head}")
    else:
        key = _DERIVED_KEYS.get(str(head)) or _written(f"{PROJECT}:{head}")
    for part in rest:
        # A name that is not plain (empty, spaces, a newline) is quoted, so the error shows it.
        key += f"[{part}]" if isinstance(part, int) else f".{part}" if _PLAIN.fullmatch(str(part)) else f"[{part!r}]"
    return key


def _keys_at(loc: tuple[Any, ...]) -> tuple[str, ...]:
    """The keys the model allows in the mapping at `loc` (a stack key, a fleet, a network), for did-you-mean."""
    node: Any = StackConfig
    for part in loc:
        if isinstance(node, type) and issubclass(node, BaseModel):
            field = next((f for f in node.model_fields.values() if f.alias == part), None)
            if field is None:
                return ()
            node = inner_type(field.annotation)
        elif typing.get_origin(node) in (dict, tuple):
            node = inner_type(typing.get_args(node)[-1 if typing.get_origin(node) is dict else 0])
        else:
            return ()
    if node is StackConfig:
        return stack_keys()
    if isinstance(node, type) and issubclass(node, BaseModel):
        return tuple(f.alias for f in node.model_fields.values())
    return ()


def _suggestion(loc: tuple[Any, ...]) -> str | None:
    """The allowed key closest to the unknown key at `loc`, if any is close."""
    hint = difflib.get_close_matches(str(loc[-1]), _keys_at(loc[:-1]), n=1)
    return hint[0] if hint else None


def _unknown_key(loc: tuple[Any, ...]) -> str:
    hint = _suggestion(loc)
    if hint is None:
        return f"{_format_location(loc)}: unknown key"
    return f"{_format_location(loc)}: unknown key (did you mean {f'{PROJECT}:{hint}' if len(loc) == 1 else hint}?)"


def _format_errors(error: ValidationError) -> list[str]:
    problems = error.errors(include_url=False)
    # A list whose item failed also reports "too short" once the item is dropped: say it once.
    failed_items = {tuple(p["loc"][:-1]) for p in problems if p["loc"] and isinstance(p["loc"][-1], int)}
    # A misspelt required key is one problem: the unknown key's did-you-mean names the missing one.
    misspelt = {(*p["loc"][:-1], _suggestion(tuple(p["loc"]))) for p in problems if p["type"] == "extra_forbidden"}
    lines = []
    for problem in problems:
        loc = tuple(problem["loc"])
        kind = problem["type"]
        if kind == "too_short" and loc in failed_items:
            continue
        if kind == "missing" and loc in misspelt:
            continue
        if kind == "extra_forbidden":
            lines.append(_unknown_key(loc))
        elif kind == "missing":
            lines.append(f"{_format_location(loc)}: required key is not set")
        elif kind == "value_error":
            # Our own validators name the value in their message already; a cross-field validator
            # reports several problems at once, each counted and listed on its own line.
            cause = (problem.get("ctx") or {}).get("error")
            messages = cause.problems if isinstance(cause, Problems) else (problem["msg"].removeprefix("Value error, "),)
            lines.extend(f"{_format_location(loc)}: {message}" if loc else message for message in messages)
        else:
            lines.append(f"{_format_location(loc)}: {problem['msg']} (got {shown(problem.get('input'))})")
    return lines


def parse_stack_config(values: Mapping[str, Any], stack: str) -> StackConfig:
    """Validate raw config (`{"mlfleet:regions": '["us-east-1"]', "aws:region": "us-east-1"}`).

    Keys outside the `mlfleet:` namespace belong to providers and Pulumi itself and are left alone, except
    `aws:region`, the home region, and the other `aws:` keys: the per-region providers take those of
    AWS_PROVIDER_KEYS, and any other is an error, since no provider would read it (AwsProviderConfig).
    """
    document: dict[str, Any] = {"environment": stack}
    home = values.get("aws:region")
    if home is not None:
        document["homeRegion"] = home
    lines = []
    provider: dict[str, Any] = {}
    written: dict[str, str] = {}  # a key's name -> the key as the stack file wrote it
    for key, raw in values.items():
        namespace, _, name = key.partition(":")
        if namespace == "aws" and name != "region":
            if name in AWS_PROVIDER_KEYS:
                provider[name] = _decode(raw)
            else:
                lines.append(_unread_aws_key(name))
            continue
        if namespace != PROJECT:
            # Nothing else reads a key of ours elsewhere: a misspelt namespace (mlfeet:, MLFleet:) or one of our
            # keys under another (aws:natGateway) would be ignored without a word.
            if _misplaced(namespace, name):
                meant = name if name in stack_keys() else next(iter(difflib.get_close_matches(name, stack_keys(), n=1)), name)
                lines.append(f"{_written(key)}: unknown key (did you mean {_written(f'{PROJECT}:{meant}')}?)")
            continue
        name = name.removeprefix("config:")  # the pre-3.0 key form "mlfleet:config:regions"
        if name in REMOVED_KEYS:
            # Listed with the stack's other problems: the model's own check would stop before finding them.
            lines.append(removed_key_problem(name))
            continue
        if name in _FILLED_BY_THE_LOADER:
            # Read as a key, it would overwrite what the loader filled in without a word (the environment's name).
            lines.append(f"{_written(key)}: unknown key ({_FILLED_BY_THE_LOADER[name](stack)})")
            continue
        if name in written:
            # Both forms of one key (mlfleet:regions and mlfleet:config:regions): one would win without a word.
            lines.append(f"{_written(key)}: the same key as {_written(written[name])}; keep one of them")
            continue
        written[name] = key
        document[name] = _decode(raw)
    if provider:
        document["awsProvider"] = provider
    try:
        config = StackConfig.model_validate(document)
    except ValidationError as error:
        lines += _format_errors(error)
    if lines:
        raise ConfigError(f"stack {stack!r} has {len(lines)} configuration error(s):\n  - " + "\n  - ".join(lines))
    return config


def _unread_aws_key(name: str) -> str:
    """Why `aws:<name>` is refused: Pulumi's explicit providers read no stack config (pulumi/pulumi-aws#1307)
    and the stacks disable the default provider, so nothing would read it."""
    key = _written(f"aws:{name}")
    if name in AWS_STATIC_CREDENTIALS:
        return (f"{key}: mlfleet's per-region providers do not read keys from stack config; give credentials "
                "in the environment (AWS_PROFILE, SSO, a CI role through OIDC; with Pulumi ESC, as "
                "environmentVariables), or set aws:profile or aws:assumeRoles")
    if name in stack_keys():
        return f"{key}: unknown key (did you mean {PROJECT}:{name}?)"
    close = difflib.get_close_matches(name, AWS_PROVIDER_KEYS, n=1)
    hint = f"did you mean aws:{close[0]}? " if close else ""
    return (f"{key}: not read by mlfleet's per-region providers ({hint}they take aws:region and "
            f"{', '.join('aws:' + k for k in AWS_PROVIDER_KEYS)}); remove it or set it in the environment")


def _misplaced(namespace: str, name: str) -> bool:
    """`namespace:name` is meant as an mlfleet key: the namespace is ours misspelt, or the name is one of our keys."""
    return bool(difflib.get_close_matches(namespace.casefold(), [PROJECT], n=1, cutoff=0.8)) or name in stack_keys()


def load_stack_config() -> StackConfig:
    """The running stack's config. Raises ConfigError before any resource is declared."""
    values: dict[str, Any] = dict(pulumi.runtime.config.get_config_env())
    values.update(pulumi.runtime.config.CONFIG.get())
    return parse_stack_config(values, pulumi.get_stack())
