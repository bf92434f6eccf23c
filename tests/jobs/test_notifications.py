"""The end of a submission, announced once to who asked, against moto: `mlfleet notify subscribe` filters on the
address, the ledger's stream of ended jobs reaches the job-events function, which reads the submission, marks it
announced with a conditional write and publishes the e-mail and the Slack message.

Where moto differs from AWS: e-mail endpoints receive nothing in moto, so each address is also subscribed as an
SQS queue with the filter policy the command gives its e-mail subscription, and the test reads what SNS delivered
there; the stream records are built from the table's items as DynamoDB Streams shapes them (NEW_IMAGE), since
moto's event source mappings need Docker.
"""

from __future__ import annotations

import json

import boto3
import pytest
from conftest import ENV, HOME, aws_client, create_notification_topics, job_service_value, open_admission, publish_job_service
from faults import KINDS

from lambdas.common.aws import client
from lambdas.job_events import handler as events
from lambdas.job_events import submissions
from lambdas.jobs import cli
from lambdas.jobs import ledger as L
from lambdas.jobs.cli import notify
from lambdas.jobs.quarantine import Quarantine

IMAGE = "ghcr.io/team/train:3"
NOW = 1_800_000_000.0


@pytest.fixture
def world(home):
    topics = create_notification_topics()
    publish_job_service(job_service_value(queueUrl=home["queue"], deadLetterQueueUrl=home["dlq"],
                                          notifications=topics))
    open_admission()
    settings = events.Settings(environment=ENV, jobs_table=home["table"], jobs_queue_url=home["queue"],
                               jobs_dlq_url=home["dlq"], fleets="[]", rebalance_timeout_minutes=30,
                               notify_email_topic_arn=topics["email"], notify_slack_topic_arn=topics["slack"])
    return topics, settings


def inbox(topic: str, filter_policy: str | None = None) -> str:
    """An SQS queue subscribed to `topic` (with the filter an e-mail subscription of the command gets)."""
    sqs, sns = boto3.client("sqs", HOME), boto3.client("sns", HOME)
    url = sqs.create_queue(QueueName=f"inbox-{len(sqs.list_queues().get('QueueUrls', []))}")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    attributes = {"RawMessageDelivery": "true"}
    if filter_policy:
        attributes.update(FilterPolicy=filter_policy, FilterPolicyScope="MessageAttributes")
    sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=arn, Attributes=attributes)
    return url


def received(url: str) -> list[str]:
    return [m["Body"] for m in aws_client("sqs", HOME).receive_message(QueueUrl=url, MaxNumberOfMessages=10)
            .get("Messages", [])]


def ledger() -> L.Ledger:
    return L.Ledger(aws_client("dynamodb", HOME), f"mlfleet-{ENV}-jobs")


def submit(*notify_to: str, jobs: int = 2) -> str:
    out: list[str] = []
    argv = ["-e", ENV, "--region", HOME, "submit", "--image", IMAGE, "--gpus", "1", "--vcpus", "1", "--memory", "1GiB",
            "--team", "vision", *(a for n in notify_to for a in ("--notify", n)), "--sweep",
            "seed=" + ",".join(map(str, range(jobs))), "--", "train", "{seed}"]
    assert cli.main(argv, out=out.append, err=lambda _: None) == 0
    return out[0].split(":")[0]


def end(job_id: str, state: str = L.SUCCEEDED, cost: L.Cost | None = None) -> None:
    ledger().transition(job_id, L.STARTING, expect_states=[L.QUEUED], expect_attempt=0, reason="placed", now=NOW,
                        attempt=1)
    ledger().transition(job_id, state, expect_states=[L.STARTING], expect_attempt=1, now=NOW + 60,
                        reason="exit code 0" if state == L.SUCCEEDED else "exit code 2 (Essential container in task "
                        "exited): not retried (no retry_on_exit_codes)", runs=1, cost=cost)


def stream(*job_ids: str) -> list[dict]:
    """The stream records of the jobs' current items, as the event source mapping delivers them."""
    dynamodb = boto3.client("dynamodb", HOME)
    return [{"eventSource": "aws:dynamodb", "eventName": "MODIFY", "dynamodb": {
        "Keys": {"job_id": {"S": j}}, "StreamViewType": "NEW_IMAGE",
        "NewImage": dynamodb.get_item(TableName=f"mlfleet-{ENV}-jobs", Key={"job_id": {"S": j}})["Item"]}}
        for j in job_ids]


def item_of(job_id: str) -> dict:
    return boto3.client("dynamodb", HOME).get_item(TableName=f"mlfleet-{ENV}-jobs", Key={"job_id": {"S": job_id}})["Item"]


