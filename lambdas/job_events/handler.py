"""Lambda entry point: spot interruptions, rebalance recommendations and ECS task state changes keep
the job ledger true and put interrupted jobs back in the queue (decide.py has the rules); the ledger's
stream of ended jobs announces the end of each submission that asked for it (submissions.py).

Environment: ENVIRONMENT, JOBS_TABLE, JOBS_QUEUE_URL, JOBS_DLQ_URL, FLEETS, REBALANCE_TIMEOUT_MINUTES,
NOTIFY_EMAIL_TOPIC_ARN, NOTIFY_SLACK_TOPIC_ARN (empty without a Slack channel).
Events arrive from every fleet region through EventBridge rules forwarding to the home region's
default bus, plus a schedule (every 5 minutes) for the rebalance timeout; stream batches arrive from the
ledger's DynamoDB stream through an event source mapping (synchronous: a failed batch is retried).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from lambdas.common.aws import chunks, client, paginate
from lambdas.common.catalog import load_catalog
from lambdas.common.logs import log_decision
from lambdas.common.permissions import ISO_8601_TIME, PUBLISH_TO_ENCRYPTED_TOPICS, needs
from lambdas.common.settings import from_env
from lambdas.common.tags import ENVIRONMENT
from lambdas.job_events import decide as D
from lambdas.job_events import submissions
from lambdas.jobs import ledger as L
from lambdas.jobs import queue
from lambdas.jobs.fleets import REBALANCE_TAG, parse_fleets

CLUSTER_ARN = "arn:{partition}:ecs:*:{account}:cluster/mlfleet-{environment}"

INSTANCES = ("arn:{partition}:ec2:*:{account}:instance/*",)

PERMISSIONS = (
    *L.WRITE_PERMISSIONS,
    *queue.SEND_PERMISSIONS,
    *queue.DEAD_LETTER_PERMISSIONS,
    needs("ecs:ListContainerInstances", resources=(CLUSTER_ARN,), why="find an interrupted instance's registration"),
    needs("ecs:DescribeContainerInstances", "ecs:UpdateContainerInstancesState",
          resources=("arn:{partition}:ecs:*:{account}:container-instance/mlfleet-{environment}/*",),
          condition={"ArnLike": {"ecs:cluster": CLUSTER_ARN}}, why="drain an interrupted instance"),
    needs("ecs:StopTask", resources=("arn:{partition}:ecs:*:{account}:task/mlfleet-{environment}/*",),
          condition={"ArnLike": {"ecs:cluster": CLUSTER_ARN}},
          why="give interrupted jobs their SIGTERM now; stop tasks of superseded attempts"),
    needs("ec2:DescribeInstances", why="is the instance ours; find rebalance tags"),
    needs("ec2:CreateTags", resources=INSTANCES, tag_scoped=True, tag_keys=(REBALANCE_TAG,), tag_values=ISO_8601_TIME,
          why="mark an instance under a rebalance recommendation (the rebalance-at tag only)"),
    needs("ec2:DeleteTags", resources=INSTANCES, tag_scoped=True, tag_keys=(REBALANCE_TAG,),
          why="undo the mark after the timeout"),
    # What Lambda's event source mapping needs to read the ledger's stream with the function's role
    # (https://docs.aws.amazon.com/lambda/latest/dg/with-ddb.html#events-dynamodb-permissions);
    # ListStreams takes no resource (the IAM reference).
    needs("dynamodb:DescribeStream", "dynamodb:GetRecords", "dynamodb:GetShardIterator",
          resources=("arn:{partition}:dynamodb:{region}:{account}:table/" + L.TABLE_NAME + "/stream/*",),
          why="read the ledger's stream of ended jobs"),
    needs("dynamodb:ListStreams", why="find the ledger's stream (ListStreams has no resource type)"),
    needs("sns:Publish", resources=("arn:{partition}:sns:{region}:{account}:mlfleet-{environment}-job-notifications",
                                    "arn:{partition}:sns:{region}:{account}:mlfleet-{environment}-job-notifications-slack"),
          why="announce the end of a submission to who asked (e-mail, the Slack channel)"),
    PUBLISH_TO_ENCRYPTED_TOPICS,
)


@dataclass(frozen=True)
class Settings:
    environment: str
    jobs_table: str
    jobs_queue_url: str
    jobs_dlq_url: str
    fleets: str
    rebalance_timeout_minutes: int
    notify_email_topic_arn: str
    notify_slack_topic_arn: str = ""  # no Slack channel in the stack


def handler(event, context=None):
    settings = from_env(Settings)
    if is_stream_batch(event):
        return ended_jobs(event["Records"], settings)
    return handle(event, settings)


def is_stream_batch(event) -> bool:
    records = event.get("Records") if isinstance(event, dict) else None
    return isinstance(records, list) and all(isinstance(r, dict) and r.get("eventSource") == "aws:dynamodb"
                                             for r in records) and bool(records)


def ended_jobs(records: list, settings: Settings, now: datetime | None = None) -> dict:
    """A batch of the ledger's stream: announce each submission that ended and asked to be told. An error
    is raised after all were tried, so the event source mapping retries the batch (announcing is
    idempotent: a submission is announced once)."""
    now = now or datetime.now(timezone.utc)
    ledger = L.Ledger(client("dynamodb"), settings.jobs_table)
    outcomes, failed = {}, []
    for submission_id in submissions.submissions_to_check(records):
        try:
            outcomes[submission_id] = submissions.announce(
                ledger, client("sns"), environment=settings.environment, submission_id=submission_id,
                email_topic_arn=settings.notify_email_topic_arn, slack_topic_arn=settings.notify_slack_topic_arn,
                now=now.timestamp())
        except Exception as error:  # one submission's failure must not cost the others their turn
            failed.append(submission_id)
            log_decision("announce-failed", submission_id=submission_id, error=f"{type(error).__name__}: {error}")
    if failed:
        raise RuntimeError(f"announcing {', '.join(failed)} failed; the batch is retried")
    return {"submissions": outcomes}


def handle(event, settings: Settings, now: datetime | None = None) -> dict:
    try:
        parsed = D.parse_event(event)
    except D.EventError as error:
        # Raised, not swallowed: the failed asynchronous invocation goes to the function's
        # on-failure destination with the event intact.
        log_decision("bad-event", error=str(error))
        raise
    ledger = L.Ledger(client("dynamodb"), settings.jobs_table)
    now = now or datetime.now(timezone.utc)
    if isinstance(parsed, D.Unknown):
        log_decision("ignore-event", detail_type=parsed.detail_type, reason="not an event this function handles")
        return {"ignored": parsed.detail_type}
    if isinstance(parsed, D.TaskStateChange):
        record = ledger.get(parsed.job_id) if parsed.job_id else None
        decision = D.decide_task_change(parsed, record, load_catalog())
        return {"decisions": [apply(decision, ledger, settings, parsed.region, parsed.cluster_arn, now)]}
    if isinstance(parsed, D.RebalanceCheck):
        return {"undone": undo_expired_rebalances(settings, parsed.time)}
    if parsed.kind == D.REBALANCE:
        return {"tagged": tag_rebalance(settings, parsed)}
    return {"decisions": interrupt(parsed, ledger, settings, now)}


def apply(decision: D.Decision, ledger: L.Ledger, settings: Settings, region: str, cluster: str, now: datetime) -> dict:
    applied = None
    if decision.to_state is None and decision.changes:
        applied = ledger.amend(decision.job_id, expect_state=decision.expect_state,
                               expect_attempt=decision.expect_attempt, now=now.timestamp(), **decision.changes).applied
    if decision.to_state is not None:
        outcome = ledger.transition(decision.job_id, decision.to_state, expect_states=[decision.expect_state],
                                    expect_attempt=decision.expect_attempt, reason=decision.reason,
                                    now=now.timestamp(), **decision.changes)
        applied = outcome.applied
        if outcome.applied and decision.send_message_attempt is not None:
            refused = queue.send_jobs(client("sqs"), settings.jobs_queue_url,
                                      [queue.JobMessage(decision.job_id, decision.send_message_attempt)])
            if refused:
                # The ledger says QUEUED, so the scheduler's by-state read still finds the job.
                log_decision("queue-refused", job_id=decision.job_id)
        if outcome.applied and decision.dead_letter:
            queue.dead_letter(client("sqs"), settings.jobs_dlq_url, decision.job_id, decision.reason,
                              outcome.record.runs)
    if decision.stop_task:
        client("ecs", region).stop_task(cluster=cluster, task=decision.stop_task, reason=decision.reason[:255])
    record = {"job_id": decision.job_id, "to_state": decision.to_state, "applied": applied, "reason": decision.reason,
              "stopped_task": decision.stop_task, "dead_letter": bool(decision.dead_letter and applied)}
    log_decision("job-event", **record)
    return record


def _container_instances(ecs, cluster: str, instance_id: str) -> list[str]:
    arns = list(paginate(ecs, "list_container_instances", "containerInstanceArns", cluster=cluster))
    found = []
    for batch in chunks(arns, 100):
        for ci in ecs.describe_container_instances(cluster=cluster, containerInstances=batch)["containerInstances"]:
            if ci["ec2InstanceId"] == instance_id and ci.get("status") != "DRAINING":
                found.append(ci["containerInstanceArn"])
    return found


def interrupt(event: D.InstanceEvent, ledger: L.Ledger, settings: Settings, now: datetime) -> list[dict]:
    ecs = client("ecs", event.region)
    for cluster in dict.fromkeys(f.cluster for f in parse_fleets(settings.fleets) if f.region == event.region):
        arns = _container_instances(ecs, cluster, event.instance_id)
        if arns:
            ecs.update_container_instances_state(cluster=cluster, containerInstances=arns, status="DRAINING")
        log_decision("drain", instance_id=event.instance_id, region=event.region, cluster=cluster,
                     container_instances=arns)
    records = [*ledger.by_state(L.RUNNING), *ledger.by_state(L.STARTING)]
    results = []
    for decision in D.decide_interruption(event.instance_id, records, now=event.time.timestamp(), catalog=load_catalog()):
        placement = next(r.placement for r in records if r.job_id == decision.job_id)
        results.append(apply(decision, ledger, settings, placement.region, placement.cluster, now))
    return results


def _ours(ec2, instance_id: str, environment: str) -> bool:
    reservations = ec2.describe_instances(InstanceIds=[instance_id])["Reservations"]
    tags = {t["Key"]: t["Value"] for r in reservations for i in r["Instances"] for t in i.get("Tags", [])}
    return tags.get(ENVIRONMENT) == environment


def tag_rebalance(settings: Settings, event: D.InstanceEvent) -> bool:
    ec2 = client("ec2", event.region)
    if not _ours(ec2, event.instance_id, settings.environment):
        log_decision("ignore-rebalance", instance_id=event.instance_id, reason="not an instance of this environment")
        return False
    ec2.create_tags(Resources=[event.instance_id],
                    Tags=[{"Key": REBALANCE_TAG, "Value": event.time.isoformat(timespec="seconds")}])
    log_decision("rebalance", instance_id=event.instance_id, region=event.region, at=event.time)
    return True


def undo_expired_rebalances(settings: Settings, now: datetime) -> list[str]:
    timeout = timedelta(minutes=settings.rebalance_timeout_minutes)
    undone = []
    for region in dict.fromkeys(f.region for f in parse_fleets(settings.fleets)):
        ec2 = client("ec2", region)
        tagged = {}
        for reservation in paginate(ec2, "describe_instances", "Reservations", Filters=[
                {"Name": "tag-key", "Values": [REBALANCE_TAG]},
                {"Name": f"tag:{ENVIRONMENT}", "Values": [settings.environment]},
                {"Name": "instance-state-name", "Values": ["pending", "running"]}]):
            for instance in reservation["Instances"]:
                tags = {t["Key"]: t["Value"] for t in instance.get("Tags", [])}
                tagged[instance["InstanceId"]] = tags[REBALANCE_TAG]
        expired = D.expired_rebalance_tags(tagged, now, timeout)
        if expired:
            ec2.delete_tags(Resources=expired, Tags=[{"Key": REBALANCE_TAG}])
        for instance_id in expired:
            log_decision("undo-rebalance", instance_id=instance_id, region=region, tagged_at=tagged[instance_id],
                         reason=f"no interruption within {settings.rebalance_timeout_minutes} minutes")
        undone.extend(expired)
    return undone
