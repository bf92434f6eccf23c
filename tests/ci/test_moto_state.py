"""A world kept with tests/moto_state.py and put back in a fresh moto is the world that was built: every
service the fault matrices' worlds use answers the same, the copy is independent of what a test then does to
it, and moto still resets it when the mock stops."""

from __future__ import annotations

import json

import boto3
import moto_state
import pytest
from moto import mock_aws
from removal.world import CLUSTER, FLEET_REGION, HOME, TABLE, build, place_job_in_ledger, start_task_on

from lambdas.common import aws as function_aws


@pytest.fixture
def fresh_moto(monkeypatch):
    monkeypatch.setenv("MOTO_EC2_LOAD_DEFAULT_AMIS", "false")
    return mock_aws


def client(service: str, region: str = FLEET_REGION):
    return boto3.session.Session().client(service, region_name=region)


def world() -> dict:
    """Every service the functions call, each holding something."""
    built = build(size=3, spot=True)
    start_task_on(built, built.ids[0])
    client("ecs").stop_task(cluster=CLUSTER, task=start_task_on(built, built.ids[1]), reason="ended")
    place_job_in_ledger("sub-20261122120000-abcdef-00001", built.ids[2])
    client("ec2").create_tags(Resources=[built.ids[2]], Tags=[{"Key": "mlfleet:removing", "Value": "idle@x"}])
    queue = client("sqs", HOME).create_queue(QueueName="jobs")["QueueUrl"]
    client("sqs", HOME).send_message(QueueUrl=queue, MessageBody="{}")
    client("ssm", HOME).put_parameter(Name="/mlfleet/dev/admission", Value="open", Type="String")
    client("sns", HOME).create_topic(Name="alerts")
    client("s3", HOME).create_bucket(Bucket="checkpoints")
    client("s3", HOME).put_object(Bucket="checkpoints", Key="a/step-1.pt", Body=b"x")
    client("cloudwatch").put_metric_data(Namespace="mlfleet", MetricData=[{"MetricName": "m", "Value": 1.0}])
    return {"instances": built.instances, "queue": queue}


def described(kept: dict) -> str:
    """What each service answers about the world, as one text."""
    ecs, ec2 = client("ecs"), client("ec2")
    instances = ec2.describe_instances()["Reservations"]
    arns = ecs.list_container_instances(cluster=CLUSTER)["containerInstanceArns"]
    tasks = [arn for status in ("RUNNING", "STOPPED")
             for arn in ecs.list_tasks(cluster=CLUSTER, desiredStatus=status)["taskArns"]]
    answers = {
        "instances": instances,
        "spot": ec2.describe_spot_instance_requests()["SpotInstanceRequests"],
        "groups": client("autoscaling").describe_auto_scaling_groups()["AutoScalingGroups"],
        "container instances": ecs.describe_container_instances(cluster=CLUSTER, containerInstances=arns),
        "tasks": ecs.describe_tasks(cluster=CLUSTER, tasks=tasks)["tasks"],
        "ledger": client("dynamodb", HOME).scan(TableName=TABLE)["Items"],
        "queue": client("sqs", HOME).get_queue_attributes(QueueUrl=kept["queue"], AttributeNames=["All"]),
        "parameter": client("ssm", HOME).get_parameter(Name="/mlfleet/dev/admission")["Parameter"]["Value"],
        "topics": client("sns", HOME).list_topics()["Topics"],
        "objects": [o["Key"] for o in client("s3", HOME).list_objects_v2(Bucket="checkpoints")["Contents"]],
        "metrics": client("cloudwatch").list_metrics(Namespace="mlfleet")["Metrics"],
    }
    for answer in answers.values():
        if isinstance(answer, dict):
            answer.pop("ResponseMetadata", None)
    # Times moto stamps from the wall clock when asked (a queue's attributes) are left out.
    answers["queue"]["Attributes"].pop("LastModifiedTimestamp", None)
    return json.dumps(answers, sort_keys=True, default=str)


def test_a_world_put_back_answers_as_the_world_built(fresh_moto):
    with fresh_moto():
        kept_world = world()
        kept = moto_state.keep(kept_world)
        built = described(kept_world)  # after keep(): moto moves a task's status on at each DescribeTasks
    with fresh_moto():
        assert moto_state.put_back(kept) == kept_world
        assert described(kept_world) == built
        # What a test does to its copy stays in it.
        client("ec2").terminate_instances(InstanceIds=list(kept_world["instances"]))
        client("dynamodb", HOME).delete_table(TableName=TABLE)
    with fresh_moto():
        moto_state.put_back(kept)
        assert described(kept_world) == built
    with fresh_moto():  # reset when the mock stopped, as a world built in it would be
        assert client("ec2").describe_instances()["Reservations"] == []
        assert client("dynamodb", HOME).list_tables()["TableNames"] == []


def test_a_put_back_forgets_the_task_arns_the_functions_saw_stopped():
    function_aws._stopped_seen.add("arn:aws:ecs:us-west-2:123456789012:task/mlfleet-dev/0")
    with mock_aws():
        kept = moto_state.keep()
    with mock_aws():
        moto_state.put_back(kept)
    assert function_aws._stopped_seen == set()
