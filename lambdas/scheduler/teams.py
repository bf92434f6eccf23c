"""What the scheduler knows of teams beyond their policies (lambdas/jobs/teams.py, read at every run):
the GPUs each team's jobs hold, each one's decayed use, and the names of the teams it has seen.

Each team's use (the GPUs it held, decayed over the half-life: planning/shares.py decayed_usage) is kept
between runs in one item of the job ledger table, key USAGE_KEY (kept_item.py), with the names.

The names are those of the teams listed, and of the jobs a run read (running, starting, queued), each with
when a run last saw it. A queued job of a team the teams parameter no longer lists (renamed, removed) is the
default team's, and the ledger's by-team index holds it under its own name: the scheduler reads it there
only if it knows the name (handler.read_pending), since DynamoDB lists no index's partition keys but by
reading every item. A name is known from the run before the change that unlisted it, and kept while a run
sees one of its jobs; it is forgotten FORGET_AFTER after a run last saw it, by then the end of the team's
jobs (a queued job is seen each run, and a running one too, which alone could bring it back to the queue).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ..jobs.ledger import JobRecord
from ..jobs.teams import READ_PERMISSIONS, TeamsSettings
from .kept_item import number, permission, put_if_newer

USAGE_KEY = "#usage/teams"
# How long a team name no run has seen (not listed, no job of it read) is still remembered: a job requeued from
# RUNNING enters the by-team index a moment after its write (GSIs are eventually consistent), and a run may fail
# to read; past a day, a forgotten name costs nothing, and a remembered one a Query of nothing per run.
FORGET_AFTER_S = 86_400.0
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


@dataclass(frozen=True)
class Kept:
    usage: dict[str, float]  # each team's decayed use
    at: float | None  # when it was computed; None before the first run
    seen: dict[str, float]  # team name -> when a run last saw it (listed, or a job of it read)


def read_kept(dynamodb, table: str) -> Kept:
    """What the last run kept; empty before the first run (and names before the first run that kept them)."""
    item = dynamodb.get_item(TableName=table, Key={"job_id": {"S": USAGE_KEY}}, ConsistentRead=True).get("Item")
    if not item:
        return Kept({}, None, {})
    return Kept({team: float(value["N"]) for team, value in item.get("usage", {}).get("M", {}).items()},
                float(item["at"]["N"]), {name: float(value["N"]) for name, value in item.get("seen", {}).get("M", {}).items()})


def read_usage(dynamodb, table: str) -> tuple[dict[str, float], float | None]:
    """Each team's decayed use and when it was last updated; ({}, None) before the first run."""
    kept = read_kept(dynamodb, table)
    return kept.usage, kept.at


def write_usage(dynamodb, table: str, usage: Mapping[str, float], at: float,
                seen: Mapping[str, float] | None = None) -> bool:
    """Keep the use computed at `at` (and the team names seen, `remember`); False when a newer value is there or
    the write failed (kept_item.py)."""
    attributes = {"usage": {"M": {team: number(round(value, 6)) for team, value in usage.items()}}}
    if seen:
        attributes["seen"] = {"M": {name: number(when) for name, when in seen.items()}}
    return put_if_newer(dynamodb, table, USAGE_KEY, at, attributes, "team-usage")


def remember(seen: Mapping[str, float], names: Iterable[str | None], now: float) -> dict[str, float]:
    """The names seen before, each with when a run last saw it, and `names` seen `now` (None: a job of no
    team, not a name); those no run has seen for FORGET_AFTER_S are forgotten."""
    kept = {name: when for name, when in seen.items() if now - when < FORGET_AFTER_S}
    return {**kept, **{name: now for name in names if name}}


def unlisted(seen: Iterable[str], listed: Iterable[str]) -> list[str]:
    """The names seen that the teams parameter does not list: teams whose queued jobs are the default team's."""
    return sorted(set(seen) - set(listed))
