"""Every IAM policy document of every committed stack, of the `mlfleet policy` command and of the docs,
linted against the IAM service authorization reference (iam_lint.py says which rules and why); and the
lint itself fed deliberately broken documents, so each rule can be seen to fail."""

from __future__ import annotations

import copy
import fnmatch
import json
import re
from types import SimpleNamespace

import pytest
from iam_conditions import allows as evaluate
from iam_conditions import request_tag_context
from iam_lint import (
    AWS_MANAGED_POLICIES, EXCEPTIONS, IDENTITY, RESOURCE, ROOT, RULE_SOURCE, TRUST, Document, arn_matches,
    documented_policies, excepted, expand_action, is_tagging, lambda_permission_statement, lint,
    managed_policy_findings, rendered_documents, scoping_tag_keys,
)
from rule_stacks import RULE_STACKS

from lambdas.common import tags
from lambdas.common.permissions import TAG_WRITES, needs, statements
from lambdas.common.catalog import load_catalog
from lambdas.common.lease import LEASE_KEY
from lambdas.jobs import cli
from lambdas.jobs.spec import assign_ids, parse_spec
from lambdas.scheduler import actions
from lambdas.scheduler.headroom import WAITS_KEY
from lambdas.scheduler.teams import USAGE_KEY
from pulumi_harness import ACCOUNT_ID

ENV_ARGS = {"account": ACCOUNT_ID, "region": "us-east-1", "environment": "dev"}


def command_policy(stack: str, config: dict[str, str]) -> Document:
    return Document(f"{stack}: mlfleet policy", IDENTITY, cli.policy(stack, config["aws:region"], ACCOUNT_ID))


def every_document(rendering, config: dict[str, str]) -> list[Document]:
    return [*rendered_documents(rendering), command_policy(rendering.stack, config)]


def allows(documents, action: str):
    """(document, statement) pairs of Allow statements that grant `action`."""
    for document in documents:
        for statement in document.policy["Statement"]:
            granted = statement.get("Action")
            granted = granted if isinstance(granted, list) else [granted]
            if statement["Effect"] == "Allow" and any(fnmatch.fnmatchcase(action.lower(), g.lower()) for g in granted):
                yield document, statement


# --- the stacks ----------------------------------------------------------------------------------

@pytest.mark.parametrize("stack", RULE_STACKS)
def test_every_policy_of_the_stack_passes_the_iam_reference(renderings, stack_configs, stack):
    rendering = renderings[stack]
    documents = every_document(rendering, stack_configs[stack])
    kinds = {d.kind for d in documents}
    assert {IDENTITY, RESOURCE, TRUST} <= kinds, f"the collector found no {({IDENTITY, RESOURCE, TRUST} - kinds)}"
    findings = [f for d in documents for f in lint(d)] + managed_policy_findings(rendering)
    assert not findings, f"{RULE_SOURCE}:\n" + "\n".join(map(str, findings))


def test_the_policies_the_docs_publish_pass_the_iam_reference():
    documents = documented_policies()
    assert any("docs/jobs.md" in d.where for d in documents) and any("docs/ci.md" in d.where for d in documents)
    findings = [f for d in documents for f in lint(d)]
    assert not findings, "\n".join(map(str, findings))


def test_every_exception_is_still_needed(renderings, stack_configs):
    """An exception nothing uses any more is a hole waiting for a policy: remove it."""
    documents = [d for s, r in renderings.items() for d in every_document(r, stack_configs[s])] + documented_policies()
    used = set()
    for document in documents:
        for statement in document.policy["Statement"]:
            actions = [a for entry in ([statement["Action"]] if isinstance(statement["Action"], str) else statement["Action"])
                       for a in expand_action(entry)]
            keys = [k for tests in (statement.get("Condition") or {}).values() for k in tests]
            for exception in EXCEPTIONS:
                if any(exception.rule == "condition-key" and excepted("condition-key", a, k) for a in actions for k in keys):
                    used.add(exception)
    assert set(EXCEPTIONS) == used
    assert all(e.link.startswith("https://docs.aws.amazon.com/") and e.reason for e in EXCEPTIONS)
    assert all(link.startswith("https://docs.aws.amazon.com/aws-managed-policy/") for link in AWS_MANAGED_POLICIES.values())


# --- least privilege the issues asked for (issue 12, issue 13 "Least privilege, tightened") --------

@pytest.mark.parametrize("stack", RULE_STACKS)
def test_list_tasks_is_granted_on_star_for_the_environments_clusters_only(renderings, stack_configs, stack):
    grants = list(allows(every_document(renderings[stack], stack_configs[stack]), "ecs:ListTasks"))
    assert grants
    for _, statement in grants:
        assert statement["Resource"] == ["*"]
        assert statement["Condition"] == {"ArnLike": {"ecs:cluster": f"arn:aws:ecs:*:{ACCOUNT_ID}:cluster/mlfleet-{stack}"}}


