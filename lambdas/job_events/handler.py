"""Lambda entry point: spot interruptions, rebalance recommendations and ECS task state changes keep
the job ledger true and put interrupted jobs back in the queue (decide.py has the rules); at a spot
notice the group's replacement of the instance is kept or declined (replacements.py); the ledger's
stream of ended jobs announces the end of each submission that asked for it (submissions.py).

Environment: ENVIRONMENT, JOBS_TABLE, JOBS_QUEUE_URL, JOBS_DLQ_URL, FLEETS, REBALANCE_TIMEOUT_MINUTES,
NOTIFY_EMAIL_TOPIC_ARN, NOTIFY_SLACK_TOPIC_ARN (empty without a Slack channel), ACCOUNT_ID (names the
checkpoint buckets: without it every interruption uses an attempt).
Events arrive from every fleet region through EventBridge rules forwarding to the home region's
default bus, plus a schedule (every 5 minutes) for the rebalance timeout; stream batches arrive from the
ledger's DynamoDB stream through an event source mapping (synchronous: a failed batch is retried).

Failures are per item (lambdas/common/errors.py). An event that cannot be parsed, or comes from a region
without fleets, is logged and dropped (retrying it would not change it). For one event's items (the jobs
of an interrupted instance, the regions of the rebalance check) each is tried; when one failed, the
handler raises RetryLater after all were tried, so Lambda's asynchronous retry delivers the event again
(two more times: https://docs.aws.amazon.com/lambda/latest/dg/invocation-async-error-handling.html).
Every change here is conditional or idempotent, and the tasks of an interrupted instance are found from
ECS, not the ledger, so a replay finishes what failed and repeats nothing. A replay finds a failed job
already FAILED, so the dead-letter message is not left to it: it is owed in the ledger before the write
and a send that fails is made by the scheduler's sweep (lambdas/jobs/dead_letters.py). The scheduled check is not
retried: the next one comes five minutes later. A job record that cannot be read is quarantined
(lambdas/jobs/quarantine.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from botocore.exceptions import ClientError

from ..common.aws import TASKS_PER_DESCRIBE, chunks, client, paginate
from ..common.catalog import load_catalog
from ..common.errors import describe, error_code, per_item
from ..common.logs import log_decision
from ..common.permissions import ISO_8601_TIME, PUBLISH_TO_ENCRYPTED_TOPICS, needs
from ..common.settings import from_env
from ..common.tags import ENVIRONMENT
from . import decide as D
from . import replacements, submissions
from ..jobs import checkpoints, dead_letters
from ..jobs import ledger as L
from ..jobs import queue
from ..jobs.fleets import REBALANCE_TAG, parse_fleets
from ..jobs.quarantine import Quarantine
from ..jobs.spec import is_job_id

CLUSTER_ARN = "arn:{partition}:ecs:*:{account}:cluster/mlfleet-{environment}"
# The most checkpoint objects read to find a job's newest (ListObjectsV2 returns keys in name order, not
# time order, so all are read); a job keeps a few.
CHECKPOINT_LISTING_KEYS = 5000

INSTANCES = ("arn:{partition}:ec2:*:{account}:instance/*",)

PERMISSIONS = (
    *L.WRITE_PERMISSIONS,
    *L.QUARANTINE_PERMISSIONS,
    *queue.SEND_PERMISSIONS,
    *dead_letters.PERMISSIONS,
    needs("ecs:ListContainerInstances", resources=(CLUSTER_ARN,), why="find an interrupted instance's registration"),
    # IAM authorizes ListTasks on container-instance ARNs or "*" narrowed by ecs:cluster (lambdas/scheduler/state.py).
    needs("ecs:ListTasks", condition={"ArnLike": {"ecs:cluster": CLUSTER_ARN}},
          why="find the tasks on an interrupted instance"),
    needs("ecs:DescribeContainerInstances", "ecs:UpdateContainerInstancesState",
          resources=("arn:{partition}:ecs:*:{account}:container-instance/mlfleet-{environment}/*",),
          condition={"ArnLike": {"ecs:cluster": CLUSTER_ARN}}, why="drain an interrupted instance"),
    needs("ecs:DescribeTasks", resources=("arn:{partition}:ecs:*:{account}:task/mlfleet-{environment}/*",),
          condition={"ArnLike": {"ecs:cluster": CLUSTER_ARN}}, why="which tasks on an interrupted instance are jobs"),
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
    # ListBucket within jobs/ of this environment's checkpoint buckets, in this account
    # (lambdas/jobs/checkpoints.py names them; components/storage/checkpoints.py job_access_policy).
    needs("s3:ListBucket", resources=("arn:{partition}:s3:::mlfleet-{environment}-{account}-*",),
          condition={"StringEquals": {"aws:ResourceAccount": "{account}"},
                     "StringLike": {"s3:prefix": checkpoints.PREFIX + "*"}},
          why="did an interrupted job save a checkpoint in its run (then the run uses no attempt)"),
    needs("dynamodb:ListStreams", why="find the ledger's stream (ListStreams has no resource type)"),
    needs("sns:Publish", resources=("arn:{partition}:sns:{region}:{account}:mlfleet-{environment}-job-notifications",
                                    "arn:{partition}:sns:{region}:{account}:mlfleet-{environment}-job-notifications-slack"),
          why="announce the end of a submission to who asked (e-mail, the Slack channel)"),
    PUBLISH_TO_ENCRYPTED_TOPICS,
    *replacements.PERMISSIONS,
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
    account_id: str = ""  # names the checkpoint buckets; empty: no checkpoint is looked for


class RetryLater(Exception):
    """Some items of the event failed for a reason that may pass; Lambda delivers the event again."""


def handler(event, context=None, settings: Settings | None = None):
    settings = settings or from_env(Settings)
    if is_stream_batch(event):
        return ended_jobs(event["Records"], settings)
    return handle(event, settings)


def is_stream_batch(event) -> bool:
    """A batch of the ledger's stream: a list of records of which one at least is a DynamoDB record (and no
    EventBridge detail-type). One broken record does not make the batch an EventBridge event, which would
    drop its good records with it; submissions_to_check skips the broken ones, each logged."""
    records = event.get("Records") if isinstance(event, dict) and "detail-type" not in event else None
    return isinstance(records, list) and any(isinstance(r, dict) and r.get("eventSource") == "aws:dynamodb"
                                             for r in records)


def ended_jobs(records: list, settings: Settings, now: datetime | None = None) -> dict:
    """A batch of the ledger's stream: announce each submission that ended and asked to be told. A failure
    is per submission; RetryLater is raised after all were tried, so the event source mapping retries the
    batch (announcing is idempotent: a submission is announced once). A job record that cannot be read is
    quarantined, so the retried batch announces the rest of its submission."""
    now = now or datetime.now(timezone.utc)
    ledger = L.Ledger(client("dynamodb"), settings.jobs_table)
    outcomes: dict[str, str] = {}
    failures: list[dict] = []
    for submission_id in submissions.submissions_to_check(records):
        with per_item("announce-failed", failures, submission_id=submission_id):
            outcomes[submission_id] = submissions.announce(
                ledger, client("sns"), environment=settings.environment, submission_id=submission_id,
                email_topic_arn=settings.notify_email_topic_arn, slack_topic_arn=settings.notify_slack_topic_arn,
                now=now.timestamp())
    Quarantine(ledger, client("sqs"), settings.jobs_dlq_url, by="job-events").sweep(now.timestamp(), failures)
    if failures:
        failed = ", ".join(str(f.get("submission_id", f["decision"])) for f in failures)
        raise RetryLater(f"announcing {failed} failed; the batch is retried")
    return {"submissions": outcomes}


def handle(event, settings: Settings, now: datetime | None = None) -> dict:
    now = now or datetime.now(timezone.utc)
    try:
        parsed = D.parse_event(event)
    except Exception as error:  # EventError, or whatever a hostile shape makes the parser raise
        log_decision("bad-event", error=describe(error), action="dropped: the same event would fail again")
        return {"rejected": describe(error)}
    if isinstance(parsed, D.Unknown):
        log_decision("ignore-event", detail_type=str(parsed.detail_type)[:100],
                     reason="not an event this function handles")
        return {"ignored": str(parsed.detail_type)[:100]}
    region = getattr(parsed, "region", None)
    if region is not None and region not in {f.region for f in parse_fleets(settings.fleets)}:
        log_decision("ignore-event", region=region[:40], reason="no fleet of this environment in that region")
        return {"ignored": f"region {region[:40]}"}
    ledger = L.Ledger(client("dynamodb"), settings.jobs_table)
    failures: list[dict] = []
    result: dict = {}
    with per_item("job-event-failed", failures, event=type(parsed).__name__):
        result = dispatch(parsed, ledger, settings, now, failures)
    Quarantine(ledger, client("sqs"), settings.jobs_dlq_url, by="job-events").sweep(now.timestamp(), failures)
    result["errors"] = len(failures)
    if failures and not isinstance(parsed, D.RebalanceCheck):
        raise RetryLater(f"{len(failures)} item(s) of the event failed; Lambda delivers it again: "
                         + "; ".join(f"{f['decision']}: {f['error']}" for f in failures[:5]))
    return result


def dispatch(parsed, ledger: L.Ledger, settings: Settings, now: datetime, failures: list[dict]) -> dict:
    if isinstance(parsed, D.TaskStateChange):
        return {"decisions": [task_changed(parsed, ledger, settings, now)]}
    if isinstance(parsed, D.RebalanceCheck):
        return {"undone": undo_expired_rebalances(settings, parsed.time, failures)}
    if parsed.kind == D.REBALANCE:
        return {"tagged": tag_rebalance(settings, parsed)}
    return {"decisions": interrupt(parsed, ledger, settings, now, failures)}


def task_changed(event: D.TaskStateChange, ledger: L.Ledger, settings: Settings, now: datetime) -> dict:
    for note in event.unread:
        log_decision("event-value-unread", job_id=event.job_id, task_arn=event.task_arn[:200], error=note)
    try:
        record = ledger.get(event.job_id) if event.job_id else None
    except L.UndecodableRecord as error:
        # Quarantined (now or before) by the sweep; its task is left alone for a person to judge.
        log_decision("job-event", job_id=event.job_id, reason=f"job record cannot be read: {error.bad.error}",
                     action="quarantined", task_arn=event.task_arn)
        return {"job_id": event.job_id, "to_state": None, "applied": None, "reason": "quarantined"}
    saved = None
    if (record is not None and D.machine_ended(event) and record.state == L.RUNNING
            and event.attempt == record.attempt):
        saved = checkpoint_saved_at(record, settings)
    decision = D.decide_task_change(event, record, load_catalog(), checkpoint_saved_at=saved)
    return apply(decision, ledger, settings, event.region, event.cluster_arn, now)


def apply(decision: D.Decision, ledger: L.Ledger, settings: Settings, region: str, cluster: str, now: datetime) -> dict:
    applied = None
    if decision.to_state is None and decision.changes:
        applied = ledger.amend(decision.job_id, expect_state=decision.expect_state,
                               expect_attempt=decision.expect_attempt, now=now.timestamp(), **decision.changes).applied
    if decision.to_state is not None:
        # The dead letter is owed before the write that incurs it, so a send that fails is made by the
        # scheduler's sweep (lambdas/jobs/dead_letters.py), not lost.
        outbox = dead_letters.DeadLetters.of(ledger, client("sqs"), settings.jobs_dlq_url)
        debt = outbox.owe(decision.job_id, decision.to_state, decision.changes.get("runs", 0), now.timestamp()) \
            if decision.dead_letter else None
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
        if debt is not None:
            outbox.settle(debt, outcome.applied, decision.reason)
    if decision.stop_task:
        client("ecs", region).stop_task(cluster=cluster, task=decision.stop_task, reason=decision.reason[:255])
    record = {"job_id": decision.job_id, "to_state": decision.to_state, "applied": applied, "reason": decision.reason,
              "stopped_task": decision.stop_task, "dead_letter": bool(decision.dead_letter and applied)}
    log_decision("job-event", **record)
    return record


def _container_instances(ecs, cluster: str, instance_id: str) -> dict[str, str]:
    """The instance's registrations in the cluster: container instance ARN -> status."""
    arns = list(paginate(ecs, "list_container_instances", "containerInstanceArns", cluster=cluster))
    found = {}
    for batch in chunks(arns, 100):
        for ci in ecs.describe_container_instances(cluster=cluster, containerInstances=batch)["containerInstances"]:
            if ci["ec2InstanceId"] == instance_id:
                found[ci["containerInstanceArn"]] = ci.get("status", "")
    return found


