"""Wall time of one large submission through the `mlfleet` command, against moto.

    python -m benchmarks.submission [--jobs 10000] [--json]

Runs `mlfleet submit` (the real command: validation, expansion, the ledger's transactions of 100
conditional puts, queue messages 10 a call, the scheduler's wake-up) in one process against moto's
in-memory DynamoDB, SQS, SSM and Lambda, with the home region's table and queues as components/jobs
declares them. Reports the wall seconds of each phase, the CPU seconds of the whole (the command and moto
share one process, so on a busy machine CPU time is the steadier figure) and the number of calls.

Where moto differs from AWS, and what this measures: moto answers in-process (no network round trip;
on AWS each call adds its latency, about 10-30 ms inside a region), and two of its bookkeeping habits make a
large submission quadratic in moto only:
- its TransactWriteItems deep-copies the whole table once per item of the transaction as a rollback
  backup (moto/dynamodb/models/__init__.py, transact_write_items); `rollback_of_touched_items` notes the
  items the transaction touches instead and puts them back if it fails, which leaves the table as moto's
  own rollback would;
- its SendMessage reads every attribute of the queue to look up ContentBasedDeduplication, counting every
  message in the queue three times (moto/sqs/models.py, send_message and Queue.attributes);
  `no_message_counts_while_sending` makes those counts zero during SendMessage only, whose answer does
  not contain them.
Neither changes what moto answers; the benchmark reports which it used (--stock-moto leaves moto as it is,
practical up to a few hundred jobs).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import functools
import json
import os
import sys
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

ENV, HOME, ACCOUNT = "dev", "us-east-1", "123456789012"


@contextlib.contextmanager
def rollback_of_touched_items():
    """moto's TransactWriteItems without its table copies: the items the transaction touches are noted before
    it runs and put back if it fails, which leaves the tables as moto's own rollback does (see the module doc)."""
    from moto.dynamodb import models

    original = models.DynamoDBBackend.transact_write_items

    def transact_write_items(self, transact_items):
        before = []
        for entry in transact_items:
            _, operation = next(iter(entry.items()))
            table = self.get_table(operation["TableName"])
            if "Item" in operation:
                key = {name: operation["Item"][name] for name in (table.hash_key_attr, table.range_key_attr) if name}
            else:
                key = operation["Key"]
            before.append((operation["TableName"], key, self.get_item(operation["TableName"], key)))
        models.copy = types.SimpleNamespace(deepcopy=lambda value, memo=None: value)
        try:
            return original(self, transact_items)
        except BaseException:
            for table_name, key, item in reversed(before):
                if item is None:
                    if self.get_item(table_name, key) is not None:
                        self.delete_item(table_name, key)
                else:
                    self.put_item(table_name, item.to_json()["Attributes"])
            raise
        finally:
            models.copy = copy

    models.DynamoDBBackend.transact_write_items = transact_write_items
    try:
        yield
    finally:
        models.DynamoDBBackend.transact_write_items = original


@contextlib.contextmanager
def no_message_counts_while_sending():
    """moto's SendMessage without counting the queue's messages (see the module doc)."""
    from moto.sqs import models

    original = models.SQSBackend.send_message
    counts = ("approximate_number_of_messages", "approximate_number_of_messages_delayed",
              "approximate_number_of_messages_not_visible")

    def send_message(self, *args, **kwargs):
        saved = {name: models.Queue.__dict__[name] for name in counts}
        for name in counts:
            setattr(models.Queue, name, property(lambda queue: 0))
        try:
            return original(self, *args, **kwargs)
        finally:
            for name, value in saved.items():
                setattr(models.Queue, name, value)

    models.SQSBackend.send_message = send_message
    try:
        yield
    finally:
        models.SQSBackend.send_message = original


@contextlib.contextmanager
def linear_moto():
    with rollback_of_touched_items(), no_message_counts_while_sending():
        yield


@functools.lru_cache(maxsize=None)
def _setup_client(service: str, region: str):
    """One client per service and region for the setup below, made once: boto3.client() makes a new one from
    the new default session moto gives every mock (a tenth of a second with a cold session), and the
    fault-injection tests set a world up hundreds of times. A client holds no moto state: moto answers
    whichever mock is active."""
    import boto3

    return boto3.session.Session().client(service, region_name=region)


def create_table(region: str = HOME, environment: str = ENV) -> None:
    """The job ledger as components/jobs declares it: key, its three indexes, all attributes projected."""
    _setup_client("dynamodb", region).create_table(
        TableName=f"mlfleet-{environment}-jobs", BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[{"AttributeName": n, "AttributeType": t} for n, t in
                              (("job_id", "S"), ("state", "S"), ("submitted_at", "N"), ("submission_id", "S"),
                               ("queued_team", "S"))],
        KeySchema=[{"AttributeName": "job_id", "KeyType": "HASH"}],
        GlobalSecondaryIndexes=[
            {"IndexName": "by-state", "Projection": {"ProjectionType": "ALL"},
             "KeySchema": [{"AttributeName": "state", "KeyType": "HASH"},
                           {"AttributeName": "submitted_at", "KeyType": "RANGE"}]},
            {"IndexName": "by-submission", "Projection": {"ProjectionType": "ALL"},
             "KeySchema": [{"AttributeName": "submission_id", "KeyType": "HASH"},
                           {"AttributeName": "job_id", "KeyType": "RANGE"}]},
            {"IndexName": "by-team-queued", "Projection": {"ProjectionType": "ALL"},
             "KeySchema": [{"AttributeName": "queued_team", "KeyType": "HASH"},
                           {"AttributeName": "submitted_at", "KeyType": "RANGE"}]},
        ])


