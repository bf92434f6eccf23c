"""Every error of the mlfleet command is one message naming the problem and the fix, never a traceback: spec
files (missing, unreadable, malformed YAML and JSON with line and column), Ctrl-C while following or while a
large submission is written (exit 130, with what was written and how to cancel it), a reader that goes away
(`mlfleet ... | head`, exit 141) and AWS refusing (credentials, access denied: the action and the policy)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import boto3
import pytest
from botocore.exceptions import ClientError
from conftest import ENV, HOME, run_mlfleet

from lambdas.common.aws import client
from lambdas.jobs import cli
from lambdas.jobs import ledger as L
from lambdas.jobs.cli import errors, submission

IMAGE = "ghcr.io/team/train:3"
SIZE = ["--image", IMAGE, "--gpus", "1", "--vcpus", "1", "--memory", "1GiB"]


mlfleet = run_mlfleet


def ledger() -> L.Ledger:
    return L.Ledger(boto3.client("dynamodb", HOME), f"mlfleet-{ENV}-jobs")


# --- spec files -----------------------------------------------------------------------------------------

@pytest.mark.parametrize(("name", "text", "message"), [
    ("bad.yaml", "image: ghcr.io/team/train:3\ngpus: [1\nvcpus: 2\n",
     "bad.yaml:3:6: not valid YAML: expected ',' or ']', but got ':' (while parsing a flow sequence)"),
    ("tabs.yaml", "image: x\n\tgpus: 1\n", "tabs.yaml:2:1: not valid YAML: found character '\\t' that cannot start any token"),
    ("bad.json", '{"image": "x",\n "gpus": }', "bad.json:2:10: not valid JSON: Expecting value"),
    ("list.yaml", "- image: x\n", "list.yaml: holds a list, not a mapping of image, command"),
    ("empty.yaml", "", "empty.yaml: is empty; a job spec is a mapping of image, command"),
    # Regression: two lines, the second 'in "<unicode string>", position 17' (no line or column).
    ("control.yaml", "image: x\ngpus: 1\x08\n",
     "control.yaml:2:8: not valid YAML: character #x0008: special characters are not allowed"),
])
def test_a_malformed_spec_file_is_one_message_with_file_line_and_column(tmp_path, name, text, message):
    error = one_error_for_spec_file(tmp_path, name, text)
    assert error.startswith("mlfleet: spec file " if "is empty" in message or "holds" in message else "mlfleet: ")
    assert message in error.replace(str(tmp_path) + "/", "")


def one_error_for_spec_file(tmp_path, name: str, text: str, *argv: str) -> str:
    """`mlfleet submit --dry-run -f <file>` with the file holding `text`: exit 2, nothing on stdout, one line."""
    path = tmp_path / name
    path.write_text(text)
    code, out, err = mlfleet("submit", "--dry-run", *argv, "-f", str(path))
    assert (code, out, len(err)) == (2, [], 1)
    return err[0]


@pytest.mark.parametrize(("name", "text", "message"), [
    # Regressions: each raised a traceback (ValueError, AttributeError, RecursionError), not one message.
    ("big.json", '{"gpus": ' + "1" * 5000 + "}", "big.json: not valid JSON: Exceeds the limit (4300 digits)"),
    ("big.yaml", "gpus: " + "1" * 5000 + "\n", "big.yaml: not valid YAML: Exceeds the limit (4300 digits)"),
    ("deep.json", "[" * 100_000 + "]" * 100_000, "deep.json: not valid JSON: nested too deeply"),
    ("deep.yaml", "[" * 100_000 + "]" * 100_000, "deep.yaml: not valid YAML: nested too deeply"),
    ("date.yaml", "image: 2026-13-45\n", "date.yaml: not valid YAML: month must be in 1..12"),
    ("tag.yaml", "image: !!timestamp x\n", "tag.yaml: not valid YAML: 'NoneType' object has no attribute"),
    ("int.yaml", "gpus: !!int x\n", "int.yaml: not valid YAML: invalid literal for int()"),
])
def test_a_spec_file_python_cannot_build_is_one_message_naming_the_file(tmp_path, name, text, message):
    error = one_error_for_spec_file(tmp_path, name, text, "--stack", "dev")
    assert error.startswith(f"mlfleet: {tmp_path / name}") and message in error.replace(str(tmp_path) + "/", "")


@pytest.mark.parametrize(("name", "text", "message"), [
    # Regressions: the last value was kept and the first dropped without a word (`gpus: 1` ... `gpus: 2`).
    ("twice.yaml", "image: ghcr.io/team/train:3\ngpus: 1\nvcpus: 1\nmemory_mib: 1024\ngpus: 2\n",
     "twice.yaml:5:1: not valid YAML: found key 'gpus' twice (first on line 2): keep one (while constructing a mapping)"),
    ("env.yaml", "environment:\n  A: x\n  A: y\n",
     "env.yaml:3:3: not valid YAML: found key 'A' twice (first on line 2): keep one (while constructing a mapping)"),
    ("twice.json", '{"image": "ghcr.io/team/train:3", "gpus": 1,\n "environment": {"A": "x", "A": "y"}}',
     "twice.json: key 'A' given twice in one mapping: keep one"),
])
def test_a_key_given_twice_in_a_spec_file_is_refused_not_overwritten(tmp_path, name, text, message):
    error = one_error_for_spec_file(tmp_path, name, text, "--stack", "dev")
    assert error.startswith("mlfleet: ") and message in error.replace(str(tmp_path) + "/", "")


def test_a_yaml_merge_key_still_lets_a_mapping_override_what_it_merges(tmp_path):
    path = tmp_path / "merge.yaml"
    path.write_text("base: &base {vcpus: 1, memory_mib: 1024}\nspec:\n  <<: *base\n  vcpus: 2\n")
    assert submission.read_spec_file(str(path))["spec"] == {"vcpus": 2, "memory_mib": 1024}


@pytest.mark.parametrize(("key", "flag", "value", "shown"), [("environment", "--env", "[A=1]", "['A=1']"),
                                                           ("secrets", "--secret", "7", "7")])
def test_a_file_mapping_of_the_wrong_shape_under_a_flag_is_named(tmp_path, key, flag, value, shown):
    """Regression: the file's `environment: [A=1]` with --env B=2 raised TypeError ('list' object is not a mapping)."""
    path = tmp_path / "spec.yaml"
    path.write_text(f"{key}: {value}\n")
    code, out, err = mlfleet("submit", "--dry-run", "--stack", "dev", "-f", str(path), *SIZE, flag, "B=x", "--", "run")
    assert (code, out, err[0]) == (2, [], "mlfleet: invalid job spec:")
    assert err[1].startswith(f"  - {key}={shown}: must be a mapping of NAME to")


