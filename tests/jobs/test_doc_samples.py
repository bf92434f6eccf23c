"""The command's output shown in README.md and docs/jobs.md is what the command prints: each sample is produced
here, by the command itself (dry runs from the stack files, the rest against moto), and must appear verbatim
in its document. `python tests/jobs/test_doc_samples.py` prints the samples to paste after a change.

Every document (but the benchmark's log) also names only what exists: each `make` target and variable in the
Makefile and mk/*.mk, each `mlfleet` command and flag in the command's parser, each repository path and
`python -m` module in the checkout, each `mlfleet:` config key in the config model, each heading a link points
to."""

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


# --- Names the documents give users: make targets and variables, mlfleet flags, repository paths ----------
DOCUMENTS = ["README.md", *sorted(f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md")
                                  if p.name != "scheduler-benchmark.md")]  # that one is a measurement log
# Named in the documents, not in a checkout: what a command writes, and a file of another repository.
NOT_IN_A_CHECKOUT = {"packer/manifest.json": "make ami", "policy/venv": "make policy-venv",
                     ".github/ACTIONS_VERSIONS.md": "cboyd0319/PyGuard's, cited by docs/ci.md"}


def commands(text: str, program: str) -> list[str]:
    """Each `program ...` command of the text's code (inline spans and fenced blocks), continuation lines
    joined, placeholders such as <home region> as one word, cut at ;, &&, | and a # comment."""
    fenced = re.findall(r"^ *```[^\n]*\n(.*?)^ *```", text, flags=re.M | re.S)
    inline = re.findall(r"`([^`]+)`", re.sub(r"^ *```.*?^ *```", "", text, flags=re.M | re.S))
    found = []
    for code in [*fenced, *inline]:
        code = re.sub(r"<[^>]*>", "X", re.sub(r"\\\n", " ", code))
        for line in code.splitlines():
            for piece in re.split(r";|&&|\\?\||\s#\s", line):
                piece = " ".join(piece.split()).removeprefix("$ ")
                if piece.startswith(program + " "):
                    found.append(piece)
    return found


def makefile_text() -> str:
    return (ROOT / "Makefile").read_text() + "".join(p.read_text() for p in sorted((ROOT / "mk").glob("*.mk")))


def make_problems(document: str, text: str) -> list[str]:
    makefile = makefile_text()
    targets = {t for line in re.findall(r"^([a-z][a-z0-9 -]*):(?!=)", makefile, flags=re.M) for t in line.split()}
    variables = set(re.findall(r"\$\(([A-Z_]+)\)", makefile))
    problems = []
    for command in commands(text, "make"):
        target = command.split()[1]
        if target not in targets:
            problems.append(f"{document}: `{command}`: no target {target} in the Makefile or mk/*.mk")
        problems += [f"{document}: `{command}`: the Makefile reads no {name}"
                     for name in re.findall(r"\b([A-Z][A-Z_]*)=", command) if name not in variables]
    return problems


def mlfleet_problems(document: str, text: str) -> list[str]:
    import argparse

    def options(parser: argparse.ArgumentParser) -> set[str]:
        return {o for action in parser._actions for o in action.option_strings}

    def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
        return next((a.choices for a in parser._actions if isinstance(a, argparse._SubParsersAction)), {})

    top = cli.parser()
    problems = []
    for command in commands(text, "mlfleet"):
        words = command.split()[1:]
        while words and words[0] in ("-e", "--environment", "--region"):
            words = words[2:]
        if not words or not re.fullmatch(r"[a-z][a-z-]*", words[0]):
            continue  # not a command: output such as "mlfleet dev: budget spent"
        parser, words = subcommands(top).get(words[0]), words[1:]
        if parser is None:
            problems.append(f"{document}: `{command}`: mlfleet has no such command")
            continue
        if subcommands(parser) and words:
            parser, words = subcommands(parser).get(words[0]), words[1:]
            if parser is None:
                problems.append(f"{document}: `{command}`: mlfleet has no such command")
                continue
        words = words[:words.index("--")] if "--" in words else words
        problems += [f"{document}: `{command}`: {parser.prog} has no {flag}" for word in words
                     for flag in re.findall(r"^\[?(--?[a-zA-Z][\w-]*)", word) if flag not in options(parser)]
    return problems


