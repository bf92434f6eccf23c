"""The scheduler benchmark on tiny traces: formats, mapping, bounds, accounting, and the DESIGN.md JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.scheduler.__main__ import BenchmarkError, check_packing, instance_types, main
from benchmarks.scheduler.bound import aggregate_bound, replay_bound
from benchmarks.scheduler.simulate import Simulation
from benchmarks.scheduler.strategies import MlfleetStrategy
from benchmarks.scheduler.trace import TraceError, TraceJob, read_trace
from lambdas.common.catalog import load_catalog

DESIGN_KEYS = {"trace", "mode", "jobs", "unplaceable", "lower_bound_cost_usd", "strategies"}
STRATEGY_KEYS = {"cost_usd", "gpu_utilization", "jobs_completed", "jobs_lost", "p95_wait_s", "instances_launched",
                 "plan_seconds", "completed_gpu_hours"}
ALL_STRATEGIES = {"mlfleet", "one-instance-per-job", "karpenter-when-empty", "ecs-binpack-memory", "first-fit"}
OPENB_HEADER = ("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,"
                "scheduled_time")


def write(tmp_path: Path, text: str, name: str = "trace.csv") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def plain_trace(tmp_path: Path, jobs: int = 40) -> Path:
    rows = [f"{i * 300},{1800 + (i % 7) * 900},{1 + i % 2},{2 + i % 9},{4096 * (1 + i % 5)}" for i in range(jobs)]
    return write(tmp_path, "submit_s,duration_s,gpus,vcpus,memory_mib\n" + "\n".join(rows) + "\n")


def test_openb_mapping(tmp_path):
    trace = read_trace(write(tmp_path, OPENB_HEADER + "\n"
                             "p0,12000,16384,1,460,,LS,Running,100,700,160\n"   # fractional GPU, scheduled
                             "p1,6000,8192,0,0,,BE,Running,0,50,0\n"            # no GPU: excluded
                             "p2,4000,4096,2,1000,T4,LS,Pending,200,500,\n"     # never scheduled, T4 only
                             "p3,4000,4096,1,1000,G2,LS,Running,300,400,300\n"  # no AWS equivalent: dropped
                             "p4,4000,4096,1,1000,P100|T4,LS,Running,300,400,300\n"    # keeps the model AWS sells
                             "p5,4000,4096,1,1000,A10,LS,Running,300,400,300\n"))      # AWS's A10G: g5
    assert trace.format == "openb" and trace.excluded == {"no_gpu": 1, "gpu_spec_without_aws_equivalent:G2": 1}
    by_id = {j.job_id: j for j in trace.jobs}
    assert by_id["p0"] == TraceJob("p0", 100, 540, 1, 12.0, 16384, None, gpu_fraction=0.46)  # a whole GPU
    assert by_id["p2"].duration_s == 300 and by_id["p2"].gpus == 2 and by_id["p2"].instance_type_pattern
    assert "p3" not in by_id and by_id["p4"].instance_type_pattern == r"(?:g4dn\..*)"
    assert by_id["p5"].instance_type_pattern == r"(?:g5\..*)"




def test_gpu_spec_nan_is_no_constraint_and_models_may_have_spaces(tmp_path):
    # alibaba/clusterdata's README: "`nan` means no GPU type constraints" (a list saved by pandas writes it
    # so); both pods were dropped as tied to models AWS does not sell.
    trace = read_trace(write(tmp_path, OPENB_HEADER + "\n"
                             "p0,4000,4096,1,1000,nan,LS,Running,0,60,0\n"
                             "p1,4000,4096,1,1000, T4 | V100M16 ,LS,Running,0,60,0\n"))
    assert not trace.excluded
    assert {j.job_id: j.instance_type_pattern for j in trace.jobs} == {"p0": None, "p1": r"(?:g4dn\..*)|(?:p3\..*)"}


def test_gpu_models_are_read_in_any_case(tmp_path):
    # A hand-made list writing `t4` had its pods dropped as tied to a model AWS does not sell.
    trace = read_trace(write(tmp_path, OPENB_HEADER + "\n"
                             "p0,4000,4096,1,1000,t4,LS,Running,0,60,0\n"
                             "p1,4000,4096,1,1000,v100m16|P100,LS,Running,0,60,0\n"))
    assert not trace.excluded
    assert {j.job_id: j.instance_type_pattern for j in trace.jobs} == {"p0": r"(?:g4dn\..*)", "p1": r"(?:p3\..*)"}

def test_the_publishers_five_column_pod_lists_run_in_snapshot_mode(tmp_path, capsys):
    # The first rows of alibaba/clusterdata's openb_pod_list_multigpu50.csv (multigpu20 has the same header):
    # no gpu_spec, qos, phase or times.
    path = write(tmp_path, "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"
                 "openb-pod-0000,12000,16384,1,1000\nopenb-pod-0001,6000,12288,1,460\n"
                 "openb-pod-0005,20000,65536,0,0\nopenb-pod-0017,88000,327680,8,1000\n"
                 "openb-pod-0422,17400,43008,2,1000\n")
    trace = read_trace(path)
    assert trace.format == "openb" and not trace.timed and trace.excluded == {"no_gpu": 1}
    assert [(j.job_id, j.gpus, j.instance_type_pattern) for j in trace.jobs] == [
        ("openb-pod-0000", 1, None), ("openb-pod-0001", 1, None), ("openb-pod-0017", 8, None),
        ("openb-pod-0422", 2, None)]
    result = run_json(capsys, "--trace", str(path), "--mode", "replay", "--share-fractional-gpus")
    assert result["mode"] == "snapshot" and "mode_note" in result and result["jobs"] == 4
    assert all(f["jobs_completed"] == 4 for f in result["strategies"].values())

def test_plain_format_with_instance_type_column(tmp_path):
    trace = read_trace(write(tmp_path, "submit_s,duration_s,gpus,vcpus,memory_mib,instance_type\n0,60,1,4,8192,g5\\..*\n"))
    assert trace.format == "plain" and trace.jobs[0].instance_type_pattern == r"g5\..*"


@pytest.mark.parametrize(("text", "fragment"), [
    ("a,b,c\n1,2,3\n", "line 1: header"),
    ("submit_s,duration_s,gpus,vcpus,memory_mib\n0,60,one,4,8192\n", "line 2, column gpus: 'one' is not a number"),
    ("submit_s,duration_s,gpus,vcpus,memory_mib\n0,60,1,4,8192\n0,-5,1,4,8192\n", "line 3, column duration_s"),
    ("submit_s,duration_s,gpus,vcpus,memory_mib\n0,60,0,4,8192\n", "line 2, column gpus: '0' is below 1"),
    ("submit_s,duration_s,gpus,vcpus,memory_mib\n0,nan,1,4,8192\n", "line 2, column duration_s: 'nan' is not a finite number"),
    ("submit_s,duration_s,gpus,vcpus,memory_mib\n0,60,1,inf,8192\n", "line 2, column vcpus: 'inf' is not a finite number"),
    ("submit_s,duration_s,gpus,vcpus,memory_mib\n-Infinity,60,1,4,8192\n", "line 2, column submit_s: '-Infinity' is not a finite"),
    ("submit_s,duration_s,gpus,vcpus,memory_mib,instance_type\n0,60,1,4,8192,g5.*\n0,60,1,4,8192,[g5\n",
     "line 3, column instance_type: '[g5' is not a regular expression"),
    # The name is the job's id: a second pod of one name was merged into the first, silently, and every
    # strategy ended fewer jobs than the run reported.
    (OPENB_HEADER + "\np0,4000,8192,1,1000,,LS,Running,0,60,0\np0,4000,8192,2,1000,,LS,Running,5,90,5\n",
     "line 3, column name: 'p0' is the name of the pod on line 2 too"),
    (OPENB_HEADER + "\n,4000,8192,1,1000,,LS,Running,0,60,0\n", "line 2, column name: empty"),
    # A short row's last columns were read as empty (a pod that ran became one never scheduled), extra fields
    # were dropped, and an unclosed quote made the rest of the file one value of one pod, silently.
    (OPENB_HEADER + "\np0,4000,8192,1,1000,,LS,Running,0,60\n", "line 2, column scheduled_time: missing (10 fields"),
    ("submit_s,duration_s,gpus,vcpus,memory_mib\n0,60,1,4,8192,g5.*\n", "line 2, column 6: more fields"),
    # A run past a year: times in milliseconds read as seconds kept the replay computing for hours.
    ("submit_s,duration_s,gpus,vcpus,memory_mib\n0,1e12,1,4,8192\n",
     "line 2, column duration_s: '1e12' makes a run of 11,574,074 days, longer than a year"),
    (OPENB_HEADER + "\np0,4000,4096,1,1000,,LS,Running,0,40000000000,0\n",
     "line 2, column deletion_time: '40000000000' makes a run of 462,963 days"),
    # Times out of order ran the pod for 1 s, silently.
    (OPENB_HEADER + "\np0,4000,8192,1,1000,,LS,Running,100,150,200\n", "line 2, column deletion_time: '150' is "
     "before scheduled_time '200'"),
    (OPENB_HEADER + "\np0,4000,8192,1,1000,,LS,Pending,300,200,\n", "line 2, column deletion_time: '200' is "
     "before creation_time '300'"),
    (OPENB_HEADER + "\np0,4000,8192,1,1000,,LS,Running,300,400,200\n", "line 2, column scheduled_time: '200' is "
     "before creation_time '300'"),
    ('submit_s,duration_s,gpus,vcpus,memory_mib,submission\n0,60,1,4,8192,"a\nb"\n0,60,1,x,8192,c\n',
     "line 4, column vcpus: 'x' is not a number"),  # the line a row starts on, after a value with a line break
    (OPENB_HEADER + '\np0,4000,8192,1,1000,"T4,LS,Running,0,60,0\np1,4000,8192,1,1000,,LS,Running,0,60,0\n',
     "line 2, column qos: missing (6 fields"),
])
def test_bad_traces_name_file_line_and_column(tmp_path, text, fragment):
    path = write(tmp_path, text)
    with pytest.raises(TraceError, match=str(path)) as error:
        read_trace(path)
    assert fragment in str(error.value)



PLAIN_ROW = b"submit_s,duration_s,gpus,vcpus,memory_mib\n0,60,1,4,8192\n"


@pytest.mark.parametrize(("data", "fragment"), [
    (b"", "line 1: no header"),
    (PLAIN_ROW + b"0,60,1,4,8192\xe9\n", "line 3, column memory_mib: byte 0xe9 is not UTF-8"),  # a Latin-1 export
    (PLAIN_ROW + b'0,60,1,4,"' + b"8" * 140_000 + b"\n", "line 3: field larger than field limit"),
    (b"name,cpu_milli,name,memory_mib,num_gpu,gpu_milli\n", "line 1: column 'name' more than once"),
])
def test_unreadable_traces_are_one_error_naming_file_and_line(tmp_path, capsys, data, fragment):
    """Bytes that are not a CSV of UTF-8 text stopped the run with a traceback (UnicodeDecodeError, csv.Error)."""
    path = tmp_path / "trace.csv"
    path.write_bytes(data)
    assert main(["--trace", str(path), "--json"]) == 2
    error = capsys.readouterr().err
    assert error.startswith(f"error: {path}: ") and fragment in error and error.count("\n") == 1


def test_a_byte_order_mark_is_not_part_of_the_header(tmp_path):
    path = tmp_path / "trace.csv"
    path.write_bytes(b"\xef\xbb\xbf" + OPENB_HEADER.replace(",", ", ").encode() + b"\r\n"
                     b"p0,4000,8192,1,1000,,LS,Running,0,60,0\r\n")
    trace = read_trace(path)
    assert trace.format == "openb" and [(j.job_id, j.duration_s) for j in trace.jobs] == [("p0", 60)]

def test_bounds_on_a_hand_computed_case():
    types = [t for t in instance_types(load_catalog(), "us-east-1") if t.name == "g4dn.xlarge"]
    price = types[0].price
    jobs = [TraceJob("a", 0, 3600, 1, 1, 1024), TraceJob("b", 1800, 3600, 1, 1, 1024)]
    assert aggregate_bound(jobs, types) == pytest.approx(2 * price)
    # One GPU for half an hour, two for half an hour, one for half an hour: 2 GPU-hours.
    assert replay_bound(jobs, types) == pytest.approx(2 * price)


def test_the_packing_checker_catches_an_over_commit():
    types = instance_types(load_catalog(), "us-east-1")
    jobs = [TraceJob(f"j{i}", 0, 60, 1, 2, 1024) for i in range(3)]
    sim = Simulation(jobs, types, MlfleetStrategy(types, load_catalog(), "us-east-1", 5400, 1800), mode="snapshot",
                     interruptions_per_hour=0, seed=1, boot_s=0, max_attempts=3)
    sim.run()
    check_packing(sim, "mlfleet")
    box = next(b for b in sim.boxes if b.jobs)
    box.jobs.update(j for j in sim.jobs if j not in box.jobs)  # three jobs on one instance
    box.type = next(t for t in types if t.name == "g4dn.xlarge")
    with pytest.raises(BenchmarkError, match="over-committed|cannot run|more than one"):
        check_packing(sim, "mlfleet")


def run_json(capsys, *argv) -> dict:
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_snapshot_json_has_the_design_keys_and_every_bound_holds(tmp_path, capsys):
    result = run_json(capsys, "--trace", str(plain_trace(tmp_path)), "--mode", "snapshot")
    assert DESIGN_KEYS <= set(result) and result["mode"] == "snapshot" and result["jobs"] == 40
    assert set(result["strategies"]) == ALL_STRATEGIES
    for figures in result["strategies"].values():
        assert STRATEGY_KEYS <= set(figures)
        assert figures["jobs_completed"] == 40 and figures["jobs_lost"] == 0
        assert figures["cost_usd"] >= result["lower_bound_cost_usd"] - 1e-6


def test_replay_with_interruptions_loses_nothing_with_recovery_and_ecs_loses_jobs(tmp_path, capsys):
    result = run_json(capsys, "--trace", str(plain_trace(tmp_path, 60)), "--mode", "replay",
                      "--interruptions-per-hour", "2", "--seed", "3")
    strategies = result["strategies"]
    for name in ("mlfleet", "one-instance-per-job", "first-fit"):
        figures = strategies[name]
        assert figures["jobs_lost"] == 0
        assert figures["jobs_completed"] + figures["jobs_dead_lettered"] == 60
        assert all("spot interruption" in reason for reason in figures["dead_letter_reasons"])
    assert strategies["ecs-binpack-memory"]["jobs_lost"] > 0
    calm = run_json(capsys, "--trace", str(plain_trace(tmp_path, 60)), "--mode", "replay")
    assert all(f["jobs_lost"] == 0 and f["jobs_completed"] == 60 for f in calm["strategies"].values())


def test_unknown_strategy_and_missing_trace_are_refused(tmp_path, capsys):
    assert main(["--trace", str(plain_trace(tmp_path)), "--strategies", "mlfleet,skypilot"]) == 2
    assert "unknown skypilot" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--trace", str(tmp_path / "missing.csv")])
