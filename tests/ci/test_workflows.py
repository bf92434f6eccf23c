"""The GitHub Actions workflows: triggers, permissions, pinned actions, OIDC, fork guard, preview comment,
and the dev -> staging -> prod order behind environments. (GitHub itself is not reachable from here.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

WORKFLOWS = Path(__file__).resolve().parents[2] / ".github" / "workflows"
FULL_SHA = re.compile(r"^[\w.-]+/[\w./-]+@[0-9a-f]{40}$")
VERSION_COMMENT = re.compile(r"uses: (\S+) # v\d+(\.\d+)*\s*$")
FORK_GUARD = "github.event.pull_request.head.repo.full_name == github.repository"


def load(name: str) -> dict:
    return yaml.safe_load((WORKFLOWS / name).read_text())


def triggers(workflow: dict) -> dict:
    return workflow[True]  # YAML 1.1 reads the key `on` as the boolean True


def steps_using(job: dict, action: str) -> list[dict]:
    return [s for s in job["steps"] if s.get("uses", "").startswith(f"{action}@")]


PR = load("pull-request.yml")
DEPLOY = load("deploy.yml")
ALL = {"pull-request.yml": PR, "deploy.yml": DEPLOY}


def test_triggers():
    assert set(triggers(PR)) == {"pull_request"}
    assert triggers(DEPLOY) == {"push": {"branches": ["main"]}, "workflow_dispatch": None}


@pytest.mark.parametrize("name", ALL)
def test_top_level_permissions_are_empty(name):
    assert ALL[name]["permissions"] == {}


@pytest.mark.parametrize("workflow, job, permissions", [
    (PR, "test", {"contents": "read"}),
    (PR, "affected", {"contents": "read"}),
    (PR, "preview", {"contents": "read", "id-token": "write", "pull-requests": "write"}),
    (DEPLOY, "test", {"contents": "read"}),
    (DEPLOY, "dev", {"contents": "read", "id-token": "write"}),
    (DEPLOY, "staging", {"contents": "read", "id-token": "write"}),
    (DEPLOY, "prod", {"contents": "read", "id-token": "write"}),
])
def test_each_job_asks_only_for_what_it_needs(workflow, job, permissions):
    assert workflow["jobs"][job]["permissions"] == permissions


def test_every_job_declares_permissions():
    assert set(PR["jobs"]) == {"test", "affected", "preview"}
    assert set(DEPLOY["jobs"]) == {"test", "dev", "staging", "prod"}


@pytest.mark.parametrize("name", ALL)
def test_every_action_is_pinned_by_full_commit_with_its_tag_in_a_comment(name):
    uses = [s["uses"] for job in ALL[name]["jobs"].values() for s in job["steps"] if "uses" in s]
    assert uses and all(FULL_SHA.match(u) for u in uses), uses
    lines = [line.strip() for line in (WORKFLOWS / name).read_text().splitlines() if "uses:" in line]
    assert all(VERSION_COMMENT.search(line) for line in lines), lines


def test_each_action_has_one_pinned_commit_across_workflows():
    pins = {}
    for text in (WORKFLOWS / n for n in ALL):
        for action, sha in re.findall(r"uses: ([\w./-]+)@([0-9a-f]{40})", text.read_text()):
            pins.setdefault(action, set()).add(sha)
    assert all(len(shas) == 1 for shas in pins.values()), pins


@pytest.mark.parametrize("name", ALL)
def test_no_static_cloud_keys(name):
    text = (WORKFLOWS / name).read_text()
    for forbidden in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "aws-access-key-id", "aws-secret-access-key",
                      "PULUMI_ACCESS_TOKEN"):
        assert forbidden not in text


def cloud_jobs(workflow):
    return {name: job for name, job in workflow["jobs"].items()
            if steps_using(job, "aws-actions/configure-aws-credentials")}


@pytest.mark.parametrize("name", ALL)
def test_aws_access_is_oidc_role_assumption_from_a_variable(name):
    jobs = cloud_jobs(ALL[name])
    assert jobs
    for job in jobs.values():
        assert job["permissions"]["id-token"] == "write"
        (step,) = steps_using(job, "aws-actions/configure-aws-credentials")
        assert re.fullmatch(r"\$\{\{ vars\.AWS_(PREVIEW|DEPLOY)_ROLE_ARN \}\}", step["with"]["role-to-assume"])
        assert set(step["with"]) == {"role-to-assume", "aws-region", "role-session-name"}


def test_jobs_that_use_secrets_or_cloud_credentials_are_skipped_for_forks():
    for name, job in PR["jobs"].items():
        uses_secrets = "secrets." in yaml.safe_dump(job) or name in cloud_jobs(PR)
        if uses_secrets:
            assert FORK_GUARD in job["if"], name
    assert "secrets." not in yaml.safe_dump(PR["jobs"]["test"])


def test_tests_run_the_readme_test_command_with_shellcheck_installed():
    for workflow in (PR, DEPLOY):
        runs = [s.get("run", "") for s in workflow["jobs"]["test"]["steps"]]
        assert any("apt-get install" in r and "shellcheck" in r for r in runs)
        assert "make test" in runs
        (setup,) = steps_using(workflow["jobs"]["test"], "actions/setup-python")
        assert setup["with"]["python-version"] == "3.12"


def test_preview_runs_per_affected_stack_and_keeps_one_edited_comment():
    job = PR["jobs"]["preview"]
    assert job["needs"] == ["test", "affected"]
    assert job["strategy"]["matrix"]["stack"] == "${{ fromJSON(needs.affected.outputs.stacks) }}"
    assert "needs.affected.outputs.stacks != '[]'" in job["if"]
    (pulumi,) = steps_using(job, "pulumi/actions")
    assert pulumi["with"]["command"] == "preview"
    assert pulumi["with"]["stack-name"] == "${{ matrix.stack }}"
    assert pulumi["with"]["comment-on-pr"] is True and pulumi["with"]["edit-pr-comment"] is True
    assert pulumi["with"]["policyPacks"] == "policy"
    assert pulumi["with"]["cloud-url"] == "${{ vars.PULUMI_BACKEND_URL }}"
    assert pulumi["env"]["PULUMI_CONFIG_PASSPHRASE"] == "${{ secrets.PULUMI_CONFIG_PASSPHRASE }}"


def test_affected_job_feeds_the_script_the_changed_paths():
    job = PR["jobs"]["affected"]
    assert job["outputs"]["stacks"] == "${{ steps.affected.outputs.stacks }}"
    (step,) = [s for s in job["steps"] if s.get("id") == "affected"]
    assert "scripts/affected_stacks.py" in step["run"] and "git diff --name-only" in step["run"]
    assert "${{" not in step["run"]  # event values reach the shell through env, never spliced into it


def test_pull_request_runs_cancel_superseded_ones():
    assert PR["concurrency"] == {"group": "pull-request-${{ github.event.pull_request.number }}",
                                 "cancel-in-progress": True}


def test_deploy_order_is_dev_then_staging_then_prod_behind_environments():
    jobs = DEPLOY["jobs"]
    assert jobs["dev"]["needs"] == "test"
    assert jobs["staging"]["needs"] == "dev"
    assert jobs["prod"]["needs"] == "staging"
    for stack in ("dev", "staging", "prod"):
        job = jobs[stack]
        assert job["environment"] == stack
        assert job["concurrency"] == {"group": f"pulumi-{stack}", "cancel-in-progress": False}
        (pulumi,) = steps_using(job, "pulumi/actions")
        assert pulumi["with"]["command"] == "up"
        assert pulumi["with"]["stack-name"] == stack
        assert pulumi["with"]["policyPacks"] == "policy"


PACK_CONFIG = "${{ runner.temp }}/policy-config.json"


def action_list(value) -> list[str]:
    """A list input of pulumi/actions: one item a line, or separated by ';' (src/config.ts, getMultilineInput and
    parseSemicolorToArray)."""
    return [item.strip() for line in str(value or "").splitlines() for item in line.split(";") if item.strip()]


@pytest.mark.parametrize("workflow, job, stack", [
    (PR, "preview", '"$STACK"'), (DEPLOY, "dev", "dev"), (DEPLOY, "staging", "staging"), (DEPLOY, "prod", "prod"),
])
def test_every_policy_pack_run_gets_the_config_derived_from_its_stack(workflow, job, stack):
    """Regression: the pulumi/actions steps passed `policyPacks: policy` and no `policyPackConfigs`, so the pack ran
    with its defaults (maxSize at most 64, ACTUAL alerts at 25/50/75/100 %) and refused stacks the config model
    accepts. The CLI takes one `--policy-pack-config` file per `--policy-pack`, in the same order, or none
    (pulumi/pulumi pkg/cmd/pulumi/operations/up.go and preview.go, validatePolicyPackConfig); pulumi/actions
    passes each line of `policyPackConfigs` as one (src/config.ts, sdk/nodejs/automation/stack.ts)."""
    steps = workflow["jobs"][job]["steps"]
    (pulumi,) = steps_using(workflow["jobs"][job], "pulumi/actions")
    packs, configs = action_list(pulumi["with"]["policyPacks"]), action_list(pulumi["with"].get("policyPackConfigs"))
    assert packs == ["policy"] and configs == [PACK_CONFIG]
    # Written just before, for this stack, by the program's virtualenv (the model gives the stack's defaults).
    written = steps[steps.index(pulumi) - 1]
    assert written["run"] == f'venv/bin/python scripts/policy_config.py {stack} > "$RUNNER_TEMP/policy-config.json"'
    if stack == '"$STACK"':
        assert written["env"] == {"STACK": "${{ matrix.stack }}"}
    assert any("venv/bin/pip install --quiet -r requirements.txt" in s.get("run", "") for s in steps[:steps.index(written)])


def test_checkouts_do_not_persist_the_token():
    for workflow in ALL.values():
        for job in workflow["jobs"].values():
            for step in steps_using(job, "actions/checkout"):
                assert step["with"]["persist-credentials"] is False