def path_problems(document: str, text: str) -> list[str]:
    """Repository paths (under a top-level folder, or a *.md) and `python -m` modules that do not exist."""
    top = sorted(p.name for p in ROOT.iterdir() if p.is_dir() and p.name != "venv" and
                 (p.name == ".github" or not p.name.startswith(".")))
    paths = re.findall(r"(?<![\w./-])((?:%s)/[\w./<>-]*[\w>])" % "|".join(map(re.escape, top)), text)
    problems = []
    for path in paths:
        pattern = re.sub(r"<[^>]*>", "*", path)
        module = ROOT / (path.rsplit(".", 1)[0] + ".py")  # components/resources.child: a function of a module
        if path not in NOT_IN_A_CHECKOUT and not list(ROOT.glob(pattern)) and not module.exists():
            problems.append(f"{document}: {path} does not exist")
    for name in re.findall(r"(?<![\w./-])([\w-]+\.md)\b", text):
        if not ((ROOT / name).exists() or (ROOT / "docs" / name).exists()):
            problems.append(f"{document}: {name} is not in the repository")
    for module in re.findall(r"python -m ([\w.]+)", text):
        base = ROOT.joinpath(*module.split("."))
        if not (base.with_suffix(".py").exists() or (base / "__main__.py").exists()):
            problems.append(f"{document}: python -m {module}: no such module")
    return problems


def config_key_problems(document: str, text: str) -> list[str]:
    """`mlfleet:someKey` (camelCase: tag keys are kebab-case or one word) that the config model does not have.
    A key the model names as removed may be named (to say it is gone), and so may a misspelt key on the line
    of the error that refuses it ("unknown key")."""
    from components.config.model import REMOVED_KEYS, stack_keys

    known = {*stack_keys(), *REMOVED_KEYS}
    return [f"{document}: mlfleet:{key}: no such key in components/config/model.py"
            for line in text.splitlines() if "unknown key" not in line
            for key in re.findall(r"(?<![\w-])mlfleet:([a-z][a-z0-9]*[A-Z][A-Za-z0-9]*)", line) if key not in known]


@pytest.mark.parametrize("document", DOCUMENTS)
def test_every_make_command_mlfleet_flag_and_path_a_document_names_exists(document):
    text = (ROOT / document).read_text()
    problems = make_problems(document, text) + mlfleet_problems(document, text) + path_problems(document, text)
    problems += config_key_problems(document, text)
    assert problems == [], "\n".join(problems)


def test_the_name_checks_find_what_does_not_exist():
    stale = ("Run `make cost-tags` once, then `make ami ENV=dev REGION=us-east-1`.\n\n```bash\n"
             "mlfleet -e dev --region X submit --gpu 1 --image x -- python train.py --lr 1 \\\n    --epochs 3\n"
             "mlfleet watch sub-1; mlfleet notify unsubscribe a@example.com\n```\n"
             "See DESIGN.md and lambdas/jobs/cli/submit.py; run `python -m benchmarks.placment`.\n")
    assert make_problems("x.md", stale) == [
        "x.md: `make cost-tags`: no target cost-tags in the Makefile or mk/*.mk",
        "x.md: `make ami ENV=dev REGION=us-east-1`: the Makefile reads no REGION"]
    assert mlfleet_problems("x.md", stale) == [
        "x.md: `mlfleet -e dev --region X submit --gpu 1 --image x -- python train.py --lr 1 --epochs 3`: "
        "mlfleet submit has no --gpu",
        "x.md: `mlfleet watch sub-1`: mlfleet has no such command",
        "x.md: `mlfleet notify unsubscribe a@example.com`: mlfleet has no such command"]
    assert config_key_problems("x.md", "Set `mlfleet:idleWindowMinute: 60` (not `mlfleet:keep-alive`).\n"
                               "  - mlfleet:natGatway: unknown key (did you mean mlfleet:natGateway?)\n") == [
        "x.md: mlfleet:idleWindowMinute: no such key in components/config/model.py"]
    assert path_problems("x.md", stale) == [
        "x.md: lambdas/jobs/cli/submit.py does not exist", "x.md: DESIGN.md is not in the repository",
        "x.md: python -m benchmarks.placment: no such module"]



