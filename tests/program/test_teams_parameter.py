"""The teams parameter (/mlfleet/<env>/teams): what components/jobs/jobs.py teams_document writes from
mlfleet:teams is what lambdas/jobs/teams.py parse_teams reads, for every config the model accepts, and
fits SSM's Standard tier (4 KB a value) at the largest the model allows."""

from __future__ import annotations

import json
import string

from hypothesis import given, settings
from hypothesis import strategies as st

from components.config import parse_stack_config
from components.config.model import MAX_TEAMS, StackConfig, TEAM_NAME, TeamConfig
from components.jobs.jobs import teams_document
from lambdas.jobs.teams import parse_teams
from lambdas.scheduler.planning import Team

# botocore's ssm PutParameter Value: "Standard parameters have a value limit of 4 KB".
STANDARD_VALUE_BYTES = 4096
FLEET_GPUS = 8 * 1000  # the fleet below at its cap: 1,000 g6.48xlarge of 8 GPUs
_weight = TeamConfig.model_fields["weight"]
MAX_WEIGHT = next(c.le for c in _weight.metadata if getattr(c, "le", None) is not None)
MAX_HALF_LIFE = next(c.le for c in StackConfig.model_fields["share_half_life_minutes"].metadata
                     if getattr(c, "le", None) is not None)


def config(teams: dict, default: str | None, half_life: int) -> StackConfig:
    values = {
        "aws:region": "us-east-1",
        "mlfleet:regions": json.dumps(["us-east-1"]),
        "mlfleet:fleets": json.dumps({"gpu8": {"maxInstances": 1000, "instanceTypes": ["g6.48xlarge"]}}),
        "mlfleet:alertEmails": json.dumps(["ml@example.com"]),
        "mlfleet:maxHourlyUsd": "10",
        "mlfleet:teams": json.dumps(teams),
        "mlfleet:shareHalfLifeMinutes": str(half_life),
    }
    if default is not None:
        values["mlfleet:defaultTeam"] = default
    return parse_stack_config(values, "dev")


NAMES = st.from_regex(TEAM_NAME, fullmatch=True)
ENTRY = st.fixed_dictionaries({}, optional={
    "weight": st.floats(min_value=0, max_value=MAX_WEIGHT, exclude_min=True, allow_nan=False) | st.integers(1, 1000),
    "maxGpus": st.integers(1, FLEET_GPUS)})


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(NAMES, ENTRY, max_size=MAX_TEAMS), st.data(), st.integers(0, MAX_HALF_LIFE))
def test_every_config_the_model_accepts_reads_back_as_written(teams, data, half_life):
    default = data.draw(st.none() | st.sampled_from(sorted(teams))) if teams else None
    cfg = config(teams, default, half_life)
    text = teams_document(cfg)
    read = parse_teams(text)
    assert read.teams == {name: Team(team.weight, team.max_gpus) for name, team in cfg.teams.items()}
    assert (read.default_team, read.half_life_s) == (cfg.default_team, cfg.share_half_life_minutes * 60.0)
    assert len(text.encode()) <= STANDARD_VALUE_BYTES


def test_the_largest_teams_parameter_fits_a_standard_parameter():
    """Ten teams of the longest names, weights of the longest decimal form a float has, quotas of as many
    digits as the fleets' GPUs, the longest half-life."""
    longest = max(k for k in range(1, 100) if TEAM_NAME.fullmatch("a" * k))
    names = [letter * longest for letter in string.ascii_lowercase[:MAX_TEAMS]]
    teams = {name: {"weight": 1.2345678901234567e-100 * (n + 1), "maxGpus": FLEET_GPUS - n}
             for n, name in enumerate(names)}
    cfg = config(teams, names[0], MAX_HALF_LIFE)
    text = teams_document(cfg)
    assert len(cfg.teams) == MAX_TEAMS and parse_teams(text).teams[names[0]].max_gpus == FLEET_GPUS
    assert len(text.encode()) <= STANDARD_VALUE_BYTES, len(text.encode())