def make_unreadable(job_id: str) -> None:
    """The job's item without its spec, as a hand edit or an old writer leaves it: it cannot be decoded."""
    item = item_of(job_id)
    del item["spec"]
    boto3.client("dynamodb", HOME).put_item(TableName=f"mlfleet-{ENV}-jobs", Item=item)


def two_jobs_the_first_ended(topics) -> tuple[object, str, L.JobRecord, L.JobRecord]:
    """Ana's inbox and a submission of two jobs that asked to tell her, its first job ended: (inbox,
    submission, first, last)."""
    ana = inbox(topics["email"], notify.filter_policy("ana@example.com"))
    submission = submit("ana@example.com", jobs=2)
    first, last = sorted(ledger().by_submission(submission), key=lambda r: r.index)
    end(first.job_id)
    return ana, submission, first, last


def test_subscribing_filters_on_the_address(world):
    topics, _ = world
    out: list[str] = []
    assert cli.main(["-e", ENV, "--region", HOME, "notify", "subscribe", "ana@example.com"], out=out.append) == 0
    assert "pending confirmation" in out[0]
    (subscription,) = boto3.client("sns", HOME).list_subscriptions_by_topic(TopicArn=topics["email"])["Subscriptions"]
    assert (subscription["Protocol"], subscription["Endpoint"]) == ("email", "ana@example.com")
    attributes = boto3.client("sns", HOME).get_subscription_attributes(SubscriptionArn=subscription["SubscriptionArn"])
    assert json.loads(attributes["Attributes"]["FilterPolicy"]) == {"notify": ["ana@example.com"]}
    assert attributes["Attributes"]["FilterPolicyScope"] == "MessageAttributes"
    err: list[str] = []
    assert cli.main(["-e", ENV, "--region", HOME, "notify", "subscribe", "ana"], err=err.append) == 2
    assert err == ["mlfleet: 'ana' is not an e-mail address"]


def test_a_submission_that_ended_is_announced_once_to_each_address_it_named_and_to_slack(world):
    topics, settings = world
    ana = inbox(topics["email"], notify.filter_policy("ana@example.com"))
    bo = inbox(topics["email"], notify.filter_policy("bo@example.com"))
    slack = inbox(topics["slack"])
    submission = submit("ana@example.com", "slack")
    first, second = sorted(r.job_id for r in ledger().by_submission(submission))
    end(first, cost=L.Cost(0.5, 1.5, 3600, 1))
    # One job ended: nothing to announce yet.
    assert events.ended_jobs(stream(first), settings)["submissions"] == {submission: f"running ({second})"}
    end(second, L.FAILED, cost=L.Cost(0.25, 0.75, 1800, 1))
    assert events.ended_jobs(stream(second), settings)["submissions"] == {submission: "announced"}

    (mail,) = received(ana)
    assert received(bo) == []  # another address's subscription does not get it
    assert mail.splitlines()[:5] == [
        f"Submission {submission} (2 jobs, submitted by moto, team vision) has ended in {ENV}.",
        "  FAILED     1", "  SUCCEEDED  1",
        "Cost: $0.75 at the prices paid ($2.25 on demand, 67% saved), 1.5 hours of held capacity.",
        "Failed jobs:"]
    assert f"mlfleet -e {ENV} list --submission {submission} --state FAILED" in mail
    (chat,) = received(slack)
    message = json.loads(chat)
    assert (message["version"], message["source"], message["content"]["textType"]) == ("1.0", "custom", "client-markdown")
    assert message["content"]["title"] == f"mlfleet {ENV}: {submission} ended: 1 failed, 1 succeeded"
    assert ledger().get(first).notified_at is not None and ledger().get(second).notified_at is None  # on the first job

    # A retried batch, or another batch with the same submission's jobs: announced already, nothing sent.
    assert events.ended_jobs(stream(first, second), settings)["submissions"] == {submission: "already announced"}
    assert received(ana) == [] and received(slack) == []


def test_a_job_the_index_still_shows_running_is_read_again_from_the_table(world):
    submission = submit("ana@example.com", jobs=1)
    (job,) = ledger().by_submission(submission)  # what a stale index would still show: QUEUED
    end(job.job_id)
    assert submissions.still_running(ledger(), [job]) is None  # the table says it ended
    other = submit("ana@example.com", jobs=1)
    (running,) = ledger().by_submission(other)
    assert submissions.still_running(ledger(), [job, running]) == running.job_id