def _stop_job_tasks(ecs, cluster: str, container_instances, reason: str) -> list[str]:
    """Stop every job task still meant to run on the instances (what ECS says runs there, not the ledger:
    a replayed event finds the ledger already moved on, and the tasks must still get their SIGTERM)."""
    stopped = []
    for container_instance in container_instances:
        arns = list(paginate(ecs, "list_tasks", "taskArns", cluster=cluster, containerInstance=container_instance,
                             desiredStatus="RUNNING"))
        for batch in chunks(arns, TASKS_PER_DESCRIBE):
            for task in ecs.describe_tasks(cluster=cluster, tasks=batch)["tasks"]:
                if is_job_id(task.get("startedBy") or "") and task.get("desiredStatus") == "RUNNING":
                    ecs.stop_task(cluster=cluster, task=task["taskArn"], reason=reason[:255])
                    stopped.append(task["taskArn"])
    return stopped


def interrupt(event: D.InstanceEvent, ledger: L.Ledger, settings: Settings, now: datetime,
              failures: list[dict]) -> list[dict]:
    """Drain the instance, requeue its jobs (or fail them, attempts spent), stop their tasks now."""
    ecs = client("ecs", event.region)
    registrations: dict[str, dict[str, str]] = {}
    for cluster in dict.fromkeys(f.cluster for f in parse_fleets(settings.fleets) if f.region == event.region):
        with per_item("drain-failed", failures, instance_id=event.instance_id, cluster=cluster):
            found = registrations[cluster] = _container_instances(ecs, cluster, event.instance_id)
            active = [arn for arn, status in found.items() if status != "DRAINING"]
            if active:
                ecs.update_container_instances_state(cluster=cluster, containerInstances=active, status="DRAINING")
            log_decision("drain", instance_id=event.instance_id, region=event.region, cluster=cluster,
                         container_instances=active)
    records = [*ledger.by_state(L.RUNNING), *ledger.by_state(L.STARTING)]
    placements = {r.job_id: r.placement for r in records}
    saved = {r.job_id: checkpoint_saved_at(r, settings) for r in records
             if r.state == L.RUNNING and r.placement is not None and r.placement.instance_id == event.instance_id}
    results = []
    for decision in D.decide_interruption(event.instance_id, records, now=event.time.timestamp(),
                                          catalog=load_catalog(),
                                          checkpoints_saved_at={k: v for k, v in saved.items() if v is not None}):
        placement = placements[decision.job_id]
        with per_item("interrupt-job-failed", failures, job_id=decision.job_id, instance_id=event.instance_id):
            results.append(apply(decision, ledger, settings, placement.region, placement.cluster, now))
    for cluster, found in registrations.items():
        with per_item("stop-tasks-failed", failures, instance_id=event.instance_id, cluster=cluster):
            stopped = _stop_job_tasks(ecs, cluster, found, f"{D.NOTICE_STOP_REASON}{event.instance_id}")
            if stopped:
                log_decision("stop-tasks", instance_id=event.instance_id, cluster=cluster, tasks=stopped)
    # The jobs it ran, as read before this delivery requeued them (a delivery again finds none: declined).
    ran = [r for r in records if r.placement is not None and r.placement.instance_id == event.instance_id]
    with per_item("replacement-failed", failures, instance_id=event.instance_id):
        replacements.settle(event.instance_id, event.region, ran, settings.fleets, settings.environment, now)
    return results


