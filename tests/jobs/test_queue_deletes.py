"""Deleting the scheduler's messages: DeleteMessageBatch answers HTTP 200 when some of its entries failed and
lists them under `Failed` ("Because the batch request can result in a combination of successful and
unsuccessful actions, you should check for batch errors even when the call returns an HTTP status code of
200": botocore's SQS model, DeleteMessageBatch). A message whose delete failed comes back after the queue's
visibility timeout, and after maxReceiveCount receives the redrive policy puts a healthy job's message in
the dead-letter queue, so the run must say so, as it does when the whole call fails.

moto fails no entry of a batch it can read, so the failure is injected into the parsed answer of the
real call (the entries' deletion itself happens in moto).
"""

from __future__ import annotations

import boto3
import botocore.client
import pytest
from conftest import HOME, build_fleet, open_admission, scheduler_settings
from test_scheduler_run import NOW, queue_jobs

from lambdas.jobs import queue
from lambdas.scheduler.handler import run


def fail_entries(monkeypatch, ids: set[str]) -> list[dict]:
    """Make every DeleteMessageBatch report the entries `ids` as failed (SenderFault false, InternalError)."""
    real, calls = botocore.client.BaseClient._make_api_call, []

    def call(self, operation, params):
        answer = real(self, operation, params)
        if operation == "DeleteMessageBatch":
            calls.append(params)
            failed = [e for e in answer.get("Successful", []) if e["Id"] in ids]
            answer = {**answer, "Successful": [e for e in answer["Successful"] if e["Id"] not in ids],
                      "Failed": [*answer.get("Failed", []), *({"Id": e["Id"], "SenderFault": False,
                                                               "Code": "InternalError", "Message": "try again"}
                                                              for e in failed)]}
        return answer

    monkeypatch.setattr(botocore.client.BaseClient, "_make_api_call", call)
    return calls


def receipts(home: dict, count: int) -> list[str]:
    sqs = boto3.client("sqs", HOME)
    for i in range(count):
        sqs.send_message(QueueUrl=home["queue"], MessageBody=queue.JobMessage(f"sub-20261122120000-abcdef-{i:05d}", 0).body())
    handles = []
    while len(handles) < count:
        handles += [m["ReceiptHandle"] for m in sqs.receive_message(QueueUrl=home["queue"], MaxNumberOfMessages=10)
                    .get("Messages", [])]
    return handles


def test_delete_messages_reports_the_entries_sqs_did_not_delete(home, monkeypatch):
    handles = receipts(home, 12)
    fail_entries(monkeypatch, {"3"})  # entry 3 of each call: the first call's; the second has entries 0 and 1
    with pytest.raises(queue.MessagesNotDeleted) as refused:
        queue.delete_messages(boto3.client("sqs", HOME), home["queue"], handles)
    assert refused.value.failed == [(handles[3], "InternalError", "try again")]
    assert "1 of 12" in str(refused.value) and "InternalError" in str(refused.value)


def test_delete_messages_tries_every_batch_before_it_reports(home, monkeypatch):
    handles = receipts(home, 12)
    calls = fail_entries(monkeypatch, {"0"})
    with pytest.raises(queue.MessagesNotDeleted) as refused:
        queue.delete_messages(boto3.client("sqs", HOME), home["queue"], handles)
    assert len(calls) == 2 and [f[0] for f in refused.value.failed] == [handles[0], handles[10]]


def test_a_scheduler_run_counts_messages_sqs_did_not_delete_as_errors(home, monkeypatch):
    build_fleet(size=1)
    open_admission()
    job_ids = queue_jobs(home, 2)
    sqs = boto3.client("sqs", HOME)
    for job_id in job_ids:
        sqs.send_message(QueueUrl=home["queue"], MessageBody=queue.JobMessage(job_id, 0).body())
    fail_entries(monkeypatch, {"0"})
    summary = run(scheduler_settings(home), lambda: 170_000, now=NOW)
    failures = [e for e in summary["errors"] if e["decision"] == "delete-messages-failed"]
    assert len(failures) == 1 and "1 of 2" in failures[0]["error"], summary["errors"]
