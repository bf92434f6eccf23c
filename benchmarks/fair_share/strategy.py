"""The scheduler's plan on the benchmark's simulation, with teams: one capped fleet that both teams share.

Each tick builds what the scheduler Lambda reads (queued jobs with team and priority, live machines, the
fleet with its cap, the GPUs each team's running jobs hold, the decayed use the Lambda keeps) and calls
lambdas.scheduler.planning.plan with `shares`, then carries the plan out: placements start, scale-outs
launch instances, the jobs of each bought instance keep its reservation (as the ledger does). Without
teams (`teams=None`) the plan runs without the shares stage, as one queue.

Every instance stays up to the end: with both teams backlogged no instance empties, and the figures are
about who holds the GPUs, not what they cost.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping, Sequence

from benchmarks.fair_share.trace import TeamJob
from benchmarks.scheduler.simulate import Box, InstanceType, JobState, Simulation
from lambdas.common.catalog import load_catalog
from lambdas.scheduler.planning import (
    Fleet, JobRequest, Limits, Machine, Reservation, Shares, Team, decayed_usage, plan,
)

FLEET = "gpu4"
INSTANCE_TYPE = "g6.12xlarge"


class TeamsStrategy:
    def __init__(self, instance_type: InstanceType, max_instances: int, catalog, region: str,
                 jobs: Mapping[str, TeamJob], teams: Mapping[str, Team] | None, half_life_s: float):
        self.type = instance_type
        self.max_instances = max_instances
        self.catalog = catalog
        self.region = region
        self.meta = jobs
        self.teams = teams
        self.half_life_s = half_life_s
        self.usage: dict[str, float] = {}
        self.usage_at: float | None = None
        self.reserved: dict[str, tuple[Reservation, int]] = {}
        # The most GPUs each team held at a tick (running, and reserved on instances still booting).
        self.most_held: Counter = Counter()
        self.name = "mlfleet-shares" if teams is not None else "mlfleet-one-queue"

    # The simulation's hooks: no instance is released, no interruption unless asked for.
    def on_idle(self, sim: Simulation, box: Box) -> None:
        pass

    def after_job(self, sim: Simulation, box: Box) -> None:
        pass

    def on_interrupted(self, sim: Simulation, state: JobState) -> None:
        sim.requeue(state, "spot interruption")

    def on_reclaimed(self, sim: Simulation, box: Box) -> None:
        sim.launch(box.type)

    def _reservation(self, state: JobState) -> Reservation | None:
        reserved = self.reserved.get(state.job.job_id)
        return reserved[0] if reserved and reserved[1] == state.runs else None

    def schedule(self, sim: Simulation, now: float) -> None:
        if not sim.waiting:
            return
        usable, launching = sim.usable_boxes(), sim.launching_boxes()
        boxes = {str(b.id): b for b in usable}
        machines = [Machine(str(b.id), f"i-{b.id}", self.region, FLEET, b.type.name, self.region + b.zone, "spot",
                            b.free[0], b.free[1], b.free[2], b.type.price) for b in usable]
        fleets = [Fleet(self.region, FLEET, FLEET, (self.type.name,), len(usable), len(launching), self.max_instances)]
        jobs = [JobRequest(s.job.job_id, self.meta[s.job.job_id].submission, s.job.gpus, s.job.vcpus, s.job.memory_mib,
                           submitted_at=s.job.submit_s, reserved=self._reservation(s),
                           team=self.meta[s.job.job_id].team, priority=self.meta[s.job.job_id].priority)
                for s in sim.waiting.values()]
        held = Counter()
        for state in sim.jobs.values():
            if state.state == "running":
                held[self.meta[state.job.job_id].team] += state.job.gpus
        shares = None
        if self.teams is not None:
            self.usage = decayed_usage(self.usage, self.usage_at, held, now, self.half_life_s)
            self.usage_at = now
            shares = Shares(self.teams, held_gpus=held, usage=self.usage, now=now)
        started = time.process_time()
        result = plan(jobs, machines, fleets, self.catalog, Limits(float("inf"), 0.0),
                      prices={(self.region, self.type.name): self.type.price}, shares=shares)
        sim.plan_seconds += time.process_time() - started
        for placement in result.placements:
            sim.start(sim.jobs[placement.job_id], boxes[placement.machine_key])
        for scale_out in result.scale_outs:
            for _ in range(scale_out.add_instances):
                sim.launch(self.type)
            for n, box in enumerate(scale_out.boxes):  # what the scheduler writes to the ledger
                reservation = Reservation(self.region, scale_out.fleet, f"{now:.0f}:{n}")
                for job_id in box:
                    self.reserved[job_id] = (reservation, sim.jobs[job_id].runs)
        holding = Counter()
        for state in sim.jobs.values():
            if state.state == "running" or (state.state == "waiting" and self._reservation(state)):
                holding[self.meta[state.job.job_id].team] += state.job.gpus
        for team, gpus in holding.items():
            self.most_held[team] = max(self.most_held[team], gpus)


def simulate(trace: Sequence[TeamJob], teams: Mapping[str, Team] | None, *, instances: int, half_life_s: float,
             boot_s: float = 180.0, region: str = "us-east-1", seed: int = 1) -> tuple[Simulation, TeamsStrategy]:
    """Replays the trace on a fleet of `instances` g6.12xlarge (no interruptions) until every job has ended."""
    catalog = load_catalog()
    spec = catalog.get(INSTANCE_TYPE)
    instance_type = InstanceType(spec.name, spec.gpus, float(spec.schedulable_vcpus), spec.schedulable_memory_mib,
                                 spec.spot_price(region))
    strategy = TeamsStrategy(instance_type, instances, catalog, region, {j.job.job_id: j for j in trace}, teams,
                             half_life_s)
    sim = Simulation([j.job for j in trace], [instance_type], strategy, mode="replay", interruptions_per_hour=0.0,
                     seed=seed, boot_s=boot_s, max_attempts=1)
    sim.run()
    return sim, strategy
