"""`mlfleet list`, `status`, `follow`, `cost` and `quarantine` over drawn ledger contents, against moto.

The ledger is drawn as the real code writes it: one to three submissions (a job, a sweep, a job sharing a
GPU; teams, priorities, owners) put with the ledger's own functions, each job then moved by the ledger's
transitions as the scheduler and the job-events function move it: queued (with an instance reserved for
it or not), starting, running, requeued after an interruption, succeeded, failed, dead-lettered after
failed starts, cancelled by a person (queued or running), with placements, exit codes, costs and a
submission's notification marks. Then some items are changed as a hand edit, an older version or a partial
write would leave them (tests/perturbation.py, at any depth): an attribute dropped, of another type, huge
(a 240 KB text), a number past what the code expects (2**64, 1e20 seconds, -1), a history entry malformed,
a time unparsable ("yesterday"), sets and binary; some of those the functions have quarantined
(Ledger.quarantine), and some quarantines are edited by hand again. Each command runs in-process
(cli.main) for the edited jobs and one other, each submission and the whole table, before the edits and
after.

What holds, for every command and target:
  - it exits 0 with its output, or exits non-zero with ONE message (`mlfleet: ...`, no traceback) that names
    the record (its job id) and the key it could not read;
  - a record the command cannot read never hides the readable ones: `list`, `follow` of a submission and
    `cost` show every readable job of their scope and say on stderr how many they could not read, naming
    them (docs/jobs.md, "Watch, cancel" and "Costs");
  - nothing is written to the ledger by a read command (the table is the same item for item);
  - what it prints of the well-formed records is what it printed before a bad record was put beside them
    (list's rows, status, follow's lines, cost's rows of the groups with no bad record in them).

`follow` ends: its wait between looks is Ctrl-C (exit 130) where jobs are still running.

Where moto differs from AWS: its indexes are read consistently (AWS's are eventually consistent; the
commands do not rely on either). DynamoDB refuses an index key of the wrong type or an empty one (state,
submitted_at, submission_id, queued_team), so such hand edits are not drawn; numbers past DynamoDB's range
and items over 400 KB are refused by boto3's serializer and moto as by AWS. moto stores a map with an empty
key and then answers reads botocore cannot parse, and stores -Infinity (boto3's serializer lets it through),
which DynamoDB refuses: such edits are not drawn either.
HYPOTHESIS_PROFILE=ci runs few examples; EVENT_EXAMPLES=N runs N (tests/perturbation.py).
"""

from __future__ import annotations

import json
import math
import time
from datetime import datetime, timezone

from botocore.exceptions import ClientError
from boto3.dynamodb.types import TypeDeserializer, TypeSerializer
from conftest import CLUSTER, ENV, HOME, aws_client, run_mlfleet
from hypothesis import given
from hypothesis import strategies as st
from perturbation import any_json, budget, paths, perturbed

from lambdas.jobs import costs
from lambdas.jobs import ledger as L
from lambdas.jobs.cli import watch
from lambdas.jobs.spec import JobSpec, assign_ids, new_submission_id

TABLE = f"mlfleet-{ENV}-jobs"
NOW = time.time() - 3 * 3600  # inside `cost`'s default week
IMAGE = "ghcr.io/team/train:3"
WHOLE = JobSpec(image=IMAGE, command=("python", "train.py"), gpus=1, vcpus=4, memory_mib=16384, max_attempts=3)
SHARED = JobSpec(image=IMAGE, command=("python", "serve.py"), gpus=0, gpu_memory_mib=6144, gpu_compute_percent=50,
                 vcpus=2, memory_mib=6144, max_attempts=2, team="vision", priority=8)
# What a job goes through: each step is one write the scheduler, the job-events function or a person makes.
LIVES = {"queued": (), "reserved": ("reserve",), "starting": ("claim",), "running": ("claim", "run"),
         "requeued": ("claim", "run", "requeue"), "requeued-and-running": ("claim", "run", "requeue", "claim", "run"),
         "succeeded": ("claim", "run", "succeed"), "failed": ("claim", "run", "fail"),
         "dead-lettered": ("claim", "refused", "claim", "refused", "claim", "never-started"),
         "cancelled": ("cancel",), "cancelled-running": ("claim", "run", "cancel")}
