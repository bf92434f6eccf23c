"""Column generation for what to buy: the pure-Python LP and pricing against scipy and brute force."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from benchmarks.configuration_bound import configuration_bound
from lambdas.scheduler.planning.columns import GAP, Pattern, best_pattern, _relaxation_prices, cheapest_cover

BOXES = [((1, 8.0, 32_000), 0.5), ((4, 48.0, 190_000), 1.3), ((8, 96.0, 380_000), 3.0), ((1, 4.0, 15_000), 0.21)]


def _fits(capacity, need):
    return all(c >= n for c, n in zip(capacity, need))


def _cover(jobs: dict, boxes=BOXES, **kw):
    needs = list(jobs)
    eligible = [[b for b, (capacity, _) in enumerate(boxes) if _fits(capacity, n)] for n in needs]
    return needs, cheapest_cover(needs, [jobs[n] for n in needs], eligible, boxes, **{"cpu_seconds": 30, **kw})


def test_four_small_jobs_share_the_four_gpu_box():
    boxes = [((4, 48.0, 100_000), 3.0), ((1, 12.0, 25_000), 1.0)]
    needs, cover = _cover({(1, 12.0, 25_000): 4}, boxes)
    assert cover.converged and cover.lp_cost == pytest.approx(3.0)
    assert [(p.option, p.counts, n) for p, n in cover.boxes] == [(0, ((0, 4),), 1)]


def test_two_jobs_do_not_buy_half_a_box_of_four():
    boxes = [((4, 48.0, 100_000), 3.0), ((1, 12.0, 25_000), 1.0)]
    _, cover = _cover({(1, 12.0, 25_000): 2}, boxes)
    assert cover.lp_cost == pytest.approx(2.0)
    assert [(p.option, n) for p, n in cover.boxes] == [(1, 2)]


shapes_st = st.dictionaries(
    st.tuples(st.integers(1, 4), st.integers(1, 48).map(float), st.integers(1000, 190_000)),
    st.integers(1, 30), min_size=1, max_size=8)


@settings(max_examples=25, deadline=None)
@given(shapes_st)
def test_the_lp_optimum_equals_scipy_column_generation(jobs):
    """Same LP, solved by scipy (HiGHS) with an exact integer knapsack: the pure-Python master and
    branch-and-bound pricing converge to the same optimum, or stop within GAP of it (proven by a bound)."""
    _, cover = _cover(jobs)
    reference = configuration_bound(dict(jobs), BOXES)
    assert cover.converged and reference.converged
    assert reference.cost - 1e-4 <= cover.lp_cost <= reference.cost * (1 + GAP) + 1e-4  # the reference rounds


@settings(max_examples=40, deadline=None)
@given(shapes_st, st.sampled_from([0.0, 30.0]))
def test_rounded_boxes_fit_and_hold_no_job_twice(jobs, budget):
    """Whole boxes only, each holding what fits on it, no more jobs of a kind than there are, on
    options eligible for them; a zero CPU budget still returns a valid (unconverged) cover."""
    needs, cover = _cover(jobs, cpu_seconds=budget)
    taken = [0] * len(needs)
    for pattern, count in cover.boxes:
        assert count >= 1
        capacity, _ = BOXES[pattern.option]
        used = [sum(needs[k][d] * n for k, n in pattern.counts) for d in range(3)]
        assert _fits(capacity, used)
        for k, n in pattern.counts:
            taken[k] += n * count
    assert all(t <= jobs[n] for t, n in zip(taken, needs))
    assert cover.lp_cost <= sum(min(p for c, p in BOXES if _fits(c, n)) * jobs[n] for n in needs) + 1e-6


items_st = st.lists(st.tuples(st.integers(0, 3), st.integers(1, 40_000), st.integers(1, 100_000),
                              st.floats(0.0, 5.0), st.integers(1, 4)), min_size=1, max_size=5)
capacity_st = st.tuples(st.integers(0, 8), st.integers(1, 96_000), st.integers(1, 400_000))


def _brute_force_best(items, capacity) -> float:
    best = 0.0
    for combination in itertools.product(*(range(i[4] + 1) for i in items)):
        if _fits(capacity, [sum(i[d] * c for i, c in zip(items, combination)) for d in range(3)]):
            best = max(best, sum(i[3] * c for i, c in zip(items, combination)))
    return best


@settings(max_examples=80, deadline=None)
@given(items_st, capacity_st, st.sampled_from([0.0, 0.5, 1.0, 3.0]))
# A pattern worth a hair (6e-8) above a zero floor: within the test's tolerance, yet it may enter.
@example(items=[(0, 1, 1, 0.0, 1), (0, 1, 1, 0.0, 1), (0, 1, 1, 5.960464477539063e-08, 1)],
         capacity=(0, 1, 1), floor_share=0.0)
def test_pricing_finds_the_most_valuable_pattern(items, capacity, floor_share):
    """Branch and bound against trying every combination of counts. With a floor (the box's price: a
    pattern worth no more cannot enter the master), it returns the best pattern when that beats the
    floor, and the floor with no jobs when nothing does."""
    needs = [i[:3] for i in items]
    duals = [i[3] for i in items]
    demand = [i[4] for i in items]
    best = _brute_force_best(items, capacity)
    floor = floor_share * best
    value, counts, exhaustive = best_pattern(capacity, range(len(items)), needs, demand, duals, 20_000, floor)
    assert exhaustive
    assert value == pytest.approx(max(best, floor), abs=1e-6)  # duals within EPSILON of zero are worth nothing
    if counts:  # a pattern returned is real, fits and beats the floor
        assert value == pytest.approx(sum(duals[k] * c for k, c in counts.items()), abs=1e-9)
        assert _fits(capacity, [sum(needs[k][d] * c for k, c in counts.items()) for d in range(3)])
        assert value > floor
    else:
        assert value == floor and best <= floor + 1e-6


@settings(max_examples=80, deadline=None)
@given(items_st, capacity_st)
def test_relaxation_prices_bound_every_pattern(items, capacity):
    """Weak duality, which the search's pruning rests on: at the prices returned (never negative), the
    capacity's worth plus each kind's surplus over its price, times the most of it that fit, is at least
    the best pattern's value."""
    rows = []
    for k, (g, c, m, value, demand) in enumerate(items):
        most = min([demand] + [have // need for have, need in zip(capacity, (g, c, m)) if need])
        if value > 0 and most:
            rows.append((k, g, c, m, value, most))
    prices = _relaxation_prices(rows, capacity)
    assert all(p >= 0 for p in prices)
    bound = sum(p * have for p, have in zip(prices, capacity)) + sum(
        most * max(0.0, value - sum(p * need for p, need in zip(prices, (g, c, m))))
        for _, g, c, m, value, most in rows)
    assert bound >= _brute_force_best(items, capacity) - 1e-6


def test_a_good_start_is_kept_and_never_makes_the_lp_worse():
    # Eight small jobs; the start pattern packs four on the big box, which is the optimum.
    boxes = [((4, 48.0, 100_000), 3.0), ((1, 12.0, 25_000), 1.0)]
    needs = [(1, 12.0, 25_000)]
    plain = cheapest_cover(needs, [8], [[0, 1]], boxes, cpu_seconds=30)
    started = cheapest_cover(needs, [8], [[0, 1]], boxes, cpu_seconds=30, start=[Pattern(0, ((0, 4),))])
    assert started.converged and started.lp_cost == pytest.approx(plain.lp_cost) == pytest.approx(6.0)
    # A start pattern of an option the kind may not use is ignored, not trusted.
    ignored = cheapest_cover(needs, [8], [[1]], boxes, cpu_seconds=30, start=[Pattern(0, ((0, 4),))])
    assert ignored.lp_cost == pytest.approx(8.0)
