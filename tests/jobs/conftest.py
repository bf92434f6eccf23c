"""Fixtures for the job runtime: the home region as the default, and that region's table and queues as the
lead's Pulumi component declares them (names, keys, indexes, redrive policy), in moto."""

from __future__ import annotations

import functools
import json

import boto3
import pytest
import ecs_agent
from ecs_agent import held_task_statuses

from benchmarks.submission import create_queues, create_table, linear_moto

HOME = "us-east-1"
ENV = "dev"
TABLE = f"mlfleet-{ENV}-jobs"


@functools.lru_cache(maxsize=None)
def aws_client(service: str, region: str = "us-east-1"):
    """A client for the test's own setup and checks, made once per test session: a client holds no moto
    state (moto answers whichever mock is active) and making one costs a tenth of a second."""
    return boto3.session.Session().client(service, region_name=region)


@pytest.fixture(autouse=True)
def home_region(monkeypatch):
    """The stack's home region as the default (fake credentials come from tests/conftest.py)."""
    for key, value in {"AWS_DEFAULT_REGION": HOME,
                       # moto's EC2 otherwise registers thousands of public AMIs (with snapshots and volumes)
                       # in every mock: a second of each test. The fleets' launch template names one AMI,
                       # which moto does not validate.
                       "MOTO_EC2_LOAD_DEFAULT_AMIS": "false"}.items():
        monkeypatch.setenv(key, value)


@pytest.fixture
def linear(aws):
    """moto without its quadratic bookkeeping, for submissions of thousands of jobs (benchmarks/submission.py)."""
    with linear_moto():
        yield


@pytest.fixture
def home(aws):
    create_table()
    queue, dlq = create_queues()
    set_teams(teams_json())
    return {"table": TABLE, "queue": queue, "dlq": dlq}


FLEET_TYPE = "g5.12xlarge"  # 4 GPUs, 48 vCPUs in the catalog
CLUSTER = f"mlfleet-{ENV}"
FAMILY = f"mlfleet-{ENV}-gpu-job"
ASG = f"mlfleet-{ENV}-gpu1"
ACCOUNT = "123456789012"  # moto's default account


def checkpoint_bucket(region: str = HOME) -> str:
    """The region's checkpoint bucket as components/storage names it."""
    from lambdas.jobs.checkpoints import bucket_name

    return bucket_name(ENV, ACCOUNT, region)


def fleets_json(max_instances: int = 4, region: str = HOME) -> str:
    return json.dumps([{"region": region, "fleet": "gpu1", "asg_name": ASG, "cluster": CLUSTER, "task_family": FAMILY,
                        "max_instances": max_instances, "instance_types": [FLEET_TYPE, "g5.24xlarge"],
                        "on_demand_base": 0, "on_demand_percent_above_base": 0}])


def on_demand_fleets_json() -> str:
    """fleets_json() bought on-demand. moto reports an Auto Scaling group's instances as on-demand (no
    InstanceLifecycle; in AWS a spot instance carries "spot", botocore's EC2 model, InstanceLifecycleType,
    which lambdas/scheduler/state.py reads), so the scheduler prices them at the on-demand price: with a
    spot fleet, a job would see its own spot box as cheaper than the very empty machine it fits and
    decline it (the kept-machine rule, planning/packer.py), where in AWS that machine is spot and priced
    so."""
    return json.dumps([{**json.loads(fleets_json())[0], "on_demand_percent_above_base": 100}])


def two_fleets_json() -> str:
    """The fleet of fleets_json() and one of one-T4 boxes, which buys a one-GPU job for a tenth of a
    g5.12xlarge (a spot notice then declines the first fleet's replacement: job_events/replacements.py)."""
    small = {**json.loads(fleets_json())[0], "fleet": "small", "asg_name": f"mlfleet-{ENV}-small",
             "instance_types": ["g4dn.xlarge"]}
    return json.dumps([*json.loads(fleets_json()), small])


