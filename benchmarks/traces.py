"""Make the benchmark's other traces, seeded: in the plain format (with a `submission` column), or for
`gpushare` an openb pod list.

    python -m benchmarks.traces synthetic --seed 1 --output benchmarks/data/synthetic_ml_workload.csv
    python -m benchmarks.traces resample --seed 1 --output benchmarks/data/openb_resampled.csv
                                         [--source benchmarks/data/openb_pod_list_default.csv]
    python -m benchmarks.traces gpushare --seed 1 --fractional-share 1.0 --output gpushare100.csv
                                         [--source benchmarks/data/openb_pod_list_default.csv]

- synthetic: an ML team's month (--days, 30) of submissions arriving as a Poisson process, busier in
  working hours (x3 from 09:00 to 18:00 on weekdays), of three kinds:
  * hyperparameter sweeps (55% of submissions): 8 to 64 jobs of one shape (1 or 2 GPUs, 4 to 24 vCPUs
    per GPU, 16 to 96 GiB), runtimes log-normal around a median drawn per sweep (20 minutes to 8 hours),
    spread 0.3 within the sweep;
  * big trainings (15%): 1 to 3 jobs of 4 or 8 GPUs (24 to 90 vCPUs and 90 to 340 GiB per 4 GPUs),
    median 1 day (spread 0.9: some a week); a third of those that fit one are tied to A100s or H100s
    (p4d / p5 patterns);
  * batch-inference ranges (30%): 20 to 120 jobs of 1 GPU, 3 to 16 vCPUs and 10 to 60 GiB, a median of
    5 to 60 minutes, spread 0.25; a quarter need g6 (L4) or g5 (A10G).
  Shapes are drawn per submission, so a month holds a few hundred kinds of job.
- resample: the shared openb trace's GPU pods drawn with replacement (as many as it has), each keeping
  its shape and runtime, arriving at the source's submit times shifted by a random day and
  re-sorted: the same kinds of job and the same load over time, another sequence.
- gpushare: an openb pod list whose GPU pods ask for part of one GPU in the share --fractional-share
  (1.0: all of them), as the trace's published variants emphasise GPU-sharing pods
  (alibaba/clusterdata, cluster-trace-gpu-v2023: `openb_pod_list_gpushare20.csv` to `...100.csv`,
  "sampled from the default one"): as many GPU pods as the source has, each drawn with replacement from
  its fractional pods (`num_gpu` 1, `gpu_milli` under 1000) with that probability and from its other GPU
  pods otherwise, keeping its shape and its own times. CPU-only pods are left out (the benchmark
  excludes them anyway). Run it with `--share-fractional-gpus`.

Every figure is drawn from random.Random(seed); the same seed writes the same file.
"""

from __future__ import annotations

import argparse
import csv
import math
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

from benchmarks.scheduler.trace import read_trace  # noqa: E402

HEADER = ("submit_s", "duration_s", "gpus", "vcpus", "memory_mib", "instance_type", "submission")
DAY = 86_400.0
GIB = 1024


def _lognormal(rng: random.Random, median: float, sigma: float) -> float:
    return median * math.exp(rng.gauss(0.0, sigma))


