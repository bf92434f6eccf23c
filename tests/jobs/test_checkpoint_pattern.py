"""The checkpoint pattern docs/jobs.md shows, run as it is printed against moto: a first attempt gets
SIGTERM, saves and exits 143; the second attempt, with the same MLFLEET_CHECKPOINT_URI, resumes where
the first stopped.

Where this differs from a real job: `torch` is a stand-in that pickles (torch.save/torch.load keep
their signatures; torch is not a test dependency), the model is a counter, and moto neither enforces the
bucket policy nor the job role's permissions (tests/program/test_checkpoint_buckets.py checks those
documents; tests/rules/test_iam_lint.py lints them against the IAM reference).
"""

from __future__ import annotations

import os
import pickle
import re
import signal
import sys
import types

import boto3
import pytest
from conftest import ACCOUNT, ENV, HOME

from lambdas.jobs.checkpoints import bucket_name, uri
from pulumi_harness import ROOT

JOB_ID = "sub-20261122120000-abcdef-00000"


def documented_pattern() -> str:
    page = (ROOT / "docs" / "jobs.md").read_text()
    section = page[page.index("## Checkpoints"):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


class Counter:
    """A model (or optimizer) whose whole state is how many steps it took."""

    def __init__(self) -> None:
        self.steps = 0

    def state_dict(self) -> dict:
        return {"steps": self.steps}

    def load_state_dict(self, state: dict) -> None:
        self.steps = state["steps"]


def fake_torch() -> types.ModuleType:
    module = types.ModuleType("torch")
    module.save = lambda obj, file: pickle.dump(obj, file)
    module.load = lambda file, weights_only: pickle.load(file)
    return module


def attempt(total_steps: int, sigterm_at: int | None) -> dict:
    """Run the documented code once; returns what it saw (steps trained, results saved, exit code)."""
    model = Counter()
    seen = {"steps": [], "results": False, "exit": None, "model": model}

    def train_step(model_, optimizer, step):
        model_.steps += 1
        seen["steps"].append(step)
        if step == sigterm_at:
            os.kill(os.getpid(), signal.SIGTERM)  # what the ECS agent sends after StopTask

    namespace = {"build_model": lambda: model, "build_optimizer": Counter, "train_step": train_step,
                 "total_steps": total_steps, "save_results": lambda: seen.__setitem__("results", True),
                 "__name__": "job"}
    try:
        exec(compile(documented_pattern(), "docs/jobs.md", "exec"), namespace)
    except SystemExit as exit_:
        seen["exit"] = exit_.code
    return seen


@pytest.fixture
def job(aws, monkeypatch):
    bucket = bucket_name(ENV, ACCOUNT, HOME)
    boto3.client("s3", HOME).create_bucket(Bucket=bucket)
    monkeypatch.setenv("MLFLEET_CHECKPOINT_URI", uri(bucket, JOB_ID))
    monkeypatch.setenv("AWS_REGION", HOME)
    monkeypatch.setitem(sys.modules, "torch", fake_torch())
    previous = signal.getsignal(signal.SIGTERM)
    yield bucket
    signal.signal(signal.SIGTERM, previous)


def test_the_documented_job_saves_on_sigterm_and_the_next_attempt_resumes(job):
    first = attempt(total_steps=10, sigterm_at=3)
    assert first["exit"] == 143 and first["steps"] == [0, 1, 2, 3] and not first["results"]
    saved = boto3.client("s3", HOME).get_object(Bucket=job, Key=f"jobs/{JOB_ID}/latest.pt")["Body"].read()
    assert pickle.loads(saved)["step"] == 4

    second = attempt(total_steps=10, sigterm_at=None)
    assert second["exit"] is None and second["results"]
    assert second["steps"] == [4, 5, 6, 7, 8, 9]  # resumed after the last saved step, not from zero
    assert second["model"].steps == 10


def test_the_first_attempt_starts_from_zero_when_nothing_was_saved(job):
    only = attempt(total_steps=3, sigterm_at=None)
    assert only["steps"] == [0, 1, 2] and only["results"] and only["exit"] is None
