"""The planner's plain data: what it is given (jobs, machines, fleets, limits) and what it returns.

No AWS and no behaviour here: the scheduler Lambda builds these from what it reads, the benchmark from
its simulation, and every stage of the plan works on them.
"""

from __future__ import annotations

from dataclasses import dataclass

# A machine proposed for removal: the removal protocol's own type (docs/removal.md, "Propose"), so the
# release stage's proposals go to the executor as they are.
from ...removal.decide import Candidate

ADMISSION_CLOSED = "admission closed by budget guard"
NO_FLEET = "no fleet can run it (instance-type pattern, region, lifecycle or size)"
SCALING_PAUSED = "no free capacity; scaling paused (circuit breaker open)"


def held_by_a_cap(reason: str) -> bool:
    """Whether a purchase's waiting reason is a fleet's cap or the dollar cap (the other reasons: no fleet
    can run the job, or its scaling is paused)."""
    return reason not in (NO_FLEET, SCALING_PAUSED)


Resources = tuple[int, float, int]  # GPUs, vCPUs, MiB


@dataclass(frozen=True)
class RuntimeEstimate:
    """A job's expected runtime: the median of a log-normal belief, and its spread (sigma of log seconds)."""
    seconds: float
    log_sigma: float


@dataclass(frozen=True)
class Reservation:
    """A new instance bought for a set of jobs: equal reservations are one box's jobs."""
    region: str
    fleet: str
    box: str


@dataclass(frozen=True)
class JobRequest:
    job_id: str
    submission_id: str
    gpus: int
    vcpus: float
    memory_mib: int
    instance_type_pattern: str | None = None  # regex, full match on the type name
    regions: tuple[str, ...] = ()  # empty = any
    lifecycle: str | None = None  # "spot" | "on-demand" | None
    submitted_at: float = 0.0  # epoch seconds; older first
    reserved: Reservation | None = None  # the instance an earlier run bought for it, if any
    # Where its checkpoint is (the region of its first run): it runs there again, or waits. None: anywhere.
    checkpoint_region: str | None = None
    # How long it is expected to run (runtimes.py: the spec's estimate and finished siblings), or None.
    runtime: RuntimeEstimate | None = None
    # Seconds between the job's checkpoints (a requeued attempt resumes from the last); None: restarts.
    checkpoint_interval_s: float | None = None
    attempts_left: int = 1  # runs it may still start, counting the next one
    team: str | None = None  # None, or a team the config no longer lists: the default team (shares.py)
    priority: int = 5  # 0-9, higher first within its team (lambdas/jobs/spec.py DEFAULT_PRIORITY)
    # With `gpus` 0: the job shares one GPU with others (ECS `nvidiaMps`), asking this much of its memory.
    # With `gpus` 1: a purchase bundle of such jobs (purchase.py), needing a GPU that can share this much.
    gpu_memory_mib: int = 0
    # Stopped by the move stage (moves.py) to go to this instance's room: placed there first (live.py).
    move_to: str | None = None

    @property
    def shares_gpu(self) -> bool:
        return self.gpus == 0 and self.gpu_memory_mib > 0


@dataclass(frozen=True)
class Machine:
    key: str  # container instance ARN (the StartTask target)
    instance_id: str
    region: str
    fleet: str
    instance_type: str
    availability_zone: str
    lifecycle: str
    free_gpus: int
    free_vcpus: float
    free_memory_mib: int
    price_per_hour: float
    rebalance_recommended: bool = False
    draining: bool = False
    # Submissions with a job running on the machine (the sweep spread counts them in its pool).
    submissions: frozenset[str] = frozenset()
    jobs: frozenset[str] = frozenset()  # the jobs its running tasks were started for (the move stage)
    # Tagged `mlfleet:removing`: a removal (docs/removal.md) is draining it. Never placed onto.
    removing: bool = False
    launched_at: float | None = None  # epoch seconds; None when unknown (never released then)
    # Since when no task has run on it; None while a task runs or when unknown (never released then).
    empty_since: float | None = None
    protected: bool = False  # `mlfleet:keep-alive` protects it
    # When its running jobs are expected to have ended (epoch seconds); None when any is unknown.
    busy_until: float | None = None
    # GPU sharing (ECS `nvidiaMps`): the memory of each GPU jobs sharing it may use (0: the machine cannot
    # share: its type, or no `ecs.capability.gpu-sharing-mps`), and what is left on each GPU that already
    # runs sharing jobs. Those GPUs are not in `free_gpus`, and take only sharing jobs.
    gpu_memory_mib: int = 0
    shared_gpus: tuple[int, ...] = ()
    # The GPUs ECS registered for it where it reports them (never more than its type's); None: its type's.
    gpus: int | None = None
    # Why nothing may be placed on it, or "" (lambdas/scheduler/state.py degraded_reason: fewer GPUs
    # registered than its type has, ECS health IMPAIRED, a start ECS refused for the machine). Not kept for
    # queued jobs either: once empty, the release stage gives it back without the release delay.
    degraded: str = ""

    @property
    def closed(self) -> bool:
        """Nothing is placed onto it: drained by AWS, being removed (docs/removal.md), or degraded."""
        return self.draining or self.removing or bool(self.degraded)


@dataclass(frozen=True)
class Fleet:
    region: str
    fleet: str
    asg_name: str
    instance_types: tuple[str, ...]
    # Usable machines of the group (registered with ECS, not draining), and instances asked for that
    # are not usable yet (desired capacity minus those). Together they count against the cap.
    current_instances: int
    pending_instances: int
    max_instances: int
    on_demand_base: int = 0
    on_demand_percent_above_base: int = 0
    min_size: int = 0  # the group's minimum: a release never takes it below
    # Instances of the group a removal is draining (tagged `mlfleet:removing`): neither usable nor
    # launching; they count against the disruption budget until terminated.
    removing_instances: int = 0
    # Members terminating (lifecycle Terminating*): in no other count, they still count against the
    # disruption budget until they are gone (lambdas.removal.decide.room).
    terminating_instances: int = 0
    # False when the group's machines cannot share GPUs whatever their types (its AMI does not advertise
    # `ecs.capability.gpu-sharing-mps`): nothing is bought from it for jobs that share a GPU.
    gpu_sharing: bool = True
    # True while its circuit breaker stops its scaling (lambdas/scheduler/handler.py): its cap is then what it
    # has, and a job waiting for it is told why, not "at its cap".
    scaling_stopped: bool = False


@dataclass(frozen=True)
class Limits:
    max_hourly_usd: float
    current_hourly_usd: float
    admission_open: bool = True
    scaling_allowed: bool = True  # False when the circuit breaker is open


@dataclass(frozen=True)
class Placement:
    job_id: str
    machine_key: str
    region: str
    fleet: str


@dataclass(frozen=True)
class ScaleOut:
    region: str
    fleet: str
    asg_name: str
    add_instances: int
    hourly_usd: float
    for_jobs: tuple[str, ...]
    boxes: tuple[tuple[str, ...], ...] = ()  # the jobs planned onto each new instance (reserve them)


@dataclass(frozen=True)
class Plan:
    placements: tuple[Placement, ...]
    scale_outs: tuple[ScaleOut, ...]
    waiting: tuple[tuple[str, str], ...]  # (job_id, reason)
    releases: tuple[Candidate, ...] = ()  # empty machines the scheduler gives back (release.py)
    headroom: tuple[ScaleOut, ...] = ()  # instances bought ahead for no job (headroom.py): nothing to reserve
    moves: tuple = ()  # machines whose checkpointing jobs to stop and requeue (moves.Move)
