"""The mlfleet command against moto, as its IAM policy sees it: every call it makes is granted by
`mlfleet policy` and nothing else is; cancel is one conditional UpdateItem on the attributes the policy
allows; a job-service parameter that describes another environment stops it before anything is written.

Where moto differs from AWS: moto does not evaluate IAM, so the tests record each request and check it
against the policy document instead; invoking a Lambda function needs Docker in moto, so the wake-up
fails there and the command goes on (as it does on AWS when the invoke is refused).
"""

from __future__ import annotations

import fnmatch
import json
import re
from pathlib import Path

import boto3
import pytest
from conftest import (ACCOUNT, CLUSTER, ENV, FAMILY, HOME, build_fleet, create_notification_topics, fleets_json,
                      job_service_value, open_admission, publish_job_service)

from lambdas.common.aws import client
from lambdas.jobs import cli
from lambdas.jobs import ledger as L

IMAGE = "ghcr.io/team/train:3"
# API operations whose IAM action has another name (the Service Authorization Reference lists them;
# TransactWriteItems is authorized as each put's PutItem:
# https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/transaction-apis-iam.html).
ACTION_OF = {"sqs:SendMessageBatch": "sqs:SendMessage", "lambda:Invoke": "lambda:InvokeFunction",
             "dynamodb:TransactWriteItems": "dynamodb:PutItem",
             "sts:GetCallerIdentity": None}  # GetCallerIdentity needs no permission
SERVICES = ("ssm", "dynamodb", "sqs", "lambda", "ecs", "logs", "sns")


def describe(stack: str = ENV, **changes) -> str:
    return json.dumps(job_service_value(stack, **changes))


publish = publish_job_service


@pytest.fixture
def service(home):
    publish(describe())
    open_admission()
    create_notification_topics()
    return home


@pytest.fixture
def requests():
    """Every request the command's clients send: (IAM action, params)."""
    seen: list[tuple[str, dict]] = []

    def record(params, model, **_):
        seen.append((f"{model.service_model.signing_name}:{model.name}", params))

    for name in SERVICES:
        client(name, HOME).meta.events.register("provide-client-params", record)
    return seen


def mlfleet(*argv) -> tuple[int, list[str]]:
    printed: list[str] = []
    code = cli.main(["-e", ENV, "--region", HOME, *argv], out=printed.append)
    return code, "\n".join(printed).splitlines()


def ledger() -> L.Ledger:
    return L.Ledger(boto3.client("dynamodb", HOME), f"mlfleet-{ENV}-jobs")


def granted(action: str, statement: dict) -> bool:
    return any(fnmatch.fnmatchcase(action.lower(), a.lower()) for a in statement["Action"])


def run_a_session() -> str:
    """What a user does: subscribe to notifications, submit, list, status, follow, cancel (a queued and a running
    job), look at the costs."""
    instances = build_fleet(size=1)
    assert mlfleet("notify", "subscribe", "ana@example.com")[0] == 0
    _, lines = mlfleet("submit", "--image", IMAGE, "--gpus", "1", "--vcpus", "1", "--memory", "1GiB", "--sweep", "a=1,2",
                       "--notify", "ana@example.com", "--", "run", "{a}")
    submission = lines[0].split(":")[0]
    first, second = sorted(r.job_id for r in ledger().by_submission(submission))
    ecs = boto3.client("ecs", HOME)
    arn = next(iter(instances.values()))
    task = ecs.start_task(cluster=CLUSTER, taskDefinition=FAMILY, containerInstances=[arn], startedBy=second)["tasks"][0]
    record = ledger().get(second)
    ledger().transition(second, L.STARTING, expect_states=[L.QUEUED], expect_attempt=0, reason="t", now=1.0, attempt=1,
                        placement=L.Placement(HOME, "gpu1", CLUSTER, arn, next(iter(instances)), "g5.12xlarge",
                                              task["taskArn"]))
    ledger().transition(second, L.RUNNING, expect_states=[L.STARTING], expect_attempt=1, reason="t", now=2.0,
                        runs=record.runs + 1)
    assert mlfleet("list", "--mine")[0] == 0 and mlfleet("status", first)[0] == 0 and mlfleet("cost")[0] == 0
    # follow --logs, one look (the command itself polls until the jobs end); the job has no log stream
    # yet, which the command takes as "nothing written so far"
    printed: list[str] = []
    assert cli.follow(cli.discover(ENV, HOME), submission, logs=True, out=printed.append, sleep=lambda _: None,
                      max_polls=1) == 3
    code, lines = mlfleet("cancel", submission)
    assert code == 0 and all("cancelled" in line for line in lines), lines
    return submission


