"""Adopting an empty machine (lambdas/scheduler/planning/adoption.py): jobs of unknown runtime do not take
an empty or launching machine far dearer than buying for them; together, or reserved, they do; and the
machine they leave is given back."""

from __future__ import annotations

import pytest

from lambdas.common.catalog import load_catalog
from lambdas.scheduler.planning import Fleet, JobRequest, Limits, Machine, ReleasePolicy, Reservation, plan
from lambdas.scheduler.planning.packer import DECLINE_FACTOR

CATALOG = load_catalog()
NOW = 1_000_000.0
LIMITS = Limits(max_hourly_usd=10_000.0, current_hourly_usd=0.0)
SMALL, BIG = "g5.xlarge", "g5.48xlarge"  # 1 GPU at $0.436/h spot, 8 GPUs at $5.87/h (the catalog's us-east-1)


def price(instance_type: str) -> float:
    return CATALOG.get(instance_type).spot_price("us-east-1")


def job(job_id: str, gpus: int = 1, vcpus: float = 4, memory_mib: int = 8_000, **kw) -> JobRequest:
    return JobRequest(job_id, job_id, gpus, vcpus, memory_mib, **kw)


def empty_machine(key: str = "big", instance_type: str = BIG) -> Machine:
    spec = CATALOG.get(instance_type)
    return Machine(key, f"i-{key}", "us-east-1", instance_type, instance_type, "us-east-1a", "spot", spec.gpus,
                   spec.vcpus, spec.schedulable_memory_mib, price(instance_type), launched_at=NOW - 3600,
                   empty_since=NOW - 600)


def fleet(instance_type: str, current: int = 0, pending: int = 0) -> Fleet:
    return Fleet("us-east-1", instance_type, f"asg-{instance_type}", (instance_type,), current, pending, 100)


def placed(result) -> dict[str, str]:
    return {p.job_id: p.machine_key for p in result.placements}


def bought(result) -> list[tuple[str, int]]:
    return [(s.fleet, s.add_instances) for s in result.scale_outs]


def test_the_catalog_makes_the_big_type_far_dearer_than_the_small_one():
    assert price(BIG) > DECLINE_FACTOR * 4 * price(SMALL)  # the cases below rely on it
    assert price(BIG) < DECLINE_FACTOR * 8 * price(SMALL)


def test_an_empty_dear_machine_is_not_adopted_by_one_small_job_and_is_given_back():
    result = plan([job("one")], [empty_machine()], [fleet(SMALL), fleet(BIG, current=1)], CATALOG, LIMITS, now=NOW,
                  release=ReleasePolicy(after_empty_s=180))
    assert placed(result) == {} and bought(result) == [(SMALL, 1)]
    assert [c.instance_id for c in result.releases] == ["i-big"]


def test_enough_jobs_together_adopt_it():
    # Eight one-GPU jobs would cost 8 x $0.436 bought alone: the 8-GPU machine is within twice that.
    result = plan([job(f"j{i}") for i in range(8)], [empty_machine()], [fleet(SMALL), fleet(BIG, current=1)],
                  CATALOG, LIMITS, now=NOW, release=ReleasePolicy(after_empty_s=180))
    assert set(placed(result).values()) == {"big"} and len(placed(result)) == 8 and result.releases == ()


def test_a_job_only_the_dear_type_holds_adopts_it():
    result = plan([job("eight", gpus=8, vcpus=150, memory_mib=600_000)], [empty_machine()],
                  [fleet(SMALL), fleet(BIG, current=1)], CATALOG, LIMITS, now=NOW)
    assert placed(result) == {"eight": "big"}


def test_a_busy_machine_is_filled_whatever_its_price():
    busy = empty_machine()
    busy = Machine(**{**vars(busy), "free_gpus": 7, "submissions": frozenset({"other"}), "empty_since": None})
    assert placed(plan([job("one")], [busy], [fleet(SMALL), fleet(BIG, current=1)], CATALOG, LIMITS, now=NOW)) == \
        {"one": "big"}


def test_reserved_jobs_take_the_machine_bought_for_them():
    reservation = Reservation("us-east-1", BIG, "run-1:0")
    result = plan([job("one", reserved=reservation)], [empty_machine()], [fleet(SMALL), fleet(BIG, current=1)],
                  CATALOG, LIMITS, now=NOW)
    assert placed(result) == {"one": "big"}


@pytest.mark.parametrize("jobs, held", [(1, False), (8, True)], ids=["one-job", "eight-jobs"])
def test_jobs_wait_for_a_launching_dear_instance_only_when_it_is_worth_it(jobs, held):
    """A group replacing a reclaimed 8-GPU instance: one small job buys its own; eight wait for it."""
    result = plan([job(f"j{i}") for i in range(jobs)], [], [fleet(SMALL), fleet(BIG, pending=1)], CATALOG, LIMITS,
                  now=NOW)
    waiting_for_it = [j for j, reason in result.waiting if "already launching" in reason]
    assert (len(waiting_for_it) == jobs) is held
    assert bought(result) == ([] if held else [(SMALL, 1)])


def test_without_a_cheaper_fleet_the_job_takes_what_there_is():
    result = plan([job("one")], [empty_machine()], [fleet(BIG, current=1)], CATALOG, LIMITS, now=NOW)
    assert placed(result) == {"one": "big"}
