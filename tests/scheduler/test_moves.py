"""The move stage (lambdas/scheduler/planning/moves.py): one case per rule, the saving's arithmetic, the cap
per run, room taken once, the plan's wiring (only with a release policy and without headroom; a moved job
goes to the machine the move chose), and properties over random fleets."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lambdas.common.catalog import load_catalog
from lambdas.scheduler.planning import Fleet, JobRequest, Limits, Machine, ReleasePolicy, RuntimeEstimate, plan
from lambdas.scheduler.planning.constraints import Patterns, capacity_of
from lambdas.scheduler.planning.moves import (
    MAX_MOVES_PER_RUN, MIN_SAVING_USD, STOP_LOSS_S, RunningJob, propose_moves,
)
from lambdas.scheduler.planning.packer import Packer

CATALOG = load_catalog()
NOW = 1_000_000.0
HOUR = 3600.0
BIG, SMALL = "g4dn.12xlarge", "g4dn.xlarge"
PRICE = {t: CATALOG.get(t).spot_price("us-east-1") for t in (BIG, SMALL)}


def job(job_id="j1", *, checkpoint_s=1800.0, runtime=None, gpus=1, vcpus=2.0, memory_mib=4096, **kw):
    return JobRequest(job_id, f"sub-{job_id}", gpus, vcpus, memory_mib, checkpoint_interval_s=checkpoint_s,
                      runtime=runtime, **kw)


def busy(key="m1", instance_type=BIG, jobs=(), **kw):
    spec = CATALOG.get(instance_type)
    fields = dict(key=key, instance_id=f"i-{key[1:]}", region="us-east-1", fleet=instance_type,
                  instance_type=instance_type, availability_zone="us-east-1a", lifecycle="spot",
                  free_gpus=spec.gpus - sum(j.gpus for j in jobs),
                  free_vcpus=spec.schedulable_vcpus - sum(j.vcpus for j in jobs),
                  free_memory_mib=spec.schedulable_memory_mib - sum(j.memory_mib for j in jobs),
                  price_per_hour=PRICE[instance_type], launched_at=NOW - 10 * HOUR,
                  submissions=frozenset(j.submission_id for j in jobs), jobs=frozenset(j.job_id for j in jobs))
    fields.update(kw)
    return Machine(**fields)


def fleets(current=3, min_size=0):
    return [Fleet("us-east-1", t, t, (t,), current, 0, 50, min_size=min_size) for t in (BIG, SMALL)]


def alone(request):
    return PRICE[SMALL]


def room(machines):
    return Packer(machines, CATALOG, lambda j, g: Patterns().accepts(j, g.instance_type, g.region, g.lifecycle))


def propose(machines, running, *, fleet_list=None, placed_on=(), **kw):
    return propose_moves(machines, fleet_list or fleets(), CATALOG, running, room(machines), alone, NOW,
                         placed_on, **kw)


def pair(*, source_jobs=None, target_jobs=None, source_ran=5 * HOUR, target_ran=10 * HOUR):
    """m1: a g4dn.12xlarge left with one checkpointing job; m2: one with two jobs and room for a third."""
    source_jobs = source_jobs or [job("j1")]
    target_jobs = target_jobs or [job("t1", checkpoint_s=None), job("t2", checkpoint_s=None)]
    machines = [busy("m1", jobs=source_jobs), busy("m2", jobs=target_jobs)]
    running = [RunningJob(j, "m1", NOW - source_ran) for j in source_jobs] + \
              [RunningJob(j, "m2", NOW - target_ran) for j in target_jobs]
    return machines, running


def test_a_lone_checkpointing_job_goes_into_room_another_machine_pays_for():
    machines, running = pair()
    (move,) = propose(machines, running)
    assert (move.machine_key, move.instance_id, move.targets) == ("m1", "i-1", (("j1", "i-2"),))
    # Nothing known of its runtime: as long again as it has run (5 h); m2's jobs have run 10 h, so it keeps
    # m2 up no longer. The stop costs STOP_LOSS_S of the job's work, priced at its own instance.
    assert move.saving_usd == pytest.approx(PRICE[BIG] * 5 - STOP_LOSS_S * PRICE[SMALL] / HOUR, abs=0.01)
    assert "g4dn.12xlarge" in move.reason and f"${PRICE[BIG]:.3f}/h" in move.reason


def test_keeping_the_target_up_longer_counts_against_the_move():
    # m2's jobs have run 1 h (expected to end in 1 h); the job is expected to run 5 h more: 4 h of m2.
    machines, running = pair(target_ran=1 * HOUR)
    (move,) = propose(machines, running)
    assert move.saving_usd == pytest.approx(PRICE[BIG] * 5 - PRICE[BIG] * 4 - STOP_LOSS_S * PRICE[SMALL] / HOUR,
                                            abs=0.01)
    # m1 and m2 are alike: a job believed to run a week, moved onto m2 whose jobs end in 6 minutes, saves
    # those 6 minutes of a machine, less the stop: under MIN_SAVING_USD.
    week = RuntimeEstimate(seconds=7 * 24 * HOUR, log_sigma=0.1)
    machines, running = pair(source_jobs=[job("j1", runtime=week)], target_ran=0.1 * HOUR)
    assert PRICE[BIG] * 0.1 < MIN_SAVING_USD and propose(machines, running) == ()


def test_a_job_believed_to_end_soon_is_not_moved():
    soon = RuntimeEstimate(seconds=5 * HOUR + 300, log_sigma=0.05)
    machines, running = pair(source_jobs=[job("j1", runtime=soon)])
    assert propose(machines, running) == ()


@pytest.mark.parametrize(("change", "kw"), [
    ({"source_jobs": [job("j1", checkpoint_s=None)]}, {}),
    ({"source_jobs": [job("j1"), job("j2", checkpoint_s=None)]}, {}),
    ({}, {"placed_on": ("m1",)}),
    ({}, {"fleet_list": fleets(current=2, min_size=2)}),
    ({"target_jobs": [job(f"t{n}", checkpoint_s=None) for n in range(4)]}, {}),  # m2's GPUs all taken
    ({"target_jobs": [job("t1", checkpoint_s=None, vcpus=47.0)]}, {}),  # 1 vCPU left on m2
], ids=["no-checkpoints", "one-without-checkpoints", "placed-this-run", "group-at-minimum", "no-gpu-left",
        "no-vcpus-left"])
def test_each_rule_keeps_the_jobs_where_they_are(change, kw):
    machines, running = pair(**change)
    assert propose(machines, running, **kw) == ()


@pytest.mark.parametrize("source_change", [{"protected": True}, {"draining": True}, {"removing": True},
                                           {"fleet": "not-a-fleet"}, {"free_gpus": 2},
                                           {"jobs": frozenset({"j1", "j9"})}],
                         ids=["keep-alive", "draining", "removing", "unknown-group", "a-gpu-held-by-another-task",
                              "another-job-runs"])
def test_a_machine_the_release_stage_could_not_give_back_or_with_other_tasks_stays(source_change):
    machines, running = pair()
    machines[0] = replace(machines[0], **source_change)
    assert propose(machines, running) == ()


@pytest.mark.parametrize("target_change", [{"region": "us-west-2"}, {"draining": True}, {"removing": True}],
                         ids=["another-region", "draining", "removing"])
def test_room_the_job_may_not_use_is_not_a_target(target_change):
    machines, running = pair()
    machines[1] = replace(machines[1], **target_change)
    assert propose(machines, running) == ()


def test_an_empty_machine_is_no_target():
    """Moving onto an empty machine swaps one machine for another: the release stage's business."""
    machines, running = pair()
    machines[1] = busy("m2")
    assert propose(machines, running[:1]) == ()