@pytest.mark.parametrize("stack", RULE_STACKS)
def test_tag_writes_name_the_keys_they_write_and_never_the_scoping_tags(renderings, stack_configs, stack):
    documents = every_document(renderings[stack], stack_configs[stack])
    seen = 0
    for action in sorted(TAG_WRITES):
        for _, statement in allows(documents, action):
            seen += 1
            condition = statement["Condition"]
            written = condition["ForAllValues:StringEquals"]["aws:TagKeys"]
            assert written and not {tags.ENVIRONMENT, tags.KEEP_ALIVE, tags.MANAGED_BY, tags.FLEET} & set(written)
            assert condition["Null"] == {"aws:TagKeys": "false"}  # no request without tag keys (EC2 would delete all)
            assert condition["StringEquals"][f"aws:ResourceTag/{tags.ENVIRONMENT}"] == stack
            if "Create" in action:  # values written are bounded too: each key the request carries, where it names
                # several (a StringLike on a key the request does not carry is false: IAM User Guide, "Condition
                # operators"; lambdas/common/permissions.py)
                bound = condition["StringLike" if len(written) == 1 else "StringLikeIfExists"]
                assert set(bound) == {f"aws:RequestTag/{key}" for key in written}
    assert seen >= 3  # the reaper, job events and the scheduler each write one tag


@pytest.mark.parametrize("stack", RULE_STACKS)
def test_queue_grants_name_the_exact_queues_and_users_cannot_dead_letter(renderings, stack_configs, stack):
    region = stack_configs[stack]["aws:region"]
    queue = f"arn:aws:sqs:{region}:{ACCOUNT_ID}:mlfleet-{stack}-jobs"
    documents = every_document(renderings[stack], stack_configs[stack])
    for document in documents:
        for statement in document.policy["Statement"]:
            for resource in statement.get("Resource", []) if isinstance(statement.get("Resource"), list) else []:
                if resource.startswith("arn:aws:sqs:"):
                    assert resource in (queue, f"{queue}-dlq"), f"{document.where}: {resource}"
    assert not [s for d in documents for s in d.policy["Statement"] if "sqs:ChangeMessageVisibility" in s.get("Action", [])]
    user = command_policy(stack, stack_configs[stack]).policy["Statement"]
    assert [s["Resource"] for s in user if "sqs:SendMessage" in s["Action"]] == [[queue]]
    dead_letterers = {d.where for d, s in allows(documents, "sqs:SendMessage") if f"{queue}-dlq" in s["Resource"]}
    assert dead_letterers and all("scheduler" in w or "job-events" in w for w in dead_letterers)


@pytest.mark.parametrize("stack", RULE_STACKS)
def test_queues_and_topics_are_named_exactly_never_by_prefix(renderings, stack_configs, stack):
    """`mlfleet-dev-jobs*` also matches mlfleet-dev-jobs-dlq and mlfleet-dev-jobs2 (another environment)."""
    prefixed = [(d.where, r) for d in every_document(renderings[stack], stack_configs[stack]) for s in d.policy["Statement"]
                for r in (s.get("Resource") if isinstance(s.get("Resource"), list) else [s.get("Resource")])
                if isinstance(r, str) and r.startswith(("arn:aws:sqs:", "arn:aws:sns:")) and "*" in r.split(":", 5)[5]]
    assert prefixed == []

SPEC = parse_spec({"image": "img:1", "command": ["run"], "gpus": 1, "vcpus": 1, "memory_mib": 1024},
                  fleet_regions=("us-east-1",), catalog=load_catalog(), default_max_attempts=3)


@pytest.mark.parametrize("stack", RULE_STACKS)
def test_task_definitions_are_registered_in_the_job_family_only(renderings, stack_configs, stack):
    documents = every_document(renderings[stack], stack_configs[stack])
    (grant,) = [s for _, s in allows(documents, "ecs:RegisterTaskDefinition")]
    assert grant["Resource"] == [f"arn:aws:ecs:*:{ACCOUNT_ID}:task-definition/mlfleet-{stack}-gpu-job:*"]
    # Registered only tagged with its environment, and never with a privileged container.
    assert grant["Condition"] == {"StringEquals": {f"aws:RequestTag/{tags.ENVIRONMENT}": stack},
                                  "BoolIfExists": {"ecs:privileged": "false"}}
    (pass_role,) = [s for _, s in allows(documents, "iam:PassRole")]
    assert pass_role["Condition"] == {"StringEquals": {"iam:PassedToService": "ecs-tasks.amazonaws.com"}}
    assert pass_role["Resource"] == [f"arn:aws:iam::{ACCOUNT_ID}:role/mlfleet/{stack}/*"]


