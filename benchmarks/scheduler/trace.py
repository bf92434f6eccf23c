"""Read a trace into jobs: the Alibaba openb pod list or a plain CSV, recognised from the header.

Plain:  submit_s,duration_s,gpus,vcpus,memory_mib[,instance_type][,submission][,gpu_memory_mib]
        (instance_type: a regex, full match; submission: jobs sharing it are one sweep or batch range;
        gpu_memory_mib > 0 with gpus 0: the job shares one GPU, asking that much of its memory)
openb:  name,cpu_milli,memory_mib,num_gpu,gpu_milli[,gpu_spec][,qos,pod_phase][,creation_time,deletion_time,
        scheduled_time], in any order   (a pod list without the time columns has no times: it runs in
        snapshot mode; the publishers' multigpu lists have the first five columns alone)

openb mapping: submit = creation_time; duration = deletion_time - scheduled_time when the pod was
scheduled, else deletion_time - creation_time (it waited that long and was then removed); vCPUs =
cpu_milli / 1000; a fractional GPU (gpu_milli < 1000) takes one whole GPU, or with `share_fractional`
(--share-fractional-gpus) shares one: it asks gpu_milli / 1000 of the reference GPU's shareable memory
(`reference_gpu_memory_mib`: the smallest GPU the benchmark's instances have, so it fits any of them);
gpu_spec names a GPU model: T4 and V100 become the instance-type patterns where AWS sells them (g4dn,
p3), others (P100, and the undisclosed G2, G3) have no AWS equivalent: such a pod is dropped, counted
(a pod that accepts several models keeps the ones AWS sells). Pods without a GPU are left out, counted:
an mlfleet job needs at least one GPU. An openb pod is its own submission (the list does not group them).
"""

from __future__ import annotations

import csv
import math
import re
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path

PLAIN = ("submit_s", "duration_s", "gpus", "vcpus", "memory_mib")
PLAIN_OPTIONAL = {"instance_type", "submission", "gpu_memory_mib"}
# gpu_spec is not required: the publishers' multigpu20..50 lists have only these five columns.
OPENB = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")
OPENB_TIMES = ("creation_time", "deletion_time", "scheduled_time")
# openb GPU models (its node list: T4, V100M16, V100M32, A10, P100, G2, G3) on the AWS families with them.
# AWS sells an A10 variant, the A10G (g5, 24 GB like the A10); P100, G2 and G3 it does not.
GPU_MODEL_PATTERNS = {"T4": r"g4dn\..*", "V100M16": r"p3\..*", "V100M32": r"p3dn\..*", "V100": r"p3(dn)?\..*",
                      "A10": r"g5\..*"}


class TraceError(ValueError):
    """A trace file that cannot be read; the message names the file, line and column."""


@dataclass(frozen=True)
class TraceJob:
    job_id: str
    submit_s: float
    duration_s: float
    gpus: int
    vcpus: float
    memory_mib: int
    instance_type_pattern: str | None = None
    submission: str | None = None  # None: its own submission
    # > 0 with gpus 0: the job shares one GPU (ECS nvidiaMps), asking this much of its memory.
    gpu_memory_mib: int = 0
    # The trace's own GPU count where it is a fraction (an openb pod's gpu_milli / 1000): what it counts
    # for completed GPU-hours and utilisation, whether or not a strategy lets it share.
    gpu_fraction: float | None = None
    # Run on a whole GPU by a strategy that cannot share (`as_whole`): the GPU memory it still needs.
    min_gpu_memory_mib: int = 0

    @property
    def submission_id(self) -> str:
        return self.submission or self.job_id

    @property
    def shares_gpu(self) -> bool:
        return self.gpus == 0 and self.gpu_memory_mib > 0

    @property
    def trace_gpus(self) -> float:
        return self.gpu_fraction if self.gpu_fraction is not None else float(self.gpus)

    def as_whole(self) -> TraceJob:
        """The job as a strategy that cannot share GPUs runs it: one whole GPU, with at least the memory
        it asked to share (a job that needs 20 GiB of GPU memory runs on no 16 GiB GPU, shared or not)."""
        return replace(self, gpus=1, gpu_memory_mib=0, min_gpu_memory_mib=self.gpu_memory_mib) \
            if self.shares_gpu else self


@dataclass
class Trace:
    path: str
    format: str
    jobs: list[TraceJob]
    excluded: Counter = field(default_factory=Counter)
    timed: bool = True  # False: an openb pod list without time columns (snapshot only)