def test_room_is_taken_once_and_a_machine_filled_is_not_emptied_in_the_same_run():
    # m2 has room for one one-GPU job; m1 and m3 each run one checkpointing job that would go there.
    target = [job(f"t{n}", checkpoint_s=None) for n in range(3)]
    machines = [busy("m1", jobs=[job("j1")]), busy("m3", jobs=[job("j3")]), busy("m2", jobs=target)]
    running = [RunningJob(job("j1"), "m1", NOW - 5 * HOUR), RunningJob(job("j3"), "m3", NOW - 4 * HOUR),
               *(RunningJob(j, "m2", NOW - 10 * HOUR) for j in target)]
    (move,) = propose(machines, running)
    assert move.machine_key == "m1"  # the larger saving: it ran longer


def test_a_machine_whose_jobs_need_two_targets_moves_only_if_both_fit():
    jobs = [job("j1"), job("j2")]
    one_gpu_left = [job(f"t{n}", checkpoint_s=None) for n in range(3)]
    other = job("u0", checkpoint_s=None)
    machines = [busy("m1", jobs=jobs), busy("m2", jobs=one_gpu_left), busy("m3", jobs=[other])]
    running = [*(RunningJob(j, "m1", NOW - 5 * HOUR) for j in jobs),
               *(RunningJob(j, "m2", NOW - 10 * HOUR) for j in one_gpu_left), RunningJob(other, "m3", NOW - 10 * HOUR)]
    (move,) = propose(machines, running)
    # Neither keeps a target up longer; j1 takes the fuller m2's last GPU, j2 goes to m3.
    assert move.targets == (("j1", "i-2"), ("j2", "i-3"))
    assert propose(machines[:2], running[:5]) == ()  # m2 alone has room for one of them


