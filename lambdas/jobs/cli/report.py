"""`mlfleet cost`: what the jobs submitted in a period cost, by submission, owner or team, against what the same
work would have cost on demand (lambdas/jobs/costs.py says how a job's cost is counted)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone

from .. import costs
from .. import ledger as L
from .errors import CliError
from .service import JobService

_PERIOD = re.compile(r"(\d+)([mhdw])")
_UNITS = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def since(text: str, now: datetime) -> datetime:
    """`7d`, `24h`, `90m`, `2w` before `now`, or a date or time (`2026-11-01`, `2026-11-01T09:00`, UTC)."""
    match = _PERIOD.fullmatch(text.strip())
    if match:
        try:
            return now - timedelta(**{_UNITS[match[2]]: int(match[1])})
        except (OverflowError, ValueError):  # past timedelta's or datetime's range, or more digits than int() reads
            raise CliError(f"--since {text[:40]!r}: a period that starts before the year 1; give a shorter one or a "
                           "date such as 2026-11-01") from None
    try:
        stamp = datetime.fromisoformat(text.strip())
    except ValueError:
        raise CliError(f"--since {text!r}: expected a period such as 7d, 24h, 90m or 2w, or a date such as "
                       "2026-11-01") from None
    return stamp if stamp.tzinfo else stamp.replace(tzinfo=timezone.utc)


def cost_rows(service: JobService, start: datetime, by: str) -> list[costs.CostRow]:
    # Records that cannot be read, quarantined ones too, are not counted: the ledger notes them (undecodable)
    # for the command to say so.
    records = [r for state in L.STATES for r in service.ledger.by_state(state, since=start.timestamp())]
    return costs.cost_report(records, by, sorted(L.TERMINAL))


def cost_table(rows: Sequence[costs.CostRow], by: str, start: datetime) -> str:
    header = (by.upper(), "JOBS", "ENDED", "HOURS", "COST USD", "ON-DEMAND USD", "SAVED")
    lines = [header] + [(r.group, f"{r.jobs:,}", f"{r.ended:,}", f"{r.hours:,.1f}", f"{r.usd:,.2f}",
                         f"{r.on_demand_usd:,.2f}", "-" if r.saved is None else f"{r.saved:.0%}") for r in rows]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    body = ["  ".join([line[0].ljust(widths[0]), *(c.rjust(w) for c, w in zip(line[1:], widths[1:]))]) for line in lines]
    title = (f"jobs submitted since {start.isoformat(timespec='minutes')}, by {by}: cost at the prices paid, and "
             "the same share and time at on-demand prices (runs still going count once they end)")
    return "\n".join([title, *body])
