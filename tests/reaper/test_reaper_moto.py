"""One reaper run against moto marks exactly the idle instances; a run past the grace period drains and
terminates exactly those, and the group shrinks instead of replacing them.

Where moto differs from AWS (and why the test still means something):
- moto stamps LaunchTime with the wall clock, so runs are evaluated at "now + 3 h" and metrics are put
  at those future periods (real CloudWatch rejects points more than 2 h ahead; moto keeps them).
- There is no CloudWatch agent: GPU datapoints are written with put_metric_data under the agent's
  namespace, metric name and dimensions.
- moto does not model GPUs on container instances; the reaper never reads them (task counts only).
- moto's EC2 loads no default AMIs here (tests/removal/world.py, `fleet_aws`): no image is looked up.
"""

from __future__ import annotations

import functools
import json
from datetime import datetime, timedelta, timezone

import boto3
import pytest
from alert_delivery import chatbot_notification, published, subject_problems, subscribe_chatbot
from jobs.conftest import create_table

from lambdas.reaper.handler import Settings, run
from lambdas.reaper.idle import PERIOD_SECONDS, IdleSettings, window_periods

REGION = HOME = "us-east-1"
ASG = "mlfleet-dev-gpu1"
CLUSTER = "mlfleet-dev"
TABLE = "mlfleet-dev-jobs"
SETTINGS = Settings(environment="dev", cluster_name=CLUSTER, fleet_asg_names=(ASG,), idle_window_minutes=60,
                    idle_cpu_percent=10, idle_gpu_percent=5, idle_grace_minutes=30,
                    alert_topic_arn="", jobs_table=TABLE, home_region=HOME, max_actions_per_run=20)


