"""`mlfleet submit -f SPEC` against any spec file built from a valid one (a job, a sweep, a batch run, a job
sharing a GPU, a job with every optional key of docs/jobs.md) by perturbing it at any depth (a key dropped, a
value replaced by any JSON or YAML value: None, NaN, infinities, integers past what DynamoDB stores, floats
below it, 240 KB texts, lists and mappings for scalars; a value wrapped in a list; misspelt keys added), by
breaking its text (cut, a stray character, any text at all), with YAML's own forms (tags, sets, merges, keys
YAML reads as booleans, dates or null), and with flags over it, valid and not.

The promise (docs/jobs.md, "Errors"; lambdas/jobs/cli/__init__.py): a submission is validated whole before
anything is written. So for each spec file and flags, either
  - the command exits 0 and every job the spec expands to (the sweep's combinations times the batch ranges)
    is in the ledger and has its message in the queue, with the file's values where no flag overrides them;
  - or it exits 2 with ONE message, no traceback (a line, or `invalid job spec:` with one line per problem),
    each problem naming a key of the spec, a flag or the file, and nothing is in the ledger or the queue.

Runs against moto (the `service` fixture). HYPOTHESIS_PROFILE=ci runs few examples; EVENT_EXAMPLES=N runs N
(tests/perturbation.py).
"""

from __future__ import annotations

import json
import math
import re

import yaml
from conftest import ENV, HOME, aws_client, run_mlfleet
from hypothesis import example, given
from hypothesis import strategies as st
from perturbation import any_json, budget, perturbed

from lambdas.jobs import ledger as L
from lambdas.jobs.cli import CliError, submission
from lambdas.jobs.spec import KEYS, SUBMISSION_KEYS, JobSpec, _shown

IMAGE = "ghcr.io/team/infer:7"
JOB = {"image": IMAGE, "command": ["python", "train.py"], "environment": {"WANDB_PROJECT": "fuzz"},
       "gpus": 1, "vcpus": 4, "memory_mib": 14336}
SWEEP = {**JOB, "command": ["python", "train.py", "--lr", "{lr}", "--seed", "{seed}"],
         "sweep": {"lr": [0.1, 0.01], "seed": [1, 2, 3]}}
BATCHES = {**JOB, "command": ["python", "infer.py", "--from", "{start}", "--to", "{end}"]}
SHARED = {"image": IMAGE, "command": ["python", "serve.py", "--shard", "{shard}"], "gpu_memory_mib": 6144,
          "gpu_compute_percent": 50, "vcpus": 2, "memory_mib": 6144, "sweep": {"shard": [0, 1]}}
EVERY_KEY = {**JOB, "instance_type_pattern": "g5\\..*", "regions": [HOME], "lifecycle": "spot", "max_attempts": 3,
             "checkpoint_interval_minutes": 20, "expected_runtime_s": 5400, "retry_on_exit_codes": [137, 143],
             "team": "vision", "priority": 8, "notify": ["ana@example.com", "slack"],
             "secrets": {"HF_TOKEN": f"/mlfleet/{ENV}/hf"}}
# Each valid spec file with the flags it is submitted with (a batch run's ranges are a flag only).
BASES = [(JOB, ()), (SWEEP, ()), (BATCHES, ("--batches", "0:1000:250")), (SHARED, ()), (EVERY_KEY, ())]
assert set(EVERY_KEY) | set(SHARED) | set(SWEEP) == set(KEYS) | set(SUBMISSION_KEYS)

# Values a spec's keys take, right or wrong, among any JSON: what the other keys hold, and numbers at the edges.
VALUES = any_json(math.nan, math.inf, -math.inf, 10**40, -(10**400), 1e308, 5e-324, 1e-300, -0.0, 0.5, 0, 1, 100, 101,
                  IMAGE, "g5.12xlarge", "g5\\..*", HOME, "eu-west-9", "spot", "slack", "ana@example.com",
                  f"/mlfleet/{ENV}/hf", "/mlfleet/prod/hf", "{lr}", "{start}", "{nope}", "vision", "yes", "1e3")
