"""Whether a reclaimed spot instance's group should replace it (planning/replacement.py): the group
replaces it only where that costs no more an hour than buying for its jobs one instance each."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lambdas.common.catalog import load_catalog
from lambdas.scheduler.planning import Fleet, JobRequest, keeps_replacement
from lambdas.scheduler.planning.constraints import Patterns
from lambdas.scheduler.planning.fleets import cheapest_alone, purchase_options

CATALOG = load_catalog()
REGION = "us-east-1"
SMALL = Fleet(REGION, "small", "mlfleet-dev-small", ("g4dn.xlarge",), 0, 0, 10)
BIG = Fleet(REGION, "big", "mlfleet-dev-big", ("g6.48xlarge",), 0, 0, 10)
FLEETS = (SMALL, BIG)


def price(instance_type: str) -> float:
    return CATALOG.get(instance_type).spot_price(REGION)


def job(job_id: str = "j", gpus: int = 1, vcpus: float = 2, memory_mib: int = 8192, **kw) -> JobRequest:
    return JobRequest(job_id, "sub-1", gpus, vcpus, memory_mib, **kw)


@pytest.mark.parametrize(("jobs", "kept"), [
    # The chain the rule breaks: an 8-GPU box replaced for the 1-GPU jobs that filled it after its
    # 8-GPU job ended. Two T4 boxes cost $0.41/h against $5.51/h.
    ([job("a"), job("b")], False),
    # What only the big box holds keeps its replacement: buying for it costs as much.
    ([job("a", gpus=8, vcpus=96, memory_mib=400_000)], True),
    # An instance that ran nothing (empty, or reclaimed while it booted): replacing it buys for no one.
    ([], False),
    # A job no fleet can run alone (asks more GPUs than any type has): nothing else would hold it.
    ([job("a", gpus=16)], True),
    # Tied to a GPU model only the big fleet has (L4): its price alone is the big box's.
    ([job("a", instance_type_pattern=r"g6\..*")], True),
], ids=["small-jobs-on-a-big-box", "a-job-only-the-box-holds", "ran-nothing", "no-fleet-holds-it",
        "only-the-box's-model"])
def test_the_replacement_is_kept_only_where_buying_alone_costs_as_much(jobs, kept):
    assert keeps_replacement(price("g6.48xlarge"), jobs, FLEETS, CATALOG) is kept


def test_an_equal_price_keeps_the_replacement():
    """Ties keep what the group does anyway: a decline must save something."""
    assert keeps_replacement(price("g4dn.xlarge"), [job()], FLEETS, CATALOG)
    assert not keeps_replacement(price("g4dn.xlarge") * 1.01, [job()], FLEETS, CATALOG)


def test_prices_given_replace_the_catalog():
    """The planner's live spot prices price both sides when the caller has them."""
    prices = {(REGION, "g4dn.xlarge"): 10.0, (REGION, "g6.48xlarge"): 5.0}
    assert keeps_replacement(5.0, [job()], FLEETS, CATALOG, prices)
    assert not keeps_replacement(5.0, [job()], FLEETS, CATALOG)


jobs_st = st.lists(st.builds(job, job_id=st.uuids().map(str), gpus=st.integers(0, 9),
                             vcpus=st.sampled_from([1, 4, 16, 64, 200]),
                             memory_mib=st.sampled_from([1024, 16_000, 200_000, 900_000])), max_size=6)


@settings(max_examples=60, deadline=None)
@given(jobs_st, st.floats(0.01, 20.0))
def test_keeps_exactly_when_alone_costs_at_least_the_replacement(jobs, replacement):
    """Against the sum computed here from each job's cheapest fleet alone; a job no fleet holds keeps."""
    options, patterns = purchase_options(FLEETS, CATALOG, None), Patterns()
    alone = [cheapest_alone(j, options, patterns) for j in jobs]
    expected = None in alone or replacement <= sum(alone) * (1 + 1e-9)
    assert keeps_replacement(replacement, jobs, FLEETS, CATALOG) is expected


@settings(max_examples=60, deadline=None)
@given(jobs_st, st.floats(0.01, 20.0), st.floats(0.01, 20.0))
def test_a_dearer_replacement_is_never_kept_where_a_cheaper_one_is_declined(jobs, a, b):
    low, high = sorted((a, b))
    if keeps_replacement(high, jobs, FLEETS, CATALOG):
        assert keeps_replacement(low, jobs, FLEETS, CATALOG)
