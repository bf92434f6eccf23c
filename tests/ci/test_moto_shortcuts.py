"""The suite's shortcut through moto's DynamoDB answers (tests/moto_shortcuts.py) writes what moto's own
serializer writes: compared on every kind of value the shortcut takes, on a ledger record as the functions
write it, and through moto's backend."""

from __future__ import annotations

import boto3
import pytest
from hypothesis import given
from hypothesis import strategies as st
from moto import mock_aws
from moto.core.utils import get_service_model
from moto.core.serialize import BaseJSONSerializer, XFormedAttributePicker, get_serializer_class
from moto_shortcuts import ORIGINAL_STRUCTURE, dynamodb_json, serialize_structure

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