# Keys added beside the others: misspellings of the spec's keys, the keys themselves, anything.
ADDED_KEYS = st.one_of(st.sampled_from([*KEYS, *SUBMISSION_KEYS, "gpu", "vcpu", "memory", "Image", "sweeps",
                                        "environ", "secret", "batches", "retry_on_exit_code", "expected_runtime"]),
                       st.text(max_size=12))
# Flags over the file, valid and not.
FLAGS = {
    "--image": [IMAGE, "", "Bad/Image"], "--gpus": ["1", "2", "0", "9"], "--vcpus": ["2", "nan", "1e-300", "-1"],
    "--memory": ["8GiB", "0", "lots", "9" * 30 + "GiB"], "--gpu-memory": ["6GiB", "0.5MiB", "99999GiB"],
    "--gpu-compute-percent": ["50", "0", "101"], "--env": ["EXTRA=1", "=x", "B", "MLFLEET_JOB_ID=1"],
    "--secret": [f"S=/mlfleet/{ENV}/s", "S=/mlfleet/prod/s", "S"], "--regions": [HOME, ",", "eu-west-9"],
    "--sweep": ["lr=0.5,0.05", "seed=7", "seed=1,1", "lr=", "x=1,2", "shard=" + ",".join(map(str, range(120)))],
    "--batches": ["0:100:50", "0:10:0", "a:b:c", "5:5:1", "0:100000:1", "0:100:1"],
    "--retry-on-exit-codes": ["137", "x", "0"], "--notify": ["bob@example.com", "nobody"],
    "--team": ["nlp", "Bad"], "--priority": ["9", "10"], "--expected-runtime": ["2h", "1e9d", "0", "9" * 400],
    "--lifecycle": ["on-demand", "never"], "--max-attempts": ["1", "11"], "--instance-type-pattern": ["g5.*", "("],
}
# YAML's own forms, added to a YAML spec file: tags, sets, binary, anchors, merges, complex and odd keys.
YAML_LINES = ["gpus: !!float 1", "vcpus: !!str 2", "extra: !!set {a, b}", "image: !!binary aGk=", "team: 2026-11-27",
              "environment: {A: !!binary aGk=}", "sweep: {yes: [1, 2]}", "sweep: {~: [1, 2]}", "sweep: {lr: !!set {a}}",
              "sweep: {on: [1, 2], 'True': [3]}",
              "? [a, b]\n: 1", "~: 1", ".nan: 1", "2026-11-27: 1", "<<: {vcpus: 2}", "base: &b {vcpus: 2}\nspec: *b",
              "regions: !!python/tuple [us-east-1]", "notify: !!omap [{a: b}]", "priority: 0o7", "priority: 0x9",
              "priority: 1_0", "memory_mib: 1:30", "max_attempts: +3", "gpus: 1.0e+0", "image: |\n  ghcr.io/a/b:1",
              "command: [python, '{lr}']", "secrets: {A: !!null ''}", "checkpoint_interval_minutes: .inf"]
COMMANDS = [(), ("--", "python", "run.py", "{lr}"), ("--", "run", "{start}", "{end}"), ("run", "{shard}")]


def dump(document, suffix: str, unicode: bool) -> str:
    if suffix == ".json":
        return json.dumps(document, ensure_ascii=not unicode)
    return yaml.safe_dump(document, allow_unicode=unicode, sort_keys=False)


@st.composite
def broken(draw, text: str) -> str:
    """`text` cut short, with a stray character, or any text at all."""
    change = draw(st.sampled_from(["cut", "stray", "any"]))
    if change == "any":
        return draw(st.text(max_size=40))
    at = draw(st.integers(0, len(text)))
    if change == "cut":
        return text[:at]
    return text[:at] + draw(st.sampled_from(list("[]{}:,\"'\t\n-&*!|>%@`#?\\\u0000"))) + text[at:]