def build_fleet(size: int = 2, max_size: int = 6, region: str = HOME) -> dict:
    """A fleet region as the lead's components declare it: group, cluster, job family with roles under
    /mlfleet/<env>/, and `size` registered container instances. Returns {instance_id: container ARN}."""
    ec2, autoscaling, ecs, iam = (aws_client(s, region) for s in ("ec2", "autoscaling", "ecs", "iam"))
    ec2.create_launch_template(LaunchTemplateName=ASG, LaunchTemplateData={"ImageId": "ami-12c6146b",
                                                                           "InstanceType": FLEET_TYPE})
    autoscaling.create_auto_scaling_group(
        AutoScalingGroupName=ASG, LaunchTemplate={"LaunchTemplateName": ASG}, MinSize=0, MaxSize=max_size,
        DesiredCapacity=size, AvailabilityZones=[f"{region}a"],
        Tags=[{"Key": "mlfleet:environment", "Value": ENV, "PropagateAtLaunch": True}])
    ecs.create_cluster(clusterName=CLUSTER)
    # IAM is global: one job role per region, as the lead's components declare it.
    role = iam.create_role(Path=f"/mlfleet/{ENV}/", RoleName=f"job-{region}", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    # The lead's definition also has requiresCompatibilities=["EC2"]; moto then wrongly demands a hard
    # `memory` on each container (AWS accepts memoryReservation alone), so it is left out here.
    ecs.register_task_definition(
        family=FAMILY, taskRoleArn=role, executionRoleArn=role, networkMode="bridge",
        containerDefinitions=[{"name": "job", "image": "public.ecr.aws/docker/library/busybox:latest", "essential": True,
                               "cpu": 1024, "memoryReservation": 4096,
                               "resourceRequirements": [{"type": "GPU", "value": "1"}],
                               "logConfiguration": {"logDriver": "awslogs", "options": {
                                   "awslogs-group": f"/mlfleet/{ENV}/jobs", "awslogs-region": region,
                                   "awslogs-stream-prefix": "job"}}}],
        tags=[{"key": "mlfleet:environment", "value": ENV}])
    instances = {}
    group = autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=[ASG])["AutoScalingGroups"][0]
    for member in group["Instances"]:
        ecs_agent.register(ecs, CLUSTER, member["InstanceId"], region)  # its GPUs too, which moto leaves out
    arns = ecs.list_container_instances(cluster=CLUSTER)["containerInstanceArns"]
    for ci in ecs.describe_container_instances(cluster=CLUSTER, containerInstances=arns)["containerInstances"] if arns else []:
        instances[ci["ec2InstanceId"]] = ci["containerInstanceArn"]
    return instances


def attach_spot_instance(region: str = HOME) -> tuple[str, str]:
    """One more member of build_fleet's group, a Spot Instance, registered with the cluster: (instance id,
    container instance ARN). moto's groups launch on-demand instances whatever the launch template asks (no
    InstanceLifecycle), so it is requested as a Spot Instance and attached (the group's desired capacity
    grows by one); moto's Spot requests only ever say `fulfilled`."""
    ec2, autoscaling, ecs = (aws_client(s, region) for s in ("ec2", "autoscaling", "ecs"))
    (request,) = ec2.request_spot_instances(InstanceCount=1, LaunchSpecification={
        "ImageId": "ami-12c6146b", "InstanceType": FLEET_TYPE, "Placement": {"AvailabilityZone": f"{region}a"}})[
        "SpotInstanceRequests"]
    instance_id = request["InstanceId"]
    ec2.create_tags(Resources=[instance_id], Tags=[{"Key": "mlfleet:environment", "Value": ENV}])
    autoscaling.attach_instances(AutoScalingGroupName=ASG, InstanceIds=[instance_id])
    arn = ecs.register_container_instance(cluster=CLUSTER, instanceIdentityDocument=json.dumps(
        {"instanceId": instance_id, "region": region, "availabilityZone": f"{region}a"}))["containerInstance"][
        "containerInstanceArn"]
    return instance_id, arn


def open_admission(region: str = HOME, state: str = "open") -> None:
    aws_client("ssm", region).put_parameter(
        Name=f"/mlfleet/{ENV}/admission", Type="String", Overwrite=True,
        Value=json.dumps({"state": state, "reason": "test", "changedAt": "2026-11-22T00:00:00+00:00"}))


def teams_json(teams: dict | None = None, default_team: str | None = None, half_life_minutes: int = 60) -> str:
    """The teams parameter's value as components/jobs teams_document writes it, from {name: (weight, max_gpus)}."""
    return json.dumps({"teams": {name: {"weight": weight, "max_gpus": quota}
                                 for name, (weight, quota) in (teams or {}).items()},
                       "default_team": default_team, "share_half_life_minutes": half_life_minutes})


def small_definition_defaults() -> None:
    """A revision of the job family with small vCPU and memory defaults (which the scheduler copies): moto takes
    a task's vCPUs and memory from its definition, not its overrides, so this keeps moto's remaining resources
    near AWS's."""
    ecs = aws_client("ecs", HOME)
    latest = ecs.describe_task_definition(taskDefinition=FAMILY)["taskDefinition"]
    ecs.register_task_definition(family=FAMILY, taskRoleArn=latest["taskRoleArn"],
                                 executionRoleArn=latest["executionRoleArn"], networkMode="bridge",
                                 containerDefinitions=[{**latest["containerDefinitions"][0], "cpu": 128,
                                                        "memoryReservation": 256}])


# A task ECS is stopping, as AWS shows it (tests/ecs_agent.py: held_task_statuses, stopping, stopped).
@pytest.fixture
def held_statuses():
    with held_task_statuses():
        yield


