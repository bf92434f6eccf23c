from .billing import ADMISSION_STOP_PERCENT, BillingAlerts, BillingAlertsArgs, budget_tag_filter, quarter_thresholds
from .cost import HOURS_PER_MONTH, CostEstimate, FleetCost, estimate, monthly_budget, over_budget_warning, unreachable_fleets_warning

__all__ = [
    "ADMISSION_STOP_PERCENT",
    "HOURS_PER_MONTH",
    "BillingAlerts",
    "BillingAlertsArgs",
    "CostEstimate",
    "FleetCost",
    "budget_tag_filter",
    "estimate",
    "monthly_budget",
    "over_budget_warning",
    "unreachable_fleets_warning",
    "quarter_thresholds",
]
