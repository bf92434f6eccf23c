"""The benchmark over many seeds: seed lists, ratios taken run by run, and the flags it refuses."""

from __future__ import annotations

import json
import math

import pytest

from benchmarks.scheduler.__main__ import main as scheduler_main
from benchmarks.seeds import main, parse_seeds, ratios
from tests.benchmarks.test_scheduler_benchmark import plain_trace


@pytest.mark.parametrize("text, seeds", [("3", [3]), ("3-5", [3, 4, 5]), ("3-5,4,9", [3, 4, 5, 9]), ("9,1-2", [9, 1, 2])])
def test_seed_lists(text, seeds):
    assert parse_seeds(text) == seeds


@pytest.mark.parametrize("text", ["", "5-3", "a", "3-", "-3", "3,,4", "1.5"])
def test_bad_seed_lists_are_refused_naming_the_part(text):
    with pytest.raises(ValueError, match="--seeds"):
        parse_seeds(text)


def _run(costs: dict, per_gpu_hour: dict | None = None) -> dict:
    return {"strategies": {name: ({"skipped": "no"} if cost is None else
                                  {"cost_usd": cost, "p95_wait_s": 100.0,
                                   "usd_per_completed_gpu_hour": (per_gpu_hour or {}).get(name)})
                           for name, cost in costs.items()}}


def test_ratios_are_taken_run_by_run_then_averaged():
    runs = [_run({"mlfleet": 90.0, "one-instance-per-job": 100.0, "karpenter-when-empty": 120.0}),
            _run({"mlfleet": 110.0, "one-instance-per-job": 100.0, "karpenter-when-empty": 100.0})]
    found = ratios(runs)
    cost = found["mlfleet"]["x_one-instance-per-job"]["cost"]
    assert cost["per_seed"] == [0.9, 1.1] and cost["mean"] == 1.0 and (cost["low"], cost["high"]) == (0.9, 1.1)
    assert cost["standard_error"] == pytest.approx(math.sqrt(0.02) / math.sqrt(2), abs=1e-4)
    # Against Karpenter: 0.75 and 1.1, not the ratio of the mean costs (200 / 220).
    assert found["mlfleet"]["x_karpenter-when-empty"]["cost"]["mean"] == pytest.approx((0.75 + 1.1) / 2, abs=1e-4)
    # A peer against the peers before it only; one instance per job against none.
    assert set(found) == {"mlfleet", "karpenter-when-empty"}
    assert set(found["karpenter-when-empty"]) == {"x_one-instance-per-job"}
    # No interruptions here: no dollars per completed GPU-hour to compare.
    assert "per_completed_gpu_hour" not in cost and "per_completed_gpu_hour" not in found["mlfleet"]["x_one-instance-per-job"]


def test_a_skipped_strategy_or_a_missing_figure_leaves_it_out():
    runs = [_run({"mlfleet": 90.0, "one-instance-per-job": 100.0, "ecs-binpack-memory": None},
                 {"mlfleet": 0.5, "one-instance-per-job": 0.4}),
            _run({"mlfleet": 95.0, "one-instance-per-job": 100.0, "ecs-binpack-memory": None},
                 {"mlfleet": None, "one-instance-per-job": 0.4})]
    found = ratios(runs)
    assert "ecs-binpack-memory" not in found
    per_hour = found["mlfleet"]["x_one-instance-per-job"]["per_completed_gpu_hour"]
    assert per_hour["seeds"] == 1 and per_hour["mean"] == 1.25 and per_hour["standard_error"] is None


