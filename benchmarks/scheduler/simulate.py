"""A discrete-event simulation of a GPU fleet, shared by every strategy and both modes.

Time jumps from event to event (arrivals, instances ready, jobs finishing, spot notices and reclaims,
reaper checks); the scheduler runs on the one-minute schedule, only in minutes where something
changed. Instances are spot, priced at the catalog's spot price in one region, and cost from launch to
termination (booting included).

- snapshot: every job is pending at time 0, instances are usable at once and jobs never end; the
  scheduler runs until every placeable job runs or a run changes nothing. Cost is $/h of what was bought.
- replay: jobs arrive at their trace times and run for their durations; a spot instance is reclaimed
  with probability R per instance-hour (an exponential clock from launch), after AWS's 2-minute notice,
  at which it stops taking work and its jobs are stopped. What happens to those jobs, which instances are
  bought and when idle ones go is each strategy's policy (strategies.py). Cost is dollars over the trace.
"""

from __future__ import annotations

import functools
import heapq
import itertools
import math
import random
import re
from dataclasses import dataclass, field

from benchmarks.scheduler.trace import TraceJob

NOTICE_S = 120  # AWS's spot interruption notice
SCHEDULE_S = 60  # the scheduler's schedule


@dataclass(frozen=True)
class InstanceType:
    name: str
    gpus: int
    vcpus: float
    memory_mib: int
    price: float  # $/h, spot, in the benchmark's region

    @property
    def capacity(self) -> tuple[int, float, int]:
        return self.gpus, self.vcpus, self.memory_mib

    def holds(self, job: TraceJob) -> bool:
        return (self.gpus >= job.gpus and self.vcpus >= job.vcpus and self.memory_mib >= job.memory_mib
                and accepts(job.instance_type_pattern, self.name))


@functools.lru_cache(maxsize=None)
def accepts(pattern: str | None, instance_type: str) -> bool:
    return pattern is None or re.fullmatch(pattern, instance_type) is not None


@dataclass(eq=False)
class Box:
    """One instance."""
    id: int
    type: InstanceType
    zone: str
    launched: float
    ready: float
    free: list
    jobs: set = field(default_factory=set)
    draining: bool = False
    terminated: float | None = None
    idle_since: float | None = None
    dedicated_to: str | None = None  # one-instance-per-job: the job it was bought for

    @property
    def usable(self) -> bool:
        return self.terminated is None and not self.draining

    def fits(self, job: TraceJob) -> bool:
        return (self.free[0] >= job.gpus and self.free[1] >= job.vcpus - 1e-9 and self.free[2] >= job.memory_mib
                and accepts(job.instance_type_pattern, self.type.name))


@dataclass
class JobState:
    job: TraceJob
    state: str = "waiting"  # waiting | running | completed | dead_lettered | lost
    runs: int = 0
    first_start: float | None = None
    box: Box | None = None
    started: float = 0.0
    token: int = 0  # which run a finish event belongs to
    reason: str = ""
    gpu_seconds: float = 0.0  # of all its runs