def set_teams(text: str, region: str = HOME) -> None:
    """The teams parameter as the job service component writes it."""
    aws_client("ssm", region).put_parameter(Name=f"/mlfleet/{ENV}/teams", Type="String", Overwrite=True, Value=text)


def scheduler_settings(home: dict, max_instances: int = 4, max_hourly_usd: float = 100.0, fleets: str | None = None):
    """The scheduler's settings as the job service component sets them, for the fixtures' resources."""
    from lambdas.scheduler.handler import Settings

    return Settings(environment=ENV, jobs_table=home["table"], jobs_queue_url=home["queue"], jobs_dlq_url=home["dlq"],
                    admission_parameter=f"/mlfleet/{ENV}/admission", fleets=fleets or fleets_json(max_instances=max_instances),
                    max_hourly_usd=max_hourly_usd, alert_topic_arn=f"arn:aws:sns:{HOME}:{ACCOUNT}:mlfleet-{ENV}-alerts",
                    default_max_attempts=3, rebalance_timeout_minutes=30, account_id=ACCOUNT)


def event_settings(home: dict, fleets: str | None = None):
    """The job-events function's settings as the job service component sets them, for the fixtures' resources."""
    from lambdas.job_events.handler import Settings

    return Settings(environment=ENV, jobs_table=home["table"], jobs_queue_url=home["queue"], jobs_dlq_url=home["dlq"],
                    fleets=fleets or fleets_json(), rebalance_timeout_minutes=30,
                    notify_email_topic_arn=f"arn:aws:sns:{HOME}:{ACCOUNT}:mlfleet-{ENV}-job-notifications")


EMAIL_TOPIC = f"mlfleet-{ENV}-job-notifications"
SLACK_TOPIC = f"mlfleet-{ENV}-job-notifications-slack"


def job_service_value(stack: str = ENV, *, egress: bool = True, slack: bool = True, **changes) -> dict:
    """The job-service parameter as components/jobs publishes it (job_service_document), for the fixtures'
    resources in moto's account."""
    topic = f"arn:aws:sns:{HOME}:{ACCOUNT}:"
    document = {
        "queueUrl": f"https://sqs.{HOME}.amazonaws.com/{ACCOUNT}/mlfleet-{stack}-jobs",
        "deadLetterQueueUrl": f"https://sqs.{HOME}.amazonaws.com/{ACCOUNT}/mlfleet-{stack}-jobs-dlq",
        "ledgerTable": f"mlfleet-{stack}-jobs", "schedulerFunction": f"mlfleet-{stack}-scheduler",
        "admissionParameter": f"/mlfleet/{stack}/admission", "homeRegion": HOME,
        "fleets": json.loads(fleets_json()), "defaultMaxAttempts": 3, "jobLogGroup": f"/mlfleet/{stack}/jobs",
        "images": {"account": ACCOUNT, "cachePrefix": f"mlfleet/{stack}", "regionsWithoutEgress": [] if egress else [HOME]},
        "notifications": {"email": f"{topic}mlfleet-{stack}-job-notifications",
                          "slack": f"{topic}mlfleet-{stack}-job-notifications-slack" if slack else None},
    }
    document.update(changes)
    return document


def publish_job_service(value: dict | str) -> None:
    aws_client("ssm", HOME).put_parameter(Name=f"/mlfleet/{ENV}/job-service", Type="String", Overwrite=True,
                                            Value=value if isinstance(value, str) else json.dumps(value))


def create_notification_topics(region: str = HOME) -> dict[str, str]:
    sns = aws_client("sns", region)
    return {"email": sns.create_topic(Name=EMAIL_TOPIC)["TopicArn"], "slack": sns.create_topic(Name=SLACK_TOPIC)["TopicArn"]}


@pytest.fixture
def service(home):
    """A deployed environment's job service as the mlfleet command finds it."""
    publish_job_service(job_service_value(queueUrl=home["queue"], deadLetterQueueUrl=home["dlq"]))
    open_admission()
    return home


def run_mlfleet(*argv: str) -> tuple[int, list[str], list[str]]:
    """`mlfleet -e dev --region us-east-1 ...`: its exit code, and the lines it printed to stdout and stderr."""
    from lambdas.jobs import cli

    out: list[str] = []
    err: list[str] = []
    code = cli.main(["-e", ENV, "--region", HOME, *argv], out=out.append, err=err.append)
    return code, "\n".join(out).splitlines(), "\n".join(err).splitlines()


@pytest.fixture
def faults(aws):
    """Record, fail or stub the functions' AWS calls (tests/jobs/faults.py); moto answers the rest."""
    from faults import Faults

    injector = Faults()
    injector.install()
    return injector
