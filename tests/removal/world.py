"""A moto world for the removal protocol: a fleet region (group, cluster, registered instances) and the
home region's job ledger, plus fault injection on the functions' own boto3 clients.

Where moto differs from AWS, and what the tests do about it:
- moto's TerminateInstanceInAutoScalingGroup never refuses to go below the group's minimum; AWS answers
  ValidationError "Currently, desiredSize equals minSize (n)..." (aws/aws-cli#47). Tests that need the
  refusal inject it (`inject`).
- moto terminates at once (no Terminating lifecycle state) and detaches the instance from its group.
- moto does not model GPUs on container instances; the protocol reads task counts only.
- moto's Auto Scaling groups launch on-demand instances whatever the launch template asks (no
  InstanceLifecycle), so `build(spot=True)` requests Spot Instances and attaches them to the group. moto's
  Spot requests only ever say `fulfilled` (no interruption notice: no marked-for-termination, no
  instance-terminated-no-capacity while the instance runs out its two minutes), and it reports no
  SpotInstanceRequestId on the instance; tests of an interruption make the requests' answer say so
  (`interrupt`), and the executor finds a machine's request by the `instance-id` filter.

Speed: the `fleet_aws` fixture skips moto's 5,200 default AMIs (MOTO_EC2_LOAD_DEFAULT_AMIS=false; the
launch template's image is never looked up) and keeps boto3 clients across tests (moto patches botocore
itself, not the clients), clearing the fault hooks a test registered instead.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone

import contextlib
import functools

import boto3
from botocore.exceptions import ClientError, ReadTimeoutError
import ecs_agent
from jobs.conftest import create_table
from moto import mock_aws

from lambdas.common.aws import client
from lambdas.removal import decide
from lambdas.removal.execute import LedgerSource, Scope, remove

FLEET_REGION, HOME = "us-west-2", "us-east-1"
ENV = "dev"
ASG = f"mlfleet-{ENV}-gpu1"
CLUSTER = f"mlfleet-{ENV}"
TABLE = f"mlfleet-{ENV}-jobs"
LEDGER = LedgerSource(HOME, TABLE)


_HOOKS: list[tuple[object, str, Callable]] = []


@contextlib.contextmanager
def fleet_moto(monkeypatch):
    """moto for one test, fast (see the module docstring); the fixture `fleet_aws` of the conftests."""
    monkeypatch.setenv("MOTO_EC2_LOAD_DEFAULT_AMIS", "false")
    with mock_aws():
        try:
            yield
        finally:
            while _HOOKS:
                events, name, handler = _HOOKS.pop()
                events.unregister(name, handler)


@functools.lru_cache(maxsize=None)
def aws(service: str, region: str = FLEET_REGION):
    """The tests' own clients, apart from the function's (faults are injected into the function's only)."""
    return boto3.client(service, region)


def _register(service: str, region: str, hook: str, operation: str, handler: Callable) -> None:
    events = client(service, region).meta.events
    name = f"{hook}.{client(service, region).meta.service_model.service_name}.{operation}"
    events.register(name, handler)
    _HOOKS.append((events, name, handler))


@dataclass
class World:
    instances: dict[str, str]  # instance id -> container instance ARN, in launch order

    @property
    def ids(self) -> list[str]:
        return list(self.instances)


def create_ledger_by_state() -> None:
    """The ledger with the one index the executor reads (by-state); jobs.conftest.create_table makes every
    index, and a client each call, which the property tests' many worlds cannot afford."""
    aws("dynamodb", HOME).create_table(
        TableName=TABLE, BillingMode="PAY_PER_REQUEST", KeySchema=[{"AttributeName": "job_id", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": n, "AttributeType": t} for n, t in
                              (("job_id", "S"), ("state", "S"), ("submitted_at", "N"))],
        GlobalSecondaryIndexes=[{"IndexName": "by-state", "Projection": {"ProjectionType": "ALL"},
                                 "KeySchema": [{"AttributeName": "state", "KeyType": "HASH"},
                                               {"AttributeName": "submitted_at", "KeyType": "RANGE"}]}])


def build(size: int = 4, min_size: int = 0, region: str = FLEET_REGION, ledger: bool = True,
          spot: bool = False) -> World:
    """A group of `size` registered instances; Spot Instances with `spot` (see the module docstring)."""
    ec2, autoscaling, ecs = (aws(s, region) for s in ("ec2", "autoscaling", "ecs"))
    ec2.create_launch_template(LaunchTemplateName=ASG, LaunchTemplateData={"ImageId": "ami-12c6146b",
                                                                           "InstanceType": "g5.xlarge"})
    autoscaling.create_auto_scaling_group(
        AutoScalingGroupName=ASG, LaunchTemplate={"LaunchTemplateName": ASG}, MinSize=0 if spot else min_size,
        MaxSize=size + 5, DesiredCapacity=0 if spot else size, AvailabilityZones=[f"{region}a"],
        NewInstancesProtectedFromScaleIn=True,
        Tags=[{"Key": "mlfleet:environment", "Value": ENV, "PropagateAtLaunch": True}])
    if spot:
        requests = ec2.request_spot_instances(InstanceCount=size, LaunchSpecification={
            "ImageId": "ami-12c6146b", "InstanceType": "g5.xlarge", "Placement": {"AvailabilityZone": f"{region}a"}})
        ids = [r["InstanceId"] for r in requests["SpotInstanceRequests"]]
        ec2.create_tags(Resources=ids, Tags=[{"Key": "mlfleet:environment", "Value": ENV}])
        autoscaling.attach_instances(AutoScalingGroupName=ASG, InstanceIds=ids)  # desired capacity += size
        autoscaling.update_auto_scaling_group(AutoScalingGroupName=ASG, MinSize=min_size)
    ecs.create_cluster(clusterName=CLUSTER)
    ecs.register_task_definition(family=f"mlfleet-{ENV}-gpu-job",
                                 containerDefinitions=[{"name": "job", "image": "busybox", "memory": 512}])
    group = autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=[ASG])["AutoScalingGroups"][0]
    for member in group["Instances"]:
        ecs_agent.register(ecs, CLUSTER, member["InstanceId"], region)  # its GPUs too, which moto leaves out
    arns = ecs.list_container_instances(cluster=CLUSTER)["containerInstanceArns"]
    by_id = {ci["ec2InstanceId"]: ci["containerInstanceArn"]
             for ci in ecs.describe_container_instances(cluster=CLUSTER, containerInstances=arns)["containerInstances"]}
    if ledger:
        create_table(HOME)
    return World({m["InstanceId"]: by_id[m["InstanceId"]] for m in group["Instances"]})


def start_task_on(world: World, instance_id: str, region: str = FLEET_REGION) -> str:
    return aws("ecs", region).start_task(cluster=CLUSTER, taskDefinition=f"mlfleet-{ENV}-gpu-job",
                                                  containerInstances=[world.instances[instance_id]],
                                                  startedBy="someone")["tasks"][0]["taskArn"]


def place_job_in_ledger(job_id: str, instance_id: str, state: str = "STARTING") -> None:
    """A claim as the scheduler writes it before StartTask: the job is placed on the machine, no task yet."""
    aws("dynamodb", HOME).put_item(TableName=TABLE, Item={
        "job_id": {"S": job_id}, "state": {"S": state}, "submitted_at": {"N": "1"},
        "placement": {"M": {"instance_id": {"S": instance_id}, "region": {"S": FLEET_REGION}}}})


def status_of(world: World, instance_id: str, region: str = FLEET_REGION) -> str:
    return aws("ecs", region).describe_container_instances(cluster=CLUSTER, containerInstances=[world.instances[instance_id]])[
        "containerInstances"][0]["status"]


def tags_of(instance_id: str, region: str = FLEET_REGION) -> dict[str, str]:
    raw = aws("ec2", region).describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0]
    return {t["Key"]: t["Value"] for t in raw.get("Tags", [])}


