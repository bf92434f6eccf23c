"""The suite's shortcuts through moto and botocore (tests/moto_shortcuts.py) do what they do without them:
- DynamoDB answers: compared on every kind of value the shortcut takes, on a ledger record as the functions
  write it, and through moto's backend;
- the names a member is looked up under: the kept names against moto's own, at every lookup of a scenario
  over the services the functions call, and for models whose class changes them;
- an action's method: every response class of the services the suite calls (and their bases), asked about
  every name it has, every action of four services' models and names it must refuse;
- a service's client class and model: the kept ones against ones botocore makes afresh, the model after
  clients have called the service."""

from __future__ import annotations

import json
from pathlib import Path

import boto3
import pytest
from hypothesis import given
from hypothesis import strategies as st
from moto import mock_aws
from moto.core.utils import get_service_model
from moto.core.serialize import AttributePicker, AttributePickerContext, BaseJSONSerializer, XFormedAttributePicker, get_serializer_class
from moto_shortcuts import (ORIGINAL_CLIENT_CLASS, ORIGINAL_PICK, ORIGINAL_STRUCTURE, POSSIBLE_KEYS, FunctionNames, alias_signature, dynamodb_json, pick,
                            serialize_structure)

from lambdas.common.catalog import load_catalog
from lambdas.jobs import ledger as L
from lambdas.jobs.spec import assign_ids, parse_spec

QUERY = get_service_model("dynamodb").operation_model("Query")
numbers = st.one_of(st.integers(), st.floats(allow_nan=False, allow_infinity=False)).map(str)
scalars = st.one_of(st.builds(lambda s: {"S": s}, st.text(max_size=8)), st.builds(lambda n: {"N": n}, numbers),
                    st.builds(lambda b: {"BOOL": b}, st.booleans()), st.just({"NULL": True}),
                    st.builds(lambda s: {"SS": s}, st.lists(st.text(max_size=4), min_size=1, max_size=3, unique=True)),
                    st.builds(lambda n: {"NS": n}, st.lists(numbers, min_size=1, max_size=3, unique=True)))
values = st.recursive(scalars, lambda inner: st.one_of(
    st.builds(lambda m: {"M": m}, st.dictionaries(st.text(min_size=1, max_size=6), inner, max_size=4)),
    st.builds(lambda items: {"L": items}, st.lists(inner, max_size=4))), max_leaves=20)


def written(items: list[dict], structure=serialize_structure) -> str:
    """A Query answer holding `items`, as moto's DynamoDB serializer writes it with `structure`."""
    serializer = get_serializer_class("dynamodb", "json")(operation_model=QUERY, value_picker=XFormedAttributePicker())
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(BaseJSONSerializer, "_serialize_type_structure", structure)
        return serializer.serialize({"Items": items, "Count": len(items), "ScannedCount": len(items)})["body"]


@given(st.dictionaries(st.text(min_size=1, max_size=6), values, min_size=1, max_size=4))
def test_any_value_the_shortcut_takes_is_written_as_moto_writes_it(item):
    assert all(dynamodb_json(value) is not None for value in item.values())
    assert written([item]) == written([item], ORIGINAL_STRUCTURE)


@pytest.mark.parametrize("value", [{"B": "aGk="}, {"BS": ["aGk="]}, {"M": {"a": {"B": "aGk="}}}, {"S": 3}, {"S": "a", "N": "1"},
                                   {"M": {"": {"S": "x"}}}],
                         ids=["binary", "binary-set", "binary-in-a-map", "not-a-string", "two-members", "empty-key"])
def test_what_the_shortcut_does_not_take_goes_through_moto_s_serializer(value):
    assert dynamodb_json(value) is None
    assert written([{"a": value}]) == written([{"a": value}], ORIGINAL_STRUCTURE)


def ledger_record() -> L.JobRecord:
    spec = parse_spec({"image": "ghcr.io/team/train:7", "command": ["python", "train.py"], "gpus": 1, "vcpus": 4,
                       "memory_mib": 16384, "environment": {"EPOCHS": "3"}, "expected_runtime_s": 5400, "checkpoint_interval_minutes": 30},
                      fleet_regions=("us-east-1",), catalog=load_catalog(), default_max_attempts=3, environment="dev")
    job = assign_ids("sub-20261122115000-f00d00", [spec])[0]
    record = L.new_record(job, 1_764_000_000.25, owner="ana")
    return L.JobRecord(**{**vars(record), "state": L.RUNNING, "attempt": 1, "runs": 1,
                          "placement": L.Placement("us-east-1", "gpu1", "mlfleet-dev", "arn:ci", "i-0abc", "g5.xlarge",
                                                   "arn:task"),
                          "reasons": ({"state": L.RUNNING, "at": 1_764_000_100.5, "reason": "task running"},)})