def read_trace(path: Path, limit: int | None = None, *, share_fractional: bool = False,
               reference_gpu_memory_mib: int = 0) -> Trace:
    try:
        return _read(path, limit, share_fractional, reference_gpu_memory_mib)
    except UnicodeDecodeError:
        raise TraceError(_undecodable(path)) from None


def _undecodable(path: Path) -> str:
    """Where a trace is not UTF-8: the decoder reads ahead in blocks, so its own position names no line."""
    with Path(path).open("rb") as handle:
        header = handle.readline().decode("utf-8-sig", "replace").strip().split(",")
        handle.seek(0)
        for line, raw in enumerate(handle, start=1):
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError as error:
                column = raw[:error.start].count(b",")
                where = f", column {header[column].strip()}" if line > 1 and column < len(header) else ""
                return (f"{path}: line {line}{where}: byte {raw[error.start]:#04x} is not UTF-8 text "
                        "(save the trace as UTF-8)")
    return f"{path}: not UTF-8 text"


def _records(path: Path, reader):
    """Each row with the line it starts on (a quoted value may hold line breaks)."""
    try:
        line = 1
        for row in reader:
            yield line, row
            line = reader.line_num + 1
    except csv.Error as error:  # a field past the csv module's limit (an unclosed quote reads to the end)
        raise TraceError(f"{path}: line {reader.line_num}: {error}") from None


def _read(path: Path, limit: int | None, share_fractional: bool, reference_gpu_memory_mib: int) -> Trace:
    # utf-8-sig: a byte-order mark (spreadsheet exports) is not part of the first column's name.
    with Path(path).open(newline="", encoding="utf-8-sig") as handle:
        reader = _records(path, csv.reader(handle))
        header = tuple(h.strip() for h in next(reader, (1, ()))[1])
        if not any(header):
            raise TraceError(f"{path}: line 1: no header (the file is empty or starts with a blank line)")
        repeated = sorted(c for c, n in Counter(header).items() if n > 1)
        if repeated:
            raise TraceError(f"{path}: line 1: column {', '.join(map(repr, repeated))} more than once in the header")
        if header[:5] == PLAIN and set(header[5:]) <= PLAIN_OPTIONAL:
            kind = "plain"
        elif set(OPENB) <= set(header):
            kind = "openb"
        else:
            raise TraceError(f"{path}: line 1: header {','.join(header)!r} is neither the plain format "
                             f"({','.join(PLAIN)}[,instance_type][,submission][,gpu_memory_mib]) nor the openb "
                             f"pod list ({','.join(OPENB)}[,...])")
        timed = kind == "plain" or set(OPENB_TIMES[:2]) <= set(header)
        trace = Trace(str(path), kind, [], timed=timed)
        names: dict[str, int] = {}  # openb pod name -> its line
        for line, row in reader:
            if not row:
                continue
            if len(row) != len(header):  # zip would read a short row's last columns as empty, and drop extras
                raise TraceError(f"{path}: line {line}" + (
                    f", column {header[len(row)]}: missing" if len(row) < len(header) else
                    f", column {len(header) + 1}: more fields than the header's") +
                    f" ({len(row)} fields, the header has {len(header)}; a value with a comma must be quoted)")
            values = dict(zip(header, row))
            if kind == "openb":  # the name is the job's id: two pods of one name would be one job, silently
                name = values["name"].strip()
                if not name or name in names:
                    raise TraceError(f"{path}: line {line}, column name: " + (
                        f"{name!r} is the name of the pod on line {names[name]} too" if name else "empty"))
                names[name] = line
            try:
                job = _plain(values, line) if kind == "plain" else _openb(
                    values, line, trace.excluded, timed, reference_gpu_memory_mib if share_fractional else 0)
            except TraceError as error:
                raise TraceError(f"{path}: {error}") from None
            if job is not None:
                trace.jobs.append(job)
                if limit and len(trace.jobs) >= limit:
                    break
    trace.jobs.sort(key=lambda j: (j.submit_s, j.job_id))
    return trace


def _number(values: dict, column: str, line: int, kind=float, minimum=0.0):
    raw = values.get(column, "")
    try:
        value = kind(float(raw)) if kind is int and float(raw).is_integer() else kind(raw)
    except (TypeError, ValueError):
        raise TraceError(f"line {line}, column {column}: {raw!r} is not a number") from None
    if not math.isfinite(value):  # float() reads 'nan' and 'inf'; NaN compares false with every bound
        raise TraceError(f"line {line}, column {column}: {raw!r} is not a finite number")
    if value < minimum:
        raise TraceError(f"line {line}, column {column}: {raw!r} is below {minimum}")
    return value


