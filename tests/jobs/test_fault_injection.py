"""Every AWS call the scheduler, job-events, budget-guard and reaper functions make, failed in turn, against moto.

The operations are not listed by hand: a clean run of each scenario records which operations its
handler calls (tests/jobs/faults.py), and every recorded operation is then failed in every way
(faults.KINDS: throttled after botocore's retries, validation error, response lost after the call took
effect) during one run. To fit the suite's time, operations are failed GROUP at a time (spread over the
run, from its first calls to its last): a group passes only if every operation in it was failed
(those an earlier failure kept from being called are failed again, grouped among themselves), and a group that
breaks an invariant is re-run one operation at a time, so the report names the operation.

What must hold afterwards, once the next run (or Lambda's retry of the event) has gone clean:
- no job is lost: each is queued, running, finished, or failed/quarantined with a reason (and the
  functions' dead-letter queue holds the reason where the send itself was not the failed call);
- none started twice: at most one task per job and attempt meant to run, and a RUNNING job's task is
  its current attempt's;
- none is left STARTING beyond the recovery path;
- the next run completes with no error.
For the scheduler and the reaper, which remove machines through the removal protocol (lambdas/removal),
also: no machine is left half-removed (tagged `mlfleet:removing`, or drained without being removed), and
none with work on it is removed. For the job-events function's stream of ended jobs: the submission is
announced, and twice only when an answer was lost.
A last test checks that the scenarios exercise every AWS action the functions' IAM permissions declare
(every module of the function's folder, as components/functions collects its role's policy), so a new
call with a new permission cannot escape these tests.

Where moto differs from AWS (see also test_end_to_end.py): it records no failed scaling activities, so the
circuit breaker's scenario answers DescribeScalingActivities with a stub; a stopped task stays listed
with lastStatus RUNNING and desiredStatus STOPPED, so "meant to run" is desiredStatus RUNNING. moto stops
a Spot Instance of a one-time Spot request, which AWS refuses (UnsupportedOperation), so the reaper's
scenario answers such a stop with AWS's refusal (a stub kept for the next run too, as it is AWS's rule).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

import pytest
from conftest import (
    ASG, CLUSTER, ENV, FAMILY, HOME, attach_spot_instance, aws_client, build_fleet, create_queues, create_table,
    open_admission, scheduler_settings, set_teams, teams_json, two_fleets_json,
)
import moto_state
from faults import KINDS, Faults, error_response
from moto import mock_aws
from reaper.test_reaper_moto import put_utilisation

from components.functions.python_function import declared_permissions

from lambdas.budget_guard import handler as guard
from lambdas.common import tags as tag_keys
from lambdas.common.aws import reset_clients
from lambdas.common.catalog import load_catalog
from lambdas.job_events import handler as job_events
from lambdas.jobs import checkpoints
from lambdas.jobs import ledger as L
from lambdas.jobs.fleets import REBALANCE_TAG
from lambdas.jobs.spec import assign_ids, parse_spec
from lambdas.reaper import handler as reaper
from lambdas.scheduler import handler as scheduler
from lambdas.scheduler import starting
from lambdas.scheduler.state import SCALING_PAUSED_TAG

NOW = datetime(2026, 11, 22, 12, tzinfo=timezone.utc)
FAKE_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_SECURITY_TOKEN": "testing",
                    "AWS_SESSION_TOKEN": "testing", "AWS_DEFAULT_REGION": HOME, "MOTO_EC2_LOAD_DEFAULT_AMIS": "false"}
SUB = "sub-20261122115000-f00d00"
ALERTS = f"arn:aws:sns:{HOME}:123456789012:mlfleet-{ENV}-alerts"
SECRET = f"/mlfleet/{ENV}/wandb-key"
NOTIFY_TOPIC, SLACK_TOPIC = f"mlfleet-{ENV}-job-notifications", f"mlfleet-{ENV}-job-notifications-slack"
NOTIFIED = "ana@example.com"


def spec(gpus: int = 1, **extra):
    return parse_spec({"image": "ghcr.io/team/train:7", "command": ["python", "train.py"], "gpus": gpus, "vcpus": 1,
                       "memory_mib": 1024, **extra}, fleet_regions=(HOME,), catalog=load_catalog(),
                      default_max_attempts=3, environment=ENV, notify_channels=("email", "slack"))


def ledger() -> L.Ledger:
    return L.Ledger(aws_client("dynamodb", HOME), f"mlfleet-{ENV}-jobs")


def alert_topic() -> None:
    aws_client("sns", HOME).create_topic(Name=f"mlfleet-{ENV}-alerts")


def alerts_sent(injector: Faults, about: str) -> list[str]:
    """Subjects of the alerts the function published (that took effect) whose subject has `about`."""
    return [p["Subject"] for p in injector.carried_out("sns", "Publish") if about in p.get("Subject", "")]


def start_task(container_instance: str, job_id: str, attempt: int, gpus: int = 1) -> str:
    return aws_client("ecs", HOME).start_task(
        cluster=CLUSTER, taskDefinition=FAMILY, containerInstances=[container_instance], startedBy=job_id,
        overrides={"containerOverrides": [{"name": "job", "resourceRequirements": [{"type": "GPU", "value": str(gpus)}],
                                           "environment": [{"name": "MLFLEET_ATTEMPT", "value": str(attempt)}]}]},
    )["tasks"][0]["taskArn"]


def attempt_of(task: dict) -> int | None:
    for override in task.get("overrides", {}).get("containerOverrides", []):
        for variable in override.get("environment", []):
            if variable["name"] == "MLFLEET_ATTEMPT":
                return int(variable["value"])
    return None


def put_job(index: int, job_spec, state: str = L.QUEUED, attempt: int = 0, runs: int = 0,
            placement: L.Placement | None = None, updated: datetime = NOW - timedelta(minutes=10),
            started: datetime | None = None) -> str:
    job = assign_ids(SUB, [job_spec] * (index + 1))[index]
    record = L.new_record(job, (NOW - timedelta(minutes=30)).timestamp() + index)
    reasons = ({"state": L.RUNNING, "at": started.timestamp(), "reason": "task running"},) if started else ()
    record = L.JobRecord(**{**vars(record), "state": state, "attempt": attempt, "runs": runs, "placement": placement,
                            "updated_at": updated.timestamp(), "reasons": reasons})
    assert ledger().put_new(record)
    return job.job_id


def put_undecodable(index: int) -> str:
    """A queued job whose item lacks its spec (as a hand edit or an old writer leaves it)."""
    job_id = assign_ids(SUB, [spec()] * (index + 1))[index].job_id
    aws_client("dynamodb", HOME).put_item(TableName=f"mlfleet-{ENV}-jobs", Item={
        "job_id": {"S": job_id}, "submission_id": {"S": SUB}, "index": {"N": str(index)}, "state": {"S": L.QUEUED},
        "attempt": {"N": "0"}, "submitted_at": {"N": str((NOW - timedelta(minutes=40)).timestamp())},
        "updated_at": {"N": str(NOW.timestamp())}, "version": {"N": "0"}})
    return job_id


def placement(instance_id: str, container_instance: str, task_arn: str | None = None) -> L.Placement:
    return L.Placement(HOME, "gpu1", CLUSTER, container_instance, instance_id, "g5.12xlarge", task_arn)


# --- scenarios: (set the world up) -> context for the checks; (one run of the handler) -------------------

def scheduler_world(home, variant: str = "main") -> dict:
    instances = build_fleet(size=3, max_size=6)  # three g5.12xlarge: 4 GPUs each
    (a_id, a_arn), (b_id, b_arn), (c_id, _) = sorted(instances.items())
    # c: a release an earlier run began and did not finish (tagged, then the Lambda stopped): this run
    # finishes it through the removal executor. a: marked empty by an earlier run, and busy now.
    ec2 = aws_client("ec2", HOME)
    ec2.create_tags(Resources=[c_id], Tags=[{"Key": tag_keys.REMOVING,
                                             "Value": f"release@{(NOW - timedelta(minutes=2)).isoformat(timespec='seconds')}"}])
    ec2.create_tags(Resources=[a_id], Tags=[{"Key": tag_keys.EMPTY_SINCE,
                                             "Value": (NOW - timedelta(hours=1)).isoformat(timespec="seconds")}])
    # d: a Spot Instance whose release an earlier run began (tagged, not yet drained), and which a task
    # started by hand has taken since: this run keeps it, re-activated once its Spot request says it runs on.
    d_id, d_arn = attach_spot_instance()
    ec2.create_tags(Resources=[d_id], Tags=[{"Key": tag_keys.REMOVING,
                                             "Value": f"release@{(NOW - timedelta(minutes=2)).isoformat(timespec='seconds')}"}])
    start_task(d_arn, "a task started by hand", 0)
    open_admission()
    # Two teams without quotas (the jobs are the default team's): each run also reads the teams' running and
    # starting jobs and reads and writes their decayed use (one ledger item), so those calls fail here too.
    set_teams(teams_json({"research": (1, None), "vision": (2, None)}, default_team="research"))
    alert_topic()
    jobs = [put_job(0, spec()), put_job(1, spec(secrets={"WANDB_API_KEY": SECRET})), put_job(2, spec(gpus=4)),
            put_job(3, spec(gpus=4))]  # the last has no room: an instance is bought for it
    # A claim whose start was never confirmed, and whose task does run (twice, by a resent StartTask).
    found = put_job(4, spec(), L.STARTING, attempt=1, placement=placement(a_id, a_arn))
    start_task(a_arn, found, 1)
    start_task(a_arn, found, 1)
    # A claim whose task never started.
    lost = put_job(5, spec(), L.STARTING, attempt=1, placement=placement(b_id, b_arn))
    broken = put_undecodable(6)
    sqs = aws_client("sqs", HOME)
    for job_id in (jobs[0], broken):
        sqs.send_message(QueueUrl=home["queue"], MessageBody=json.dumps({"job_id": job_id, "attempt": 0}))
    sqs.send_message(QueueUrl=home["queue"], MessageBody="[" * 10_000)
    if variant == "breaker-clears":
        aws_client("autoscaling", HOME).create_or_update_tags(Tags=[{
            "ResourceId": ASG, "ResourceType": "auto-scaling-group", "Key": SCALING_PAUSED_TAG,
            "Value": "2026-11-22T11:00:00+00:00", "PropagateAtLaunch": False}])
    return {"home": home, "jobs": [*jobs, found, lost], "broken": broken, "busy": [a_id, d_id], "released": c_id}


def spot_prices(params: dict) -> dict:
    """The price history of the asked types only. moto makes up a random history for every instance type
    and zone on each call, which alone would take most of these tests' time."""
    catalog = load_catalog()
    return {"SpotPriceHistory": [
        {"InstanceType": t, "AvailabilityZone": f"{HOME}{zone}", "ProductDescription": "Linux/UNIX", "Timestamp": NOW,
         "SpotPrice": f"{0.4 * catalog.get(t).on_demand_price(HOME):.4f}"}
        for t in params.get("InstanceTypes", []) if t in catalog for zone in "ab"]}


