"""The committed traces of benchmarks/data: what their README says they are, so that a figure measured on one
is measured on the publishers' data (benchmarks/data/README.md)."""

from __future__ import annotations

import csv
import re
from pathlib import Path

from benchmarks.scheduler.trace import GPU_MODEL_PATTERNS, read_trace

DATA = Path(__file__).resolve().parents[2] / "benchmarks" / "data"
DEFAULT = DATA / "openb_pod_list_default.csv"
GPUSPEC33 = DATA / "openb_pod_list_gpuspec33.csv"
# The GPU models of the publishers' node list (openb_node_list_all_node.csv): what a gpu_spec may name.
OPENB_MODELS = {"T4", "V100M16", "V100M32", "A10", "P100", "G2", "G3"}


def _rows(path: Path) -> list[dict]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def test_gpuspec33_is_the_default_pod_list_with_gpu_models_named():
    default, gpuspec = _rows(DEFAULT), _rows(GPUSPEC33)
    assert [r["name"] for r in gpuspec] == [r["name"] for r in default]
    for ours, theirs in zip(gpuspec, default):
        assert {k: v for k, v in ours.items() if k != "gpu_spec"} == {k: v for k, v in theirs.items() if k != "gpu_spec"}
    assert not any(r["gpu_spec"] for r in default)
    named = [r for r in gpuspec if r["gpu_spec"]]
    assert all(int(r["num_gpu"]) >= 1 for r in named)  # only GPU pods are tied to a model
    assert {m for r in named for m in r["gpu_spec"].split("|")} <= OPENB_MODELS
    gpu_pods = sum(1 for r in gpuspec if int(r["num_gpu"]) >= 1)
    # "About 33% of GPU tasks in our production cluster have GPU type constraints" (the publishers' README).
    assert len(named) == 2388 and gpu_pods == 7064


def test_gpuspec33_pods_run_only_where_aws_sells_a_model_they_accept():
    trace = read_trace(GPUSPEC33)
    by_name = {r["name"]: r["gpu_spec"] for r in _rows(GPUSPEC33)}
    sold = {model for model in OPENB_MODELS if model in GPU_MODEL_PATTERNS}
    dropped = sum(n for reason, n in trace.excluded.items() if reason.startswith("gpu_spec_without_aws_equivalent:"))
    assert dropped == sum(1 for spec in by_name.values() if spec and not set(spec.split("|")) & sold)
    for job in trace.jobs:
        spec = by_name[job.job_id]
        if not spec:
            assert job.instance_type_pattern is None
            continue
        accepted = set(spec.split("|")) & sold
        assert re.fullmatch(job.instance_type_pattern, "g4dn.xlarge") is not None if "T4" in accepted \
            else re.fullmatch(job.instance_type_pattern, "g4dn.xlarge") is None
        assert (re.fullmatch(job.instance_type_pattern, "p3.2xlarge") is not None) == ("V100M16" in accepted)
        # A model named twice (`V100M16|V100M32|V100M32`, 22 pods of the file) is one alternative, not two.
        alternatives = job.instance_type_pattern.split("|")
        assert len(alternatives) == len(set(alternatives))