def test_at_most_the_cap_a_run_and_the_largest_saving_first():
    n = MAX_MOVES_PER_RUN + 2
    sources = [busy(f"m{k}", jobs=[job(f"j{k}")]) for k in range(1, n + 1)]
    targets = [busy(f"m{k}", jobs=[job(f"t{k}", checkpoint_s=None)]) for k in range(100, 100 + n)]
    running = [RunningJob(job(f"j{k}"), f"m{k}", NOW - (1 + k) * HOUR) for k in range(1, n + 1)] + \
              [RunningJob(job(f"t{k}", checkpoint_s=None), f"m{k}", NOW - 100 * HOUR) for k in range(100, 100 + n)]
    found = propose(sources + targets, running, fleet_list=fleets(current=2 * n))
    assert len(found) == MAX_MOVES_PER_RUN
    assert [m.saving_usd for m in found] == sorted((m.saving_usd for m in found), reverse=True)
    assert found[0].machine_key == f"m{n}"  # ran longest: expected to run longest


def test_jobs_sharing_a_gpu_move_into_a_shared_gpus_room():
    sharer = job("j1", gpus=0, gpu_memory_mib=6000)
    other = job("t1", gpus=0, gpu_memory_mib=6000, checkpoint_s=None)
    gpu_memory = CATALOG.get(BIG).shareable_gpu_memory_mib
    machines = [busy("m1", jobs=[sharer], free_gpus=3, shared_gpus=(gpu_memory - 6000,)),
                busy("m2", jobs=[job("t2", checkpoint_s=None), job("t3", checkpoint_s=None),
                                 job("t4", checkpoint_s=None)], free_gpus=0, shared_gpus=(gpu_memory - 6000,),
                     gpu_memory_mib=gpu_memory)]
    machines[0] = replace(machines[0], gpu_memory_mib=gpu_memory)
    running = [RunningJob(sharer, "m1", NOW - 5 * HOUR),
               *(RunningJob(job(f"t{k}", checkpoint_s=None), "m2", NOW - 10 * HOUR) for k in (2, 3, 4)),
               RunningJob(other, "m2", NOW - 10 * HOUR)]
    machines[1] = replace(machines[1], jobs=frozenset({"t1", "t2", "t3", "t4"}))
    (move,) = propose(machines, running)
    assert move.targets == (("j1", "i-2"),)


def test_the_plan_moves_only_with_a_release_policy_and_without_headroom():
    machines, running = pair()
    args = ([], machines, fleets(), CATALOG, Limits(100.0, 1.0))
    kw = dict(now=NOW, running=running)
    assert plan(*args, release=ReleasePolicy(after_empty_s=180), **kw).moves
    assert plan(*args, **kw).moves == ()
    assert plan(*args, release=ReleasePolicy(after_empty_s=180), headroom_on=True, **kw).moves == ()


@pytest.mark.parametrize("moved", [True, False], ids=["moved", "not-moved"])
def test_a_moved_job_goes_to_the_machine_the_move_chose_before_any_other_job_takes_its_room(moved):
    machines, _ = pair()
    m2 = replace(machines[1], free_gpus=2)
    m1 = replace(machines[0], free_gpus=4, free_vcpus=48.0, free_memory_mib=187_719, submissions=frozenset(),
                 jobs=frozenset())  # j1's task has stopped; the release stage has not given m1 back yet
    # A two-GPU job is planned first (largest first) and, left to fitness, takes m2's two GPUs, the fullest
    # room. The moved job still goes to m2, and the newcomer to m1: the kept-machine rule lets an empty
    # machine the release delay kept take a job whose own instance would cost as much (a g4dn.12xlarge).
    requeued = job("j1", move_to=m2.instance_id if moved else None)
    newcomer = job("n1", gpus=2)
    result = plan([newcomer, requeued], [m1, m2], fleets(), CATALOG, Limits(100.0, 1.0), now=NOW,
                  release=ReleasePolicy(after_empty_s=180))
    placed = {p.job_id: p.machine_key for p in result.placements}
    if moved:
        assert placed == {"j1": "m2", "n1": "m1"}
    else:  # the newcomer takes m2; the job is not placed on m1 (the kept-machine rule: packer.py) but bought for
        assert placed == {"n1": "m2"}


