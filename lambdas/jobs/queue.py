"""The job queue's messages: `{"job_id", "attempt"}` means "look at this job, queued at this attempt".

The ledger is the source of truth; a message only says there is work to look at, so sending one twice
is harmless (the scheduler drops a message whose job has moved past that attempt). Jobs that exhaust
their attempts go to the dead-letter queue as `{"job_id", "reason", "attempts"}`; malformed messages
reach it through the queue's redrive policy (maxReceiveCount 5).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from ..common.aws import chunks
from ..common.permissions import needs
from .spec import is_job_id

# The exact queues, never a prefix: `mlfleet-dev-jobs*` would also cover the dead-letter queue and other
# environments' queues such as mlfleet-dev-jobs2. components/jobs names them (queue_name).
QUEUE_NAME = "mlfleet-{environment}-jobs"
DEAD_LETTER_QUEUE_NAME = "mlfleet-{environment}-jobs-dlq"
QUEUE_ARN = "arn:{partition}:sqs:{region}:{account}:" + QUEUE_NAME
DEAD_LETTER_QUEUE_ARN = "arn:{partition}:sqs:{region}:{account}:" + DEAD_LETTER_QUEUE_NAME
SEND_PERMISSIONS = (needs("sqs:SendMessage", resources=(QUEUE_ARN,),
                          why="queue jobs (SendMessage also covers SendMessageBatch)"),)
# Only the functions that dead-letter exhausted jobs; the mlfleet command's users cannot forge dead letters.
DEAD_LETTER_PERMISSIONS = (needs("sqs:SendMessage", resources=(DEAD_LETTER_QUEUE_ARN,),
                                 why="dead-letter jobs that exhausted their attempts, with the reason"),)
CONSUME_PERMISSIONS = (needs("sqs:ReceiveMessage", "sqs:DeleteMessage", resources=(QUEUE_ARN,),
                             why="drain the job queue (DeleteMessage also covers DeleteMessageBatch)"),)


class MessageError(ValueError):
    pass


@dataclass(frozen=True)
class JobMessage:
    job_id: str
    attempt: int

    def body(self) -> str:
        return json.dumps({"job_id": self.job_id, "attempt": self.attempt}, sort_keys=True)


def parse_message(body: str) -> JobMessage:
    """The message, or MessageError for anything else (hostile input included: deeply nested JSON raises
    RecursionError in the json module, and a job id DynamoDB cannot take as a key is refused here)."""
    try:
        document = json.loads(body)
        job_id, attempt = document["job_id"], document["attempt"]
    except (ValueError, KeyError, TypeError, IndexError, RecursionError):
        raise MessageError(f"job message {str(body)[:200]!r} is not {{\"job_id\": str, \"attempt\": int}}") from None
    valid_attempt = isinstance(attempt, int) and not isinstance(attempt, bool) and attempt >= 0
    if not isinstance(job_id, str) or not is_job_id(job_id) or not valid_attempt:
        raise MessageError(f"job message {str(body)[:200]!r}: job_id must be a job id "
                           "(sub-YYYYmmddHHMMSS-xxxxxx-NNNNN) and attempt an integer >= 0")
    return JobMessage(job_id, attempt)


def send_jobs(sqs, queue_url: str, messages: Iterable[JobMessage],
              progress: Callable[[int], None] | None = None) -> list[str]:
    """SendMessageBatch, 10 a call (the SQS maximum); returns the job ids SQS did not accept (the caller
    reports them). `progress(n)` after each call, n messages handled so far."""
    refused, sent = [], 0
    for batch in chunks(list(messages), 10):
        response = sqs.send_message_batch(QueueUrl=queue_url, Entries=[
            {"Id": str(i), "MessageBody": m.body()} for i, m in enumerate(batch)])
        refused.extend(batch[int(f["Id"])].job_id for f in response.get("Failed", []))
        sent += len(batch)
        if progress is not None:
            progress(sent)
    return refused


def dead_letter(sqs, dlq_url: str, job_id: str, reason: str, attempts: int) -> None:
    sqs.send_message(QueueUrl=dlq_url, MessageBody=json.dumps(
        {"job_id": job_id, "reason": reason, "attempts": attempts}, sort_keys=True))


class MessagesNotDeleted(Exception):
    """Entries of DeleteMessageBatch that SQS did not delete: `failed` is (receipt handle, code, message)."""

    def __init__(self, failed: list[tuple[str, str, str]], total: int):
        self.failed = failed
        codes = sorted({code for _, code, _ in failed})
        super().__init__(f"{len(failed)} of {total} messages not deleted ({', '.join(codes)}); they come back "
                         "after the visibility timeout")


def delete_messages(sqs, queue_url: str, receipt_handles: Sequence[str]) -> None:
    """DeleteMessageBatch, 10 a call. The call answers 200 with the entries it could not delete under
    `Failed` (botocore's SQS model, DeleteMessageBatch: "check for batch errors even when the call returns an
    HTTP status code of 200"): after every batch was tried, MessagesNotDeleted names them."""
    failed: list[tuple[str, str, str]] = []
    for batch in chunks(receipt_handles, 10):
        response = sqs.delete_message_batch(QueueUrl=queue_url, Entries=[
            {"Id": str(i), "ReceiptHandle": h} for i, h in enumerate(batch)])
        failed.extend((batch[int(f["Id"])], str(f.get("Code", "")), str(f.get("Message", "")))
                      for f in response.get("Failed", []))
    if failed:
        raise MessagesNotDeleted(failed, len(receipt_handles))