STRANGE = ("yesterday", "2026-11-27T10:00:00Z", 1e20, -1, 2**64, 10**37, -(10**30), 0.5, "", "QUEUED", "RUNNING",
           {"at": "yesterday"}, {"reason": 7}, [], {}, "g5.12xlarge", "sub-20261122191103-0b0b0b",
           frozenset({"a", "b"}), frozenset({1, 2}), b"\x00\xff")  # sets and binary: DynamoDB's SS, NS and B
VALUES = any_json(*STRANGE) | st.sampled_from(STRANGE)
INDEX_KEYS = ("state", "submitted_at", "submission_id", L.QUEUED_TEAM)
_serializer, _deserializer = TypeSerializer(), TypeDeserializer()


# --- the world ----------------------------------------------------------------------------------------------

def ledger() -> L.Ledger:
    return L.Ledger(aws_client("dynamodb", HOME), TABLE)


def scan() -> dict[str, dict]:
    dynamodb = aws_client("dynamodb", HOME)
    items = {}
    for page in dynamodb.get_paginator("scan").paginate(TableName=TABLE):
        items.update({item["job_id"]["S"]: item for item in page["Items"]})
    return items


def placement(job_id: str, attempt: int) -> L.Placement:
    return L.Placement(HOME, "gpu1", CLUSTER, f"arn:aws:ecs:{HOME}:123456789012:container-instance/{CLUSTER}/c1",
                       "i-0123456789abcdef0", "g5.12xlarge",
                       f"arn:aws:ecs:{HOME}:123456789012:task/{CLUSTER}/{job_id[-5:]}{attempt}", "spot", 2.1, NOW)


def live(job_id: str, steps, at: float) -> None:
    """Move the job through `steps` as the functions do, one write each."""
    book = ledger()
    for n, step in enumerate(steps):
        now, record = at + 60 * (n + 1), book.get(job_id)
        a = record.attempt
        if step == "reserve":
            assert book.reserve(job_id, a, (HOME, "gpu4", "mlfleet-dev-gpu4/20261122T120000/0"), now)
            continue
        if step == "cancel":
            assert book.cancel(record, reason="cancelled by ana@example.com", now=now).applied
            continue
        move = {"claim": (L.STARTING, [L.QUEUED], "placed on i-0123456789abcdef0 (g5.12xlarge, spot)",
                          {"attempt": a + 1, "placement": placement(job_id, a + 1)}),
                "run": (L.RUNNING, [L.STARTING], "task running", {"runs": record.runs + 1}),
                "requeue": (L.QUEUED, [L.RUNNING], "spot interruption: attempts left",
                            {"placement": None, "cost": L.Cost(0.4 * (a + 1), 1.2, 1800.0 * a, a)}),
                "succeed": (L.SUCCEEDED, [L.RUNNING], "exit code 0",
                            {"exit_code": 0, "cost": L.Cost(1.25, 3.5, 5400.0, a)}),
                "fail": (L.FAILED, [L.RUNNING], "exit code 1 (Essential container in task exited): not retried",
                         {"exit_code": 1, "cost": L.Cost(0.3, 0.9, 600.0, a)}),
                "refused": (L.QUEUED, [L.STARTING], "StartTask failed: RESOURCE:GPU",
                            {"placement": None, "start_failures": record.start_failures + 1}),
                "never-started": (L.FAILED, [L.STARTING], "the task could not start 5 times: dead-lettered",
                                  {"placement": None, "start_failures": record.start_failures + 1})}[step]
        state, expect, reason, changes = move
        assert book.transition(job_id, state, expect_states=expect, expect_attempt=a, reason=reason, now=now,
                               **changes).applied


@st.composite
def worlds(draw) -> dict:
    """Submissions put and lived; returns {submission id: [job ids]}."""
    submissions = {}
    for n in range(draw(st.integers(1, 3))):
        spec = draw(st.sampled_from([WHOLE, SHARED, JobSpec(**{**vars(WHOLE), "team": "nlp", "priority": 2})]))
        count = draw(st.integers(1, 3))
        submission_id = new_submission_id(datetime.fromtimestamp(NOW, timezone.utc), token=f"{n:06x}")
        jobs = assign_ids(submission_id, [spec] * count)
        at = NOW + 60 * n
        owner = draw(st.sampled_from(["ana@example.com", "bo@example.com", None]))
        ledger().put_new_batch([L.new_record(job, now=at, owner=owner) for job in jobs])
        for job in jobs:
            live(job.job_id, LIVES[draw(st.sampled_from(sorted(LIVES)))], at)
        if draw(st.booleans()):
            ledger().mark_notified(jobs[0].job_id, at + 3600, "email")
        submissions[submission_id] = [job.job_id for job in jobs]
    return submissions