def group_state(region: str = FLEET_REGION) -> tuple[int, set[str]]:
    group = aws("autoscaling", region).describe_auto_scaling_groups(AutoScalingGroupNames=[ASG])[
        "AutoScalingGroups"][0]
    return group["DesiredCapacity"], {i["InstanceId"] for i in group["Instances"]}


def candidates(world: World, *ids: str, method: str = decide.IDLE) -> list[decide.Candidate]:
    return [decide.Candidate(i, world.instances[i], FLEET_REGION, ASG, method, f"{method} test") for i in ids]


def run(world: World, *ids: str, method: str = decide.IDLE, now: datetime | None = None, lease_seconds: float = 600,
        **scope):
    """One executor call proposing `ids`, holding a lease that has `lease_seconds` left."""
    return remove(candidates(world, *ids, method=method),
                  Scope(FLEET_REGION, CLUSTER, (ASG,), method, **scope), registered=world.instances, ledger=LEDGER,
                  lease_expires_at=time.time() + lease_seconds, now=now or datetime.now(timezone.utc))


# Fault injection on the function's own cached client. botocore emits `before-parameter-build` with the
# call's parameters before anything is sent (a handler's exception reaches the caller; moto never sees
# the request), and `after-call` once moto's answer is parsed (the call was applied, its answer lost).