def test_every_call_of_a_session_is_granted_by_the_command_policy_and_every_grant_is_used(service, requests):
    run_a_session()
    document = cli.policy(ENV, HOME, ACCOUNT)
    made = {ACTION_OF.get(action, action) for action, _ in requests} - {None}
    assert {a for a in made if not any(granted(a, s) for s in document["Statement"])} == set()
    unused = {a for s in document["Statement"] for a in s["Action"] if a not in made}
    assert unused == set(), f"granted but never called: {unused}"
    # Every ledger write names a job record, as the policy's dynamodb:LeadingKeys condition requires.
    keys = [p["Key"]["job_id"]["S"] for a, p in requests if a == "dynamodb:UpdateItem"] + \
           [p["Item"]["job_id"]["S"] for a, p in requests if a == "dynamodb:PutItem"] + \
           [w["Put"]["Item"]["job_id"]["S"] for a, p in requests if a == "dynamodb:TransactWriteItems"
            for w in p["TransactItems"]]
    (pattern,) = {tuple(s["Condition"]["ForAllValues:StringLike"]["dynamodb:LeadingKeys"])
                  for s in document["Statement"] if {"dynamodb:PutItem", "dynamodb:UpdateItem"} & set(s["Action"])}
    assert len(keys) >= 3 and all(fnmatch.fnmatchcase(key, pattern[0]) for key in keys), keys


def attribute_names(params: dict) -> set[str]:
    names = params.get("ExpressionAttributeNames", {})
    text = " ".join(params.get(k, "") for k in ("UpdateExpression", "ConditionExpression"))
    found = {names.get(token, token) for token in re.findall(r"(?<![:\w#])#?[A-Za-z_]\w*", text)}
    keywords = {"SET", "REMOVE", "AND", "IN", "OR", "NOT", "ADD", "DELETE"}
    return {n for n in found if n not in keywords} | set(params.get("Key", {}))


def test_cancel_is_one_conditional_update_of_the_attributes_the_policy_allows(service, requests):
    run_a_session()
    writes = [(a, p) for a, p in requests if a in ("dynamodb:PutItem", "dynamodb:UpdateItem")]
    (transaction,) = [p for a, p in requests if a == "dynamodb:TransactWriteItems"]
    puts = [item["Put"] for item in transaction["TransactItems"]]
    updates = [p for a, p in writes if a == "dynamodb:UpdateItem"]
    assert not [a for a, _ in writes if a == "dynamodb:PutItem"]  # a submission is one transaction of new items
    assert len(puts) == 2 and all(p["ConditionExpression"] == "attribute_not_exists(job_id)" for p in puts)
    assert len(updates) == 2
    (allowed,) = [s["Condition"]["ForAllValues:StringEquals"]["dynamodb:Attributes"]
                  for s in cli.policy(ENV, HOME, ACCOUNT)["Statement"] if "dynamodb:UpdateItem" in s["Action"]]
    for update in updates:
        assert attribute_names(update) <= set(allowed)
        assert "version = :version" in update["ConditionExpression"] and "#state IN" in update["ConditionExpression"]


def test_a_cancel_that_lost_a_race_changes_nothing(service):
    _, lines = mlfleet("submit", "--image", IMAGE, "--gpus", "1", "--vcpus", "1", "--memory", "1GiB")
    (job,) = ledger().by_submission(lines[0].split(":")[0])
    seen = ledger().get(job.job_id)
    ledger().transition(job.job_id, L.STARTING, expect_states=[L.QUEUED], expect_attempt=0, reason="claimed", now=5.0,
                        attempt=1)  # the scheduler claims it between the user's read and write
    outcome = ledger().cancel(seen, reason="cancelled by me", now=6.0)
    assert not outcome.applied and outcome.record.state == L.STARTING
    assert ledger().get(job.job_id).state == L.STARTING


def test_a_cancel_never_creates_a_record(service):
    """UpdateItem creates a missing item unless its condition says otherwise."""
    _, lines = mlfleet("submit", "--image", IMAGE, "--gpus", "1", "--vcpus", "1", "--memory", "1GiB")
    (job,) = ledger().by_submission(lines[0].split(":")[0])
    seen = ledger().get(job.job_id)
    boto3.client("dynamodb", HOME).delete_item(TableName=f"mlfleet-{ENV}-jobs", Key={"job_id": {"S": job.job_id}})
    assert not ledger().cancel(seen, reason="cancelled by me", now=6.0).applied
    assert ledger().get(job.job_id) is None


