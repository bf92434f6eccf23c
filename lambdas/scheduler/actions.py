"""What the scheduler changes: task definitions per image and secret set, StartTask per job, desired
capacity, and the permission to alert (lambdas/common/alerts.py publishes the alerts).

Every action is safe to repeat: a task-definition revision is reused when its image and secrets match, a
job's ledger claim happens before its StartTask (so a second attempt to start it finds the claim taken),
and desired capacity is re-read and capped just before it is raised. StartTask itself is sent once (no
retry of a request whose answer was lost: it has no client token), and its outcome says what the job's
claim should become.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

from botocore.exceptions import BotoCoreError, ClientError

from ..common.errors import describe, error_code, is_transient, was_not_sent
from ..common.logs import log_decision
from ..common.permissions import ISO_8601_TIME, PUBLISH_TO_ENCRYPTED_TOPICS, needs
from ..common.tags import ENVIRONMENT as ENVIRONMENT_TAG
from ..common.tags import START_REFUSED_AT
from ..jobs.credentials import container_secrets
from ..jobs.ledger import JobRecord
from ..jobs.spec import OVERRIDES_LIMIT, JobSpec, container_overrides, gpu_requirement, overrides_size
from .state import SCALING_PAUSED_TAG

JOB_ID_TAG, ATTEMPT_TAG, SUBMISSION_ID_TAG = "mlfleet:job-id", "mlfleet:attempt", "mlfleet:submission-id"
# The tags every task the scheduler starts carries (start_job), and the only ones its StartTask may carry.
TASK_TAGS = (JOB_ID_TAG, ATTEMPT_TAG, ENVIRONMENT_TAG, SUBMISSION_ID_TAG)
# Revisions looked at (newest first) for one whose image matches, before registering a new one.
REVISIONS_SEARCHED = 25
# Task-definition fields copied from the family's latest revision into a per-image revision.
COPIED_FIELDS = ("taskRoleArn", "executionRoleArn", "networkMode", "volumes", "placementConstraints",
                 "requiresCompatibilities", "cpu", "memory", "pidMode", "ipcMode", "ephemeralStorage",
                 "runtimePlatform")
CLUSTER_ARN = "arn:{partition}:ecs:*:{account}:cluster/mlfleet-{environment}"
# RegisterTaskDefinition is authorized on the task-definition ARN (family:revision) it creates: the
# scheduler registers revisions of the environment's job family only.
JOB_FAMILY_REVISIONS = "arn:{partition}:ecs:*:{account}:task-definition/mlfleet-{environment}-gpu-job:*"
# The environment's fleet groups (components/compute/fleet.py fleet_group_name): Auto Scaling authorizes
# SetDesiredCapacity and its tag writes on the group's ARN (the IAM reference), so they are granted on
# these, never "*", and tag-scoped as well.
FLEET_GROUPS = "arn:{partition}:autoscaling:*:{account}:autoScalingGroup:*:autoScalingGroupName/mlfleet-{environment}-*"

PERMISSIONS = (
    # Conditions the request must meet (the IAM reference lists ecs:cluster, aws:RequestTag/${TagKey} and
    # aws:TagKeys for StartTask): the environment's clusters, the task tagged with its environment
    # (start_job always sends the tag, and ECS puts a request's `tags` in aws:RequestTag and aws:TagKeys:
    # https://docs.aws.amazon.com/AmazonECS/latest/developerguide/supported-iam-actions-tagging.html), and
    # no tag but the job's own (tag_keys: ForAllValues aws:TagKeys, with Null aws:TagKeys false).
    needs("ecs:StartTask", resources=(JOB_FAMILY_REVISIONS,),
          condition={"ArnLike": {"ecs:cluster": CLUSTER_ARN},
                     "StringEquals": {f"aws:RequestTag/{ENVIRONMENT_TAG}": "{environment}"}},
          tag_keys=TASK_TAGS, why="start jobs on the chosen container instances, tagged with the environment"),
    needs("ecs:StopTask", resources=("arn:{partition}:ecs:*:{account}:task/mlfleet-{environment}/*",),
          condition={"ArnLike": {"ecs:cluster": CLUSTER_ARN}}, why="stop a task whose job was cancelled while starting, or is moved to another machine"),
    needs("ecs:TagResource", resources=("arn:{partition}:ecs:*:{account}:task/mlfleet-{environment}/*", JOB_FAMILY_REVISIONS),
          condition={"StringEquals": {"ecs:CreateAction": ["StartTask", "RegisterTaskDefinition"]}},
          why="tag tasks with their job and attempt, and per-image revisions like the family"),
    # Conditions the request must meet (the IAM reference lists both keys for RegisterTaskDefinition): the
    # revision is tagged with its environment (TaskDefinitions always sends the tag), and no container of it
    # is privileged (a job image never needs the host's devices beyond its GPUs, which ECS assigns).
    needs("ecs:RegisterTaskDefinition", resources=(JOB_FAMILY_REVISIONS,),
          condition={"StringEquals": {f"aws:RequestTag/{ENVIRONMENT_TAG}": "{environment}"},
                     "BoolIfExists": {"ecs:privileged": "false"}},
          why="a revision of the environment's job family per image, tagged with the environment, unprivileged"),
    needs("ecs:ListTaskDefinitions", "ecs:DescribeTaskDefinition",
          why="find the family's revisions (these actions take no resource ARN)"),
    needs("iam:PassRole", resources=("arn:{partition}:iam::{account}:role/mlfleet/{environment}/*",),
          condition={"StringEquals": {"iam:PassedToService": "ecs-tasks.amazonaws.com"}},
          why="register revisions that keep the family's task and execution roles"),
    needs("autoscaling:SetDesiredCapacity", resources=(FLEET_GROUPS,), tag_scoped=True,
          why="scale out a fleet of this environment"),
    needs("autoscaling:CreateOrUpdateTags", resources=(FLEET_GROUPS,), tag_scoped=True, tag_keys=(SCALING_PAUSED_TAG,),
          tag_values=ISO_8601_TIME, why="mark the circuit breaker on the group (the scaling-paused-at tag only)"),
    needs("autoscaling:DeleteTags", resources=(FLEET_GROUPS,), tag_scoped=True, tag_keys=(SCALING_PAUSED_TAG,),
          why="clear the mark"),
    needs("ec2:CreateTags", resources=("arn:{partition}:ec2:*:{account}:instance/*",), tag_scoped=True,
          tag_keys=(START_REFUSED_AT,), tag_values=ISO_8601_TIME,
          why="mark an instance ECS refused a start on for the machine (the start-refused-at tag only)"),
    needs("sns:Publish", resources=("arn:{partition}:sns:{region}:{account}:mlfleet-{environment}-alerts",),
          why="alert when the circuit breaker stops a fleet's scaling, or when jobs are quarantined"),
    PUBLISH_TO_ENCRYPTED_TOPICS,
)


@dataclass(frozen=True)
class Revision:
    arn: str
    container_name: str


def _secret_set(secrets: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple((s["name"], s["valueFrom"]) for s in container_secrets(secrets))


# A revision for whole-GPU jobs asks for one GPU, as the family does; each job's overrides set its count.
WHOLE_GPU = (("type", "GPU"), ("value", "1"))


def gpu_key(spec: JobSpec | None) -> tuple:
    """The GPU requirement a job's revision must have. ECS takes a GPU `value` or a `sharingStrategy`, never
    both, and "the containers in a task that request GPUs must all use the same option" (botocore's ecs model,
    ResourceRequirement): a job sharing a GPU gets a revision with its own `nvidiaMps` allocation, which its
    overrides repeat."""
    if spec is None or not spec.shares_gpu:
        return WHOLE_GPU
    return tuple(sorted((k, json.dumps(v, sort_keys=True) if isinstance(v, dict) else v)
                        for k, v in gpu_requirement(spec).items()))


def _gpu_requirement(key: tuple) -> dict:
    return {k: json.loads(v) if k == "sharingStrategy" else v for k, v in key}


@dataclass
class TaskDefinitions:
    """Revisions of a region's job family per (image, secret set, GPU requirement), cached for one run.

    StartTask cannot override the image, and container overrides cannot carry secrets (botocore's ecs
    model: ContainerOverride has no `secrets`, ContainerDefinition has), so each image and set of secret
    references gets a revision copied from the family's latest ACTIVE revision (roles, log configuration)
    with only the image, the secrets and the GPU requirement (`gpu_key`) set.
    """
    ecs: object
    # The environment the revisions are tagged with (the scheduler's IAM policy registers only revisions
    # carrying it); None keeps the family's tags as they are.
    environment: str | None = None
    _cache: dict = field(default_factory=dict)

    def revision_for(self, family: str, image: str, secrets: Mapping[str, str] | None = None,
                     spec: JobSpec | None = None) -> Revision:
        key = (family, image, _secret_set(secrets or {}), gpu_key(spec))
        if key not in self._cache:
            self._cache[key] = self._find(*key) or self._register(*key)
        return self._cache[key]

    def arn_for(self, family: str, image: str, secrets: Mapping[str, str] | None = None) -> str:
        return self.revision_for(family, image, secrets).arn

    def _find(self, family: str, image: str, secrets: tuple[tuple[str, str], ...], gpu: tuple) -> Revision | None:
        arns = self.ecs.list_task_definitions(familyPrefix=family, status="ACTIVE", sort="DESC",
                                              maxResults=REVISIONS_SEARCHED)["taskDefinitionArns"]
        for arn in arns:
            definition = self.ecs.describe_task_definition(taskDefinition=arn)["taskDefinition"]
            container = definition["containerDefinitions"][0]
            found = tuple(sorted((s["name"], s["valueFrom"]) for s in container.get("secrets") or ()))
            gpus = [r for r in container.get("resourceRequirements") or () if r.get("type") == "GPU"]
            if definition["family"] == family and container["image"] == image and found == secrets and \
                    len(gpus) == 1 and _gpu_requirement(gpu) == gpus[0]:
                return Revision(arn, container["name"])
        return None

    def _register(self, family: str, image: str, secrets: tuple[tuple[str, str], ...], gpu: tuple) -> Revision:
        described = self.ecs.describe_task_definition(taskDefinition=family, include=["TAGS"])
        base = described["taskDefinition"]
        containers = [dict(c) for c in base["containerDefinitions"]]
        containers[0]["image"] = image
        # The latest revision may be another job's: its secrets and GPU requirement are replaced, never inherited.
        containers[0].pop("secrets", None)
        if secrets:
            containers[0]["secrets"] = [{"name": name, "valueFrom": value} for name, value in secrets]
        containers[0]["resourceRequirements"] = [
            *(r for r in containers[0].get("resourceRequirements") or () if r.get("type") != "GPU"),
            _gpu_requirement(gpu)]
        copied = {k: base[k] for k in COPIED_FIELDS if base.get(k)}
        tags = [t for t in described.get("tags") or [] if self.environment is None or t["key"] != ENVIRONMENT_TAG]
        if self.environment is not None:
            tags.append({"key": ENVIRONMENT_TAG, "value": self.environment})
        registered = self.ecs.register_task_definition(family=family, containerDefinitions=containers, **copied,
                                                       **({"tags": tags} if tags else {}))["taskDefinition"]
        log_decision("register-task-definition", family=family, image=image, revision=registered["revision"],
                     secrets=[name for name, _ in secrets], gpu=_gpu_requirement(gpu),
                     copied_from=base["taskDefinitionArn"])
        return Revision(registered["taskDefinitionArn"], containers[0]["name"])


def overrides(record: JobRecord, container_name: str, attempt: int, checkpoint_uri: str) -> dict:
    return container_overrides(record.spec, record.job_id, attempt, checkpoint_uri, container_name)


# What a StartTask outcome means for the job's claim (STARTING at this attempt).
STARTED = "started"
REFUSED = "refused"      # ECS refused it for the job (or for a reason not known to be the machine's): a failed start
# ECS refused it for the machine (its resources, its agent, its registration): the claim is released
# uncounted, and the machine marked so that no run places on it for a while (state.START_REFUSED_HOLD).
MACHINE_REFUSED = "machine-refused"
PERMANENT = "permanent"  # can never start as it is (overrides over ECS's limit): the job fails now
RETRY = "retry"          # nothing was done (throttled, not sent): release the claim, uncounted
UNKNOWN = "unknown"      # the answer was lost: a task may run; the recovery of STARTING jobs finds out


@dataclass(frozen=True)
class Started:
    task_arn: str | None
    failure: str = ""
    outcome: str = STARTED


# StartTask failure reasons about the container instance, not the task (the ECS developer guide, "API
# failure reasons", https://docs.aws.amazon.com/AmazonECS/latest/developerguide/api_failures_messages.html):
# RESOURCE:CPU, RESOURCE:MEMORY, RESOURCE:GPU, RESOURCE:PORTS, RESOURCE:ENI (what the task asks for is not
# available on that instance: the machine has less than the plan counted), AGENT (its agent is
# disconnected), MISSING (no such container instance), INACTIVE (deregistered), DRAINING. Another machine,
# or the same one later, may start the job. Every other reason (ATTRIBUTE: the job's task definition
# needs an attribute the instance lacks; any reason not listed) counts against the job as before: a job no
# machine can start then fails after MAX_START_FAILURES instead of waiting forever.
MACHINE_REASONS = ("AGENT", "MISSING", "INACTIVE", "DRAINING")


def machine_refused(reason: str) -> bool:
    """Whether a StartTask failure reason is about the machine (MACHINE_REASONS, RESOURCE:*)."""
    reason = reason.strip().removeprefix("TaskFailedToStart:").strip().upper()
    return reason.startswith("RESOURCE") or reason in MACHINE_REASONS


def _overrides_refused(error: ClientError) -> bool:
    # "InvalidParameterException: Container Overrides length must be at most 8192"
    return error_code(error) in ("InvalidParameterException", "ClientException") and \
        "overrides length" in describe(error).lower()


def task_tags(record: JobRecord, attempt: int, environment: str) -> list[dict[str, str]]:
    """StartTask's `tags`: the keys of TASK_TAGS, each once. The scheduler's role starts only tasks tagged
    with its environment (PERMISSIONS: aws:RequestTag), so every start carries the tag."""
    values = {JOB_ID_TAG: record.job_id, ATTEMPT_TAG: str(attempt), ENVIRONMENT_TAG: environment,
              SUBMISSION_ID_TAG: record.submission_id}
    return [{"key": key, "value": values[key]} for key in TASK_TAGS]


def start_job(ecs, *, cluster: str, task_definition_arn: str, container_instance_arn: str, record: JobRecord,
              attempt: int, container_name: str, environment: str, checkpoint_uri: str) -> Started:
    """StartTask for one job on one container instance. `ecs` must send the request once (aws.single_attempt_client).

    StartTask takes up to 10 container instances but one set of overrides for all of them, and jobs
    differ in command, environment and resources, so each job is its own call.
    """
    job_overrides = overrides(record, container_name, attempt, checkpoint_uri)
    size = overrides_size(job_overrides)
    if size > OVERRIDES_LIMIT:
        return Started(None, f"container overrides are {size:,} characters, over ECS's limit of {OVERRIDES_LIMIT:,}",
                       PERMANENT)
    try:
        response = ecs.start_task(
            cluster=cluster, taskDefinition=task_definition_arn, containerInstances=[container_instance_arn],
            startedBy=record.job_id, overrides=job_overrides,
            tags=task_tags(record, attempt, environment))
    except ClientError as error:
        if _overrides_refused(error):
            return Started(None, f"StartTask refused: {describe(error)}", PERMANENT)
        if is_transient(error):
            return Started(None, f"StartTask failed: {describe(error)}", RETRY if was_not_sent(error) else UNKNOWN)
        return Started(None, f"StartTask failed: {describe(error)}", REFUSED)
    except BotoCoreError as error:
        return Started(None, f"StartTask failed: {describe(error)}", RETRY if was_not_sent(error) else UNKNOWN)
    if response.get("tasks"):
        return Started(response["tasks"][0]["taskArn"])
    failures = response.get("failures", [])
    text = "; ".join(f"{f.get('reason')} {f.get('detail', '')}".strip() for f in failures)
    by_machine = bool(failures) and all(machine_refused(str(f.get("reason") or "")) for f in failures)
    return Started(None, f"StartTask refused: {text or 'no task returned'}", MACHINE_REFUSED if by_machine else REFUSED)


def mark_start_refused(ec2, instance_id: str, at: str) -> None:
    """Tag the instance `mlfleet:start-refused-at` (CreateTags overwrites the value: safe to repeat)."""
    ec2.create_tags(Resources=[instance_id], Tags=[{"Key": START_REFUSED_AT, "Value": at}])


def raise_desired_capacity(autoscaling, asg_name: str, add: int, cap: int) -> tuple[int, int] | None:
    """Desired capacity += add, never above `cap` (re-read now, not from the run's earlier snapshot).

    Returns (before, after), or None when the group is already at its cap.
    """
    group = autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=[asg_name])["AutoScalingGroups"][0]
    before = int(group["DesiredCapacity"])
    after = min(before + add, cap, int(group["MaxSize"]))
    if after <= before:
        return None
    autoscaling.set_desired_capacity(AutoScalingGroupName=asg_name, DesiredCapacity=after, HonorCooldown=False)
    return before, after


def set_scaling_paused(autoscaling, asg_name: str, paused_at: str | None) -> None:
    """Mark (or clear) the circuit breaker on the group, so the alert goes out once per opening."""
    tag = {"ResourceId": asg_name, "ResourceType": "auto-scaling-group", "Key": SCALING_PAUSED_TAG}
    if paused_at is None:
        autoscaling.delete_tags(Tags=[tag])
    else:
        autoscaling.create_or_update_tags(Tags=[{**tag, "Value": paused_at, "PropagateAtLaunch": False}])


def stop_task(ecs, cluster: str, task_arn: str, reason: str) -> None:
    ecs.stop_task(cluster=cluster, task=task_arn, reason=reason[:255])