def throttle(operation: str) -> Exception:
    return ClientError({"Error": {"Code": "ThrottlingException", "Message": "Rate exceeded"}}, operation)


def timeout(operation: str) -> Exception:
    return ReadTimeoutError(endpoint_url=f"https://{operation}.amazonaws.com")


def validation(operation: str) -> Exception:
    return ClientError({"Error": {"Code": "ValidationException", "Message": "1 validation error detected"}}, operation)


FAULTS = {"throttle": throttle, "timeout": timeout, "validation": validation}


def inject(service: str, operation: str, fault: Callable[[str], Exception], *, region: str = FLEET_REGION,
           applied: bool = False, times: int = 1, skip: int = 0,
           when: Callable[[dict], bool] | None = None) -> list[dict]:
    """Make `times` calls of `operation` (those whose parameters satisfy `when`, after the first `skip`) fail
    with `fault`: before moto sees them, or after moto applied them (`applied`). Returns their parameters."""
    failed: list[dict] = []
    chosen: list[dict] = []
    seen = [0]

    def before(params, **_):
        if when is not None and not when(params):
            return
        seen[0] += 1
        if seen[0] > skip and len(failed) < times:
            failed.append(dict(params))
            if not applied:
                raise fault(operation)
            chosen.append(params)

    def after(**_):
        if chosen:
            chosen.clear()
            raise fault(operation)

    _register(service, region, "before-parameter-build", operation, before)
    if applied:
        _register(service, region, "after-call", operation, after)
    return failed


def on_call(service: str, operation: str, action: Callable[[dict], None], *, region: str = FLEET_REGION,
            once: bool = True) -> None:
    """Run `action(params)` just before the function's `operation` call: the world changes in between."""
    done = [False]

    def before(params, **_):
        if not (once and done[0]):
            done[0] = True
            action(params)

    _register(service, region, "before-parameter-build", operation, before)


def stale_read(service: str, operation: str, change: Callable[[dict], None], *, region: str = FLEET_REGION,
               skip: int = 0) -> None:
    """Let the function's call of `operation` after the first `skip` see `change(answer)` instead of moto's
    answer: a read that lags a write, as AWS's eventually consistent reads may (moto's never do)."""
    seen = [0]

    def after(parsed, **_):
        seen[0] += 1
        if seen[0] == skip + 1:
            change(parsed)

    _register(service, region, "after-call", operation, after)


def interrupt(instance_id: str, code: str = "marked-for-termination", *, region: str = FLEET_REGION) -> None:
    """EC2's interruption notice for `instance_id`, as its Spot request's status (moto's are only ever
    `fulfilled`): every answer of the function's DescribeSpotInstanceRequests from now on says `code`."""
    def notice(parsed, **_):
        for request in parsed.get("SpotInstanceRequests", []):
            if request.get("InstanceId") == instance_id:
                request["Status"] = {**request.get("Status", {}), "Code": code}

    _register("ec2", region, "after-call", "DescribeSpotInstanceRequests", notice)


def decisions(caplog) -> list[dict]:
    """The structured log lines written so far (lambdas/common/logs.py), as pytest's caplog holds them."""
    return [json.loads(r.getMessage()) for r in caplog.records if r.name == "mlfleet"]


def record_calls(*clients: tuple[str, str]) -> list[tuple[str, str]]:
    """Record (service, operation) of every call the function's clients make from now on."""
    made: list[tuple[str, str]] = []
    for service, region in clients:
        _register(service, region, "before-call", "*", lambda model, _s=service, **_: made.append((_s, model.name)))
    return made
