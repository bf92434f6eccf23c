"""A job that has run goes back to the region of its checkpoint: the planner's constraint and where the
scheduler takes the region from (the ledger record)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lambdas.common.catalog import load_catalog
from lambdas.jobs.ledger import QUEUED, JobRecord, Placement
from lambdas.jobs.spec import JobSpec
from lambdas.scheduler.requests import checkpoint_region, job_request
from lambdas.scheduler.planning import Fleet, JobRequest, Limits, Machine, plan
from lambdas.scheduler.planning.constraints import constraint_key

CATALOG = load_catalog()
LIMITS = Limits(max_hourly_usd=1000, current_hourly_usd=0)
EAST, OHIO, WEST = "us-east-1", "us-east-2", "us-west-2"
TYPES = ("g5.12xlarge",)


def job(job_id="j1", gpus=1, **kw) -> JobRequest:
    return JobRequest(job_id=job_id, submission_id="sub-1", gpus=gpus, vcpus=1, memory_mib=1024, **kw)


def machine(key: str, region: str, free_gpus: int = 4) -> Machine:
    spec = CATALOG.get("g5.12xlarge")
    return Machine(key=key, instance_id=f"i-{key}", region=region, fleet="gpu4", instance_type="g5.12xlarge",
                   availability_zone=f"{region}a", lifecycle="spot", free_gpus=free_gpus, free_vcpus=spec.vcpus,
                   free_memory_mib=spec.schedulable_memory_mib, price_per_hour=spec.spot_price(region))


def fleet(region: str, current: int = 0) -> Fleet:
    return Fleet(region=region, fleet="gpu4", asg_name="mlfleet-dev-gpu4", instance_types=TYPES,
                 current_instances=current, pending_instances=0, max_instances=4)


@pytest.mark.parametrize(("pinned", "placed"), [(None, True), (EAST, True), (WEST, False)])
def test_a_free_machine_elsewhere_does_not_take_a_job_whose_checkpoint_is_not_there(pinned, placed):
    result = plan([job(checkpoint_region=pinned)], [machine("a", EAST)], [], CATALOG, LIMITS)
    assert bool(result.placements) is placed


def test_a_pinned_job_buys_in_its_region_even_where_another_is_cheaper():
    assert CATALOG.get("g5.12xlarge").spot_price(OHIO) < CATALOG.get("g5.12xlarge").spot_price(WEST)
    free = plan([job()], [], [fleet(OHIO), fleet(WEST)], CATALOG, LIMITS)
    assert [s.region for s in free.scale_outs] == [OHIO]
    pinned = plan([job(checkpoint_region=WEST)], [], [fleet(OHIO), fleet(WEST)], CATALOG, LIMITS)
    assert [(s.region, s.for_jobs) for s in pinned.scale_outs] == [(WEST, ("j1",))]


def test_a_job_pinned_to_a_region_without_a_fleet_waits_with_the_reason():
    result = plan([job(checkpoint_region=EAST)], [machine("w", WEST)], [fleet(WEST)], CATALOG, LIMITS)
    assert result.placements == () and result.scale_outs == ()
    assert "no fleet can run it" in result.waiting[0][1]


def test_jobs_with_different_checkpoint_regions_are_never_grouped_as_one_kind():
    assert constraint_key(job(checkpoint_region=EAST)) != constraint_key(job(checkpoint_region=WEST))
    assert constraint_key(job()) != constraint_key(job(checkpoint_region=EAST))


REGIONS = (EAST, OHIO, WEST)
jobs_st = st.lists(st.builds(lambda n, g, pin: job(f"j{n}", gpus=g, checkpoint_region=pin),
                             st.integers(0, 10**6), st.integers(1, 4), st.sampled_from((None, *REGIONS))),
                   max_size=20, unique_by=lambda j: j.job_id)
machines_st = st.lists(st.builds(lambda n, r, g: machine(f"m{n}", r, g), st.integers(0, 10**6),
                                 st.sampled_from(REGIONS), st.integers(0, 4)), max_size=6, unique_by=lambda m: m.key)
fleets_st = st.lists(st.builds(lambda r, c: fleet(r, c), st.sampled_from(REGIONS), st.integers(0, 3)),
                     max_size=3, unique_by=lambda f: f.region)


@settings(max_examples=200, deadline=None)
@given(jobs_st, machines_st, fleets_st)
def test_every_placement_and_purchase_for_a_pinned_job_is_in_its_region(jobs, machines, fleets):
    result = plan(jobs, machines, fleets, CATALOG, LIMITS)
    pins = {j.job_id: j.checkpoint_region for j in jobs}
    regions = {m.key: m.region for m in machines}
    for placement in result.placements:
        assert pins[placement.job_id] in (None, regions[placement.machine_key])
    for scale_out in result.scale_outs:
        assert all(pins[j] in (None, scale_out.region) for j in scale_out.for_jobs)
    assert sorted([p.job_id for p in result.placements] + [w[0] for w in result.waiting]) == sorted(pins)


# --- where the region comes from -------------------------------------------------------------------

SPEC = JobSpec(image="ghcr.io/team/train:1", command=("train",), gpus=1, vcpus=1, memory_mib=1024, max_attempts=3)
PLACED = Placement(region=WEST, fleet="gpu4", cluster="mlfleet-dev", container_instance_arn="arn:ci",
                   instance_id="i-1", instance_type="g5.12xlarge", task_arn="arn:task")


def record(runs: int, placement: Placement | None) -> JobRecord:
    return JobRecord(job_id="sub-20261122120000-abcdef-00000", submission_id="sub-20261122120000-abcdef", index=0,
                     state=QUEUED, attempt=runs, runs=runs, start_failures=0, submitted_at=0.0, updated_at=0.0,
                     spec=SPEC, placement=placement)


@pytest.mark.parametrize(("runs", "placement", "fleet_regions", "expected"), [
    (0, None, (EAST, WEST), None),  # never claimed: anywhere
    (0, PLACED, (EAST, WEST), None),  # claimed, but StartTask failed: no task ever wrote a checkpoint
    (1, PLACED, (EAST, WEST), WEST),  # ran there: back there
    (2, PLACED, (EAST, WEST), WEST),
    (1, PLACED, (EAST,), None),  # the region left the stack, and its bucket with it: anywhere
], ids=["new", "start-failed", "ran-once", "ran-twice", "region-gone"])
def test_the_checkpoint_region_is_where_the_job_ran(runs, placement, fleet_regions, expected):
    assert checkpoint_region(record(runs, placement), fleet_regions) == expected
    assert job_request(record(runs, placement), fleet_regions).checkpoint_region == expected


def test_the_users_region_constraint_still_applies_beside_the_pin():
    request = job_request(replace(record(1, PLACED), spec=replace(SPEC, regions=(WEST, EAST))), (EAST, WEST))
    assert (request.regions, request.checkpoint_region) == ((WEST, EAST), WEST)
