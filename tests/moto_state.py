"""moto's whole state kept once and put back for each test that starts from it.

Building a world in moto (a table, queues, a group of instances registered with ECS, jobs and tasks) takes as
long as a fault case's runs and checks together, and a fault matrix starts every case from the same world.
So the world is built once per process in a fresh moto, exactly as a test would build it, and kept as a deep
copy of moto's state (every service's backends) together with the test's own objects about it; each case
then starts from a copy of that copy in its own fresh moto: the same world as a new build, with no state of
an earlier case. A copy takes milliseconds where a build took about half a second.

    kept = keep(world)            # after building `world` in the active moto
    world = put_back(kept)        # in a later test's fresh moto: the state, and a copy of `world`

Every ID is the same in each copy (a build draws new ones), so the functions' memory of task ARNs
(lambdas/common/aws.py, forget_stopped_tasks) is cleared with each put_back.
"""

from __future__ import annotations

import copy
import copyreg
import threading
from typing import Any

from lambdas.common.aws import forget_stopped_tasks


def _moto_backends() -> list:
    from moto.core.base_backend import BackendDict

    return list(BackendDict._instances)


def _copy(value: Any, backends: list) -> Any:
    """A deep copy of moto state or of what keep() kept. moto's registries of services (BackendDict) stay
    shared, as moto keeps one of each; a lock or condition (SQS's per queue) becomes a new one, as no thread
    holds it in a world at rest; SSM's parameter store (a defaultdict whose constructor takes its account and
    region) is copied item by item."""
    from moto.ssm.models import ParameterDict

    reducers = {
        type(threading.Lock()): lambda lock: (threading.Lock, ()),
        type(threading.RLock()): lambda lock: (threading.RLock, ()),
        threading.Condition: lambda condition: (threading.Condition, ()),
        ParameterDict: lambda store: (ParameterDict, (store.account_id, store.region_name), dict(vars(store)), None,
                                      iter(store.items())),
    }
    added = {kind: reducer for kind, reducer in reducers.items() if kind not in copyreg.dispatch_table}
    copyreg.dispatch_table.update(added)
    try:
        return copy.deepcopy(value, {id(backend): backend for backend in backends})
    finally:
        for kind in added:
            del copyreg.dispatch_table[kind]


def keep(extra: Any = None) -> dict:
    """The active moto's state and `extra` (the test's objects about the world), copied together so that
    what they share stays shared."""
    backends = _moto_backends()
    return _copy({"backends": [(backend, dict(backend)) for backend in backends], "extra": extra}, backends)


def put_back(kept: dict) -> Any:
    """The kept state in the active (fresh) moto; returns a copy of the kept `extra`."""
    state = _copy(kept, [backend for backend, _ in kept["backends"]])
    for backend, accounts in state["backends"]:
        backend.clear()
        backend.update(accounts)
        if backend not in type(backend)._instances:  # so that moto resets it when the mock stops
            type(backend)._instances.append(backend)
    forget_stopped_tasks()
    return state["extra"]