def document_of(item: dict) -> dict:
    return L._from_dynamo({k: _deserializer.deserialize(v) for k, v in item.items()})


def put_edited(job_id: str, item: dict, document: dict) -> bool:
    """Put the hand-edited `document` in place of `item`; False where DynamoDB (or boto3) would refuse it."""
    if "" in {path[-1] for path in paths(document)}:
        return False  # moto stores a map with an empty key, then answers reads botocore cannot parse
    if not all(math.isfinite(value) for value in leaves(document) if isinstance(value, float)):
        return False  # boto3's serializer lets -Infinity through and moto stores it; DynamoDB refuses it
    for key in INDEX_KEYS:
        if key in item and (key not in document or type(document[key]) is not type(document_of(item)[key])
                            or document[key] == ""):
            return False
    try:
        edited = {k: _serializer.serialize(v) for k, v in L._to_dynamo({**document, "job_id": job_id}).items()}
        aws_client("dynamodb", HOME).put_item(TableName=TABLE, Item=edited)
    except (TypeError, ValueError, ArithmeticError, ClientError):
        return False
    return True


def same(a, b) -> bool:
    """Equal, and of the same types throughout (0 is not False)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


def leaves(document) -> list:
    if isinstance(document, dict):
        return [leaf for value in document.values() for leaf in leaves(value)]
    if isinstance(document, list):
        return [leaf for value in document for leaf in leaves(value)]
    return [document]


def changed_keys(before, after) -> set[str]:
    """The names along every path where `after` differs from `before` (a key dropped, added or changed)."""
    if isinstance(before, dict) and isinstance(after, dict):
        names = set()
        for key in {*before, *after}:
            if key not in before or key not in after:
                names.add(str(key))
            elif not same(before[key], after[key]):
                inner = changed_keys(before[key], after[key])
                names |= {str(key), *inner}
        return names
    if isinstance(before, list) and isinstance(after, list):
        return {n for b, a in zip(before, after) for n in changed_keys(b, a)}
    return set()


# --- the commands -------------------------------------------------------------------------------------------

def ctrl_c(_seconds):
    raise KeyboardInterrupt  # follow's sleep: the watch ends as at Ctrl-C (exit 130)


def commands(submissions: dict, jobs: list[str], by: str) -> list[tuple[str, ...]]:
    """The read commands over the whole table, each submission, and `jobs` (those to be edited and one not)."""
    return [("list",), ("list", "--json"), ("list", "--state", "SUCCEEDED", "--state", "FAILED", "--state", "CANCELLED"),
            *(("list", "--submission", s) for s in submissions), *(("status", j) for j in jobs),
            *(("follow", t) for t in (*jobs, *submissions)), ("cost",), ("cost", "--json", "--by", by),
            ("quarantine",), ("quarantine", "--json")]


def run_all(argvs) -> dict[tuple, tuple[int, list[str], list[str]]]:
    return {argv: run_mlfleet(*argv) for argv in argvs}


def unreadable(items: dict[str, dict]) -> dict[str, str]:
    """job id -> why its item cannot be read (as the code decodes it)."""
    bad = {}
    for job_id, item in items.items():
        try:
            L.decode(item)
        except L.DecodeError as error:
            bad[job_id] = str(error)
    return bad


def in_scope(argv: tuple, item: dict) -> bool:
    """Whether the command's reads (its index queries) find `item`."""
    state = item.get("state", {}).get("S")
    if argv[0] == "list" and "--submission" in argv:
        return item.get("submission_id", {}).get("S") == argv[-1]
    if argv[0] == "list":
        states = [argv[n + 1] for n, a in enumerate(argv) if a == "--state"] or list(watch.ACTIVE_STATES)
        return state in states
    if argv[0] == "cost":
        return state in L.STATES and float(item["submitted_at"]["N"]) >= time.time() - 7 * 86400 + 600
    if argv[0] == "follow" and argv[1] in (item.get("submission_id", {}).get("S"), item["job_id"]["S"]):
        return True
    return False


