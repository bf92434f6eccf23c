"""AWS API calls and wall time of one reaper run, for fleets of 100, 1,000 and 5,000 instances (moto).

    python -m benchmarks.reaper [--instances 100 1000 5000] --json

Each size gets a fresh moto world: one ASG of N registered GPU instances, a quarter of them idle (low
CPU and GPU over the whole window), the rest busy; every instance has a full hour of CPU and GPU data.
One run is timed (the run only, not the world setup) and every AWS call it makes is counted per
operation with a botocore `before-call` hook.

EC2, ECS, Auto Scaling and SNS are moto. GetMetricData is answered by an in-memory index instead
(`--metrics indexed`, the default): moto scans every stored datapoint for every query, which made one
1,000-instance run take 210 s in moto alone. The index checks what AWS enforces (at most 500 queries a
call) and counts its calls like the rest. `--metrics moto` measures moto end to end. Wall time is
in-process time: how the run scales, not the network latency AWS would add.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
# moto only: never a real account, whatever the shell has configured.
for _key, _value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                     "AWS_SESSION_TOKEN": "testing", "AWS_DEFAULT_REGION": "us-east-1"}.items():
    os.environ[_key] = _value
os.environ.pop("AWS_PROFILE", None)

import boto3  # noqa: E402
from moto import mock_aws  # noqa: E402
from moto.core.responses import BaseResponse  # noqa: E402

from lambdas.common.aws import client, reset_clients  # noqa: E402
from lambdas.common.logs import _LOGGER as decision_log  # noqa: E402
from lambdas.reaper.handler import Settings, run  # noqa: E402
from lambdas.reaper.idle import PERIOD_SECONDS, IdleSettings, window_periods  # noqa: E402
from reaper.test_reaper_moto import ASG, CLUSTER, REGION, SETTINGS, build_world  # noqa: E402


class IndexedMetrics:
    """GetMetricData over an in-memory index: {(namespace, metric, dimensions): {period start: value}}."""

    def __init__(self) -> None:
        self.series: dict[tuple, dict] = {}
        self.calls = 0

    def put(self, namespace: str, datum: dict) -> None:
        key = (namespace, datum["MetricName"], tuple(sorted((d["Name"], d["Value"]) for d in datum["Dimensions"])))
        start = datum["Timestamp"] - timedelta(seconds=datum["Timestamp"].timestamp() % PERIOD_SECONDS)
        self.series.setdefault(key, {})[start] = datum["Value"]

    def get_metric_data(self, MetricDataQueries, StartTime, EndTime, **_):  # noqa: N803 (boto3 names)
        assert len(MetricDataQueries) <= 500, "GetMetricData takes at most 500 queries"
        self.calls += 1
        results = []
        for query in MetricDataQueries:
            metric = query["MetricStat"]["Metric"]
            key = (metric["Namespace"], metric["MetricName"],
                   tuple(sorted((d["Name"], d["Value"]) for d in metric["Dimensions"])))
            points = sorted((t, v) for t, v in self.series.get(key, {}).items() if StartTime <= t < EndTime)
            results.append({"Id": query["Id"], "Timestamps": [t for t, _ in points],
                            "Values": [v for _, v in points], "StatusCode": "Complete"})
        return {"MetricDataResults": results}


def put_window(instance_ids, now, busy_every: int, index: IndexedMetrics | None) -> None:
    cloudwatch = boto3.client("cloudwatch", REGION)
    periods = window_periods(now, IdleSettings(SETTINGS.idle_window_minutes, 10, 5, 30))
    data = []
    for n, instance_id in enumerate(instance_ids):
        cpu = 60.0 if n % busy_every else 2.0
        for p in periods:
            at = p + timedelta(seconds=PERIOD_SECONDS // 2)
            data.append(("AWS/EC2", {"MetricName": "CPUUtilization", "Timestamp": at, "Value": cpu,
                                     "Dimensions": [{"Name": "InstanceId", "Value": instance_id}]}))
            data.append(("CWAgent", {"MetricName": "nvidia_smi_utilization_gpu", "Timestamp": at, "Value": 0.0,
                                     "Dimensions": [{"Name": "InstanceId", "Value": instance_id},
                                                    {"Name": "AutoScalingGroupName", "Value": ASG}]}))
    if index is not None:
        for namespace, datum in data:
            index.put(namespace, datum)
        return
    for namespace in ("AWS/EC2", "CWAgent"):
        points = [d for ns, d in data if ns == namespace]
        for start in range(0, len(points), 1000):
            cloudwatch.put_metric_data(Namespace=namespace, MetricData=points[start:start + 1000])


class MotoClock:
    """Time spent inside moto's request handlers, so the run's own time can be told apart."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._original = BaseResponse.call_action

    def __enter__(self):
        clock, original = self, self._original

        def timed(response_self):
            started = time.perf_counter()
            try:
                return original(response_self)
            finally:
                clock.seconds += time.perf_counter() - started

        BaseResponse.call_action = timed
        return self

    def __exit__(self, *exc) -> None:
        BaseResponse.call_action = self._original


def measure(instances: int, metrics: str) -> dict:
    with mock_aws():
        reset_clients()
        world = build_world(fleet_size=instances, standalone=0)
        now = datetime.now(timezone.utc) + timedelta(hours=3)
        index = IndexedMetrics() if metrics == "indexed" else None
        put_window(world["fleet"], now, busy_every=4, index=index)
        if index is not None:
            # Paginators bind the client's method when created, so the run's paginators use the index.
            client("cloudwatch").get_metric_data = index.get_metric_data
        settings = Settings(**{**SETTINGS.__dict__, "alert_topic_arn": world["topic"]})
        calls: Counter = Counter()
        for service in ("ec2", "ecs", "cloudwatch", "autoscaling", "sns"):
            client(service).meta.events.register(
                "before-call.*.*", lambda model, **_: calls.update([f"{model.service_model.service_name}:{model.name}"]))
        decision_log.disabled = True  # one JSON line per instance would time the terminal, not the run
        with MotoClock() as moto_clock:
            started = time.perf_counter()
            result = run(settings, now)
            seconds = time.perf_counter() - started
        decision_log.disabled = False
        if index is not None:
            calls["cloudwatch:GetMetricData"] += index.calls
    reset_clients()
    return {"instances": instances, "metrics": metrics, "run_seconds": round(seconds, 2),
            "moto_seconds": round(moto_clock.seconds, 2), "reaper_seconds": round(seconds - moto_clock.seconds, 2),
            "api_calls": sum(calls.values()),
            "calls_by_operation": dict(sorted(calls.items())),
            "marked_idle": len(result["decisions"].get("mark", []))}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, nargs="+", default=[100, 1000, 5000])
    parser.add_argument("--metrics", choices=["indexed", "moto"], default="indexed",
                        help="who answers GetMetricData (see the module docstring)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    results = [measure(n, args.metrics) for n in args.instances]
    if args.json:
        print(json.dumps({"cluster": CLUSTER, "runs": results}, indent=1))
    else:
        for r in results:
            print(f"{r['instances']:>6} instances: {r['api_calls']:>4} calls in {r['run_seconds']:>7.2f} s "
                  f"({r['moto_seconds']:.2f} s in moto, {r['reaper_seconds']:.2f} s reaper)  {r['calls_by_operation']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
