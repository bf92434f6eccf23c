"""The fleets a stack declares, as the lead's component passes them to the job Lambdas (FLEETS env var):

    [{"region": "us-east-1", "fleet": "gpu1", "asg_name": "mlfleet-dev-gpu1", "cluster": "mlfleet-dev",
      "task_family": "mlfleet-dev-gpu-job", "max_instances": 4, "instance_types": ["g5.xlarge", ...],
      "on_demand_base": 0, "on_demand_percent_above_base": 0}]
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from ..common.settings import SettingsError

# On a fleet instance under an EC2 rebalance recommendation: when it was recommended (ISO-8601). Written
# and undone by the job-events function; the scheduler's planner avoids such machines.
REBALANCE_TAG = "mlfleet:rebalance-at"

_FIELDS = {"region": str, "fleet": str, "asg_name": str, "cluster": str, "task_family": str, "max_instances": int,
           "instance_types": list, "on_demand_base": int, "on_demand_percent_above_base": int}


@dataclass(frozen=True)
class FleetConfig:
    region: str
    fleet: str
    asg_name: str
    cluster: str
    task_family: str
    max_instances: int
    instance_types: tuple[str, ...]
    on_demand_base: int = 0
    on_demand_percent_above_base: int = 0


def parse_fleets(text: str) -> tuple[FleetConfig, ...]:
    """Parse FLEETS, naming every bad entry and key in one error."""
    try:
        entries = json.loads(text)
    except ValueError as error:
        raise SettingsError(f"environment variable FLEETS is not JSON ({error}): {text[:120]!r}") from None
    if not isinstance(entries, list) or not entries:
        raise SettingsError(f"environment variable FLEETS must be a non-empty JSON list, got {text[:120]!r}")
    problems, fleets = [], []
    for position, entry in enumerate(entries):
        if not isinstance(entry, dict):
            problems.append(f"FLEETS[{position}]={entry!r}: must be an object")
            continue
        for key in sorted(set(entry) - set(_FIELDS)):
            problems.append(f"FLEETS[{position}].{key}: unknown key")
        for key, kind in _FIELDS.items():
            value = entry.get(key)
            optional = key.startswith("on_demand")
            if value is None and optional:
                continue
            if not isinstance(value, kind) or isinstance(value, bool) or (kind is str and not value):
                problems.append(f"FLEETS[{position}].{key}={value!r}: must be a {'non-empty ' if kind is str else ''}{kind.__name__}")
        if not problems:
            fleets.append(FleetConfig(**{**entry, "instance_types": tuple(entry["instance_types"])}))
    if problems:
        raise SettingsError("; ".join(problems))
    return tuple(fleets)


def regions(fleets: tuple[FleetConfig, ...]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(f.region for f in fleets))
