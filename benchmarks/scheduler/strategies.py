"""The strategies compared: each decides placement, buying, when idle instances go, and what an
interruption does to the jobs on the reclaimed instance.

| strategy | places | buys | idle instances | spot interruption |
|---|---|---|---|---|
| mlfleet | lambdas.scheduler.planning.plan (the scheduler's own code), reservations kept as the ledger keeps them, runtime beliefs from hints and finished siblings, and the environment's prior (the newest PRIOR_RUNS finished) | what the plan asks of single-type spot fleets (and on-demand ones, by expected cost) | the plan's releases (empty past the release delay), drained and terminated under the lease; the reaper as the safety net | job back in the queue, attempt counted; the group replaces the instance only where that costs no more than buying for its jobs one instance each (planning/replacement.py), else the plan buys for them |
| one-instance-per-job | its own instance | the cheapest type that holds the job, per job (SkyPilot, dstack) | terminated when its job ends | a new instance for the job (managed-job recovery), attempt counted |
| karpenter-when-empty | kube-scheduler's default (LeastAllocated) onto nodes that fit; the rest provisioned | per pending batch: pods first-fit onto new nodes, each the cheapest type that holds its pods | removed `consolidateAfter` after its last pod (WhenEmpty); pods never moved | the Job's pod is recreated (attempt counted) and provisioned for; no group replaces the node |
| ecs-binpack-memory | ECS binpack on memory: the fitting instance with the least free memory | one homogeneous type, as a capacity provider's managed scaling would | scaled in after 15 minutes without a task | the task is not restarted (ECS does not restart standalone tasks): the job is lost |
| first-fit | the first instance, in launch order, that fits | the cheapest type that holds the job, when nothing fits | the reaper's contract | job back in the queue, attempt counted; the group replaces the instance |
"""

from __future__ import annotations

import bisect
import time
from collections import Counter

from benchmarks.scheduler.simulate import Box, InstanceType, JobState, Simulation
from lambdas.scheduler.planning import (
    Fleet, JobRequest, Limits, Machine, ReleasePolicy, Reservation, keeps_replacement, plan,
)
from lambdas.scheduler.planning.headroom import RecentWait, placeholders, remember
from lambdas.scheduler.planning.moves import STOP_LOSS_S, RunningJob
from lambdas.scheduler.planning.runtimes import PRIOR_RUNS, RuntimePrior, estimate, job_end

ECS_SCALE_IN_S = 15 * 60  # managed scaling removes an instance 15 minutes after its last task
REAPER_EVERY_S = 10 * 60
DISRUPTION_POLL_S = 10  # Karpenter's disruption controller looks at candidates every 10 seconds
ON_DEMAND = "on-demand"


class StrategyCannotRun(Exception):
    """A strategy that cannot run this trace at all; the run reports it skipped, with this reason."""


def cheapest_holding(types: list[InstanceType], job) -> InstanceType:
    return min((t for t in types if t.holds(job)), key=lambda t: (t.price, t.name))


def _fits(free, job, instance_type: InstanceType) -> bool:
    return (free[0] >= job.gpus and free[1] >= job.vcpus - 1e-9 and free[2] >= job.memory_mib
            and instance_type.allows(job))


class _Booking:
    """What is promised of instances on their way: an empty instance of the type, filled by book()."""

    def __init__(self, instance_type: InstanceType):
        self.room = Box(-1, instance_type, "", 0.0, 0.0, list(instance_type.capacity))

    def fits(self, job) -> bool:
        return self.room.fits(job)

    def book(self, job) -> None:
        self.room.take_gpu(job)
        self.room.free[1] -= job.vcpus
        self.room.free[2] -= job.memory_mib


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
        pass  # an instance outlives its jobs: removal decides when it goes

    def on_interrupted(self, sim: Simulation, state: JobState) -> None:
        sim.requeue(state, "spot interruption", interrupted=True)

    def on_reclaimed(self, sim: Simulation, box: Box) -> None:
        sim.launch(box.type, lifecycle=box.lifecycle)  # the Auto Scaling group keeps its desired capacity


