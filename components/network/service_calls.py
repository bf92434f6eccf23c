"""What the GPU instances and their jobs call on AWS, so what a region without internet egress must reach.

Product data, one entry per (caller, endpoint service), each with the document that says so. Three
places read it and nothing else repeats it:
- the Network component creates one interface endpoint per service here (the S3 gateway endpoint is
  always there), so a new entry is a new endpoint in the preview;
- tests/rules/test_reachability.py checks every rendered region without internet egress against it;
- docs/network.md lists it for teams that bring their own VPC (`mlfleet:networks`), where mlfleet adds
  nothing and the team's network must reach each service (a test keeps that page in step).

An endpoint service is the suffix of `com.amazonaws.<region>.<service>`.

The Lambda functions are not here: they run outside any VPC (components/functions gives them no
`vpc_config`), in the Lambda service's own network, and reach the public regional endpoints. The
reachability check fails if a function is ever put into a VPC, so that this stays true.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ServiceCall:
    caller: str  # who calls: an agent on the instance, or the job
    service: str  # the endpoint service it reaches
    calls: str  # the API operations (or protocol) it uses there
    why: str  # what breaks without it
    source: str  # the document (or source file) that says the caller needs it


ECS_ENDPOINTS_DOC = "https://docs.aws.amazon.com/AmazonECS/latest/developerguide/vpc-endpoints.html"
ECR_ENDPOINTS_DOC = "https://docs.aws.amazon.com/AmazonECR/latest/userguide/vpc-endpoints.html"
SSM_ENDPOINTS_DOC = "https://docs.aws.amazon.com/systems-manager/latest/userguide/setup-create-vpc.html"

# Services reached through a gateway endpoint (a route, not an interface with private DNS). S3's is free
# and carries ECR image layers, so the Network component always creates it.
GATEWAY_SERVICES = ("s3",)

INSTANCE_CALLS: tuple[ServiceCall, ...] = (
    ServiceCall(
        "ECS agent", "ecs", "ecs:RegisterContainerInstance, DiscoverPollEndpoint, Submit*StateChange",
        "the instance never joins its cluster",
        ECS_ENDPOINTS_DOC,
    ),
    ServiceCall(
        "ECS agent", "ecs-agent", "the agent communication service (ACS): tasks to start and stop, task-role credentials",
        "no job starts on the instance, and jobs get no task-role credentials",
        ECS_ENDPOINTS_DOC,
    ),
    ServiceCall(
        "ECS agent", "ecs-telemetry", "the telemetry service (TCS): task and instance metrics, Container Insights",
        "no ECS metrics or Container Insights for the instance",
        ECS_ENDPOINTS_DOC,
    ),
    ServiceCall(
        "ECS agent", "ec2", "ec2:DescribeTags (ECS_CONTAINER_INSTANCE_PROPAGATE_TAGS_FROM=ec2_instance)",
        "registration fails: the agent returns the DescribeTags error instead of registering",
        "https://docs.aws.amazon.com/AmazonECS/latest/developerguide/ecs-agent-config.html; "
        "github.com/aws/amazon-ecs-agent agent/app/agent.go (registerContainerInstance)",
    ),
    ServiceCall(
        "ECS agent (image pulls, task execution role)", "ecr.api", "ecr:GetAuthorizationToken, BatchGetImage",
        "job images from ECR (and the ECR Public cache) cannot be pulled",
        ECR_ENDPOINTS_DOC,
    ),
    ServiceCall(
        "ECS agent (image pulls, task execution role)", "ecr.dkr", "the Docker Registry API of the region's ECR",
        "job images from ECR (and the ECR Public cache) cannot be pulled",
        ECR_ENDPOINTS_DOC,
    ),
    ServiceCall(
        "ECS agent (image pulls, task execution role)", "s3", "GET of image layers from ECR's S3 buckets",
        "image pulls stop after the manifest",
        ECR_ENDPOINTS_DOC,
    ),
    # The agent resolves a task's `secrets` on the instance with the task execution role, in the region the
    # reference names (job specs may name SSM parameters and Secrets Manager secrets: docs/jobs.md, "Secrets").
    ServiceCall(
        "ECS agent (job secrets, task execution role)", "secretsmanager", "secretsmanager:GetSecretValue",
        "a job naming a Secrets Manager secret never starts: the agent cannot fetch the secret",
        "https://docs.aws.amazon.com/AmazonECS/latest/developerguide/secrets-app-secrets-manager.html; "
        "github.com/aws/amazon-ecs-agent agent/taskresource/asmsecret/asmsecret.go (Create, NewASMClient)",
    ),
    ServiceCall(
        "ECS agent (job secrets, task execution role)", "ssm", "ssm:GetParameters",
        "a job naming an SSM parameter never starts: the agent cannot fetch the parameter",
        "https://docs.aws.amazon.com/AmazonECS/latest/developerguide/secrets-envvar-ssm-paramstore.html; "
        "github.com/aws/amazon-ecs-agent agent/taskresource/ssmsecret/ssmsecret.go (Create, NewSSMClient)",
    ),
    ServiceCall(
        "CloudWatch agent", "monitoring", "cloudwatch:PutMetricData (nvidia_gpu, cpu, mem, disk)",
        "no GPU metrics: the idle alarms and the reaper see missing data, which means busy",
        "https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/cloudwatch-and-interface-VPC.html",
    ),
    ServiceCall(
        "CloudWatch agent", "ec2", "ec2:DescribeTags (append_dimensions AutoScalingGroupName)",
        "no metric at all: the agent's ec2tagger drops every metric until its first DescribeTags succeeds",
        "https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/"
        "CloudWatch-Agent-Configuration-File-Details.html; "
        "github.com/aws/amazon-cloudwatch-agent plugins/processors/ec2tagger/ec2tagger.go (processMetrics)",
    ),
    ServiceCall(
        "SSM agent", "ssm", "ssm:UpdateInstanceInformation and the other agent operations",
        "the instance is not managed: no Session Manager, no `make ami-test` run command",
        SSM_ENDPOINTS_DOC,
    ),
    ServiceCall(
        "SSM agent", "ssmmessages", "Session Manager and Run Command channels",
        "no Session Manager sessions",
        SSM_ENDPOINTS_DOC,
    ),
    ServiceCall(
        "SSM agent", "ec2messages", "Run Command messages (the Message Delivery Service, when ssmmessages is not used)",
        "Run Command may not reach the instance",
        SSM_ENDPOINTS_DOC + "; https://docs.aws.amazon.com/systems-manager/latest/userguide/"
        "systems-manager-setting-up-messageAPIs.html",
    ),
)

JOB_CALLS: tuple[ServiceCall, ...] = (
    ServiceCall(
        "job output (Docker awslogs driver)", "logs", "logs:CreateLogStream, logs:PutLogEvents",
        "the job's container fails to start: the awslogs driver cannot create its stream",
        "https://docs.aws.amazon.com/AmazonCloudWatch/latest/logs/cloudwatch-logs-and-interface-VPC.html; "
        "https://docs.aws.amazon.com/AmazonECS/latest/developerguide/using_awslogs.html",
    ),
    ServiceCall(
        "job code (AWS SDKs with the task role)", "sts",
        "sts:GetCallerIdentity, AssumeRole (SDKs use the regional STS endpoint)",
        "SDK calls that go through STS fail (the credentials themselves come from the ECS agent)",
        "https://docs.aws.amazon.com/sdkref/latest/guide/feature-sts-regionalized-endpoints.html; "
        "https://docs.aws.amazon.com/AmazonECS/latest/developerguide/task-iam-roles.html",
    ),
    ServiceCall(
        "job code (datasets, models, checkpoints)", "s3",
        "s3:GetObject, PutObject on the region's checkpoint bucket (MLFLEET_CHECKPOINT_URI) and the team's buckets in the region",
        "jobs cannot resume from checkpoints, read data or write results (buckets of other regions need internet egress)",
        "docs/jobs.md (spec files pass s3:// locations; Checkpoints); "
        "https://docs.aws.amazon.com/vpc/latest/privatelink/vpc-endpoints-s3.html",
    ),
)

SERVICE_CALLS: tuple[ServiceCall, ...] = INSTANCE_CALLS + JOB_CALLS


def required_services() -> tuple[str, ...]:
    """Every endpoint service the instances and jobs call, sorted."""
    return tuple(sorted({call.service for call in SERVICE_CALLS}))


def interface_endpoint_services() -> tuple[str, ...]:
    """The services a VPC without internet egress reaches through interface endpoints (private DNS)."""
    return tuple(s for s in required_services() if s not in GATEWAY_SERVICES)


def markdown_table() -> str:
    """The table docs/network.md carries (tests/rules/test_reachability.py prints it when the page is stale)."""
    rows = ["| endpoint service | caller | calls | without it | source |", "|---|---|---|---|---|"]
    for call in sorted(SERVICE_CALLS, key=lambda c: (c.service, c.caller)):
        kind = "gateway or interface" if call.service in GATEWAY_SERVICES else "interface, private DNS"
        sources = ", ".join(f"<{s.strip()}>" if s.strip().startswith("https://") else s.strip()
                            for s in call.source.split(";"))
        rows.append(f"| `{call.service}` ({kind}) | {call.caller} | {call.calls} | {call.why} | {sources} |")
    return "\n".join(rows)

