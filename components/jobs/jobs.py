"""The job service in the home region: queue, dead-letter queue, ledger, scheduler and job events.

- `mlfleet-<env>-jobs` (SQS, SSE): work to look at, one message per job attempt; the submission CLI
  sends them and pokes the scheduler. Messages nobody can read go to `mlfleet-<env>-jobs-dlq` after 5
  receives; jobs that exhaust their attempts are sent there by the functions, with the reason.
- `mlfleet-<env>-jobs` (DynamoDB): the ledger, source of truth for every job's state; conditional
  writes make a twice-delivered message start an attempt at most once (lambdas/jobs/ledger.py).
- `mlfleet-<env>-scheduler`: every minute and on new jobs, one run at a time: two runs would plan on the
  same free GPUs, so each run holds the placement lease in the ledger (lambdas/common/lease.py), which unlike
  reserved concurrency needs no Lambda concurrency quota. With ACCOUNT_ID it names each fleet region's
  checkpoint bucket (lambdas/jobs/checkpoints.py, as components/storage does) and gives every job its
  checkpoint location.
- `/mlfleet/<env>/teams` (SSM): the teams' weights and quotas, read by the scheduler at every run and by
  `mlfleet submit` (lambdas/jobs/teams.py).
- `/mlfleet/<env>/job-service` (SSM): what the `mlfleet` command needs to find all of the above (queue,
  ledger, scheduler, fleets, log group), what each fleet region's machines can pull (internet egress, the
  ECR pull-through cache) and where notifications go, so data scientists need neither the repository nor
  Pulumi (`job_service_document`; a dry run builds the same description from the stack file).
- `mlfleet-<env>-job_events`: spot interruptions, rebalance recommendations and task state changes from
  every fleet region (components/jobs/events.py), plus a 5-minute check that undoes stale rebalances; and
  the ledger's stream of ended jobs, from which it announces the end of submissions (notifications.py).

The ledger is the only stateful resource mlfleet declares: retained (and deletion-protected, with
point-in-time recovery) only when the stack config says `retainJobLedger: true`. A kept ledger keeps its
name, so after a destroy the next `up` could not create it again (CreateTable: ResourceInUseException);
`adoptJobLedger: true` imports it instead, by that name (docs/runbook.md "Tearing down an environment").
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from components.compute import cluster_name, fleet_group_name, job_log_group_name, job_task_family
from components.config import StackConfig
from components.functions import PythonFunction, PythonFunctionArgs
from components.jobs.events import job_event_pattern
from components.jobs.notifications import JobNotifications, JobNotificationsArgs, email_topic_name, slack_topic_name
from components.network.image_cache import cache_prefix
from components.resources import child
from lambdas.jobs.ledger import QUARANTINED, TERMINAL
from lambdas.scheduler.planning.purchase import COVER_MAX_CPU_SECONDS

DEAD_LETTER_AFTER_RECEIVES = 5
DEAD_LETTER_RETENTION_SECONDS = 14 * 24 * 3600  # the SQS maximum: two weeks to look at a failed job
SCHEDULER_TIMEOUT_SECONDS = 180
# 1,024 MB gives the scheduler about 0.58 vCPU; benchmarks/scheduler_scale.py measures a 50,000-job run within both.
SCHEDULER_MEMORY_MIB = 1024
SCHEDULE = "rate(1 minute)"
REBALANCE_CHECK_SCHEDULE = "rate(5 minutes)"
# The ledger's stream feeds the job-events function only the records of jobs that ended (Lambda event
# filtering on the new image: https://docs.aws.amazon.com/lambda/latest/dg/with-ddb-filtering.html).
# Quarantined jobs never run again either: a submission whose last job is quarantined has ended too
# (lambdas/job_events/submissions.py).
ENDED_JOBS_FILTER = json.dumps({"dynamodb": {"NewImage": {"state": {"S": sorted(TERMINAL | {QUARANTINED})}}}},
                               sort_keys=True)
STREAM_BATCH_SIZE = 100
STREAM_BATCHING_WINDOW_SECONDS = 30  # one look at a submission for many of its jobs ending together
STREAM_RETRIES = 5


def queue_name(environment: str, dead_letter: bool = False) -> str:
    return f"mlfleet-{environment}-jobs" + ("-dlq" if dead_letter else "")


def ledger_name(environment: str) -> str:
    return f"mlfleet-{environment}-jobs"


def job_service_parameter_name(environment: str) -> str:
    return f"/mlfleet/{environment}/job-service"


def fleets_document(cfg: StackConfig) -> str:
    """What the scheduler may buy: every fleet in every region, with its cap (the FLEETS variable)."""
    fleets = []
    for region in cfg.regions:
        for fleet_name, fleet in sorted(cfg.fleets_in(region).items()):
            fleets.append({
                "region": region,
                "fleet": fleet_name,
                "asg_name": fleet_group_name(cfg.environment, fleet_name),
                "cluster": cluster_name(cfg.environment),
                "task_family": job_task_family(cfg.environment),
                "max_instances": fleet.max_instances,
                "instance_types": list(fleet.instance_types),
                "on_demand_base": fleet.on_demand_base_capacity,
                "on_demand_percent_above_base": fleet.on_demand_percentage_above_base,
            })
    return json.dumps(fleets, sort_keys=True, separators=(",", ":"))


def internet_egress(cfg: StackConfig, region: str) -> bool:
    """Whether the region's machines reach the internet: a NAT gateway, or a team's own VPC (its routing is
    the team's; the config model's job-image check treats it the same way). Otherwise only VPC endpoints."""
    return cfg.nat_gateway or region in cfg.networks


def job_service_document(cfg: StackConfig, *, account: str, queue_url: str, dead_letter_queue_url: str,
                         ledger_table: str, scheduler_function: str, admission_parameter: str,
                         notification_topics: dict[str, str] | None = None) -> dict:
    """The job-service description the mlfleet command reads (lambdas/jobs/cli/service.py). Without
    `notification_topics`, their ARNs are derived from `account` (a dry run's placeholders)."""
    if notification_topics is None:
        topic = f"arn:aws:sns:{cfg.home_region}:{account}:"
        notification_topics = {"email": topic + email_topic_name(cfg.environment),
                               "slack": topic + slack_topic_name(cfg.environment) if cfg.slack_channel_id else None}
    return {
        "queueUrl": queue_url, "deadLetterQueueUrl": dead_letter_queue_url, "ledgerTable": ledger_table,
        "schedulerFunction": scheduler_function, "admissionParameter": admission_parameter,
        "homeRegion": cfg.home_region, "fleets": json.loads(fleets_document(cfg)),
        "defaultMaxAttempts": cfg.job_max_attempts, "jobLogGroup": job_log_group_name(cfg.environment),
        # Per region, the machines pull ECR Public images through <account>'s cache (cachePrefix), and reach
        # only ECR without internet egress. Compact: the parameter must stay under SSM's 4 KB at the largest
        # stack the config allows (tests/rules/test_api_models.py).
        "images": {"account": account, "cachePrefix": cache_prefix(cfg.environment),
                   "regionsWithoutEgress": [r for r in cfg.regions if not internet_egress(cfg, r)]},
        "notifications": notification_topics,
    }


def teams_parameter_name(environment: str) -> str:
    return f"/mlfleet/{environment}/teams"


def teams_document(cfg: StackConfig) -> str:
    """How the scheduler shares the GPUs between teams (the teams parameter, lambdas/jobs/teams.py)."""
    return json.dumps({
        "teams": {name: {"weight": team.weight, "max_gpus": team.max_gpus} for name, team in sorted(cfg.teams.items())},
        "default_team": cfg.default_team,
        "share_half_life_minutes": cfg.share_half_life_minutes,
    }, sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class JobServiceArgs:
    config: StackConfig
    alert_topic_arn: pulumi.Input[str]
    admission_parameter: pulumi.Input[str]
    # The ECS cluster ARN of every fleet region (task state changes are matched on them).
    cluster_arns: Sequence[pulumi.Input[str]]
    # The account (the scheduler names the checkpoint buckets from it, like components/storage).
    account_id: pulumi.Input[str]


class JobService(pulumi.ComponentResource):
    queue_url: pulumi.Output[str]
    queue_name: pulumi.Output[str]
    dead_letter_queue_url: pulumi.Output[str]
    dead_letter_queue_name: pulumi.Output[str]
    ledger_name: pulumi.Output[str]
    scheduler_name: pulumi.Output[str]

    def __init__(self, name: str, args: JobServiceArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("mlfleet:jobs:JobService", name, None, opts)
        cfg = args.config
        env = cfg.environment
        tags = cfg.base_tags()

        dead_letters = aws.sqs.Queue(
            f"{name}-dlq",
            name=queue_name(env, dead_letter=True),
            sqs_managed_sse_enabled=True,
            message_retention_seconds=DEAD_LETTER_RETENTION_SECONDS,
            tags=tags,
            opts=child(self),
        )
        queue = aws.sqs.Queue(
            f"{name}-queue",
            name=queue_name(env),
            sqs_managed_sse_enabled=True,
            # A received message stays hidden for longer than a scheduler run can last.
            visibility_timeout_seconds=SCHEDULER_TIMEOUT_SECONDS * 2,
            message_retention_seconds=DEAD_LETTER_RETENTION_SECONDS,
            redrive_policy=dead_letters.arn.apply(lambda arn: json.dumps(
                {"deadLetterTargetArn": arn, "maxReceiveCount": DEAD_LETTER_AFTER_RECEIVES})),
            tags=tags,
            opts=child(self),
        )
        aws.sqs.RedriveAllowPolicy(
            f"{name}-dlq-sources",
            queue_url=dead_letters.url,
            redrive_allow_policy=queue.arn.apply(lambda arn: json.dumps(
                {"redrivePermission": "byQueue", "sourceQueueArns": [arn]})),
            opts=child(self),
        )

        retain = cfg.retain_job_ledger
        # The import ID of a table is its name (pulumi_aws dynamodb.Table, "Import"). The engine imports
        # only when the stack does not hold the table yet (or holds another ID), so the key may stay set
        # (pulumi/pulumi pkg/resource/deploy/step_generator.go, `isImport`); the import fails when the kept
        # table differs from the declaration below (docs/architecture/deployment-execution/import.md).
        adopt = ledger_name(env) if cfg.adopt_job_ledger else None
        ledger = aws.dynamodb.Table(
            f"{name}-ledger",
            name=ledger_name(env),
            billing_mode="PAY_PER_REQUEST",
            hash_key="job_id",
            attributes=[
                {"name": "job_id", "type": "S"},
                {"name": "state", "type": "S"},
                {"name": "submitted_at", "type": "N"},
                {"name": "submission_id", "type": "S"},
                {"name": "queued_team", "type": "S"},
            ],
            global_secondary_indexes=[
                {"name": "by-state", "hash_key": "state", "range_key": "submitted_at", "projection_type": "ALL"},
                {"name": "by-submission", "hash_key": "submission_id", "range_key": "job_id", "projection_type": "ALL"},
                # Sparse: only queued jobs carry queued_team, their team or "#none" (lambdas/jobs/ledger.py BY_TEAM_QUEUED).
                {"name": "by-team-queued", "hash_key": "queued_team", "range_key": "submitted_at",
                 "projection_type": "ALL"},
            ],
            server_side_encryption={"enabled": True},  # the AWS managed key, not the AWS owned one
            # Ended jobs reach the job-events function through the stream (submission notifications).
            stream_enabled=True,
            stream_view_type="NEW_IMAGE",
            point_in_time_recovery={"enabled": retain},
            deletion_protection_enabled=retain,
            tags=tags,
            opts=child(self, retain_on_delete=retain, import_=adopt),
        )

        notifications = JobNotifications(
            f"{name}-notifications",
            JobNotificationsArgs(environment=env, slack=bool(cfg.slack_channel_id), tags=tags),
            opts=child(self),
        )
        # Each function gets the variables its Settings reads, no more: Lambda allows 4 KB of them per function
        # and both carry every fleet in FLEETS (tests/program/test_lambda_environment.py).
        variables = {
            "JOBS_TABLE": ledger.name,
            "JOBS_QUEUE_URL": queue.url,
            "JOBS_DLQ_URL": dead_letters.url,
            "FLEETS": fleets_document(cfg),
            "REBALANCE_TIMEOUT_MINUTES": str(cfg.rebalance_timeout_minutes),
        }
        scheduler_only = {
            "ADMISSION_PARAMETER": args.admission_parameter,
            "MAX_HOURLY_USD": str(cfg.max_hourly_usd),
            "ALERT_TOPIC_ARN": args.alert_topic_arn,
            "DEFAULT_MAX_ATTEMPTS": str(cfg.job_max_attempts),
        }
        common = dict(region=cfg.home_region, environment=env, log_retention_days=cfg.log_retention_days, tags=tags)
        # Giving back what it bought (docs/removal.md); unset release delay: the fleets' measured boot time.
        releases = {"DISRUPTION_BUDGET_PERCENT": str(cfg.disruption_budget_percent)}
        if cfg.release_after_empty_minutes is not None:
            releases["RELEASE_AFTER_EMPTY_MINUTES"] = str(cfg.release_after_empty_minutes)
        if cfg.headroom_window_minutes:  # off by default: the stacks' rendered functions do not change
            releases.update(HEADROOM_WINDOW_MINUTES=str(cfg.headroom_window_minutes),
                            HEADROOM_MAX_JOBS=str(cfg.headroom_max_jobs))
        if cfg.purchase_search_cpu_seconds != COVER_MAX_CPU_SECONDS:  # likewise, unless the stack lowers it
            releases["PURCHASE_SEARCH_CPU_SECONDS"] = str(cfg.purchase_search_cpu_seconds)
        scheduler = PythonFunction(
            f"{name}-scheduler",
            PythonFunctionArgs(
                function="scheduler",
                description="Places queued GPU jobs on the fleets and buys capacity within the caps",
                timeout_seconds=SCHEDULER_TIMEOUT_SECONDS,
                memory_mib=SCHEDULER_MEMORY_MIB,
                variables={**variables, **scheduler_only, "ACCOUNT_ID": args.account_id, **releases},
                **common,
            ),
            opts=child(self),
        )
        job_events = PythonFunction(
            f"{name}-job-events",
            PythonFunctionArgs(
                function="job_events",
                description="Keeps the job ledger true: interruptions, rebalances, task state changes; announces "
                            "ended submissions",
                timeout_seconds=120,
                memory_mib=512,
                variables={**variables, "NOTIFY_EMAIL_TOPIC_ARN": notifications.email_topic_arn,
                           "NOTIFY_SLACK_TOPIC_ARN": notifications.slack_topic_arn or "",
                           "ACCOUNT_ID": args.account_id},
                **common,
            ),
            opts=child(self),
        )
        # Synchronous: a batch that fails is retried (bisected, so one bad record cannot hold the others back),
        # then given up after STREAM_RETRIES; announcing is idempotent (lambdas/job_events/submissions.py).
        aws.lambda_.EventSourceMapping(
            f"{name}-ended-jobs",
            event_source_arn=ledger.stream_arn,
            function_name=job_events.arn,
            starting_position="LATEST",
            batch_size=STREAM_BATCH_SIZE,
            maximum_batching_window_in_seconds=STREAM_BATCHING_WINDOW_SECONDS,
            bisect_batch_on_function_error=True,
            maximum_retry_attempts=STREAM_RETRIES,
            filter_criteria={"filters": [{"pattern": ENDED_JOBS_FILTER}]},
            tags=tags,
            opts=child(self),
        )

        triggers = {
            "scheduler-schedule": (scheduler, {"schedule_expression": SCHEDULE}),
            "job-events-schedule": (job_events, {"schedule_expression": REBALANCE_CHECK_SCHEDULE}),
            "job-events-ec2": (job_events, {"event_pattern": job_event_pattern("ec2")}),
            "job-events-ecs": (job_events, {"event_pattern": pulumi.Output.all(*args.cluster_arns).apply(
                lambda arns: job_event_pattern("ecs", arns))}),
        }
        for trigger, (function, rule_args) in triggers.items():
            rule = aws.cloudwatch.EventRule(
                f"{name}-{trigger}",
                description=f"mlfleet {env}: {trigger.replace('-', ' ')}",
                tags=tags,
                opts=child(self),
                **rule_args,
            )
            permission = aws.lambda_.Permission(
                f"{name}-{trigger}-invoke",
                action="lambda:InvokeFunction",
                function=function.function_name,
                principal="events.amazonaws.com",
                source_arn=rule.arn,
                opts=child(self),
            )
            aws.cloudwatch.EventTarget(
                f"{name}-{trigger}-target",
                rule=rule.name,
                arn=function.arn,
                opts=child(self, depends_on=[permission]),
            )

        aws.ssm.Parameter(
            f"{name}-teams",
            name=teams_parameter_name(env),
            type="String",
            description="How the scheduler shares the GPUs between teams: weights, quotas, the default team",
            insecure_value=teams_document(cfg),
            tags=tags,
            opts=child(self),
        )
        aws.ssm.Parameter(
            f"{name}-discovery",
            name=job_service_parameter_name(env),
            type="String",
            description="Where the mlfleet command finds the job queue, ledger, scheduler and fleets",
            insecure_value=pulumi.Output.all(
                account=args.account_id, queue_url=queue.url,
                dead_letter_queue_url=dead_letters.url, ledger_table=ledger.name,
                scheduler_function=scheduler.function_name, admission_parameter=args.admission_parameter,
                email=notifications.email_topic_arn, slack=notifications.slack_topic_arn,
            ).apply(lambda v: json.dumps(job_service_document(
                cfg, notification_topics={"email": v.pop("email"), "slack": v.pop("slack")}, **v), sort_keys=True)),
            tags=tags,
            opts=child(self),
        )

        self.queue_url = queue.url
        self.queue_name = queue.name
        self.dead_letter_queue_url = dead_letters.url
        self.dead_letter_queue_name = dead_letters.name
        self.ledger_name = ledger.name
        self.scheduler_name = scheduler.function_name
        self.notification_topic_arn = notifications.email_topic_arn
        self.slack_notification_topic_arn = notifications.slack_topic_arn
        self.register_outputs({"queue_url": self.queue_url, "ledger_name": self.ledger_name})