def create_queues(region: str = HOME, environment: str = ENV) -> tuple[str, str]:
    """The job queue and its dead-letter queue as components/jobs declares them."""
    sqs = _setup_client("sqs", region)
    dlq = sqs.create_queue(QueueName=f"mlfleet-{environment}-jobs-dlq")["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    queue = sqs.create_queue(QueueName=f"mlfleet-{environment}-jobs", Attributes={
        "VisibilityTimeout": "360", "SqsManagedSseEnabled": "true",
        "RedrivePolicy": json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": 5})})["QueueUrl"]
    return queue, dlq


def run(jobs: int, stock_moto: bool) -> dict:
    os.environ.update({"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "AWS_DEFAULT_REGION": HOME,
                       "AWS_EC2_METADATA_DISABLED": "true"})
    import boto3
    from moto import mock_aws

    from lambdas.common.aws import client, reset_clients
    from lambdas.jobs import cli

    patch = contextlib.nullcontext() if stock_moto else linear_moto()
    with mock_aws(), patch:
        reset_clients()
        create_table()
        queue, dlq = create_queues()
        topic = f"arn:aws:sns:{HOME}:{ACCOUNT}:mlfleet-{ENV}-job-notifications"
        boto3.client("ssm", HOME).put_parameter(Name=f"/mlfleet/{ENV}/job-service", Type="String", Value=json.dumps({
            "queueUrl": queue, "deadLetterQueueUrl": dlq, "ledgerTable": f"mlfleet-{ENV}-jobs",
            "schedulerFunction": f"mlfleet-{ENV}-scheduler", "admissionParameter": f"/mlfleet/{ENV}/admission",
            "homeRegion": HOME, "defaultMaxAttempts": 3, "jobLogGroup": f"/mlfleet/{ENV}/jobs",
            "fleets": [{"region": HOME, "fleet": "gpu1", "asg_name": f"mlfleet-{ENV}-gpu1", "cluster": f"mlfleet-{ENV}",
                        "task_family": f"mlfleet-{ENV}-gpu-job", "max_instances": 4,
                        "instance_types": ["g6.2xlarge", "g5.2xlarge"]}],
            "images": {"account": ACCOUNT, "cachePrefix": f"mlfleet/{ENV}", "regionsWithoutEgress": []},
            "notifications": {"email": topic, "slack": None}}))
        # The teams parameter as a stack without teams writes it (components/jobs/jobs.py teams_document).
        boto3.client("ssm", HOME).put_parameter(Name=f"/mlfleet/{ENV}/teams", Type="String", Value=json.dumps(
            {"teams": {}, "default_team": None, "share_half_life_minutes": 60}))
        calls: dict[str, int] = {}
        marks: dict[str, float] = {}
        start, cpu_start = time.perf_counter(), time.process_time()

        def count(model, **_):
            calls[model.name] = calls.get(model.name, 0) + 1
            if model.name in ("TransactWriteItems", "SendMessageBatch"):
                marks.setdefault(f"first {model.name}", time.perf_counter() - start)
                marks[f"last {model.name}"] = time.perf_counter() - start

        for service in ("dynamodb", "sqs", "lambda", "ssm", "sts"):
            client(service, HOME).meta.events.register("before-call", count)
        out: list[str] = []
        errors: list[str] = []
        code = cli.main(["-e", ENV, "--region", HOME, "submit", "--image", "ghcr.io/team/infer:7", "--gpus", "1",
                         "--vcpus", "4", "--memory", "16GiB", "--batches", f"0:{jobs}:1", "--",
                         "python", "infer.py", "--shard", "{start}"], out=out.append, err=errors.append)
        total, cpu = time.perf_counter() - start, time.process_time() - cpu_start
        if code != 0 or not out:
            raise SystemExit(f"mlfleet submit failed (exit {code}): {' '.join(errors)[-600:]}")
        written = len(cli.discover(ENV, HOME).ledger.by_submission(out[0].split(":")[0]))
    return {"jobs": jobs, "exit_code": code, "jobs_in_ledger": written, "seconds_total": round(total, 2),
            "cpu_seconds_total": round(cpu, 2),
            "seconds_until_first_write": round(marks.get("first TransactWriteItems", 0.0), 2),
            "seconds_ledger": round(marks["last TransactWriteItems"] - marks["first TransactWriteItems"], 2),
            "seconds_queue": round(marks["last SendMessageBatch"] - marks["first SendMessageBatch"], 2),
            "calls": calls, "moto": "stock" if stock_moto else "rollback of the touched items, no message counts "
                                                               "while sending"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.submission", description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--stock-moto", action="store_true", help="leave moto's per-item table copies in place")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    result = run(args.jobs, args.stock_moto)
    print(json.dumps(result, indent=None if args.json else 1, sort_keys=True))
    return 0 if result["exit_code"] == 0 and result["jobs_in_ledger"] == args.jobs else 1


if __name__ == "__main__":
    raise SystemExit(main())
