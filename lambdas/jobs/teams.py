"""The stack's teams as the scheduler and the mlfleet command read them: the SSM parameter
`/mlfleet/<env>/teams` (components/jobs/jobs.py teams_document), written from mlfleet:teams:

    {"teams": {"vision": {"weight": 3.0, "max_gpus": 16}, "nlp": {"weight": 1.0, "max_gpus": null}},
     "default_team": "nlp", "share_half_life_minutes": 60}

A parameter of its own: ten teams fit neither the scheduler's 4 KB Lambda environment beside its fleets
nor the 4 KB job-service parameter beside the fleets and images. The scheduler shares GPUs by it
(lambdas/scheduler/teams.py); `mlfleet submit` refuses a team it does not list.

A job of no team, or of a team the config no longer lists, is the default team's: `default_team`, or
DEFAULT_TEAM (weight 1, no quota, unless listed). Without teams, every job is DEFAULT_TEAM's.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from ..common.permissions import needs
from ..common.settings import SettingsError
from ..scheduler.planning.shares import DEFAULT_TEAM, Team

READ_PERMISSIONS = (
    needs("ssm:GetParameter",
          resources=("arn:{partition}:ssm:{region}:{account}:parameter/mlfleet/{environment}/teams",),
          why="read the teams' weights and quotas (mlfleet:teams)"),
)


@dataclass(frozen=True)
class TeamsSettings:
    teams: Mapping[str, Team]
    default_team: str | None  # as configured (mlfleet:defaultTeam)
    half_life_s: float

    @property
    def fallback_team(self) -> str:
        """The team of a job of no team, or of a team no longer listed."""
        return self.default_team or DEFAULT_TEAM

    def team_of(self, name: str | None) -> str:
        return name if name in self.teams else self.fallback_team


def parameter_name(environment: str) -> str:
    return f"/mlfleet/{environment}/teams"


def read_teams(ssm, environment: str) -> TeamsSettings:
    """The stack's teams; SettingsError when the parameter is missing or malformed (the scheduler then
    starts and buys nothing that run: placing jobs without the quotas would break them)."""
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
    return TeamsSettings(teams, default, float(half_life) * 60)