def build_world(fleet_size: int = 5, standalone: int = 1, min_size: int = 0, region: str = REGION) -> dict:
    """An ASG of `fleet_size` registered GPU instances plus `standalone` tagged machines, the home region's
    job ledger (it holds the placement lease) and an alert topic with a queue subscribed; returns ids."""
    ec2, asg, ecs, sns, sqs = (aws(s, region) for s in ("ec2", "autoscaling", "ecs", "sns", "sqs"))
    topic = sns.create_topic(Name="mlfleet-dev-alerts")["TopicArn"]
    inbox = sqs.create_queue(QueueName="mlfleet-dev-inbox")["QueueUrl"]
    sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=sqs.get_queue_attributes(
        QueueUrl=inbox, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"])
    create_table(HOME)
    ec2.create_launch_template(LaunchTemplateName="mlfleet-dev-gpu1",
                               LaunchTemplateData={"ImageId": "ami-12c6146b", "InstanceType": "g5.xlarge"})
    asg.create_auto_scaling_group(
        AutoScalingGroupName=ASG, LaunchTemplate={"LaunchTemplateName": "mlfleet-dev-gpu1"}, MinSize=min_size,
        MaxSize=fleet_size + 5, DesiredCapacity=fleet_size, AvailabilityZones=[f"{region}a"],
        NewInstancesProtectedFromScaleIn=True,
        Tags=[{"Key": "mlfleet:environment", "Value": "dev", "PropagateAtLaunch": True}])
    ecs.create_cluster(clusterName=CLUSTER)
    fleet = [i["InstanceId"] for i in asg.describe_auto_scaling_groups()["AutoScalingGroups"][0]["Instances"]]
    for instance_id in fleet:
        ecs.register_container_instance(cluster=CLUSTER, instanceIdentityDocument=json.dumps(
            {"instanceId": instance_id, "region": region, "availabilityZone": f"{region}a"}))
    loose = []
    if standalone:
        reservation = ec2.run_instances(ImageId="ami-12c6146b", InstanceType="g5.xlarge", MinCount=standalone,
                                        MaxCount=standalone, TagSpecifications=[{"ResourceType": "instance",
                                        "Tags": [{"Key": "mlfleet:environment", "Value": "dev"}]}])
        loose = [i["InstanceId"] for i in reservation["Instances"]]
    return {"fleet": fleet, "standalone": loose, "topic": topic, "inbox": inbox}


def summaries(world: dict, region: str = REGION) -> list[str]:
    """The reaper summaries the alert topic delivered so far."""
    sqs = aws("sqs", region)
    messages = sqs.receive_message(QueueUrl=world["inbox"], MaxNumberOfMessages=10).get("Messages", [])
    return [json.loads(m["Body"])["Message"] for m in messages]


@functools.lru_cache(maxsize=None)
def aws(service: str, region: str = REGION):
    """The tests' own clients, made once per service and region: put_utilisation runs for every machine of
    every world built (the fault-injection tests build hundreds), and boto3.client() makes a new client from
    moto's new default session in each mock. A client holds no moto state: moto answers whichever mock is
    active. A test that registers on a client's events makes its own."""
    return boto3.session.Session().client(service, region_name=region)


def put_utilisation(instance_id: str, now: datetime, *, cpu: float, gpu: float | None, asg: str | None = ASG,
                    gap: bool = False, minutes: int = 60, region: str = REGION) -> None:
    cloudwatch = aws("cloudwatch", region)
    periods = window_periods(now, IdleSettings(minutes, 10, 5, 30))
    if gap:
        periods = periods[:-1]
    cloudwatch.put_metric_data(Namespace="AWS/EC2", MetricData=[
        {"MetricName": "CPUUtilization", "Dimensions": [{"Name": "InstanceId", "Value": instance_id}],
         "Timestamp": p + timedelta(seconds=PERIOD_SECONDS // 2), "Value": cpu} for p in periods])
    if gpu is not None:
        dims = [{"Name": "InstanceId", "Value": instance_id}] + ([{"Name": "AutoScalingGroupName", "Value": asg}] if asg else [])
        cloudwatch.put_metric_data(Namespace="CWAgent", MetricData=[
            {"MetricName": "nvidia_smi_utilization_gpu", "Dimensions": dims,
             "Timestamp": p + timedelta(seconds=PERIOD_SECONDS // 2), "Value": gpu} for p in periods])


def start_task_on(instance_id: str, region: str = REGION) -> None:
    ecs = aws("ecs", region)
    ecs.register_task_definition(family="mlfleet-dev-gpu-job", containerDefinitions=[
        {"name": "job", "image": "nvidia/cuda", "memory": 1024}])
    arns = ecs.list_container_instances(cluster=CLUSTER)["containerInstanceArns"]
    described = ecs.describe_container_instances(cluster=CLUSTER, containerInstances=arns)["containerInstances"]
    target = next(ci["containerInstanceArn"] for ci in described if ci["ec2InstanceId"] == instance_id)
    ecs.start_task(cluster=CLUSTER, taskDefinition="mlfleet-dev-gpu-job", containerInstances=[target])


def tags_of(instance_id: str, region: str = REGION) -> dict[str, str]:
    raw = aws("ec2", region).describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0]
    return {t["Key"]: t["Value"] for t in raw.get("Tags", [])}


@pytest.fixture
def world(fleet_aws):
    world = build_world()
    settings = Settings(**{**SETTINGS.__dict__, "alert_topic_arn": world["topic"]})
    now = datetime.now(timezone.utc) + timedelta(hours=3)
    idle, busy_task, busy_cpu, gap, kept = world["fleet"]
    (loose,) = world["standalone"]
    for instance_id in (idle, busy_task, kept):
        put_utilisation(instance_id, now, cpu=2, gpu=0)
    put_utilisation(busy_cpu, now, cpu=55, gpu=0)
    put_utilisation(gap, now, cpu=1, gpu=0, gap=True)
    put_utilisation(loose, now, cpu=1, gpu=1, asg=None)
    start_task_on(busy_task)
    aws("ec2", REGION).create_tags(Resources=[kept], Tags=[{"Key": "mlfleet:keep-alive", "Value": "true"}])
    return {"settings": settings, "now": now, "idle": idle, "busy": [busy_task, busy_cpu, gap], "kept": kept,
            "loose": loose, "inbox": world["inbox"]}


def test_first_run_marks_exactly_the_idle_instances(world):
    result = run(world["settings"], world["now"])
    assert sorted(result["decisions"]["mark"]) == sorted([world["idle"], world["loose"]])
    assert "mlfleet:idle-since" in tags_of(world["idle"]) and "mlfleet:idle-since" in tags_of(world["loose"])
    for other in (*world["busy"], world["kept"]):
        assert "mlfleet:idle-since" not in tags_of(other)
    assert result["decisions"]["spare"] == [world["kept"]]


def test_run_after_grace_drains_and_terminates_the_idle_fleet_instance_and_stops_the_standalone(world):
    settings = world["settings"]
    run(settings, world["now"])
    later = world["now"] + timedelta(minutes=35)
    for instance_id in (world["idle"], *world["busy"], world["kept"]):
        put_utilisation(instance_id, later, cpu=2 if instance_id != world["busy"][1] else 55, gpu=0)
    put_utilisation(world["loose"], later, cpu=1, gpu=1, asg=None)
    put_utilisation(world["busy"][2], later, cpu=1, gpu=0, gap=True)
    result = run(settings, later)
    assert result["decisions"]["reap-fleet"] == [world["idle"]]
    assert result["decisions"]["stop-standalone"] == [world["loose"]]
    assert result["terminated"] == [world["idle"]]

    group = aws("autoscaling", REGION).describe_auto_scaling_groups()["AutoScalingGroups"][0]
    assert group["DesiredCapacity"] == 4, "the group shrinks instead of replacing the reaped instance"
    assert world["idle"] not in {i["InstanceId"] for i in group["Instances"]}
    ecs = aws("ecs", REGION)
    arns = ecs.list_container_instances(cluster=CLUSTER)["containerInstanceArns"]
    states = {ci["ec2InstanceId"]: ci["status"] for ci in
              ecs.describe_container_instances(cluster=CLUSTER, containerInstances=arns)["containerInstances"]}
    assert states[world["idle"]] == "DRAINING"
    assert all(states[i] == "ACTIVE" for i in world["busy"])
    ec2 = aws("ec2", REGION)
    state = ec2.describe_instances(InstanceIds=[world["loose"]])["Reservations"][0]["Instances"][0]["State"]["Name"]
    assert state in ("stopping", "stopped")


def test_the_run_summary_reaches_slack_as_a_chatbot_notification_and_e_mail_as_text(world, monkeypatch):
    # The reaper published plain text, which AWS Chatbot (the alert topic's Slack subscription, over HTTPS)
    # drops. moto delivers nothing to e-mail: its text is the published message's "email" key
    # (tests/alert_delivery.py says where else moto differs from AWS).
    slack = subscribe_chatbot(world["settings"].alert_topic_arn, monkeypatch)
    run(world["settings"], world["now"])
    (posted,) = slack
    notification = chatbot_notification(posted)
    assert notification["content"]["title"] == "mlfleet dev reaper: 2 marked idle, 0 reaped"
    assert world["idle"] in notification["content"]["description"]
    ((subject, message),) = published(world["settings"].alert_topic_arn)
    assert subject == notification["content"]["title"] and subject_problems(subject) == []
    assert message["email"] == message["default"] == notification["content"]["description"]
    assert summaries(world) == [message["default"]]  # the queue, like every other protocol: the text


def test_a_run_that_changes_nothing_mails_no_summary(world):
    # README.md: a run mails a summary only when it marks, unmarks, removes or stops a machine, or fails to;
    # a reaper every 10 minutes mailing "nothing happened" would teach people to ignore its mail.
    run(world["settings"], world["now"])
    assert len(summaries(world)) == 1
    result = run(world["settings"], world["now"])  # the marks are inside their grace: the run only waits
    assert set(result["decisions"]) == {"wait-grace", "busy", "spare"}
    assert summaries(world) == []

def test_dry_run_changes_nothing(world):
    settings = Settings(**{**world["settings"].__dict__, "dry_run": True})
    result = run(settings, world["now"])
    assert result["dry_run"] and world["idle"] in result["decisions"]["mark"]
    assert "mlfleet:idle-since" not in tags_of(world["idle"])


def test_busy_again_removes_the_mark(world):
    settings = world["settings"]
    run(settings, world["now"])
    later = world["now"] + timedelta(minutes=10)
    put_utilisation(world["idle"], later, cpu=90, gpu=70)
    result = run(settings, later)
    assert world["idle"] in result["decisions"]["unmark"]
    assert "mlfleet:idle-since" not in tags_of(world["idle"])


def test_lifecycle_and_reaper_counts_are_published(world):
    run(world["settings"], world["now"])
    cloudwatch = aws("cloudwatch", REGION)
    names = {m["MetricName"] for m in cloudwatch.list_metrics(Namespace="mlfleet")["Metrics"]}
    assert names == {"FleetInstances", "IdleMarkedInstances", "ReapedInstances"}


def test_a_machine_whose_gpu_a_sharing_job_holds_is_busy_while_the_job_runs(fleet_aws):
    # GPU sharing (ECS nvidiaMps) changes nothing in the reaper's contract: a job sharing the GPU is an ECS
    # task, so the machine is busy while it runs, even with its CPU and GPU quiet (a served model waiting
    # for requests); a quiet machine without one is marked (test_first_run_marks_exactly_the_idle_instances).
    world = build_world(fleet_size=1, standalone=0)
    settings = Settings(**{**SETTINGS.__dict__, "alert_topic_arn": world["topic"]})
    now = datetime.now(timezone.utc) + timedelta(hours=3)
    (instance_id,) = world["fleet"]
    put_utilisation(instance_id, now, cpu=1, gpu=0)
    ecs = aws("ecs", REGION)
    ecs.register_task_definition(family="mlfleet-dev-gpu-job", containerDefinitions=[
        {"name": "job", "image": "nvidia/cuda", "memory": 1024,
         "resourceRequirements": [{"type": "GPU", "sharingStrategy": {"nvidiaMps": {"memory": 4000}}}]}])
    (target,) = ecs.list_container_instances(cluster=CLUSTER)["containerInstanceArns"]
    ecs.start_task(cluster=CLUSTER, taskDefinition="mlfleet-dev-gpu-job", containerInstances=[target])
    busy = run(settings, now)
    assert busy["decisions"].get("mark", []) == [] and busy["decisions"]["busy"] == [instance_id]
    assert "mlfleet:idle-since" not in tags_of(instance_id)


def test_a_removal_in_flight_of_a_machine_busy_again_by_its_utilisation_is_kept_not_finished(fleet_aws):
    # A run cut short leaves its removal tagged and drained; the next run resumed it and re-checked tasks, jobs
    # and keep-alives only, so a machine whose CPU had risen since was terminated by the same run whose decision
    # line said "busy: CPU peaked at 55%" (found by tests/reaper/test_reaper_properties.py). It is kept now.
    world = build_world(fleet_size=2, standalone=0)
    settings = Settings(**{**SETTINGS.__dict__, "alert_topic_arn": world["topic"]})
    now = datetime.now(timezone.utc) + timedelta(hours=3)
    busy, other = world["fleet"]
    put_utilisation(busy, now, cpu=55, gpu=0)
    put_utilisation(other, now, cpu=55, gpu=0)
    aws("ec2", REGION).create_tags(Resources=[busy], Tags=[
        {"Key": "mlfleet:removing", "Value": f"idle@{(now - timedelta(minutes=15)).isoformat(timespec='seconds')}"}])
    ecs = aws("ecs", REGION)
    arns = ecs.list_container_instances(cluster=CLUSTER)["containerInstanceArns"]
    arn = next(ci["containerInstanceArn"] for ci in ecs.describe_container_instances(
        cluster=CLUSTER, containerInstances=arns)["containerInstances"] if ci["ec2InstanceId"] == busy)
    ecs.update_container_instances_state(cluster=CLUSTER, containerInstances=[arn], status="DRAINING")

    result = run(settings, now)
    assert result["decisions"]["busy"] == sorted([busy, other]) and result["terminated"] == []
    assert busy in result["kept"] and "CPU peaked at 55.0%" in result["kept"][busy]
    state = aws("ec2", REGION).describe_instances(InstanceIds=[busy])["Reservations"][0]["Instances"][0]
    assert state["State"]["Name"] == "running" and "mlfleet:removing" not in tags_of(busy)
    assert ecs.describe_container_instances(cluster=CLUSTER, containerInstances=[arn])["containerInstances"][0][
        "status"] == "ACTIVE"