def test_a_ledger_record_takes_the_shortcut_and_reads_back_the_same_through_moto():
    item = L.encode(ledger_record())
    assert all(dynamodb_json(value) is not None for value in item.values()), "the shortcut would not apply"
    answers = []
    for structure in (serialize_structure, ORIGINAL_STRUCTURE):
        with mock_aws(), pytest.MonkeyPatch.context() as patch:
            patch.setattr(BaseJSONSerializer, "_serialize_type_structure", structure)
            dynamodb = boto3.client("dynamodb", "us-east-1")
            dynamodb.create_table(TableName="t", BillingMode="PAY_PER_REQUEST",
                                  KeySchema=[{"AttributeName": "job_id", "KeyType": "HASH"}],
                                  AttributeDefinitions=[{"AttributeName": "job_id", "AttributeType": "S"}])
            dynamodb.put_item(TableName="t", Item=item)
            answers.append(dynamodb.query(TableName="t", KeyConditionExpression="job_id = :j",
                                          ExpressionAttributeValues={":j": item["job_id"]})["Items"])
    assert answers[0] == answers[1] == [item]
    assert L.decode(answers[0][0]) == ledger_record()


def a_scenario_over_the_services_the_functions_call() -> None:
    """Calls whose answers hold the structures the suite's moto tests read: instances, spot requests, groups,
    clusters, container instances, tasks, alarms, queues, topics, parameters, roles and rules."""
    ec2 = boto3.client("ec2", "us-east-1")
    image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    template = ec2.create_launch_template(LaunchTemplateName="gpu1-lt", LaunchTemplateData={
        "ImageId": image, "InstanceType": "g5.xlarge", "MetadataOptions": {"HttpTokens": "required"}})
    ec2.run_instances(ImageId=image, InstanceType="g5.xlarge", MinCount=2, MaxCount=2,
                      TagSpecifications=[{"ResourceType": "instance", "Tags": [{"Key": "mlfleet:fleet", "Value": "gpu1"}]}])
    ec2.request_spot_instances(InstanceCount=1, LaunchSpecification={"ImageId": image, "InstanceType": "g4dn.xlarge"})
    ec2.describe_instances()
    ec2.describe_spot_instance_requests()
    ec2.describe_launch_template_versions(LaunchTemplateId=template["LaunchTemplate"]["LaunchTemplateId"])
    ec2.describe_tags()
    subnet = ec2.describe_subnets()["Subnets"][0]["SubnetId"]
    autoscaling = boto3.client("autoscaling", "us-east-1")
    autoscaling.create_auto_scaling_group(
        AutoScalingGroupName="g", MinSize=0, MaxSize=3, DesiredCapacity=1, VPCZoneIdentifier=subnet,
        MixedInstancesPolicy={"LaunchTemplate": {"LaunchTemplateSpecification": {"LaunchTemplateName": "gpu1-lt", "Version": "$Latest"},
                                                 "Overrides": [{"InstanceType": "g5.xlarge"}, {"InstanceType": "g4dn.xlarge"}]},
                              "InstancesDistribution": {"OnDemandPercentageAboveBaseCapacity": 0}},
        Tags=[{"Key": "mlfleet:fleet", "Value": "gpu1", "PropagateAtLaunch": True}])
    autoscaling.describe_auto_scaling_groups()
    autoscaling.describe_auto_scaling_instances()
    ecs = boto3.client("ecs", "us-east-1")
    ecs.create_cluster(clusterName="c")
    ecs.register_task_definition(family="job", containerDefinitions=[{"name": "job", "image": "i", "memory": 512,
                                                                      "resourceRequirements": [{"type": "GPU", "value": "1"}]}])
    instance = ec2.describe_instances()["Reservations"][0]["Instances"][0]
    document = {"instanceId": instance["InstanceId"], "region": "us-east-1", "availabilityZone": "us-east-1a"}
    ecs.register_container_instance(cluster="c", instanceIdentityDocument=json.dumps(document),
                                    totalResources=[{"name": "CPU", "type": "INTEGER", "integerValue": 4096},
                                                    {"name": "MEMORY", "type": "INTEGER", "integerValue": 16000}])
    arns = ecs.list_container_instances(cluster="c")["containerInstanceArns"]
    ecs.describe_container_instances(cluster="c", containerInstances=arns)
    ecs.start_task(cluster="c", taskDefinition="job", containerInstances=arns)
    ecs.describe_tasks(cluster="c", tasks=ecs.list_tasks(cluster="c")["taskArns"])
    ecs.describe_clusters(clusters=["c"], include=["STATISTICS", "TAGS"])
    cloudwatch = boto3.client("cloudwatch", "us-east-1")
    cloudwatch.put_metric_alarm(AlarmName="a", MetricName="GPUUtilization", Namespace="mlfleet", Statistic="Maximum",
                                Period=300, EvaluationPeriods=3, Threshold=5, ComparisonOperator="LessThanThreshold",
                                Dimensions=[{"Name": "InstanceId", "Value": instance["InstanceId"]}])
    cloudwatch.describe_alarms()
    sqs = boto3.client("sqs", "us-east-1")
    queue = sqs.create_queue(QueueName="q")["QueueUrl"]
    sqs.send_message(QueueUrl=queue, MessageBody="{}")
    sqs.receive_message(QueueUrl=queue, AttributeNames=["All"], MessageAttributeNames=["All"])
    sns = boto3.client("sns", "us-east-1")
    sns.create_topic(Name="t")
    sns.list_topics()
    ssm = boto3.client("ssm", "us-east-1")
    ssm.put_parameter(Name="/p", Value="v", Type="String")
    ssm.get_parameters(Names=["/p"])
    iam = boto3.client("iam", "us-east-1")
    iam.create_role(RoleName="r", AssumeRolePolicyDocument="{}")
    iam.list_roles()
    events = boto3.client("events", "us-east-1")
    events.put_rule(Name="r", ScheduleExpression="rate(1 minute)")
    events.list_rules()


