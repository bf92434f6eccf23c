"""The scheduler's planner: one module per stage, each a pure function over plain data (model.py).

`plan(...)` (planner.py) is the one entry point; the scheduler Lambda and the benchmark both call it.
"""

from .model import (
    ADMISSION_CLOSED, NO_FLEET, SCALING_PAUSED, Candidate, Fleet, JobRequest, Limits, Machine, Placement, Plan,
    Reservation, RuntimeEstimate, ScaleOut,
)
from .planner import DEFAULT_BOOT_S, plan
from .purchase import resource_prices
from .release import ReleasePolicy
from .replacement import keeps_replacement
from .shares import DEFAULT_TEAM, Shares, Team, decayed_usage

__all__ = ["ADMISSION_CLOSED", "DEFAULT_BOOT_S", "DEFAULT_TEAM", "NO_FLEET", "SCALING_PAUSED", "Candidate", "Fleet",
           "JobRequest", "Limits", "Machine", "Placement", "Plan", "ReleasePolicy", "Reservation", "RuntimeEstimate",
           "ScaleOut", "Shares", "Team", "decayed_usage", "keeps_replacement", "plan", "resource_prices"]
