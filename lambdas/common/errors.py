"""What a failed AWS call means for the one item it was about, and the per-item guard every handler uses.

Every failure is per item, never per run: one job, message or machine that cannot be handled is logged
with its reason (one decision line) and the run goes on with the rest. Whether to try the item again
depends on the error:

- transient (throttling after botocore's retries, a 5xx, a timeout, a dropped connection): the same
  request may succeed later; the next run (or Lambda's retry of the event) tries again;
- permanent (validation, a missing resource, access denied): the same request fails again; the caller
  records the item as failed or quarantined instead of retrying it forever.

The classification is botocore's own, the one its standard retry mode uses
(botocore/retries/standard.py: ThrottledRetryableChecker, TransientRetryableChecker).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError, ConnectionError, HTTPClientError
from botocore.retries.standard import ThrottledRetryableChecker, TransientRetryableChecker

from .logs import log_decision

THROTTLING_CODES = frozenset(ThrottledRetryableChecker._THROTTLED_ERROR_CODES)
TRANSIENT_CODES = frozenset(TransientRetryableChecker._TRANSIENT_ERROR_CODES) | {
    # Service-specific spellings of "try again" that botocore's generic list leaves to status codes.
    "InternalError", "InternalFailure", "InternalServerError", "ServerException", "ServiceUnavailable",
}
# Mistakes in the code, not in an item: never swallowed.
PROGRAMMING_ERRORS = (NameError, ImportError, SyntaxError)
# Not sent at all: no connection was made, so the request cannot have had any effect.
NOT_SENT = ("ConnectTimeoutError", "EndpointConnectionError")


def error_code(error: BaseException) -> str:
    if isinstance(error, ClientError):
        return str(error.response.get("Error", {}).get("Code", ""))
    return type(error).__name__


def describe(error: BaseException) -> str:
    """One line: `Code: message` for an AWS error, `Type: message` for anything else (bounded)."""
    if isinstance(error, ClientError):
        info = error.response.get("Error", {})
        text = f"{info.get('Code', 'ClientError')}: {info.get('Message', '')}"
    else:
        text = f"{type(error).__name__}: {error}"
    return text[:500]


def is_transient(error: BaseException) -> bool:
    """True when the same request may succeed if tried again later."""
    if isinstance(error, ClientError):
        status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0
        return error_code(error) in THROTTLING_CODES | TRANSIENT_CODES or status >= 500
    return isinstance(error, (ConnectionError, HTTPClientError))


def was_not_sent(error: BaseException) -> bool:
    """True when the request never reached AWS (so it had no effect), as opposed to a lost response."""
    if isinstance(error, ClientError):
        # AWS answered with a refusal (throttled, invalid): nothing was done. A 5xx may have been half done.
        return (error.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 400) < 500
    return type(error).__name__ in NOT_SENT


def is_aws_error(error: BaseException) -> bool:
    return isinstance(error, (ClientError, BotoCoreError))


@contextmanager
def per_item(decision: str, failures: list[dict] | None = None, **fields: Any) -> Iterator[None]:
    """Run one item's work; any exception is logged as `decision` with its reason and stays here.

    Every error class counts (AWS errors, timeouts, decode and validation errors, RecursionError from
    hostile input): whatever goes wrong with one item must not cost the others their turn.
    """
    try:
        yield
    except PROGRAMMING_ERRORS:
        raise  # the same for every item: the run should fail loudly, not log it once per item
    except Exception as error:  # one item's failure, whatever it is, must not stop the run
        record = log_decision(decision, error=describe(error), error_type=type(error).__name__,
                              transient=is_transient(error), **fields)
        if failures is not None:
            failures.append(record)
