"""The job ledger: one DynamoDB item per job, the source of truth for where every job is.

Table (name in JOBS_TABLE, `mlfleet-<env>-jobs`): partition key `job_id` (S); GSI `by-state`
(`state` S, `submitted_at` N) lists pending/running jobs in submission order; GSI `by-submission`
(`submission_id` S, `job_id` S) lists a submission. Both indexes project ALL attributes.
The table holds one item that is not a job, the placement lease (lambdas/common/lease.py): its key
is no job id and it has no `state` or `submission_id`, so no index lists it and `get` ignores it.

Every write is conditional. A new job is put with attribute_not_exists(job_id); every state change is a
read-modify-write guarded by the item's `version`, and only the changes in TRANSITIONS are possible, so
two writers (a twice-delivered message, a late event, a cancel racing the scheduler) can never both
win, and replaying a change that already happened changes nothing.

`attempt` counts claims: QUEUED(attempt n) -> STARTING(attempt n+1) is the only increment, so a
(job, attempt) pair names at most one task. `runs` counts tasks actually started; a job has attempts
left while runs < max_attempts.

A submission's jobs are written in transactions of up to 100 conditional puts (`put_new_batch`):
BatchWriteItem cannot carry conditions, and TransactWriteItems needs only the PutItem permission of each
put (https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/transaction-apis-iam.html), so the
command's policy stays exactly what it was and a batch never overwrites a record.

What a job cost is recorded by the job-events function when a run ends (`cost`, lambdas/job_events);
`owner` is who submitted it; `notified_at` (on a submission's first job) says its end was announced.

An item the code cannot use (a missing or mistyped field, or one DynamoDB refuses to write back) never
stops a reader: `by_state` skips it and notes it in `undecodable`, `get` raises UndecodableRecord, and
the functions move it to QUARANTINED (`quarantine`), keeping every attribute and the reason, so it is
looked at once by a person (docs/runbook.md, "Quarantined jobs") instead of failed on every run.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any

from boto3.dynamodb.types import TypeDeserializer, TypeSerializer

from ..common.logs import quoted, shown
from ..common.permissions import needs
from .spec import Job, JobSpec, is_job_id, spec_from_document

QUEUED, STARTING, RUNNING = "QUEUED", "STARTING", "RUNNING"
SUCCEEDED, FAILED, CANCELLED = "SUCCEEDED", "FAILED", "CANCELLED"
# Parked for a person: the item could not be decoded or written; see Ledger.quarantine.
QUARANTINED = "QUARANTINED"
STATES = (QUEUED, STARTING, RUNNING, SUCCEEDED, FAILED, CANCELLED, QUARANTINED)
TERMINAL = frozenset({SUCCEEDED, FAILED, CANCELLED})
TRANSITIONS: Mapping[str, frozenset[str]] = {
    QUEUED: frozenset({STARTING, CANCELLED}),
    # STARTING -> QUEUED: StartTask failed, or a start was never confirmed. STARTING -> SUCCEEDED: a
    # short task's stop event arrived before the scheduler recorded it running.
    STARTING: frozenset({RUNNING, QUEUED, SUCCEEDED, FAILED, CANCELLED}),
    # RUNNING -> QUEUED: interrupted or failed with attempts left.
    RUNNING: frozenset({SUCCEEDED, FAILED, QUEUED, CANCELLED}),
    SUCCEEDED: frozenset(), FAILED: frozenset(), CANCELLED: frozenset(),
    # Only Ledger.quarantine enters it, from any state; only a person leaves it (docs/runbook.md).
    QUARANTINED: frozenset(),
}
MAX_REASONS = 20
# Where the end of a submission is announced (lambdas/job_events/submissions.py), each marked on its own.
NOTIFY_CHANNELS = ("email", "slack")
# A reason is one line for people; error texts are cut so twenty of them stay far below 400 KB.
MAX_REASON_CHARS = 1_000
BY_STATE, BY_SUBMISSION = "by-state", "by-submission"
# Sparse index of the queued jobs, by team: `queued_team` is written (by `encode`, so by every put) only
# while a job is QUEUED: its team, or NO_TEAM for a job of none. The scheduler reads each team's oldest from
# it, and those of no team and of teams no longer listed, so one team's backlog cannot hide another's jobs
# behind the oldest it reads (lambdas/scheduler/handler.py read_pending). GSIs are sparse: "only items in the
# base table that contain those attributes appear in the index"
# (https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/bp-indexes-general-sparse-indexes.html).
# NO_TEAM, not an empty string: string values "must have a length greater than zero if the attribute is used
# as a key attribute for a table or index" (botocore's DynamoDB model, PutItem Item); and no team can be
# named so (spec.TEAM_NAME starts with a letter).
BY_TEAM_QUEUED, QUEUED_TEAM, NO_TEAM = "by-team-queued", "queued_team", "#none"

TABLE_NAME = "mlfleet-{environment}-jobs"  # components/jobs ledger_name
TABLE_ARNS = ("arn:{partition}:dynamodb:{region}:{account}:table/" + TABLE_NAME,
              "arn:{partition}:dynamodb:{region}:{account}:table/" + TABLE_NAME + "/index/*")
READ_PERMISSIONS = (needs("dynamodb:GetItem", "dynamodb:Query", resources=TABLE_ARNS, why="read the job ledger"),)
WRITE_PERMISSIONS = (
    *READ_PERMISSIONS,
    needs("dynamodb:PutItem", resources=TABLE_ARNS[:1], why="record jobs and their state changes (conditional puts)"),
)
# What a user's cancel writes (Ledger.cancel): the IAM policy of the mlfleet command allows UpdateItem on
# these attributes only (dynamodb:Attributes names every attribute a request touches, the key included;
# https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/specifying-conditions.html).
CANCEL_ATTRIBUTES = ("job_id", "state", "updated_at", "version", "reasons", "reserved", QUEUED_TEAM)
# Every job id as an IAM pattern (lambdas/jobs/spec.py _JOB_ID: sub-<14 digits>-<6 hex>-<5 digits>). The
# table's other items (the placement lease, the teams' use) have keys no job id can take: users may not
# write them. IAM cannot require a write's condition expression: that the command's puts only create
# (attribute_not_exists) and its updates only cancel (version and state) is its code's, and the updates'
# attributes are bounded here too.
JOB_KEYS = "sub-" + "?" * 14 + "-" + "?" * 6 + "-" + "?" * 5
USER_PERMISSIONS = (
    *READ_PERMISSIONS,
    needs("dynamodb:PutItem", resources=TABLE_ARNS[:1],
          condition={"ForAllValues:StringLike": {"dynamodb:LeadingKeys": [JOB_KEYS]}},
          why="submit new jobs (the command puts only new items, and only job records)"),
    needs("dynamodb:UpdateItem", resources=TABLE_ARNS[:1],
          condition={"ForAllValues:StringEquals": {"dynamodb:Attributes": list(CANCEL_ATTRIBUTES)},
                     "ForAllValues:StringLike": {"dynamodb:LeadingKeys": [JOB_KEYS]},
                     "StringEqualsIfExists": {"dynamodb:ReturnValues": ["NONE", "UPDATED_OLD", "UPDATED_NEW"]}},
          why="cancel jobs: state, history and version, nothing else of a record"),
)
RESERVE_PERMISSIONS = (
    needs("dynamodb:UpdateItem", resources=TABLE_ARNS[:1],
          why="note the instance bought for a queued job (conditional update)"),
)
QUARANTINE_PERMISSIONS = (
    needs("dynamodb:UpdateItem", resources=TABLE_ARNS[:1],
          why="quarantine a job record the code cannot read or write back (conditional update)"),
)


# TransactWriteItems takes at most 100 actions and 4 MB in one call (DynamoDB API reference, TransactWriteItems;
# botocore's dynamodb model caps TransactItems at 100). Batches stay below both.
TRANSACTION_ITEMS = 100
TRANSACTION_BYTES = 3_500_000


class IllegalTransition(ValueError):
    pass


class DuplicateJob(Exception):
    """A job id of a new submission is already in the ledger; nothing of its transaction was written."""

    def __init__(self, job_id: str):
        self.job_id = job_id
        super().__init__(f"job {job_id} already exists in the ledger")


class DecodeError(ValueError):
    """A ledger item that is not a job record this code can use (names the field)."""


@dataclass(frozen=True)
class Undecodable:
    """A ledger item as DynamoDB returned it (attribute values), with why it could not be decoded."""
    job_id: str
    item: Mapping[str, Any]
    error: str

    @property
    def state(self) -> str | None:
        """The state the item says it is in; None when that is not a text either."""
        state = self.item.get("state")
        return state.get("S") if isinstance(state, dict) and isinstance(state.get("S"), str) else None

    @property
    def quarantined(self) -> bool:
        return self.state == QUARANTINED


class UndecodableRecord(Exception):
    def __init__(self, bad: Undecodable):
        self.bad = bad
        super().__init__(f"job {bad.job_id} cannot be read from the ledger: {bad.error}")


@dataclass(frozen=True)
class Placement:
    region: str
    fleet: str
    cluster: str
    container_instance_arn: str
    instance_id: str
    instance_type: str
    task_arn: str | None = None
    # What the machine costs: spot or on-demand, and its hourly price when the job was placed on it (the
    # scheduler's live spot price or the catalog's on-demand price); when the claim was made.
    lifecycle: str | None = None
    price_per_hour: float | None = None
    placed_at: float | None = None


@dataclass(frozen=True)
class Cost:
    """What a job's runs cost, each run counted once (runs of attempts up to `charged_attempt`)."""
    usd: float = 0.0  # its share of the instance for the time it held it, at the price paid
    on_demand_usd: float = 0.0  # the same share and time at the catalog's on-demand price
    seconds: float = 0.0  # time it held its share, over all runs
    charged_attempt: int = 0

    def plus(self, usd: float, on_demand_usd: float, seconds: float, attempt: int) -> Cost:
        return Cost(self.usd + usd, self.on_demand_usd + on_demand_usd, self.seconds + seconds, attempt)


