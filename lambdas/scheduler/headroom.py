"""The jobs the scheduler recently bought instances for, kept between runs for headroom
(planning/headroom.py; on only with `mlfleet:headroomWindowMinutes` > 0).

One item of the job ledger table, key WAITS_KEY (kept_item.py). An item that cannot be read (throttled,
denied) means no headroom for that run, never a failed run.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..common.logs import log_decision
from .kept_item import number, permission, put_if_newer
from .planning.headroom import RecentWait

WAITS_KEY = "#headroom/recent-waits"
PERMISSIONS = (
    permission(WAITS_KEY, "keep the jobs recently bought for between runs (headroom), one item of the job ledger"),
)


def _encode(wait: RecentWait) -> dict:
    fields = {"at": number(wait.at), "gpus": number(wait.gpus), "vcpus": number(wait.vcpus),
              "memory_mib": number(wait.memory_mib), "gpu_memory_mib": number(wait.gpu_memory_mib),
              "regions": {"L": [{"S": r} for r in wait.regions]}}
    if wait.instance_type_pattern is not None:
        fields["instance_type_pattern"] = {"S": wait.instance_type_pattern}
    if wait.lifecycle is not None:
        fields["lifecycle"] = {"S": wait.lifecycle}
    return {"M": fields}


def _decode(value: dict) -> RecentWait:
    m = value["M"]
    return RecentWait(at=float(m["at"]["N"]), gpus=int(m["gpus"]["N"]), vcpus=float(m["vcpus"]["N"]),
                      memory_mib=int(m["memory_mib"]["N"]), gpu_memory_mib=int(m["gpu_memory_mib"]["N"]),
                      instance_type_pattern=m.get("instance_type_pattern", {}).get("S"),
                      regions=tuple(r["S"] for r in m.get("regions", {}).get("L", [])),
                      lifecycle=m.get("lifecycle", {}).get("S"))


def read_waits(dynamodb, table: str) -> list[RecentWait]:
    """The waits the last run kept, oldest first; [] before the first. An entry that cannot be decoded
    (written by hand, or by another version) is logged and left out: this run's write replaces it."""
    item = dynamodb.get_item(TableName=table, Key={"job_id": {"S": WAITS_KEY}}, ConsistentRead=True).get("Item")
    waits = []
    for value in (item or {}).get("waits", {}).get("L", []):
        try:
            waits.append(_decode(value))
        except (KeyError, TypeError, ValueError) as error:
            log_decision("headroom-wait-undecodable", entry=str(value)[:200], error=repr(error), action="dropped")
    return sorted(waits, key=lambda w: w.at)


def write_waits(dynamodb, table: str, waits: Sequence[RecentWait], at: float) -> bool:
    """Keep the waits computed at `at`; False when a newer list is there or the write failed (kept_item.py:
    the next run starts from the last list kept, and headroom is only as recent as that)."""
    return put_if_newer(dynamodb, table, WAITS_KEY, at, {"waits": {"L": [_encode(w) for w in waits]}},
                        "headroom-waits")
