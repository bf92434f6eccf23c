"""One JSON log line per decision, so CloudWatch Logs Insights can filter on any field.

    log_decision("reap", instance_id="i-0abc", reason="idle 95m > window 90m", dry_run=False)
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import date, datetime
from typing import Any

_LOGGER = logging.getLogger("mlfleet")
if not _LOGGER.handlers:
    _handler = logging.StreamHandler(sys.stdout)
    _handler.setFormatter(logging.Formatter("%(message)s"))
    _LOGGER.addHandler(_handler)
    _LOGGER.setLevel(logging.INFO)
    _LOGGER.propagate = False


def shown(value: object, limit: int = 120) -> str:
    """A bad value as an error or a decision line names it: its repr, cut to `limit` characters with its full
    length said (a 240 KB text, a 4,000-digit number); one Python cannot repr (an integer past
    int_max_str_digits, nesting past the stack) by its type."""
    try:
        text = repr(value)
    except (ValueError, RecursionError):
        return f"a {type(value).__name__}"
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


def quoted(value: object, limit: int) -> str:
    """A bad value's text cut to `limit` characters and quoted, as the errors naming a ledger field show it;
    a value without a text of its own (a binary attribute, whose str is bytes) by its repr (shown)."""
    try:
        text = str(value)
    except (TypeError, ValueError, RecursionError):
        return shown(value, limit)
    return repr(text[:limit])


def _default(value: Any) -> Any:
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if isinstance(value, (set, frozenset, tuple)):
        return sorted(value) if isinstance(value, (set, frozenset)) else list(value)
    if hasattr(value, "__dict__"):
        return vars(value)
    return str(value)


def log_decision(decision: str, /, **fields: Any) -> dict[str, Any]:
    """Write one structured line `{"decision": ..., **fields}` and return it (tests assert on it)."""
    if "decision" in fields:  # a field of that name (a mapping's keys passed as fields) is kept beside it
        fields["decision_field"] = fields.pop("decision")
    record = {"decision": decision, **fields}
    try:
        line = json.dumps(record, default=_default, sort_keys=True)
    except (TypeError, ValueError, RecursionError) as error:
        # A field JSON cannot hold (nested past the interpreter's limit, keys of mixed types): the decision
        # is still logged, with what could not be, rather than the caller's work failing over its log line.
        line = json.dumps({"decision": decision, "unloggable_fields": sorted(map(str, fields)),
                           "log_error": f"{type(error).__name__}: {str(error)[:200]}"}, sort_keys=True)
    _LOGGER.info(line)
    return record
