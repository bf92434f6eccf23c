"""The mlfleet command against moto: submissions land whole or not at all, and list/follow/cancel work.

Where moto differs from AWS: invoking a Lambda function in moto needs Docker, so the scheduler wake-up
is checked with botocore's Stubber; without a function, the submission still succeeds (the wake-up is
best effort, the one-minute schedule finds the jobs anyway).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import boto3
import pytest
from botocore.stub import ANY, Stubber
from conftest import CLUSTER, ENV, FAMILY, HOME, build_fleet, open_admission, run_mlfleet, set_teams, teams_json

from lambdas.jobs import cli
from lambdas.jobs import ledger as L
from lambdas.jobs.cli import submission

ROOT = Path(__file__).resolve().parents[2]
IMAGE = "ghcr.io/team/train:3"


def mlfleet(*argv) -> tuple[int, list[str]]:
    printed: list[str] = []
    code = cli.main(["-e", ENV, "--region", HOME, *argv], out=printed.append)
    return code, "\n".join(printed).splitlines()


def queued_messages(url: str) -> list[dict]:
    sqs = boto3.client("sqs", HOME)
    bodies = []
    while batch := sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", []):
        bodies += [json.loads(m["Body"]) for m in batch]
    return bodies


def ledger() -> L.Ledger:
    return L.Ledger(boto3.client("dynamodb", HOME), f"mlfleet-{ENV}-jobs")


def submitted(lines: list[str]) -> str:
    return lines[0].split(":")[0]


def test_a_sweep_queues_one_job_per_value_with_the_value_in_its_command(service):
    code, lines = mlfleet("submit", "--image", IMAGE, "--gpus", "1", "--vcpus", "4", "--memory", "16GiB",
                          "--sweep", "lr=0.1,0.01,0.001", "--env", "WANDB_PROJECT=sweeps", "--",
                          "python", "train.py", "--lr", "{lr}")
    assert code == 0 and lines[0] == f"{submitted(lines)}: submitting 3 job(s) to {ENV}"
    assert lines[-1] == f"{submitted(lines)}: queued 3 job(s); watch them: mlfleet follow {submitted(lines)}"
    records = ledger().by_submission(submitted(lines))
    assert sorted(r.spec.command[-1] for r in records) == ["0.001", "0.01", "0.1"]
    assert all(r.state == L.QUEUED and r.spec.memory_mib == 16384 and r.spec.environment == {"WANDB_PROJECT": "sweeps"}
               for r in records)
    assert sorted(m["job_id"] for m in queued_messages(service["queue"])) == sorted(r.job_id for r in records)


def test_batches_give_twenty_jobs_with_their_offsets(service, tmp_path):
    spec = tmp_path / "infer.yaml"
    spec.write_text(f"image: {IMAGE}\ngpus: 1\nvcpus: 2\nmemory_mib: 8192\n"
                    "command: [python, infer.py, --from, '{start}', --to, '{end}']\n")
    code, lines = mlfleet("submit", "-f", str(spec), "--batches", "0:10000:500", "--vcpus", "3")
    assert code == 0
    records = sorted(ledger().by_submission(submitted(lines)), key=lambda r: r.index)
    assert len(records) == 20 and all(r.spec.vcpus == 3 for r in records)  # the flag overrides the file
    assert records[1].spec.command[-4:] == ("--from", "500", "--to", "1000")
    assert records[19].spec.environment["MLFLEET_BATCH_START"] == "9500"


@pytest.mark.parametrize(("argv", "fragment"), [
    (["--gpus", "1", "--vcpus", "1", "--memory", "1GiB"], "image: missing: the container image to run"),
    (["--image", IMAGE, "--gpus", "0", "--vcpus", "1", "--memory", "1GiB"], "gpus=0: must be >= 1"),
    (["--image", IMAGE, "--gpus", "1", "--vcpus", "-2", "--memory", "1GiB"], "vcpus=-2.0: must be > 0"),
    (["--image", IMAGE, "--gpus", "8", "--vcpus", "1", "--memory", "1GiB"],
     "more GPUs than any instance type of this stack's fleets has (largest: 4, g5.12xlarge, g5.24xlarge)"),
    (["--image", IMAGE, "--gpus", "1", "--vcpus", "1", "--memory", "1GiB", "--regions", "eu-west-9"],
     "'eu-west-9' is not a region of this stack's fleets"),
    (["--image", IMAGE, "--gpus", "1", "--vcpus", "1", "--memory", "1GiB", "--sweep", "lr"], "--sweep 'lr': expected NAME=VALUE"),
    (["--image", IMAGE, "--gpus", "1", "--vcpus", "1", "--memory", "1GiB", "--sweep", "lr=1,2", "--", "run", "{lr}", "{epochs}"],
     "placeholder {epochs} has no value"),
    (["--image", IMAGE, "--gpus", "1", "--vcpus", "1", "--memory", "lots"], "memory='lots'"),
])
def test_bad_specs_are_refused_before_anything_is_queued(service, capsys, argv, fragment):
    code, _ = mlfleet("submit", *argv)
    assert code == 2 and fragment in capsys.readouterr().err
    assert ledger().by_state(L.QUEUED) == [] and queued_messages(service["queue"]) == []


def test_every_problem_is_named_at_once(service, capsys):
    assert mlfleet("submit", "--gpus", "0", "--vcpus", "0", "--memory", "1GiB")[0] == 2
    err = capsys.readouterr().err
    assert "image: missing" in err and "gpus=0" in err and "vcpus=0" in err and "Nothing was queued" in err


def test_dry_run_lists_the_jobs_and_writes_nothing(service):
    code, lines = mlfleet("submit", "--image", IMAGE, "--gpus", "1", "--vcpus", "1", "--memory", "1GiB",
                          "--sweep", "seed=1,2", "--dry-run", "--", "python", "train.py", "--seed", "{seed}")
    assert code == 0 and "would queue 2 job(s)" in lines[0]
    assert [line.split("  ", 1)[1] for line in lines if line.startswith("sub-") and "  " in line] == [
        "python train.py --seed 1", "python train.py --seed 2"]
    assert ledger().by_state(L.QUEUED) == []


def test_the_scheduler_is_woken_and_a_closed_admission_is_told(service, capsys, monkeypatch):
    open_admission(state="closed")
    lam = boto3.client("lambda", HOME)
    monkeypatch.setattr(submission, "client", lambda s, r=None: lam if s == "lambda" else boto3.client(s, r))
    with Stubber(lam) as stub:
        stub.add_response("invoke", {"StatusCode": 202}, {"FunctionName": f"mlfleet-{ENV}-scheduler",
                                                          "InvocationType": "Event", "Payload": ANY})
        code, _ = mlfleet("submit", "--image", IMAGE, "--gpus", "1", "--vcpus", "1", "--memory", "1GiB")
        stub.assert_no_pending_responses()
    assert code == 0 and "not admitting new jobs" in capsys.readouterr().err


def test_list_status_and_json(service):
    _, lines = mlfleet("submit", "--image", IMAGE, "--gpus", "1", "--vcpus", "1", "--memory", "1GiB", "--sweep", "a=1,2",
                       "--", "run", "{a}")
    submission = submitted(lines)
    code, table = mlfleet("list", "--submission", submission)
    assert code == 0 and table[0].split()[:7] == ["JOB", "STATE", "TEAM", "PRI", "ATTEMPT", "RUNS", "OWNER"]
    assert len(table) == 3 and all(" QUEUED " in row and " moto " in row for row in table[1:])
    _, listed = mlfleet("list", "--json")
    jobs = json.loads("\n".join(listed))
    assert {j["submission_id"] for j in jobs} == {submission}
    _, status = mlfleet("status", jobs[0]["job_id"])
    assert json.loads("\n".join(status))["reasons"][0]["reason"] == "submitted"
    assert json.loads("\n".join(status))["reserved"] is None
    assert mlfleet("list", "--state", "DONE")[0] == 2
    # A job the scheduler bought an instance for says so while it boots.
    assert ledger().reserve(jobs[0]["job_id"], 0, (HOME, "gpu4", "mlfleet-dev-gpu4/20261122T120000/0"), now=1.0)
    _, table = mlfleet("list", "--submission", submission)
    assert sum(f"new gpu4 instance {HOME}" in row for row in table) == 1
    _, status = mlfleet("status", jobs[0]["job_id"])
    assert json.loads("\n".join(status))["reserved"]["fleet"] == "gpu4"


SMALL = ("--image", IMAGE, "--gpus", "1", "--vcpus", "1", "--memory", "1GiB")


@pytest.mark.parametrize("default_team, argv, fragment", [
    (None, ["--team", "visoin"], "team='visoin': not a team of this environment (nlp, vision); did you mean vision?"),
    (None, [], "team: not given, and this environment shares its GPUs between teams (nlp, vision)"),
    ("nlp", ["--team", "audio"], "team='audio': not a team of this environment (nlp, vision)"),
    (None, ["--team", "nlp", "--priority", "12"], "priority=12: must be <= 9"),
])
def test_a_team_the_stack_does_not_list_or_a_bad_priority_is_refused(service, capsys, default_team, argv, fragment):
    set_teams(teams_json({"nlp": (1, None), "vision": (3, 8)}, default_team=default_team))
    code, _ = mlfleet("submit", *SMALL, *argv)
    assert code == 2 and fragment in capsys.readouterr().err
    assert ledger().by_state(L.QUEUED) == [] and queued_messages(service["queue"]) == []


def test_team_and_priority_are_recorded_and_listed(service):
    set_teams(teams_json({"nlp": (1, None), "vision": (3, 8)}, default_team="nlp"))
    _, lines = mlfleet("submit", *SMALL, "--team", "vision", "--priority", "8")
    _, defaulted = mlfleet("submit", *SMALL)
    urgent, routine = ledger().by_submission(submitted(lines))[0], ledger().by_submission(submitted(defaulted))[0]
    assert (urgent.spec.team, urgent.spec.priority) == ("vision", 8)
    assert (routine.spec.team, routine.spec.priority) == ("nlp", 5)  # the stack's default team, the default priority
    _, table = mlfleet("list")
    rows = {row.split()[0]: row.split() for row in table[1:]}
    assert rows[urgent.job_id][2:4] == ["vision", "8"] and rows[routine.job_id][2:4] == ["nlp", "5"]
    _, status = mlfleet("status", urgent.job_id)
    assert json.loads("\n".join(status))["spec"]["priority"] == 8


def test_a_stack_without_its_teams_parameter_is_named(service, capsys):
    boto3.client("ssm", HOME).delete_parameter(Name=f"/mlfleet/{ENV}/teams")
    assert mlfleet("submit", *SMALL, "--", "run")[0] == 2
    assert f"parameter /mlfleet/{ENV}/teams does not exist; run `pulumi up`" in capsys.readouterr().err


def test_cancel_a_queued_and_a_running_job_and_cancel_again(service):
    instances = build_fleet(size=1)
    _, lines = mlfleet("submit", "--image", IMAGE, "--gpus", "1", "--vcpus", "1", "--memory", "1GiB", "--sweep", "a=1,2",
                       "--", "run", "{a}")
    first, second = sorted(r.job_id for r in ledger().by_submission(submitted(lines)))
    # The second job runs: a task on the fleet's machine, recorded in the ledger as the scheduler does.
    ecs = boto3.client("ecs", HOME)
    arn = next(iter(instances.values()))
    task = ecs.start_task(cluster=CLUSTER, taskDefinition=FAMILY, containerInstances=[arn], startedBy=second)["tasks"][0]
    placement = L.Placement(HOME, "gpu1", CLUSTER, arn, next(iter(instances)), "g5.12xlarge", task["taskArn"])
    record = ledger().get(second)
    ledger().transition(second, L.STARTING, expect_states=[L.QUEUED], expect_attempt=0, reason="t", now=1.0,
                        attempt=1, placement=placement)
    ledger().transition(second, L.RUNNING, expect_states=[L.STARTING], expect_attempt=1, reason="t", now=2.0,
                        runs=record.runs + 1)

    code, lines = mlfleet("cancel", submitted(lines))
    assert code == 0 and lines == [f"{first}: cancelled",
                                   f"{second}: cancelled; task {task['taskArn'].rsplit('/', 1)[-1]} stopping"]
    assert ecs.describe_tasks(cluster=CLUSTER, tasks=[task["taskArn"]])["tasks"][0]["desiredStatus"] == "STOPPED"
    assert {ledger().get(j).state for j in (first, second)} == {L.CANCELLED}
    assert mlfleet("cancel", first)[1] == [f"{first}: already CANCELLED"]
    assert ledger().get(first).last_reason == "cancelled by moto"  # who: the caller's IAM name (moto's user)


def test_follow_prints_each_change_until_the_jobs_end(service):
    _, lines = mlfleet("submit", "--image", IMAGE, "--gpus", "1", "--vcpus", "1", "--memory", "1GiB", "--sweep", "a=1,2",
                       "--", "run", "{a}")
    submission = submitted(lines)
    job_a, job_b = sorted(r.job_id for r in ledger().by_submission(submission))
    steps = iter([(job_a, L.CANCELLED), (job_b, L.CANCELLED)])

    def sleep(_):  # the world moves on between two looks
        job_id, state = next(steps)
        ledger().transition(job_id, state, expect_states=[L.QUEUED], expect_attempt=0, reason="cancelled by test", now=5.0)

    printed: list[str] = []
    service_view = cli.discover(ENV, HOME)
    assert cli.follow(service_view, submission, out=printed.append, sleep=sleep, max_polls=10) == 0
    assert sum("submitted" in p for p in printed) == 2 and sum("cancelled by test" in p for p in printed) == 2


def test_follow_exits_nonzero_when_a_job_failed(service):
    _, lines = mlfleet("submit", "--image", IMAGE, "--gpus", "1", "--vcpus", "1", "--memory", "1GiB")
    (job,) = [r.job_id for r in ledger().by_submission(submitted(lines))]
    ledger().transition(job, L.STARTING, expect_states=[L.QUEUED], expect_attempt=0, reason="t", now=1.0, attempt=1)
    ledger().transition(job, L.FAILED, expect_states=[L.STARTING], expect_attempt=1, reason="exit code 2", now=2.0)
    assert cli.follow(cli.discover(ENV, HOME), job, out=lambda _: None, sleep=lambda _: None) == 1


def test_an_undeployed_stack_and_missing_settings_are_named(aws, capsys, monkeypatch):
    assert mlfleet("list")[0] == 2 and "is stack 'dev' deployed" in capsys.readouterr().err
    for name in ("MLFLEET_ENVIRONMENT", "MLFLEET_REGION"):
        monkeypatch.delenv(name, raising=False)
    assert cli.main(["list"]) == 2 and "--environment" in capsys.readouterr().err


def test_the_documented_policy_is_what_the_command_declares():
    rendered = json.dumps(cli.policy("dev", "us-east-1", "123456789012"), indent=2, sort_keys=True)
    docs = (ROOT / "docs" / "jobs.md").read_text()
    assert rendered in docs


def test_the_log_stream_container_is_the_task_definitions():
    from components.compute.cluster import JOB_CONTAINER_NAME

    assert cli.JOB_CONTAINER == JOB_CONTAINER_NAME


def test_the_installed_command_runs():
    command = shutil.which("mlfleet", path=str(Path(sys.executable).parent))
    assert command, "mlfleet is not installed next to this Python (pip install -e .)"
    result = subprocess.run([command, "--help"], capture_output=True, text=True, cwd="/")
    assert result.returncode == 0 and "submit" in result.stdout


def put_raw(job_id: str, change) -> None:
    """A hand edit of the job's item."""
    dynamodb = boto3.client("dynamodb", HOME)
    item = dynamodb.get_item(TableName=f"mlfleet-{ENV}-jobs", Key={"job_id": {"S": job_id}})["Item"]
    change(item)
    dynamodb.put_item(TableName=f"mlfleet-{ENV}-jobs", Item=item)


