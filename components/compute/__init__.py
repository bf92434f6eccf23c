from .cluster import EcsGpuCluster, EcsGpuClusterArgs, cluster_name, job_log_group_name, job_task_family
from .fleet import GpuSpotFleet, GpuSpotFleetArgs, fleet_group_name, render_user_data

__all__ = [
    "EcsGpuCluster",
    "EcsGpuClusterArgs",
    "GpuSpotFleet",
    "GpuSpotFleetArgs",
    "cluster_name",
    "job_log_group_name",
    "fleet_group_name",
    "job_task_family",
    "render_user_data",
]
