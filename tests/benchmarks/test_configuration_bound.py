"""The configuration-LP bound on cases small enough to work out by hand."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import benchmarks.configuration_bound as configuration_bound_module
from benchmarks.configuration_bound import _dominated, configuration_bound
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


def test_a_dominated_box_is_not_priced_but_one_a_kind_needs_is():
    # b0 is b1 with less of everything at a higher price: every pattern of b0 is b1's for less.
    boxes = [((1, 8.0, 32), 2.0), ((2, 16.0, 64), 1.5), ((1, 8.0, 32), 2.0), ((4, 48.0, 192), 0.5)]
    kinds = [(1, 4.0, 16)]
    everywhere = lambda kind, b: True  # noqa: E731
    assert _dominated(0, boxes, kinds, everywhere, lambda b: 0)
    assert _dominated(2, boxes, kinds, everywhere, lambda b: 0)
    assert not _dominated(3, boxes, kinds, everywhere, lambda b: 0)  # the cheapest and the biggest
    # Equal boxes dominate each other only as one: the first is priced.
    equal = [((1, 8.0, 32), 1.0), ((1, 8.0, 32), 1.0)]
    assert not _dominated(0, equal, kinds, everywhere, lambda b: 0) and _dominated(1, equal, kinds, everywhere, lambda b: 0)
    # A kind tied to b0 (a GPU model only it has) keeps it priced.
    assert not _dominated(0, boxes, kinds, lambda kind, b: b == 0, lambda b: 0)
    # So does more memory on each GPU, for jobs that share GPUs.
    assert not _dominated(0, boxes, kinds, everywhere, lambda b: 24_000 if b == 0 else 16_000)
    assert _dominated(0, boxes, kinds, everywhere, lambda b: 16_000 if b == 0 else 24_000)


boxes_strategy = st.lists(st.tuples(st.sampled_from([(1, 8.0, 32), (1, 16.0, 64), (2, 16.0, 64), (4, 48.0, 192)]),
                                    st.sampled_from([0.5, 1.0, 1.3, 2.0, 3.0]), st.sampled_from([0, 16_000, 24_000])),
                          min_size=1, max_size=5)


@settings(max_examples=40, deadline=None)
@given(boxes_strategy, st.lists(st.tuples(st.integers(0, 2), st.integers(1, 16), st.integers(1, 64),
                                          st.sampled_from([0, 0, 6_000, 12_000, 20_000]), st.integers(0, 4)),
                                min_size=1, max_size=8))
# Two jobs of 12,000 MiB fit one GPU of 24,000, not one of 16,000: the first box is not the second's to drop.
@example([((1, 8.0, 32), 1.0, 24_000), ((1, 8.0, 32), 1.0, 16_000)], [(0, 1, 1, 12_000, 0)] * 2)
def test_leaving_dominated_boxes_out_changes_no_bound(boxes, jobs):
    """Whole-GPU and GPU-sharing kinds, some tied to one box (`tied`: the box's number, from 1): the bound is
    the same with every box priced."""
    kinds = [((0 if memory else gpus, float(vcpus), mib), memory, tied) for gpus, vcpus, mib, memory, tied in jobs]
    arguments = dict(shape_of=lambda kind: kind[0], gpu_memory_of=lambda kind: kind[1],
                     eligible={kind: {b for b in range(len(boxes)) if kind[2] in (0, b + 1)} for kind in kinds},
                     box_gpu_memory=[memory for _, _, memory in boxes])
    priced_boxes = [(capacity, price) for capacity, price, _ in boxes]
    pruned = configuration_bound(kinds, priced_boxes, **arguments)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(configuration_bound_module, "_dominated", lambda *args: False)
        every = configuration_bound(kinds, priced_boxes, **arguments)
    assert pruned.converged and every.converged
    assert pruned.cost == pytest.approx(every.cost, rel=1e-9, abs=1e-9)
