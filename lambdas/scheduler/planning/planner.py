"""The plan: where each pending job goes, what to buy for the rest, and what to give back. One pure function.

Plain data in (pending jobs, live machines, purchasable fleets, the catalog, the limits, the time), a
`Plan` out. No AWS: the scheduler Lambda reads the world and acts on the plan; the benchmark runs this
same code. Each stage serves the jobs the previous ones could not, in planning order (largest first,
oldest first among equals):

   shares.py        which queued jobs are offered, under each team's quota and by weighted fair share
   lifecycle.py     spot or on-demand by expected cost (with interruption rates and runtime beliefs)
0. reservations.py  jobs an earlier run bought an instance for start together on it
1. live.py          the fittest live machine (duration-aware: packer.py)
2. launching.py     instances already asked for and still launching
3. purchase.py      what to buy, runtime class by class, within each fleet's cap and the dollar cap
   headroom.py      (opt-in) placeholders for recent boot-waiting jobs, after the real ones in stages 1-3
4. release.py       empty machines nothing was placed on (nor kept for headroom), past the release delay, given back
5. moves.py         machines whose checkpointing jobs fit the room others pay for: the jobs stopped, moved there
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from .constraints import Patterns, constraint_key, demand_of, planning_order
from .fleets import Option, cheapest_alone, purchase_options
from .headroom import buy_ahead, yield_to
from .launching import place_on_launching
from .lifecycle import choose_lifecycles
from .live import place_live
from .model import ADMISSION_CLOSED, Fleet, JobRequest, Limits, Machine, Plan, ScaleOut, held_by_a_cap
from .moves import RunningJob, propose_moves
from .packer import Timing
from .purchase import HOST_CLASS, host_hourly, purchase, runtime_class
from .release import ReleasePolicy, givable, propose_releases
from .runtimes import RuntimePrior
from .shares import Shares, offer_jobs

# Scale-out to a machine ECS can place on, when the caller does not say (the benchmark's default too).
DEFAULT_BOOT_S = 180.0


def plan(jobs: Sequence[JobRequest], machines: Sequence[Machine], fleets: Sequence[Fleet], catalog,
         limits: Limits, *, prices: Mapping[tuple[str, str], float] | None = None, now: float = 0.0,
         release: ReleasePolicy | None = None, interruption_rate: Callable[[str, str], float] | None = None,
         boot_s: float = DEFAULT_BOOT_S, shares: Shares | None = None,
         headroom: Sequence[JobRequest] = (), cover_cpu_seconds: float | None = None,
         headroom_on: bool = False, running: Sequence[RunningJob] = (),
         moving: Sequence[JobRequest] = (), runtime_prior: RuntimePrior | None = None) -> Plan:
    """`release`: propose empty machines to give back (None: propose none). `interruption_rate(region,
    type)`: spot interruptions per instance-hour, for the lifecycle stage (None: leave lifecycles alone).
    `shares`: teams, quotas and priorities (shares.py); None offers every job, as for one team without a quota.
    `headroom`: placeholder requests (headroom.py), planned after every real job: a live machine one fits is
    kept, and what none fits is bought ahead (`Plan.headroom`) within the caps the real jobs leave.
    `headroom_on`: headroom is configured (whether or not this run has placeholders): empty machines are kept
    on purpose for the jobs to come, so a job takes one whatever it costs (no kept-machine rule, packer.py).
    `cover_cpu_seconds`: the most CPU time the purchase's covers may take (None: what each purchase's cost
    warrants, purchase.cover_budget).
    `running`: the jobs running on `machines`, for the move stage; it runs only with a release policy and
    without headroom (the kept-machine rule and the release stage are what keep jobs off an emptied
    machine and give it back). `moving`: jobs whose move is under way (their tasks stopping; `move_to` the
    instance they go to): the room they go to is held for them. `runtime_prior`: what the environment's
    finished jobs took (runtimes.RuntimePrior), for the jobs without a runtime belief: live placement
    weighs how long they may keep a machine up (packer.py); None: they are judged by dear room alone."""
    def releases(placed_on) -> tuple:
        return propose_releases(machines, fleets, catalog, now, release, placed_on) if release else ()

    if not limits.admission_open:
        return Plan((), (), tuple((j.job_id, ADMISSION_CLOSED) for j in sorted(jobs, key=lambda j: j.job_id)),
                    releases(()))

    patterns = Patterns()
    held_back: tuple[tuple[str, str], ...] = ()
    kept: frozenset = frozenset()
    capped: set[str] = set()  # real jobs a cap holds back: placeholders give way to them (headroom.yield_to)
    real = {j.job_id: j for j in jobs}
    if shares is not None:
        offer = offer_jobs(jobs, machines, fleets, catalog, limits, shares, prices=prices, patterns=patterns)
        jobs, held_back, kept = offer.jobs, offer.waiting, frozenset(offer.kept)
        capped |= offer.capped
    # A machine kept for a large job waiting its turn gets nothing placed on it, and is not given back.
    open_machines = [m for m in machines if m.key not in kept]
    options = _Lazy(lambda: purchase_options(fleets, catalog, prices))
    ordered = planning_order(jobs)
    fallbacks: dict[str, JobRequest] = {}
    if interruption_rate is not None and ordered:
        originals = {j.job_id: j for j in ordered}
        ordered, marked = choose_lifecycles(ordered, options(), open_machines, interruption_rate, patterns, boot_s,
                                            catalog)
        fallbacks = {job_id: originals[job_id] for job_id in marked}
    # With headroom configured, machines are kept on purpose for the jobs to come (dollars for waits): the
    # kept-machine rule judges none. Judged, the jobs declined them and the waits came back (p95 166-197 s
    # against 60 s at 480 minutes; docs/scheduler-benchmark.md, "Kept empty machines").
    timing = Timing(now, _cheapest_alone(options, patterns), boot_s,
                    runtimes=runtime_prior is not None or any(j.runtime for j in ordered),
                    givable=givable(open_machines, fleets, catalog) if release is not None and not headroom_on
                    else frozenset(), prior=runtime_prior, host_hourly=_host_hourly(options, patterns, fallbacks))
    # Placeholders come after every real job in each stage: they take only the room real jobs leave.
    spare = {j.job_id for j in headroom}
    placements, unplaced, room = place_live([*ordered, *headroom], open_machines, catalog, patterns, timing, moving)
    spare_kept = {p.machine_key for p in placements if p.job_id in spare}
    placements = [p for p in placements if p.job_id not in spare]
    waiting: list[tuple[str, str]] = []
    scale_outs: list[ScaleOut] = []
    ahead: list[ScaleOut] = []
    spare_left: list[JobRequest] = []
    if unplaced:
        unplaced, waiting = place_on_launching(unplaced, options(), catalog, patterns)
        waiting = [w for w in waiting if w[0] not in spare]
        spare_left = [j for j in unplaced if j.job_id in spare]
        unplaced = [j for j in unplaced if j.job_id not in spare]
        if unplaced:
            scale_outs, bought_waiting = purchase(unplaced, options(), catalog, patterns, limits, fallbacks,
                                                  cover_cpu_seconds)
            waiting += bought_waiting
            bought_ids = {job_id for s in scale_outs for job_id in s.for_jobs}
            capped |= {job_id for job_id, reason in bought_waiting if job_id not in bought_ids and held_by_a_cap(reason)}
    # Placeholders give way to the real jobs a cap holds back: None, everything; else the capped fleets' machines.
    given_up = yield_to([real[j] for j in sorted(capped)], options(), scale_outs, patterns) \
        if capped and headroom else frozenset()
    if spare_left and given_up is not None:
        ahead = buy_ahead(spare_left, options(), scale_outs, unplaced, catalog, patterns, limits)
    if given_up is not None:
        fleet_of = {m.key: (m.region, m.fleet) for m in machines}
        kept |= {key for key in spare_kept if fleet_of[key] not in given_up}
    placed_on = {p.machine_key for p in placements}
    moves: tuple = ()
    if running and release is not None and not headroom_on:
        # The jobs this run placed count as running from now: they decide how long their machines stay up.
        started = [RunningJob(real[p.job_id], p.machine_key, now) for p in placements if p.job_id in real]
        moves = propose_moves(open_machines, fleets, catalog, [*running, *started], room, timing.alone_hourly, now,
                              placed_on | kept)
    return Plan(tuple(placements), tuple(scale_outs), tuple(sorted([*waiting, *held_back])),
                releases(placed_on | kept), tuple(ahead), moves)


class _Lazy:
    """A value computed on first use (the purchase options: most runs place everything on live machines)."""

    def __init__(self, compute: Callable):
        self._compute, self._value, self._done = compute, None, False

    def __call__(self):
        if not self._done:
            self._value, self._done = self._compute(), True
        return self._value


def _host_hourly(options: Callable[[], Sequence[Option]], patterns: Patterns,
                 no_hosts: Mapping[str, JobRequest]) -> Callable[[JobRequest], float | None]:
    """$/h of the host the purchase would buy for a job it buys hosts for, among the fleets whose caps allow
    one more; None for other jobs (and for those the lifecycle stage sent on-demand: they get no hosts)."""
    # The memo is per size, not per runtime: only jobs the purchase buys hosts for may reach it.
    host = _per_size(options, lambda job, open_options: host_hourly(job, open_options, patterns))
    return lambda job: None if job.job_id in no_hosts or runtime_class(job) < HOST_CLASS else host(job)


def _cheapest_alone(options: Callable[[], Sequence[Option]],
                    patterns: Patterns) -> Callable[[JobRequest], float | None]:
    """$/h of the cheapest fleet that may run a job on an instance of its own and whose cap allows one more
    (None when none can: then no live machine is declined for being dearer than buying, since nothing
    can be bought and the job would only wait)."""
    return _per_size(options, lambda job, open_options: cheapest_alone(job, open_options, patterns))


def _per_size(options: Callable[[], Sequence[Option]],
              price_of: Callable[[JobRequest, Sequence[Option]], float | None]) -> Callable[[JobRequest], float | None]:
    """`price_of(job, the options whose caps allow one more instance)`, memoized per constraints and size:
    all that a fleet's price for a job depends on."""
    prices: dict[tuple, float | None] = {}
    open_options = _Lazy(lambda: [o for o in options() if o.room > 0])

    def price(job: JobRequest) -> float | None:
        key = (constraint_key(job), demand_of(job), job.gpu_memory_mib)
        if key not in prices:
            prices[key] = price_of(job, open_options())
        return prices[key]
    return price