@dataclass(frozen=True)
class JobRecord:
    job_id: str
    submission_id: str
    index: int
    state: str
    attempt: int
    runs: int
    start_failures: int
    submitted_at: float
    updated_at: float
    spec: JobSpec
    placement: Placement | None = None
    reasons: tuple[Mapping[str, Any], ...] = ()
    version: int = 0
    # (region, fleet, box): the new instance a scheduler run bought for this job and the jobs packed
    # with it. Only a QUEUED job has one; every transition clears it.
    reserved: tuple[str, str, str] | None = None
    owner: str | None = None  # who submitted it (the caller's IAM identity name)
    cost: Cost | None = None
    exit_code: int | None = None  # of the job's last run, when it had one
    notified_at: float | None = None  # on a submission's first job: when the submission's end was announced
    # ... and on which channels (NOTIFY_CHANNELS) so far: each is told once, whatever fails on another.
    notified: tuple[str, ...] = ()
    # Starts ECS refused for the machine (lambdas/scheduler/actions.py machine_refused): not failed starts of
    # the job, but bounded too, so that a job every machine refuses fails instead of buying machine after machine.
    machine_refusals: int = 0

    @property
    def attempts_left(self) -> bool:
        return self.runs < self.spec.max_attempts

    @property
    def last_reason(self) -> str:
        return self.reasons[-1]["reason"] if self.reasons else ""

    @property
    def started_at(self) -> float | None:
        """When its latest run started: the last change to RUNNING (None when it never ran)."""
        return next((float(r["at"]) for r in reversed(self.reasons) if r.get("state") == RUNNING), None)

    @property
    def run_seconds(self) -> float | None:
        """How long its successful run took, from RUNNING to SUCCEEDED (None for any other job), for the
        scheduler's runtime estimates from a submission's finished jobs."""
        if self.state != SUCCEEDED:
            return None
        ended = next((float(r["at"]) for r in reversed(self.reasons) if r.get("state") == SUCCEEDED), None)
        started = self.started_at
        return ended - started if ended is not None and started is not None and ended >= started else None