class Simulation:
    def __init__(self, jobs: list[TraceJob], types: list[InstanceType], strategy, *, mode: str,
                 interruptions_per_hour: float, seed: int, boot_s: float, max_attempts: int):
        self.mode = mode
        self.snapshot = mode == "snapshot"
        self.types = types
        self.strategy = strategy
        self.rng = random.Random(seed)
        self.rate = 0.0 if self.snapshot else interruptions_per_hour
        self.boot_s = 0.0 if self.snapshot else boot_s
        self.max_attempts = max_attempts
        self.jobs = {j.job_id: JobState(j) for j in jobs}
        self.waiting: dict[str, JobState] = {}  # arrival order
        self.boxes: list[Box] = []
        self.now = 0.0
        self._events: list = []
        self._seq = itertools.count()
        self._run_scheduled_at: float | None = None
        self.plan_seconds = 0.0
        for state in self.jobs.values():
            self._push(0.0 if self.snapshot else state.job.submit_s, "arrive", state)

    # --- the event loop -----------------------------------------------------------------------------

    def _push(self, when: float, kind: str, payload) -> None:
        heapq.heappush(self._events, (when, next(self._seq), kind, payload))

    def request_run(self) -> None:
        """Something changed: the scheduler looks at it on its next one-minute tick."""
        when = self.now if self.snapshot else math.ceil(self.now / SCHEDULE_S + 1e-9) * SCHEDULE_S
        if self._run_scheduled_at is None or self._run_scheduled_at > when:
            self._run_scheduled_at = when
            self._push(when, "schedule", None)

    def run(self) -> None:
        while self._events:
            when, _, kind, payload = heapq.heappop(self._events)
            self.now = when
            getattr(self, f"_on_{kind}")(payload)
        if self.snapshot:
            return
        for box in self.boxes:  # a box still up when nothing is left to happen (only if a policy never ends it)
            if box.terminated is None:
                self.terminate(box)

    def _on_arrive(self, state: JobState) -> None:
        self.waiting[state.job.job_id] = state
        self.request_run()

    def _on_schedule(self, _) -> None:
        if self._run_scheduled_at != self.now:
            return  # superseded by an earlier run
        self._run_scheduled_at = None
        before = (len(self.waiting), len(self.boxes))
        if self.waiting:
            self.strategy.schedule(self, self.now)
        if self.snapshot and self.waiting and (len(self.waiting), len(self.boxes)) != before:
            self.request_run()  # snapshot: run again at once while runs make progress

    def _on_ready(self, box: Box) -> None:
        if box.terminated is None:
            box.idle_since = self.now
            self.strategy.on_idle(self, box)
            self.request_run()

    def _on_finish(self, payload) -> None:
        state, token = payload
        if state.state != "running" or state.token != token:
            return
        box = state.box
        self._stop(state)
        state.state = "completed"
        self.strategy.after_job(self, box)
        if self.waiting:
            self.request_run()

    def _on_notice(self, box: Box) -> None:
        if box.terminated is not None:
            return
        box.draining = True
        for job_id in sorted(box.jobs):
            state = self.jobs[job_id]
            self._stop(state)
            self.strategy.on_interrupted(self, state)
        self.request_run()

    def _on_reclaim(self, box: Box) -> None:
        if box.terminated is None:
            self.terminate(box)
            self.strategy.on_reclaimed(self, box)
            if self.waiting:
                self.request_run()

    def _on_check(self, payload) -> None:
        box, idle_since, action = payload
        if box.terminated is None and box.jobs == set() and box.idle_since == idle_since:
            action(self, box)

    # --- what strategies do -------------------------------------------------------------------------

    def launch(self, instance_type: InstanceType, dedicated_to: str | None = None) -> Box:
        box = Box(len(self.boxes), instance_type, "abc"[len(self.boxes) % 3], self.now, self.now + self.boot_s,
                  list(instance_type.capacity), dedicated_to=dedicated_to)
        self.boxes.append(box)
        if self.rate > 0:
            reclaim = box.launched + self.rng.expovariate(self.rate / 3600)
            self._push(max(box.launched, reclaim - NOTICE_S), "notice", box)
            self._push(reclaim, "reclaim", box)
        if self.snapshot:
            box.idle_since = self.now
        else:
            self._push(box.ready, "ready", box)
        return box

    def start(self, state: JobState, box: Box) -> None:
        job = state.job
        assert box.usable and box.ready <= self.now and box.fits(job), "a strategy over-committed a machine"
        box.free = [box.free[0] - job.gpus, box.free[1] - job.vcpus, box.free[2] - job.memory_mib]
        box.jobs.add(job.job_id)
        box.idle_since = None
        del self.waiting[job.job_id]
        state.state, state.box, state.started = "running", box, self.now
        state.runs += 1
        state.token += 1
        if state.first_start is None:
            state.first_start = self.now
        if not self.snapshot:
            self._push(self.now + job.duration_s, "finish", (state, state.token))

    def _stop(self, state: JobState) -> None:
        box, job = state.box, state.job
        box.free = [box.free[0] + job.gpus, box.free[1] + job.vcpus, box.free[2] + job.memory_mib]
        box.jobs.discard(job.job_id)
        state.gpu_seconds += (self.now - state.started) * job.gpus
        state.box = None
        if not box.jobs and box.terminated is None:
            box.idle_since = self.now
            self.strategy.on_idle(self, box)

    def requeue(self, state: JobState, reason: str) -> None:
        """Back to the queue with the attempt counted, or dead-lettered with the reason when none is left."""
        if state.runs < self.max_attempts:
            state.state = "waiting"
            self.waiting[state.job.job_id] = state
        else:
            state.state = "dead_lettered"
            state.reason = f"{reason}; attempts exhausted ({state.runs} of {self.max_attempts})"

    def lose(self, state: JobState, reason: str) -> None:
        state.state, state.reason = "lost", reason

    def terminate(self, box: Box) -> None:
        box.terminated = self.now

    def check_later(self, box: Box, delay: float, action, granularity: float = 0.0) -> None:
        """Call `action(sim, box)` after `delay` if the box is still idle since the same moment."""
        when = self.now + delay
        if granularity:
            when = math.ceil(when / granularity - 1e-9) * granularity
        self._push(when, "check", (box, box.idle_since, action))

    def usable_boxes(self) -> list[Box]:
        return [b for b in self.boxes if b.usable and b.ready <= self.now]

    def launching_boxes(self) -> list[Box]:
        return [b for b in self.boxes if b.usable and b.ready > self.now]
