"""`mlfleet:keep-alive` (DESIGN.md "Names users see"): the reaper, the scheduler's releases and the
removal executor all leave a protected instance alone, so they read the tag the same way."""

from __future__ import annotations

from datetime import datetime, timezone


def parse_time(value: str) -> datetime | None:
    """An ISO-8601 time (a trailing Z allowed); naive times are UTC. None when unparseable."""
    try:
        parsed = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except (ValueError, AttributeError):
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)


def keep_alive_protects(value: str | None, now: datetime) -> tuple[bool, str]:
    """Whether `mlfleet:keep-alive` protects the instance, and why. Unreadable values protect (safe side)."""
    if value is None:
        return False, ""
    if value.strip().lower() == "true":
        return True, "keep-alive=true"
    until = parse_time(value)
    if until is None:
        return True, f"keep-alive={value!r} is neither 'true' nor an ISO-8601 time; kept to be safe"
    if until > now:
        return True, f"keep-alive until {until.isoformat()}"
    return False, f"keep-alive expired at {until.isoformat()}"