@dataclass(frozen=True)
class Outcome:
    """What a transition did: `applied` False means the ledger had already moved on (record shows where)."""
    applied: bool
    record: JobRecord | None
    detail: str = ""


_serializer, _deserializer = TypeSerializer(), TypeDeserializer()


def _to_dynamo(value: Any) -> Any:
    if isinstance(value, float):
        return Decimal(repr(value))
    if isinstance(value, Mapping):
        return {k: _to_dynamo(v) for k, v in value.items() if v is not None}
    if isinstance(value, (list, tuple)):
        return [_to_dynamo(v) for v in value]
    return value


def _from_dynamo(value: Any) -> Any:
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, Mapping):
        return {k: _from_dynamo(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_from_dynamo(v) for v in value]
    return value


def encode(record: JobRecord) -> dict:
    document = {
        "job_id": record.job_id, "submission_id": record.submission_id, "index": record.index,
        "state": record.state, "attempt": record.attempt, "runs": record.runs,
        "start_failures": record.start_failures, "submitted_at": record.submitted_at,
        "updated_at": record.updated_at, "spec": record.spec.to_document(),
        "reasons": [dict(r) for r in record.reasons], "version": record.version,
    }
    if record.machine_refusals:
        document["machine_refusals"] = record.machine_refusals
    if record.placement is not None:
        document["placement"] = dict(vars(record.placement))
    if record.reserved is not None:
        document["reserved"] = dict(zip(("region", "fleet", "box"), record.reserved))
    if record.cost is not None:
        document["cost"] = dict(vars(record.cost))
    for key in ("owner", "exit_code", "notified_at"):
        document[key] = getattr(record, key)
    document["notified"] = list(record.notified) or None
    if record.state == QUEUED:
        document[QUEUED_TEAM] = record.spec.team or NO_TEAM  # absent otherwise: the sparse index drops the job
    return {k: _serializer.serialize(v) for k, v in _to_dynamo(document).items()}


def _field(document: Mapping, key: str, kind: type, *, optional: bool = False, default: Any = None,
           signed: bool = False) -> Any:
    if document.get(key) is None:  # absent, or written as null (encode writes unset optional fields so)
        if optional:
            return default
        raise DecodeError(f"field {key!r} is missing")
    value = document[key]
    if kind is int and (isinstance(value, bool) or not isinstance(value, int) or (value < 0 and not signed)):
        raise DecodeError(f"field {key}={shown(value)} is not an integer{'' if signed else ' >= 0'}")
    if kind is float and (isinstance(value, bool) or not isinstance(value, (int, float))):
        raise DecodeError(f"field {key}={shown(value)} is not a number")
    if kind in (str, dict, list) and not isinstance(value, kind):
        raise DecodeError(f"field {key}={shown(value)} is not a {kind.__name__}")
    return kind(value) if kind is float else value


def _attribute(name: str, value: Any) -> Any:
    """One attribute value of an item, or DecodeError naming the attribute it could not be read from."""
    try:
        return _deserializer.deserialize(value)
    except (KeyError, ValueError, TypeError, AttributeError, ArithmeticError, RecursionError) as error:
        raise DecodeError(f"field {quoted(name, 40)}: {type(error).__name__}: {str(error)[:160]}") from None


# The times a record can hold: what Python's datetime shows (years 1 to 9999), as seconds since 1970.
MIN_TIME, MAX_TIME = -62_135_596_800, 253_402_300_799
PLACEMENT_TEXTS, PLACEMENT_OPTIONAL_TEXTS = ("region", "fleet", "cluster", "container_instance_arn", "instance_id",
                                             "instance_type"), ("task_arn", "lifecycle")


def _time(value: Any, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not MIN_TIME <= value <= MAX_TIME:
        raise DecodeError(f"field {name}={shown(value)} is not a time (seconds since 1970)" if value is not None
                          else f"field {name!r} is missing")


def _history_entry(entry: Any, name: str) -> None:
    """One entry of a job's history, as transitions write it: {at, attempt, state, reason} (attempt may be left
    out)."""
    if not isinstance(entry, dict):
        raise DecodeError(f"field {name}={shown(entry)} is not a map of at, attempt, state and reason")
    _time(entry.get("at"), f"{name}.at")
    attempt = entry.get("attempt", 0)  # every writer writes it; records made by hand may leave it out
    if isinstance(attempt, bool) or not isinstance(attempt, int):
        raise DecodeError(f"field {name}.attempt={shown(attempt)} is not an integer")
    for key in ("state", "reason"):
        if not isinstance(entry.get(key), str):
            raise DecodeError(f"field {name}.{key}={shown(entry.get(key))} is not a string")


def _placement_types(placement: Mapping) -> None:
    for key in placement:
        if key not in Placement.__dataclass_fields__:
            raise DecodeError(f"field placement.{shown(key)} is not a placement key")
    for key in (*PLACEMENT_TEXTS, *PLACEMENT_OPTIONAL_TEXTS):
        value = placement.get(key)
        if not isinstance(value, str) and (key in PLACEMENT_TEXTS or value is not None):
            raise DecodeError(f"field placement.{key}={shown(value)} is not a string")
    for key in ("price_per_hour", "placed_at"):
        value = placement.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise DecodeError(f"field placement.{key}={shown(value)} is not a number")


def decode(item: Mapping) -> JobRecord:
    """A job record from its item; DecodeError names the first field that is missing or mistyped."""
    try:
        document = _from_dynamo({k: _attribute(k, v) for k, v in item.items()})
        state = _field(document, "state", str)
        if state == QUARANTINED:
            raise DecodeError(f"quarantined: {(document.get('quarantine') or {}).get('error', 'no reason recorded')}")
        if state not in STATES:
            raise DecodeError(f"field state={state[:40]!r} is not one of {', '.join(STATES)}")
        placement = _field(document, "placement", dict, optional=True)
        reserved = _field(document, "reserved", dict, optional=True)
        reasons = _field(document, "reasons", list, optional=True, default=[])
        for n, entry in enumerate(reasons):
            _history_entry(entry, f"reasons[{n}]")
        cost = _field(document, "cost", dict, optional=True)
        if cost and not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in cost.values()):
            raise DecodeError(f"field cost={quoted(cost, 80)} is not a map of numbers")
        exit_code = _field(document, "exit_code", int, optional=True, signed=True)
        notified_at = _field(document, "notified_at", float, optional=True)
        notified = _field(document, "notified", list, optional=True)
        if notified is None:  # written before the channels were kept: a mark meant every channel was told
            notified = list(NOTIFY_CHANNELS) if notified_at is not None else []
        if not all(channel in NOTIFY_CHANNELS for channel in notified):
            raise DecodeError(f"field notified={quoted(notified, 80)} is not a list of {', '.join(NOTIFY_CHANNELS)}")
        for key in ("submitted_at", "updated_at"):
            _time(document.get(key), key)
        if placement:
            _placement_types(placement)
        if reserved and not all(isinstance(reserved.get(k), str) for k in ("region", "fleet", "box")):
            raise DecodeError(f"field reserved={shown(reserved)} is not a map of region, fleet and box")
        return JobRecord(
            job_id=_field(document, "job_id", str), submission_id=_field(document, "submission_id", str),
            index=_field(document, "index", int), state=state, attempt=_field(document, "attempt", int),
            runs=_field(document, "runs", int, optional=True, default=0),
            start_failures=_field(document, "start_failures", int, optional=True, default=0),
            machine_refusals=_field(document, "machine_refusals", int, optional=True, default=0),
            submitted_at=_field(document, "submitted_at", float), updated_at=_field(document, "updated_at", float),
            spec=spec_from_document(_field(document, "spec", dict)),
            placement=Placement(**{"task_arn": None, **placement}) if placement else None,
            reasons=tuple(reasons), version=_field(document, "version", int, optional=True, default=0),
            reserved=(reserved["region"], reserved["fleet"], reserved["box"]) if reserved else None,
            owner=_field(document, "owner", str, optional=True), cost=Cost(**cost) if cost else None,
            exit_code=exit_code, notified_at=notified_at, notified=tuple(notified),
        )
    except DecodeError:
        raise
    # Whatever a hand-edited or foreign item holds (a map where a list belongs, unknown placement keys,
    # a number DynamoDB stores but Python cannot convert, nesting deeper than the stack), it is one bad item.
    except (KeyError, ValueError, TypeError, AttributeError, ArithmeticError, RecursionError) as error:
        message = str(error)[:200]
        # One line: the message may quote a key of the item, and a key may hold any character.
        raise DecodeError(f"{type(error).__name__}: {message if message.isprintable() else repr(message)}") from None


def new_record(job: Job, now: float, owner: str | None = None) -> JobRecord:
    return JobRecord(job_id=job.job_id, submission_id=job.submission_id, index=job.index, state=QUEUED, attempt=0,
                     runs=0, start_failures=0, submitted_at=now, updated_at=now, spec=job.spec, owner=owner,
                     reasons=({"at": now, "attempt": 0, "state": QUEUED, "reason": "submitted"},))


def transactions(items: Sequence[dict], *, max_items: int = TRANSACTION_ITEMS,
                 max_bytes: int = TRANSACTION_BYTES) -> list[list[dict]]:
    """Encoded items in groups that one TransactWriteItems call takes (count and, roughly, size)."""
    groups: list[list[dict]] = []
    size = 0
    for item in items:
        item_size = len(json.dumps(item))
        if not groups or len(groups[-1]) >= max_items or size + item_size > max_bytes:
            groups.append([])
            size = 0
        groups[-1].append(item)
        size += item_size
    return groups


@dataclass(frozen=True)
class QuarantinedItem:
    """A quarantined job as `mlfleet quarantine` shows it: why, since when, and the item as it was."""
    job_id: str
    error: str
    previous_state: str | None
    at: float
    by: str
    alerted: bool
    document: Mapping[str, Any]  # the item's other attributes, decoded as far as DynamoDB types go


@dataclass
class Ledger:
    dynamodb: Any  # a boto3 DynamoDB client
    table: str
    # Items this reader skipped or could not decode, for the caller to quarantine (see the module doc).
    undecodable: list[Undecodable] = field(default_factory=list)

    def put_new(self, record: JobRecord) -> bool:
        """Write a new job; False (and nothing written) when the job id already exists."""
        try:
            self.dynamodb.put_item(TableName=self.table, Item=encode(record),
                                   ConditionExpression="attribute_not_exists(job_id)")
            return True
        except self.dynamodb.exceptions.ConditionalCheckFailedException:
            return False

    def put_new_batch(self, records: Sequence[JobRecord], *, progress: Callable[[int], None] | None = None) -> int:
        """Write new jobs in transactions of up to 100 puts, each conditioned on the job id being new.

        A transaction is all or nothing: DuplicateJob (naming the job) when one of its ids exists, and
        none of that transaction is written (earlier ones are). Each call carries a ClientRequestToken
        derived from its job ids, so botocore resending a call whose answer was lost writes nothing twice
        (DynamoDB keeps tokens for 10 minutes). `progress(n)` after each transaction, n jobs written so far.
        """
        written = 0
        for group in transactions([encode(r) for r in records]):
            ids = [item["job_id"]["S"] for item in group]
            token = hashlib.sha256(" ".join(ids).encode()).hexdigest()[:36]
            try:
                self.dynamodb.transact_write_items(ClientRequestToken=token, TransactItems=[
                    {"Put": {"TableName": self.table, "Item": item, "ConditionExpression": "attribute_not_exists(job_id)"}}
                    for item in group])
            except self.dynamodb.exceptions.TransactionCanceledException as error:
                reasons = error.response.get("CancellationReasons") or []
                duplicate = next((ids[i] for i, r in enumerate(reasons) if r.get("Code") == "ConditionalCheckFailed"),
                                 None)
                if duplicate is None:
                    raise
                raise DuplicateJob(duplicate) from None
            written += len(group)
            if progress is not None:
                progress(written)
        return written

    def cancel(self, record: JobRecord, *, reason: str, now: float) -> Outcome:
        """The one transition a user makes: an active job (as read in `record`) -> CANCELLED.

        One conditional UpdateItem that writes CANCEL_ATTRIBUTES only, applied only while the item is
        still the version the user saw and in an active state. applied=False, changing nothing, when
        the job moved on meanwhile (the record then shows where).
        """
        if CANCELLED not in TRANSITIONS[record.state]:
            raise IllegalTransition(f"job state {record.state} -> {CANCELLED} is not a legal transition")
        entry = {"at": now, "attempt": record.attempt, "state": CANCELLED, "reason": reason}
        updated = replace(record, state=CANCELLED, updated_at=now, version=record.version + 1,
                          reasons=(*record.reasons, entry)[-MAX_REASONS:], reserved=None)
        active = sorted(state for state, targets in TRANSITIONS.items() if CANCELLED in targets)
        values = {f":active{i}": {"S": state} for i, state in enumerate(active)}
        try:
            self.dynamodb.update_item(
                TableName=self.table, Key={"job_id": {"S": record.job_id}},
                UpdateExpression="SET #state = :cancelled, updated_at = :now, version = :next, reasons = :reasons "
                                 f"REMOVE reserved, {QUEUED_TEAM}",
                ConditionExpression=f"version = :version AND #state IN ({', '.join(values)})",
                ExpressionAttributeNames={"#state": "state"},
                ExpressionAttributeValues={
                    ":cancelled": {"S": CANCELLED}, ":now": _serializer.serialize(_to_dynamo(now)),
                    ":next": {"N": str(updated.version)}, ":version": {"N": str(record.version)},
                    ":reasons": _serializer.serialize(_to_dynamo([dict(r) for r in updated.reasons])), **values})
        except self.dynamodb.exceptions.ConditionalCheckFailedException:
            return Outcome(False, self.get(record.job_id), "the job changed before the cancel was written")
        return Outcome(True, updated)

    def _decode(self, item: Mapping) -> JobRecord:
        try:
            return decode(item)
        except DecodeError as error:
            bad = Undecodable(str(item.get("job_id", {}).get("S", "?")), item, str(error))
            self.undecodable.append(bad)
            raise UndecodableRecord(bad) from None

    def get(self, job_id: str) -> JobRecord | None:
        """The job, None when there is none; UndecodableRecord when its item cannot be used."""
        if not is_job_id(job_id):  # the table's other items (the placement lease) are not jobs
            return None
        item = self.dynamodb.get_item(TableName=self.table, Key={"job_id": {"S": job_id}}, ConsistentRead=True).get("Item")
        return self._decode(item) if item else None

    def _query(self, **kwargs) -> Iterable[JobRecord]:
        paginator = self.dynamodb.get_paginator("query")
        for page in paginator.paginate(TableName=self.table, **kwargs):
            for item in page.get("Items", []):
                try:
                    yield self._decode(item)
                except UndecodableRecord:
                    continue  # noted in self.undecodable; one bad item never hides the others

    def by_state(self, state: str, limit: int | None = None, since: float | None = None, *,
                 newest_first: bool = False) -> list[JobRecord]:
        """Jobs in `state` (submitted at `since` or later), oldest submission first (newest first with
        `newest_first`) (GSI, eventually consistent: re-read before acting)."""
        records = []
        condition, values = "#state = :state", {":state": {"S": state}}
        if since is not None:
            condition += " AND submitted_at >= :since"
            values[":since"] = _serializer.serialize(_to_dynamo(float(since)))
        # ScanIndexForward false walks the index's sort key (submitted_at) descending; Limit bounds the items
        # a page evaluates, so a limited read costs what it returns, not a 1 MB page (botocore's DynamoDB
        # model, Query: ScanIndexForward, Limit).
        paging = {"PaginationConfig": {"PageSize": limit}} if limit is not None else {}
        for record in self._query(IndexName=BY_STATE, KeyConditionExpression=condition,
                                  ExpressionAttributeNames={"#state": "state"},
                                  ExpressionAttributeValues=values, ScanIndexForward=not newest_first, **paging):
            records.append(record)
            if limit is not None and len(records) >= limit:
                break
        return records

    def queued_of_team(self, team: str | None, limit: int | None = None) -> list[JobRecord]:
        """The queued jobs of `team` (None: of no team), oldest submission first (the sparse by-team GSI,
        eventually consistent: re-read before acting). Jobs written before the index existed, or (of no team)
        before NO_TEAM was written, are not in it until their next write; `by_state` still lists them."""
        return list(itertools.islice(self.iter_queued_of_team(team, page_size=limit), limit))

    def iter_queued_of_team(self, team: str | None, page_size: int | None = None) -> Iterator[JobRecord]:
        """queued_of_team, lazily: a page of at most `page_size` items is read only when the one before is
        used up, so a reader that stops early reads no more (botocore's DynamoDB model, Query: Limit)."""
        paging = {"PaginationConfig": {"PageSize": page_size}} if page_size else {}
        for record in self._query(IndexName=BY_TEAM_QUEUED, KeyConditionExpression="#team = :team",
                                  ExpressionAttributeNames={"#team": QUEUED_TEAM},
                                  ExpressionAttributeValues={":team": {"S": team or NO_TEAM}}, ScanIndexForward=True,
                                  **paging):
            if record.state == QUEUED:  # the index may lag a transition
                yield record

    def by_submission(self, submission_id: str, limit: int | None = None) -> list[JobRecord]:
        """The submission's jobs in job id order (its jobs' order), at most `limit` of them: a limited read
        evaluates no more items than it returns (Limit, as in by_state)."""
        return list(itertools.islice(self.iter_submission(submission_id, page_size=limit), limit))

    def iter_submission(self, submission_id: str, page_size: int | None = None) -> Iterator[JobRecord]:
        """by_submission, lazily: a page (1 MB, or `page_size` items) is read only when the one before is
        used up, so a reader that stops early reads no more."""
        paging = {"PaginationConfig": {"PageSize": page_size}} if page_size is not None else {}
        return self._query(IndexName=BY_SUBMISSION, KeyConditionExpression="submission_id = :s",
                           ExpressionAttributeValues={":s": {"S": submission_id}}, **paging)

    def transition(self, job_id: str, to_state: str, *, expect_states: Iterable[str], expect_attempt: int | None,
                   reason: str, now: float, current: JobRecord | None = None, **changes: Any) -> Outcome:
        """Move a job from one of `expect_states` (at `expect_attempt`, when given) to `to_state`.

        Raises IllegalTransition when the caller asks for a change TRANSITIONS forbids. Returns
        applied=False, changing nothing, when the job is not where the caller expects (already moved,
        a newer attempt, a concurrent writer won): the caller logs and drops its stale view.
        `changes` sets other fields (attempt, runs, start_failures, placement). `current` is the caller's
        view of the job (from an index read or its own last write): the read is skipped, and a stale view
        fails the write's version condition like a concurrent writer would, changing nothing.
        """
        expect_states = tuple(expect_states)
        for state in expect_states:
            if to_state not in TRANSITIONS[state]:
                raise IllegalTransition(f"job state {state} -> {to_state} is not a legal transition")
        record, moved_on = self._expected(job_id, expect_states, expect_attempt, current)
        if moved_on is not None:
            return moved_on
        attempt = changes.get("attempt", record.attempt)
        entry = {"at": now, "attempt": attempt, "state": to_state, "reason": reason[:MAX_REASON_CHARS]}
        return self._next_version(record, state=to_state, updated_at=now, reasons=(*record.reasons, entry)[-MAX_REASONS:],
                                  **{"reserved": None, **changes})

    def amend(self, job_id: str, *, expect_state: str, expect_attempt: int, now: float, **changes: Any) -> Outcome:
        """Change fields of a job without a state change (what a run of a job that has moved on cost):
        applied only while the job is still in `expect_state` at `expect_attempt`, conditional on its version
        like every transition."""
        record, moved_on = self._expected(job_id, (expect_state,), expect_attempt)
        return moved_on or self._next_version(record, updated_at=now, **changes)

    def mark_notified(self, job_id: str, now: float, channel: str, *, undo: bool = False) -> bool:
        """Note (or, with `undo`, take back) that `channel` was told of the end of the submission whose first
        job this is, once: False, changing nothing, when it is already so or another writer changed the job
        meanwhile. `notified_at` is when the first channel was marked, None again once none is."""
        if channel not in NOTIFY_CHANNELS:
            raise ValueError(f"channel {channel!r} is not one of {NOTIFY_CHANNELS}")
        record = self.get(job_id)
        if record is None or (channel not in record.notified) == undo:
            return False
        told = set(record.notified) - {channel} if undo else {*record.notified, channel}
        channels = tuple(c for c in NOTIFY_CHANNELS if c in told)
        return self._next_version(record, notified=channels,
                                  notified_at=(record.notified_at or now) if channels else None).applied

    def _expected(self, job_id: str, states: tuple[str, ...], attempt: int | None,
                  current: JobRecord | None = None) -> tuple[JobRecord | None, Outcome | None]:
        """The job as read (or as the caller holds it: `current`), or the Outcome saying it is not where
        the caller expects it."""
        record = current if current is not None and current.job_id == job_id else self.get(job_id)
        if record is None:
            return None, Outcome(False, None, "job is not in the ledger")
        if record.state not in states or (attempt is not None and record.attempt != attempt):
            return record, Outcome(False, record, f"ledger has {record.state} attempt {record.attempt}, expected "
                                                  f"{'/'.join(states)} attempt {attempt}")
        return record, None

    def _next_version(self, record: JobRecord, **changes: Any) -> Outcome:
        """Write `record` with `changes` as its next version, only while the item is still the version read."""
        updated = replace(record, version=record.version + 1, **changes)
        try:
            self.dynamodb.put_item(TableName=self.table, Item=encode(updated), ConditionExpression="version = :v",
                                   ExpressionAttributeValues={":v": {"N": str(record.version)}},
                                   ReturnValuesOnConditionCheckFailure="ALL_OLD")
        except self.dynamodb.exceptions.ConditionalCheckFailedException as refused:
            if _is_record(refused.response.get("Item"), updated):
                # This write itself: botocore's standard retry resends a PutItem whose answer was lost (a read
                # timeout, a 5xx: botocore/retries/standard.py TransientRetryableChecker), and the resend fails
                # the condition on what the first send wrote. It applied.
                return Outcome(True, updated)
            return Outcome(False, self.get(record.job_id), "another writer changed the job first")
        return Outcome(True, updated)

    def reserve(self, job_id: str, attempt: int, reserved: tuple[str, str, str], now: float) -> bool:
        """Note the new instance bought for a queued job (one write, no read). False, changing nothing,
        when the job has moved on (started, cancelled, a newer attempt): the reservation is moot then.
        Advisory, so it leaves `version` alone: a transition racing with it still applies (and clears it)."""
        try:
            self.dynamodb.update_item(
                TableName=self.table, Key={"job_id": {"S": job_id}},
                UpdateExpression="SET reserved = :reserved, updated_at = :now",
                ConditionExpression="#state = :queued AND attempt = :attempt",
                ExpressionAttributeNames={"#state": "state"},
                ExpressionAttributeValues={
                    ":reserved": {"M": {k: {"S": v} for k, v in zip(("region", "fleet", "box"), reserved)}},
                    ":now": _serializer.serialize(_to_dynamo(now)),
                    ":queued": {"S": QUEUED}, ":attempt": {"N": str(attempt)}})
            return True
        except self.dynamodb.exceptions.ConditionalCheckFailedException:
            return False

    def quarantine(self, item: Mapping[str, Any], error: str, now: float, by: str) -> bool:
        """Move the job of `item` (attribute values as read) to QUARANTINED with the reason, changing no
        other attribute but the by-team index's (QUEUED_TEAM, removed: the job is no longer queued), so
        the item stays as it was for a person to inspect. Conditional on the item
        still being as read (same state and version): False, changing nothing, when it moved on or is gone.
        A quarantined job is indexed under its submission time (or now, when it had none)."""
        values: dict[str, Any] = {
            ":quarantined": {"S": QUARANTINED}, ":now": _serializer.serialize(_to_dynamo(now)),
            ":one": {"N": "1"},
            ":info": {"M": {"error": {"S": error[:MAX_REASON_CHARS]}, "at": _serializer.serialize(_to_dynamo(now)),
                            "by": {"S": by}, "alerted": {"BOOL": False},
                            "previous_state": item.get("state") or {"NULL": True}}}}
        # A version of another type (a hand edit) cannot be counted on (DynamoDB refuses + on it): it starts again.
        if "N" in item.get("version", {"N": "0"}):
            values[":zero"] = {"N": "0"}
            version = "if_not_exists(#version, :zero) + :one"
        else:
            version = ":one"
        conditions = ["attribute_exists(job_id)"]
        for attribute, placeholder in (("state", ":was"), ("version", ":version")):
            if attribute in item:
                conditions.append(f"#{attribute} = {placeholder}")
                values[placeholder] = item[attribute]
            else:
                conditions.append(f"attribute_not_exists(#{attribute})")
        try:
            self.dynamodb.update_item(
                TableName=self.table, Key={"job_id": {"S": str(item["job_id"]["S"])}},
                # A new version: a writer holding the job as it was (an index read) cannot write over this.
                UpdateExpression="SET #state = :quarantined, quarantine = :info, "
                                 "submitted_at = if_not_exists(submitted_at, :now), "
                                 f"#version = {version} REMOVE {QUEUED_TEAM}",
                ConditionExpression=" AND ".join(conditions),
                ExpressionAttributeNames={"#state": "state", "#version": "version"}, ExpressionAttributeValues=values,
                ReturnValuesOnConditionCheckFailure="ALL_OLD")
            return True
        except self.dynamodb.exceptions.ConditionalCheckFailedException as refused:
            # Refused by this very write (botocore resent an UpdateItem whose answer was lost, as for
            # `_next_version`): the item is quarantined with this call's reason, time and finder.
            found = refused.response.get("Item")
            if not found or found.get("state") != {"S": QUARANTINED}:
                return False
            mine = _quarantined_item(found)
            return (mine.error, mine.at, mine.by) == (error[:MAX_REASON_CHARS], now, by)

    def quarantined(self, *, not_alerted: bool = False) -> list[QuarantinedItem]:
        """Quarantined jobs, oldest first (`not_alerted`: only those nobody was told about yet)."""
        values: dict[str, Any] = {":state": {"S": QUARANTINED}}
        extra: dict[str, Any] = {}
        if not_alerted:
            values[":false"] = {"BOOL": False}
            extra["FilterExpression"] = "quarantine.alerted = :false"
        found = []
        pages = self.dynamodb.get_paginator("query").paginate(
            TableName=self.table, IndexName=BY_STATE, KeyConditionExpression="#state = :state",
            ExpressionAttributeNames={"#state": "state"}, ExpressionAttributeValues=values, **extra)
        for page in pages:
            for item in page.get("Items", []):
                found.append(_quarantined_item(item))
        return found

    def mark_alerted(self, job_id: str) -> bool:
        try:
            self.dynamodb.update_item(
                TableName=self.table, Key={"job_id": {"S": job_id}}, UpdateExpression="SET quarantine.alerted = :true",
                ConditionExpression="#state = :quarantined", ExpressionAttributeNames={"#state": "state"},
                ExpressionAttributeValues={":true": {"BOOL": True}, ":quarantined": {"S": QUARANTINED}})
            return True
        except self.dynamodb.exceptions.ConditionalCheckFailedException:
            return False


def _is_record(item: Mapping[str, Any] | None, record: JobRecord) -> bool:
    """True when `item` (as DynamoDB returned it, its numbers normalised) holds exactly `record`."""
    try:
        return item is not None and decode(item) == record
    except DecodeError:
        return False


def _quarantined_item(item: Mapping[str, Any]) -> QuarantinedItem:
    """Read a quarantined item as far as its attribute types allow (it is here because the rest failed)."""
    document = {}
    for key, value in item.items():
        try:
            document[key] = _from_dynamo(_deserializer.deserialize(value))
        except (TypeError, ValueError, ArithmeticError):
            document[key] = value
    info = document.pop("quarantine", None)
    info = info if isinstance(info, dict) else {}
    at, previous = info.get("at"), info.get("previous_state")
    try:
        _time(at, "quarantine.at")
    except DecodeError:
        at = 0.0  # none, or not a time (a hand edit): shown as 1970
    return QuarantinedItem(job_id=str(document.get("job_id", "?")), error=_text(info.get("error")),
                           previous_state=previous if isinstance(previous, str) else None,
                           at=float(at), by=_text(info.get("by")), alerted=info.get("alerted") is True,
                           document=document)


def _text(value: Any) -> str:
    """A text of a quarantined item's reason, or how a hand edit left it (binary, a number, a map)."""
    return value if isinstance(value, str) else "" if value is None else shown(value)
