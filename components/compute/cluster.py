"""A region's ECS cluster for GPU jobs, with its log group, roles and the job task-definition family.

Capacity is the plain Auto Scaling groups of GpuSpotFleet, not an ECS capacity provider: the scheduler
places each job on a chosen container instance (StartTask), so ECS managed scaling would be a second
owner of the groups' desired capacity, and capacity-provider associations are what makes ECS
teardowns hang. See docs/architecture.md, "Who owns desired capacity".
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from components.network.image_cache import PULL_THROUGH_ACTIONS
from components.resources import assume_role_policy, child, invoke, managed_policy
from components.storage.checkpoints import job_access_policy
from lambdas.jobs.credentials import secrets_manager_prefix, ssm_prefix

JOB_CONTAINER_NAME = "job"
# Spot instances get a two-minute notice; the job gets SIGTERM and 110 s to checkpoint (the ECS
# maximum for stopTimeout on EC2 is 120 s).
JOB_STOP_TIMEOUT_SECONDS = 110


def job_task_family(environment: str) -> str:
    return f"mlfleet-{environment}-gpu-job"


def task_role_path(environment: str) -> str:
    return f"/mlfleet/{environment}/"


def cluster_name(environment: str) -> str:
    return f"mlfleet-{environment}"


def job_log_group_name(environment: str) -> str:
    """The jobs' log group, one of this name in every fleet region."""
    return f"/mlfleet/{environment}/jobs"


def job_secrets_policy(environment: str, account: str) -> str:
    """What ECS needs to inject a job's secrets (the container definition's `secrets`), and no more: the
    environment's SSM parameters and Secrets Manager secrets, any region (a job may run in every fleet
    region), and a KMS key only when SSM or Secrets Manager decrypts one of those on the role's behalf.
    ("Required IAM permissions for Amazon ECS secrets", https://docs.aws.amazon.com/AmazonECS/latest/
    developerguide/specifying-sensitive-data.html and .../task_execution_IAM_role.html.) Job specs can
    only name references inside these prefixes (lambdas/jobs/credentials.py).

    kms:ViaService alone would let the role decrypt, through either service, any SecureString parameter or
    secret of the account encrypted with a customer managed key, whatever its name (the resource
    statements bound what the role reads, not what it may decrypt). Each service names what it decrypts in
    the encryption context of its KMS requests, so each decrypt statement is held to its service and to
    the same ARNs as its read statement:
    - Parameter Store: `PARAMETER_ARN`, the parameter's ARN, arn:aws:ssm:<region>:<account>:parameter/<name>
      with the path in the name ("How AWS Systems Manager Parameter Store uses AWS KMS", Parameter Store
      encryption context, https://docs.aws.amazon.com/kms/latest/developerguide/services-parameter-store.html);
    - Secrets Manager: `SecretARN`, the secret's ARN, which ends in "-" and 6 random characters after the
      name, and `SecretVersionId` ("Secret encryption and decryption in AWS Secrets Manager", Secrets
      Manager encryption context, https://docs.aws.amazon.com/secretsmanager/latest/userguide/security-encryption.html).
    The IAM reference lists kms:ViaService and kms:EncryptionContext:${EncryptionContextKey} for kms:Decrypt
    (tests/rules/iam_lint.py checks every statement against it). Two statements, not one: the keys of one
    condition must all hold, and a Parameter Store request carries no SecretARN."""
    # Parameter /mlfleet/dev/x has the ARN ...:parameter/mlfleet/dev/x.
    parameters = f"arn:aws:ssm:*:{account}:parameter{ssm_prefix(environment)}*"
    # Secret mlfleet/dev/x has the ARN ...:secret:mlfleet/dev/x-AbCdEf; the trailing * takes the suffix.
    secrets = f"arn:aws:secretsmanager:*:{account}:secret:{secrets_manager_prefix(environment)}*"
    keys = f"arn:aws:kms:*:{account}:key/*"
    return json.dumps({
        "Version": "2012-10-17",
        "Statement": [
            {"Sid": "ReadJobParameters", "Effect": "Allow", "Action": "ssm:GetParameters", "Resource": parameters},
            {"Sid": "ReadJobSecrets", "Effect": "Allow", "Action": "secretsmanager:GetSecretValue", "Resource": secrets},
            {"Sid": "DecryptJobParameters", "Effect": "Allow", "Action": "kms:Decrypt", "Resource": keys,
             "Condition": {"StringLike": {"kms:ViaService": "ssm.*.amazonaws.com",
                                          "kms:EncryptionContext:PARAMETER_ARN": parameters}}},
            {"Sid": "DecryptJobSecrets", "Effect": "Allow", "Action": "kms:Decrypt", "Resource": keys,
             "Condition": {"StringLike": {"kms:ViaService": "secretsmanager.*.amazonaws.com",
                                          "kms:EncryptionContext:SecretARN": secrets}}},
        ],
    }, sort_keys=True)


