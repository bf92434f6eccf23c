"""The strategies compared: each decides placement, buying, when idle instances go, and what an
interruption does to the jobs on the reclaimed instance.

| strategy | places | buys | idle instances | spot interruption |
|---|---|---|---|---|
| mlfleet | lambdas.scheduler.planning.plan (the scheduler's own code), reservations kept as the ledger keeps them | what the plan asks of single-type spot fleets | the reaper: idle for the window, marked, gone after the grace (10-minute runs) | job back in the queue, attempt counted; the group replaces the instance |
| one-instance-per-job | its own instance | the cheapest type that holds the job, per job (SkyPilot, dstack) | terminated when its job ends | a new instance for the job (managed-job recovery), attempt counted |
| ecs-binpack-memory | ECS binpack on memory: the fitting instance with the least free memory | one homogeneous type, as a capacity provider's managed scaling would | scaled in after 15 minutes without a task | the task is not restarted (ECS does not restart standalone tasks): the job is lost |
| first-fit | the first instance, in launch order, that fits | the cheapest type that holds the job, when nothing fits | as mlfleet | as mlfleet |
"""

from __future__ import annotations

import bisect
import time

from benchmarks.scheduler.simulate import Box, InstanceType, JobState, Simulation, accepts
from lambdas.scheduler.planning import Fleet, JobRequest, Limits, Machine, Reservation, plan

ECS_SCALE_IN_S = 15 * 60  # managed scaling removes an instance 15 minutes after its last task
REAPER_EVERY_S = 10 * 60


def cheapest_holding(types: list[InstanceType], job) -> InstanceType:
    return min((t for t in types if t.holds(job)), key=lambda t: (t.price, t.name))


class _Reaped:
    """The mlfleet reaper's contract on an instance that runs nothing: marked once it has been idle
    for the window (at a reaper run), terminated at the first run after the grace period."""

    def __init__(self, idle_window_s: float, grace_s: float):
        self.idle_window_s = idle_window_s
        self.grace_s = grace_s

    def on_idle(self, sim: Simulation, box: Box) -> None:
        if not sim.snapshot:
            sim.check_later(box, self.idle_window_s, self._mark, REAPER_EVERY_S)

    def _mark(self, sim: Simulation, box: Box) -> None:
        sim.check_later(box, self.grace_s, lambda s, b: s.terminate(b), REAPER_EVERY_S)

    def after_job(self, sim: Simulation, box: Box) -> None:
        pass  # an instance outlives its jobs: the reaper decides when it goes

    def on_interrupted(self, sim: Simulation, state: JobState) -> None:
        sim.requeue(state, "spot interruption")

    def on_reclaimed(self, sim: Simulation, box: Box) -> None:
        sim.launch(box.type)  # the Auto Scaling group keeps its desired capacity


class MlfleetStrategy(_Reaped):
    name = "mlfleet"

    def __init__(self, types: list[InstanceType], catalog, region: str, idle_window_s: float, grace_s: float):
        super().__init__(idle_window_s, grace_s)
        self.types = {t.name: t for t in types}
        self.catalog = catalog
        self.region = region
        # The ledger's reservations: job -> (the instance bought for it, its runs then). A run or a
        # requeue moves the job on, which clears a ledger reservation; here the run count does.
        self.reserved: dict[str, tuple[Reservation, int]] = {}

    def _reservation(self, state: JobState) -> Reservation | None:
        reserved = self.reserved.get(state.job.job_id)
        return reserved[0] if reserved and reserved[1] == state.runs else None

    def schedule(self, sim: Simulation, now: float) -> None:
        usable, launching = sim.usable_boxes(), sim.launching_boxes()
        boxes = {str(b.id): b for b in usable}
        machines = [Machine(str(b.id), f"i-{b.id}", self.region, b.type.name, b.type.name, self.region + b.zone, "spot",
                            b.free[0], b.free[1], b.free[2], b.type.price) for b in usable]
        fleets = [Fleet(self.region, name, name, (name,), sum(1 for b in usable if b.type.name == name),
                        sum(1 for b in launching if b.type.name == name), 10**9) for name in self.types]
        jobs = [JobRequest(s.job.job_id, s.job.job_id, s.job.gpus, s.job.vcpus, s.job.memory_mib,
                           s.job.instance_type_pattern, submitted_at=s.job.submit_s, reserved=self._reservation(s))
                for s in sim.waiting.values()]
        hourly = sum(b.type.price for b in sim.boxes if b.terminated is None)
        started = time.process_time()
        result = plan(jobs, machines, fleets, self.catalog, Limits(float("inf"), hourly))
        sim.plan_seconds += time.process_time() - started
        for placement in result.placements:
            sim.start(sim.jobs[placement.job_id], boxes[placement.machine_key])
        for scale_out in result.scale_outs:
            for _ in range(scale_out.add_instances):
                sim.launch(self.types[scale_out.fleet])
            for n, box in enumerate(scale_out.boxes):  # what the scheduler writes to the ledger
                reservation = Reservation(self.region, scale_out.fleet, f"{now:.0f}:{n}")
                for job_id in box:
                    self.reserved[job_id] = (reservation, sim.jobs[job_id].runs)