# --- Links between the documents, as GitHub renders them -------------------------------------------------
def github_slug(heading: str) -> str:
    """The id GitHub gives a heading (github-slugger over the rendered text): no code marks, emphasis or link
    targets, lower case, punctuation dropped but for - and _, each space a -."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "").replace("*", "")
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def outside_code(text: str) -> list[str]:
    """The lines of the text outside fenced code blocks."""
    lines, fenced = [], False
    for line in text.splitlines():
        if re.match(r" *```", line):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines


def anchors(text: str) -> set[str]:
    """Every heading id of the text, a repeated heading numbered as GitHub numbers it (-1, -2, ...)."""
    seen: dict[str, int] = {}
    found = set()
    for line in outside_code(text):
        match = re.match(r"#{1,6} (.*)", line)
        if match:
            slug = github_slug(match.group(1))
            found.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
            seen[slug] = seen.get(slug, 0) + 1
    return found


def link_problems(document: str, text: str) -> list[str]:
    """A link to a heading that does not exist (GitHub shows the page's top), a heading id written as
    `{#id}` (GitHub prints it and ignores it), and a code fence left open or opened after a list marker
    (GitHub renders the rest of the page inside out)."""
    problems = []
    here = (ROOT / document).parent
    for target, anchor in re.findall(r"\]\(([\w./-]*\.md|)#([^)\s]+)\)", text):
        path = here / target
        if target and not path.exists():
            continue  # path_problems names it
        if anchor not in anchors(path.read_text() if target else text):
            problems.append(f"{document}: link to {target or document}#{anchor}: no such heading there")
    problems += [f"{document}: heading `{line}`: GitHub ignores {{#id}}; link to the heading's own id"
                 for line in outside_code(text) if re.match(r"#{1,6} .*\{#[\w-]+\}\s*$", line)]
    problems += [f"{document}: {line.strip()!r}: a code fence must start its own line" for line in text.splitlines()
                 if re.match(r" *(?:[-*+]|\d+\.) +(?:\[[ xX]\] +)?```", line)]
    if len(re.findall(r"^ *```", text, flags=re.M)) % 2:
        problems.append(f"{document}: a code fence is never closed")
    return problems


@pytest.mark.parametrize("document", DOCUMENTS)
def test_every_link_to_a_heading_finds_it_and_every_code_fence_closes(document):
    problems = link_problems(document, (ROOT / document).read_text())
    assert problems == [], "\n".join(problems)


def test_the_runbook_links_the_code_gives_in_alarms_and_messages_find_their_heading():
    """An alarm's description or a message names docs/<page>.md#<heading> for a person to open."""
    problems = []
    for source in sorted([*(ROOT / "components").rglob("*.py"), *(ROOT / "lambdas").rglob("*.py")]):
        for page, anchor in re.findall(r"docs/([\w-]+\.md)#([\w-]+)", source.read_text()):
            if anchor not in anchors((ROOT / "docs" / page).read_text()):
                problems.append(f"{source.relative_to(ROOT)}: docs/{page}#{anchor}: no such heading")
    assert problems == [], "\n".join(problems)


def test_the_link_checks_find_a_broken_link_a_custom_id_and_a_stray_fence():
    assert github_slug("9. After `make destroy`") == "9-after-make-destroy"
    assert github_slug("At a spot notice: the group's replacement, kept or declined") == \
        "at-a-spot-notice-the-groups-replacement-kept-or-declined"
    assert anchors("# A\n## Notes\n```\n# not a heading\n```\n## Notes\n") == {"a", "notes", "notes-1"}
    stale = ("## 9. After `make destroy` {#after-make-destroy}\n\nSee [it](#after-make-destroy), "
             "[that](docs/runbook.md#no-such-part).\n\n- [ ] ```\n  $ aws s3 ls\n  ```\n")
    assert link_problems("README.md", stale) == [
        "README.md: link to README.md#after-make-destroy: no such heading there",
        "README.md: link to docs/runbook.md#no-such-part: no such heading there",
        "README.md: heading `## 9. After `make destroy` {#after-make-destroy}`: GitHub ignores {#id}; "
        "link to the heading's own id",
        "README.md: '- [ ] ```': a code fence must start its own line",
        "README.md: a code fence is never closed"]


if __name__ == "__main__":
    for document, text in samples().items():
        print(f"===== {document}\n{text}\n")