def test_list_follow_and_cost_show_the_readable_jobs_and_name_those_they_cannot_read(service, monkeypatch):
    _, lines = mlfleet("submit", *SMALL, "--sweep", "a=1,2", "--", "run", "{a}")
    submission = submitted(lines)
    good, bad = sorted(r.job_id for r in ledger().by_submission(submission))
    put_raw(bad, lambda item: item.update(attempt={"S": "one"}))
    note = f"job record(s) could not be read and are not {{}}: {bad}: field attempt='one' is not an integer >= 0 "
    monkeypatch.setattr(cli.watch, "_sleep", lambda _: (_ for _ in ()).throw(KeyboardInterrupt))
    for argv, what in [(["list"], "listed"), (["list", "--json"], "listed"), (["list", "--submission", submission], "listed"),
                       (["cost"], "counted"), (["follow", submission], "followed")]:
        code, out, err = run_mlfleet(*argv)
        assert code in (0, 130) and (good in "\n".join(out) or argv[0] == "cost") and bad not in "\n".join(out)
        assert err[0].startswith(f"mlfleet: 1 {note.format(what)}"), (argv, err)
    assert run_mlfleet("cost")[1][-1].split()[:2] == ["total", "1"]
    put_raw(good, lambda item: item.pop("spec"))
    code, _, err = run_mlfleet("follow", submission)
    assert code == 2 and err == [f"mlfleet: submission {submission}: none of its jobs can be read from the ledger: "
                                 f"{good}: field 'spec' is missing; {bad}: field attempt='one' is not an integer >= 0; "
                                 "`mlfleet quarantine` shows such records"]