# How often the simulation runs the scheduler while a machine could be moved (production: every minute).
MOVE_RECHECK_S = 600.0
# From a move's StopTask until its job is back in the queue: the container's stop timeout (110 s,
# components/compute/cluster.py) and the stop event's way to the job-events function. Meanwhile its task
# holds nothing the scheduler sees, and the room it goes to is held for it (planner.plan's `moving`).
MOVE_UNDER_WAY_S = 120.0


class MlfleetStrategy(_Reaped):
    """The scheduler Lambda's plan, run every tick, and its releases carried out as the removal protocol
    does: each proposed machine is drained, re-checked and terminated with the group's desired capacity
    decremented, all under the placement lease (in the simulation, within the tick: nothing is placed
    in between). The reaper's contract stays as the safety net."""
    name = "mlfleet"

    def __init__(self, types: list[InstanceType], catalog, region: str, idle_window_s: float, grace_s: float, *,
                 release_after_s: float | None = None, boot_s: float = 180.0, interruptions_per_hour: float = 0.0,
                 on_demand_max_instances: int = 0, runtimes: bool = True, replacement_rule: bool = True,
                 headroom_window_s: float = 0.0, headroom_max_jobs: int = 0, moves: bool = True):
        super().__init__(idle_window_s, grace_s)
        self.types = {t.name: t for t in types}
        self.catalog = catalog
        self.moves = moves  # the move stage (planning/moves.py): empty machines into the room of others
        self.move_to: dict[str, str] = {}  # job stopped by the move stage -> the instance it goes to
        self.jobs_moved = 0
        self.under_way: dict[str, float] = {}  # job whose move is under way -> when it is back in the queue
        self.region = region
        self.release_after_s = release_after_s
        self.boot_s = boot_s
        self.rate = interruptions_per_hour
        self.on_demand_max = on_demand_max_instances if interruptions_per_hour > 0 else 0
        self.runtimes = runtimes
        self.replacement_rule = replacement_rule  # off: the group replaces every reclaimed instance
        # The ledger's reservations: job -> (the instance bought for it, its runs then). A run or a
        # requeue moves the job on, which clears a ledger reservation; here the run count does.
        self.reserved: dict[str, tuple[Reservation, int]] = {}
        self.siblings: dict[str, list[float]] = {}  # submission -> runtimes of its finished jobs
        self._finished_seen = 0
        # The ledger's SUCCEEDED jobs by submission time (production reads the newest PRIOR_RUNS of them).
        self._runs_by_submit: list[tuple[float, float]] = []
        self.prior: RuntimePrior | None = None
        self._hints_by_submission: dict[str, tuple[list[float], list[float]]] | None = None  # arrival times, hints
        self.beliefs: dict[str, object] = {}  # running job -> the belief it was started with
        self.released = 0
        # Headroom (planning/headroom.py): what the scheduler keeps in the ledger's headroom item.
        self.headroom_window_s, self.headroom_max_jobs = headroom_window_s, headroom_max_jobs
        self.recent_waits: list[RecentWait] = []

    def _fleet(self, box: Box) -> str:
        return box.type.name if box.lifecycle == "spot" else f"{box.type.name}/{ON_DEMAND}"

    def _reservation(self, state: JobState) -> Reservation | None:
        reserved = self.reserved.get(state.job.job_id)
        return reserved[0] if reserved and reserved[1] == state.runs else None

    def _belief(self, sim: Simulation, state: JobState):
        if not self.runtimes or sim.snapshot:
            return None
        return estimate(state.hint_s, self.siblings.get(state.job.submission_id, ()),
                        sibling_hints=self._sibling_hints(sim, state.job.submission_id))

    def _sibling_hints(self, sim: Simulation, submission: str) -> list[float]:
        """The estimates of the submission's jobs that have arrived, as the ledger holds them."""
        if self._hints_by_submission is None:
            self._hints_by_submission = {}
            for s in sorted(sim.jobs.values(), key=lambda s: s.job.submit_s):
                if s.hint_s is not None:
                    self._hints_by_submission.setdefault(s.job.submission_id, ([], []))
                    self._hints_by_submission[s.job.submission_id][0].append(s.job.submit_s)
                    self._hints_by_submission[s.job.submission_id][1].append(s.hint_s)
        times, hints = self._hints_by_submission.get(submission, ((), ()))
        return hints[:bisect.bisect_right(times, sim.now)]

    def _busy_until(self, sim: Simulation, box: Box, now: float) -> float | None:
        ends = []
        for job_id in box.jobs:
            end = job_end(sim.jobs[job_id].started, self.beliefs.get(job_id), self.prior, now)
            if end is None:
                return None
            ends.append(end)
        return max(ends) if ends else None

    def on_idle(self, sim: Simulation, box: Box) -> None:
        super().on_idle(sim, box)
        if not sim.snapshot and self.release_after_s is not None:
            sim.wake_at(box.idle_since + self.release_after_s)

    def _fleets(self, usable: list[Box], coming: list[Box]) -> list[Fleet]:
        current = Counter((b.type.name, b.lifecycle) for b in usable)
        pending = Counter((b.type.name, b.lifecycle) for b in coming)
        fleets = []
        # No removing_instances nor terminating_instances: the simulation ends a released or reclaimed box at
        # once (Simulation.terminate), so none is ever in flight or terminating when the release stage counts
        # them against the disruption budget (lambdas.removal.decide.room, the rule production applies).
        for name in self.types:
            for lifecycle in ("spot", ON_DEMAND) if self.on_demand_max else ("spot",):
                fleet = name if lifecycle == "spot" else f"{name}/{ON_DEMAND}"
                fleets.append(Fleet(self.region, fleet, fleet, (name,), current[name, lifecycle], pending[name, lifecycle],
                                    10**9 if lifecycle == "spot" else self.on_demand_max,
                                    on_demand_percent_above_base=100 if lifecycle == ON_DEMAND else 0))
        return fleets

    def _request(self, sim: Simulation, s: JobState) -> JobRequest:
        return JobRequest(s.job.job_id, s.job.submission_id, s.job.gpus, s.job.vcpus, s.job.memory_mib,
                          s.job.instance_type_pattern, submitted_at=s.job.submit_s, reserved=self._reservation(s),
                          runtime=self._belief(sim, s), checkpoint_interval_s=s.checkpoint_s,
                          attempts_left=max(1, sim.max_attempts - s.attempts_used), gpu_memory_mib=s.job.gpu_memory_mib,
                          move_to=self.move_to.get(s.job.job_id))

    def after_job(self, sim: Simulation, box: Box) -> None:
        if self.moves and not sim.snapshot and any(self._may_move(sim, b) for b in sim.usable_boxes()):
            sim.request_run()  # room just came free: production's next run (within a minute) may move jobs into it

    def _may_move(self, sim: Simulation, box: Box) -> bool:
        """Could the move stage empty the box (all its jobs checkpoint)?"""
        return bool(box.jobs) and all(sim.jobs[j].checkpoint_s for j in box.jobs)

    def _running(self, sim: Simulation, usable: list[Box]) -> list[RunningJob]:
        return [RunningJob(self._request(sim, sim.jobs[job_id]), str(b.id), sim.jobs[job_id].started)
                for b in usable for job_id in sorted(b.jobs)]

    def _prices(self) -> dict:
        return {(self.region, name): t.price for name, t in self.types.items()}

    def on_notice(self, sim: Simulation, box: Box) -> None:
        """The job-events function's rule at the spot notice: the group replaces the instance only where
        that costs no more than buying for its jobs one instance each (planning/replacement.py)."""
        jobs = [self._request(sim, sim.jobs[job_id]) for job_id in sorted(box.jobs)]
        if self.replacement_rule and not keeps_replacement(box.price, jobs, self._fleets([], []), self.catalog, self._prices()):
            box.replaced = False  # detached with its desired capacity decremented: not capacity on its way

    def on_reclaimed(self, sim: Simulation, box: Box) -> None:
        if box.replaced:
            super().on_reclaimed(sim, box)

    def schedule(self, sim: Simulation, now: float) -> None:
        for job_id, due in list(self.under_way.items()):
            if due <= now:  # its task has stopped: the job-events function requeues it, attempt not counted
                del self.under_way[job_id]
                sim.requeue(sim.jobs[job_id], "moved into room on another machine")
        new = sim.finished[self._finished_seen:]
        for done in new:
            self.siblings.setdefault(done.submission_id, []).append(done.work_s)
            bisect.insort(self._runs_by_submit, (done.submitted_at, done.last_run_s))
        if self.runtimes and new:
            self.prior = RuntimePrior.of(seconds for _, seconds in self._runs_by_submit[-PRIOR_RUNS:])
        self._finished_seen = len(sim.finished)
        usable, coming = sim.usable_boxes(), sim.coming_boxes()
        boxes = {str(b.id): b for b in usable}
        started = time.process_time()
        machines = [Machine(str(b.id), f"i-{b.id}", self.region, self._fleet(b), b.type.name, self.region + b.zone,
                            b.lifecycle, b.free[0], b.free[1], b.free[2], b.price,
                            submissions=frozenset(sim.jobs[j].job.submission_id for j in b.jobs),
                            jobs=frozenset(b.jobs),
                            launched_at=b.launched, empty_since=None if b.jobs else b.idle_since,
                            busy_until=self._busy_until(sim, b, now) if self.runtimes else None,
                            gpu_memory_mib=b.type.gpu_memory, shared_gpus=b.shared_left())
                    for b in usable]
        fleets = self._fleets(usable, coming)
        jobs = [self._request(sim, s) for s in sim.waiting.values()]
        hourly = sum(b.price for b in sim.alive.values())
        spare = [] if sim.snapshot else placeholders(self.recent_waits, now, self.headroom_window_s,
                                                     self.headroom_max_jobs)
        result = plan(jobs, machines, fleets, self.catalog, Limits(float("inf"), hourly), prices=self._prices(), now=now,
                      release=None if sim.snapshot or self.release_after_s is None
                      else ReleasePolicy(after_empty_s=self.release_after_s),
                      interruption_rate=(lambda region, instance_type: self.rate) if self.rate > 0 else None,
                      boot_s=self.boot_s, headroom=spare, headroom_on=self.headroom_window_s > 0,
                      running=self._running(sim, usable) if self.moves and not sim.snapshot else (),
                      moving=[self._request(sim, sim.jobs[job_id]) for job_id in sorted(self.under_way)],
                      runtime_prior=self.prior)
        sim.plan_seconds += time.process_time() - started
        beliefs = {j.job_id: j.runtime for j in jobs}
        for placement in result.placements:
            self.beliefs[placement.job_id] = beliefs[placement.job_id]
            self.move_to.pop(placement.job_id, None)
            sim.start(sim.jobs[placement.job_id], boxes[placement.machine_key])
        for candidate in result.releases:  # drain, re-check (nothing was placed on it: same tick), terminate
            box = boxes[candidate.container_instance_arn]
            assert not box.jobs, "the release stage proposed a machine with work"
            sim.terminate(box)
            self.released += 1
        for move in result.moves:
            # The scheduler stops the tasks; each job saves on the SIGTERM (docs/jobs.md, "Checkpoints") and,
            # MOVE_UNDER_WAY_S later, the job-events function requeues it without counting an attempt; the
            # next run places it on the machine the move chose. What the stop and the restart cost: the time
            # under way, and STOP_LOSS_S of its work (the save, reading the checkpoint back).
            for job_id, instance_id in move.targets:
                sim.stop_saved(sim.jobs[job_id], STOP_LOSS_S)
                self.under_way[job_id] = now + MOVE_UNDER_WAY_S
                self.move_to[job_id] = instance_id
                self.jobs_moved += 1
            sim.wake_at(now + MOVE_UNDER_WAY_S)
        if self.moves and not sim.snapshot and any(self._may_move(sim, b) for b in usable if b.terminated is None):
            # Production's scheduler runs every minute, and a move waits for its saving to grow (how long the
            # jobs have run): runs come at least every MOVE_RECHECK_S while a machine could be emptied.
            sim.wake_at(now + MOVE_RECHECK_S)
        if self.release_after_s is not None and not sim.snapshot and any(
                b.terminated is None and not b.jobs and b.idle_since is not None
                and now - b.idle_since >= self.release_after_s for b in usable):
            # The disruption budget held some back: production's scheduler runs every minute anyway
            # (components/jobs/jobs.py SCHEDULE), so the next tick releases more.
            sim.wake_at(now)
        if not sim.snapshot and self.headroom_window_s > 0:
            self.recent_waits = remember(self.recent_waits, jobs, result.scale_outs, now, self.headroom_window_s,
                                         self.headroom_max_jobs, fleets)
            if self.recent_waits and self.recent_waits[-1].at == now:
                # Placeholders expire: a run then gives back what was kept for them (the newest wait's
                # expiry ends them all; earlier ones end some, and the ticks of other events see those).
                sim.wake_at(now + self.headroom_window_s)
        for scale_out in [*result.scale_outs, *result.headroom]:
            instance_type, _, lifecycle = scale_out.fleet.partition("/")
            for _ in range(scale_out.add_instances):
                sim.launch(self.types[instance_type], lifecycle=lifecycle or "spot")
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
        # Instances on their way (booting, or replacing a reclaimed one) were bought for waiting jobs:
        # they are counted first, in the same way.
        launching = sim.coming_boxes()
        booking = {b.id: _Booking(b.type) for b in launching}
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
            held = next((b for b in launching if booking[b.id].fits(job)), None)
            if held is None:
                held = sim.launch(cheapest_holding(self.types, job))
                launching.append(held)
                booking[held.id] = _Booking(held.type)
            booking[held.id].book(job)
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
                box = sim.launch(cheapest_holding(self.types, state.job), dedicated_to=state.job.job_id,
                                 replaced=False)
            if box.usable and box.ready <= now:
                sim.start(state, box)
        sim.plan_seconds += time.process_time() - started

    def on_idle(self, sim: Simulation, box: Box) -> None:
        pass  # a ready instance waits for the scheduler to start its job on it

    def after_job(self, sim: Simulation, box: Box) -> None:
        sim.terminate(box)  # the job is done: its instance goes

    def on_interrupted(self, sim: Simulation, state: JobState) -> None:
        sim.requeue(state, "spot interruption", interrupted=True)

    def on_reclaimed(self, sim: Simulation, box: Box) -> None:
        pass  # recovery buys a new instance for the job at the next run