def start_request(stack: str, tags: list[dict] | None = None, cluster: str | None = None) -> tuple[str, dict]:
    """The resource and request context of a StartTask as the scheduler sends it (actions.start_job's tags)."""
    record = SimpleNamespace(job_id="sub-20261122120000-abcdef-00000", submission_id="sub-20261122120000-abcdef")
    tags = actions.task_tags(record, 1, stack) if tags is None else tags
    return (f"arn:aws:ecs:us-east-1:{ACCOUNT_ID}:task-definition/mlfleet-{stack}-gpu-job:7",
            {"ecs:cluster": f"arn:aws:ecs:us-east-1:{ACCOUNT_ID}:cluster/{cluster or f'mlfleet-{stack}'}",
             **request_tag_context(tags)})


@pytest.mark.parametrize("stack", RULE_STACKS)
def test_tasks_are_started_only_tagged_with_the_environment(renderings, stack_configs, stack):
    """StartTask was conditioned on ecs:cluster only: the role could start the job family's revisions
    untagged or tagged as another environment. It now asks for the environment's tag in the request, and
    for no tag keys but the job's own (the IAM reference lists aws:RequestTag/${TagKey} and aws:TagKeys for
    ecs:StartTask; the lint checks both keys against it)."""
    documents = every_document(renderings[stack], stack_configs[stack])
    (grant,) = [s for _, s in allows(documents, "ecs:StartTask")]
    assert grant["Resource"] == [f"arn:aws:ecs:*:{ACCOUNT_ID}:task-definition/mlfleet-{stack}-gpu-job:*"]
    assert grant["Condition"] == {
        "ArnLike": {"ecs:cluster": f"arn:aws:ecs:*:{ACCOUNT_ID}:cluster/mlfleet-{stack}"},
        "StringEquals": {f"aws:RequestTag/{tags.ENVIRONMENT}": stack},
        "ForAllValues:StringEquals": {"aws:TagKeys": sorted(actions.TASK_TAGS)},
        "Null": {"aws:TagKeys": "false"}}
    # The scheduler's own start passes; one tagged for another environment, untagged, with a tag more, or
    # in another environment's cluster does not.
    assert evaluate([grant], "ecs:StartTask", *start_request(stack))
    ours = actions.task_tags(SimpleNamespace(job_id="j", submission_id="s"), 1, stack)
    refused = [[{**t, "value": "other"} if t["key"] == tags.ENVIRONMENT else t for t in ours],
               [t for t in ours if t["key"] != tags.ENVIRONMENT], [], [*ours, {"key": tags.KEEP_ALIVE, "value": "true"}]]
    for request_tags in refused:
        assert not evaluate([grant], "ecs:StartTask", *start_request(stack, request_tags)), request_tags
    assert not evaluate([grant], "ecs:StartTask", *start_request(stack, cluster=f"mlfleet-{stack}x"))


@pytest.mark.parametrize("misspelt", [
    ("StringEquals", "aws:RequestTag/mlfleet:environment", "aws:RequestTags/mlfleet:environment"),
    ("StringEquals", "aws:RequestTag/mlfleet:environment", "aws:RequestTag/mlfleet:enviroment"),
    ("Null", "aws:TagKeys", "aws:TagKey"),
    ("ArnLike", "ecs:cluster", "ecs:clusters"),
])
def test_a_misspelt_start_task_condition_key_fails(misspelt):
    """A condition key misspelt in PERMISSIONS: the lint names a service key the reference does not list for
    the action; any key the request does not carry refuses the scheduler's own start."""
    operator, key, wrong = misspelt
    (grant,) = [s for s in statements(actions.PERMISSIONS, **ENV_ARGS) if s["Action"] == ["ecs:StartTask"]]
    assert evaluate([grant], "ecs:StartTask", *start_request("dev"))
    broken_grant = copy.deepcopy(grant)
    broken_grant["Condition"][operator][wrong] = broken_grant["Condition"][operator].pop(key)
    assert not evaluate([broken_grant], "ecs:StartTask", *start_request("dev"))
    if not wrong.startswith("aws:"):
        assert ("condition-key", f"ecs:StartTask does not support the condition key {wrong}") in findings_of(broken_grant)