def test_a_missing_unreadable_or_directory_spec_file_is_named_with_the_fix(tmp_path):
    assert mlfleet("submit", "-f", str(tmp_path / "nope.yaml"))[2] == [
        f"mlfleet: spec file {tmp_path}/nope.yaml: no such file (give its path relative to {os.getcwd()}, or an "
        "absolute one)"]
    assert "is a directory" in mlfleet("submit", "-f", str(tmp_path))[2][0]
    binary = tmp_path / "spec.yaml"
    binary.write_bytes(b"\xff\xfe image")
    assert "not text (byte 0 is not UTF-8)" in mlfleet("submit", "-f", str(binary))[2][0]
    if os.geteuid() != 0:  # root reads any file
        secret = tmp_path / "secret.yaml"
        secret.write_text("image: x")
        secret.chmod(0)
        assert "not readable by you" in mlfleet("submit", "-f", str(secret))[2][0]


# --- Ctrl-C ---------------------------------------------------------------------------------------------

def test_ctrl_c_while_following_stops_watching_not_the_jobs(service, monkeypatch):
    _, lines, _ = mlfleet("submit", *SIZE)
    submission = lines[0].split(":")[0]

    def interrupted(_):
        raise KeyboardInterrupt

    monkeypatch.setattr("lambdas.jobs.cli.watch._sleep", interrupted)
    code, _, err = mlfleet("follow", submission)
    assert code == errors.INTERRUPTED == 130
    assert err == [f"mlfleet: stopped following {submission}; its jobs go on (`mlfleet follow {submission}` watches "
                   f"again, `mlfleet cancel {submission}` stops them)"]
    assert {r.state for r in ledger().by_submission(submission)} == {L.QUEUED}


def test_ctrl_c_during_a_large_submission_says_what_was_written_and_how_to_cancel_it(service, linear):
    calls = []

    def third_transaction_interrupted(**_):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt

    client("dynamodb", HOME).meta.events.register("before-call.dynamodb.TransactWriteItems",
                                                  third_transaction_interrupted)
    code, out, err = mlfleet("submit", *SIZE, "--batches", "0:500:1", "--", "infer", "{start}")
    submission = out[0].split(":")[0]
    assert code == 130 and out == [f"{submission}: submitting 500 job(s) to {ENV}"]  # the id came first
    assert err[-1] == (f"mlfleet: interrupted: 200 of 500 jobs of {submission} were written to the ledger (a batch "
                       f"in flight may have been written too); to remove them: mlfleet -e {ENV} --region {HOME} "
                       f"cancel {submission}")
    assert len(ledger().by_submission(submission)) == 200
    code, lines, _ = mlfleet("cancel", submission)
    assert code == 0 and len(lines) == 200 and {r.state for r in ledger().by_submission(submission)} == {L.CANCELLED}


