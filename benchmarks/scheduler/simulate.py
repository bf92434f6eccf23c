"""A discrete-event simulation of a GPU fleet, shared by every strategy and both modes.

Time jumps from event to event (arrivals, instances ready, jobs finishing, spot notices and reclaims,
idle checks); the scheduler runs on the one-minute schedule, only in minutes where something changed
or a strategy asked to be woken. Instances cost their price from launch to termination (booting
included): spot at the catalog's spot price in one region, on-demand (only mlfleet buys it) at the
catalog's on-demand price there.

- snapshot: every job is pending at time 0, instances are usable at once and jobs never end; the
  scheduler runs until every placeable job runs or a run changes nothing. Cost is $/h of what was bought.
- replay: jobs arrive at their trace times and run for their durations; a spot instance is reclaimed
  with probability R per instance-hour (an exponential clock from launch), after AWS's 2-minute notice,
  at which it stops taking work and its jobs are stopped. A checkpointing job saves its progress every
  `checkpoint_s` of running and a requeued attempt resumes from the last save; any other job starts over.
  A run the spot market ended after the job saved a checkpoint in it gives the job its attempts back (the
  retry rule of docs/jobs.md, "Retry rules": progress was made and the job did not fail), for every strategy
  that retries.
  What happens to stopped jobs, which instances are bought and when idle ones go is each strategy's
  policy (strategies.py). Cost is dollars over the trace.

An instance reclaimed from an Auto Scaling group is replaced by the group (its desired capacity is
unchanged); until then, as in production, it counts as capacity on its way (`coming_boxes`), so a
strategy does not buy a second replacement at the notice. A strategy may decline the replacement at the
notice (`on_notice` sets `replaced` False: mlfleet detaches the instance with a decrement), and the
instance is then not capacity on its way.

GPU sharing: a job that shares a GPU (ECS `nvidiaMps`, --share-fractional-gpus) takes memory on one GPU;
a GPU shared by jobs takes only such jobs and is whole again when its last one ends. Which GPU: the
shared one with the least memory left that holds it, else a whole free one (best fit, as the planner
assumes; ECS's own choice among GPUs with room is not documented).
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
# Where an instance's time goes (`Simulation.settle`; `cost_breakdown_usd` in the results).
SPEND = ("used", "unused_room", "empty", "booting")


@dataclass(frozen=True)
class InstanceType:
    name: str
    gpus: int
    vcpus: float
    memory_mib: int
    price: float  # $/h, spot, in the benchmark's region
    on_demand_price: float = math.inf  # $/h, on-demand, in the benchmark's region
    gpu_memory: int = 0  # shareable memory per GPU (lambdas.common.catalog; 0: cannot share)
    nominal_gpu_memory: int = 0  # memory per GPU, for a job run on a whole GPU that needs so much of it

    @property
    def capacity(self) -> tuple[int, float, int]:
        return self.gpus, self.vcpus, self.memory_mib

    def holds(self, job: TraceJob) -> bool:
        gpus_ok = self.gpus >= 1 and self.gpu_memory >= job.gpu_memory_mib if job.shares_gpu else self.gpus >= job.gpus
        return gpus_ok and self.vcpus >= job.vcpus and self.memory_mib >= job.memory_mib and self.allows(job)

    def allows(self, job: TraceJob) -> bool:
        """The job's constraints besides its size: its type pattern, and the memory per GPU a job that
        shares a GPU where it can needs of a whole one where it cannot (`TraceJob.as_whole`)."""
        return self.nominal_gpu_memory >= job.min_gpu_memory_mib and accepts(job.instance_type_pattern, self.name)


def share_reference_mib(types: list[InstanceType]) -> int:
    """The GPU memory a fractional pod's `gpu_milli` is a share of: the smallest GPU among `types`, so it
    fits any of them (0 when none can share)."""
    return min((t.gpu_memory for t in types if t.gpu_memory), default=0)


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
    lifecycle: str = "spot"
    jobs: set = field(default_factory=set)
    draining: bool = False
    terminated: float | None = None
    idle_since: float | None = None
    dedicated_to: str | None = None  # one-instance-per-job: the job it was bought for
    replaced: bool = True  # an Auto Scaling group launches a replacement when it is reclaimed
    shared: dict = field(default_factory=dict)  # GPU slot -> [memory left, jobs on it], GPUs shared by jobs
    settled: float = 0.0  # its time up to here is in the simulation's `spend`

    def used_share(self) -> float:
        """The largest share of any one resource its jobs hold: GPUs (a shared GPU as the part of its memory
        in use), vCPUs, memory. The rest of the machine could hold more work and holds none."""
        gpus, vcpus, memory = self.type.capacity
        held_gpus = gpus - self.free[0] - sum(left / self.type.gpu_memory for left, _ in self.shared.values())
        return max(held_gpus / gpus, (vcpus - self.free[1]) / vcpus, (memory - self.free[2]) / memory)

    @property
    def price(self) -> float:
        return self.type.price if self.lifecycle == "spot" else self.type.on_demand_price

    @property
    def usable(self) -> bool:
        return self.terminated is None and not self.draining

    def fits(self, job: TraceJob) -> bool:
        return (self.gpu_room(job) and self.free[1] >= job.vcpus - 1e-9 and self.free[2] >= job.memory_mib
                and self.type.allows(job))

    def gpu_room(self, job: TraceJob) -> bool:
        if not job.shares_gpu:
            return self.free[0] >= job.gpus
        return self.type.gpu_memory >= job.gpu_memory_mib and (
            self.free[0] >= 1 or any(left >= job.gpu_memory_mib for left, _ in self.shared.values()))

    def shared_left(self) -> tuple[int, ...]:
        """Memory left on each shared GPU (the planner's `Machine.shared_gpus`)."""
        return tuple(left for left, _ in self.shared.values())

    def take_gpu(self, job: TraceJob) -> int | None:
        """The GPU slot a sharing job goes to (best fit, else a free GPU starts sharing); None for whole GPUs."""
        if not job.shares_gpu:
            self.free[0] -= job.gpus
            return None
        fitting = [slot for slot, (left, _) in self.shared.items() if left >= job.gpu_memory_mib]
        if fitting:
            slot = min(fitting, key=lambda s: (self.shared[s][0], s))
        else:
            slot = max(self.shared, default=-1) + 1
            self.free[0] -= 1
            self.shared[slot] = [self.type.gpu_memory, 0]
        self.shared[slot][0] -= job.gpu_memory_mib
        self.shared[slot][1] += 1
        return slot

    def give_gpu(self, job: TraceJob, slot: int | None) -> None:
        if slot is None:
            self.free[0] += job.gpus
            return
        self.shared[slot][0] += job.gpu_memory_mib
        self.shared[slot][1] -= 1
        if self.shared[slot][1] == 0:  # its last sharing job ended: a whole GPU again
            del self.shared[slot]
            self.free[0] += 1


def completion_chance(duration_s: float, checkpoint_s: float | None, rate_per_hour: float, max_attempts: int) -> float:
    """The chance a job completes rather than being dead-lettered, when every run is on spot: the same
    whatever instance each run is on and whoever places it, since a run's time to its instance's notice is
    exponential at `rate_per_hour` from any start (the clock is drawn at launch, and it has no memory).

    Under the retry rule above: a run from saved progress p saves p + floor(T / c) * c (T its time to the
    notice, c the interval) or completes; one that saves nothing counts as an attempt, one that saves gives
    the attempts back. So with S(n) the chance to complete from the n-th checkpoint with every attempt
    left, and q the chance a run from there saves nothing, S(n) = G(n) * (1 + q + ... + q^(A-1)), where
    G(n) is the chance of completing or saving in a run, each save weighted by S at the level it reaches.
    A job that does not checkpoint is one level: 1 - (1 - e^(-rate * duration))^A.
    """
    rate = rate_per_hour / 3600
    if rate <= 0 or duration_s <= 0:
        return 1.0
    step = min(checkpoint_s or duration_s, duration_s)
    levels = math.ceil(duration_s / step - 1e-9)  # the last one may be part of an interval
    keep = math.exp(-rate * step)  # a run gets past one whole interval
    chance = [0.0] * levels
    ahead = 0.0  # sum over m > n + 1, below the last level, of keep^(m - n - 1) * chance[m]
    for n in range(levels - 1, -1, -1):
        left = duration_s - n * step
        if n == levels - 1:  # the last interval: the run completes or saves nothing
            saved_or_done, nothing = math.exp(-rate * left), 1.0 - math.exp(-rate * left)
        else:
            last = levels - 1 - n  # runs that reach the last level save there (its interval may be short)
            reach_last = keep ** last - math.exp(-rate * left)
            saved_or_done = math.exp(-rate * left) + reach_last * chance[levels - 1]
            if n + 1 <= levels - 2:  # saves below the last level (ahead is 0 until the first)
                ahead = keep * (chance[n + 1] + ahead)
                saved_or_done += (1.0 - keep) * ahead
            nothing = 1.0 - keep
        # 1 + q + ... + q^(A-1), in closed form: a year of one-minute intervals has half a million levels.
        chance[n] = saved_or_done * (max_attempts if nothing >= 1.0 else (1.0 - nothing ** max_attempts) / (1.0 - nothing))
    return chance[0]


@dataclass(frozen=True)
class Finished:
    """A completed job, as the ledger shows it to the scheduler: its submission, when it was submitted
    (`submitted_at`), its whole work, and its last run (`run_seconds`: a resumed job's is only the rest)."""
    submission_id: str
    submitted_at: float
    work_s: float
    last_run_s: float


@dataclass
class JobState:
    job: TraceJob
    state: str = "waiting"  # waiting | running | moving (mlfleet's move stage) | completed | dead_lettered | lost
    runs: int = 0
    first_start: float | None = None
    box: Box | None = None
    started: float = 0.0
    token: int = 0  # which run a finish event belongs to
    reason: str = ""
    gpu_seconds: float = 0.0  # of all its runs
    progress: float = 0.0  # seconds of work saved by checkpoints, resumed by the next run
    checkpoint_s: float | None = None  # None: the job does not checkpoint
    hint_s: float | None = None  # the runtime estimate its spec carries (the true duration, with error)
    slot: int | None = None  # the shared GPU it runs on (a job sharing a GPU)
    resumed_from: float = 0.0  # its progress when its current run started
    forgiven: int = 0  # runs not counted as attempts: up to the last the spot market ended after a checkpoint

    @property
    def attempts_used(self) -> int:
        return self.runs - self.forgiven

    @property
    def remaining_s(self) -> float:
        return max(0.0, self.job.duration_s - self.progress)


class Simulation:
    def __init__(self, jobs: list[TraceJob], types: list[InstanceType], strategy, *, mode: str,
                 interruptions_per_hour: float, seed: int, boot_s: float, max_attempts: int,
                 checkpoints: dict[str, float] | None = None, hints: dict[str, float] | None = None,
                 timeline_s: float = 0.0):
        self.mode = mode
        self.snapshot = mode == "snapshot"
        self.types = types
        self.strategy = strategy
        self.rng = random.Random(seed)
        self.rate = 0.0 if self.snapshot else interruptions_per_hour
        self.boot_s = 0.0 if self.snapshot else boot_s
        self.max_attempts = max_attempts
        self.jobs = {j.job_id: JobState(j) for j in jobs}
        for job_id, interval in (checkpoints or {}).items():
            self.jobs[job_id].checkpoint_s = interval
        for job_id, hint in (hints or {}).items():
            self.jobs[job_id].hint_s = hint
        self.waiting: dict[str, JobState] = {}  # arrival order
        self.boxes: list[Box] = []
        self.alive: dict[int, Box] = {}  # boxes not terminated, in launch order
        self.finished: list[Finished] = []  # completed jobs, in the order they completed
        self.now = 0.0
        self._events: list = []
        self._seq = itertools.count()
        self._run_scheduled_at: float | None = None
        self.plan_seconds = 0.0
        self.timeline: list[tuple[float, float]] = []  # (seconds, dollars spent so far)
        # Replay: the dollars of every instance's time by what it was doing (`settle`).
        self.spend = dict.fromkeys(SPEND, 0.0)
        for state in self.jobs.values():
            self._push(0.0 if self.snapshot else state.job.submit_s, "arrive", state)
        if timeline_s and not self.snapshot:
            self._push(0.0, "sample", timeline_s)

    # --- the event loop -----------------------------------------------------------------------------

    def _push(self, when: float, kind: str, payload) -> None:
        heapq.heappush(self._events, (when, next(self._seq), kind, payload))

    def request_run(self) -> None:
        """Something changed: the scheduler looks at it on its next one-minute tick."""
        when = self.now if self.snapshot else math.ceil(self.now / SCHEDULE_S + 1e-9) * SCHEDULE_S
        if self._run_scheduled_at is None or self._run_scheduled_at > when:
            self._run_scheduled_at = when
            self._push(when, "schedule", None)

    def wake_at(self, at: float) -> None:
        """Something will change at `at` (a release delay runs out): a run on the tick after it."""
        self._push(max(self.now, at), "wake", None)

    def run(self) -> None:
        while self._events:
            when, _, kind, payload = heapq.heappop(self._events)
            if kind == "sample" and not self._work_left():
                continue
            self.now = when
            getattr(self, f"_on_{kind}")(payload)
        if self.snapshot:
            return
        for box in list(self.alive.values()):  # still up when nothing is left to happen (a policy never ended it)
            self.terminate(box)
        self.timeline.append((self.now, self.cost_so_far()))

    def _work_left(self) -> bool:
        return bool(self.alive) or any(kind != "sample" for _, _, kind, _ in self._events)

    def _on_sample(self, every: float) -> None:
        self.timeline.append((self.now, self.cost_so_far()))
        self._push(self.now + every, "sample", every)

    def _on_wake(self, _) -> None:
        self.request_run()

    def _on_arrive(self, state: JobState) -> None:
        self.waiting[state.job.job_id] = state
        self.request_run()

    def _on_schedule(self, _) -> None:
        if self._run_scheduled_at != self.now:
            return  # superseded by an earlier run
        self._run_scheduled_at = None
        before = (len(self.waiting), len(self.boxes))
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
        state.progress = state.job.duration_s
        self.finished.append(Finished(state.job.submission_id, state.job.submit_s, state.job.duration_s,
                                      self.now - state.started))
        self.strategy.after_job(self, box)
        if self.waiting:
            self.request_run()

    def _on_notice(self, box: Box) -> None:
        if box.terminated is not None:
            return
        box.draining = True
        if hasattr(self.strategy, "on_notice"):  # before its jobs are stopped: what ran on it
            self.strategy.on_notice(self, box)
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

    def launch(self, instance_type: InstanceType, dedicated_to: str | None = None, lifecycle: str = "spot",
               replaced: bool = True) -> Box:
        box = Box(len(self.boxes), instance_type, "abc"[len(self.boxes) % 3], self.now, self.now + self.boot_s,
                  list(instance_type.capacity), lifecycle, dedicated_to=dedicated_to, replaced=replaced,
                  settled=self.now)
        self.boxes.append(box)
        self.alive[box.id] = box
        if self.rate > 0 and lifecycle == "spot":
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
        self.settle(box)
        state.slot = box.take_gpu(job)
        box.free = [box.free[0], box.free[1] - job.vcpus, box.free[2] - job.memory_mib]
        box.jobs.add(job.job_id)
        box.idle_since = None
        del self.waiting[job.job_id]
        state.state, state.box, state.started = "running", box, self.now
        state.runs += 1
        state.resumed_from = state.progress
        state.token += 1
        if state.first_start is None:
            state.first_start = self.now
        if not self.snapshot:
            self._push(self.now + state.remaining_s, "finish", (state, state.token))

    def _stop(self, state: JobState) -> None:
        box, job = state.box, state.job
        self.settle(box)
        box.give_gpu(job, state.slot)
        box.free = [box.free[0], box.free[1] + job.vcpus, box.free[2] + job.memory_mib]
        box.jobs.discard(job.job_id)
        ran = self.now - state.started
        # GPU time held: its GPUs, or the part of one its memory is on this instance's GPUs.
        state.gpu_seconds += ran * (job.gpu_memory_mib / box.type.gpu_memory if job.shares_gpu else job.gpus)
        if state.checkpoint_s and state.state == "running":
            state.progress = min(job.duration_s, state.progress + ran // state.checkpoint_s * state.checkpoint_s)
        state.box = None
        if not box.jobs and box.terminated is None:
            box.idle_since = self.now
            self.strategy.on_idle(self, box)

    def stop_saved(self, state: JobState, lost_s: float) -> None:
        """Stop a running job that saves on the SIGTERM (mlfleet's move stage): it keeps what it ran less
        `lost_s` (the save, the restart), the run counts as no attempt, and it is `moving` until the strategy
        requeues it."""
        ran = self.now - state.started
        self._stop(state)
        state.progress = max(state.progress, min(state.job.duration_s, state.resumed_from + max(0.0, ran - lost_s)))
        state.forgiven = state.runs
        state.state = "moving"

    def requeue(self, state: JobState, reason: str, *, interrupted: bool = False) -> None:
        """Back to the queue with the attempt counted, or dead-lettered with the reason when none is left.
        `interrupted`: the spot market ended the run; if the job saved a checkpoint in it, it has its attempts
        back (attempts bound the runs in a row that make no progress)."""
        if interrupted and state.progress > state.resumed_from:
            state.forgiven = state.runs
        if state.attempts_used < self.max_attempts:
            state.state = "waiting"
            self.waiting[state.job.job_id] = state
        else:
            state.state = "dead_lettered"
            state.reason = f"{reason}; attempts exhausted ({state.attempts_used} of {self.max_attempts})"

    def lose(self, state: JobState, reason: str) -> None:
        state.state, state.reason = "lost", reason

    def terminate(self, box: Box) -> None:
        assert not box.jobs or box.draining or self.snapshot, "an instance was terminated with jobs on it"
        self.settle(box)
        box.terminated = self.now
        self.alive.pop(box.id, None)

    def settle(self, box: Box) -> None:
        """Book the box's time since it was last settled, before what runs on it changes: booting until it
        is ready, then empty, or its used share as `used` and the rest as `unused_room`."""
        if self.snapshot or self.now <= box.settled:
            return
        booting = max(0.0, min(self.now, box.ready) - box.settled)
        up = self.now - box.settled - booting
        self.spend["booting"] += booting / 3600 * box.price
        if up > 0:
            share = box.used_share() if box.jobs else 0.0
            self.spend["used"] += up / 3600 * box.price * share
            self.spend["unused_room" if box.jobs else "empty"] += up / 3600 * box.price * (1 - share)
        box.settled = self.now

    def check_later(self, box: Box, delay: float, action, granularity: float = 0.0) -> None:
        """Call `action(sim, box)` after `delay` if the box is still idle since the same moment."""
        when = self.now + delay
        if granularity:
            when = math.ceil(when / granularity - 1e-9) * granularity
        self._push(when, "check", (box, box.idle_since, action))

    def usable_boxes(self) -> list[Box]:
        return [b for b in self.alive.values() if not b.draining and b.ready <= self.now]

    def launching_boxes(self) -> list[Box]:
        return [b for b in self.alive.values() if not b.draining and b.ready > self.now]

    def coming_boxes(self) -> list[Box]:
        """Capacity on its way: instances booting, and reclaimed ones their group will replace."""
        return [b for b in self.alive.values() if b.ready > self.now or (b.draining and b.replaced)]

    def cost_so_far(self) -> float:
        return sum(((b.terminated if b.terminated is not None else self.now) - b.launched) / 3600 * b.price
                   for b in self.boxes)