def test_the_room_of_a_move_under_way_is_held_until_its_job_is_back():
    """The job's task is stopping (m1 shows it no more); a newcomer that fits only m2's room, which the
    move chose, does not take it: it is bought for."""
    machines, _ = pair()
    m2 = machines[1]  # two GPUs taken: room for two more
    m1 = replace(machines[0], free_gpus=4, free_vcpus=48.0, free_memory_mib=187_719, submissions=frozenset(),
                 jobs=frozenset(), draining=True)  # out of the way: not what this test is about
    newcomer = job("n1", gpus=2)
    under_way = job("j1", move_to=m2.instance_id)
    args = ([newcomer], [m1, m2], fleets(), CATALOG, Limits(100.0, 1.0))
    free = plan(*args, now=NOW, release=ReleasePolicy(after_empty_s=180))
    held = plan(*args, now=NOW, release=ReleasePolicy(after_empty_s=180), moving=[under_way])
    assert [(p.job_id, p.machine_key) for p in free.placements] == [("n1", "m2")]
    assert held.placements == () and [s.for_jobs for s in held.scale_outs] == [("n1",)]


@pytest.mark.parametrize("gone", [{"free_gpus": 0}, {"draining": True}, {"removing": True}],
                         ids=["room-taken", "draining", "removing"])
def test_a_moved_job_whose_room_is_gone_is_planned_like_any_other(gone):
    machines, running = pair()
    target = replace(machines[1], **gone)
    requeued = job("j1", move_to=target.instance_id)
    for moving, jobs in (([], [requeued]), ([requeued], [])):  # back in the queue, or its move under way
        result = plan(jobs, [target], fleets(), CATALOG, Limits(100.0, 1.0), now=NOW,
                      release=ReleasePolicy(after_empty_s=180), moving=moving)
        assert not result.placements
        assert [s.for_jobs for s in result.scale_outs] == ([("j1",)] if jobs else [])


# Properties over random fleets: every move's jobs fit where it sends them (all moves of the run together,
# after the run's placements), no machine is both emptied and filled, each saves at least MIN_SAVING_USD,
# only checkpointing jobs move, and never more machines than the cap.
_job_sizes = st.tuples(st.integers(1, 2), st.sampled_from([2.0, 6.0, 12.0]), st.sampled_from([4096, 16384, 49152]),
                       st.booleans(), st.floats(0.5, 200.0))


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(_job_sizes, min_size=0, max_size=4), min_size=2, max_size=8))
def test_moves_always_fit_and_never_cross(layout):
    machines, running, n = [], [], 0
    for k, jobs in enumerate(layout):
        requests = []
        gpus, vcpus, memory = capacity_of(CATALOG, BIG)
        for g, v, m, checkpoints, hours in jobs:
            if g > gpus or v > vcpus or m > memory:
                continue
            gpus, vcpus, memory = gpus - g, vcpus - v, memory - m
            request = job(f"j{n}", gpus=g, vcpus=v, memory_mib=m, checkpoint_s=1800.0 if checkpoints else None)
            n += 1
            requests.append(request)
            running.append(RunningJob(request, f"m{k}", NOW - hours * HOUR))
        machines.append(busy(f"m{k}", jobs=requests))
    found = propose(machines, running, fleet_list=fleets(current=len(machines)))
    assert len(found) <= MAX_MOVES_PER_RUN
    emptied = {m.machine_key for m in found}
    by_instance = {m.instance_id: m for m in machines}
    free = {m.key: [m.free_gpus, m.free_vcpus, m.free_memory_mib] for m in machines}
    requests = {r.request.job_id: r for r in running}
    for move in found:
        assert move.saving_usd >= MIN_SAVING_USD
        for job_id, instance_id in move.targets:
            r = requests[job_id]
            assert r.machine_key == move.machine_key and r.request.checkpoint_interval_s
            target = by_instance[instance_id]
            assert target.key not in emptied and target.jobs
            room = free[target.key]
            room[:] = [room[0] - r.request.gpus, room[1] - r.request.vcpus, room[2] - r.request.memory_mib]
            assert min(room) >= 0
        assert {j for j, _ in move.targets} == machines[int(move.machine_key[1:])].jobs