def test_a_large_submission_reports_progress(service, linear, monkeypatch):
    monkeypatch.setattr(submission, "PROGRESS_FROM", 500)  # the same steps as 1,000 and more, in a tenth of the time
    code, out, err = mlfleet("submit", *SIZE, "--batches", "0:500:1", "--", "infer", "{start}")
    assert code == 0 and out[0].endswith("submitting 500 job(s) to dev") and out[-1].split(": ")[1].startswith(
        "queued 500 job(s)")
    # a line per transaction of 100 (a fifth of the work), a line per tenth of the messages
    assert err[:5] == [f"  written to the ledger: {n} of 500" for n in (100, 200, 300, 400, 500)]
    assert err[5:] == [f"  queued: {n} of 500" for n in range(50, 501, 50)]
    monkeypatch.setattr(submission, "PROGRESS_FROM", 501)
    assert mlfleet("submit", *SIZE, "--batches", "0:500:1", "--", "infer", "{start}")[2] == []  # small: quiet


# --- a reader that goes away ----------------------------------------------------------------------------

def test_a_closed_pipe_ends_the_command_quietly(service):
    def gone(_):
        raise BrokenPipeError

    err: list[str] = []
    assert cli.main(["-e", ENV, "--region", HOME, "list"], out=gone, err=err.append) == errors.BROKEN_PIPE == 141
    assert err == []


def test_the_installed_command_piped_into_head_prints_no_traceback():
    command = shutil.which("mlfleet", path=str(Path(sys.executable).parent))
    result = subprocess.run(f"{command} -e dev --region us-east-1 policy --account 123456789012 | head -1",
                            shell=True, capture_output=True, text=True, cwd="/")
    assert (result.stdout, result.stderr) == ("{\n", "")


# --- AWS refusing ---------------------------------------------------------------------------------------

def test_access_denied_names_the_action_and_the_policy_command(service):
    def refuse(**_):
        raise ClientError({"Error": {"Code": "AccessDeniedException", "Message": "User: arn:aws:sts::123456789012:"
                                     "assumed-role/ds/ana is not authorized to perform: dynamodb:PutItem"}},
                          "TransactWriteItems")

    client("dynamodb", HOME).meta.events.register("before-call.dynamodb.TransactWriteItems", refuse)
    code, out, err = mlfleet("submit", *SIZE)
    submission = out[0].split(":")[0]
    assert code == errors.AWS_FAILED
    assert err == [
        "mlfleet: AWS refused dynamodb:PutItem (TransactWriteItems): User: arn:aws:sts::123456789012:assumed-role/ds/ana "
        "is not authorized to perform: dynamodb:PutItem. `mlfleet -e dev --region us-east-1 policy --account <account "
        "id>` prints the policy the command needs; ask your AWS administrator to attach it to your role",
        f"  0 of 1 jobs of {submission} were written to the ledger (a batch in flight may have been written too); to "
        f"remove them: mlfleet -e dev --region us-east-1 cancel {submission}"]


@pytest.mark.parametrize(("code", "fragment"), [
    ("ExpiredTokenException", "AWS did not accept your credentials (ExpiredTokenException: token expired): sign in"),
    ("ThrottlingException", "AWS is throttling GetParameter even after retries (ThrottlingException): wait a minute"),
    ("ValidationException", "AWS refused GetParameter: ValidationException: token expired"),
])
def test_other_aws_refusals_are_one_line_each(service, code, fragment):
    def refuse(**_):
        raise ClientError({"Error": {"Code": code, "Message": "token expired"}}, "GetParameter")

    client("ssm", HOME).meta.events.register("before-call.ssm.GetParameter", refuse)
    result, _, err = mlfleet("list")
    assert result == 1 and err == [f"mlfleet: {err[0][9:]}"] and fragment in err[0]


def test_no_credentials_says_how_to_sign_in(monkeypatch, tmp_path):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SECURITY_TOKEN", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    code, _, err = mlfleet("list")
    assert code == 1 and err == ["mlfleet: no AWS credentials found: sign in (e.g. `aws sso login --profile <profile>` and "
                                 "`export AWS_PROFILE=<profile>`), or set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"]


def test_the_action_of_each_renamed_operation_is_in_the_policy():
    for operation, action in errors.ACTION_OF_OPERATION.items():
        assert action in cli.permissions.ACTIONS, operation
    assert errors.iam_action("GetLogEvents", cli.permissions.ACTIONS) == "logs:GetLogEvents"


def test_dry_run_json_lists_every_job(service):
    code, out, _ = mlfleet("submit", *SIZE, "--dry-run", "--json", "--sweep", "seed=1,2", "--", "train", "{seed}")
    document = json.loads("\n".join(out))
    assert code == 0 and not document["queued"] and [j["command"] for j in document["jobs"]] == [
        ["train", "1"], ["train", "2"]]
