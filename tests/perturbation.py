"""Events built from a valid one by perturbing it at any depth, for the handlers' property tests
(tests/jobs/test_event_properties.py, tests/billing/test_budget_guard_properties.py), and the decision lines
a handler logs while one runs."""

from __future__ import annotations

import copy
import json
import logging
import os

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

# EVENT_EXAMPLES=N runs N examples of each property (the local search); unset, each runs its own few.
EXAMPLES = int(os.environ.get("EVENT_EXAMPLES", "0"))


def budget(ci: int) -> settings:
    return settings(max_examples=EXAMPLES or ci, deadline=None, **({"database": None} if EXAMPLES else {}),
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                           HealthCheck.data_too_large])


def any_json(*special) -> st.SearchStrategy:
    """Any JSON: None, booleans, numbers past what DynamoDB stores, short, unusual and huge text, `special`
    values, in lists and objects."""
    leaves = st.one_of(
        st.none(), st.booleans(), st.integers(), st.integers(-2**70, 2**70), st.floats(allow_nan=False),
        st.text(max_size=20), st.just(""), st.sampled_from(special or ("",)),
        st.text(alphabet=" ab\t\n\u00e9\u0000\U0001f600:", max_size=3).map(lambda s: s * 80_000))

    def nested(inner: st.SearchStrategy) -> st.SearchStrategy:
        return st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)

    return st.recursive(leaves, nested, max_leaves=6)


def paths(document, prefix=()) -> list[tuple]:
    found = [prefix] if prefix else []
    if isinstance(document, dict):
        for key, value in document.items():
            found += paths(value, (*prefix, key))
    elif isinstance(document, list):
        for n, value in enumerate(document):
            found += paths(value, (*prefix, n))
    return found


@st.composite
def perturbed(draw, valid, values: st.SearchStrategy, times: int = 3, keys: st.SearchStrategy = st.text(max_size=12)):
    """`valid` with 1 to `times` changes, each at a path drawn from the document as it then is: the key
    dropped, its value replaced by one of `values` or wrapped in a list, or a key (one of `keys`; an item)
    added beside it."""
    document = copy.deepcopy(valid)
    for _ in range(draw(st.integers(1, times))):
        where = paths(document)
        if not where:
            break
        path = draw(st.sampled_from(where))
        parent = document
        for key in path[:-1]:
            parent = parent[key]
        change = draw(st.sampled_from(["drop", "replace", "wrap", "add"]))
        if change == "drop":
            del parent[path[-1]]
        elif change == "replace":
            parent[path[-1]] = draw(values)
        elif change == "wrap":
            parent[path[-1]] = [parent[path[-1]]]
        elif isinstance(parent, dict):
            parent[draw(keys)] = draw(values)
        else:
            parent.append(draw(values))
    return document


class Lines(logging.Handler):
    """The decision lines (lambdas/common/logs.py) logged while attached."""

    def __init__(self):
        super().__init__()
        self.lines: list[dict] = []

    def emit(self, record):
        self.lines.append(json.loads(record.getMessage()))

    def __enter__(self) -> list[dict]:
        logging.getLogger("mlfleet").addHandler(self)
        return self.lines

    def __exit__(self, *_):
        logging.getLogger("mlfleet").removeHandler(self)