def terminate_request(stack: str, market: str = "spot", environment: str | None = None,
                      region: str = "us-east-1") -> tuple[str, dict]:
    """The resource and request context of the reaper's TerminateInstances of one standalone instance."""
    return (f"arn:aws:ec2:{region}:{ACCOUNT_ID}:instance/i-0123456789abcdef0",
            {f"aws:ResourceTag/{tags.ENVIRONMENT}": environment or stack, "ec2:InstanceMarketType": market})


@pytest.mark.parametrize("stack", RULE_STACKS)
def test_instances_are_terminated_only_by_the_reaper_and_only_the_environment_s_spot_instances(
        renderings, stack_configs, stack):
    """The reaper terminates an idle standalone Spot Instance EC2 cannot stop (a one-time request's,
    lambdas/reaper/actions.py); its grant names instances carrying the environment's tag whose market type
    is spot (ec2:InstanceMarketType, which the IAM reference lists for ec2:TerminateInstances on the instance
    resource type; the lint checks it against the reference). No other role may call TerminateInstances."""
    documents = every_document(renderings[stack], stack_configs[stack])
    granted = list(allows(documents, "ec2:TerminateInstances"))
    assert granted and all("reaper" in document.where for document, _ in granted), [d.where for d, _ in granted]
    for _, grant in granted:
        assert grant["Action"] == ["ec2:TerminateInstances"]
        assert all(r.endswith(":instance/*") for r in grant["Resource"]), grant["Resource"]
        assert grant["Condition"] == {"StringEquals": {f"aws:ResourceTag/{tags.ENVIRONMENT}": stack,
                                                       "ec2:InstanceMarketType": "spot"}}
        region = grant["Resource"][0].split(":")[3]  # each region's reaper, its own region's instances
        assert evaluate([grant], "ec2:TerminateInstances", *terminate_request(stack, region=region))
        assert not evaluate([grant], "ec2:TerminateInstances",
                            *terminate_request(stack, market="on-demand", region=region))
        assert not evaluate([grant], "ec2:TerminateInstances",
                            *terminate_request(stack, environment=f"{stack}x", region=region))


def test_a_misspelt_market_type_key_fails():
    """The key misspelt in PERMISSIONS: the lint names it, and the request carries no such key."""
    from lambdas.reaper import actions as reaper_actions

    (grant,) = [s for s in statements(reaper_actions.PERMISSIONS, **ENV_ARGS) if s["Action"] == ["ec2:TerminateInstances"]]
    assert findings_of(grant) == [] and evaluate([grant], "ec2:TerminateInstances", *terminate_request("dev"))
    broken_grant = copy.deepcopy(grant)
    broken_grant["Condition"]["StringEquals"]["ec2:MarketType"] = broken_grant["Condition"]["StringEquals"].pop(
        "ec2:InstanceMarketType")
    assert ("condition-key", "ec2:TerminateInstances does not support the condition key ec2:MarketType") in \
        findings_of(broken_grant)
    assert not evaluate([broken_grant], "ec2:TerminateInstances", *terminate_request("dev"))


@pytest.mark.parametrize("stack", RULE_STACKS)
def test_fleet_groups_are_changed_by_their_arn_and_tag_only(renderings, stack_configs, stack):
    """Every Auto Scaling write (the reference authorizes each on the autoScalingGroup ARN) names the
    environment's groups and carries the environment's tag condition; SetDesiredCapacity and the circuit
    breaker's tag writes were granted on "*" (scheduler, lambdas/scheduler/actions.py)."""
    groups = f"arn:aws:autoscaling:*:{ACCOUNT_ID}:autoScalingGroup:*:autoScalingGroupName/mlfleet-{stack}-*"
    documents = every_document(renderings[stack], stack_configs[stack])
    seen = set()
    for action in ("autoscaling:SetDesiredCapacity", "autoscaling:CreateOrUpdateTags", "autoscaling:DeleteTags",
                   "autoscaling:TerminateInstanceInAutoScalingGroup", "autoscaling:DetachInstances"):
        for document, statement in allows(documents, action):
            seen.add(action)
            assert statement["Resource"] == [groups], f"{document.where}: {action}"
            assert statement["Condition"]["StringEquals"][f"aws:ResourceTag/{tags.ENVIRONMENT}"] == stack
    assert "autoscaling:SetDesiredCapacity" in seen and "autoscaling:CreateOrUpdateTags" in seen


