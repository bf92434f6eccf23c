"""The placement lease: one actor at a time changes what runs where, without any account quota.

Two things change what runs where: a scheduler run (it starts tasks) and a removal (it stops a machine,
docs/removal.md). Each holds this lease while it acts, so a scheduler run never overlaps another one (two
runs would plan on the same free GPUs) and a removal never interleaves with a placement.

Reserved concurrency 1 would also serialise scheduler runs, but a reservation comes out of the account's
unreserved concurrency, which Lambda never lets fall below its minimum ("You can reserve up to the
Unreserved account concurrency value minus 100",
https://docs.aws.amazon.com/lambda/latest/dg/configuration-concurrency.html). Accounts whose
concurrency quota is 10 refuse any reservation: "Specified ReservedConcurrentExecutions for function
decreases account's UnreservedConcurrentExecution below its minimum value of [10]"
(aws-samples/amazon-rekognition-serverless-large-scale-image-and-video-processing#6).

The lease is one item of the job ledger table (home region), key LEASE_KEY. No job id can take that
key (job ids are `sub-<14 digits>-<6 hex>-<5 digits>`, lambdas/jobs/spec.py) and the item has neither
`state` nor `submission_id`, so the sparse indexes `by-state` and `by-submission` never list it.

- acquire: a conditional PutItem, `attribute_not_exists(job_id) OR expires_at < :now`. The owner names
  the actor and its Lambda request id (`scheduler:<id>`); the lease expires CLOCK_SKEW_SECONDS after the
  holder's own deadline (Lambda stops a run at its timeout, so its remaining time bounds it). A refusal
  by exactly the lease this call wrote (its first send applied, its answer was lost, botocore resent it)
  is a grant.
- release: a conditional DeleteItem, `owner = :me`, at the end of every run, failed or not.
- a run killed before it released (timeout, out of memory) leaves its lease to expire; the first
  actor after the expiry takes over, and says so.

DynamoDB conditions have no server clock, so `:now` is the caller's clock. Lambda hosts keep time
with the Amazon Time Sync Service; CLOCK_SKEW_SECONDS is far more than they drift apart, and an actor
on a host whose clock is ahead by less than that still cannot take over a live holder's lease.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from .aws import dynamodb_number
from .logs import log_decision
from .permissions import needs

LEASE_KEY = "#lease/placement"
CLOCK_SKEW_SECONDS = 30

# dynamodb:LeadingKeys limits these to the lease item
# (https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/specifying-conditions.html). Any
# region: the reaper takes the lease from a fleet region; the ledger table exists in the home region only.
PERMISSIONS = (
    needs("dynamodb:PutItem", "dynamodb:DeleteItem",
          resources=("arn:{partition}:dynamodb:*:{account}:table/mlfleet-{environment}-jobs",),
          condition={"ForAllValues:StringEquals": {"dynamodb:LeadingKeys": LEASE_KEY}},
          why="take and release the placement lease, one item of the job ledger"),
)


@dataclass(frozen=True)
class Lease:
    owner: str
    acquired_at: float
    expires_at: float


@dataclass(frozen=True)
class Acquired:
    """`lease` is ours when granted; otherwise `holder` is the live lease that refused us (None when
    it vanished between the refusal and the read). `took_over` is an expired lease we replaced."""
    granted: bool
    lease: Lease | None = None
    holder: Lease | None = None
    took_over: Lease | None = None


def _number(value: float) -> dict:
    return dynamodb_number(float(value))


def _lease(item: dict[str, Any] | None) -> Lease | None:
    if not item or "owner" not in item:
        return None
    return Lease(item["owner"]["S"], float(item["acquired_at"]["N"]), float(item["expires_at"]["N"]))


def acquire(dynamodb, table: str, owner: str, *, now: float, run_seconds: float) -> Acquired:
    """Take the lease for a run that may last `run_seconds` from `now` (epoch seconds). `dynamodb` is a
    client of the ledger's (home) region."""
    if not owner:
        raise ValueError("a lease needs an owner (actor:request id)")
    if not (math.isfinite(now) and math.isfinite(run_seconds)) or run_seconds <= 0:
        raise ValueError(f"lease for now={now!r}, run_seconds={run_seconds!r}: both must be finite, run_seconds > 0")
    lease = Lease(owner, now, now + run_seconds + CLOCK_SKEW_SECONDS)
    try:
        previous = dynamodb.put_item(
            TableName=table,
            Item={"job_id": {"S": LEASE_KEY}, "owner": {"S": owner}, "acquired_at": _number(lease.acquired_at),
                  "expires_at": _number(lease.expires_at)},
            ConditionExpression="attribute_not_exists(job_id) OR expires_at < :now",
            ExpressionAttributeValues={":now": _number(now)},
            ReturnValues="ALL_OLD",
            ReturnValuesOnConditionCheckFailure="ALL_OLD",
        ).get("Attributes")
    except dynamodb.exceptions.ConditionalCheckFailedException as refused:
        holder = _lease(refused.response.get("Item"))
        if holder == lease:
            # Our own write: botocore's standard retry resends a PutItem whose answer was lost (a read timeout,
            # a 5xx: botocore/retries/standard.py TransientRetryableChecker), and the resend finds the lease the
            # first send took. Refused, the run would skip and leave it to block everyone until it expires.
            log_decision("lease-granted-on-resend", owner=owner, expires_at=lease.expires_at,
                         reason="the first request took the lease; its answer was lost and the request resent")
            return Acquired(True, lease=lease)
        return Acquired(False, holder=holder)
    took_over = _lease(previous)
    if took_over is not None:
        log_decision("lease-taken-over", owner=owner, previous_owner=took_over.owner,
                     expired_seconds_ago=round(now - took_over.expires_at, 3),
                     reason="the previous holder ended without releasing the lease (timeout or crash)")
    return Acquired(True, lease=lease, took_over=took_over)


def release(dynamodb, table: str, lease: Lease) -> bool:
    """Give the lease back; False, deleting nothing, when it is no longer ours."""
    try:
        dynamodb.delete_item(TableName=table, Key={"job_id": {"S": LEASE_KEY}},
                             ConditionExpression="#owner = :me",  # OWNER is a DynamoDB reserved word
                             ExpressionAttributeNames={"#owner": "owner"},
                             ExpressionAttributeValues={":me": {"S": lease.owner}})
        return True
    except dynamodb.exceptions.ConditionalCheckFailedException:
        log_decision("lease-lost", owner=lease.owner, expires_at=lease.expires_at,
                     reason="another actor took the lease over; nothing released")
        return False
    except (BotoCoreError, ClientError) as error:
        # The run's own result matters more: the lease expires by itself.
        log_decision("lease-release-failed", owner=lease.owner, expires_at=lease.expires_at, error=str(error))
        return False
