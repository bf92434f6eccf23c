"""The cheapest way to buy boxes for a set of jobs, near the optimum: column generation in pure Python.

The problem: jobs of a few kinds (a size, and the fleets able to run it), boxes of a few options (a
fleet's guaranteed capacity and its price). Which boxes to buy, and which jobs each holds, at least
cost? It is multi-dimensional bin packing with box choice, NP-hard; the classic way to solve it near
optimally is Gilmore and Gomory's: the linear program over *patterns* (an option and how many jobs of
each kind one box of it holds), grown one pattern at a time.

- Master LP: buy fractional amounts of the patterns found so far so that every kind is covered, at
  least cost. A revised simplex with an explicit basis inverse: the rows are kinds (tens, rarely
  hundreds), the entries small whole numbers, so a dense inverse is small and well conditioned.
- Pricing: for each option, the pattern whose jobs are worth most at the master's dual prices (a
  bounded knapsack over GPUs, vCPUs and memory, by depth-first branch and bound: GPUs are the tightest
  dimension, so a box holds at most eight jobs). A pattern worth more than its box's price enters, so
  the search only has to beat that price; kinds go in the order of the knapsack's LP relaxation, and
  its Lagrangian bounds prune (boxes whose GPUs and vCPUs run out together, as shared-GPU bundles on
  g4dn, left 20,000-node searches unfinished before).
- The master starts its pivots from the patterns added since its last solve (partial pricing), and
  prices every column before it calls a solution optimal.
- When no pattern enters (or the CPU budget is spent), the master's solution is rounded down: whole
  boxes of the patterns it buys. The caller covers the few jobs left over again, and packs what is
  still left greedily, filling the spare room of these boxes first (purchase.py).

On the shared Alibaba trace (87 kinds, 7,064 jobs) the planner's purchase with the rounded cover costs
0.1% above the LP optimum, against 1.3% for the greedy purchase alone (4.2% before it filled each new
box with the pricing's knapsack, `best_pattern`; docs/scheduler-benchmark.md).
scipy would do the LP faster, but the scheduler Lambda carries no compiled dependencies.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from operator import mul
from dataclasses import dataclass

Resources = tuple[int, float, int]  # GPUs, vCPUs, MiB
EPSILON = 1e-9
REFACTOR_EVERY = 100  # pivots between recomputing the basis inverse from scratch (bounds rounding drift)
# Branch-and-bound nodes per option and round. Rounds search shallowly while that finds patterns (the
# best is usually among the first nodes, since kinds go best first); only a round that finds nothing
# searches deep, since converging (no pattern prices out) needs the pricing to be exact or nearly.
QUICK_PRICING_NODES, DEEP_PRICING_NODES = 300, 20_000
SMOOTHING = 0.5  # weight of the stability center in the duals priced at (Wentges smoothing)
# Stop once the master is within this share of a proven lower bound (Farley's, from exhaustive pricing):
# column generation tails off, and the last fraction of a percent is lost again to rounding anyway.
GAP = 0.002
# Smooth only once the best proven bound is within this share of the master's cost: Wentges smoothing
# pulls the duals toward the bound's, which helps near the optimum and slows the generation when the
# bound is still far (0.5% dearer on the synthetic trace's 258 kinds at 5 s, docs/scheduler-benchmark.md).
SMOOTH_FROM = 0.9


@dataclass(frozen=True)
class Pattern:
    option: int
    counts: tuple[tuple[int, int], ...]  # (kind, jobs of the kind one box holds), kinds ascending


@dataclass(frozen=True)
class Cover:
    boxes: tuple[tuple[Pattern, int], ...]  # (pattern, whole boxes of it to buy)
    lp_cost: float  # the master's optimum over the patterns found
    converged: bool  # the LP optimum is within GAP of lp_cost: no packing costs less than lp_cost / (1 + GAP)
    rounds: int
    patterns: int
    bound: float = 0.0  # the best lower bound proven on the LP optimum (Farley's), 0 when none was


def gauss_jordan_pivot(rows: list[list[float]], pivot: int, column: int) -> None:
    """Scale row `pivot` so that its entry in `column` is 1, and clear `column` from every other row."""
    factor = rows[pivot][column]
    rows[pivot] = [v / factor for v in rows[pivot]]
    for r, row in enumerate(rows):
        if r != pivot and row[column]:
            f = row[column]
            rows[r] = [a - f * b for a, b in zip(row, rows[pivot])]


class _Master:
    """min cost.x  subject to  A x >= demand, x >= 0, by the revised simplex.

    Surplus variables turn the rows into equalities. The start basis is one singleton pattern per kind
    (that kind alone on a box), so the basis matrix starts as the identity and x_B = demand: feasible
    from the first pivot, no phase one.

    The basis inverse is kept sparse, column by column (row -> value): patterns hold a few kinds, so the
    inverse stays mostly zeros (measured 2% to 21% dense at 258 kinds), and a pivot touches only the
    columns whose entry in the leaving row is not zero. A dense inverse made each pivot cost rows
    squared and left a 250-kind master short of its CPU budget.
    """

    def __init__(self, demand: Sequence[int], singleton_costs: Sequence[float]):
        self.m = len(demand)
        self.demand = [float(d) for d in demand]
        self.columns: list[dict[int, float]] = []  # sparse: row -> coefficient
        self.rows: list[tuple[int, ...]] = []
        self.coefficients: list[tuple[float, ...]] = []
        self.costs: list[float] = []
        for row, cost in enumerate(singleton_costs):
            self.add({row: 1.0}, cost)
        self.basis = list(range(self.m))  # column per row; -1 - row for that row's surplus variable
        self.inverse = [{i: 1.0} for i in range(self.m)]  # column i of B^-1: row -> value
        self.values = list(self.demand)
        self.pivots = 0
        self.priced = 0  # columns priced by the last solve
        self._price()

    def add(self, column: dict[int, float], cost: float) -> None:
        self.columns.append(column)
        self.rows.append(tuple(column))  # the column again as two tuples, for the pricing loop's speed
        self.coefficients.append(tuple(column.values()))
        self.costs.append(cost)

    def _column(self, j: int) -> dict[int, float]:
        return self.columns[j] if j >= 0 else {-1 - j: -1.0}

    def _cost(self, j: int) -> float:
        return self.costs[j] if j >= 0 else 0.0

    def _price(self) -> None:
        """Duals y = c_B B^-1."""
        costs = [self._cost(j) for j in self.basis]
        self.duals = [sum(costs[r] * v for r, v in column.items()) for column in self.inverse]

    def _times(self, column: dict[int, float]) -> dict[int, float]:
        """B^-1 column, sparse."""
        result: dict[int, float] = {}
        for i, a in column.items():
            for r, v in self.inverse[i].items():
                result[r] = result.get(r, 0.0) + v * a
        return result

    def refactor(self) -> None:
        """Invert the basis matrix from scratch (sparse Gauss-Jordan, partial pivoting) and recompute
        x_B and the duals, free of the rounding the pivots accumulated."""
        m = self.m
        # Rows of [B | I]: B's entries at 0..m-1, the identity's at m..2m-1.
        rows: list[dict[int, float]] = [{m + i: 1.0} for i in range(m)]
        for position, j in enumerate(self.basis):
            for row, value in self._column(j).items():
                rows[row][position] = value
        for col in range(m):
            pivot = max(range(col, m), key=lambda r: abs(rows[r].get(col, 0.0)))
            rows[col], rows[pivot] = rows[pivot], rows[col]
            factor = rows[col][col]
            pivot_row = {k: v / factor for k, v in rows[col].items()}
            rows[col] = pivot_row
            for r in range(m):
                f = rows[r].get(col) if r != col else None
                if f:
                    row = rows[r]
                    for k, v in pivot_row.items():
                        value = row.get(k, 0.0) - f * v
                        if abs(value) > 1e-13:
                            row[k] = value
                        else:
                            row.pop(k, None)
        self.inverse = [{} for _ in range(m)]
        for r, row in enumerate(rows):
            for k, v in row.items():
                if k >= m:
                    self.inverse[k - m][r] = v
        self.values = [0.0] * m
        for i, column in enumerate(self.inverse):
            for r, v in column.items():
                self.values[r] += v * self.demand[i]
        self.values = [max(0.0, v) for v in self.values]
        self._price()

    def solve(self, deadline: float) -> bool:
        """Pivot to optimality over the columns so far; False when the deadline came first."""
        m = self.m
        fresh = self.priced  # columns added since the last solve: the likeliest to enter
        self.priced = len(self.columns)
        while True:
            y = self.duals
            entering, best = None, -EPSILON * 10
            # Partial pricing: the fresh columns first; the whole set (and the surplus variables) only
            # when none of them enters, so the optimum is still proven over every column.
            costs, rows, coefficients = self.costs, self.rows, self.coefficients
            dual = y.__getitem__
            for start in ((fresh, 0) if fresh else (0,)):
                for j in range(start, len(costs)):
                    reduced = costs[j] - sum(map(mul, map(dual, rows[j]), coefficients[j]))
                    if reduced < best:
                        entering, best = j, reduced
                if entering is not None:
                    break
            if entering is None:
                for row in range(m):  # a surplus variable prices out when its dual is negative
                    if y[row] < best:
                        entering, best = -1 - row, y[row]
            if entering is None:
                return True
            if time.process_time() > deadline:
                return False
            direction = self._times(self._column(entering))
            leaving, ratio = None, None
            for r in sorted(direction):
                if direction[r] > EPSILON:
                    candidate = self.values[r] / direction[r]
                    # Ties (degenerate pivots are the rule here) go to the larger pivot element, for stability.
                    if ratio is None or candidate < ratio - 1e-12 or (
                            candidate <= ratio + 1e-12 and direction[r] > direction[leaving]):
                        leaving, ratio = r, candidate
            if leaving is None:
                raise ArithmeticError("master LP unbounded: a pattern with no jobs cannot have negative cost")
            factor = direction[leaving]
            pivot_row = {}  # the leaving row of the new inverse, for the duals' update
            others = [(r, f) for r, f in direction.items() if r != leaving]
            for i, column in enumerate(self.inverse):
                v = column.get(leaving)
                if not v:
                    continue
                v /= factor
                column[leaving] = v
                pivot_row[i] = v
                get = column.get
                for r, f in others:
                    value = get(r, 0.0) - f * v
                    if value > 1e-13 or value < -1e-13:
                        column[r] = value
                    else:
                        column.pop(r, None)
            step = self.values[leaving] / factor
            for r, f in direction.items():
                if r != leaving:
                    self.values[r] = max(0.0, self.values[r] - f * step)
            self.values[leaving] = step
            self.basis[leaving] = entering
            self.pivots += 1
            if self.pivots % REFACTOR_EVERY == 0:
                self.refactor()
            else:
                duals = list(y)
                for i, v in pivot_row.items():
                    duals[i] += best * v
                self.duals = duals

    def solution(self) -> dict[int, float]:
        return {j: v for j, v in zip(self.basis, self.values) if j >= 0 and v > EPSILON}

    def cost(self) -> float:
        return sum(self.costs[j] * v for j, v in self.solution().items())


def best_pattern(capacity: tuple[int, int, int], kinds: Sequence[int], needs: Sequence[tuple[int, int, int]],
                 demand: Sequence[int], duals: Sequence[float], node_limit: int, floor: float = 0.0
                 ) -> tuple[float, dict[int, int], bool]:
    """The jobs one box of `capacity` holds that are worth most at `duals`: depth-first branch and bound
    over whole units (GPUs, milli-vCPUs, MiB), so that every division is exact.

    `floor`: only patterns worth more count (the box's price, in pricing); when none is, the answer is
    the floor and no jobs. Kinds go in order of value per unit of their size at the prices of the
    knapsack's LP relaxation (`_relaxation_prices`: per GPU alone when only GPUs run out), so good
    patterns come first. The bound at a node is the least of: what is left of one resource (or of their
    capacity-normalised sum) times the best value per unit of it among the kinds still to decide; and
    two Lagrangian bounds at those prices (the left resources' worth plus each kind's surplus over its
    price, times the most of it; or, GPUs unpriced, the left GPUs times the best surplus per GPU). The
    flag says whether the search was exhaustive (the pattern is the best there is, or nothing beats the
    floor) or stopped at `node_limit` (the best found).
    """
    big_g, big_c, big_m = capacity
    items = []
    per_g = per_c = per_m = 0.0  # the best value per unit of each resource, for a bound at the root
    for k in kinds:
        value = duals[k]
        if value > EPSILON:
            g, c, m = needs[k]
            most = demand[k]
            if g:
                most = min(most, big_g // g)
            if c:
                most = min(most, big_c // c)
            if m:
                most = min(most, big_m // m)
            if most:
                items.append((k, g, c, m, value, most))
                per_g = max(per_g, value / g if g else float("inf"))
                per_c = max(per_c, value / c if c else float("inf"))
                per_m = max(per_m, value / m if m else float("inf"))
    if min(big_g * per_g, big_c * per_c, big_m * per_m) <= floor + EPSILON:
        return floor, {}, True  # one resource alone says nothing beats the floor
    p_g, p_c, p_m = _relaxation_prices(items, capacity)
    items.sort(key=lambda item: -item[4] / max(EPSILON, p_g * item[1] + p_c * item[2] + p_m * item[3]))
    n = len(items)
    # Single-resource bounds: for weights w >= 0 over the resources, a box's value is at most (w . free)
    # times the best value per unit of w . need among the kinds still to decide.
    weights = [(1.0, 0.0, 0.0), (0.0, 1.0, 0.0), (0.0, 0.0, 1.0),
               tuple(1.0 / c if c else 0.0 for c in capacity)]
    suffixes = []
    for w in weights:
        suffix = [0.0] * (n + 1)
        for i in range(n - 1, -1, -1):
            _, g, c, m, value, _ = items[i]
            size = w[0] * g + w[1] * c + w[2] * m
            suffix[i] = max(suffix[i + 1], value / size if size > 0 else float("inf"))
        suffixes.append(suffix)
    s_g, s_c, s_m, s_all = suffixes
    w_g, w_c, w_m = weights[3]
    surplus, per_gpu = [0.0] * (n + 1), [0.0] * (n + 1)
    for i in range(n - 1, -1, -1):
        _, g, c, m, value, most = items[i]
        rest = value - p_c * c - p_m * m
        surplus[i] = surplus[i + 1] + most * max(0.0, rest - p_g * g)
        per_gpu[i] = max(per_gpu[i + 1], rest / g if g else (float("inf") if rest > 0 else 0.0))
    if min(p_g * big_g + surplus[0], big_g * per_gpu[0]) + p_c * big_c + p_m * big_m <= floor + EPSILON:
        return floor, {}, True  # nothing beats the floor: no search

    best = [floor, {}]
    counts: dict[int, int] = {}
    nodes = [0]

    def search(i: int, free_g: int, free_c: int, free_m: int, value: float) -> None:
        if value > best[0] + EPSILON:
            best[0], best[1] = value, dict(counts)
        room = best[0] + EPSILON - value
        while i < n:
            if nodes[0] >= node_limit:
                return
            if free_g * s_g[i] <= room or free_c * s_c[i] <= room or free_m * s_m[i] <= room or \
                    (free_g * w_g + free_c * w_c + free_m * w_m) * s_all[i] <= room or \
                    p_c * free_c + p_m * free_m + min(p_g * free_g + surplus[i], free_g * per_gpu[i]) <= room:
                return
            k, g, c, m, worth, most = items[i]
            take = most
            if g and free_g // g < take:
                take = free_g // g
            if c and free_c // c < take:
                take = free_c // c
            if m and free_m // m < take:
                take = free_m // m
            if take:
                break
            i += 1  # does not fit: nothing to branch on
        else:
            return
        nodes[0] += 1
        for count in range(take, 0, -1):
            counts[k] = count
            search(i + 1, free_g - count * g, free_c - count * c, free_m - count * m, value + count * worth)
        del counts[k]
        search(i + 1, free_g, free_c, free_m, value)

    search(0, *capacity, 0.0)
    return best[0], best[1], nodes[0] < node_limit


def _relaxation_prices(items, capacity: tuple[int, int, int], sweeps: int = 3) -> list[float]:
    """Prices per unit of GPUs, vCPUs and memory near the minimum of the dual of the knapsack's LP
    relaxation, p . capacity + sum over kinds of most * max(0, value - p . need): exact line search on one
    price at a time (the dual is convex and piecewise linear along each), a few sweeps."""
    prices = [0.0, 0.0, 0.0]
    reduced = [item[4] for item in items]  # value - prices . need
    for _ in range(sweeps):
        for r in range(3):
            old, slope, breaks = prices[r], float(capacity[r]), []
            for item, left in zip(items, reduced):
                need = item[1 + r]
                if need and left + old * need > 0:
                    slope -= item[5] * need
                    breaks.append(((left + old * need) / need, item[5] * need))
            price = 0.0
            if slope < 0:
                breaks.sort()
                for price, gain in breaks:
                    slope += gain
                    if slope >= 0:
                        break
            if price != old:
                prices[r] = price
                reduced = [left - (price - old) * item[1 + r] for item, left in zip(items, reduced)]
    return prices


def whole_units(resources: Sequence[float], round_up: bool) -> tuple[int, int, int]:
    """GPUs, milli-vCPUs, MiB as integers: needs rounded up, capacities down, so whole-unit fits are fits."""
    milli = resources[1] * 1000
    vcpus = int(milli) + (1 if round_up and milli - int(milli) > 1e-6 else 0)
    return int(resources[0]), vcpus, int(resources[2])


def _dominated(option: int, options: Sequence[int], boxes, per_option) -> bool:
    """Another option holds at least as much of everything, for no more, for at least the same kinds:
    any pattern of this one is a pattern of that one, as cheap or cheaper."""
    capacity, price = boxes[option]
    kinds = set(per_option[option])
    for other in options:
        if other == option:
            continue
        other_capacity, other_price = boxes[other]
        if all(a >= b for a, b in zip(other_capacity, capacity)) and other_price <= price and \
                kinds <= set(per_option[other]) and (other_price, other_capacity, other) < (price, capacity, option):
            return True
    return False


def cheapest_cover(needs: Sequence[Resources], demand: Sequence[int], eligible: Sequence[Sequence[int]],
                   boxes: Sequence[tuple[Resources, float]], *, cpu_seconds: float, max_rounds: int = 500,
                   start: Sequence[Pattern] = ()) -> Cover:
    """Boxes to buy for `demand[k]` jobs of size `needs[k]`, each kind on the options `eligible[k]`
    (indices into `boxes`, each a capacity and a price; every eligible option holds the kind alone).

    `start`: patterns known to be good (a heuristic packing's boxes) to begin the master with: it then
    starts at that packing's cost instead of one box per job, and pricing only closes the gap.

    Returns whole boxes of patterns (the LP solution rounded down, holding no more jobs of a kind than
    there are), the LP's cost, and whether it converged within `cpu_seconds`.
    """
    deadline = time.process_time() + cpu_seconds
    kinds = [k for k in range(len(needs)) if demand[k] > 0 and eligible[k]]
    if not kinds:
        return Cover((), 0.0, True, 0, 0)
    rows = {k: r for r, k in enumerate(kinds)}
    # The start columns: each kind alone on its cheapest box.
    patterns = [Pattern(min(eligible[k], key=lambda o: (boxes[o][1], o)), ((k, 1),)) for k in kinds]
    master = _Master([demand[k] for k in kinds], [boxes[p.option][1] for p in patterns])
    seen = {(p.option, p.counts) for p in patterns}
    for pattern in start:
        if (pattern.option, pattern.counts) not in seen and pattern.counts and all(
                k in rows and pattern.option in eligible[k] for k, _ in pattern.counts):
            seen.add((pattern.option, pattern.counts))
            patterns.append(pattern)
            master.add({rows[k]: float(c) for k, c in pattern.counts}, boxes[pattern.option][1])
    per_option: dict[int, list[int]] = {}
    for k in kinds:
        for option in eligible[k]:
            per_option.setdefault(option, []).append(k)

    converged, rounds = False, 0
    candidates = [o for o in sorted(per_option) if not _dominated(o, list(per_option), boxes, per_option)]
    units = [whole_units(need, True) for need in needs]
    capacities = {option: whole_units(boxes[option][0], False) for option in candidates}
    node_limit = QUICK_PRICING_NODES
    center: list[float] | None = None  # the duals of the best lower bound so far (the stability center)
    bound = 0.0
    settled: dict[tuple[float, int], float] = {}  # (smoothing, option) -> its best pattern's value, proven
    while rounds < max_rounds:
        rounds += 1
        if not master.solve(deadline):
            break
        duals = [0.0] * len(needs)
        for k, r in rows.items():
            duals[k] = master.duals[r]
        deep = node_limit == DEEP_PRICING_NODES
        if not deep:
            settled = {}  # the master changed: the duals are new
        # Price at duals smoothed toward the center first (Wentges): fewer rounds than pricing at the
        # master's duals, which swing from round to round. A pattern enters only if it prices out at
        # the master's own duals; when none does, price again at those (no smoothing). A deep round
        # follows a quick one that found nothing, at the same points: it searches only the options whose
        # quick search was cut short, and only until one pattern enters (back to quick rounds, at the
        # duals that pattern makes, rather than deep searches of every option at stale ones).
        smooth = center is not None and bound >= SMOOTH_FROM * master.cost()
        for alpha in ((SMOOTHING, 0.0) if smooth else (0.0,)):
            point = duals if alpha == 0 else [alpha * c + (1 - alpha) * d for c, d in zip(center, duals)]
            added, exact, ratio = 0, True, 0.0
            for option in candidates:
                if time.process_time() > deadline:
                    exact = False
                    break
                price = boxes[option][1]
                if (alpha, option) in settled:
                    ratio = max(ratio, settled[alpha, option] / price)
                    continue
                # Patterns worth no more than their box cannot enter: the search needs to beat only that.
                value, counts, exhaustive = best_pattern(capacities[option], per_option[option], units, demand,
                                                         point, node_limit, floor=price)
                if exhaustive:
                    settled[alpha, option] = value
                exact = exact and exhaustive
                ratio = max(ratio, value / price)
                key = (option, tuple(sorted(counts.items())))
                if sum(duals[k] * c for k, c in counts.items()) > price * (1 + 1e-9) + EPSILON and key not in seen:
                    seen.add(key)
                    patterns.append(Pattern(*key))
                    master.add({rows[k]: float(c) for k, c in counts.items()}, price)
                    added += 1
                    if deep:
                        exact = False  # the options after this one go unpriced
                        break
            if exact:  # Farley's bound: the point scaled by its worst pattern ratio is dual feasible
                candidate = sum(point[k] * demand[k] for k in kinds) / max(1.0, ratio)
                if candidate > bound:
                    bound, center = candidate, point
                    settled = {key: value for key, value in settled.items() if key[0] == 0}  # new center
            if added:
                break
        if not added:
            if node_limit < DEEP_PRICING_NODES:
                node_limit = DEEP_PRICING_NODES
                continue
            # Converged: nothing prices out, and the search that says so was exhaustive, in time.
            converged = exact and time.process_time() <= deadline
            break
        if bound and master.cost() <= bound * (1 + GAP):
            converged = True  # within GAP of a proven lower bound: further rounds cannot gain more
            break
        node_limit = QUICK_PRICING_NODES
    master.refactor()  # x_B free of accumulated rounding before it is rounded down
    return Cover(_whole_boxes(master.solution(), patterns, demand), round(master.cost(), 6), converged, rounds,
                 len(patterns), round(bound, 6))


def _whole_boxes(solution: dict[int, float], patterns: Sequence[Pattern], demand: Sequence[int]):
    """The LP's patterns rounded down to whole boxes. The LP covers (a kind may be over-covered), so each
    box takes only jobs still left: no kind is bought for more jobs than there are, no box bought empty."""
    left = list(demand)
    boxes: dict[Pattern, int] = {}
    for j, amount in sorted(solution.items()):
        pattern = patterns[j]
        for _ in range(int(amount + 1e-7)):
            counts = tuple((k, min(n, left[k])) for k, n in pattern.counts if min(n, left[k]) > 0)
            if not counts:
                break
            for k, n in counts:
                left[k] -= n
            trimmed = Pattern(pattern.option, counts)
            boxes[trimmed] = boxes.get(trimmed, 0) + 1
    return tuple(boxes.items())