def failed_launches(params: dict) -> dict:
    return {"Activities": [{"ActivityId": f"a{i}", "AutoScalingGroupName": params["AutoScalingGroupName"],
                            "Cause": "test", "StartTime": NOW - timedelta(minutes=5 + i), "StatusCode": "Failed",
                            "Progress": 100} for i in range(3)]}


class LambdaContext:
    aws_request_id = "fault-injection"

    @staticmethod
    def get_remaining_time_in_millis() -> int:
        return 170_000


def scheduler_run(world: dict, minutes: int = 0) -> dict:
    """One invocation of the function (placement lease included). Only taking the lease may fail the whole
    invocation: then Lambda's next scheduled run, a minute later, is the one that acts."""
    try:
        world["raised"] = None
        # Five instances at most: the world's four (scheduler_world) and the one its last job is bought.
        return scheduler.handler({"source": "aws.events"}, LambdaContext(),
                                 settings=scheduler_settings(world["home"], max_instances=5),
                                 now=NOW + timedelta(minutes=minutes))
    except Exception as error:
        world["raised"] = error
        return {}


def cluster_tasks() -> dict[str, list[dict]]:
    """Every task of the cluster, by the job that started it (two list calls, one describe per 100)."""
    ecs = aws_client("ecs", HOME)
    arns = {arn for status in ("RUNNING", "STOPPED")
            for arn in ecs.list_tasks(cluster=CLUSTER, desiredStatus=status, maxResults=100)["taskArns"]}
    by_job: dict[str, list[dict]] = {}
    for batch in [sorted(arns)[i:i + 100] for i in range(0, len(arns), 100)]:
        for task in ecs.describe_tasks(cluster=CLUSTER, tasks=batch)["tasks"]:
            by_job.setdefault(task.get("startedBy", ""), []).append(task)
    return by_job