def checkpoint_saved_at(record: L.JobRecord, settings: Settings) -> float | None:
    """When the job's newest checkpoint was saved (epoch seconds), read from its location in the region it
    ran in (a requeued job runs there again: lambdas/jobs/checkpoints.py). None when there is none, or the
    bucket cannot be named or read: the interruption then uses an attempt, as it would without the rule.
    Of a job with more than CHECKPOINT_LISTING_KEYS objects only the first are seen: an older time can
    only count an attempt that need not have been, never spare one."""
    if not settings.account_id or record.placement is None or not record.placement.region:
        return None
    region = record.placement.region
    bucket = checkpoints.bucket_name(settings.environment, settings.account_id, region)
    try:
        objects = paginate(client("s3", region), "list_objects_v2", "Contents", Bucket=bucket,
                           Prefix=f"{checkpoints.PREFIX}{record.job_id}/",
                           PaginationConfig={"MaxItems": CHECKPOINT_LISTING_KEYS, "PageSize": 1000})
        return max((item["LastModified"].timestamp() for item in objects), default=None)
    except Exception as error:  # AWS, or an answer of an unexpected shape: unknown, so the attempt counts
        log_decision("checkpoint-unknown", job_id=record.job_id, bucket=bucket, error=describe(error))
        return None


def _ours(ec2, instance_id: str, environment: str) -> bool:
    try:
        reservations = ec2.describe_instances(InstanceIds=[instance_id])["Reservations"]
    except ClientError as error:
        if error_code(error) in ("InvalidInstanceID.NotFound", "InvalidInstanceID.Malformed"):
            return False  # gone already, or never an instance: nothing to mark
        raise
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


def undo_expired_rebalances(settings: Settings, now: datetime, failures: list[dict]) -> list[str]:
    undone: list[str] = []
    for region in dict.fromkeys(f.region for f in parse_fleets(settings.fleets)):
        with per_item("undo-rebalance-failed", failures, region=region, action="tried again at the next check"):
            undone.extend(undo_expired_in(settings, region, now))
    return undone


def undo_expired_in(settings: Settings, region: str, now: datetime) -> list[str]:
    timeout = timedelta(minutes=settings.rebalance_timeout_minutes)
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
    return expired