@dataclass(frozen=True)
class EcsGpuClusterArgs:
    region: str
    environment: str
    # The default job image as the region's instances pull it (ImageCache.image: ECR Public images
    # through the region's pull-through cache).
    job_image: pulumi.Input[str]
    log_retention_days: int
    tags: Mapping[str, str]
    # The region's checkpoint bucket (components/storage) and the account it belongs to: the job role
    # reads and writes its jobs/ prefix.
    checkpoint_bucket: pulumi.Input[str]
    account_id: pulumi.Input[str]
    # ARN pattern of the repositories of the region's pull-through cache (ImageCache); None: no cache.
    pull_through_repositories_arn: pulumi.Input[str] | None = None


class EcsGpuCluster(pulumi.ComponentResource):
    cluster: aws.ecs.Cluster
    cluster_name: pulumi.Output[str]
    cluster_arn: pulumi.Output[str]
    log_group_name: pulumi.Output[str]
    task_definition_family: pulumi.Output[str]
    task_definition_arn: pulumi.Output[str]
    execution_role_arn: pulumi.Output[str]
    job_role_arn: pulumi.Output[str]

    def __init__(self, name: str, args: EcsGpuClusterArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("mlfleet:compute:EcsGpuCluster", name, None, opts)
        tags = dict(args.tags)

        # Container Insights writes here; left to AWS, the group would have no retention and outlive
        # `pulumi destroy`. Declared first, so the cluster (and its insights) go before it on teardown.
        insights_logs = aws.cloudwatch.LogGroup(
            f"{name}-insights-logs",
            name=f"/aws/ecs/containerinsights/{cluster_name(args.environment)}/performance",
            retention_in_days=args.log_retention_days,
            tags=tags,
            opts=child(self),
        )
        cluster = aws.ecs.Cluster(
            f"{name}-cluster",
            name=cluster_name(args.environment),
            settings=[{"name": "containerInsights", "value": "enabled"}],
            tags=tags,
            opts=child(self, depends_on=[insights_logs]),
        )
        log_group = aws.cloudwatch.LogGroup(
            f"{name}-jobs-logs",
            name=job_log_group_name(args.environment),
            retention_in_days=args.log_retention_days,
            tags=tags,
            opts=child(self),
        )
        execution_role = aws.iam.Role(
            f"{name}-task-execution",
            assume_role_policy=assume_role_policy("ecs-tasks.amazonaws.com"),
            # Under the environment's path: the scheduler may pass exactly these roles (iam:PassRole
            # on role/mlfleet/<env>/*) when it registers a job image's task-definition revision.
            path=task_role_path(args.environment),
            description="Lets ECS pull job images, write job logs and read the secrets jobs reference",
            force_detach_policies=True,
            tags=tags,
            opts=child(self),
        )
        aws.iam.RolePolicyAttachment(
            f"{name}-task-execution-policy",
            role=execution_role.name,
            policy_arn=managed_policy("service-role/AmazonECSTaskExecutionRolePolicy"),
            opts=child(self),
        )
        if args.pull_through_repositories_arn is not None:
            # The ECS agent pulls job images with this role; the managed policy covers plain ECR pulls,
            # not the first pull through the cache (import from upstream, create and tag the repository).
            aws.iam.RolePolicy(
                f"{name}-task-execution-pull-through",
                role=execution_role.id,
                policy=pulumi.Output.from_input(args.pull_through_repositories_arn).apply(
                    lambda arn: json.dumps({
                        "Version": "2012-10-17",
                        "Statement": [{"Sid": "PullThroughCache", "Effect": "Allow",
                                       "Action": list(PULL_THROUGH_ACTIONS), "Resource": arn}],
                    })
                ),
                opts=child(self),
            )
        account = aws.get_caller_identity_output(opts=invoke(self)).account_id
        aws.iam.RolePolicy(
            f"{name}-task-execution-secrets",
            role=execution_role.id,
            policy=account.apply(lambda account_id: job_secrets_policy(args.environment, account_id)),
            opts=child(self),
        )
        # The identity job containers run as. Its only permissions are the region's checkpoint prefix;
        # attach what else jobs need (datasets, a model registry) to this role outside mlfleet.
        job_role = aws.iam.Role(
            f"{name}-job",
            assume_role_policy=assume_role_policy("ecs-tasks.amazonaws.com"),
            path=task_role_path(args.environment),
            description="Identity of mlfleet job containers",
            force_detach_policies=True,  # teams attach their own policies here; destroy must not stop on them
            tags=tags,
            opts=child(self),
        )
        aws.iam.RolePolicy(
            f"{name}-job-checkpoints",
            role=job_role.id,
            policy=pulumi.Output.all(args.checkpoint_bucket, args.account_id).apply(
                lambda values: json.dumps(job_access_policy(*values))),
            opts=child(self),
        )

        container = {
            "name": JOB_CONTAINER_NAME,
            "image": args.job_image,
            "essential": True,
            # The scheduler overrides GPU count, vCPUs, memory, command and environment per job.
            "resourceRequirements": [{"type": "GPU", "value": "1"}],
            "cpu": 1024,
            "memoryReservation": 4096,
            "stopTimeout": JOB_STOP_TIMEOUT_SECONDS,
            # Data loaders open many files and share tensors through /dev/shm (64 MiB by default).
            "ulimits": [{"name": "nofile", "softLimit": 1048576, "hardLimit": 1048576}],
            "linuxParameters": {"sharedMemorySize": 8192},
            "environment": [{"name": "AWS_REGION", "value": args.region}, {"name": "AWS_DEFAULT_REGION", "value": args.region}],
            "logConfiguration": {
                "logDriver": "awslogs",
                "options": {
                    "awslogs-group": log_group.name,
                    "awslogs-region": args.region,
                    "awslogs-stream-prefix": "job",
                },
            },
        }
        task_definition = aws.ecs.TaskDefinition(
            f"{name}-gpu-job",
            family=job_task_family(args.environment),
            network_mode="bridge",
            requires_compatibilities=["EC2"],
            execution_role_arn=execution_role.arn,
            task_role_arn=job_role.arn,
            container_definitions=pulumi.Output.json_dumps([container]),
            tags=tags,
            opts=child(self),
        )

        self.cluster = cluster
        self.cluster_name = cluster.name
        self.cluster_arn = cluster.arn
        self.log_group_name = log_group.name
        self.task_definition_family = task_definition.family
        self.task_definition_arn = task_definition.arn
        self.execution_role_arn = execution_role.arn
        self.job_role_arn = job_role.arn
        self.register_outputs(
            {
                "cluster_name": self.cluster_name,
                "cluster_arn": self.cluster_arn,
                "task_definition_family": self.task_definition_family,
            }
        )