def check_jobs(world: dict, job_ids: list[str]) -> None:
    """No job lost, none started twice, none left STARTING."""
    led = ledger()
    tasks = cluster_tasks()
    for job_id in job_ids:
        try:
            record = led.get(job_id)
        except L.UndecodableRecord as error:
            assert error.bad.quarantined and error.bad.item["quarantine"]["M"]["error"]["S"], job_id
            continue
        assert record is not None, f"{job_id} lost"
        assert record.state != L.STARTING, f"{job_id} left STARTING: {record.reasons}"
        if record.state in (L.FAILED, L.QUARANTINED):
            assert record.last_reason, job_id
        meant_to_run = [t for t in tasks.get(job_id, []) if t["desiredStatus"] == "RUNNING"]
        per_attempt = Counter(attempt_of(t) for t in meant_to_run)
        assert all(n == 1 for n in per_attempt.values()), f"{job_id} runs twice: {per_attempt}"
        if record.state == L.RUNNING:
            assert [attempt_of(t) for t in meant_to_run] == [record.attempt], job_id
            assert record.placement.task_arn == meant_to_run[0]["taskArn"], job_id
        else:
            assert meant_to_run == [], f"{job_id} is {record.state} with a task meant to run"


def check_removals(world: dict) -> None:
    """After the next clean run: no machine half-removed (tagged removing, or drained while still in its
    group), none with work removed, and the machine whose removal was under way either gone from its group
    (terminated, the group shrunk) or back in service."""
    group = aws_client("autoscaling", HOME).describe_auto_scaling_groups(AutoScalingGroupNames=[ASG])[
        "AutoScalingGroups"][0]
    members = {i["InstanceId"] for i in group["Instances"] if not i["LifecycleState"].startswith("Terminat")}
    assert set(world["busy"]) <= members, f"a machine with work was removed: {set(world['busy']) - members}"
    described = aws_client("ec2", HOME).describe_instances(InstanceIds=sorted(members))["Reservations"]
    removing = [i["InstanceId"] for r in described for i in r["Instances"]
                if any(t["Key"] == tag_keys.REMOVING for t in i.get("Tags", []))]
    assert removing == [], f"left tagged {tag_keys.REMOVING}: {removing}"
    ecs = aws_client("ecs", HOME)
    arns = ecs.list_container_instances(cluster=CLUSTER)["containerInstanceArns"]
    status = {ci["ec2InstanceId"]: ci["status"]
              for ci in ecs.describe_container_instances(cluster=CLUSTER, containerInstances=arns)["containerInstances"]}
    drained = sorted(i for i in members if status.get(i) == "DRAINING")
    assert drained == [], f"drained but neither removed nor re-activated: {drained}"
    if world["released"] not in members:
        state = aws_client("ec2", HOME).describe_instances(InstanceIds=[world["released"]])["Reservations"][0][
            "Instances"][0]["State"]["Name"]
        assert state in ("shutting-down", "terminated"), state