@st.composite
def cases(draw):
    """(spec file suffix, its text, the flags after it)"""
    document, argv = draw(st.sampled_from(BASES))
    suffix, unicode = draw(st.sampled_from([".yaml", ".yml", ".json"])), draw(st.booleans())
    form = draw(st.sampled_from(["valid", "perturbed", "perturbed", "perturbed", "broken", "not a mapping",
                                 "yaml"]))
    if form == "perturbed":
        document = draw(perturbed(document, VALUES, keys=ADDED_KEYS))
    elif form == "not a mapping":
        document = draw(VALUES)
    text = dump(document, suffix, unicode)
    if form == "broken":
        text = draw(broken(text))
    elif form == "yaml":
        lines = draw(st.lists(st.sampled_from(YAML_LINES), min_size=1, max_size=2, unique=True))
        given = {line.split(":")[0] for line in lines}  # the lines' keys replace the file's
        suffix, text = ".yaml", yaml.safe_dump({k: v for k, v in document.items() if k not in given}) + "\n".join(lines)
    for flag in draw(st.lists(st.sampled_from(sorted(FLAGS)), max_size=4, unique=True)):
        argv = (*argv, flag, FLAGS[flag][0] if draw(st.booleans()) else draw(st.sampled_from(FLAGS[flag])))
    return suffix, text, (*argv, *draw(st.sampled_from(COMMANDS)))


# --- what was written ---------------------------------------------------------------------------------------

def written(world) -> tuple[list[dict], list[dict]]:
    """The ledger's items and the queue's messages, removed for the next example."""
    dynamodb, sqs = aws_client("dynamodb", HOME), aws_client("sqs", HOME)
    items = dynamodb.scan(TableName=world["table"])["Items"]
    for item in items:
        dynamodb.delete_item(TableName=world["table"], Key={"job_id": item["job_id"]})
    messages = []
    while batch := sqs.receive_message(QueueUrl=world["queue"], MaxNumberOfMessages=10).get("Messages"):
        messages += [json.loads(m["Body"]) for m in batch]
        sqs.delete_message_batch(QueueUrl=world["queue"], Entries=[
            {"Id": str(n), "ReceiptHandle": m["ReceiptHandle"]} for n, m in enumerate(batch)])
    return items, messages


def flag_values(argv, flag: str) -> list[str]:
    before = argv[:argv.index("--")] if "--" in argv else argv
    return [before[n + 1] for n, a in enumerate(before[:-1]) if a == flag]