class FirstFitStrategy(_Reaped):
    name = "first-fit"

    def __init__(self, types: list[InstanceType], idle_window_s: float, grace_s: float):
        super().__init__(idle_window_s, grace_s)
        self.types = types

    def schedule(self, sim: Simulation, now: float) -> None:
        started = time.process_time()
        usable = sim.usable_boxes()  # launch order
        # Instances still booting were bought for waiting jobs: they are counted first, in the same way.
        booking = {b.id: list(b.free) for b in sim.launching_boxes()}
        launching = sim.launching_boxes()
        for state in list(sim.waiting.values()):
            job = state.job
            box = next((b for b in usable if b.fits(job)), None)
            if box is not None:
                sim.start(state, box)
                continue
            if sim.snapshot:  # bought instances are usable at once
                box = sim.launch(cheapest_holding(self.types, job))
                usable.append(box)
                sim.start(state, box)
                continue
            held = next((b for b in launching if _fits(booking[b.id], job, b.type.name)), None)
            if held is None:
                held = sim.launch(cheapest_holding(self.types, job))
                launching.append(held)
                booking[held.id] = list(held.free)
            booking[held.id] = [booking[held.id][0] - job.gpus, booking[held.id][1] - job.vcpus,
                                booking[held.id][2] - job.memory_mib]
        sim.plan_seconds += time.process_time() - started


class OneInstancePerJobStrategy:
    name = "one-instance-per-job"

    def __init__(self, types: list[InstanceType]):
        self.types = types

    def schedule(self, sim: Simulation, now: float) -> None:
        started = time.process_time()
        bought = {b.dedicated_to: b for b in sim.boxes if b.usable and b.dedicated_to}
        for state in list(sim.waiting.values()):
            box = bought.get(state.job.job_id)
            if box is None:
                box = sim.launch(cheapest_holding(self.types, state.job), dedicated_to=state.job.job_id)
            if box.usable and box.ready <= now:
                sim.start(state, box)
        sim.plan_seconds += time.process_time() - started

    def on_idle(self, sim: Simulation, box: Box) -> None:
        pass  # a ready instance waits for the scheduler to start its job on it

    def after_job(self, sim: Simulation, box: Box) -> None:
        sim.terminate(box)  # the job is done: its instance goes

    def on_interrupted(self, sim: Simulation, state: JobState) -> None:
        sim.requeue(state, "spot interruption")

    def on_reclaimed(self, sim: Simulation, box: Box) -> None:
        pass  # recovery buys a new instance for the job at the next run


class EcsBinpackMemoryStrategy:
    name = "ecs-binpack-memory"

    def __init__(self, instance_type: InstanceType):
        self.type = instance_type

    def schedule(self, sim: Simulation, now: float) -> None:
        started = time.process_time()
        # Binpack on memory: the usable instance with the least free memory that still fits the task.
        usable = sorted(sim.usable_boxes(), key=lambda b: (b.free[2], b.id))
        keys = [(b.free[2], b.id) for b in usable]
        unplaced = []
        for state in list(sim.waiting.values()):
            job = state.job
            at = bisect.bisect_left(keys, (job.memory_mib, -1))
            box = next((b for b in usable[at:] if b.fits(job)), None)
            if box is None:
                unplaced.append(job)
                continue
            index = usable.index(box)
            del usable[index], keys[index]
            sim.start(state, box)
            at = bisect.bisect_left(keys, (box.free[2], box.id))
            usable.insert(at, box)
            keys.insert(at, (box.free[2], box.id))
        # Managed scaling: enough instances for the tasks nothing can hold, counting those on their way.
        room = [list(b.free) for b in sim.launching_boxes()]
        for job in unplaced:
            spot = next((r for r in room if _fits(r, job, self.type.name)), None)
            if spot is None:
                sim.launch(self.type)
                spot = list(self.type.capacity)
                room.append(spot)
            spot[0] -= job.gpus
            spot[1] -= job.vcpus
            spot[2] -= job.memory_mib
        sim.plan_seconds += time.process_time() - started

    def on_idle(self, sim: Simulation, box: Box) -> None:
        if not sim.snapshot:
            sim.check_later(box, ECS_SCALE_IN_S, lambda s, b: s.terminate(b))

    def after_job(self, sim: Simulation, box: Box) -> None:
        pass  # managed scaling removes it once idle (on_idle)

    def on_interrupted(self, sim: Simulation, state: JobState) -> None:
        sim.lose(state, "spot interruption: ECS does not restart a standalone task")

    def on_reclaimed(self, sim: Simulation, box: Box) -> None:
        sim.launch(box.type)  # the capacity provider's group keeps its desired capacity


def _fits(free, job, instance_type: str) -> bool:
    return (free[0] >= job.gpus and free[1] >= job.vcpus - 1e-9 and free[2] >= job.memory_mib
            and accepts(job.instance_type_pattern, instance_type))