def test_every_member_of_every_answer_is_looked_up_under_the_names_moto_would_try():
    kinds, lookups = set(), 0

    def both(self, context):
        nonlocal lookups
        value = ORIGINAL_PICK(self, context)
        # Equal, or of one class: some of moto's models build a new object at each read (Instance.block_device_mappings).
        assert (shortcut := pick(self, context)) == value or type(shortcut) is type(value), context.key
        signature = alias_signature(self, context)
        assert POSSIBLE_KEYS[signature] == tuple(self.get_possible_keys(context)), signature
        kinds.add(signature)
        lookups += 1
        return value

    with mock_aws(), pytest.MonkeyPatch.context() as patch:
        patch.setattr(AttributePicker, "__call__", both)
        a_scenario_over_the_services_the_functions_call()
    assert len(kinds) > 500 and lookups > 2 * len(kinds), "most kinds of member are looked up more than once"


class Db:
    """A model whose attribute drops its class's name from the member's (moto's ClassPrefixAlias)."""
    identifier = "db-1"


class Aliased:
    """A model that names its attribute for a member itself (moto's ExplicitAlias)."""
    class Meta:
        serialization_aliases = {"DbIdentifier": "name"}
    name = "db-2"


def test_the_names_depend_on_the_object_s_class():
    picker = XFormedAttributePicker()
    looked_up = [pick(picker, AttributePickerContext(obj=obj, key="DbIdentifier", shape=None,
                                                     service_model=get_service_model("rds")))
                 for obj in ({"DbIdentifier": "db-0"}, Db(), Aliased(), {"DbIdentifier": "db-3"})]
    assert looked_up == ["db-0", "db-1", "db-2", "db-3"]


def response_classes() -> set[type]:
    """Every response class of the services the suite's moto tests call, and of their bases."""
    import importlib

    from moto.core.responses import BaseResponse
    for service in ("ec2", "ecs", "autoscaling", "cloudwatch", "sqs", "dynamodb", "sns", "events", "ssm", "iam",
                    "awslambda", "budgets", "sts", "s3", "ce"):
        importlib.import_module(f"moto.{service}.responses")
    found, todo = set(), [BaseResponse]
    while todo:
        cls = todo.pop()
        found.add(cls)
        todo.extend(set(cls.__subclasses__()) - found)
    return found


