"""What the scheduler knows of teams beyond their policies (lambdas/jobs/teams.py, read at every run):
the GPUs each team's jobs hold, and each one's decayed use.

Each team's use (the GPUs it held, decayed over the half-life: planning/shares.py decayed_usage) is kept
between runs in one item of the job ledger table, key USAGE_KEY (kept_item.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ..jobs.ledger import JobRecord
from ..jobs.teams import READ_PERMISSIONS, TeamsSettings
from .kept_item import number, permission, put_if_newer

USAGE_KEY = "#usage/teams"
PERMISSIONS = (
    *READ_PERMISSIONS,
    permission(USAGE_KEY, "keep each team's decayed GPU use between runs, one item of the job ledger"),
)


def held_gpus(records: Iterable[JobRecord], settings: TeamsSettings, catalog=None) -> dict[str, float]:
    """GPUs each team's jobs hold (the running and starting ones the caller reads): a job sharing a GPU
    holds the part of one its memory is on the type it was placed on (a whole GPU where that is unknown)."""
    held: dict[str, float] = {}
    for record in records:
        team = settings.team_of(record.spec.team)
        held[team] = held.get(team, 0.0) + gpus_held(record, catalog)
    return held


def gpus_held(record: JobRecord, catalog=None) -> float:
    spec = record.spec
    if not spec.shares_gpu:
        return float(spec.gpus)
    placed = record.placement.instance_type if record.placement else None
    if catalog is None or placed not in catalog:
        return 1.0  # not placed yet, or a type the catalog does not know: a whole GPU at most
    return catalog.get(placed).gpu_fraction(spec.gpu_memory_mib)


def read_usage(dynamodb, table: str) -> tuple[dict[str, float], float | None]:
    """Each team's decayed use and when it was last updated; ({}, None) before the first run."""
    item = dynamodb.get_item(TableName=table, Key={"job_id": {"S": USAGE_KEY}}, ConsistentRead=True).get("Item")
    if not item:
        return {}, None
    return ({team: float(value["N"]) for team, value in item.get("usage", {}).get("M", {}).items()},
            float(item["at"]["N"]))


def write_usage(dynamodb, table: str, usage: Mapping[str, float], at: float) -> bool:
    """Keep the use computed at `at`; False when a newer value is there or the write failed (kept_item.py)."""
    return put_if_newer(dynamodb, table, USAGE_KEY, at, {"usage": {"M": {
        team: number(round(value, 6)) for team, value in usage.items()}}}, "team-usage")
