"""Fixtures for the job runtime: fake credentials, moto, and the home region's table and queues as the
lead's Pulumi component declares them (names, keys, indexes, redrive policy)."""

from __future__ import annotations

import json

import boto3
import pytest
from moto import mock_aws

from lambdas.common.aws import reset_clients

HOME = "us-east-1"
ENV = "dev"
TABLE = f"mlfleet-{ENV}-jobs"


@pytest.fixture(autouse=True)
def aws_credentials(monkeypatch):
    for key, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                       "AWS_SECURITY_TOKEN": "testing", "AWS_SESSION_TOKEN": "testing",
                       "AWS_DEFAULT_REGION": HOME}.items():
        monkeypatch.setenv(key, value)


@pytest.fixture
def aws():
    with mock_aws():
        reset_clients()
        yield
    reset_clients()


def create_table(region: str = HOME) -> None:
    boto3.client("dynamodb", region).create_table(
        TableName=TABLE, BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[{"AttributeName": n, "AttributeType": t} for n, t in
                              (("job_id", "S"), ("state", "S"), ("submitted_at", "N"), ("submission_id", "S"))],
        KeySchema=[{"AttributeName": "job_id", "KeyType": "HASH"}],
        GlobalSecondaryIndexes=[
            {"IndexName": "by-state", "Projection": {"ProjectionType": "ALL"},
             "KeySchema": [{"AttributeName": "state", "KeyType": "HASH"},
                           {"AttributeName": "submitted_at", "KeyType": "RANGE"}]},
            {"IndexName": "by-submission", "Projection": {"ProjectionType": "ALL"},
             "KeySchema": [{"AttributeName": "submission_id", "KeyType": "HASH"},
                           {"AttributeName": "job_id", "KeyType": "RANGE"}]},
        ])


def create_queues(region: str = HOME) -> tuple[str, str]:
    sqs = boto3.client("sqs", region)
    dlq = sqs.create_queue(QueueName=f"mlfleet-{ENV}-jobs-dlq")["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    queue = sqs.create_queue(QueueName=f"mlfleet-{ENV}-jobs", Attributes={
        "VisibilityTimeout": "300", "SqsManagedSseEnabled": "true",
        "RedrivePolicy": json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": 5})})["QueueUrl"]
    return queue, dlq


@pytest.fixture
def home(aws):
    create_table()
    queue, dlq = create_queues()
    return {"table": TABLE, "queue": queue, "dlq": dlq}