def _arrivals(rng: random.Random, days: float, per_day: float) -> list[float]:
    """Submission times: a Poisson process, three times as busy in weekday working hours (thinning)."""
    times, t, peak = [], 0.0, per_day / DAY * 3
    while True:
        t += rng.expovariate(peak)
        if t >= days * DAY:
            return times
        hour, weekday = (t % DAY) / 3600, int(t // DAY) % 7 < 5
        if rng.random() < (1.0 if weekday and 9 <= hour < 18 else 1 / 3):
            times.append(t)


def synthetic(seed: int, days: float, submissions_per_day: float) -> list[tuple]:
    rng = random.Random(seed)
    rows = []
    for n, submit in enumerate(_arrivals(rng, days, submissions_per_day)):
        submission = f"sub-{n:05d}"
        kind = rng.random()
        if kind < 0.55:  # a sweep
            gpus = rng.choice((1, 1, 1, 2))
            vcpus = float(rng.randrange(4, 25, 2) * gpus)
            memory = rng.randrange(16, 97, 8) * GIB
            median = math.exp(rng.uniform(math.log(1200), math.log(8 * 3600)))
            jobs = [(gpus, vcpus, memory, None, _lognormal(rng, median, 0.3)) for _ in range(rng.randint(8, 64))]
        elif kind < 0.70:  # a big training
            gpus = rng.choice((4, 8))
            vcpus = rng.choice((24, 32, 44, 48, 90)) * gpus // 4
            memory = rng.choice((90, 170, 340)) * GIB * gpus // 4
            # A third are tied to a GPU model: A100 (p4d) or H100 (p5), which hold them.
            pattern = rng.choice((None, None, r"p4d\..*", r"p5\..*")) if vcpus <= 96 else None
            jobs = [(gpus, float(vcpus), memory, pattern, _lognormal(rng, DAY, 0.9)) for _ in range(rng.randint(1, 3))]
        else:  # batch inference over ranges
            vcpus = float(rng.randrange(3, 17))
            memory = rng.randrange(10, 61, 2) * GIB
            pattern = rng.choice((r"g6\..*", r"g5\..*")) if rng.random() < 0.25 else None
            median = math.exp(rng.uniform(math.log(300), math.log(3600)))
            jobs = [(1, vcpus, memory, pattern, _lognormal(rng, median, 0.25)) for _ in range(rng.randint(20, 120))]
        for gpus, vcpus, memory, pattern, duration in jobs:
            rows.append((round(submit, 1), round(max(60.0, duration), 1), gpus, round(vcpus, 2), int(memory),
                         pattern or "", submission))
    return rows


def resample(seed: int, source: Path) -> list[tuple]:
    rng = random.Random(seed)
    jobs = read_trace(source).jobs
    rows = []
    for n in range(len(jobs)):
        job = rng.choice(jobs)
        submit = max(0.0, job.submit_s + rng.uniform(-DAY, DAY))
        rows.append((round(submit, 1), round(job.duration_s, 1), job.gpus, job.vcpus, job.memory_mib,
                     job.instance_type_pattern or "", f"resample-{n:05d}"))
    return rows


OPENB_HEADER = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec", "qos", "pod_phase",
                "creation_time", "deletion_time", "scheduled_time")


def gpushare(seed: int, source: Path, fractional_share: float) -> tuple[tuple[str, ...], list[tuple]]:
    """The header (the source's openb columns: a list without times stays one) and the drawn pods."""
    with source.open(newline="") as handle:
        reader = csv.DictReader(handle)
        header = tuple(c for c in OPENB_HEADER if c in (reader.fieldnames or ()))
        pods = [row for row in reader if int(row["num_gpu"] or 0) >= 1]
    fractional, whole = [], []
    for pod in pods:
        (fractional if int(pod["num_gpu"]) == 1 and 0 < int(pod["gpu_milli"] or 0) < 1000 else whole).append(pod)
    if not fractional and fractional_share > 0 or not whole and fractional_share < 1:
        raise ValueError(f"{source}: no {'fractional' if not fractional else 'whole-GPU'} pods to draw from")
    rng = random.Random(seed)
    rows = []
    for n in range(len(pods)):
        pod = rng.choice(fractional if rng.random() < fractional_share else whole)
        rows.append((f"gpushare-pod-{n:05d}", *(pod[column] for column in header[1:])))
    return header, rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.traces", description=__doc__.splitlines()[0])
    parser.add_argument("kind", choices=("synthetic", "resample", "gpushare"))
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--output", type=Path, required=True)
    parser.add_argument("--days", type=float, default=30.0, help="synthetic: how long the workload lasts")
    parser.add_argument("--submissions-per-day", type=float, default=8.0, help="synthetic: the mean rate")
    parser.add_argument("--source", type=Path, default=ROOT / "benchmarks" / "data" / "openb_pod_list_default.csv",
                        help="resample, gpushare: the openb pod list to draw from")
    parser.add_argument("--fractional-share", type=float, default=1.0,
                        help="gpushare: the share of GPU pods drawn from those asking for part of a GPU")
    args = parser.parse_args(argv)
    if args.days <= 0 or args.submissions_per_day <= 0:
        parser.error("--days and --submissions-per-day must be > 0")
    if not 0 <= args.fractional_share <= 1:
        parser.error(f"--fractional-share must be in [0, 1], not {args.fractional_share}")
    if args.kind == "gpushare":
        try:
            header, rows = gpushare(args.seed, args.source, args.fractional_share)
        except (OSError, KeyError, ValueError) as error:
            parser.error(f"gpushare: {error}")
        summary = f"{len(rows)} GPU pods"
    else:
        rows = synthetic(args.seed, args.days, args.submissions_per_day) if args.kind == "synthetic" \
            else resample(args.seed, args.source)
        rows.sort(key=lambda r: (r[0], r[6]))
        header, summary = HEADER, f"{len(rows)} jobs in {len({r[6] for r in rows})} submissions"
    with args.output.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows(rows)
    print(f"{args.output}: {summary}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