def test_a_cancel_keeps_everything_but_state_and_history(service):
    _, lines = mlfleet("submit", "--image", IMAGE, "--gpus", "1", "--vcpus", "1", "--memory", "1GiB")
    (job,) = ledger().by_submission(lines[0].split(":")[0])
    ledger().reserve(job.job_id, 0, (HOME, "gpu1", "box-1"), now=3.0)
    before = ledger().get(job.job_id)
    outcome = ledger().cancel(before, reason="cancelled by me", now=7.0)
    after = ledger().get(job.job_id)
    assert outcome.applied and after == outcome.record
    assert (after.state, after.version, after.reserved, after.updated_at) == (L.CANCELLED, before.version + 1, None, 7.0)
    assert after.reasons[-1] == {"at": 7.0, "attempt": 0, "state": L.CANCELLED, "reason": "cancelled by me"}
    assert (after.spec, after.attempt, after.runs, after.submitted_at) == (before.spec, before.attempt, before.runs,
                                                                           before.submitted_at)
    with pytest.raises(L.IllegalTransition):
        ledger().cancel(after, reason="again", now=8.0)


MISMATCHES = [  # (what the parameter says, what the error must name); one moto setup for all of them
    ({"queueUrl": f"https://sqs.{HOME}.amazonaws.com/{ACCOUNT}/mlfleet-prod-jobs"}, "queueUrl is 'mlfleet-prod-jobs'"),
    ({"queueUrl": f"https://sqs.{HOME}.amazonaws.com/{ACCOUNT}/mlfleet-dev-jobs2"}, "queueUrl is 'mlfleet-dev-jobs2'"),
    ({"ledgerTable": "mlfleet-prod-jobs"}, "ledgerTable is 'mlfleet-prod-jobs'"),
    ({"schedulerFunction": "mlfleet-prod-scheduler"}, "schedulerFunction is 'mlfleet-prod-scheduler'"),
    ({"jobLogGroup": "/mlfleet/prod/jobs"}, "jobLogGroup is '/mlfleet/prod/jobs'"),
    ({"homeRegion": "us-west-2"}, "homeRegion is 'us-west-2'"),
    ({"environment": "prod"}, "environment is 'prod'"),
    ({"fleets": [{**json.loads(fleets_json())[0], "cluster": "mlfleet-prod"}]}, "fleets[gpu1].cluster is 'mlfleet-prod'"),
    ({"notifications": {"email": f"arn:aws:sns:{HOME}:{ACCOUNT}:mlfleet-prod-job-notifications"}},
     "notifications.email is 'mlfleet-prod-job-notifications'"),
]


def test_a_parameter_describing_another_environment_stops_the_command_before_any_write(service, requests, capsys):
    for changes, named in MISMATCHES:
        publish(describe(**changes))
        requests.clear()
        code, _ = mlfleet("submit", "--image", IMAGE, "--gpus", "1", "--vcpus", "1", "--memory", "1GiB")
        error = capsys.readouterr().err
        assert code == 2 and named in error and "does not describe environment 'dev'" in error, (changes, error)
        assert error.count("\n") == 1  # one clear error, no traceback
        assert [a for a, _ in requests] == ["ssm:GetParameter"], changes  # nothing else called, nothing written
    assert ledger().by_state(L.QUEUED) == []


def test_the_whole_of_another_environments_parameter_is_named_at_once(service, capsys):
    publish(describe("prod"))
    assert mlfleet("cancel", "sub-20261123093000-3fa2c1-00004")[0] == 2
    error = capsys.readouterr().err
    for key in ("queueUrl", "ledgerTable", "schedulerFunction", "jobLogGroup"):
        assert key in error


def test_a_malformed_parameter_is_one_clear_error(service, capsys):
    for value in ("not json", json.dumps({"queueUrl": "x"}), json.dumps([1])):
        publish(value)
        assert mlfleet("list")[0] == 2
        error = capsys.readouterr().err
        assert "is not a job-service description" in error and "Traceback" not in error, value


def test_the_policy_shown_in_docs_jobs_md_is_the_one_the_command_prints():
    document = (Path(__file__).resolve().parents[2] / "docs" / "jobs.md").read_text()
    (shown,) = re.findall(r"in us-east-1 and account 123456789012:\n\n```json\n(.*?)\n```", document, re.S)
    assert json.loads(shown) == cli.policy("dev", "us-east-1", "123456789012")


def test_the_cancel_attributes_docs_jobs_md_names_are_the_ones_the_policy_allows():
    from lambdas.jobs.ledger import CANCEL_ATTRIBUTES

    document = (Path(__file__).resolve().parents[2] / "docs" / "jobs.md").read_text()
    (named,) = re.findall(r"to what a cancel writes \(([^)]*)\)", document)
    assert re.findall(r"`(\w+)`", named) == list(CANCEL_ATTRIBUTES)
