"""The job-events function against a SEQUENCE of well-formed events, in any order and delivered more than once.

EventBridge delivers at least once and in no guaranteed order, and Lambda retries a failed asynchronous
invocation; the ledger's stream brings every write of an ended job, its batches retried too
(lambdas/job_events/handler.py). tests/jobs/test_event_properties.py sends one perturbed event at a time;
this file sends many good ones about the same jobs.

The world, in moto: one or two machines of the fleet and a few jobs of one submission that asked to be
told (e-mail), each queued with its message or started as the scheduler starts one (lambdas/scheduler/starting.py: the claim QUEUED ->
STARTING with attempt + 1 and the placement, StartTask with the job's id and attempt in its overrides and
tags, then RUNNING with the task). Hypothesis draws steps from what the world allows at that point:
  - a live task stops (exit code 0, 1, 137 or none; stop code EssentialContainerExited, SpotInterruption,
    TaskFailedToStart, UserInitiated, or a host failure) and its STOPPED event is delivered;
  - the STOPPED event of a task this function stopped (at a spot notice) is delivered, late as it likes,
    possibly after the scheduler started the job's next attempt;
  - the RUNNING event of a task, possibly after its job moved on;
  - an event delivered before is delivered again;
  - the scheduler starts a queued job again (its next attempt, on a machine no notice came for, consuming
    the job's queue messages), or claims it and loses StartTask's answer (left STARTING), or a person cancels
    the job while StartTask is under way and the scheduler settles the start (starting.py settle_start);
  - a person runs `mlfleet cancel` on a job or the whole submission, whatever state its jobs are in (queued,
    starting, running, requeued after a notice while the stopped task's event is still on its way, ended),
    through the command (cli.main); the STOPPED event of a task it stopped is then on its way, as above;
  - a scheduler run places a cancelled job from a view read before the cancel (the by-state index lags):
    starting.py start_one;
  - a spot interruption warning or a rebalance recommendation for a machine;
  - a job saves a checkpoint (an object under its location: docs/jobs.md, "Retry rules");
  - a batch of the ledger's stream: records of writes of ended jobs (the handler's own, mark_notified's),
    any of them, some twice.
Then every stop event not yet delivered is, a scheduler run claims each cancelled job from the view its cancel
read (when it was queued), and the stream's records are delivered until none is left.

It holds, after each step (from moto):
  - a job's attempt never goes down, `runs` never exceeds max_attempts, and goes down only to 0 when the
    run's checkpoint gave the attempts back (an object newer than the run's start);
  - an ended job stays ended;
  - a job succeeds only on a stop with exit code 0 of its current attempt;
  - an event of an older attempt changes nothing of its job;
  - an event delivered again changes nothing (no ledger item, no queue or dead-letter message, no publish);
  - a submission is announced only once all its jobs ended;
  - a cancelled job stays CANCELLED whatever arrives after, with its attempt and runs; the only changes to it
    are its run's cost, charged once when its task stops (docs/jobs.md, "Costs"), and the submission's
    announcement mark; no queue or dead-letter message is sent for it (docs/jobs.md, "Watch, cancel":
    CANCELLED is "you cancelled it", not a state the retry rules leave);
  - a cancel prints one line per job it read: an ended job is "already <STATE>" and is not written (safe to
    repeat: docs/jobs.md, "Watch, cancel"); an active one is CANCELLED, and a running one's task is asked to
    stop ("`cancel` stops a running job's task"), as is the task of a start the cancel raced;
Then the RUNNING event of each task still running for a cancelled job (a start whose answer was lost) is
delivered, as ECS sends it, and it holds after the sequence: no job is lost (QUEUED with a message in the
queue, STARTING or RUNNING with a live task of its current attempt, SUCCEEDED, FAILED with a reason and in the
dead-letter queue, or CANCELLED with no task left running and every message left for it one the scheduler
deletes as a duplicate, lambdas/scheduler/handler.py triage_one), and the submission, when all its jobs ended
(cancelled ones included: docs/jobs.md, "Notifications", "whichever way the last job ended"), was announced
exactly once (no fault here loses an answer, the one case docs/jobs.md lets a channel be told twice:
tests/jobs/test_fault_injection.py).

Where moto differs from AWS: StopTask marks a task STOPPED at once (no agent, no SIGTERM, no stop timeout)
and ECS sends no events: the test builds each event as EventBridge carries it (detail: the DescribeTasks
Task shape) and decides its exit code; moto's DynamoDB has no stream here, so the records are built from
the items the handler wrote (NEW_IMAGE, filtered to ended jobs as components/jobs filters the mapping); its
global secondary indexes are read-after-write consistent where AWS's are eventually consistent; its S3
LastModified is read back in whole seconds, like AWS's ListObjectsV2, so a checkpoint saved in the second
its run started does not give the attempts back (the example keeps its own clock, each step its own second with
its starts, events and checkpoints half-way through it, so that which checkpoint is newer than which start
follows from the draws, not from where the wall clock's seconds fell); moto moves a task's lastStatus on
(PENDING, RUNNING, then STOPPED) each time it is described, whatever happened to it, so a live task is one
whose desiredStatus is still RUNNING (nothing asked to stop it).

HYPOTHESIS_PROFILE=ci runs few examples and the pinned one (a cancel racing a start the scheduler settles);
EVENT_EXAMPLES=N runs N and the pinned one (tests/perturbation.py).
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from datetime import datetime, timezone
from unittest import mock

import pytest
from conftest import ACCOUNT, ASG, CLUSTER, ENV, FAMILY, HOME, aws_client, build_fleet, checkpoint_bucket, fleets_json
from hypothesis import example, given
from hypothesis import strategies as st
from perturbation import budget

from lambdas.common.aws import client
from lambdas.common.catalog import load_catalog
from lambdas.common.tags import DETACHED_AT
from lambdas.job_events import decide as D
from lambdas.job_events import handler as job_events
from lambdas.jobs import checkpoints, cli, queue
from lambdas.jobs import ledger as L
from lambdas.jobs.fleets import REBALANCE_TAG
from lambdas.jobs.quarantine import Quarantine
from lambdas.jobs.spec import ATTEMPT_VARIABLE, assign_ids, parse_spec
from lambdas.scheduler import actions, starting
from lambdas.scheduler.actions import ATTEMPT_TAG, JOB_ID_TAG
from lambdas.scheduler.handler import triage_one
from lambdas.scheduler.state import MachineView

CLUSTER_ARN = f"arn:aws:ecs:{HOME}:{ACCOUNT}:cluster/{CLUSTER}"
STOPS = {  # stop code -> (stoppedReason, the exit codes it comes with)
    "EssentialContainerExited": ("Essential container in task exited", (0, 1, 137)),
    "SpotInterruption": ("Your Spot Task was interrupted.", (0, 143, None)),
    "TaskFailedToStart": ("CannotPullContainerError: pull access denied", (None,)),
    "UserInitiated": ("Task stopped by user", (0, 143)),
    "": ("Host EC2 (instance {instance}) terminated.", (None, 137)),
}


def settings(home) -> job_events.Settings:
    return job_events.Settings(environment=ENV, jobs_table=home["table"], jobs_queue_url=home["queue"],
                               jobs_dlq_url=home["dlq"], fleets=fleets_json(), rebalance_timeout_minutes=30,
                               notify_email_topic_arn=f"arn:aws:sns:{HOME}:{ACCOUNT}:mlfleet-{ENV}-job-notifications",
                               account_id=ACCOUNT)


@pytest.fixture
def machines(service, faults):
    """Two machines of the fleet, the notification topic, the checkpoint bucket and the job service the mlfleet
    command finds; reset between examples."""
    aws_client("sns", HOME).create_topic(Name=f"mlfleet-{ENV}-job-notifications")
    aws_client("s3", HOME).create_bucket(Bucket=checkpoint_bucket())
    return {**service, "instances": build_fleet(size=2), "faults": faults}


def reset(world) -> None:
    """The machines as build_fleet left them, and nothing in the ledger, the queues or the bucket."""
    dynamodb, sqs, ecs, ec2, s3 = (aws_client(s, HOME) for s in ("dynamodb", "sqs", "ecs", "ec2", "s3"))
    for item in dynamodb.scan(TableName=world["table"], ConsistentRead=True)["Items"]:
        dynamodb.delete_item(TableName=world["table"], Key={"job_id": item["job_id"]})
    for url in (world["queue"], world["dlq"]):
        for message in messages(url):
            sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
    for arn in ecs.list_tasks(cluster=CLUSTER, desiredStatus="RUNNING")["taskArns"]:
        ecs.stop_task(cluster=CLUSTER, task=arn, reason="reset")
    ecs.update_container_instances_state(cluster=CLUSTER, containerInstances=list(world["instances"].values()),
                                         status="ACTIVE")
    ids = list(world["instances"])
    ec2.delete_tags(Resources=ids, Tags=[{"Key": REBALANCE_TAG}, {"Key": DETACHED_AT}])
    autoscaling = aws_client("autoscaling", HOME)
    members = {i["InstanceId"] for i in autoscaling.describe_auto_scaling_groups(
        AutoScalingGroupNames=[ASG])["AutoScalingGroups"][0]["Instances"]}
    if detached := [i for i in ids if i not in members]:  # a notice declined its replacement
        autoscaling.attach_instances(AutoScalingGroupName=ASG, InstanceIds=detached)
    for item in s3.list_objects_v2(Bucket=checkpoint_bucket()).get("Contents", []):
        s3.delete_object(Bucket=checkpoint_bucket(), Key=item["Key"])
    world["faults"].effective.clear()


def messages(url: str) -> list[dict]:
    """Every message of the queue, each once, all left visible."""
    sqs = aws_client("sqs", HOME)
    found: dict[str, dict] = {}
    while batch := sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=30).get("Messages"):
        found.update((m["MessageId"], m) for m in batch)
    for message in found.values():
        sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=0)
    return list(found.values())


def job_ids_in(url: str) -> list[str]:
    return sorted(json.loads(m["Body"])["job_id"] for m in messages(url))


def sent_to(world, url: str) -> list[str]:
    """The job ids of the messages the handler sent to the queue (recorded, not received: each receive counts
    towards the queue's redrive to the dead-letter queue after 5)."""
    calls = world["faults"].carried_out("sqs", "SendMessageBatch") + world["faults"].carried_out("sqs", "SendMessage")
    bodies = [e["MessageBody"] for c in calls if c["QueueUrl"] == url for e in c.get("Entries", [c])]
    return [json.loads(b)["job_id"] for b in bodies]


def items(world) -> dict[str, dict]:
    """The ledger's job items by id (the dead-letter outbox left out)."""
    scanned = aws_client("dynamodb", HOME).scan(TableName=world["table"], ConsistentRead=True)["Items"]
    return {i["job_id"]["S"]: i for i in scanned if not i["job_id"]["S"].startswith("#")}


def publishes(world) -> int:
    return len(world["faults"].carried_out("sns", "Publish"))


class NoStart:
    """The fleet and task definitions of a scheduler run that must start nothing."""

    def __init__(self, job_id: str):
        self.job_id = job_id

    def __getattr__(self, name: str):
        raise AssertionError(f"the scheduler claimed {self.job_id} from a view read before it was cancelled")


class Sequence:
    """The world of one example: its jobs, their tasks, and the events delivered and still to deliver."""

    def __init__(self, world, data):
        self.world, self.data = world, data
        self.ledger = L.Ledger(aws_client("dynamodb", HOME), world["table"])
        # task ARN -> job_id, attempt, instance, container instance, in the order they were started. Draws pick
        # tasks in that order, never by ARN: moto's task ids are random uuids (mock_random, not seeded by
        # hypothesis), so an ARN's place among the others differs between a run and its replay.
        self.tasks: dict[str, dict] = {}
        self.delivered: list[dict] = []
        self.unsent: dict[str, dict] = {}  # task ARN -> its STOPPED event, still to deliver
        self.stream: list[dict] = []  # records of the stream not delivered yet
        self.seen_versions: dict[str, str] = {}
        self.doomed: set[str] = set()  # machines a notice or a spot stop said are going
        self.consumed: dict[str, int] = {}  # job id -> how many of its queue messages the scheduler took
        self.submission = ""
        self.views: dict[str, L.JobRecord] = {}  # job id -> the job as a cancel found it QUEUED (a stale view)
        # The last cancel: the jobs as it read them, what it printed, the StopTask calls it made, and whether the
        # scheduler settled a start the cancel raced (its task then stopped too).
        self.told: tuple[dict[str, L.JobRecord], list[str], list[str], bool] | None = None
        # The example's clock: each step is its own second, and the starts, the events and the checkpoints of
        # a step happen half-way through it. Whether a checkpoint is newer than its run's start (attempts given
        # back) then follows from the draws; on the wall clock it depended on whether a second began between
        # the two, which differs between a run and its replay.
        self.clock = float(int(time.time()))

    def tick(self) -> None:
        self.clock += 1

    def in_start_order(self, tasks) -> list[str]:
        """The tasks of `tasks` (ARNs) in the order they were started (see self.tasks)."""
        return [t for t in self.tasks if t in tasks]

    def now(self) -> datetime:
        return datetime.fromtimestamp(self.clock + 0.5, timezone.utc)

    def save_checkpoint(self, job_id: str) -> None:
        """An object under the job's location, saved now (moto dates it from its own clock, which S3's
        listing reads back in whole seconds)."""
        with mock.patch("moto.s3.models.utcnow", return_value=self.now().replace(tzinfo=None)):
            aws_client("s3", HOME).put_object(Bucket=checkpoint_bucket(), Key=f"{checkpoints.PREFIX}{job_id}/step",
                                              Body=b"weights")

    # --- the scheduler -----------------------------------------------------------------------------------------

    def start(self, record: L.JobRecord, instance_id: str, *, confirmed: bool = True, cancelled: bool = False) -> bool:
        """Claim and start the job's next attempt on the machine, as the scheduler does; `cancelled`: a person
        cancels the job while StartTask is under way, and the scheduler settles the start
        (lambdas/scheduler/starting.py settle_start, which stops the task of a job cancelled meanwhile)."""
        attempt, arn = record.attempt + 1, self.world["instances"][instance_id]
        now = self.now().timestamp()
        placement = L.Placement(HOME, "gpu1", CLUSTER, arn, instance_id, "g5.12xlarge", None, "spot", 2.0, now)
        claim = self.ledger.transition(record.job_id, L.STARTING, expect_states=[L.QUEUED], expect_attempt=record.attempt,
                                       reason=f"placed on {instance_id}", now=now, attempt=attempt, placement=placement)
        assert claim.applied
        tasks = aws_client("ecs", HOME).start_task(
            cluster=CLUSTER, taskDefinition=FAMILY, containerInstances=[arn], startedBy=record.job_id,
            overrides={"containerOverrides": [{"name": "job", "environment": [
                {"name": ATTEMPT_VARIABLE, "value": str(attempt)}]}]},
            tags=[{"key": JOB_ID_TAG, "value": record.job_id}, {"key": ATTEMPT_TAG, "value": str(attempt)}])["tasks"]
        assert tasks, "moto refused the start"
        task = tasks[0]["taskArn"]
        self.tasks[task] = {"job_id": record.job_id, "attempt": attempt, "instance": instance_id, "arn": arn}
        if cancelled:
            self.cancel(record.job_id, settled=True)
            summary: dict = {"errors": [], "started": [], "start_failed": []}
            starting.settle_start(None, self.ledger, claim.record, placement, actions.Started(task), now, summary)
            assert not summary["errors"], summary
            self.notice_stops()
        elif confirmed:
            done = self.ledger.transition(record.job_id, L.RUNNING, expect_states=[L.STARTING], expect_attempt=attempt,
                                          reason="task started", now=now, current=claim.record, runs=claim.record.runs + 1,
                                          placement=L.Placement(**{**vars(placement), "task_arn": task}))
            assert done.applied
        return True

    def restart(self, job_id: str, instance_id: str, confirmed: bool, cancelled: bool = False) -> None:
        # The scheduler consumes the job's messages (in the model: the queue is received once, at the end).
        self.consumed[job_id] = sent_to(self.world, self.world["queue"]).count(job_id)
        self.start(self.ledger.get(job_id), instance_id, confirmed=confirmed, cancelled=cancelled)

    def stale_start(self, job_id: str, instance_id: str) -> str | None:
        """A scheduler run placing a job from a view read before it was cancelled (the by-state index is
        eventually consistent): lambdas/scheduler/starting.py start_one, whose claim is conditional on the
        version it read."""
        machine = MachineView(self.world["instances"][instance_id], instance_id, HOME, "gpu1", CLUSTER, "g5.12xlarge",
                              f"{HOME}a", "spot", 4, 48.0, 196608, 2.0, False, False)
        quarantine = Quarantine(self.ledger, aws_client("sqs", HOME), self.world["dlq"], by="scheduler")
        summary: dict = {"errors": [], "quarantined": [], "started": [], "start_failed": []}
        # (settings, the fleet and the task definitions are used only once a claim applied)
        none = NoStart(job_id)
        return starting.start_one(None, self.ledger, quarantine, self.views[job_id], machine, none, none, time.time(),
                                  summary)

    # --- a person -------------------------------------------------------------------------------------------------

    def cancel(self, target: str, *, settled: bool = False) -> list[str]:
        """`mlfleet cancel TARGET` (a job or the submission), through the command (lambdas/jobs/cli/watch.py)."""
        seen = {j: L.decode(i) for j, i in items(self.world).items() if target in (j, i["submission_id"]["S"])}
        self.views.update((j, r) for j, r in seen.items() if r.state == L.QUEUED)
        stops = len(self.world["faults"].carried_out("ecs", "StopTask"))
        printed: list[str] = []
        assert cli.main(["-e", ENV, "--region", HOME, "cancel", target], out=printed.append) == 0, printed
        lines = "\n".join(printed).splitlines()
        self.told = (seen, lines, [c["task"] for c in self.world["faults"].carried_out("ecs", "StopTask")[stops:]],
                     settled)
        if not settled:
            self.notice_stops()  # the tasks it stopped: their STOPPED events are on their way
            self.collect_stream()
        return lines

    def desired(self, task: str) -> str:
        return aws_client("ecs", HOME).describe_tasks(cluster=CLUSTER, tasks=[task])["tasks"][0]["desiredStatus"]

    # --- events ---------------------------------------------------------------------------------------------------

    def task_event(self, task: str, status: str, *, stop_code: str = "", reason: str = "",
                   exit_code: int | None = None) -> dict:
        about = self.tasks[task]
        detail = {"clusterArn": CLUSTER_ARN, "taskArn": task, "containerInstanceArn": about["arn"],
                  "startedBy": about["job_id"], "lastStatus": status, "desiredStatus": status if status == "STOPPED" else "RUNNING",
                  "overrides": {"containerOverrides": [{"name": "job", "environment": [
                      {"name": ATTEMPT_VARIABLE, "value": str(about["attempt"])}]}]},
                  "containers": [{"name": "job", "lastStatus": status,
                                  **({"exitCode": exit_code} if exit_code is not None else {})}]}
        if status == "STOPPED":
            detail.update(stopCode=stop_code, stoppedReason=reason,
                          stoppedAt=self.now().isoformat(timespec="milliseconds").replace("+00:00", "Z"))
        return {"version": "0", "id": f"ev-{len(self.delivered)}", "detail-type": D.TASK_STATE_CHANGE,
                "source": "aws.ecs", "account": ACCOUNT, "time": self.now().isoformat(timespec="seconds"),
                "region": HOME, "resources": [task], "detail": detail}

    def instance_event(self, kind: str, instance_id: str) -> dict:
        return {"version": "0", "id": f"ev-{len(self.delivered)}", "detail-type": kind, "source": "aws.ec2",
                "account": ACCOUNT, "time": self.now().isoformat(timespec="seconds"), "region": HOME,
                "resources": [instance_id], "detail": {"instance-id": instance_id, "instance-action": "terminate"}}

    def deliver(self, event: dict) -> dict:
        result = job_events.handle(event, settings(self.world), now=self.now())
        assert result.get("errors") == 0, result
        self.delivered.append(event)
        self.notice_stops()
        self.collect_stream()
        return result

    def notice_stops(self) -> None:
        """Tasks the handler stopped: their STOPPED events are on their way (exit code drawn now)."""
        live = [t for t in self.tasks if t not in self.unsent and not self.tasks[t].get("stopped")]
        if not live:
            return
        described = {t["taskArn"]: t for t in aws_client("ecs", HOME).describe_tasks(cluster=CLUSTER, tasks=live)["tasks"]}
        for task in (described[t] for t in live):  # (the exit codes drawn in start order)
            if task["desiredStatus"] == "STOPPED":  # (moto's lastStatus runs on to STOPPED by itself)
                self.tasks[task["taskArn"]]["stopped"] = True
                code = self.data.draw(st.sampled_from([0, 137, 143, 1, None]), label="exit code of a stopped task")
                self.unsent[task["taskArn"]] = self.task_event(
                    task["taskArn"], "STOPPED", stop_code="UserInitiated", reason=task.get("stoppedReason", ""),
                    exit_code=code)

    def collect_stream(self) -> None:
        """The stream records of the writes since the last step: every new version of an ended job."""
        for job_id, item in items(self.world).items():
            version = item["version"]["N"]
            if self.seen_versions.get(job_id) != version:
                self.seen_versions[job_id] = version
                if item["state"]["S"] in L.TERMINAL or item["state"]["S"] == L.QUARANTINED:
                    self.stream.append({"eventID": f"{job_id}/{version}", "eventName": "MODIFY", "eventVersion": "1.1",
                                        "eventSource": "aws:dynamodb", "awsRegion": HOME,
                                        "dynamodb": {"Keys": {"job_id": {"S": job_id}}, "NewImage": item,
                                                     "StreamViewType": "NEW_IMAGE"}})


# --- the property ----------------------------------------------------------------------------------------------

def build(world, data) -> tuple[Sequence, list[str]]:
    """A submission of 1-3 jobs, each QUEUED or RUNNING attempt 1 on one of the machines (1 or 2 of them)."""
    instances = list(world["instances"])[:data.draw(st.integers(1, 2), label="machines")]
    specs = []
    for _ in range(data.draw(st.integers(1, 3), label="jobs")):
        attempts = data.draw(st.integers(1, 3), label="max_attempts")
        specs.append(parse_spec({
            "image": "img:1", "command": ["run"], "gpus": 1, "vcpus": 1, "memory_mib": 1024,
            "max_attempts": attempts, "notify": ["ana@example.com"],
            **({"retry_on_exit_codes": [137]} if attempts > 1 and data.draw(st.booleans(), label="retries 137") else {}),
            **({"checkpoint_interval_minutes": 20} if data.draw(st.booleans(), label="checkpoints") else {})},
            fleet_regions=(HOME,), catalog=load_catalog(), default_max_attempts=3, notify_channels=("email",)))
    sequence = Sequence(world, data)
    submission = f"sub-20261122110000-{len(world.setdefault('examples', [])):06x}"
    world["examples"].append(submission)
    sequence.submission = submission
    jobs = assign_ids(submission, specs)
    for job in jobs:
        sequence.ledger.put_new(L.new_record(job, time.time() - 600))
        if data.draw(st.booleans(), label="still queued"):  # with its message, as `mlfleet submit` sends it
            assert not queue.send_jobs(client("sqs"), world["queue"], [queue.JobMessage(job.job_id, 0)])
        else:
            sequence.start(sequence.ledger.get(job.job_id), data.draw(st.sampled_from(instances), label="machine"))
    sequence.collect_stream()
    return sequence, instances


def step(sequence: Sequence, instances: list[str], data) -> tuple[str, dict | None]:
    """One step drawn from what the world allows now; returns its kind and the event delivered (if any)."""
    sequence.tick()
    records = {r.job_id: r for r in map(L.decode, items(sequence.world).values())}
    ecs = aws_client("ecs", HOME)
    live = [t for t, about in sequence.tasks.items() if not about.get("stopped") and t not in sequence.unsent]
    queued = [j for j, r in records.items() if r.state == L.QUEUED]
    choices = ["warning", "rebalance", "checkpoint"]
    choices += ["stop"] if live else []
    choices += ["late stop"] if sequence.unsent else []
    choices += ["running event"] if sequence.tasks else []
    choices += ["again"] if sequence.delivered else []
    choices += ["restart"] if queued and set(instances) - sequence.doomed else []
    choices += ["stream"] if sequence.stream else []
    choices += ["cancel"]
    choices += ["stale start"] if sequence.views and set(instances) - sequence.doomed else []
    kind = data.draw(st.sampled_from(choices), label="step")
    if kind == "stop":
        task = data.draw(st.sampled_from(live), label="task")
        code = data.draw(st.sampled_from(sorted(STOPS)), label="stop code")
        reason, exits = STOPS[code]
        reason = reason.format(instance=sequence.tasks[task]["instance"])
        exit_code = data.draw(st.sampled_from(exits), label="exit code")
        ecs.stop_task(cluster=CLUSTER, task=task, reason=reason)
        sequence.tasks[task]["stopped"] = True
        if code == "SpotInterruption" or code == "":
            sequence.doomed.add(sequence.tasks[task]["instance"])
        event = sequence.task_event(task, "STOPPED", stop_code=code, reason=reason, exit_code=exit_code)
    elif kind == "late stop":
        event = sequence.unsent.pop(data.draw(st.sampled_from(sequence.in_start_order(sequence.unsent)),
                                              label="stopped task"))
    elif kind == "running event":
        event = sequence.task_event(data.draw(st.sampled_from(list(sequence.tasks)), label="task"), "RUNNING")
    elif kind == "again":
        event = data.draw(st.sampled_from(sequence.delivered), label="event again")
    elif kind == "restart":
        job_id = data.draw(st.sampled_from(sorted(queued)), label="job")
        machine = data.draw(st.sampled_from(sorted(set(instances) - sequence.doomed)), label="machine")
        how = data.draw(st.sampled_from(["confirmed", "unconfirmed", "cancelled while starting"]), label="start")
        sequence.restart(job_id, machine, confirmed=how == "confirmed", cancelled=how == "cancelled while starting")
        return ("cancel" if how == "cancelled while starting" else kind), None
    elif kind == "cancel":
        sequence.cancel(data.draw(st.sampled_from([sequence.submission, *sorted(records)]), label="cancel"))
        return kind, None
    elif kind == "stale start":
        job_id = data.draw(st.sampled_from(sorted(sequence.views)), label="job")
        machine = data.draw(st.sampled_from(sorted(set(instances) - sequence.doomed)), label="machine")
        if sequence.views[job_id].version == sequence.ledger.get(job_id).version:
            return kind, None  # not stale: the cancel was refused (the job changed meanwhile)
        assert sequence.stale_start(job_id, machine) is None, "a claim from a stale view applied"
        return kind, None
    elif kind == "checkpoint":
        sequence.save_checkpoint(data.draw(st.sampled_from(sorted(records)), label="job"))
        return kind, None
    elif kind == "stream":
        batch = data.draw(st.lists(st.sampled_from(sequence.stream), min_size=1, max_size=4), label="stream batch")
        job_events.handler({"Records": batch}, settings=settings(sequence.world))
        if data.draw(st.booleans(), label="records delivered"):  # else: retried in a later batch
            sequence.stream = [r for r in sequence.stream if r not in batch]
        sequence.collect_stream()
        return kind, None
    else:
        machine = data.draw(st.sampled_from(instances), label="machine")
        if kind == "warning":
            sequence.doomed.add(machine)
        event = sequence.instance_event(D.INTERRUPTION if kind == "warning" else D.REBALANCE, machine)
    sequence.deliver(event)
    return kind, event


def check_step(sequence: Sequence, before: dict[str, dict], sent_before: tuple, kind: str, event: dict | None) -> None:
    after = items(sequence.world)
    world = sequence.world
    for job_id, item in after.items():
        old, new = L.decode(before[job_id]), L.decode(item)
        assert new.attempt >= old.attempt, (job_id, old.attempt, new.attempt)
        assert new.runs <= new.spec.max_attempts, (job_id, new.runs, new.spec.max_attempts, new.reasons)
        if new.runs < old.runs:  # attempts given back: a checkpoint newer than the run's start
            assert new.state == L.QUEUED and "attempts given back" in new.last_reason, new.reasons
            listed = aws_client("s3", HOME).list_objects_v2(Bucket=checkpoint_bucket(),
                                                             Prefix=f"{checkpoints.PREFIX}{job_id}/").get("Contents", [])
            assert any(o["LastModified"].timestamp() > old.started_at for o in listed), (old.reasons, listed)
        if old.state in L.TERMINAL:
            assert (new.state, new.attempt, new.runs) == (old.state, old.attempt, old.runs), (old.reasons, new.reasons)
        if old.state == L.CANCELLED:
            # Whatever arrives after (a late stop of any exit code, a notice, an event again, a scheduler run), a
            # cancelled job changes no more than its cost, once, when its task stops (docs/jobs.md, "Costs"), and
            # the submission's announcement mark (docs/jobs.md, "Notifications").
            same = replace(new, cost=old.cost, version=old.version, updated_at=old.updated_at, notified=old.notified,
                           notified_at=old.notified_at)
            assert same == old, (kind, event, old.reasons, new.reasons)
            assert new.cost == old.cost or old.cost is None or old.cost.charged_attempt < old.attempt, (old.cost, new.cost)
        if new.state == L.SUCCEEDED and old.state != L.SUCCEEDED:
            detail = (event or {}).get("detail", {})
            assert event is not None and event["detail-type"] == D.TASK_STATE_CHANGE, (kind, new.reasons)
            assert detail["startedBy"] == job_id and detail["lastStatus"] == "STOPPED", event
            assert [c.get("exitCode") for c in detail["containers"]] == [0], event
            assert sequence.tasks[detail["taskArn"]]["attempt"] == old.attempt and old.state in (L.STARTING, L.RUNNING)
        if event is not None and event["detail-type"] == D.TASK_STATE_CHANGE and event["detail"]["startedBy"] == job_id \
                and sequence.tasks[event["detail"]["taskArn"]]["attempt"] < old.attempt:
            assert item == before[job_id], ("an older attempt's event changed the job", event, old.reasons, new.reasons)
    cancelled = {j for j, i in before.items() if i["state"]["S"] == L.CANCELLED}
    sent = sent_to(world, world["queue"])[sent_before[0]:] + sent_to(world, world["dlq"])[sent_before[1]:]
    assert not cancelled & set(sent), ("a cancelled job was queued or dead-lettered", sent, kind, event)
    if kind == "cancel":
        check_cancel(sequence, after)
        assert (len(sent_to(world, world["queue"])), len(sent_to(world, world["dlq"]))) == sent_before[:2], "cancel sent"
    if kind == "again":
        assert after == before, "an event delivered again changed the ledger"
        assert (len(sent_to(world, world["queue"])), len(sent_to(world, world["dlq"])), publishes(world)) == sent_before, event
    if publishes(world) > sent_before[2]:
        assert all(item["state"]["S"] in L.TERMINAL for item in after.values()), "announced before the end"


def check_cancel(sequence: Sequence, after: dict[str, dict]) -> None:
    """What `mlfleet cancel` did to the jobs it read (docs/jobs.md, "Watch, cancel": it stops a running job's
    task, and is safe to repeat)."""
    seen, lines, stops, settled = sequence.told
    told = dict(line.split(": ", 1) for line in lines)
    assert sorted(told) == sorted(seen), (lines, sorted(seen))
    for job_id, old in seen.items():
        new = L.decode(after[job_id])
        if old.state in L.TERMINAL:  # ended: nothing written, and it says so
            assert told[job_id] == f"already {old.state}" and new == old, (told[job_id], old.reasons, new.reasons)
            continue
        assert new.state == L.CANCELLED and (new.attempt, new.runs) == (old.attempt, old.runs), (told[job_id], new.reasons)
        assert new.last_reason == "cancelled by moto", new.reasons  # who: moto's IAM user
        task = old.placement.task_arn if old.placement and old.state in (L.STARTING, L.RUNNING) else None
        if task:
            assert told[job_id] == f"cancelled; task {task.rsplit('/', 1)[-1]} stopping" and task in stops, (told, stops)
        else:
            assert told[job_id] == "cancelled", told[job_id]
            assert not [t for t in stops if sequence.tasks[t]["job_id"] == job_id], (told[job_id], stops)
        if task or settled:  # (a start whose answer was lost: its task's RUNNING event stops it, at the end)
            mine = [t for t, about in sequence.tasks.items() if (about["job_id"], about["attempt"]) == (job_id, new.attempt)]
            assert mine and all(sequence.desired(t) == "STOPPED" for t in mine), (job_id, mine)


class Pinned:
    """The draws of one explicit example, in order: (label, answer) pairs, an answer a value or, for a draw
    from a list, a function of the list (the order of each list is a pure function of the earlier draws). A
    draw of another label or an answer not in the list fails the example: the scenario no longer goes where its
    script says."""

    def __init__(self, name: str, *script: tuple):
        self.name, self.script, self.at = name, script, 0

    def draw(self, strategy, label=None):
        assert self.at < len(self.script), f"{self.name}: drew {label!r} past the end of its script"
        expected, answer = self.script[self.at]
        self.at += 1
        assert label == expected, f"{self.name}: drew {label!r} where its script says {expected!r}"
        elements = getattr(strategy, "elements", None)  # (sampled_from's list)
        if callable(answer):
            answer = answer(list(elements))
        assert elements is None or answer in elements, (self.name, label, answer, elements)
        return answer

    def __repr__(self) -> str:
        return f"Pinned({self.name!r})"


def first(options: list):
    return options[0]


# A person cancels a queued job while the scheduler's StartTask for it is under way, and the scheduler settles
# the start (starting.settle_start finds the job CANCELLED and stops the task it started); then the task's
# RUNNING event and its STOPPED event arrive. A drawn search meets this order only now and then: pinned, every
# run checks that the settled start's task is stopped (check_cancel) and what follows changes the job no more
# than its cost.
CANCEL_RACING_A_SETTLED_START = Pinned(
    "a cancel racing a start the scheduler settles",
    ("machines", 1), ("jobs", 1), ("max_attempts", 1), ("checkpoints", False), ("still queued", True),
    ("steps", 3),
    ("step", "restart"), ("job", first), ("machine", first), ("start", "cancelled while starting"),
    ("exit code of a stopped task", 143),
    ("step", "running event"), ("task", first),
    ("step", "late stop"), ("stopped task", first))


@budget(ci=3)
@example(data=CANCEL_RACING_A_SETTLED_START)
@given(data=st.data())
def test_any_order_of_events_loses_no_job_and_repeats_nothing(machines, data):
    world = machines
    reset(world)
    if isinstance(data, Pinned):
        data.at = 0
    sequence, instances = build(world, data)
    for _ in range(data.draw(st.integers(1, 12), label="steps")):
        before = items(world)
        sent = (len(sent_to(world, world["queue"])), len(sent_to(world, world["dlq"])), publishes(world))
        kind, event = step(sequence, instances, data)
        check_step(sequence, before, sent, kind, event)
    # ECS sends each task's RUNNING event, late as it likes: one of a task still running for a cancelled job (a
    # start whose answer was lost) has it stopped.
    for task, about in list(sequence.tasks.items()):
        if sequence.desired(task) == "RUNNING" and L.decode(items(world)[about["job_id"]]).state == L.CANCELLED:
            before = items(world)
            sent = (len(sent_to(world, world["queue"])), len(sent_to(world, world["dlq"])), publishes(world))
            event = sequence.task_event(task, "RUNNING")
            sequence.deliver(event)
            check_step(sequence, before, sent, "running event", event)
    # Every event is delivered in the end, and every stream record.
    while sequence.unsent:
        before = items(world)
        sent = (len(sent_to(world, world["queue"])), len(sent_to(world, world["dlq"])), publishes(world))
        event = sequence.unsent.pop(data.draw(st.sampled_from(sequence.in_start_order(sequence.unsent)),
                                              label="last stops"))
        sequence.deliver(event)
        check_step(sequence, before, sent, "late stop", event)
    # A scheduler run whose index still lists a job as queued when it was cancelled claims nothing.
    for job_id, view in sorted(sequence.views.items()):
        if sequence.ledger.get(job_id).version != view.version:
            assert sequence.stale_start(job_id, instances[0]) is None, "a claim from a stale view applied"
    while sequence.stream:
        batch, sequence.stream = sequence.stream, []
        job_events.handler({"Records": batch}, settings=settings(world))
        sequence.collect_stream()

    records = {r.job_id: r for r in map(L.decode, items(world).values())}
    queued, dead = job_ids_in(world["queue"]), job_ids_in(world["dlq"])  # (the only receive)
    owed = sent_to(world, world["queue"])
    for job_id, taken in sequence.consumed.items():  # what the scheduler took is gone from the queue
        for _ in range(taken):
            queued.remove(job_id)
            owed.remove(job_id)
    assert sorted(owed) == queued
    live = {(about["job_id"], about["attempt"]) for t, about in sequence.tasks.items()
            if aws_client("ecs", HOME).describe_tasks(cluster=CLUSTER, tasks=[t])["tasks"][0]["desiredStatus"] == "RUNNING"}
    for job_id, record in records.items():
        where = (job_id, record.state, record.attempt, record.reasons)
        if record.state == L.QUEUED:
            assert job_id in queued, where
        elif record.state in (L.STARTING, L.RUNNING):
            assert (job_id, record.attempt) in live, where
        elif record.state == L.FAILED:
            assert record.last_reason and job_id in dead, where
        elif record.state == L.CANCELLED:
            # Its tasks were asked to stop, and a message left for it starts nothing: the scheduler deletes it
            # as a duplicate (lambdas/scheduler/handler.py triage_one) and claims only QUEUED jobs.
            assert not any(j == job_id for j, _ in live), where
            for message in messages(world["queue"]):
                body = json.loads(message["Body"])
                if body["job_id"] == job_id:
                    summary: dict = {"duplicates": 0, "quarantined": [], "errors": []}
                    assert triage_one(queue.JobMessage(job_id, body["attempt"]), sequence.ledger, None, time.time(),
                                      summary) and summary["duplicates"] == 1, (where, body)
            assert L.decode(items(world)[job_id]) == record, where
        else:
            assert record.state == L.SUCCEEDED, where
    ended = all(r.state in L.TERMINAL for r in records.values())
    assert publishes(world) == (1 if ended else 0), (ended, publishes(world))
    if isinstance(data, Pinned):
        assert data.at == len(data.script), f"{data.name}: {data.script[data.at:]} not drawn"
