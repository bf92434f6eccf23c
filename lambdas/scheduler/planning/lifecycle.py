"""Spot or on-demand, per job, by expected cost: spot's price times the rework its interruptions cause.

A job on spot is interrupted at its pool's rate (per instance-hour: lambdas/common/interruption_rates.py
in the Lambda, the injected rate in the benchmark). Each interruption costs a replacement's boot and
the work since the job's last checkpoint (all of it without checkpoints), and uses one of its attempts:
past `attempts_left` the job is dead-lettered and everything it ran is lost. So the expected cost of
*finishing* on spot is the expected cost of its attempts divided by the chance that they finish it;
on-demand finishes it for its price times its runtime plus one boot. The job goes on-demand when that
is cheaper and a fleet that launches on-demand may run it with room to grow, or a live on-demand
machine could hold it; otherwise it stays as it was (spot or either).

- Without checkpoints, an attempt of W seconds succeeds with q = exp(-rate W) and bills
  E[min(T, W)] = (1 - q) / rate (T the exponential time to the interruption), plus a boot.
- With a checkpoint every C seconds, each of the W / C segments takes (exp(rate C) - 1) / rate in
  expectation and sees exp(rate C) - 1 interruptions; the job finishes when the interruptions
  (negative-binomial) are fewer than its attempts.

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
    """The chance that `attempts` runs on spot finish a job of `runtime_s`.

    The job is W / C segments (one without checkpoints); a segment is done when a run gets through it,
    which happens with p = exp(-rate C). The interruptions before the last segment is done are then
    negative-binomial (failures before W / C successes), and the job finishes if they are fewer than
    its attempts.
    """
    rate = rate_per_hour / HOUR
    if rate <= 0:
        return 1.0
    segment = runtime_s if checkpoint_s is None else min(checkpoint_s, runtime_s)
    segments = runtime_s / segment
    success = math.exp(-rate * segment)
    term = success ** segments  # P(no interruption at all)
    total = 0.0
    for failures in range(attempts):
        total += term
        term *= (segments + failures) / (failures + 1) * (1 - success)
    return min(1.0, total)


def spot_cost_to_finish(price: float, runtime_s: float, rate_per_hour: float, checkpoint_s: float | None,
                        attempts: int, boot_s: float) -> float:
    """Expected dollars spent on spot per job finished (inf when attempts cannot be expected to finish it)."""
    rate = rate_per_hour / HOUR
    if rate <= 0:
        return price * (runtime_s + boot_s) / HOUR
    if checkpoint_s is None or checkpoint_s >= runtime_s:
        q = math.exp(-rate * runtime_s)
        reached = sum((1 - q) ** i for i in range(attempts))  # expected attempts started
        seconds = reached * (boot_s + (1 - q) / rate)
    else:
        segments = runtime_s / checkpoint_s
        interruptions = segments * math.expm1(rate * checkpoint_s)
        seconds = segments * math.expm1(rate * checkpoint_s) / rate + boot_s * (1 + min(interruptions, attempts - 1))
    finished = finish_probability(runtime_s, rate_per_hour, checkpoint_s, attempts)
    return price * seconds / HOUR / finished if finished > 1e-12 else math.inf


def on_demand_cost(price: float, runtime_s: float, boot_s: float) -> float:
    return price * (runtime_s + boot_s) / HOUR


def choose_lifecycles(jobs: Iterable[JobRequest], options: Sequence[Option], machines: Sequence[Machine],
                      rate_of: Callable[[str, str], float], patterns: Patterns, boot_s: float,
                      catalog) -> tuple[list[JobRequest], frozenset[str]]:
    """The jobs, those cheaper to finish on-demand marked so; and the ids of the jobs marked."""
    on_demand_room = [o for o in options if fleet_lifecycle(o.fleet) == "on-demand" and o.room > 0]
    on_demand_live = [m for m in machines if m.lifecycle == "on-demand" and not (m.draining or m.removing)]
    spot_options = [o for o in options if fleet_lifecycle(o.fleet) == "spot"]
    chosen, marked = [], set()
    for job in jobs:
        if job.lifecycle is not None or job.runtime is None or not (on_demand_room or on_demand_live):
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