def test_each_seed_is_the_scheduler_benchmark_run_with_that_seed(tmp_path, capsys):
    trace = str(plain_trace(tmp_path, 30))
    flags = ["--trace", trace, "--mode", "replay", "--strategies", "mlfleet,one-instance-per-job",
             "--interruptions-per-hour", "0.2"]
    assert main(["--seeds", "3-4", "--json", "--", *flags]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["seeds"] == [3, 4] and [r["seed"] for r in report["runs"]] == [3, 4]
    for seed, run in zip((3, 4), report["runs"]):
        assert scheduler_main([*flags, "--seed", str(seed), "--json"]) == 0
        alone = json.loads(capsys.readouterr().out)
        assert {n: f["cost_usd"] for n, f in alone["strategies"].items()} == \
               {n: f["cost_usd"] for n, f in run["strategies"].items()}
    per_seed = report["ratios"]["mlfleet"]["x_one-instance-per-job"]["per_completed_gpu_hour"]["per_seed"]
    assert per_seed == [round(r["strategies"]["mlfleet"]["usd_per_completed_gpu_hour"]
                              / r["strategies"]["one-instance-per-job"]["usd_per_completed_gpu_hour"], 4)
                        for r in report["runs"]]


def test_two_processes_give_what_one_gives(tmp_path, capsys):
    flags = ["--trace", str(plain_trace(tmp_path, 20)), "--mode", "replay", "--strategies", "mlfleet,one-instance-per-job"]
    assert main(["--seeds", "1-2", "--json", "--", *flags]) == 0
    one = json.loads(capsys.readouterr().out)
    assert main(["--seeds", "1-2", "--processes", "2", "--json", "--", *flags]) == 0
    two = json.loads(capsys.readouterr().out)
    assert one["ratios"] == two["ratios"] and one["cost_usd"] == two["cost_usd"]


@pytest.mark.parametrize("argv, message", [
    (["--seeds", "3", "--", "--seed", "4"], "--seed 4: give the seeds"),
    (["--seeds", "3", "--", "--limit", "0"], "--limit 0 (must be >= 1)"),
    (["--seeds", "4-3"], "'4-3' is not a seed"),
    (["--seeds", "3", "--processes", "0"], "--processes 0 (must be >= 1)"),
])
def test_bad_flags_are_refused_naming_the_flag_and_value(argv, message, capsys):
    with pytest.raises(SystemExit) as stop:
        main(argv)
    assert stop.value.code == 2 and message in capsys.readouterr().err


def test_the_scheduler_benchmark_names_each_flag_out_of_range(tmp_path, capsys):
    with pytest.raises(SystemExit):
        scheduler_main(["--trace", str(plain_trace(tmp_path)), "--limit", "0", "--hint-share", "1.5",
                        "--checkpoint-interval-minutes", "0"])
    error = capsys.readouterr().err
    assert "--limit 0 (must be >= 1)" in error and "--hint-share 1.5 (must be in [0, 1])" in error
    assert "--checkpoint-interval-minutes 0 (must be in [1, 1440])" in error


@pytest.mark.parametrize("flag, value, message", [
    # Each ran: infinities hung the simulation or stopped it with a traceback (OverflowError), and the
    # reaper's window and grace took any value.
    ("--boot-seconds", "inf", "--boot-seconds inf (must be a finite number in [0, 86400])"),
    ("--interruptions-per-hour", "inf", "--interruptions-per-hour inf (must be a finite number >= 0)"),
    ("--hint-sigma", "inf", "--hint-sigma inf (must be a finite number >= 0)"),
    ("--idle-window-minutes", "-5", "--idle-window-minutes -5 (must be in [0, 1440])"),
    ("--idle-grace-minutes", "nan", "--idle-grace-minutes nan (must be a finite number in [0, 1440])"),
    ("--configuration-bound-minutes", "0", "--configuration-bound-minutes 0 (must be > 0)"),
    ("--timeline-hours", "1e-9", "--timeline-hours 1e-09 (must be 0 or at least 0.0167, a minute)"),
    # Finite but past what the flag models: each hung the run, or ran it for hours (a 300-job replay took
    # minutes with one-minute checkpoints and ten attempts). The ranges are the stack's and the job spec's.
    ("--interruptions-per-hour", "12", "--interruptions-per-hour 12 (must be at most 3 with --boot-seconds 180"),
    ("--max-attempts", "100000000", "--max-attempts 1e+08 (must be in [1, 10])"),
    ("--boot-seconds", "1e9", "--boot-seconds 1e+09 (must be in [0, 86400])"),
    ("--idle-window-minutes", "1e9", "--idle-window-minutes 1e+09 (must be in [0, 1440])"),
    ("--headroom-window-minutes", "1e9", "--headroom-window-minutes 1e+09 (must be in [0, 1440])"),
    ("--checkpoint-interval-minutes", "0.001", "--checkpoint-interval-minutes 0.001 (must be in [1, 1440])"),
])
def test_the_scheduler_benchmark_refuses_infinite_and_unbounded_flags(tmp_path, capsys, flag, value, message):
    with pytest.raises(SystemExit) as stop:
        scheduler_main(["--trace", str(plain_trace(tmp_path)), "--mode", "replay", flag, value])
    assert stop.value.code == 2 and message in capsys.readouterr().err


def test_the_text_report_says_what_the_trace_left_out(tmp_path, capsys):
    trace = tmp_path / "cpu.csv"
    trace.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
                     "deletion_time,scheduled_time\np1,6000,8192,0,0,,BE,Running,0,50,0\n")
    assert scheduler_main(["--trace", str(trace), "--strategies", "mlfleet"]) == 0
    out = capsys.readouterr().out
    assert "0 jobs" in out and "left out: 1 no_gpu" in out and "x-" in out and "None" not in out
