"""The job command's output docs/first-deploy.md tells a new user to expect ("A test job") is what the command
prints against a deployed environment: the documented commands run here against moto, with the job service
as the stack publishes it, and each printed block must appear in the checklist with its placeholders."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import (ACCOUNT, ENV, HOME, create_notification_topics, create_queues, create_table, job_service_value,
                      open_admission, publish_job_service, set_teams, teams_json)

from lambdas.common.aws import reset_clients
from lambdas.jobs import cli
from lambdas.jobs.cli import submission

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "first-deploy.md"
SUBMISSION = "sub-20261123093000-3fa2c1"


def documented_commands(text: str) -> list[list[str]]:
    """The `$ mlfleet ... submit ...` lines of section 5, as argument lists, placeholders filled in."""
    section = text.split("## 5. A test job", 1)[1].split("\n## ", 1)[0]
    lines = re.findall(r"^\s*\$ mlfleet (.*submit.*)$", section, flags=re.M)
    return [line.replace("<account>", ACCOUNT).split() for line in lines]


def as_documented(printed: str) -> str:
    """What the command printed, with the values the checklist shows as placeholders."""
    return printed.replace(SUBMISSION, "sub-<time>-<hex>").replace(ACCOUNT, "<account>")


@pytest.fixture
def printed(aws, monkeypatch) -> list[str]:
    create_table()
    queue, dlq = create_queues()
    publish_job_service(job_service_value(queueUrl=queue, deadLetterQueueUrl=dlq,
                                          notifications=create_notification_topics()))
    open_admission()
    set_teams(teams_json())  # as a stack without teams writes it
    reset_clients()
    monkeypatch.setattr(submission, "new_submission_id", lambda now=None: SUBMISSION)
    outputs = []
    commands = documented_commands(DOC.read_text())
    assert [c[:5] for c in commands] == [["-e", ENV, "--region", HOME, "submit"]] * 2
    assert "--dry-run" in commands[0] and "--dry-run" not in commands[1]
    for argv in commands:
        lines: list[str] = []
        assert cli.main(argv, out=lines.append, err=lines.append) == 0
        outputs.append(as_documented("\n".join(lines)))
    return outputs


def section_text() -> str:
    """Section 5 with the checklist items' two-space indentation taken off, as a terminal shows it."""
    section = DOC.read_text().split("## 5. A test job", 1)[1].split("\n## ", 1)[0]
    return "\n".join(line.removeprefix("  ") for line in section.splitlines())


def test_the_checklist_shows_what_the_test_job_prints(printed):
    text = section_text()
    for output in printed:
        assert output in text, f"docs/first-deploy.md section 5 should show:\n{output}"


def test_the_sample_check_finds_a_stale_output(printed):
    """The checklist as it was: a shortened first line."""
    stale = section_text().replace(printed[0].splitlines()[0], "sub-<time>-<hex>: would queue 1 job(s)")
    assert printed[0] in section_text() and printed[0] not in stale