def expected_jobs(document: dict, argv) -> int:
    """The sweep's combinations (the file's, a --sweep flag replacing a parameter) times the batch ranges."""
    sweep = {str(name): values if isinstance(values, list) else [values]
             for name, values in (document.get("sweep") or {}).items()}
    for value in flag_values(argv, "--sweep"):
        name, _, values = value.partition("=")
        sweep[name] = [v for v in values.split(",") if v]
    count = math.prod(len(values) for values in sweep.values())
    for value in flag_values(argv, "--batches")[-1:]:
        start, end, step = map(int, value.split(":"))
        count *= -(-(end - start) // step)
    return count


# The file's keys a flag overrides (the rest must reach the ledger as the file gave them).
OVERRIDDEN = {"image": "--image", "gpus": "--gpus", "vcpus": "--vcpus", "memory_mib": "--memory",
              "gpu_memory_mib": "--gpu-memory", "gpu_compute_percent": "--gpu-compute-percent",
              "instance_type_pattern": "--instance-type-pattern", "lifecycle": "--lifecycle",
              "max_attempts": "--max-attempts", "team": "--team", "priority": "--priority"}


def kept(document: dict, argv, spec: JobSpec) -> list[str]:
    """The file's plain values that did not reach the job's spec unchanged (none may be lost)."""
    lost = []
    for key, flag in OVERRIDDEN.items():
        overridden = flag_values(argv, flag) or (key in ("gpu_memory_mib", "gpu_compute_percent") and flag_values(
            argv, "--gpus")) or (key == "gpus" and flag_values(argv, "--gpu-memory"))
        if key in document and document[key] is not None and not overridden and getattr(spec, key) != document[key]:
            lost.append(f"{key}: file {document[key]!r}, ledger {getattr(spec, key)!r}")
    return lost


# --- the one error ------------------------------------------------------------------------------------------

FLAG_NAMES = {*FLAGS, "--file"}
# How a problem names what it is about: a key, a flag as spec.parse_* names it, a sweep parameter, a job.
NAMED = re.compile(r"(?:job \d+: )?(?:sweep parameter |sweep\.|environment |secrets |command argument )?"
                   r"([A-Za-z_][A-Za-z0-9_-]*)")


def names_a_key(problem: str, document) -> bool:
    keys = {*KEYS, *SUBMISSION_KEYS, "batches", "memory", "gpu-memory", "expected-runtime"}
    if isinstance(document, dict):
        if any(problem.startswith(f"{_shown(key)}=") for key in document):
            return True
        keys |= {str(name) for name in document.get("sweep") or {} if isinstance(document.get("sweep"), dict)}
    if problem.startswith(("sweep parameter ", "environment ", "secrets ", "command argument ")):
        return True
    match = NAMED.match(problem)
    return bool(match) and match.group(1) in keys


def one_error(err: list[str], document, path: str) -> None:
    """One message, no traceback; each problem names a key, a flag or the file."""
    assert err and not any("Traceback" in line for line in err), err
    if err[0].startswith("usage: "):  # argparse: its usage, then one line naming the flag
        assert re.match(r"mlfleet submit: error: argument --[a-z-]+: ", err[-1]), err
        assert all(line.startswith(" ") for line in err[1:-1]), err
        return
    assert err[0].startswith("mlfleet: ") and not any(line.startswith("mlfleet: ") for line in err[1:]), err
    assert all(len(line) < 1200 for line in err), [line[:200] for line in err]  # no 240 KB value echoed
    if err[0] == "mlfleet: invalid job spec:":
        assert err[-1] == "Nothing was queued.", err
        problems = [line[4:] for line in err[1:-1] if line.startswith("  - ")]
        assert problems and all(line.startswith(("  - ", "      ")) for line in err[1:-1]), err
        for problem in problems:
            assert names_a_key(problem, document), problem
    else:
        assert len(err) == 1, err
        message = err[0][len("mlfleet: "):]
        assert message.startswith((path, f"spec file {path}", *FLAG_NAMES)) or names_a_key(message, document), err


# --- the property -------------------------------------------------------------------------------------------

@budget(ci=8)
@given(case=cases())
@example(case=(".yaml", "\x08", ()))  # a control character: two lines, no line or column
@example(case=(".json", json.dumps({**SWEEP, "sweep": {"\n": None}}), ()))  # a line break in a name split the error
@example(case=(".yaml", yaml.safe_dump(JOB), ("--vcpus", "1e-300")))  # accepted, then DynamoDB's decimal.Underflow
@example(case=(".json", json.dumps({**JOB, "lifecycle": "ab" * 120_000}), ()))  # the 240 KB value echoed whole
# 12,000 jobs: 'submission expands into 12000 jobs', naming neither the sweep nor the batches
@example(case=(".yaml", yaml.safe_dump(SHARED), ("--sweep", FLAGS["--sweep"][-1], "--batches", "0:100:1")))
@example(case=(".yaml", "image: ghcr.io/team/infer:7\ngpus: 1\nvcpus: 1\nmemory_mib: 1024\ncommand: [run, '{True}']\n"
                        "sweep: {on: [1, 2], 'True': [3]}\n", ()))  # `on` became "True", the values 1 and 2 lost
def test_a_spec_file_is_submitted_whole_or_refused_with_one_error_naming_its_key(service, tmp_path, capsys, case):
    suffix, text, argv = case
    path = tmp_path / f"spec{suffix}"
    path.write_text(text)
    try:
        document = submission.read_spec_file(str(path))
    except CliError:
        document = None
    capsys.readouterr()
    try:
        code, out, err = run_mlfleet("submit", "-f", str(path), *argv)
    except SystemExit as exit_:  # argparse refusing a flag's value
        code, out, err = exit_.code, [], capsys.readouterr().err.splitlines()
    items, messages = written(service)
    if code == 0:
        count = expected_jobs(document, argv)
        submission_id = out[0].split(":")[0]
        assert out[-1] == f"{submission_id}: queued {count:,} job(s); watch them: mlfleet follow {submission_id}"
        assert len(items) == count and {i["submission_id"]["S"] for i in items} == {submission_id}
        assert sorted(m["job_id"] for m in messages) == sorted(i["job_id"]["S"] for i in items)
        assert kept(document, argv, L.decode(items[0]).spec) == []
    else:
        assert code == 2, (code, err)
        assert (items, messages) == ([], []), "a refused submission wrote"
        one_error(err, document, str(path))