@pytest.mark.parametrize("stack", RULE_STACKS)
def test_the_functions_use_only_the_environment_s_own_topic_keys(renderings, stack_configs, stack):
    """Every function's KMS grant for publishing (SNS on its behalf) is limited to keys carrying the
    environment's tag, which every topic key of the program does (components/alerts/topic.py): it was any key
    of the account."""
    documents = every_document(renderings[stack], stack_configs[stack])
    found = allows(documents, "kms:Decrypt")
    assert found
    for document, statement in found:
        if statement.get("Condition", {}).get("StringLike", {}).get("kms:ViaService") == "sns.*.amazonaws.com":
            assert statement["Condition"]["StringEquals"][f"aws:ResourceTag/{tags.ENVIRONMENT}"] == stack, document.where
    for key in (r for r in renderings[stack].resources if r.type == "aws:kms/key:Key"):
        assert key.inputs["tags"][tags.ENVIRONMENT] == stack, key.name


def test_the_command_may_only_read_put_and_cancel_in_the_ledger():
    user = cli.policy("dev", "us-east-1", ACCOUNT_ID)["Statement"]
    dynamodb = {a: s for s in user for a in s["Action"] if a.startswith("dynamodb:")}
    assert set(dynamodb) == {"dynamodb:GetItem", "dynamodb:Query", "dynamodb:PutItem", "dynamodb:UpdateItem"}
    assert dynamodb["dynamodb:UpdateItem"]["Condition"]["ForAllValues:StringEquals"]["dynamodb:Attributes"] == [
        "job_id", "state", "updated_at", "version", "reasons", "reserved", "queued_team"]
    # Writes of job records only: every job id, never the placement lease, the teams' use nor headroom's waits.
    for action in ("dynamodb:PutItem", "dynamodb:UpdateItem"):
        (keys,) = dynamodb[action]["Condition"]["ForAllValues:StringLike"]["dynamodb:LeadingKeys"]
        assert fnmatch.fnmatchcase(assign_ids("sub-20261122120000-abcdef", [SPEC] * 3)[2].job_id, keys)
        assert not any(fnmatch.fnmatchcase(key, keys) for key in (LEASE_KEY, USAGE_KEY, WAITS_KEY, "sub-1",
                                                                  "sub-20261122120000"))


def test_a_tag_write_without_its_tag_keys_is_refused_where_it_is_declared():
    with pytest.raises(ValueError, match="tag_keys"):
        needs("ec2:CreateTags", tag_scoped=True)
    rendered = statements([needs("ec2:DeleteTags", tag_scoped=True, tag_keys=("mlfleet:idle-since",))], **ENV_ARGS)
    assert rendered[0]["Condition"]["Null"] == {"aws:TagKeys": "false"}


# --- the lint fails on broken documents ----------------------------------------------------------

def policy(*statements_: dict) -> dict:
    return {"Version": "2012-10-17", "Statement": list(statements_)}


GOOD = {"Sid": "Good", "Effect": "Allow", "Action": ["ecs:ListTasks"], "Resource": ["*"],
        "Condition": {"ArnLike": {"ecs:cluster": "arn:aws:ecs:*:123456789012:cluster/mlfleet-dev"}}}


def findings_of(statement: dict, kind: str = IDENTITY) -> list[tuple[str, str]]:
    return [(f.rule, f.detail) for f in lint(Document("test", kind, policy(statement)))]


def broken(**changes) -> dict:
    statement = copy.deepcopy(GOOD)
    statement.update(changes)
    return statement


def test_a_good_statement_has_no_findings():
    assert findings_of(GOOD) == []


