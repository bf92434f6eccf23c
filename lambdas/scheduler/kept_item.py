"""Values the scheduler keeps between runs, each in one item of the job ledger table (the teams' decayed use,
headroom's recent waits). No job id can take such a key (lambdas/jobs/spec.py _JOB_ID) and the items have
neither `state` nor `submission_id`, so the sparse indexes never list them. Runs are one at a time (the
placement lease), and each write is conditional on a newer time, so a late write never replaces a newer value.
"""

from __future__ import annotations

from collections.abc import Mapping

from botocore.exceptions import BotoCoreError, ClientError

from ..common.aws import dynamodb_number
from ..common.logs import log_decision
from ..common.permissions import needs
from ..jobs.ledger import TABLE_ARNS


def permission(key: str, why: str):
    """Get and put the one item `key` of the ledger table, nothing else (dynamodb:LeadingKeys)."""
    return needs("dynamodb:GetItem", "dynamodb:PutItem", resources=TABLE_ARNS[:1],
                 condition={"ForAllValues:StringEquals": {"dynamodb:LeadingKeys": [key]}}, why=why)


number = dynamodb_number  # the name its modules use


def put_if_newer(dynamodb, table: str, key: str, at: float, attributes: Mapping[str, dict], what: str) -> bool:
    """Keep `attributes` computed at `at` under `key`; False, writing nothing, when a newer value is there
    (logged `<what>-stale`) or the write failed (`<what>-write-failed`: the next run starts from the last
    value kept)."""
    try:
        dynamodb.put_item(
            TableName=table, Item={"job_id": {"S": key}, "at": number(at), **attributes},
            ConditionExpression="attribute_not_exists(job_id) OR #at < :at",
            ExpressionAttributeNames={"#at": "at"}, ExpressionAttributeValues={":at": number(at)})
        return True
    except dynamodb.exceptions.ConditionalCheckFailedException:
        log_decision(f"{what}-stale", at=at, reason="a newer value is kept; this run's is dropped")
        return False
    except (BotoCoreError, ClientError) as error:
        log_decision(f"{what}-write-failed", at=at, error=str(error))
        return False