def test_an_action_s_method_is_found_as_moto_finds_it():
    from moto.core.utils import camelcase_to_underscores, method_names_from_class
    classes = response_classes()
    assert len(classes) > 20
    for cls in classes:
        names = method_names_from_class(cls)
        actions = {camelcase_to_underscores(name) for service in ("ec2", "ecs", "sqs", "dynamodb")
                   for name in get_service_model(service).operation_names}
        for name in set(dir(cls)) | actions | {"", "no_such_action", "mro", "__init_subclass__", "Meta"}:
            assert (name in FunctionNames(cls)) == (name in names), (cls, name)


@pytest.mark.parametrize("service", ["ec2", "ecs", "dynamodb", "s3"])
def test_a_service_s_client_class_is_made_once_and_is_what_botocore_makes(service):
    import boto3.session
    from botocore.client import ClientCreator

    first, second = (boto3.session.Session().client(service, "us-east-1") for _ in range(2))
    assert type(first) is type(second), "each session's client of a service has the kept class"
    events = boto3.session.Session()._session.get_component("event_emitter")  # a new session's handlers
    fresh = ORIGINAL_CLIENT_CLASS(ClientCreator(None, None, None, events, None, None), service, first.meta.service_model)
    assert fresh is not type(first)
    assert (fresh.__name__, fresh.__bases__) == (type(first).__name__, type(first).__bases__)
    assert set(vars(fresh)) == set(vars(type(first))), "the same methods, the handlers' additions among them"


def operation_facts(model, name: str) -> tuple:
    """What a client reads of an operation's model: its HTTP binding, flags and every shape it sends and reads."""
    operation = model.operation_model(name)

    def shape(s, depth=0):
        if s is None or depth > 3:
            return None if s is None else s.name
        members = getattr(s, "members", None)
        return (s.name, s.type_name, s.serialization, s.metadata, None if members is None else
                tuple((key, shape(member, depth + 1)) for key, member in members.items()))

    return (operation.http, operation.metadata, operation.endpoint_discovery, operation.is_endpoint_discovery_operation,
            operation.auth_type, operation.context_parameters, operation.static_context_parameters,
            shape(operation.input_shape), shape(operation.output_shape), [e.name for e in operation.error_shapes])


CALLS = {"ec2": ("describe_instances", {}), "ecs": ("list_clusters", {}), "dynamodb": ("list_tables", {}),
         "s3": ("list_buckets", {})}


def model_as_shipped(service: str):
    """The service's model as botocore ships it, read past every cache of the suite: its file, and the
    extras botocore merges into it (service-2.sdk-extras.json)."""
    import botocore.loaders
    from botocore.model import ServiceModel

    loader = botocore.loaders.Loader()
    version = loader.determine_latest_version(service, "service-2")
    base = Path(botocore.loaders.__file__).parent / "data" / service / version / "service-2"
    model = botocore.loaders.JSONFileLoader().load_file(str(base))
    botocore.loaders.ExtrasProcessor().process(model, list(loader._find_extras(service, "service-2", version)))
    return ServiceModel(model, service_name=service)


@pytest.mark.parametrize("service", ["ec2", "ecs", "dynamodb", "s3"])
def test_a_service_s_model_is_made_once_and_is_what_botocore_ships(service):
    """Also: moto's own extras to a model (moto/core/loaders.py; S3's PostObject among others) stay out of it,
    whichever loaded the model first."""
    import boto3.session

    with mock_aws():  # moto loads its models, and clients call the service: neither changes the kept model
        first, second = (boto3.session.Session().client(service, "us-east-1") for _ in range(2))
        for client in (first, second):
            getattr(client, CALLS[service][0])(**CALLS[service][1])
    kept = first.meta.service_model
    assert second.meta.service_model is kept, "each client of a service has the kept model"
    shipped = model_as_shipped(service)
    assert (shipped.metadata, shipped.operation_names, shipped.signature_version) == \
        (kept.metadata, kept.operation_names, kept.signature_version)
    assert getattr(shipped.endpoint_discovery_operation, "name", None) == \
        getattr(kept.endpoint_discovery_operation, "name", None)
    for name in shipped.operation_names:
        assert operation_facts(shipped, name) == operation_facts(kept, name), name
