"""A seeded two-team trace: one team sweeps short 1-GPU jobs, the other trains long 4-GPU models.

Both keep more work queued than a fleet of 32 GPUs runs, for the whole submission horizon, whatever the
weights (1:3 to 3:1):

- `sweeps`: a sweep of 40 one-GPU jobs (8 vCPUs, 32 GiB) every 30 minutes, each running a log-normal
  time (median 20 minutes, sigma 0.5, cut to 5-90 minutes): about 29 GPUs of demand. One sweep in four
  is submitted at priority 8, the others at 5, so the trace also shows the order within a team.
- `training`: 16 trainings of 4 GPUs (40 vCPUs, 160 GiB: a whole g6.12xlarge) at the start and 3 more
  every 2 hours, each running 2 to 6 hours (uniform): 256 GPU-hours queued at once, then about 24 GPUs
  of demand.

Submissions stop at the horizon (24 hours unless asked otherwise); the simulation then runs until every
job has ended. The same seed gives the same trace.

`backlog` makes the random cases of the convergence check: one team's jobs of one size, all submitted at
once, enough to keep a whole fleet busy for a given time.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from benchmarks.scheduler.trace import TraceJob

SWEEPS, TRAINING = "sweeps", "training"
TEAMS = (SWEEPS, TRAINING)
HORIZON_S = 24 * 3600
SWEEP_SIZE, SWEEP_EVERY_S = 40, 1800
SWEEP_MEDIAN_S, SWEEP_SIGMA, SWEEP_RANGE_S = 1200, 0.5, (300, 5400)
URGENT_EVERY, URGENT_PRIORITY, NORMAL_PRIORITY = 4, 8, 5
TRAININGS_AT_START, TRAININGS_EVERY_S, TRAININGS_PER_BATCH = 16, 2 * 3600, 3
TRAINING_RANGE_S = (2 * 3600, 6 * 3600)
SWEEP_SHAPE = (1, 8.0, 32 * 1024)
TRAINING_SHAPE = (4, 40.0, 160 * 1024)


@dataclass(frozen=True)
class TeamJob:
    job: TraceJob
    team: str
    priority: int
    submission: str


def two_team_trace(seed: int, horizon_s: float = HORIZON_S) -> list[TeamJob]:
    rng = random.Random(seed)
    jobs: list[TeamJob] = []
    for n, start in enumerate(range(0, int(horizon_s), SWEEP_EVERY_S)):
        priority = URGENT_PRIORITY if n % URGENT_EVERY == URGENT_EVERY - 1 else NORMAL_PRIORITY
        for i in range(SWEEP_SIZE):
            duration = min(max(rng.lognormvariate(math.log(SWEEP_MEDIAN_S), SWEEP_SIGMA), SWEEP_RANGE_S[0]),
                           SWEEP_RANGE_S[1])
            jobs.append(TeamJob(TraceJob(f"sweep-{n:03d}-{i:02d}", float(start), round(duration), *SWEEP_SHAPE),
                                SWEEPS, priority, f"sweep-{n:03d}"))
    starts = [0] * TRAININGS_AT_START + [t for t in range(TRAININGS_EVERY_S, int(horizon_s), TRAININGS_EVERY_S)
                                         for _ in range(TRAININGS_PER_BATCH)]
    for n, start in enumerate(starts):
        jobs.append(TeamJob(TraceJob(f"train-{n:03d}", float(start), round(rng.uniform(*TRAINING_RANGE_S)),
                                     *TRAINING_SHAPE), TRAINING, NORMAL_PRIORITY, f"train-{n:03d}"))
    return sorted(jobs, key=lambda j: (j.job.submit_s, j.job.job_id))


def backlog(seed: int, team: str, gpus: int, fleet_gpus: int, hours: float) -> list[TeamJob]:
    """Jobs of `gpus` GPUs (8 vCPUs and 32 GiB per GPU), all submitted at time 0, enough to keep `fleet_gpus`
    busy for `hours`: 1-GPU jobs run 10 to 90 minutes, larger ones 30 minutes to 3 hours (uniform)."""
    rng = random.Random(f"{seed}-{team}")
    jobs: list[TeamJob] = []
    gpu_hours = 0.0
    while gpu_hours < fleet_gpus * hours:
        duration = rng.uniform(600, 5400) if gpus == 1 else rng.uniform(1800, 3 * 3600)
        jobs.append(TeamJob(TraceJob(f"{team}-{len(jobs):05d}", 0.0, round(duration), gpus, 8.0 * gpus,
                                     32768 * gpus), team, NORMAL_PRIORITY, f"{team}-backlog"))
        gpu_hours += gpus * duration / 3600
    return jobs
