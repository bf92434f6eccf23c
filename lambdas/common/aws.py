"""boto3 clients with botocore's retry modes, created lazily and cached per (service, region).

Never create a client at import time: tests start moto first, and a Lambda cold start should not pay
for clients a run does not use.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from decimal import Decimal

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

# "standard" retries throttling and transient errors with exponential backoff and a retry quota;
# ten attempts ride out a burst of throttling on a 5,000-instance fleet without hand-written loops.
RETRY_CONFIG = Config(
    retries={"mode": "standard", "max_attempts": 10},
    connect_timeout=5,
    read_timeout=30,
    user_agent_extra="mlfleet",
)
# For calls that are not safe to send twice: botocore's standard mode also retries a request whose
# response was lost (a read timeout, a 5xx), and a resent ECS StartTask starts a second task (StartTask
# has no client token, unlike RunTask: botocore/data/ecs/2014-11-13/service-2.json StartTaskRequest).
SINGLE_ATTEMPT_CONFIG = RETRY_CONFIG.merge(Config(retries={"mode": "standard", "max_attempts": 1}))


@functools.lru_cache(maxsize=None)
def session() -> boto3.session.Session:
    """One session per process: its loader parses each service's model once (EC2's alone takes seconds),
    not once per client. Clients made from it are thread-safe; the session is only used here, serially.
    Tests hook botocore events on it (tests/jobs/faults.py)."""
    return boto3.session.Session()


def client(service: str, region: str | None = None):
    """The boto3 client for `service` in `region`; None is the function's own region, and the same client
    as asking for that region by name (one client per service and region, whoever asks)."""
    return _client(service, region or session().region_name)


@functools.lru_cache(maxsize=None)
def _client(service: str, region: str | None):
    return session().client(service, region_name=region, config=RETRY_CONFIG)


def single_attempt_client(service: str, region: str | None = None):
    """A client that sends each request once; the caller decides what an unanswered request means."""
    return _single_attempt_client(service, region or session().region_name)


@functools.lru_cache(maxsize=None)
def _single_attempt_client(service: str, region: str | None):
    return session().client(service, region_name=region, config=SINGLE_ATTEMPT_CONFIG)


def reset_clients() -> None:
    """Forget cached clients and the session (tests call this between moto contexts and region changes)."""
    _client.cache_clear()
    _single_attempt_client.cache_clear()
    session.cache_clear()


def paginate(service_client, operation: str, result_key: str, **kwargs):
    """Yield every item of `result_key` across all pages of `operation`."""
    paginator = service_client.get_paginator(operation)
    for page in paginator.paginate(**kwargs):
        yield from page.get(result_key, [])


# botocore autoscaling DescribeAutoScalingGroups, AutoScalingGroupNames: "By default, you can only specify up
# to 50 names."
GROUP_NAMES_PER_CALL = 50


def describe_groups(autoscaling, names) -> list[dict]:
    """The named Auto Scaling groups (those that exist), every page, at most GROUP_NAMES_PER_CALL names a call."""
    return [group for batch in chunks(list(dict.fromkeys(names)), GROUP_NAMES_PER_CALL)
            for group in paginate(autoscaling, "describe_auto_scaling_groups", "AutoScalingGroups",
                                  AutoScalingGroupNames=batch)]


def dynamodb_number(value: float) -> dict:
    """A number as a DynamoDB attribute value: its shortest exact decimal (repr), never a binary float's
    expansion, so what is written reads back as the same float."""
    return {"N": str(Decimal(repr(value)))}


def chunks(items, size: int):
    """Split a sequence into lists of at most `size` (AWS batch limits: 10, 20, 100, 500...)."""
    items = list(items)
    for start in range(0, len(items), size):
        yield items[start : start + size]


def per_item_errors(call: Callable[[list[str]], object], items: Sequence[str],
                    batch: int) -> dict[str, ClientError | BotoCoreError]:
    """`call(items)` a batch at a time; a batch that fails is retried one item at a time, so one bad item
    (an instance gone, a throttle that outlasted the retries, one EC2 cannot stop) fails alone. Returns
    item -> the error of its own call, for a caller that tells errors apart by their code."""
    failed: dict[str, ClientError | BotoCoreError] = {}
    for group in chunks(items, batch):
        try:
            call(group)
        except (ClientError, BotoCoreError):
            for item in group:
                try:
                    call([item])
                except (ClientError, BotoCoreError) as error:
                    failed[item] = error
    return failed


def per_item(call: Callable[[list[str]], object], items: Sequence[str], batch: int) -> dict[str, str]:
    """per_item_errors, each error as one line: item -> `Type: message`."""
    return {item: f"{type(error).__name__}: {error}" for item, error in per_item_errors(call, items, batch).items()}


# DescribeTasks takes at most 100 tasks a call (botocore's ecs model, DescribeTasks.tasks).
TASKS_PER_DESCRIBE = 100


# Tasks seen stopped (lastStatus STOPPED, the end of a task's lifecycle: it never changes again), kept while a
# Lambda's environment is warm. ECS lists stopped tasks for about an hour, so without this every scheduler run
# would describe that hour's tasks again (a sweep of 3,000 short jobs: 30 DescribeTasks calls a run); with it, a
# run describes only those stopped since the last. Bounded: past the limit it starts over (one full read).
STOPPED_SEEN_LIMIT = 50_000
_stopped_seen: set[str] = set()


def forget_stopped_tasks() -> None:
    """Start over (tests: moto's task ARNs may repeat across restored worlds)."""
    _stopped_seen.clear()


def still_stopping(ecs, cluster: str, task_arns: Iterable[str]) -> list[dict]:
    """Of tasks ECS has set to STOPPED (ListTasks desiredStatus STOPPED), those not stopped yet (lastStatus
    not STOPPED), described 100 a call; tasks already seen stopped are not described again. After StopTask a
    task runs up to its stop timeout (a job saving its checkpoint on SIGTERM) and holds what it reserved until
    it has stopped: "If a task that is supposed to be RUNNING is transitioned to STOPPED, the agent releases
    the resources that were allocated to the stopped task" (the ECS developer guide, "Amazon ECS container
    instance state change events")."""
    if len(_stopped_seen) > STOPPED_SEEN_LIMIT:
        _stopped_seen.clear()
    unseen = [arn for arn in dict.fromkeys(task_arns) if arn not in _stopped_seen]
    found = []
    for batch in chunks(unseen, TASKS_PER_DESCRIBE):
        for task in ecs.describe_tasks(cluster=cluster, tasks=batch)["tasks"]:
            if task.get("lastStatus") == "STOPPED":
                _stopped_seen.add(task["taskArn"])
            else:
                found.append(task)
    return found


# Instance ids per DescribeSpotInstanceRequests call, given as the `instance-id` filter (as DescribeInstances'
# are read: lambdas/scheduler/state.py).
SPOT_FILTER_VALUES = 200


def spot_requests(ec2, instance_ids: Sequence[str]):
    """Every Spot request naming one of `instance_ids` (its InstanceId), batched and paginated. Filtered by
    instance id (DescribeSpotInstanceRequests' `instance-id` filter), so a request that is gone leaves its
    instance out instead of failing the call (InvalidSpotInstanceRequestID.NotFound), as
    SpotInstanceRequestIds would."""
    for batch in chunks(sorted(set(instance_ids)), SPOT_FILTER_VALUES):
        yield from paginate(ec2, "describe_spot_instance_requests", "SpotInstanceRequests",
                            Filters=[{"Name": "instance-id", "Values": batch}])