@pytest.mark.parametrize("statement, rule, words", [
    (broken(Action=["ecs:ListTask"]), "unknown-action", "ecs:ListTask is not"),
    (broken(Action=["ecz:ListTasks"]), "unknown-action", "ecz:ListTasks"),
    (broken(Action=["ecs:ListTaskz*"]), "unknown-action", "ecs:ListTaskz*"),
    (broken(Action=["*"]), "action", "every action"),
    # issue 12: ListTasks on the cluster ARN is denied on every call
    (broken(Resource=["arn:aws:ecs:*:123456789012:cluster/mlfleet-dev"], Condition={}), "resource-type",
     "ecs:ListTasks cannot be authorized on arn:aws:ecs:*:123456789012:cluster/mlfleet-dev"),
    # an action without resource-level permissions takes "*" only
    (broken(Action=["ecs:DescribeTaskDefinition"], Resource=["arn:aws:ecs:*:1:task-definition/f:*"], Condition={}),
     "resource-type", '"*" only'),
    # a dead ARN next to a good one
    (broken(Action=["sqs:SendMessage"], Resource=["arn:aws:sqs:us-east-1:1:q", "arn:aws:sns:us-east-1:1:t"], Condition={}),
     "resource-type", "arn:aws:sns:us-east-1:1:t matches no resource type"),
    (broken(Condition={"ArnLike": {"ecs:clusters": "x"}}), "condition-key", "ecs:ListTasks does not support the condition key ecs:clusters"),
    (broken(Action=["ec2:StopInstances"], Resource=["arn:aws:ec2:*:1:instance/*"],
            Condition={"ForAllValues:StringEquals": {"aws:TagKeys": ["a"]}, "StringEquals": {"ec2:CreateAction": "x"}}),
     "condition-key", "ec2:StopInstances does not support the condition key ec2:CreateAction"),
    (broken(Condition={"ArnLikes": {"ecs:cluster": "x"}}), "condition-operator", "ArnLikes"),
    # a request tag on an action whose request carries none: the reference lists aws:RequestTag/${TagKey}
    # and aws:TagKeys for ecs:StartTask, not for ecs:StopTask; the condition would refuse every stop
    (broken(Action=["ecs:StopTask"], Resource=["arn:aws:ecs:*:1:task/mlfleet-dev/*"],
            Condition={"StringEquals": {"aws:RequestTag/mlfleet:environment": "dev"}}),
     "condition-key", "ecs:StopTask does not support the condition key aws:RequestTag/mlfleet:environment"),
    (broken(Action=["ecs:StopTask"], Resource=["arn:aws:ecs:*:1:task/mlfleet-dev/*"],
            Condition={"ForAllValues:StringEquals": {"aws:TagKeys": ["a"]}}),
     "condition-key", "ecs:StopTask does not support the condition key aws:TagKeys"),
    # "*" where the action takes ARNs: every group of the account, whatever the tag condition says
    (broken(Action=["autoscaling:SetDesiredCapacity"],
            Condition={"StringEquals": {"aws:ResourceTag/mlfleet:environment": "dev"}}), "wildcard-resource",
     "autoscaling:SetDesiredCapacity is authorized on autoScalingGroup ARNs"),
    # ListTasks on "*" is right only with ecs:cluster narrowing it (GOOD)
    (broken(Condition={}), "wildcard-resource", "ecs:ListTasks is authorized on container-instance ARNs"),
    (broken(NotAction=["ecs:StopTask"]), "unsupported-element", "NotAction"),
])
def test_the_lint_fails_on(statement, rule, words):
    found = findings_of(statement)
    assert any(r == rule and words in d for r, d in found), found


BUCKET = "arn:aws:s3:::mlfleet-dev-123456789012-us-east-1-an"
TLS_ONLY = {"Sid": "DenyInsecureTransport", "Effect": "Deny", "Principal": "*", "Action": "s3:*",
            "Resource": [BUCKET, f"{BUCKET}/*"], "Condition": {"Bool": {"aws:SecureTransport": "false"}}}


def test_a_deny_wildcard_covers_whatever_applies_to_its_resources():
    # AWS's TLS-only bucket policy: s3:* matches actions that never apply to a bucket; they are harmless.
    assert findings_of(TLS_ONLY, RESOURCE) == []
    # The same wildcard granted (Allow) is checked action by action, and fails.
    assert any(r == "resource-type" for r, _ in findings_of({**TLS_ONLY, "Effect": "Allow"}, RESOURCE))
    # A Deny whose resources none of its actions can apply to protects nothing, and fails.
    dead = {**TLS_ONLY, "Resource": ["arn:aws:sqs:us-east-1:1:q"]}
    assert any(r == "resource-type" and d.startswith("arn:aws:sqs:us-east-1:1:q matches no resource type of")
               for r, d in findings_of(dead, RESOURCE))
    # A named action in a Deny is still checked one by one.
    named = {**TLS_ONLY, "Action": ["s3:GetObject", "s3:ListBucket", "s3:ListAllMyBuckets"]}
    assert [d for r, d in findings_of(named, RESOURCE) if r == "resource-type"] == [
        f"s3:ListAllMyBuckets cannot be authorized on {BUCKET}, {BUCKET}/*; it takes \"*\" only (no resource-level "
        "permissions)"]


def test_a_service_principal_without_source_conditions_fails_in_resource_policies_only():
    statement = {"Sid": "S", "Effect": "Allow", "Principal": {"Service": "cloudwatch.amazonaws.com"},
                 "Action": ["kms:Decrypt"], "Resource": "*"}
    assert [r for r, _ in findings_of(statement, RESOURCE)] == ["confused-deputy"]
    assert findings_of(statement, TRUST) == []
    statement["Condition"] = {"StringEquals": {"aws:SourceAccount": "123456789012"}}
    assert findings_of(statement, RESOURCE) == []


