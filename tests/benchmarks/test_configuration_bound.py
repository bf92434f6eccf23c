"""The configuration-LP bound on cases small enough to work out by hand."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.configuration_bound import configuration_bound
from lambdas.scheduler.planning import resource_prices


def test_a_job_cannot_borrow_vcpus_from_another_instance():
    # Two jobs of 1 GPU and 30 vCPUs; an instance has 2 GPUs and 40 vCPUs for $1/h. The aggregate LP
    # buys 1.5 instances (60 vCPUs); no packing puts both jobs on one instance, so the bound is $2.
    boxes = [((2, 40.0, 1000), 1.0)]
    jobs = [(1, 30.0, 10)] * 2
    assert configuration_bound(jobs, boxes).cost == pytest.approx(2.0)
    assert sum(p * d for p, d in zip(resource_prices(boxes, (2, 60.0, 20)), (2, 60.0, 20))) == pytest.approx(1.5)


def test_small_jobs_share_the_big_instance_when_it_is_cheaper():
    boxes = [((4, 48.0, 100_000), 3.0), ((1, 12.0, 25_000), 1.0)]
    assert configuration_bound([(1, 12.0, 25_000)] * 4, boxes).cost == pytest.approx(3.0)
    # A pattern holds no more jobs than there are: two jobs cannot buy "half a box of four".
    assert configuration_bound([(1, 12.0, 25_000)] * 2, boxes).cost == pytest.approx(2.0)


def test_shapes_nothing_holds_are_left_out():
    bound = configuration_bound({(16, 1.0, 1): 3, (1, 1.0, 1): 1}, [((8, 8.0, 8), 2.0)])
    assert bound.converged and bound.cost == pytest.approx(2.0)  # the one job still needs a whole box


@settings(max_examples=15, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 4), st.integers(1, 48), st.integers(1, 64)), min_size=1, max_size=12))
def test_never_below_the_aggregate_lp(jobs):
    boxes = [((1, 8.0, 32), 0.5), ((4, 48.0, 192), 1.3), ((8, 96.0, 384), 3.0)]
    demand = [sum(j[i] for j in jobs) for i in range(3)]
    aggregate = sum(p * d for p, d in zip(resource_prices(boxes, demand), demand))
    bound = configuration_bound([(g, float(v), m) for g, v, m in jobs], boxes)
    assert bound.converged and bound.cost >= aggregate - 1e-6
