"""The command's output shown in README.md and docs/jobs.md is what the command prints: each sample is produced
here, by the command itself (dry runs from the stack files, the rest against moto), and must appear verbatim
in its document. `python tests/jobs/test_doc_samples.py` prints the samples to paste after a change."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import boto3
import pytest
from moto import mock_aws

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(Path(__file__).parent)]

from conftest import (ENV, HOME, create_notification_topics, create_queues, create_table,  # noqa: E402
                      job_service_value, open_admission, publish_job_service, set_teams, teams_json)

from lambdas.common.aws import reset_clients  # noqa: E402
from lambdas.jobs import cli  # noqa: E402
from lambdas.jobs import ledger as L  # noqa: E402
from lambdas.jobs.cli import submission  # noqa: E402

SUBMISSION = "sub-20261123093000-3fa2c1"
IMAGE = "ghcr.io/team/train:3"


def command(argv: list[str]) -> str:
    """`$ mlfleet ...` and what it prints (stdout and stderr, as a terminal shows them)."""
    printed: list[str] = []
    cli.main(argv, out=printed.append, err=printed.append)
    shown = " ".join(a if re.fullmatch(r"[\w@./:=,{}-]+", a) else f"'{a}'" for a in argv)
    return f"$ mlfleet {shown}\n" + "\n".join(printed)


def samples() -> dict[str, str]:
    """Every sample, by the document it belongs in."""
    import lambdas.jobs.spec as spec

    original = submission.new_submission_id
    submission.new_submission_id = lambda now=None: SUBMISSION
    try:
        readme = [
            command(["submit", "--dry-run", "--stack", "dev", "--image", IMAGE, "--gpus", "1", "--vcpus", "8", "--memory",
                     "30GiB", "--", "python", "train.py"]),
            command(["submit", "--dry-run", "--stack", "dev", "--image", IMAGE, "--gpus", "1", "--vcpus", "8", "--memory",
                     "29GiB", "--sweep", "lr=0.1,0.01,0.001", "--", "python", "train.py", "--lr", "{lr}"]),
        ]
        jobs = [
            command(["submit", "--dry-run", "--stack", "dev", "--gpus", "0", "--vcpus", "0", "--memory", "1GiB"]),
            command(["submit", "--dry-run", "--stack", "prod", "--image", "ghcr.io/team/train:3", "--gpus", "1",
                     "--vcpus", "4", "--memory", "16GiB"]),
            command(["submit", "--dry-run", "--stack", "prod", "--image", "public.ecr.aws/team/train:3", "--gpus",
                     "1", "--vcpus", "4", "--memory", "16GiB", "--regions", "us-east-2", "--", "python", "train.py"]),
            command(["submit", "--dry-run", "--stack", "dev", "--image", IMAGE, "--gpus", "1", "--vcpus", "4",
                     "--memory", "14GiB", "--sweep", "seed=1,2,3", "--", "python", "train.py"]),
            command(["submit", "--dry-run", "--stack", "dev", "--image", "ghcr.io/team/infer:7", "--gpu-memory", "6GiB",
                     "--vcpus", "2", "--memory", "6GiB", "--sweep", "shard=0,1,2,3", "--", "python", "serve.py",
                     "--shard", "{shard}"]),
            command(["submit", "--dry-run", "--stack", "dev", "--image", "ghcr.io/team/infer:7", "--gpu-memory", "30GiB",
                     "--vcpus", "2", "--memory", "6GiB", "--", "python", "serve.py"]),
        ]
        subscribe, submit, mine, cost = moto_samples()
        jobs += [subscribe, submit, mine, cost]
        readme += [mine, cost]
    finally:
        submission.new_submission_id = original
    del spec
    # docs/jobs.md repeats the README's samples where it explains them.
    return {"README.md": "\n".join(readme), "docs/jobs.md": "\n".join(readme + jobs)}


def moto_samples() -> list[str]:
    env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": HOME}
    saved = {k: __import__("os").environ.get(k) for k in env}
    __import__("os").environ.update(env)
    try:
        with mock_aws():
            reset_clients()
            create_table()
            queue, dlq = create_queues()
            topics = create_notification_topics()
            publish_job_service(job_service_value(queueUrl=queue, deadLetterQueueUrl=dlq, notifications=topics))
            open_admission()
            set_teams(teams_json())
            base = ["-e", ENV, "--region", HOME]
            shown = [command([*base, "notify", "subscribe", "ana@example.com"]),
                     command([*base, "submit", "--image", IMAGE, "--gpus", "1", "--vcpus", "4", "--memory", "14GiB",
                              "--team", "vision", "--notify", "ana@example.com", "--retry-on-exit-codes", "137",
                              "--sweep", "lr=0.1,0.01,0.001", "--", "python", "train.py", "--lr", "{lr}"])]
            ledger = L.Ledger(boto3.client("dynamodb", HOME), f"mlfleet-{ENV}-jobs")
            first, second, third = sorted(r.job_id for r in ledger.by_submission(SUBMISSION))
            for job, state, reason, cost in (
                    (first, L.SUCCEEDED, "exit code 0", L.Cost(0.2383, 0.503, 7200, 1)),
                    (second, L.FAILED, "exit code 1 (Essential container in task exited): not retried "
                                       "(retry_on_exit_codes is [137])", L.Cost(0.0397, 0.0838, 1200, 1))):
                ledger.transition(job, L.STARTING, expect_states=[L.QUEUED], expect_attempt=0, reason="placed", now=1.0,
                                  attempt=1)
                ledger.transition(job, state, expect_states=[L.STARTING], expect_attempt=1, reason=reason, now=2.0,
                                  runs=1, cost=cost)
            shown.append(command([*base, "list", "--mine", "--state", "QUEUED", "--state", "FAILED"]))
            shown.append(re.sub(r"since [^,]+", "since <7 days ago>", command([*base, "cost", "--by", "team"])))
            del third
        return shown
    finally:
        for k, v in saved.items():
            if v is None:
                __import__("os").environ.pop(k, None)
            else:
                __import__("os").environ[k] = v
        reset_clients()


@pytest.fixture(scope="module")
def produced():
    return samples()


@pytest.mark.parametrize("document", ["README.md", "docs/jobs.md"])
def test_each_sample_is_in_its_document(produced, document):
    text = (ROOT / document).read_text()
    for sample in produced[document].split("\n$ "):
        sample = sample if sample.startswith("$ ") else "$ " + sample
        assert sample in text, f"{document} lacks (run python tests/jobs/test_doc_samples.py):\n{sample}"


if __name__ == "__main__":
    for document, text in samples().items():
        print(f"===== {document}\n{text}\n")
