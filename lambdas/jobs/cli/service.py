"""Where an environment's job service is: its queue, ledger, scheduler, fleets, what each fleet region can
pull and where notifications go.

A deployed stack publishes it in the SSM parameter /mlfleet/<env>/job-service (components/jobs/jobs.py,
`job_service_document`); a dry run reads the same description from the checkout's stack file
(stacks/Pulumi.<env>.yaml, validated by the program's own config model), so it needs no AWS at all.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path

from ...common.aws import client
from ...common.registries import private_registry
from ...common.settings import SettingsError
from .. import ledger as L
from .. import queue
from .errors import CliError
from ..fleets import FleetConfig, parse_fleets
from ..spec import SLACK, RegionPulls
from ..teams import TeamsSettings, parse_teams, read_teams

# What the job-service parameter must name for environment {environment}: the resources the command's
# policy grants (components/jobs and components/compute name them).
SCHEDULER_NAME = "mlfleet-{environment}-scheduler"
CLUSTER_NAME = "mlfleet-{environment}"
JOB_LOG_GROUP = "/mlfleet/{environment}/jobs"
# The job-notification topics (components/jobs/notifications.py): e-mail, and the Slack channel's.
EMAIL_TOPIC_NAME = "mlfleet-{environment}-job-notifications"
SLACK_TOPIC_NAME = "mlfleet-{environment}-job-notifications-slack"


@dataclass(frozen=True)
class JobService:
    environment: str
    region: str
    queue_url: str
    ledger_table: str
    scheduler_function: str
    fleets: tuple[FleetConfig, ...]
    default_max_attempts: int
    job_log_group: str
    # region -> how its machines pull images (internet egress, the ECR pull-through cache)
    regions: Mapping[str, RegionPulls] = field(default_factory=dict)
    # "email" / "slack" -> the topic ARN of that channel
    notification_topics: Mapping[str, str] = field(default_factory=dict)
    # Where the description came from, when not the deployed stack's parameter (a dry run's stack file).
    source: str | None = None
    # The stack's teams (mlfleet:teams) and the team of a job that names none; only `submit` reads them
    # (with_teams): a job names one of the teams when the stack lists any.
    teams: tuple[str, ...] = ()
    default_team: str | None = None

    @cached_property
    def ledger(self) -> L.Ledger:
        """One ledger for the command: what its reads could not decode is in `ledger.undecodable`."""
        return L.Ledger(client("dynamodb", self.region), self.ledger_table)

    def fleet_regions(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(f.region for f in self.fleets))

    def fleet_types(self) -> dict[str, list[str]]:
        types: dict[str, list[str]] = {}
        for fleet in self.fleets:
            types.setdefault(fleet.region, []).extend(fleet.instance_types)
        return types


def parameter_name(environment: str) -> str:
    return f"/mlfleet/{environment}/job-service"


def discover(environment: str, region: str) -> JobService:
    name = parameter_name(environment)
    ssm = client("ssm", region)
    try:
        text = ssm.get_parameter(Name=name)["Parameter"]["Value"]
    except ssm.exceptions.ParameterNotFound:
        raise CliError(f"no parameter {name} in {region}: is stack {environment!r} deployed with {region} as "
                       "its home region (aws:region)?") from None
    try:
        value = json.loads(text)
        service = describe(environment, value)
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise CliError(f"parameter {name} in {region} is not a job-service description ({error!r}); "
                       "run `pulumi up` for the stack again") from None
    mismatches = service_mismatches(service, environment, region, value.get("environment", environment))
    if mismatches:
        raise CliError(f"parameter {name} in {region} does not describe environment {environment!r}: "
                       f"{'; '.join(mismatches)}. Nothing was written; check the parameter (was it "
                       "copied from another stack?) and run `pulumi up` for the stack again")
    return service


def with_teams(service: JobService) -> JobService:
    """The deployed stack's teams, from the parameter the scheduler shares GPUs by (/mlfleet/<env>/teams,
    lambdas/jobs/teams.py), so that `submit` refuses a team the scheduler would not know."""
    try:
        return _teams(service, read_teams(client("ssm", service.region), service.environment))
    except SettingsError as error:
        raise CliError(f"{error}") from None


def _teams(service: JobService, settings: TeamsSettings) -> JobService:
    return replace(service, teams=tuple(sorted(settings.teams)), default_team=settings.default_team)


def describe(environment: str, value: Mapping, source: str | None = None) -> JobService:
    """A job-service description (the parameter's JSON) as a JobService; KeyError/TypeError/ValueError
    name what is missing or malformed."""
    fleets = parse_fleets(json.dumps(value["fleets"]))
    images = value["images"]
    closed = set(images["regionsWithoutEgress"])
    regions = {region: RegionPulls(internet_egress=region not in closed,
                                   cache_registry=private_registry(images["account"], region),
                                   cache_prefix=images["cachePrefix"])
               for region in dict.fromkeys(f.region for f in fleets)}
    topics = {channel: arn for channel, arn in value["notifications"].items() if arn}
    return JobService(environment, value["homeRegion"], value["queueUrl"], value["ledgerTable"],
                      value["schedulerFunction"], fleets, int(value["defaultMaxAttempts"]), value["jobLogGroup"],
                      regions, topics, source)


def service_mismatches(service: JobService, environment: str, region: str, claimed_environment: str) -> list[str]:
    """What of a job-service description names another environment's resources (or another region)."""
    names = {key: value.format(environment=environment) for key, value in (
        ("queue", queue.QUEUE_NAME), ("ledger", L.TABLE_NAME), ("scheduler", SCHEDULER_NAME),
        ("cluster", CLUSTER_NAME), ("log group", JOB_LOG_GROUP), ("email", EMAIL_TOPIC_NAME),
        (SLACK, SLACK_TOPIC_NAME))}
    found = [("environment", claimed_environment, environment), ("homeRegion", service.region, region),
             ("queueUrl", service.queue_url.rstrip("/").rsplit("/", 1)[-1], names["queue"]),
             ("ledgerTable", service.ledger_table, names["ledger"]),
             ("schedulerFunction", service.scheduler_function, names["scheduler"]),
             ("jobLogGroup", service.job_log_group, names["log group"]),
             *((f"fleets[{fleet.fleet}].cluster", fleet.cluster, names["cluster"]) for fleet in service.fleets),
             *((f"notifications.{channel}", arn.rsplit(":", 1)[-1], names[channel])
               for channel, arn in service.notification_topics.items())]
    return [f"{key} is {actual!r}, expected {expected!r}" for key, actual, expected in found if actual != expected]


def from_stack_file(stack: str) -> JobService:
    """The job service stack `stack` would publish, from the checkout's stacks/Pulumi.<stack>.yaml: the same
    config model and the same description the program writes, with placeholders for what only a deployed
    stack knows (the account, queue and topic addresses). Needs the repository, not AWS."""
    root = checkout_root()
    if root is None:
        raise CliError("--stack reads stacks/Pulumi.<env>.yaml of an mlfleet checkout: run the command inside the "
                       "repository (or install it from there with pip install -e .), or drop --stack to check "
                       "against the deployed stack")
    if str(root) not in sys.path:
        sys.path.append(str(root))
    try:
        from components.config import ConfigError, StackFileError, parse_stack_config, read_stack_file, stack_path
        from components.jobs.jobs import job_service_document, teams_document
    except ImportError as error:
        raise CliError(f"--stack needs the Pulumi program's own packages ({error.name} is missing): in {root}, "
                       "run `make venv` and use venv/bin/mlfleet") from None
    path = stack_path(stack)
    if not path.is_file():
        stacks = sorted(p.name[len("Pulumi."):-len(".yaml")] for p in path.parent.glob("Pulumi.*.yaml"))
        raise CliError(f"--stack {stack}: there is no stacks/{path.name} in {root}; the stacks are "
                       f"{', '.join(stacks) or 'none'} (README, 'Add an environment' makes a new one)")
    try:
        cfg = parse_stack_config(read_stack_file(path), stack)
    except (StackFileError, ConfigError) as error:
        raise CliError(f"{error}") from None
    document = job_service_document(cfg, account="<account>", queue_url=f"(stack {stack} not deployed)",
                                    dead_letter_queue_url="", ledger_table=L.TABLE_NAME.format(environment=stack),
                                    scheduler_function=SCHEDULER_NAME.format(environment=stack),
                                    admission_parameter=f"/mlfleet/{stack}/admission")
    return _teams(describe(stack, document, source=f"stacks/{path.name}"),
                  parse_teams(teams_document(cfg), f"stacks/{path.name}"))


def checkout_root() -> Path | None:
    """The mlfleet checkout the command runs from: the one an editable install points at, else the
    working directory or one above it (a folder with both components/config and stacks)."""
    here = Path(__file__).resolve().parents[3]
    for candidate in (here, Path.cwd(), *Path.cwd().parents):
        if (candidate / "components" / "config").is_dir() and (candidate / "stacks").is_dir():
            return candidate
    return None
