"""Spot or on-demand, per job, by expected cost: spot's price times the rework its interruptions cause.

A job on spot is interrupted at its pool's rate (per instance-hour: lambdas/common/interruption_rates.py
in the Lambda, the injected rate in the benchmark). Each interruption costs a replacement's boot and
the work since the job's last checkpoint (all of it without checkpoints). An interrupted run that saved
no checkpoint uses one of the job's attempts; one that saved gives them all back (docs/jobs.md, "Retry
rules"), so the job is dead-lettered, and everything it ran is lost, when `attempts_left` runs in a row
save nothing. So the expected cost of
*finishing* on spot is the expected cost of its attempts divided by the chance that they finish it;
on-demand finishes it for its price times its runtime plus one boot. The job goes on-demand when that
is cheaper and a fleet that launches on-demand may run it with room to grow, or a live on-demand
machine could hold it; otherwise it stays as it was (spot or either).

- Without checkpoints, an attempt of W seconds succeeds with q = exp(-rate W) and bills
  E[min(T, W)] = (1 - q) / rate (T the exponential time to the interruption), plus a boot.
- With a checkpoint every C seconds, the job is W / C segments, each tried until a run gets through it
  (q = exp(-rate C)); a try bills E[min(T, C)], and the job finishes when no segment is tried as many
  times in a row without a checkpoint as it has attempts (spot_cost_to_finish, finish_probability).

A job with no runtime belief, or a user's `lifecycle`, is left alone.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace

from .constraints import Patterns, demand_of, fits, gpu_room, gpu_share
from .fleets import Option, fleet_lifecycle, may_run
from .model import JobRequest, Machine

HOUR = 3600.0


def finish_probability(runtime_s: float, rate_per_hour: float, checkpoint_s: float | None, attempts: int) -> float:
    """The chance that a job of `runtime_s` on spot finishes before `attempts` runs in a row save nothing.

    The job is W / C segments (one without checkpoints); a run gets through a segment with p = exp(-rate C).
    A done segment (a checkpoint) gives the attempts back. The first segment is done within the attempts
    with 1 - (1 - p)^attempts. Each later one is first tried by the run that saved the one before, whose
    interruption then uses no attempt: it is done within 1 + attempts tries, with 1 - (1 - p)^(attempts + 1).
    The segments fail independently.
    """
    rate = rate_per_hour / HOUR
    if rate <= 0:
        return 1.0
    segment = runtime_s if checkpoint_s is None else min(checkpoint_s, runtime_s)
    segments = runtime_s / segment
    success = math.exp(-rate * segment)
    miss = 1.0 - success
    return min(1.0, (1.0 - miss ** attempts) * (1.0 - miss ** (attempts + 1)) ** (segments - 1))


def spot_cost_to_finish(price: float, runtime_s: float, rate_per_hour: float, checkpoint_s: float | None,
                        attempts: int, boot_s: float) -> float:
    """Expected dollars spent on spot per job finished (inf when attempts cannot be expected to finish it)."""
    rate = rate_per_hour / HOUR
    if rate <= 0:
        return price * (runtime_s + boot_s) / HOUR
    segment = runtime_s if checkpoint_s is None else min(checkpoint_s, runtime_s)
    segments = runtime_s / segment
    success = math.exp(-rate * segment)
    miss = 1.0 - success
    finished = finish_probability(runtime_s, rate_per_hour, checkpoint_s, attempts)
    if finished <= 1e-12:
        return math.inf
    # Tries of a segment (as in finish_probability) until done or given up: at most `attempts` for the
    # first, one more for each later one; a try bills E[min(T, segment)] = (1 - p) / rate (Wald), and every
    # try boots a replacement except a later segment's first (the run that saved the one before goes on).
    first_tries = (1.0 - miss ** attempts) / success
    later_tries = (1.0 - miss ** (attempts + 1)) / success
    first = first_tries * (miss / rate + boot_s)
    later = later_tries * miss / rate + (later_tries - 1.0) * boot_s
    first_done, later_done = 1.0 - miss ** attempts, 1.0 - miss ** (attempts + 1)
    later_reached = (segments - 1 if later_done >= 1.0 else (1.0 - later_done ** (segments - 1)) / (1.0 - later_done))
    seconds = first + first_done * later_reached * later  # over every job, finished or given up
    return price * seconds / HOUR / finished


def on_demand_cost(price: float, runtime_s: float, boot_s: float) -> float:
    return price * (runtime_s + boot_s) / HOUR


def choose_lifecycles(jobs: Iterable[JobRequest], options: Sequence[Option], machines: Sequence[Machine],
                      rate_of: Callable[[str, str], float], patterns: Patterns, boot_s: float,
                      catalog) -> tuple[list[JobRequest], frozenset[str]]:
    """The jobs, those cheaper to finish on-demand marked so; and the ids of the jobs marked."""
    on_demand_room = [o for o in options if fleet_lifecycle(o.fleet) == "on-demand" and o.room > 0]
    on_demand_live = [m for m in machines if m.lifecycle == "on-demand" and not m.closed]
    spot_options = [o for o in options if fleet_lifecycle(o.fleet) == "spot"]
    chosen, marked = [], set()
    for job in jobs:
        # A reserved job's instance was bought (and its lifecycle chosen) by an earlier run and may be booting:
        # choosing again would buy it a second one.
        if job.lifecycle is not None or job.reserved is not None or job.runtime is None \
                or not (on_demand_room or on_demand_live):
            chosen.append(job)
            continue
        need = demand_of(job)
        spot = [o for o in spot_options if may_run(job, o, patterns) and o.holds(job)]
        demand_side = [o for o in on_demand_room if may_run(job, o, patterns) and o.holds(job)]
        live = [m for m in on_demand_live if patterns.accepts(job, m.instance_type, m.region, m.lifecycle)
                and fits((m.free_gpus, m.free_vcpus, m.free_memory_mib), need)
                and gpu_room(m.free_gpus, m.shared_gpus, m.gpu_memory_mib, job)]
        if not spot or not (demand_side or live):
            chosen.append(job)
            continue
        # Per GPU-hour of the cheapest box of each kind: what the job pays is its share of a box (the part
        # of a GPU its memory is, for a job sharing one).
        cheapest_spot = min(spot, key=lambda o: o.price * gpu_share(job, o.gpu_memory) / max(1, o.capacity[0]))
        rate = max(rate_of(cheapest_spot.fleet.region, t) for t in cheapest_spot.fleet.instance_types)
        spot_share = cheapest_spot.price * gpu_share(job, cheapest_spot.gpu_memory) / max(1, cheapest_spot.capacity[0])
        od_prices = [o.price * gpu_share(job, o.gpu_memory) / max(1, o.capacity[0]) for o in demand_side] + \
                    [m.price_per_hour * gpu_share(job, m.gpu_memory_mib) / max(1, catalog.get(m.instance_type).gpus)
                     for m in live]
        runtime = job.runtime.seconds
        if on_demand_cost(min(od_prices), runtime, boot_s) < spot_cost_to_finish(
                spot_share, runtime, rate, job.checkpoint_interval_s, max(1, job.attempts_left), boot_s):
            chosen.append(replace(job, lifecycle="on-demand"))
            marked.add(job.job_id)
        else:
            chosen.append(job)
    return chosen, frozenset(marked)
