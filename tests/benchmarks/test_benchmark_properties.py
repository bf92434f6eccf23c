"""The scheduler benchmark on random small traces: it runs to the end on any trace it accepts, and its
figures keep the rules they rest on. Fuzzing it this way found a replay whose jobs all took no time
stopping with a numpy error inside the bound. The openb property runs pod lists of the publishers' shapes
(their five-column multigpu lists, columns in any order, multi-model gpu_spec, pods never scheduled) and
checks besides that every pod is a job or counted as left out.

- every job ends completed, dead-lettered or lost, and only ECS (whose RunTask jobs are not restarted)
  loses one;
- no strategy pays less than the bound of its mode (snapshot always; replay when no instance is
  reclaimed, since with interruptions a dead-lettered job runs less than its trace duration);
- every dollar is booked once (`cost_breakdown_usd`: the benchmark itself stops if it is not).
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchmarks.scheduler.__main__ import main

PATTERNS = ("", r"g5\..*", r"p4d\..*", r"g4dn\..*", r"x1\..*")  # x1: no GPU type matches (unplaceable)
# A job sharing a GPU (gpus 0) asks for this much of one GPU's memory; the last is more than any GPU has.
GPU_MEMORY = (1000, 8000, 15000, 40000, 200_000)

job = st.fixed_dictionaries({
    "gap": st.sampled_from((0, 0, 30, 600, 20_000)),
    "duration": st.sampled_from((0, 1, 600, 3600, 86_400, 7 * 86_400)),
    "gpus": st.sampled_from((0, 1, 1, 2, 4, 8, 16)),
    "vcpus": st.sampled_from((0.5, 4, 16, 47, 200)),
    "memory": st.sampled_from((256, 30_000, 190_000, 3_000_000)),
    "pattern": st.sampled_from(PATTERNS),
    "submission": st.sampled_from(("", "a", "b")),
    "gpu_memory": st.sampled_from(GPU_MEMORY),
})


def check_figures(result: dict, mode: str, interruptions: float) -> None:
    placeable = result["jobs"] - result["unplaceable"]
    bound = result["lower_bound_cost_usd"]
    for name, figures in result["strategies"].items():
        if "skipped" in figures:
            continue
        ended = figures["jobs_completed"] + figures.get("jobs_dead_lettered", 0) + figures["jobs_lost"]
        assert ended == placeable, name
        if name != "ecs-binpack-memory":
            assert figures["jobs_lost"] == 0, name
        if mode == "snapshot" or interruptions == 0:
            assert figures["cost_usd"] >= bound - 0.01, (name, figures["cost_usd"], bound)
        if mode == "replay":
            parts = figures["cost_breakdown_usd"].values()
            assert sum(parts) == pytest.approx(figures["cost_usd"], abs=0.05), name


def trace_text(jobs: list[dict]) -> str:
    lines, at = ["submit_s,duration_s,gpus,vcpus,memory_mib,instance_type,submission,gpu_memory_mib"], 0
    for j in jobs:
        at += j["gap"]
        lines.append(f"{at},{j['duration']},{j['gpus']},{j['vcpus']},{j['memory']},{j['pattern']},"
                     f"{j['submission']},{j['gpu_memory'] if j['gpus'] == 0 else 0}")
    return "\n".join(lines) + "\n"


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(jobs=st.lists(job, min_size=1, max_size=20), mode=st.sampled_from(("snapshot", "replay")),
       interruptions=st.sampled_from((0.0, 0.0, 0.5, 2.0)), share=st.booleans(), seed=st.integers(0, 50),
       checkpoints=st.sampled_from((0.0, 0.5, 1.0)), headroom=st.sampled_from((0, 0, 30, 480)))
def test_any_small_trace_runs_and_its_figures_keep_their_rules(tmp_path_factory, capsys, jobs, mode, interruptions,
                                                                share, seed, checkpoints, headroom):
    trace = tmp_path_factory.mktemp("trace") / "trace.csv"
    trace.write_text(trace_text(jobs))
    argv = ["--trace", str(trace), "--mode", mode, "--seed", str(seed), "--interruptions-per-hour",
            str(interruptions), "--checkpoint-share", str(checkpoints), "--checkpoint-interval-minutes", "5",
            "--headroom-window-minutes", str(headroom), "--json"] + (["--share-fractional-gpus"] if share else [])
    capsys.readouterr()
    assert main(argv) == 0
    check_figures(json.loads(capsys.readouterr().out), mode, interruptions)


OPENB_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec", "qos", "pod_phase",
                 "creation_time", "deletion_time", "scheduled_time")
# The publishers' lists: all eleven columns (default, gpuspec, gpushare, cpu), the first five (multigpu).
OPENB_HEADERS = (OPENB_COLUMNS, OPENB_COLUMNS[:5], OPENB_COLUMNS[:8])
pod = st.fixed_dictionaries({
    "gap": st.sampled_from((0, 0, 30, 20_000)),
    "cpu_milli": st.sampled_from((0, 3152, 12000, 88000, 999_000)),  # the last: more vCPUs than any instance
    "memory_mib": st.sampled_from((0, 5600, 327680, 99_999_999)),
    "num_gpu": st.sampled_from((0, 1, 1, 1, 2, 4, 8)),
    "gpu_milli": st.sampled_from((0, 50, 460, 1000)),
    "gpu_spec": st.sampled_from(("", "", "nan", "T4", "V100M16|V100M32|V100M32", "A10|G2|T4|V100M16|V100M32",
                                 "P100|T4", "G2", "G3")),
    "pod_phase": st.sampled_from(("Running", "Pending", "Succeeded", "Failed")),
    "wait": st.sampled_from((None, 0, 35)),  # None: never scheduled (scheduled_time empty)
    "duration": st.sampled_from((0, 1, 600, 86_400)),
})


def openb_text(pods: list[dict], columns: tuple[str, ...]) -> str:
    rows, at = [], 0
    for i, p in enumerate(pods):
        at += p["gap"]
        start = at + (p["wait"] or 0)
        values = {**p, "name": f"openb-pod-{i:04d}", "qos": "LS", "creation_time": at,
                  "deletion_time": start + p["duration"], "scheduled_time": "" if p["wait"] is None else start}
        rows.append(",".join(str(values[c]) for c in columns))
    return "\r\n".join([",".join(columns), *rows]) + "\r\n"


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pods=st.lists(pod, min_size=1, max_size=8), header=st.sampled_from(OPENB_HEADERS), order=st.randoms(),
       mode=st.sampled_from(("snapshot", "replay")), interruptions=st.sampled_from((0.0, 1.0)), share=st.booleans())
def test_any_small_openb_pod_list_runs_and_accounts_for_every_pod(tmp_path_factory, capsys, pods, header, order,
                                                                   mode, interruptions, share):
    columns = list(header)
    order.shuffle(columns)  # the reader finds columns by name
    trace = tmp_path_factory.mktemp("trace") / "pods.csv"
    trace.write_bytes(b"\xef\xbb\xbf" + openb_text(pods, tuple(columns)).encode())
    argv = ["--trace", str(trace), "--mode", mode, "--interruptions-per-hour", str(interruptions), "--json"] + (
        ["--share-fractional-gpus"] if share else [])
    capsys.readouterr()
    assert main(argv) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["jobs"] + sum(result["excluded"].values()) == len(pods)
    check_figures(result, result["mode"], interruptions)
