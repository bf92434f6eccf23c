"""A stack at the edges of what the config model allows: the longest names, the most fleets and regions.

Names: the longest environment and fleet names the model's ENVIRONMENT_NAME and FLEET_NAME accept, the
longest region names regions.py knows. Counts and numbers: as many regions, fleets and instance types
per fleet as the model admits, each number at the end of its range, ten alert e-mails, the most cost
allocation tags.

The catalog prices three regions; a catalog refresh prices the others, so the rendering runs with a
catalog that prices every type in every region (a copy of its us-east-1 prices): names and counts, not
prices, are under test here.
"""

from __future__ import annotations

import contextlib
import json
import re
import string
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from components.config import model
from components.config.regions import AWS_REGIONS
from lambdas.common import catalog as catalog_module


def _longest(pattern: re.Pattern, stem: str, filler: str) -> str:
    """The longest name `pattern` accepts, made of `stem` and repeated `filler`."""
    name = stem
    while pattern.fullmatch(name + filler):
        name += filler
    assert pattern.fullmatch(name), (pattern.pattern, name)
    return name


ENVIRONMENT = _longest(model.ENVIRONMENT_NAME, "longest-env", "x")
TEAM_NAME_LENGTH = len(_longest(model.TEAM_NAME, "team", "x"))
FLEET_NAME_LENGTH = len(_longest(model.FLEET_NAME, "gpu", "a"))


def longest_regions(count: int) -> list[str]:
    """The `count` longest region names mlfleet knows (ties by name)."""
    return sorted(AWS_REGIONS, key=lambda r: (-len(r), r))[:count]


def fleet_names(count: int) -> list[str]:
    """`count` distinct fleet names of the longest allowed length."""
    names = [f"gpu{letter * (FLEET_NAME_LENGTH - 3)}" for letter in string.ascii_lowercase[:count]]
    assert all(model.FLEET_NAME.fullmatch(n) for n in names) and len(set(names)) == count
    return names


def _longest_types(per_fleet: int) -> list[str]:
    """One GPU count's instance types, longest names first (a fleet may not mix GPU counts)."""
    catalog = catalog_module.load_catalog()
    by_count: dict[int, list[str]] = {}
    for name in catalog.names():
        by_count.setdefault(catalog.get(name).gpus, []).append(name)
    largest = max(by_count.values(), key=len)
    return sorted(largest, key=lambda n: (-len(n), n))[:per_fleet]


def team_names(count: int) -> list[str]:
    """`count` distinct team names of the longest allowed length."""
    names = [f"team-{letter * (TEAM_NAME_LENGTH - 5)}" for letter in string.ascii_lowercase[:count]]
    assert all(model.TEAM_NAME.fullmatch(n) for n in names) and len(set(names)) == count
    return names


def longest_config(*, regions: int, fleets: int, types_per_fleet: int, tags: int) -> tuple[str, dict[str, Any]]:
    """(stack name, raw config) at the edges of the model. Fleet i runs in region i modulo `regions`, so
    the stack has `fleets` fleet-region pairs; the counts are what the caller says the model allows."""
    names = longest_regions(regions)
    fields = model.StackConfig.model_fields
    fleet = {
        "instanceTypes": _longest_types(types_per_fleet),
        "maxInstances": _upper(model.FleetConfig.model_fields["max_instances"]),
        "minInstances": 0,
        "onDemandBaseCapacity": _upper(model.FleetConfig.model_fields["max_instances"]),
        "onDemandPercentageAboveBase": 100,
    }
    config = {
        "regions": names,
        "fleets": {name: {**fleet, "regions": [names[i % regions]]} for i, name in enumerate(fleet_names(fleets))},
        "maxHourlyUsd": 100000,
        "monthlyBudgetUsd": 10_000_000,
        # Ten addresses of the longest local part mail accepts (64, RFC 5321) at a long domain.
        "alertEmails": [f"{chr(97 + i) * 64}@{'d' * 60}.example.com" for i in range(10)],
        "slackWorkspaceId": "T" + "0" * 10,
        "slackChannelId": "C" + "0" * 10,
        "costAllocationTags": {f"{i:02d}" + "k" * 126: "v" * 256 for i in range(tags)},
        "logRetentionDays": max(model.LOG_RETENTION_DAYS),
        "rootVolumeGiB": _upper(fields["root_volume_gib"]),
        "idleWindowMinutes": _upper(fields["idle_window_minutes"]),
        "idleGraceMinutes": _upper(fields["idle_grace_minutes"]),
        "idleCpuPercent": _upper(fields["idle_cpu_percent"]),
        "idleGpuPercent": _upper(fields["idle_gpu_percent"]),
        "reaperScheduleMinutes": _upper(fields["reaper_schedule_minutes"]),
        "reaperMaxActionsPerRun": _upper(fields["reaper_max_actions_per_run"]),
        "jobMaxAttempts": model.MAX_ATTEMPTS_LIMIT,
        "rebalanceTimeoutMinutes": _upper(fields["rebalance_timeout_minutes"]),
        # The most teams, each with a weight whose decimal form is as long as a float's gets (17 digits)
        # and a four-digit quota (the fleets hold 8,000 GPUs at their caps).
        "teams": {name: {"weight": 1000 / 3 - 1e-13 * i, "maxGpus": 8_000 - i}
                  for i, name in enumerate(team_names(model.MAX_TEAMS))},
        "defaultTeam": team_names(1)[0],
        "shareHalfLifeMinutes": _upper(fields["share_half_life_minutes"]),
        "budgetAlertPercents": [10, 20, 30, 40, 50, 60, 70, 80, 100],
        "budgetForecastPercent": 1000,
        "retainJobLedger": True,
        "adoptJobLedger": True,
    }
    raw = {f"mlfleet:{key}": json.dumps(value) if not isinstance(value, str) else value for key, value in config.items()}
    raw["aws:region"] = names[0]
    return ENVIRONMENT, raw


def _upper(field) -> int:
    """The largest value a pydantic Field's `le`/`lt` constraint admits."""
    for constraint in field.metadata:
        if getattr(constraint, "le", None) is not None:
            return constraint.le
        if getattr(constraint, "lt", None) is not None:
            return constraint.lt - 1
    raise ValueError(f"{field} has no upper bound")


@contextlib.contextmanager
def every_region_priced(tmp: Path) -> Iterator[None]:
    """Run with a catalog that prices every instance type in every region mlfleet knows."""
    document = json.loads(catalog_module.CATALOG_PATH.read_text())
    for spec in document["instance_types"].values():
        reference = spec["prices"]["us-east-1"]
        for region in AWS_REGIONS:
            spec["prices"].setdefault(region, dict(reference))
    path = tmp / "instance_catalog.json"
    path.write_text(json.dumps(document))
    original = catalog_module.CATALOG_PATH
    catalog_module.CATALOG_PATH = path
    catalog_module.load_catalog.cache_clear()
    try:
        yield
    finally:
        catalog_module.CATALOG_PATH = original
        catalog_module.load_catalog.cache_clear()
