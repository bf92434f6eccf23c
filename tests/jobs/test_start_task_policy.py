"""Every StartTask the scheduler sends is one its IAM policy allows: the policy (lambdas/scheduler/actions.py
PERMISSIONS, rendered as components/functions deploys it) lets the role start only tasks tagged with its
environment, so a start without the tag, or with another environment's, would be refused by AWS, and the
job would fail its starts. The requests are the real ones, from a scheduler run against moto, put to the
statement with the request context ECS builds from them (tests/iam_conditions.py)."""

from __future__ import annotations

from conftest import ACCOUNT, CLUSTER, ENV, HOME, build_fleet, fleets_json, open_admission, scheduler_settings
from iam_conditions import allows, request_tag_context

from lambdas.common.permissions import statements
from lambdas.jobs import cli
from lambdas.scheduler import actions
from lambdas.scheduler.handler import run

JOB = {"image": "ghcr.io/team/train:1.0", "command": ["python", "train.py"], "gpus": 1, "vcpus": 1, "memory_mib": 1024}


def start_task_context(params: dict) -> tuple[str, dict]:
    """The resource and request context of a StartTask: the task definition, the cluster (ecs:cluster is
    the cluster's ARN whatever form the request names it in) and the request's tags."""
    cluster = params["cluster"]
    if not cluster.startswith("arn:"):
        cluster = f"arn:aws:ecs:{HOME}:{ACCOUNT}:cluster/{cluster}"
    return params["taskDefinition"], {"ecs:cluster": cluster, **request_tag_context(params.get("tags") or [])}


def test_every_start_the_scheduler_sends_is_allowed_by_its_policy(home, faults):
    build_fleet(size=1)
    open_admission()
    service = cli.JobService(ENV, HOME, home["queue"], home["table"], f"mlfleet-{ENV}-scheduler",
                             cli.parse_fleets(fleets_json()), 3, f"/mlfleet/{ENV}/jobs")
    submitted = cli.submit(service, {**JOB, "command": ["python", "train.py", "--seed", "{seed}"]}, sweep={"seed": ["1", "2"]})
    other = cli.submit(service, {**JOB, "gpus": 2, "command": ["eval"]})

    summary = run(scheduler_settings(home), lambda: 170_000)

    assert sorted(summary["started"]) == sorted([*submitted.job_ids, *other.job_ids])
    policy = statements(actions.PERMISSIONS, account=ACCOUNT, region=HOME, environment=ENV)
    starts = faults.carried_out("ecs", "StartTask")
    assert len(starts) == 3
    for params in starts:
        assert {t["key"]: t["value"] for t in params["tags"]}[actions.ENVIRONMENT_TAG] == ENV
        assert allows(policy, "ecs:StartTask", *start_task_context(params)), params["tags"]
        # The same start from another environment's scheduler, or without the tag, is refused.
        prod = [{**t, "value": "prod"} if t["key"] == actions.ENVIRONMENT_TAG else t for t in params["tags"]]
        untagged = [t for t in params["tags"] if t["key"] != actions.ENVIRONMENT_TAG]
        for tags in (prod, untagged, []):
            assert not allows(policy, "ecs:StartTask", *start_task_context({**params, "tags": tags})), tags
        # And in another environment's cluster.
        assert not allows(policy, "ecs:StartTask", *start_task_context({**params, "cluster": f"{CLUSTER}2"}))