def test_a_lambda_permission_for_a_service_without_its_source_fails():
    bare = {"action": "lambda:InvokeFunction", "function": "mlfleet-dev-reaper", "principal": "events.amazonaws.com"}
    document = Document("test", RESOURCE, policy(lambda_permission_statement(bare)))
    assert [f.rule for f in lint(document)] == ["confused-deputy"]
    sourced = {**bare, "sourceArn": "arn:aws:events:us-east-1:123456789012:rule/mlfleet-dev-reaper"}
    assert lint(Document("test", RESOURCE, policy(lambda_permission_statement(sourced)))) == []
    misspelt = {**sourced, "action": "lambda:InvokeFunctions"}
    assert [f.rule for f in lint(Document("test", RESOURCE, policy(lambda_permission_statement(misspelt))))] == [
        "unknown-action"]


def test_an_unlisted_managed_policy_fails(stack_renderings):
    rendering = copy.copy(stack_renderings["dev"])
    attachment = next(r for r in rendering.resources if r.type == "aws:iam/rolePolicyAttachment:RolePolicyAttachment")
    changed = copy.deepcopy(attachment)
    changed.inputs["policyArn"] = "arn:aws:iam::aws:policy/AdministratorAccess"
    rendering.resources = [changed if r is attachment else r for r in rendering.resources]
    assert [f.rule for f in managed_policy_findings(rendering)] == ["managed-policy"]


# --- tag writes that could rewrite the scoping tag (issue 12) --------------------------------------

SCOPED = {"Sid": "Stop", "Effect": "Allow", "Action": ["ec2:StopInstances"], "Resource": ["arn:aws:ec2:*:1:instance/*"],
          "Condition": {"StringEquals": {"aws:ResourceTag/mlfleet:environment": "dev"}}}
TAG_WRITE = {"Sid": "Mark", "Effect": "Allow", "Action": ["ec2:CreateTags", "ec2:DeleteTags"],
             "Resource": ["arn:aws:ec2:*:1:instance/*"],
             "Condition": {"StringEquals": {"aws:ResourceTag/mlfleet:environment": "dev"},
                           "ForAllValues:StringEquals": {"aws:TagKeys": ["mlfleet:idle-since"]},
                           "Null": {"aws:TagKeys": "false"}}}


def tag_write_findings(*statements_: dict) -> list[str]:
    return [f.detail for f in lint(Document("test", IDENTITY, policy(*statements_))) if f.rule == "tag-write"]


def test_a_tag_write_naming_its_own_keys_passes():
    assert tag_write_findings(SCOPED, TAG_WRITE) == []
    assert scoping_tag_keys(policy(SCOPED, TAG_WRITE)) == {"mlfleet:environment"}
    assert is_tagging("ec2:CreateTags") and is_tagging("autoscaling:DeleteTags") and not is_tagging("ec2:StopInstances")


def _without(statement: dict, operator: str) -> dict:
    changed = copy.deepcopy(statement)
    del changed["Condition"][operator]
    return changed


def _writing(statement: dict, *keys: str) -> dict:
    changed = copy.deepcopy(statement)
    changed["Condition"]["ForAllValues:StringEquals"]["aws:TagKeys"] = list(keys)
    return changed


@pytest.mark.parametrize("statement, words", [
    # the statement as it was before the fix: scoped by the tag, free to rewrite it
    (_without(_without(TAG_WRITE, "ForAllValues:StringEquals"), "Null"), "names no tag keys"),
    (_writing(TAG_WRITE, "mlfleet:idle-since", "mlfleet:environment"), "may write 'mlfleet:environment'"),
    (_writing(TAG_WRITE, "mlfleet:*"), "may write 'mlfleet:*'"),
    (_without(TAG_WRITE, "Null"), "lacks Null aws:TagKeys = false"),
], ids=["no-tag-keys", "scoping-key", "wildcard", "no-null"])
def test_a_tag_write_that_could_rewrite_the_scoping_tag_fails(statement, words):
    found = tag_write_findings(SCOPED, statement)
    assert any(words in f for f in found), found


def test_tag_writes_are_judged_only_where_a_tag_scopes_the_policy():
    unscoped = {**_without(_without(TAG_WRITE, "ForAllValues:StringEquals"), "Null"), "Condition": {}}
    assert tag_write_findings(unscoped) == []  # nothing in this policy is authorized by a tag
    assert tag_write_findings(SCOPED, unscoped)  # the same statement beside a tag-scoped one fails
    on_create = {"Effect": "Allow", "Action": ["ecs:TagResource"], "Resource": ["*"],
                 "Condition": {"StringEquals": {"ecs:CreateAction": ["StartTask"]}}}
    assert tag_write_findings(SCOPED, on_create) == []  # tags only what the call creates