class KarpenterWhenEmptyStrategy:
    """Karpenter provisioning with `consolidationPolicy: WhenEmpty` (kubernetes-sigs/karpenter):

    - pending pods first bind to nodes that have room, as kube-scheduler does by default (NodeResourcesFit
      with the LeastAllocated strategy: the node left with the most free CPU and memory; kubernetes.io
      "Resource Bin Packing"), in arrival order; pods that fit a node still launching wait for it;
    - the rest are one batch: sorted by CPU then memory, largest first (Karpenter's scheduler sorts
      pods so), each put on the first new node of the batch where some instance type still holds all
      its pods, else on a new node; each node is launched as the cheapest type that holds its pods;
    - a node without pods is removed `consolidate_after_s` later (the NodePool default is 0s:
      pkg/apis/v1/nodepool.go, `consolidateAfter: "0s"`); pods are never moved;
    - an interrupted node's pods are recreated by their Job (an attempt counted) and provisioned for;
      no group replaces the node.
    """
    name = "karpenter-when-empty"

    def __init__(self, types: list[InstanceType], consolidate_after_s: float = 0.0):
        self.types = sorted(types, key=lambda t: (t.price, t.name))
        self.consolidate_after_s = consolidate_after_s

    def schedule(self, sim: Simulation, now: float) -> None:
        started = time.process_time()
        usable = sim.usable_boxes()
        launching = sim.launching_boxes()
        booking = {b.id: list(b.free) for b in launching}
        pending = []
        for state in list(sim.waiting.values()):
            job = state.job
            fitting = [b for b in usable if b.fits(job)]
            if fitting:
                sim.start(state, max(fitting, key=lambda b: (
                    (b.free[1] - job.vcpus) / b.type.vcpus + (b.free[2] - job.memory_mib) / b.type.memory_mib, -b.id)))
                continue
            held = next((b for b in launching if _fits(booking[b.id], job, b.type)), None)
            if held is not None:
                booking[held.id] = [booking[held.id][0] - job.gpus, booking[held.id][1] - job.vcpus,
                                    booking[held.id][2] - job.memory_mib]
                continue
            pending.append(job)
        nodes: list[tuple[list, list[InstanceType], list]] = []  # (pods, types that still hold them all, total)
        open_nodes: list[tuple[list, list[InstanceType], list]] = []  # those with a GPU left on some type
        for job in sorted(pending, key=lambda j: (-j.vcpus, -j.memory_mib, j.submit_s, j.job_id)):
            for node in open_nodes:
                pods, options, total = node
                need = (total[0] + job.gpus, total[1] + job.vcpus, total[2] + job.memory_mib)
                still = [t for t in options if t.gpus >= need[0] and t.vcpus >= need[1] - 1e-9
                         and t.memory_mib >= need[2] and t.allows(job)]
                if still:
                    pods.append(job)
                    options[:] = still
                    total[:] = need
                    if max(t.gpus for t in still) <= need[0]:  # every job takes a GPU: none fits any more
                        open_nodes.remove(node)
                    break
            else:
                options = [t for t in self.types if t.holds(job)]
                if options:
                    nodes.append(([job], options, [job.gpus, job.vcpus, job.memory_mib]))
                    if max(t.gpus for t in options) > job.gpus:
                        open_nodes.append(nodes[-1])
        for pods, options, _ in nodes:
            box = sim.launch(options[0], replaced=False)  # options stay sorted by price: the cheapest
            if sim.snapshot:
                for job in pods:
                    sim.start(sim.jobs[job.job_id], box)
        sim.plan_seconds += time.process_time() - started

    def on_idle(self, sim: Simulation, box: Box) -> None:
        if not sim.snapshot:
            sim.check_later(box, self.consolidate_after_s, self._remove_if_empty)

    def _remove_if_empty(self, sim: Simulation, box: Box) -> None:
        # A node pending pods are nominated to (they fit it and wait for the scheduler to bind them) is
        # not a consolidation candidate; it is looked at again on the next disruption pass.
        if any(box.fits(state.job) for state in sim.waiting.values()):
            sim.check_later(box, DISRUPTION_POLL_S, self._remove_if_empty)
        else:
            sim.terminate(box)

    def after_job(self, sim: Simulation, box: Box) -> None:
        pass  # emptiness (on_idle) removes it

    def on_interrupted(self, sim: Simulation, state: JobState) -> None:
        sim.requeue(state, "spot interruption", interrupted=True)

    def on_reclaimed(self, sim: Simulation, box: Box) -> None:
        pass  # no group: the recreated pods are provisioned for


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
        room = [_Booking(b.type) for b in sim.coming_boxes()]
        for job in unplaced:
            spot = next((r for r in room if r.fits(job)), None)
            if spot is None:
                sim.launch(self.type)
                spot = _Booking(self.type)
                room.append(spot)
            spot.book(job)
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
