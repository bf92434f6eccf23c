from components.dashboard.dashboard import FleetDashboard, FleetDashboardArgs, dashboard_body, dashboard_name

__all__ = ["FleetDashboard", "FleetDashboardArgs", "dashboard_body", "dashboard_name"]