def test_follow_waits_for_an_unreadable_running_job_and_does_not_call_an_unknown_ending_a_success(service):
    _, lines = mlfleet("submit", *SMALL, "--sweep", "a=1,2", "--", "run", "{a}")
    submission = submitted(lines)
    good, bad = sorted(r.job_id for r in ledger().by_submission(submission))
    ledger().transition(good, L.CANCELLED, expect_states=[L.QUEUED], expect_attempt=0, reason="t", now=1.0)
    looks: list[str] = []

    def follow() -> int:
        looks.clear()
        return cli.follow(cli.discover(ENV, HOME), submission, out=lambda _: None,
                          sleep=lambda _: looks.append("slept"), max_polls=3)

    # Says it is queued: the scheduler quarantines it when it next reads it, so follow waits for that.
    put_raw(bad, lambda item: item.update(attempt={"S": "one"}))
    assert follow() == 3 and len(looks) == 2  # looked three times: still waiting
    # Says it ended, and cannot be read: how it ended is unknown, which is not a success.
    put_raw(bad, lambda item: item.update(state={"S": L.SUCCEEDED}))
    assert follow() == 2 and looks == []
    put_raw(bad, lambda item: item.update(state={"S": "DONE"}))  # a state no query reads
    assert follow() == 2
    # Quarantined: dead-lettered with the reason, as a job that cannot run is.
    put_raw(bad, lambda item: item.update(state={"S": L.QUEUED}))
    assert ledger().quarantine(ledger().dynamodb.get_item(TableName=f"mlfleet-{ENV}-jobs", Key={
        "job_id": {"S": bad}})["Item"], "field attempt='one' is not an integer >= 0", 2.0, "scheduler")
    assert follow() == 1 and looks == []
    code, _, err = run_mlfleet("follow", submission)
    assert code == 1 and len(err) == 1 and bad in err[0] and "quarantined" in err[0]


def test_json_shows_what_a_hand_edit_left_that_json_has_no_form_for(service):
    _, lines = mlfleet("submit", *SMALL)
    (job,) = [r.job_id for r in ledger().by_submission(submitted(lines))]
    put_raw(job, lambda item: item["reasons"]["L"][0]["M"].update(note={"SS": ["b", "a"]}, raw={"B": b"\x00"}))
    code, out, _ = run_mlfleet("status", job)
    first = json.loads("\n".join(out))["reasons"][0]
    assert code == 0 and (first["note"], first["raw"]) == (["a", "b"], "b'\\x00'")
    assert run_mlfleet("list", "--json")[0] == 0
