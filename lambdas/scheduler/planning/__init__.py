"""The scheduler's planner: one module per stage, each a pure function over plain data (model.py).

`plan(...)` (planner.py) is the one entry point; the scheduler Lambda and the benchmark both call it.
"""

from lambdas.scheduler.planning.model import (
    ADMISSION_CLOSED, NO_FLEET, SCALING_PAUSED, Fleet, JobRequest, Limits, Machine, Placement, Plan, Reservation,
    ScaleOut,
)
from lambdas.scheduler.planning.planner import plan
from lambdas.scheduler.planning.purchase import resource_prices

__all__ = ["ADMISSION_CLOSED", "NO_FLEET", "SCALING_PAUSED", "Fleet", "JobRequest", "Limits", "Machine", "Placement",
           "Plan", "Reservation", "ScaleOut", "plan", "resource_prices"]
