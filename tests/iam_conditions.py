"""Does an IAM policy allow one request? Enough of IAM's evaluation for the tests to put a request that
AWS would make (the keys of its request context, its resource ARN) to the statements mlfleet renders.

The rules, from the IAM User Guide:
- a statement applies when its Action and Resource match (wildcards `*` and `?`) and every operator of its
  Condition holds, and each operator holds when every key it names holds (AND); the values listed for
  one key are alternatives (OR) ("Condition element", https://docs.aws.amazon.com/IAM/latest/UserGuide/
  reference_policies_elements_condition_logic_multiple-context-keys-or-values.html);
- a key missing from the request context makes the operator false, except an `...IfExists` operator
  (true) and `Null` (true when it asks for the key's absence); `ForAllValues` is true for a missing
  key, `ForAnyValue` false (https://docs.aws.amazon.com/IAM/latest/UserGuide/
  reference_policies_condition-single-vs-multi-valued-context-keys.html);
- key names are case-insensitive, String and Arn values case-sensitive; ArnLike compares the six
  colon-separated parts of an ARN one by one ("IAM JSON policy elements: Condition operators",
  https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_elements_condition_operators.html).

Only Allow statements are read (mlfleet's identity policies deny nothing), and an operator this module
does not know raises, so that a test never passes on a condition it did not evaluate.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

Context = Mapping[str, str | Sequence[str]]


def _list(value: Any) -> list:
    return [] if value is None else list(value) if isinstance(value, (list, tuple)) else [value]


def like(pattern: str, value: str) -> bool:
    """IAM's wildcard match: `*` any run of characters, `?` one character, nothing else special."""
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, value, flags=re.S) is not None


def arn_like(pattern: str, value: str) -> bool:
    patterns, values = pattern.split(":", 5), value.split(":", 5)
    return len(patterns) == len(values) == 6 and all(like(p, v) for p, v in zip(patterns, values))


_MATCHERS = {
    "StringEquals": lambda policy, value: policy == value,
    "StringLike": like,
    "ArnEquals": lambda policy, value: policy == value,
    "ArnLike": arn_like,
    "Bool": lambda policy, value: str(policy).lower() == str(value).lower(),
}


def _values(context: Context, key: str) -> list[str] | None:
    for name, value in context.items():
        if name.lower() == key.lower():
            return [str(v) for v in _list(value)]
    return None


def operator_holds(operator: str, tests: Mapping[str, Any], context: Context) -> bool:
    qualifier, _, base = operator.rpartition(":") if operator.startswith(("ForAllValues:", "ForAnyValue:")) \
        else ("", "", operator)
    if_exists = base.endswith("IfExists") and base != "Null"
    base = base.removesuffix("IfExists") if if_exists else base
    for key, wanted in tests.items():
        present = _values(context, key)
        if base == "Null":
            if (present is None) != (str(wanted).lower() == "true"):
                return False
            continue
        if base not in _MATCHERS:
            raise ValueError(f"condition operator {operator} is not evaluated by tests/iam_conditions.py")
        match = _MATCHERS[base]
        wanted = [str(w) for w in _list(wanted)]
        if present is None:
            if qualifier == "ForAllValues" or if_exists:
                continue
            return False
        if qualifier == "ForAllValues":
            ok = all(any(match(w, v) for w in wanted) for v in present)
        else:  # ForAnyValue, or a single-valued key
            ok = any(match(w, v) for w in wanted for v in present)
        if not ok:
            return False
    return True


def statement_allows(statement: Mapping[str, Any], action: str, resource: str, context: Context) -> bool:
    if statement.get("Effect") != "Allow":
        return False
    if not any(like(a.lower(), action.lower()) for a in _list(statement.get("Action"))):
        return False
    if not any(r == "*" or arn_like(r, resource) for r in _list(statement.get("Resource"))):
        return False
    return all(operator_holds(op, tests, context) for op, tests in (statement.get("Condition") or {}).items())


def allows(statements: Iterable[Mapping[str, Any]], action: str, resource: str, context: Context) -> bool:
    """Whether any Allow statement grants `action` on `resource` for a request with this context."""
    return any(statement_allows(s, action, resource, context) for s in statements)


def request_tag_context(tags: Iterable[Mapping[str, str]]) -> dict[str, str | list[str]]:
    """The tag keys of a request that tags what it creates (ECS's `tags`: key/value): aws:RequestTag/<key>
    for each tag and aws:TagKeys for the set ("Controlling access to AWS resources using tags",
    https://docs.aws.amazon.com/IAM/latest/UserGuide/access_tags.html)."""
    tags = list(tags)
    context: dict[str, str | list[str]] = {f"aws:RequestTag/{t['key']}": t["value"] for t in tags}
    if tags:
        context["aws:TagKeys"] = [t["key"] for t in tags]
    return context
