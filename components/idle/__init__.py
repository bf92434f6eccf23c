from components.idle.alarms import FleetIdleAlarm, FleetIdleAlarmArgs, idle_alarm_name, idle_expression
from components.idle.reaper import Reaper, ReaperArgs

__all__ = ["FleetIdleAlarm", "FleetIdleAlarmArgs", "Reaper", "ReaperArgs", "idle_alarm_name", "idle_expression"]