def check_scheduler(world: dict, failed: set, injector: Faults) -> None:
    if world["raised"] is not None:  # only when the lease could not be taken: nothing else was done
        assert ("PutItem" in str(world["raised"]) and any(op == ("dynamodb", "PutItem") for op, _ in failed)), \
            repr(world["raised"])
    # The next run, late enough to recover the claims the faulted run left STARTING (and past the
    # faulted run's lease, should its release have failed).
    recovery = scheduler_run(world, minutes=starting.STARTING_GRACE.seconds // 60 + 1)
    assert world["raised"] is None and recovery.get("errors") == [], (world["raised"], recovery)
    check_jobs(world, [*world["jobs"], world["broken"]])
    with pytest.raises(L.UndecodableRecord) as quarantined:
        ledger().get(world["broken"])
    assert quarantined.value.bad.quarantined
    check_removals(world)
    alerts = alerts_sent(injector, "quarantined")
    # Told once; twice only when the first alert went out but its answer was lost (so it was not marked).
    assert 1 <= len(alerts) <= (2 if (("sns", "Publish"), "timeout") in failed else 1), alerts


# --- job events ---------------------------------------------------------------------------------------

def event_settings(home) -> job_events.Settings:
    return job_events.Settings(environment=ENV, jobs_table=home["table"], jobs_queue_url=home["queue"],
                               jobs_dlq_url=home["dlq"], fleets=two_fleets_json(), rebalance_timeout_minutes=30,
                               notify_email_topic_arn=f"arn:aws:sns:{HOME}:123456789012:{NOTIFY_TOPIC}",
                               notify_slack_topic_arn=f"arn:aws:sns:{HOME}:123456789012:{SLACK_TOPIC}",
                               account_id="123456789012")


def task_event(job_id: str, task_arn: str, attempt: int, last: str, exit_code: int | None = None) -> dict:
    return {"detail-type": "ECS Task State Change", "source": "aws.ecs", "region": HOME, "time": NOW.isoformat(),
            "detail": {"clusterArn": f"arn:aws:ecs:{HOME}:123456789012:cluster/{CLUSTER}", "taskArn": task_arn,
                       "startedBy": job_id, "lastStatus": last, "desiredStatus": "STOPPED" if last == "STOPPED" else "RUNNING",
                       "stopCode": "EssentialContainerExited" if last == "STOPPED" else "",
                       "containers": [{"name": "job", **({"exitCode": exit_code} if exit_code is not None else {})}],
                       "overrides": {"containerOverrides": [{"name": "job", "environment": [
                           {"name": "MLFLEET_ATTEMPT", "value": str(attempt)}]}]}}}


def instance_event(kind: str, instance_id: str) -> dict:
    return {"detail-type": kind, "source": "aws.ec2", "region": HOME, "time": NOW.isoformat(),
            "detail": {"instance-id": instance_id, "instance-action": "terminate"}}


def events_world(home) -> dict:
    instances = build_fleet(size=3, max_size=6)
    (a_id, a_arn), (b_id, b_arn), (c_id, c_arn) = sorted(instances.items())
    running = {}
    ecs = aws_client("ecs", HOME)
    # Succeeds; fails with attempts left; fails for good (exit code 1 is one the spec retries).
    for index, runs, job_spec in ((0, 1, spec()), (1, 1, spec(retry_on_exit_codes=[1])),
                                  (2, 3, spec(retry_on_exit_codes=[1]))):
        job_id = assign_ids(SUB, [job_spec] * (index + 1))[index].job_id
        task = start_task(a_arn, job_id, 1)
        ecs.stop_task(cluster=CLUSTER, task=task, reason="the job ended (its event follows)")
        put_job(index, job_spec, L.RUNNING, attempt=1, runs=runs, placement=placement(a_id, a_arn, task))
        running[job_id] = task
    interrupted = assign_ids(SUB, [spec()] * 4)[3].job_id
    interrupted_task = start_task(b_arn, interrupted, 1)
    start_task(b_arn, interrupted, 0)  # a task of an older attempt still running there: only ECS knows it
    put_job(3, spec(), L.RUNNING, attempt=1, runs=1, placement=placement(b_id, b_arn, interrupted_task),
            started=NOW - timedelta(days=400))
    # It saved a checkpoint in this run (moto stamps the object with the wall clock, after that start).
    bucket = checkpoints.bucket_name(ENV, "123456789012", HOME)
    aws_client("s3", HOME).create_bucket(Bucket=bucket)
    aws_client("s3", HOME).put_object(Bucket=bucket, Key=f"{checkpoints.PREFIX}{interrupted}/step-100.pt", Body=b"x")
    superseded = assign_ids(SUB, [spec()] * 5)[4].job_id
    stray = start_task(a_arn, superseded, 1)
    put_job(4, spec(), L.QUEUED, attempt=1, runs=1)
    # c runs one small job: buying for it alone (a one-T4 fleet) costs less than the group's replacement.
    small = assign_ids(SUB, [spec()] * 7)[6].job_id
    put_job(6, spec(), L.RUNNING, attempt=1, runs=1, placement=placement(c_id, c_arn, start_task(c_arn, small, 1)))
    broken = put_undecodable(5)
    broken_task = start_task(a_arn, broken, 1)
    ecs.stop_task(cluster=CLUSTER, task=broken_task, reason="the job ended (its event follows)")
    ec2 = aws_client("ec2", HOME)
    ec2.create_tags(Resources=[b_id], Tags=[{"Key": REBALANCE_TAG, "Value": (NOW - timedelta(hours=2)).isoformat()}])
    (ok, retry, exhausted) = running
    events = [task_event(ok, running[ok], 1, "STOPPED", 0), task_event(retry, running[retry], 1, "STOPPED", 1),
              task_event(exhausted, running[exhausted], 1, "STOPPED", 1), task_event(superseded, stray, 1, "RUNNING"),
              task_event(broken, broken_task, 1, "STOPPED", 0),
              instance_event("EC2 Spot Instance Interruption Warning", b_id),
              instance_event("EC2 Spot Instance Interruption Warning", c_id),
              instance_event("EC2 Instance Rebalance Recommendation", a_id),
              {"detail-type": "Scheduled Event", "source": "aws.events", "region": HOME, "time": NOW.isoformat(),
               "detail": {}}]
    return {"home": home, "events": events, "ok": ok, "retry": retry, "exhausted": exhausted,
            "interrupted": interrupted, "superseded": superseded, "broken": broken, "a": a_id, "b": b_id, "b_arn": b_arn,
            "c": c_id}


def events_run(world: dict) -> list[dict]:
    """Each event once; the ones that raised are kept for Lambda's retry."""
    retries = []
    for event in world["events"]:
        try:
            job_events.handle(event, event_settings(world["home"]), now=NOW)
        except job_events.RetryLater:
            retries.append(event)
    world["retries"] = retries
    return retries


def check_events(world: dict, failed: set, injector: Faults) -> None:
    # Lambda's retry of every event that raised; the scheduled check simply runs again five minutes later.
    scheduled = [e for e in world["events"] if e["detail-type"] == "Scheduled Event"]
    for event in [*world["retries"], *scheduled]:
        result = job_events.handle(event, event_settings(world["home"]), now=NOW)
        assert result.get("errors", 0) == 0, result
    led = ledger()
    states = {name: led.get(world[name]) for name in ("ok", "retry", "exhausted", "interrupted", "superseded")}
    assert {name: (r.state, r.attempt) for name, r in states.items()} == {
        "ok": (L.SUCCEEDED, 1), "retry": (L.QUEUED, 1), "exhausted": (L.FAILED, 1), "interrupted": (L.QUEUED, 1),
        "superseded": (L.QUEUED, 1)}
    assert "attempts exhausted" in states["exhausted"].last_reason
    # Its checkpoint spares the attempt, unless reading it failed: then the attempt counts, as before the rule.
    listing_failed = any(operation == ("s3", "ListObjectsV2") for operation, _ in failed)
    assert states["interrupted"].runs == (1 if listing_failed else 0), states["interrupted"].reasons
    check_jobs(world, [world[name] for name in ("ok", "retry", "exhausted", "interrupted", "superseded")])
    with pytest.raises(L.UndecodableRecord) as quarantined:
        led.get(world["broken"])
    assert quarantined.value.bad.quarantined
    ecs, ec2 = aws_client("ecs", HOME), aws_client("ec2", HOME)
    assert ecs.describe_container_instances(cluster=CLUSTER, containerInstances=[world["b_arn"]])[
        "containerInstances"][0]["status"] == "DRAINING"
    tags = {i["InstanceId"]: {t["Key"] for t in i.get("Tags", [])}
            for r in ec2.describe_instances(InstanceIds=[world["a"], world["b"]])["Reservations"] for i in r["Instances"]}
    assert REBALANCE_TAG in tags[world["a"]] and REBALANCE_TAG not in tags[world["b"]]
    # b and c ran one small job each, cheaper bought alone than the group's replacement: declined, each
    # detached with the desired capacity decremented once, whatever failed and was delivered again;
    # unless the detach itself was refused (as AWS refuses one below the group's minimum): then kept.
    group = aws_client("autoscaling", HOME).describe_auto_scaling_groups(AutoScalingGroupNames=[ASG])["AutoScalingGroups"][0]
    members = {i["InstanceId"] for i in group["Instances"]}
    refused = (("autoscaling", "DetachInstances"), "validation") in failed
    detached = {world["b"], world["c"]} - members
    assert world["a"] in members and group["DesiredCapacity"] == 3 - len(detached)
    assert detached == (set() if refused else {world["b"], world["c"]})
    marked = {i["InstanceId"] for r in ec2.describe_instances(InstanceIds=[world["b"], world["c"]])["Reservations"]
              for i in r["Instances"] if any(t["Key"] == tag_keys.DETACHED_AT for t in i.get("Tags", []))}
    assert marked == detached


# --- job events: the ledger's stream of ended jobs (notifications) ---------------------------------------

def stream_world(home) -> dict:
    """A submission that asked to be told (an address and the Slack channel), both its jobs ended, as the
    ledger's stream brings them."""
    aws_client("sns", HOME).create_topic(Name=NOTIFY_TOPIC)
    aws_client("sns", HOME).create_topic(Name=SLACK_TOPIC)
    told = spec(notify=[NOTIFIED, "slack"])
    jobs = [put_job(0, told, L.SUCCEEDED, attempt=1, runs=1), put_job(1, told, L.FAILED, attempt=1, runs=3)]
    dynamodb = aws_client("dynamodb", HOME)
    records = [{"eventSource": "aws:dynamodb", "eventName": "MODIFY", "dynamodb": {"NewImage": dynamodb.get_item(
        TableName=f"mlfleet-{ENV}-jobs", Key={"job_id": {"S": job_id}})["Item"]}} for job_id in jobs]
    return {"home": home, "records": records, "first": jobs[0]}


def stream_run(world: dict) -> None:
    try:
        job_events.ended_jobs(world["records"], event_settings(world["home"]), now=NOW)
        world["raised"] = False
    except job_events.RetryLater:  # the event source mapping retries the batch
        world["raised"] = True


def check_stream(world: dict, failed: set, injector: Faults) -> None:
    if world["raised"]:
        job_events.ended_jobs(world["records"], event_settings(world["home"]), now=NOW)  # the retried batch
    assert ledger().get(world["first"]).notified_at is not None
    # Each channel once; twice only when its first message went out but the answer was lost (its mark was
    # taken back).
    for topic in (NOTIFY_TOPIC, SLACK_TOPIC):
        published = [p for p in injector.carried_out("sns", "Publish") if p["TopicArn"].endswith(f":{topic}")]
        assert 1 <= len(published) <= (2 if (("sns", "Publish"), "timeout") in failed else 1), (topic, published)
    email = [p for p in injector.carried_out("sns", "Publish") if p["TopicArn"].endswith(f":{NOTIFY_TOPIC}")]
    assert json.loads(email[-1]["MessageAttributes"]["notify"]["StringValue"]) == [NOTIFIED]
    assert ledger().get(world["first"]).notified == ("email", "slack")


# --- budget guard -------------------------------------------------------------------------------------

BUDGET_TEXT = "Budget Name: mlfleet-dev\nAlert Type: ACTUAL\nBudgeted Amount: $1,500.00\nACTUAL Amount: $1,523.41\n"


def guard_world(home) -> dict:
    open_admission()
    settings = guard.Settings(environment=ENV, home_region=HOME, alert_topic_arn=ALERTS)
    event = {"Records": [{"EventSource": "aws:sns", "Sns": {"TopicArn": settings.budget_topic_arn, "Subject": "x",
                                                            "Message": BUDGET_TEXT}}]}
    alert_topic()
    return {"home": home, "settings": settings, "event": event}


def guard_run(world: dict) -> None:
    try:
        guard.handler(world["event"], settings=world["settings"])
        world["raised"] = False
    except Exception:  # the handler raised after logging: Lambda retries the notification
        world["raised"] = True


def check_guard(world: dict, failed: set, injector: Faults) -> None:
    from lambdas.common import admission

    if world["raised"]:
        # Only closing the flag may fail the invocation (Lambda retries it); a failed alert is logged.
        assert {op for op, _ in failed} & {("ssm", "GetParameter"), ("ssm", "PutParameter")}, failed
        guard.handler(world["event"], settings=world["settings"])  # Lambda's retry
    assert not admission.read_admission(aws_client("ssm", HOME), ENV).is_open
    assert len(alerts_sent(injector, "admission closed")) <= 1


# --- reaper -------------------------------------------------------------------------------------------

# As deployed in the home region (a fleet region too): its own clients and the ledger's lease are there.
REAPER = reaper.Settings(environment=ENV, cluster_name=CLUSTER, fleet_asg_names=(ASG,), idle_window_minutes=60,
                         idle_cpu_percent=10, idle_gpu_percent=5, idle_grace_minutes=30, alert_topic_arn=ALERTS,
                         jobs_table=f"mlfleet-{ENV}-jobs", home_region=HOME, disruption_budget_percent=50)
NEXT_REAPER_RUN = timedelta(minutes=5)
# The reads before any decision (lambdas/reaper/inventory.py): without them the run knows no machine.
REAPER_READS = {("ec2", "DescribeInstances"), ("ecs", "ListContainerInstances"), ("ecs", "DescribeContainerInstances"),
                ("cloudwatch", "GetMetricData")}


def reaper_world(home) -> dict:
    """busy: runs a task, still marked idle (unmarked); idle: marked past the grace period (removed through
    the protocol; it ran a job that has ended, so the re-check describes that stopped task); fresh: idle,
    unmarked (marked); loose: a standalone machine marked long ago (stopped);
    raced: idle like `idle`, but a task is placed on it as the reaper drains it (the race of issue 13: the
    protocol's re-check after the drain re-activates it, ACTIVE again and untagged, never terminated); it is
    a Spot Instance, so the re-activation reads its Spot request first; one_time: a standalone Spot Instance
    of a one-time request marked long ago (terminated: EC2 cannot stop it, lambdas/reaper/idle.py)."""
    instances = build_fleet(size=3, max_size=6)
    (busy, busy_arn), (idle, idle_arn), (fresh, _) = sorted(instances.items())
    raced, raced_arn = attach_spot_instance()
    alert_topic()
    ec2 = aws_client("ec2", HOME)
    (loose,) = [i["InstanceId"] for i in ec2.run_instances(
        ImageId="ami-12c6146b", InstanceType="g5.xlarge", MinCount=1, MaxCount=1,
        TagSpecifications=[{"ResourceType": "instance", "Tags": [{"Key": "mlfleet:environment", "Value": ENV}]}])[
        "Instances"]]
    (request,) = ec2.request_spot_instances(InstanceCount=1, Type="one-time", LaunchSpecification={
        "ImageId": "ami-12c6146b", "InstanceType": "g5.xlarge"})["SpotInstanceRequests"]
    one_time = request["InstanceId"]
    ec2.create_tags(Resources=[one_time], Tags=[{"Key": "mlfleet:environment", "Value": ENV}])
    ONE_TIME_SPOT.clear()
    ONE_TIME_SPOT.add(one_time)
    start_task(busy_arn, "a task started by hand", 0)
    aws_client("ecs", HOME).stop_task(cluster=CLUSTER, task=start_task(idle_arn, "a job that has ended", 0))
    # The reaper judges machines by their launch time, which moto takes from the real clock: its runs are
    # three hours after the world was made (older than the idle window).
    now = datetime.now(timezone.utc) + timedelta(hours=3)
    marked = (now - timedelta(minutes=40)).isoformat(timespec="seconds")
    ec2.create_tags(Resources=[busy, idle, raced, loose, one_time], Tags=[{"Key": tag_keys.IDLE_SINCE, "Value": marked}])
    for at in (now, now + NEXT_REAPER_RUN):
        for instance_id in (busy, idle, fresh, raced):
            put_utilisation(instance_id, at, cpu=2, gpu=0, region=HOME)
        for standalone in (loose, one_time):
            put_utilisation(standalone, at, cpu=1, gpu=1, asg=None, region=HOME)
    world = {"home": home, "now": now, "busy": [busy], "busy_arns": [busy_arn], "released": idle, "loose": loose,
             "one_time": one_time}
    RACE.clear()
    RACE.update(world=world, instance_id=raced, arn=raced_arn)
    return world


# The machine the reaper world's race is about, and that world (the stub below reads them).
RACE: dict = {}


def task_placed_while_draining(params: dict) -> None:
    """Before ECS answers the drain of the raced machine, a job's task is placed on it (once), as the
    scheduler might have done between the reaper's read and its drain; moto then answers the drain."""
    if params.get("status") == "DRAINING" and RACE.get("arn") in params.get("containerInstances", []) \
            and RACE["instance_id"] not in RACE["world"]["busy"]:
        start_task(RACE["arn"], "a job placed while the reaper drained its machine", 0)
        RACE["world"]["busy"].append(RACE["instance_id"])  # from now on a machine with work
        RACE["world"]["busy_arns"].append(RACE["arn"])
    return None


# The reaper world's Spot Instances of a one-time request, which EC2 cannot stop.
ONE_TIME_SPOT: set = set()


def stop_refused_like_aws(params: dict):
    """AWS refuses StopInstances naming a Spot Instance of a one-time request (the whole call); moto stops it."""
    if ONE_TIME_SPOT & set(params.get("InstanceIds", [])):
        return error_response("ec2", "UnsupportedOperation", "You can't stop the Spot Instance because it is "
                              "associated with a one-time Spot Instance request.")
    return None


# Stubs that model AWS's own rules (not a scenario's one-off event): kept for the run after the faulted one.
AWS_RULES = {("ec2", "StopInstances"): stop_refused_like_aws}


def reaper_run(world: dict, later: timedelta = timedelta(0)) -> None:
    """One run. Only its reads (inventory, metrics) may fail the whole run: the next scheduled run acts."""
    try:
        world["result"] = reaper.run(REAPER, world["now"] + later, trigger="fault-injection",
                                     request_id="fault-injection")
        world["raised"] = None
    except Exception as error:  # Lambda logs it; the schedule runs the reaper again
        world["raised"] = error


def check_reaper(world: dict, failed: set, injector: Faults) -> None:
    # Only the inventory reads may fail the whole run (nothing is known to act on); any other call's
    # failure is one machine's, or a report's, and the run goes on with the rest.
    if world["raised"] is not None:
        assert {op for op, _ in failed} & REAPER_READS, repr(world["raised"])
    # The next run, five minutes later: past the lease a faulted run could not give back (the reaper takes
    # the lease by the clock, which is moved on here as it would be).
    clock = time.time
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(reaper, "time", SimpleNamespace(time=lambda: clock() + NEXT_REAPER_RUN.total_seconds() + 600))
        reaper_run(world, NEXT_REAPER_RUN)
    assert world["raised"] is None and world["result"]["failed"] == {}, (world["raised"], world.get("result"))
    check_removals(world)
    assert world["released"] in world["result"]["terminated"] or world["released"] not in {
        i["InstanceId"] for i in aws_client("autoscaling", HOME).describe_auto_scaling_groups(
            AutoScalingGroupNames=[ASG])["AutoScalingGroups"][0]["Instances"]}, world["result"]
    ecs, ec2 = aws_client("ecs", HOME), aws_client("ec2", HOME)
    for arn in world["busy_arns"]:  # the work on them goes on
        assert ecs.list_tasks(cluster=CLUSTER, containerInstance=arn, desiredStatus="RUNNING")["taskArns"], arn
    state = ec2.describe_instances(InstanceIds=[world["loose"]])["Reservations"][0]["Instances"][0]["State"]["Name"]
    assert state in ("stopping", "stopped"), state
    state = ec2.describe_instances(InstanceIds=[world["one_time"]])["Reservations"][0]["Instances"][0]["State"]["Name"]
    assert state in ("shutting-down", "terminated"), state


SPOT_PRICES = {("ec2", "DescribeSpotPriceHistory"): spot_prices}
SCENARIOS = {
    "scheduler": (scheduler_world, scheduler_run, check_scheduler, SPOT_PRICES),
    "scheduler-breaker-trips": (scheduler_world, scheduler_run, None,
                                {**SPOT_PRICES, ("autoscaling", "DescribeScalingActivities"): failed_launches}),
    "scheduler-breaker-clears": (lambda home: scheduler_world(home, "breaker-clears"), scheduler_run, None,
                                 SPOT_PRICES),
    "job-events": (events_world, events_run, check_events, {}),
    "job-events-stream": (stream_world, stream_run, check_stream, {}),
    "budget-guard": (guard_world, guard_run, check_guard, {}),
    "reaper": (reaper_world, reaper_run, check_reaper,
               {("ecs", "UpdateContainerInstancesState"): task_placed_while_draining, **AWS_RULES}),
}
# Each entry point of each function, with the scenarios of one invocation of it: an operation is failed in
# the first scenario that calls it (the scheduler's variants make the same run).
ENTRY_POINTS = {"scheduler": ("scheduler", "scheduler-breaker-trips", "scheduler-breaker-clears"),
                "job-events": ("job-events",), "job-events-stream": ("job-events-stream",),
                "budget-guard": ("budget-guard",), "reaper": ("reaper",)}
# The scenarios of each function (one IAM role each).
HANDLERS = {"scheduler": ENTRY_POINTS["scheduler"], "job-events": ("job-events", "job-events-stream"),
            "budget-guard": ("budget-guard",), "reaper": ("reaper",)}


def fresh_home() -> dict:
    create_table()
    queue, dlq = create_queues()
    return {"table": f"mlfleet-{ENV}-jobs", "queue": queue, "dlq": dlq}


# --- each scenario's world built once, put back for each case (tests/moto_state.py) --------------------
# Every case starts from the same world: it is built once per process and kept with the scenario's own
# objects (the world, the reaper's RACE and ONE_TIME_SPOT).
WORLDS: dict = {}


def world_for(world_of) -> dict:
    """The scenario's world in the active fresh moto: built the first time, put back from then on."""
    if world_of not in WORLDS:
        WORLDS[world_of] = moto_state.keep({"world": world_of(fresh_home()), "race": dict(RACE),
                                            "one_time_spot": set(ONE_TIME_SPOT)})
    state = moto_state.put_back(WORLDS[world_of])
    RACE.clear()
    RACE.update(state["race"])
    ONE_TIME_SPOT.clear()
    ONE_TIME_SPOT.update(state["one_time_spot"])
    return state["world"]


@pytest.fixture(scope="module")
def recorded() -> dict[str, list]:
    """Operations of a clean run of each scenario, recorded once for the module (each in a fresh moto, from
    its world as every case starts from it: world_for)."""
    found = {}
    with pytest.MonkeyPatch.context() as env:
        for key, value in FAKE_CREDENTIALS.items():
            env.setenv(key, value)
        injector = Faults()
        injector.install()
        for name, (world, run, _, stubs) in SCENARIOS.items():
            with mock_aws():
                injector.reset(stubs)
                built = world_for(world)  # built and kept here, for the cases below
                injector.calls = []  # the handler's run only
                run(built)
                found[name] = injector.operations()
    reset_clients()
    return found


# Five per group took the fewest runs: 110 cases for the whole matrix against 123 with three, 111 with eight
# and 119 with twelve (bigger groups keep more operations from being called, which are then failed again);
# the matrix took 74 s of CPU against 92 s with three.
GROUP = 5


def groups(operations: list) -> list[list]:
    """Operations in groups of GROUP, each taking its operations from every part of the run, evenly apart."""
    count = -(-len(operations) // GROUP)
    return [operations[i::count] for i in range(count)]


@pytest.mark.parametrize("entry", ENTRY_POINTS)
@pytest.mark.parametrize("kind", KINDS)
def test_every_call_failing_loses_no_job_and_the_next_run_completes(recorded, entry, kind):
    """Per entry point and fault kind: every operation its scenarios call, failed in a fresh moto.
    Failures are collected, so the report names every operation that broke an invariant."""
    injector = Faults()
    injector.install()  # once: the functions' clients outlive each case's moto state, and cost 0.1 s each to make
    broken, seen = [], set()
    for scenario in ENTRY_POINTS[entry]:
        world_of, run, check, stubs = SCENARIOS[scenario]
        case = (world_of, run, check or SCENARIOS[ENTRY_POINTS[entry][0]][2], stubs)
        fresh = [op for op in recorded[scenario] if op not in seen]
        seen.update(fresh)
        broken += fail_all(injector, case, fresh, kind)
    reset_clients()
    assert not broken, "\n".join(broken)


def fail_all(injector: Faults, case, operations: list, kind: str) -> list[str]:
    """Fail every operation, GROUP at a time; operations an earlier failure kept from being called are
    grouped again among themselves (alone, when that makes no progress); a group that breaks an
    invariant is split, so the report names the operation."""
    broken, todo, alone = [], list(operations), False

    def not_called(missed) -> list[str]:
        return [f"{op[0]}:{op[1]} {kind}: not called with the fault armed" for op in missed]

    while todo:
        masked = []
        for group in [[op] for op in todo] if alone else groups(todo):
            failures, missed = one_case(injector, case, group, kind)
            if len(group) == 1:
                broken += failures + not_called(missed)
            elif failures:
                for operation in group:
                    failures, missed = one_case(injector, case, [operation], kind)
                    broken += failures + not_called(missed)
            else:
                masked += missed
        alone = masked == todo or len(masked) == 1
        todo = masked
    return broken


def one_case(injector: Faults, case, operations: list, kind: str) -> tuple[list[str], list]:
    """Fail `operations` with `kind` during one run of the scenario, then check: (failures, operations the
    run never called while armed)."""
    world_of, run, check, stubs = case
    names = " + ".join(f"{op[0]}:{op[1]}" for op in operations)
    with mock_aws():
        injector.reset(stubs)
        world = world_for(world_of)
        try:
            with injector.active(list(operations), kind):
                run(world)
            failed = set(injector.injected)
            missed = [op for op in operations if (op, kind) not in failed]
            injector.stubs = {k: v for k, v in stubs.items() if k in SPOT_PRICES or k in AWS_RULES}
            check(world, failed, injector)
        except Exception as error:  # collected: one failing operation must not hide the others
            return [f"{names} {kind}: {type(error).__name__}: {str(error)[:600]}"], []
    return [], missed


# IAM actions that are not API calls of their own, or cover more than one call.
# The IAM reference: ListObjectsV2 is authorized by s3:ListBucket.
COVERS = {"s3:ListBucket": {("s3", "ListObjectsV2")},
          "sqs:SendMessage": {("sqs", "SendMessage"), ("sqs", "SendMessageBatch")},
          "sqs:DeleteMessage": {("sqs", "DeleteMessage"), ("sqs", "DeleteMessageBatch")}}
NOT_CALLS = {
    "kms:GenerateDataKey*": "SNS uses the topic's key on the function's behalf",
    "kms:Decrypt": "SNS uses the topic's key on the function's behalf",
    "iam:PassRole": "checked by ECS when a revision keeping the family's roles is registered",
    "ecs:TagResource": "checked by ECS when StartTask or RegisterTaskDefinition carries tags",
    # Lambda's event source mapping reads the ledger's stream with the function's role, not its code.
    "dynamodb:DescribeStream": "read by Lambda's event source mapping", "dynamodb:GetRecords": "the same",
    "dynamodb:GetShardIterator": "the same", "dynamodb:ListStreams": "the same",
}
FOLDERS = {"scheduler": "scheduler", "job-events": "job_events", "budget-guard": "budget_guard", "reaper": "reaper"}


def operations_of(action: str) -> set:
    service, _, name = action.partition(":")
    return COVERS.get(action, {(service, name)})


@pytest.mark.parametrize("handler", HANDLERS)
def test_the_scenarios_call_exactly_what_the_permissions_declare(recorded, handler):
    """Every declared action is exercised by a scenario (so every call is failed above), and every call a
    scenario makes is declared (so the deployed role allows it)."""
    declared = {a for p in declared_permissions(FOLDERS[handler]) for a in p.actions if a not in NOT_CALLS}
    called = {op for scenario in HANDLERS[handler] for op in recorded[scenario]}
    never_called = [a for a in sorted(declared) if not operations_of(a) & called]
    undeclared = sorted(op for op in called if not any(op in operations_of(a) for a in declared))
    assert never_called == [], f"{handler}: declared but no scenario calls them: {never_called}"
    assert undeclared == [], f"{handler}: called without a declared permission: {undeclared}"


def test_the_permission_check_sees_a_missing_permission(recorded):
    """The check above, fed a scheduler that calls one operation more than it declares."""
    declared = {a for p in declared_permissions("scheduler") for a in p.actions if a not in NOT_CALLS} - {"ecs:StartTask"}
    called = {op for scenario in HANDLERS["scheduler"] for op in recorded[scenario]}
    assert [op for op in called if not any(op in operations_of(a) for a in declared)] == [("ecs", "StartTask")]