def test_a_look_at_a_running_submission_reads_its_pages_up_to_its_first_active_job(world, monkeypatch):
    """Each batch of a large submission's ended jobs brings a look at it: while it runs, the look stops at
    its first job really active, and the index's later pages are not read. moto pages a Query at 1 MB, as
    DynamoDB does; here at about two jobs' items, so six jobs are three pages or more."""
    from moto.dynamodb.models import table

    submission = submit("ana@example.com", jobs=6)
    jobs = sorted(ledger().by_submission(submission), key=lambda r: r.index)
    for job in jobs[:1] + jobs[2:]:
        end(job.job_id)
    monkeypatch.setattr(table, "RESULT_SIZE_LIMIT", len(json.dumps(item_of(jobs[0].job_id))))  # about two items
    dynamodb = boto3.client("dynamodb", HOME)
    pages = []
    dynamodb.meta.events.register("after-call.dynamodb.Query", lambda parsed, **kwargs: pages.append(parsed["Count"]))
    looked = L.Ledger(dynamodb, f"mlfleet-{ENV}-jobs")
    assert len(looked.by_submission(submission)) == 6 and len(pages) >= 3 and pages[0] >= 2  # all of it
    pages.clear()
    assert submissions.announce(looked, client("sns"), environment=ENV, submission_id=submission,
                                email_topic_arn="", slack_topic_arn="", now=NOW) == f"running ({jobs[1].job_id})"
    assert len(pages) == 1  # the first page, which holds the second job


def test_a_failed_publish_takes_the_mark_back_so_the_retried_batch_announces(world):
    topics, settings = world
    ana = inbox(topics["email"], notify.filter_policy("ana@example.com"))
    submission = submit("ana@example.com", jobs=1)
    (job,) = ledger().by_submission(submission)
    end(job.job_id)
    calls = []

    def fail_once(**_):
        calls.append(1)
        if len(calls) == 1:
            raise ConnectionResetError("connection reset")

    client("sns").meta.events.register("before-send.sns.Publish", fail_once)
    with pytest.raises(events.RetryLater, match=f"announcing {submission} failed; the batch is retried"):
        events.ended_jobs(stream(job.job_id), settings)
    assert ledger().get(job.job_id).notified_at is None
    assert events.ended_jobs(stream(job.job_id), settings)["submissions"] == {submission: "announced"}
    assert len(received(ana)) == 1


def test_jobs_without_a_notification_and_unreadable_records_are_passed_over(world):
    _, settings = world
    submission = submit(jobs=1)
    (job,) = ledger().by_submission(submission)
    end(job.job_id)
    garbage = {"eventSource": "aws:dynamodb", "eventName": "MODIFY", "dynamodb": {"NewImage": {"job_id": {"S": "x"}}}}
    assert events.ended_jobs([*stream(job.job_id), garbage], settings) == {"submissions": {}}


def test_the_lambda_entry_point_routes_stream_batches(world, monkeypatch):
    _, settings = world
    for key, value in vars(settings).items():
        monkeypatch.setenv(key.upper(), str(value))
    submission = submit("ana@example.com", jobs=1)
    (job,) = ledger().by_submission(submission)
    end(job.job_id, L.CANCELLED)
    assert events.handler({"Records": stream(job.job_id)}) == {"submissions": {submission: "announced"}}
    assert not events.is_stream_batch({"Records": [{"eventSource": "aws:sns"}]}) and not events.is_stream_batch({})


def test_a_broken_record_does_not_cost_its_batch_the_good_ones(world, caplog):
    """Found by tests/jobs/test_event_properties.py: one record of a stream batch without its eventSource
    (or with another) made the whole batch read as an EventBridge event, dropped as 'event.detail-type is
    missing': the good record's submission was never announced. Now the broken record is skipped, named."""
    topics, settings = world
    ana = inbox(topics["email"], notify.filter_policy("ana@example.com"))
    submission = submit("ana@example.com", jobs=1)
    (job,) = ledger().by_submission(submission)
    end(job.job_id)
    (good,) = stream(job.job_id)
    broken = {k: v for k, v in good.items() if k != "eventSource"}
    assert events.handler({"Records": [broken, good, None]}, settings=settings) == {"submissions": {submission: "announced"}}
    assert len(received(ana)) == 1
    skipped = [json.loads(r.getMessage()) for r in caplog.records if "stream-record-skipped" in r.getMessage()]
    assert [line["error"] for line in skipped] == [
        "Records[0].eventSource=None: not a record of the ledger's stream",
        "Records[2]=None: not a record of the ledger's stream"]


