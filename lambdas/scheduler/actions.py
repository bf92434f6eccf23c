"""What the scheduler changes: task definitions per image, StartTask per job, desired capacity, alerts.

Every action is safe to repeat: a task-definition revision is reused when its image matches, a job's
ledger claim happens before its StartTask (so a second attempt to start it finds the claim taken), and
desired capacity is re-read and capped just before it is raised.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from botocore.exceptions import ClientError

from lambdas.common.logs import log_decision
from lambdas.common.permissions import ISO_8601_TIME, PUBLISH_TO_ENCRYPTED_TOPICS, needs
from lambdas.jobs.checkpoints import INTERVAL_VARIABLE, URI_VARIABLE
from lambdas.jobs.ledger import JobRecord
from lambdas.scheduler.state import SCALING_PAUSED_TAG

JOB_ID_TAG, ATTEMPT_TAG = "mlfleet:job-id", "mlfleet:attempt"
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

PERMISSIONS = (
    needs("ecs:StartTask", resources=(JOB_FAMILY_REVISIONS,),
          condition={"ArnLike": {"ecs:cluster": CLUSTER_ARN}}, why="start jobs on the chosen container instances"),
    needs("ecs:StopTask", resources=("arn:{partition}:ecs:*:{account}:task/mlfleet-{environment}/*",),
          condition={"ArnLike": {"ecs:cluster": CLUSTER_ARN}}, why="stop a task whose job was cancelled while starting"),
    needs("ecs:TagResource", resources=("arn:{partition}:ecs:*:{account}:task/mlfleet-{environment}/*", JOB_FAMILY_REVISIONS),
          condition={"StringEquals": {"ecs:CreateAction": ["StartTask", "RegisterTaskDefinition"]}},
          why="tag tasks with their job and attempt, and per-image revisions like the family"),
    needs("ecs:RegisterTaskDefinition", resources=(JOB_FAMILY_REVISIONS,),
          why="a revision of the environment's job family per image"),
    needs("ecs:ListTaskDefinitions", "ecs:DescribeTaskDefinition",
          why="find the family's revisions (these actions take no resource ARN)"),
    needs("iam:PassRole", resources=("arn:{partition}:iam::{account}:role/mlfleet/{environment}/*",),
          condition={"StringEquals": {"iam:PassedToService": "ecs-tasks.amazonaws.com"}},
          why="register revisions that keep the family's task and execution roles"),
    needs("autoscaling:SetDesiredCapacity", tag_scoped=True, why="scale out a fleet of this environment"),
    needs("autoscaling:CreateOrUpdateTags", tag_scoped=True, tag_keys=(SCALING_PAUSED_TAG,), tag_values=ISO_8601_TIME,
          why="mark the circuit breaker on the group (the scaling-paused-at tag only)"),
    needs("autoscaling:DeleteTags", tag_scoped=True, tag_keys=(SCALING_PAUSED_TAG,), why="clear the mark"),
    needs("sns:Publish", resources=("arn:{partition}:sns:{region}:{account}:mlfleet-{environment}-alerts",),
          why="alert when the circuit breaker stops a fleet's scaling"),
    PUBLISH_TO_ENCRYPTED_TOPICS,
)


@dataclass
class TaskDefinitions:
    """Per-image revisions of a region's job family, cached for one run.

    StartTask cannot override the image, so each image gets a revision copied from the family's latest
    ACTIVE revision (roles, log configuration, GPU requirement) with only the image changed.
    """
    ecs: object
    _cache: dict = field(default_factory=dict)

    def arn_for(self, family: str, image: str) -> str:
        key = (family, image)
        if key not in self._cache:
            self._cache[key] = self._find(family, image) or self._register(family, image)
        return self._cache[key]

    def _find(self, family: str, image: str) -> str | None:
        arns = self.ecs.list_task_definitions(familyPrefix=family, status="ACTIVE", sort="DESC",
                                              maxResults=REVISIONS_SEARCHED)["taskDefinitionArns"]
        for arn in arns:
            definition = self.ecs.describe_task_definition(taskDefinition=arn)["taskDefinition"]
            if definition["family"] == family and definition["containerDefinitions"][0]["image"] == image:
                return arn
        return None

    def _register(self, family: str, image: str) -> str:
        described = self.ecs.describe_task_definition(taskDefinition=family, include=["TAGS"])
        base = described["taskDefinition"]
        containers = [dict(c) for c in base["containerDefinitions"]]
        containers[0]["image"] = image
        copied = {k: base[k] for k in COPIED_FIELDS if base.get(k)}
        tags = described.get("tags") or []
        registered = self.ecs.register_task_definition(family=family, containerDefinitions=containers, **copied,
                                                       **({"tags": tags} if tags else {}))["taskDefinition"]
        log_decision("register-task-definition", family=family, image=image, revision=registered["revision"],
                     copied_from=base["taskDefinitionArn"])
        return registered["taskDefinitionArn"]

    def container_name(self, arn: str) -> str:
        return self.ecs.describe_task_definition(taskDefinition=arn)["taskDefinition"]["containerDefinitions"][0]["name"]


def overrides(record: JobRecord, container_name: str, attempt: int, checkpoint_uri: str) -> dict:
    spec = record.spec
    environment = {**spec.environment, "MLFLEET_JOB_ID": record.job_id, "MLFLEET_ATTEMPT": str(attempt),
                   URI_VARIABLE: checkpoint_uri}
    if spec.checkpoint_interval_minutes is not None:
        environment[INTERVAL_VARIABLE] = str(spec.checkpoint_interval_minutes)
    override = {
        "name": container_name,
        "environment": [{"name": k, "value": v} for k, v in sorted(environment.items())],
        "resourceRequirements": [{"type": "GPU", "value": str(spec.gpus)}],
        "cpu": max(1, round(spec.vcpus * 1024)),
        # A soft reservation (what ECS and the planner count); no hard limit, so a job is not
        # OOM-killed for briefly using more memory than it asked for while the machine has it.
        "memoryReservation": spec.memory_mib,
    }
    if spec.command:
        override["command"] = list(spec.command)
    return {"containerOverrides": [override]}


@dataclass(frozen=True)
class Started:
    task_arn: str | None
    failure: str = ""


def start_job(ecs, *, cluster: str, task_definition_arn: str, container_instance_arn: str, record: JobRecord,
              attempt: int, container_name: str, environment: str, checkpoint_uri: str) -> Started:
    """StartTask for one job on one container instance.

    StartTask takes up to 10 container instances but one set of overrides for all of them, and jobs
    differ in command, environment and resources, so each job is its own call.
    """
    try:
        response = ecs.start_task(
            cluster=cluster, taskDefinition=task_definition_arn, containerInstances=[container_instance_arn],
            startedBy=record.job_id, overrides=overrides(record, container_name, attempt, checkpoint_uri),
            tags=[{"key": JOB_ID_TAG, "value": record.job_id}, {"key": ATTEMPT_TAG, "value": str(attempt)},
                  {"key": "mlfleet:environment", "value": environment},
                  {"key": "mlfleet:submission-id", "value": record.submission_id}])
    except ClientError as error:
        return Started(None, f"StartTask failed: {error.response['Error'].get('Code')}: {error.response['Error'].get('Message')}")
    if response.get("tasks"):
        return Started(response["tasks"][0]["taskArn"])
    failures = "; ".join(f"{f.get('reason')} {f.get('detail', '')}".strip() for f in response.get("failures", []))
    return Started(None, f"StartTask refused: {failures or 'no task returned'}")


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


def publish_alert(sns, topic_arn: str, subject: str, message: str) -> None:
    sns.publish(TopicArn=topic_arn, Subject=subject[:100], Message=message)


def stop_task(ecs, cluster: str, task_arn: str, reason: str) -> None:
    ecs.stop_task(cluster=cluster, task=task_arn, reason=reason[:255])