# --- what holds ---------------------------------------------------------------------------------------------

def one_error(err: list[str], job_id: str, keys: set[str]) -> None:
    assert len(err) == 1 and err[0].startswith("mlfleet: ") and "Traceback" not in err[0], err
    assert len(err[0]) < 2000, err[0][:300]
    assert job_id in err[0], err
    assert any(key in err[0] for key in keys), (err, keys)


def noted(err: list[str], expected: set[str]) -> None:
    """The note of the records a command could not read: how many, and which."""
    notes = [line for line in err if "could not be read" in line]
    if not expected:
        assert notes == [], err
        return
    assert len(notes) == 1 and f"{len(expected)} job record(s) could not be read" in notes[0], (err, expected)
    assert all(job_id in notes[0] for job_id in sorted(expected)[:3]), (notes, expected)


def rows_of(out: list[str], jobs: set[str]) -> dict[str, list[str]]:
    return {line.split()[0]: line.split() for line in out if line.split() and line.split()[0] in jobs}


@budget(ci=1)
@given(data=st.data())
def test_read_commands_show_every_readable_record_name_the_unreadable_and_write_nothing(service, monkeypatch, data):
    for job_id in scan():  # the examples share one moto world
        aws_client("dynamodb", HOME).delete_item(TableName=TABLE, Key={"job_id": {"S": job_id}})
    monkeypatch.setattr(watch, "_sleep", ctrl_c)
    submissions = data.draw(worlds(), label="world")
    good_items = scan()
    chosen = data.draw(st.lists(st.sampled_from(sorted(good_items)), min_size=1, max_size=3, unique=True),
                       label="edited")
    kept = sorted(set(good_items) - set(chosen))
    argvs = commands(submissions, [*chosen, *kept[:1]], data.draw(st.sampled_from(costs.GROUPINGS), label="by"))
    before = run_all(argvs)
    assert scan() == good_items, "a read command wrote to the ledger"
    assert all(code in (0, 1, 130) and not [line for line in err if "could not be read" in line]
               for code, _, err in before.values()), before

    # The hand edits, older versions and partial writes; some quarantined by the functions since.
    edited: dict[str, set[str]] = {}
    for job_id in chosen:
        original = document_of(good_items[job_id])
        document = data.draw(perturbed({k: v for k, v in original.items() if k != "job_id"}, VALUES), label=job_id)
        if put_edited(job_id, good_items[job_id], document):
            edited[job_id] = changed_keys(original, document) or {"job_id"}
    items = scan()
    bad = unreadable(items)
    for job_id in sorted(bad):
        if data.draw(st.booleans(), label=f"quarantine {job_id}"):
            assert ledger().quarantine(items[job_id], bad[job_id], NOW + 7200, "scheduler")
            if data.draw(st.booleans(), label=f"edit the quarantine of {job_id}"):  # by hand, since
                item = scan()[job_id]
                document = document_of(item)
                info = data.draw(perturbed({"quarantine": document["quarantine"]}, VALUES), label="quarantine")
                if put_edited(job_id, item, {**document, **info} if "quarantine" in info else {
                        k: v for k, v in document.items() if k != "quarantine"}):
                    edited[job_id] |= {"quarantine", *changed_keys({"quarantine": document["quarantine"]}, info)}
    items = scan()
    bad = unreadable(items)
    good_jobs = set(good_items) - set(edited)

    after = run_all(argvs)
    assert scan() == items, "a read command wrote to the ledger"

    for argv, (code, out, err) in after.items():
        was_code, was_out, was_err = before[argv]
        assert not any("Traceback" in line for line in err), (argv, err)
        target = argv[1] if len(argv) > 1 and argv[1].startswith("sub-") else None
        if target in bad:  # status or follow of a job that cannot be read
            assert code == 2, (argv, code, out, err)
            one_error(err, target, edited[target] | {"quarantined"})
            continue
        if argv[0] in ("status", "follow") and target in good_jobs:
            assert (code, out) == (was_code, was_out), (argv, was_out, out, err)
            continue
        if argv[0] == "status":  # edited, still readable
            assert code == 0 and json.loads("\n".join(out))["job_id"] == target, (argv, code, err)
            continue
        if argv[0] == "follow" and target not in submissions:  # edited, still readable
            assert code in (0, 1, 130), (argv, code, err)
            continue
        whole = argv[-1] if argv[0] == "follow" or "--submission" in argv else None
        if whole and not any(in_scope(argv, item) for item in items.values()):  # edits moved all its jobs away
            assert code == 2 and err == [f"mlfleet: no submission {whole} in {ENV}"], (argv, code, err)
            continue
        if whole and not {j for j, item in items.items() if in_scope(argv, item)} - set(bad):  # none can be read
            assert code == 2, (argv, code, out, err)
            one_error(err, whole, {key for job in submissions[whole] for key in edited.get(job, ())} | {"quarantined"})
            continue
        if argv[0] == "follow":
            assert code == follow_code([item for item in items.values() if in_scope(argv, item)]), (argv, code, err)
            for job in set(submissions[target]) & good_jobs:
                assert [line for line in out if job in line] == [line for line in was_out if job in line], argv
            noted(err, {j for j in bad if in_scope(argv, items[j])})
            continue
        assert code == 0, (argv, code, err)
        if argv[0] == "list" and "--json" in argv:
            listed = {d["job_id"]: d for d in json.loads("\n".join(out))}
            was = {d["job_id"]: d for d in json.loads("\n".join(was_out))}
            assert {j: listed.get(j) for j in good_jobs if j in was} == {j: was[j] for j in good_jobs if j in was}
            assert not set(listed) & set(bad)
            noted(err, {j for j in bad if in_scope(argv, items[j])})
        elif argv[0] == "list":
            shown = rows_of(out, set(items))
            was = rows_of(was_out, good_jobs)
            assert {j: shown.get(j) for j in was} == was, argv
            assert not set(shown) & set(bad)
            noted(err, {j for j in bad if in_scope(argv, items[j])})
        elif argv[0] == "cost":
            by = argv[argv.index("--by") + 1] if "--by" in argv else "submission"
            touched = {costs.group_of(L.decode(good_items[j]), by) for j in edited}
            touched |= {costs.group_of(L.decode(items[j]), by) for j in edited if j not in bad}
            if "--json" in argv:
                rows = {r["group"]: r for r in json.loads("\n".join(out))["rows"]}
                was = {r["group"]: r for r in json.loads("\n".join(was_out))["rows"]}
                assert rows["total"]["jobs"] == sum(in_scope(argv, item) for item in items.values()) - len(
                    [j for j in bad if in_scope(argv, items[j])])
            else:
                rows, was = rows_of(out[2:], {"total", *costs_groups(was_out)}), rows_of(was_out[2:],
                                                                                          costs_groups(was_out))
            assert {g: rows.get(g) for g in was if g not in touched | {"total"}} == {
                g: r for g, r in was.items() if g not in touched | {"total"}}, argv
            noted(err, {j for j in bad if in_scope(argv, items[j])})
        elif argv[0] == "quarantine":
            quarantined = {j for j, item in items.items() if item.get("state") == {"S": L.QUARANTINED}}
            if "--json" in argv:
                assert {d["job_id"] for d in json.loads("\n".join(out))} == quarantined
            else:
                assert set(rows_of(out, set(items))) == quarantined


def follow_code(items: list[dict]) -> int:
    """follow's exit for a submission's items (docs/jobs.md, "Watch, cancel"): 130 while it still waits (its sleep
    is Ctrl-C here), for a job that has not ended or an unreadable item that says it has not (the scheduler will
    quarantine it); then 2 when an unreadable item is not quarantined (how it ended is unknown), 1 when a job
    failed or was quarantined, 0 otherwise."""
    states, unread = [], []
    for item in items:
        try:
            states.append(L.decode(item).state)
        except L.DecodeError:
            unread.append((item.get("state") or {}).get("S") if isinstance(item.get("state"), dict) else None)
    if any(s not in L.TERMINAL for s in states) or any(s in watch.ACTIVE_STATES for s in unread):
        return 130
    if any(s != L.QUARANTINED for s in unread):
        return 2
    return 1 if unread or L.FAILED in states else 0


def costs_groups(out: list[str]) -> set[str]:
    return {line.split()[0] for line in out[2:] if line.split()}