def test_a_job_record_that_cannot_be_read_is_quarantined_and_its_submission_announced_with_it(world):
    """An unreadable job of the submission is quarantined by the batch that meets it; its end is not known
    until then, so the submission is announced by the quarantine's own stream record, the quarantined job
    counted and listed with the failures (it went to the dead-letter queue)."""
    topics, settings = world
    ana, submission, first, broken = two_jobs_the_first_ended(topics)
    make_unreadable(broken.job_id)
    assert events.ended_jobs(stream(first.job_id), settings)["submissions"] == {submission: f"running ({broken.job_id})"}
    with pytest.raises(L.UndecodableRecord) as unreadable:
        ledger().get(broken.job_id)
    assert unreadable.value.bad.quarantined and received(ana) == []

    assert events.ended_jobs(stream(broken.job_id), settings)["submissions"] == {submission: "announced"}
    (mail,) = received(ana)
    assert mail.splitlines()[:4] == [
        f"Submission {submission} (2 jobs, submitted by moto, team vision) has ended in {ENV}.",
        "  QUARANTINED 1", "  SUCCEEDED  1", "Failed jobs:"]
    assert f"  {broken.job_id}  quarantined: " in mail


def test_a_submission_whose_last_job_ends_with_a_record_that_cannot_be_read_is_announced(world):
    """The last job's end comes as a stream record that cannot be decoded: it was skipped alone, so nothing
    looked at its submission again and the submission was never announced. Its submission is still looked at:
    the batch quarantines the item, and the quarantine's own record announces the submission."""
    topics, settings = world
    ana, submission, first, last = two_jobs_the_first_ended(topics)
    assert events.ended_jobs(stream(first.job_id), settings)["submissions"] == {submission: f"running ({last.job_id})"}
    end(last.job_id)
    make_unreadable(last.job_id)
    assert events.ended_jobs(stream(last.job_id), settings)["submissions"] == {submission: f"running ({last.job_id})"}
    assert events.ended_jobs(stream(last.job_id), settings)["submissions"] == {submission: "announced"}
    (mail,) = received(ana)
    assert "  QUARANTINED 1" in mail and f"{last.job_id}  quarantined: " in mail


def test_a_submission_whose_last_job_is_quarantined_is_announced(world):
    """Regression: the stream's filter let only SUCCEEDED, FAILED and CANCELLED records through, so a
    submission whose last job the scheduler quarantined was never announced."""
    from components.jobs.jobs import ENDED_JOBS_FILTER

    topics, settings = world
    ana, submission, first, last = two_jobs_the_first_ended(topics)
    assert events.ended_jobs(stream(first.job_id), settings)["submissions"] == {submission: f"running ({last.job_id})"}
    quarantine = Quarantine(ledger(), client("sqs"), settings.jobs_dlq_url, by="scheduler")
    assert quarantine.item(L.Undecodable(last.job_id, item_of(last.job_id), "a record the planner's request cannot be built from"), NOW)

    (record,) = stream(last.job_id)
    assert L.QUARANTINED in json.loads(ENDED_JOBS_FILTER)["dynamodb"]["NewImage"]["state"]["S"]
    assert record["dynamodb"]["NewImage"]["state"] == {"S": L.QUARANTINED}
    assert events.ended_jobs([record], settings)["submissions"] == {submission: "announced"}
    (mail,) = received(ana)
    assert "  QUARANTINED 1" in mail and f"{last.job_id}  quarantined: a record the planner" in mail


@pytest.mark.parametrize("kind", KINDS)
def test_a_failed_slack_publish_retries_slack_only_and_the_email_goes_out_once(world, faults, kind):
    """Each channel is marked on its own: the e-mail went out, the Slack publish throttled, was refused or
    lost its answer; the retried batch tells Slack and does not send the e-mail again (before, the one mark
    was taken back and the retry sent the e-mail twice)."""
    topics, settings = world
    ana = inbox(topics["email"], notify.filter_policy("ana@example.com"))
    slack = inbox(topics["slack"])
    submission = submit("ana@example.com", "slack", jobs=1)
    (job,) = ledger().by_submission(submission)
    end(job.job_id)
    with faults.active(("sns", "Publish"), kind, when=lambda params: params.get("TopicArn") == topics["slack"]), \
            pytest.raises(events.RetryLater):
        events.ended_jobs(stream(job.job_id), settings)
    assert faults.injected == [(("sns", "Publish"), kind)]
    assert ledger().get(job.job_id).notified == ("email",)

    assert events.ended_jobs(stream(job.job_id), settings)["submissions"] == {submission: "announced"}  # the retry
    assert len(received(ana)) == 1
    # Slack once; twice only when the first message went out and its answer was lost.
    assert len(received(slack)) == (2 if kind == "timeout" else 1)
    assert ledger().get(job.job_id).notified == ("email", "slack")
    assert events.ended_jobs(stream(job.job_id), settings)["submissions"] == {submission: "already announced"}
