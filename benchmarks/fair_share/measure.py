"""What the fair-share benchmark reports of a finished simulation: each team's share of the GPU-hours run
while both teams had jobs waiting (overall and per window), how busy the GPUs were then and while one team
alone waited, and each team's median wait by priority.

Computed from the jobs' own submit, start and end times, not from the scheduler's view.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Sequence

from benchmarks.fair_share.trace import TeamJob
from benchmarks.scheduler.simulate import Simulation


def measure(sim: Simulation, trace: Sequence[TeamJob], capacity_gpus: int, window_s: float,
            teams: Sequence[str] | None = None) -> dict:
    """Sweeps the jobs' submit, start and end times: while both teams had jobs waiting, the GPU-seconds
    each team ran (overall and per window), and how busy the GPUs were then and while one team alone
    waited."""
    team_of = {j.job.job_id: j.team for j in trace}
    teams = tuple(teams or dict.fromkeys(j.team for j in trace))
    events = []  # (time, order, team, waiting change, GPUs running change); ends before starts at a tie
    for state in sim.jobs.values():
        job, team = state.job, team_of[state.job.job_id]
        if state.state != "completed":
            raise RuntimeError(f"job {job.job_id} ended {state.state}: the figures need every job to complete")
        events += [(job.submit_s, 1, team, 1, 0), (state.first_start, 1, team, -1, job.gpus),
                   (state.first_start + job.duration_s, 0, team, 0, -job.gpus)]
    events.sort()
    waiting = dict.fromkeys(teams, 0)
    running = dict.fromkeys(teams, 0)
    both = defaultdict(float)  # team -> GPU-seconds run while both waited
    windows: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    both_seconds = alone_seconds = alone_busy = 0.0
    previous = events[0][0]
    for when, _, team, waiting_change, gpus_change in events:
        span = when - previous
        if span > 0:
            if all(waiting.values()):
                both_seconds += span
                _split(windows, previous, when, window_s, running)
                for name in teams:
                    both[name] += running[name] * span
            elif any(waiting.values()):
                alone_seconds += span
                alone_busy += sum(running.values()) * span
        previous = when
        waiting[team] += waiting_change
        running[team] += gpus_change
    total = sum(both.values())
    return {
        "both_waiting_hours": round(both_seconds / 3600, 2),
        "share": {name: round(both[name] / total, 4) if total else None for name in teams},
        "gpu_utilization_both_waiting": round(total / (capacity_gpus * both_seconds), 4) if both_seconds else None,
        "one_team_waiting_hours": round(alone_seconds / 3600, 2),
        "gpu_utilization_one_team_waiting": round(alone_busy / (capacity_gpus * alone_seconds), 4)
        if alone_seconds else None,
        "windows": [{"from_h": round(start * window_s / 3600, 1), "to_h": round((start + 1) * window_s / 3600, 1),
                     "share": {name: round(seconds[name] / sum(seconds.values()), 4) for name in teams}}
                    for start, seconds in sorted(windows.items()) if sum(seconds.values())],
    }


def _split(windows, start: float, end: float, window_s: float, running: dict[str, int]) -> None:
    """Add each team's GPU-seconds over [start, end) to the windows it spans."""
    while start < end:
        index = int(start // window_s)
        stop = min(end, (index + 1) * window_s)
        for name, gpus in running.items():
            windows[index][name] += gpus * (stop - start)
        start = stop


def waits_by_priority(sim: Simulation, trace: Sequence[TeamJob]) -> dict:
    waits: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for job in trace:
        state = sim.jobs[job.job.job_id]
        waits[job.team][job.priority].append(state.first_start - job.job.submit_s)
    return {team: {str(p): round(statistics.median(w) / 60, 1) for p, w in sorted(by.items())}
            for team, by in sorted(waits.items())}