# The longest run a trace may hold. The shared trace's longest pod runs 149 days; a run of 10^12 s (a
# timestamp in milliseconds written as seconds) kept the replay's expected completions computing for hours.
MAX_DURATION_S = 366 * 86_400


def _within_a_year(duration: float, column: str, raw: str, line: int) -> None:
    if duration > MAX_DURATION_S:
        raise TraceError(f"line {line}, column {column}: {raw!r} makes a run of {duration / 86_400:,.0f} days, "
                         f"longer than a year ({MAX_DURATION_S:,} s): are the times in milliseconds?")


def _plain(values: dict, line: int) -> TraceJob:
    pattern = values.get("instance_type") or None
    if pattern is not None:
        try:
            re.compile(pattern)
        except re.error as error:
            raise TraceError(f"line {line}, column instance_type: {pattern!r} is not a regular expression "
                             f"({error})") from None
    gpu_memory = _number(values, "gpu_memory_mib", line, int, 0) if values.get("gpu_memory_mib") else 0
    gpus = _number(values, "gpus", line, int, 0 if gpu_memory else 1)
    if gpus and gpu_memory:
        raise TraceError(f"line {line}, column gpu_memory_mib: {gpu_memory} with gpus {gpus}: a job asks for whole "
                         "GPUs or for part of one, not both (gpus 0 to share a GPU)")
    duration = _number(values, "duration_s", line)
    _within_a_year(duration, "duration_s", values["duration_s"].strip(), line)
    return TraceJob(f"job-{line:07d}", _number(values, "submit_s", line), duration,
                    gpus, _number(values, "vcpus", line, float, 0),
                    _number(values, "memory_mib", line, int, 0), pattern, values.get("submission") or None,
                    gpu_memory_mib=gpu_memory)


def _openb(values: dict, line: int, excluded: Counter, timed: bool, reference_gpu_memory_mib: int) -> TraceJob | None:
    gpus = _number(values, "num_gpu", line, int)
    if gpus == 0:
        excluded["no_gpu"] += 1
        return None
    milli = _number(values, "gpu_milli", line, int)
    fraction = milli / 1000 if gpus == 1 and 0 < milli < 1000 else None
    gpu_memory = 0
    if fraction is not None and reference_gpu_memory_mib:
        gpus, gpu_memory = 0, max(1, reference_gpu_memory_mib * milli // 1000)
    spec = values.get("gpu_spec", "").strip()
    if spec.lower() == "nan":  # the publishers' README writes no constraint as pandas does: `nan`
        spec = ""
    pattern = None
    if spec:
        # Each model once: the publishers' gpuspec33 variant names one twice (`V100M16|V100M32|V100M32`).
        # Models in any case (`t4`): the publishers write them in capitals, hand-made lists may not.
        models = list(dict.fromkeys(GPU_MODEL_PATTERNS[m.strip().upper()] for m in spec.split("|")
                                    if m.strip().upper() in GPU_MODEL_PATTERNS))
        if not models:
            excluded[f"gpu_spec_without_aws_equivalent:{spec}"] += 1
            return None
        pattern = "|".join(f"(?:{m})" for m in models)
    created, duration = 0.0, 0.0
    if timed:
        created = _number(values, "creation_time", line)
        deleted = _number(values, "deletion_time", line)
        scheduled = values.get("scheduled_time", "").strip()
        start = _number(values, "scheduled_time", line) if scheduled else created
        # Times out of order make no duration: max(1, negative) would run such a pod for a second, silently.
        for column, value, earlier, before in (("scheduled_time", start, "creation_time", created),
                                               ("deletion_time", deleted, "scheduled_time" if scheduled
                                                else "creation_time", start)):
            if value < before:
                raise TraceError(f"line {line}, column {column}: {values[column].strip()!r} is before "
                                 f"{earlier} {values[earlier].strip()!r}")
        duration = max(1.0, deleted - start)  # deleted the second it was scheduled: the simulation's shortest job
        _within_a_year(duration, "deletion_time", values["deletion_time"].strip(), line)
    return TraceJob(values["name"].strip(), created, duration, gpus,
                    _number(values, "cpu_milli", line) / 1000, _number(values, "memory_mib", line, int), pattern,
                    gpu_memory_mib=gpu_memory, gpu_fraction=fraction)
