"""The circuit breaker's memory of degraded machines is one item of the job ledger (lambdas/scheduler/fleet_health.py
read, write), against moto's DynamoDB: a put conditional on the version read, which merges when another run
wrote first, and an entry written by hand or by another version dropped on reading."""

from __future__ import annotations

import boto3
from conftest import HOME, TABLE

from lambdas.scheduler import fleet_health as fh

KEY = (HOME, "gpu1")


def memory(*sightings, opened=None, closed=None):
    return {KEY: fh.FleetMemory(tuple(fh.Sighting(*s) for s in sightings), opened, closed)}


def test_a_put_that_loses_to_another_run_merges_and_keeps_both_runs_sightings(home):
    dynamodb = boto3.client("dynamodb", HOME)
    assert fh.read(dynamodb, TABLE) == fh.Kept({}, 0)
    assert fh.write(dynamodb, TABLE, memory((100.0, "i-a", "x")), 0, 100.0)
    assert fh.read(dynamodb, TABLE).version == 1

    # Another run wrote since this one read (version 1 -> 2); this one still holds version 1.
    assert fh.write(dynamodb, TABLE, memory((100.0, "i-a", "x"), (200.0, "i-b", "y"), opened=200.0), 1, 200.0)
    assert fh.write(dynamodb, TABLE, memory((90.0, "i-a", "z"), (150.0, "i-c", "w")), 1, 150.0)

    kept = fh.read(dynamodb, TABLE)
    assert kept.version == 3
    assert kept.memory == memory((90.0, "i-a", "z"), (150.0, "i-c", "w"), (200.0, "i-b", "y"), opened=200.0)


def test_a_put_from_a_run_that_could_not_read_the_item_replaces_nothing(home):
    dynamodb = boto3.client("dynamodb", HOME)
    assert fh.write(dynamodb, TABLE, memory((100.0, "i-a", "x")), 0, 100.0)

    # Version 0: what a run that could not read the item holds. Its put loses, and merges.
    assert fh.write(dynamodb, TABLE, memory((150.0, "i-b", "y")), 0, 150.0)

    assert fh.read(dynamodb, TABLE) == fh.Kept(memory((100.0, "i-a", "x"), (150.0, "i-b", "y")), 2)


def test_an_entry_written_by_hand_is_dropped_and_the_rest_read(home):
    dynamodb = boto3.client("dynamodb", HOME)
    dynamodb.put_item(TableName=TABLE, Item={"job_id": {"S": fh.KEY}, "fleets": {"M": {HOME: {"M": {
        "gpu1": {"M": {"machines": {"M": {"i-a": {"M": {"at": {"N": "100"}, "why": {"S": "x"}}},
                                          "i-b": {"M": {"when": {"S": "yesterday"}}}}}}},
        "small": {"M": {"opened_at": {"S": "now"}}}}}}}})

    assert fh.read(dynamodb, TABLE) == fh.Kept(memory((100.0, "i-a", "x")), 0)