def test_the_installed_ec2_model_still_says_delete_tags_without_tags_deletes_all():
    """The reason for Null aws:TagKeys = false, from botocore's EC2 model."""
    import botocore.session

    shape = botocore.session.get_session().get_service_model("ec2").operation_model("DeleteTags").input_shape
    text = " ".join(re.sub(r"<[^>]+>", "", shape.members["Tags"].documentation).split())
    assert "If you omit this parameter, we delete all user-defined tags for the specified resources" in text


@pytest.mark.parametrize("stack", RULE_STACKS)
def test_each_tag_scoped_role_holds_its_permissions_in_one_policy(renderings, stack):
    """The tag-write rule reads scoping keys per document; that is per role only while each role whose
    policy is scoped by a tag has that one inline policy and no other."""
    rendering = renderings[stack]
    roles = rendering.of_type("aws:iam/role:Role")
    # A role is referenced by its id or its name (what the mocks answered, or the name mlfleet set).
    role_of = {ref: r.name for r in roles
               for ref in (r.generated.get("id"), r.generated.get("name"), r.inputs.get("name")) if ref}
    policies: dict[str, list[dict]] = {}
    for resource in rendering.of_type("aws:iam/rolePolicy:RolePolicy"):
        policies.setdefault(role_of[resource.inputs["role"]], []).append(json.loads(resource.inputs["policy"]))
    scoped = {role for role, documents in policies.items() if any(scoping_tag_keys(d) for d in documents)}
    assert scoped
    assert {role: len(policies[role]) for role in scoped if len(policies[role]) > 1} == {}
    attachments = rendering.of_type("aws:iam/rolePolicyAttachment:RolePolicyAttachment")
    attached = {role_of[a.inputs["role"]] for a in attachments}
    inline = {r.name for r in roles if r.inputs.get("inlinePolicies")}
    assert attached and not scoped & (attached | inline)


def test_the_old_policies_fail_the_lint():
    """The documents as they were before the fixes (issue 12 and 13's findings) fail, one rule each."""
    old_key_policy = {"Sid": "ServicesEncryptMessages", "Effect": "Allow",
                      "Principal": {"Service": ["cloudwatch.amazonaws.com", "budgets.amazonaws.com"]},
                      "Action": ["kms:Decrypt", "kms:GenerateDataKey*"], "Resource": "*"}
    assert [r for r, _ in findings_of(old_key_policy, RESOURCE)] == ["confused-deputy"]
    old_list_tasks = {"Effect": "Allow", "Action": ["ecs:ListContainerInstances", "ecs:ListTasks"],
                      "Resource": ["arn:aws:ecs:*:123456789012:cluster/mlfleet-dev"]}
    assert [r for r, _ in findings_of(old_list_tasks)] == ["resource-type"]


# --- ARN patterns against the reference's ARN formats --------------------------------------------

@pytest.mark.parametrize("resource, arn_format, expected", [
    ("arn:aws:ecs:*:1:container-instance/mlfleet-dev/*",
     "arn:${Partition}:ecs:${Region}:${Account}:container-instance/${ClusterName}/${ContainerInstanceId}", True),
    ("arn:aws:ecs:*:1:cluster/mlfleet-dev",
     "arn:${Partition}:ecs:${Region}:${Account}:container-instance/${ClusterName}/${ContainerInstanceId}", False),
    # a wildcard never spans the colons between the ARN's parts
    ("arn:aws:ecs:*", "arn:${Partition}:ecs:${Region}:${Account}:cluster/${ClusterName}", False),
    ("arn:aws:logs:us-east-1:1:log-group:/aws/lambda/f:*",
     "arn:${Partition}:logs:${Region}:${Account}:log-group:${LogGroupName}:log-stream:${LogStreamName}", True),
    ("arn:aws:sqs:us-east-1:1:mlfleet-dev-jobs", "arn:${Partition}:sqs:${Region}:${Account}:${QueueName}", True),
    ("arn:aws:iam::1:role/mlfleet/dev/*", "arn:${Partition}:iam::${Account}:role/${RoleNameWithPath}", True),
    ("arn:aws:iam::1:role/mlfleet/dev/*", "arn:${Partition}:iam::${Account}:user/${UserNameWithPath}", False),
    ("*", "arn:${Partition}:sqs:${Region}:${Account}:${QueueName}", True),
])
def test_arn_patterns_match_the_reference_formats(resource, arn_format, expected):
    assert arn_matches(resource, arn_format) is expected


def test_the_rule_source_is_the_pinned_policy_sentry():
    requirement = next(line for line in (ROOT / "requirements-dev.txt").read_text().splitlines()
                       if line.startswith("policy_sentry"))
    assert requirement.split("==")[1].strip() in RULE_SOURCE
    assert json.dumps(expand_action("ecs:ListTasks")) == '["ecs:ListTasks"]'
