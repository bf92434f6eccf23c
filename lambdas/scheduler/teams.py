"""What the scheduler knows of teams: their policies, the GPUs each holds, and each one's decayed use.

The policies come from the stack (mlfleet:teams) in the SSM parameter `/mlfleet/<env>/teams`
(components/jobs/jobs.py teams_document; a parameter, not a variable, because ten teams do not fit in
the scheduler's 4 KB Lambda environment beside its fleets), read at every run:

    {"teams": {"vision": {"weight": 3.0, "max_gpus": 16}, "nlp": {"weight": 1.0, "max_gpus": null}},
     "default_team": "nlp", "share_half_life_minutes": 60}

A job of no team, or of a team the config no longer lists, is the default team's: `default_team`, or
DEFAULT_TEAM (weight 1, no quota, unless listed). Without teams, every job is DEFAULT_TEAM's: one queue
by priority and age, no quota.

Each team's use (the GPUs it held, decayed over the half-life: planning/shares.py decayed_usage) is kept
between runs in one item of the job ledger table, key USAGE_KEY. Like the placement lease's, no job id
can take that key and the item has neither `state` nor `submission_id`, so the sparse indexes never list
it. Runs are one at a time (the lease), and the write is conditional on a newer time, so a late write
never replaces a newer value.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal

from botocore.exceptions import BotoCoreError, ClientError

from lambdas.common.logs import log_decision
from lambdas.common.permissions import needs
from lambdas.common.settings import SettingsError
from lambdas.jobs.ledger import TABLE_ARNS, JobRecord
from lambdas.scheduler.planning import DEFAULT_TEAM, Team

USAGE_KEY = "#usage/teams"
PERMISSIONS = (
    needs("ssm:GetParameter", resources=("arn:{partition}:ssm:{region}:{account}:parameter/mlfleet/{environment}/teams",),
          why="read the teams' weights and quotas (mlfleet:teams)"),
    needs("dynamodb:GetItem", "dynamodb:PutItem", resources=TABLE_ARNS[:1],
          condition={"ForAllValues:StringEquals": {"dynamodb:LeadingKeys": [USAGE_KEY]}},
          why="keep each team's decayed GPU use between runs, one item of the job ledger"),
)


@dataclass(frozen=True)
class TeamsSettings:
    teams: Mapping[str, Team]
    default_team: str
    half_life_s: float

    def team_of(self, name: str | None) -> str:
        return name if name in self.teams else self.default_team


def parameter_name(environment: str) -> str:
    return f"/mlfleet/{environment}/teams"


def read_teams(ssm, environment: str) -> TeamsSettings:
    """The stack's teams. A missing or malformed parameter stops the run (SettingsError): placing jobs
    without the quotas would break them."""
    name = parameter_name(environment)
    try:
        value = ssm.get_parameter(Name=name)["Parameter"]["Value"]
    except ssm.exceptions.ParameterNotFound:
        raise SettingsError(f"parameter {name} does not exist; run `pulumi up` for the stack again") from None
    return parse_teams(value, name)


def parse_teams(text: str, where: str = "TEAMS") -> TeamsSettings:
    """Parse the teams document, naming every bad entry in one error."""
    try:
        document = json.loads(text)
    except ValueError as error:
        raise SettingsError(f"{where} is not JSON ({error}): {text[:120]!r}") from None
    if not isinstance(document, dict) or set(document) != {"teams", "default_team", "share_half_life_minutes"}:
        raise SettingsError(f"{where} must be an object of teams, default_team and share_half_life_minutes, "
                            f"got {text[:120]!r}")
    problems, teams = [], {}
    entries = document["teams"] if isinstance(document["teams"], dict) else {}
    if not isinstance(document["teams"], dict):
        problems.append(f"{where}: teams={document['teams']!r}: must be an object")
    for name, entry in entries.items():
        weight = entry.get("weight") if isinstance(entry, dict) else None
        quota = entry.get("max_gpus") if isinstance(entry, dict) else None
        if not isinstance(entry, dict) or set(entry) != {"weight", "max_gpus"}:
            problems.append(f"{where}: teams.{name}={entry!r}: must be an object of weight and max_gpus")
        elif isinstance(weight, bool) or not isinstance(weight, (int, float)) or weight <= 0:
            problems.append(f"{where}: teams.{name}.weight={weight!r}: must be a number > 0")
        elif quota is not None and (isinstance(quota, bool) or not isinstance(quota, int) or quota < 1):
            problems.append(f"{where}: teams.{name}.max_gpus={quota!r}: must be null or an integer >= 1")
        else:
            teams[name] = Team(float(weight), quota)
    default = document["default_team"]
    if default is not None and default not in entries:
        problems.append(f"{where}: default_team={default!r}: not one of the teams")
    half_life = document["share_half_life_minutes"]
    if isinstance(half_life, bool) or not isinstance(half_life, (int, float)) or half_life < 0:
        problems.append(f"{where}: share_half_life_minutes={half_life!r}: must be a number >= 0")
    if problems:
        raise SettingsError("; ".join(problems))
    return TeamsSettings(teams, default or DEFAULT_TEAM, float(half_life) * 60)


def held_gpus(records: Iterable[JobRecord], settings: TeamsSettings) -> dict[str, int]:
    """GPUs each team's jobs hold (the running and starting ones the caller reads)."""
    held: dict[str, int] = {}
    for record in records:
        team = settings.team_of(record.spec.team)
        held[team] = held.get(team, 0) + record.spec.gpus
    return held


def read_usage(dynamodb, table: str) -> tuple[dict[str, float], float | None]:
    """Each team's decayed use and when it was last updated; ({}, None) before the first run."""
    item = dynamodb.get_item(TableName=table, Key={"job_id": {"S": USAGE_KEY}}, ConsistentRead=True).get("Item")
    if not item:
        return {}, None
    return ({team: float(value["N"]) for team, value in item.get("usage", {}).get("M", {}).items()},
            float(item["at"]["N"]))


def write_usage(dynamodb, table: str, usage: Mapping[str, float], at: float) -> bool:
    """Keep the use computed at `at`; False, writing nothing, when a newer value is there (or the write
    failed: the next run computes it again from the last value kept)."""
    try:
        dynamodb.put_item(
            TableName=table,
            Item={"job_id": {"S": USAGE_KEY}, "at": {"N": str(Decimal(repr(at)))},
                  "usage": {"M": {team: {"N": str(Decimal(repr(round(value, 6))))} for team, value in usage.items()}}},
            ConditionExpression="attribute_not_exists(job_id) OR #at < :at",
            ExpressionAttributeNames={"#at": "at"},
            ExpressionAttributeValues={":at": {"N": str(Decimal(repr(at)))}})
        return True
    except dynamodb.exceptions.ConditionalCheckFailedException:
        log_decision("team-usage-stale", at=at, reason="a newer value is kept; this run's is dropped")
        return False
    except (BotoCoreError, ClientError) as error:
        log_decision("team-usage-write-failed", at=at, error=str(error))
        return False
