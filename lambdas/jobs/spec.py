"""A job spec: what one container run needs, validated once, expanded into the jobs of a submission.

Shared by the CLI (refuses a bad spec before anything is queued) and the Lambdas (read specs back from
the ledger). Standard library only, plus the instance catalog.

    spec = parse_spec({"image": "...", "command": [...], "gpus": 1, "vcpus": 4, "memory_mib": 16384},
                      fleet_regions=("us-east-1",), catalog=load_catalog(), default_max_attempts=3)
    specs = expand(spec, sweep={"lr": ["0.1", "0.01"]}, batches="0:10000:500")
    jobs = assign_ids(new_submission_id(), specs)

Placeholders: `{name}` in command arguments and environment values is replaced by the sweep parameter
`name` (or `{start}`/`{end}` for batches). `{{` and `}}` are literal braces and `${NAME}` is left for
the shell. A placeholder with no value is an error, never left in the command.
"""

from __future__ import annotations

import itertools
import re
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone

from lambdas.common.catalog import Catalog

SPOT, ON_DEMAND = "spot", "on-demand"
LIFECYCLES = (SPOT, ON_DEMAND)
MAX_ATTEMPTS_LIMIT = 10
# One submission is at most this many jobs: a typo in a sweep (a list of 10,000 values) is refused
# rather than flooding the queue; the ledger and queue take larger numbers across submissions.
MAX_JOBS_PER_SUBMISSION = 10_000
BATCH_START_ENV, BATCH_END_ENV = "MLFLEET_BATCH_START", "MLFLEET_BATCH_END"
# Environment names the runtime sets on every task; a spec may not set them.
RESERVED_ENV = ("MLFLEET_JOB_ID", "MLFLEET_ATTEMPT", "MLFLEET_CHECKPOINT_URI", "MLFLEET_CHECKPOINT_INTERVAL_MINUTES")
# How often a job may say it checkpoints (docs/jobs.md, "Checkpoints"): every minute to once a day.
CHECKPOINT_INTERVAL_LIMIT_MINUTES = 1440

KEYS = ("image", "command", "environment", "gpus", "vcpus", "memory_mib", "instance_type_pattern", "regions",
        "lifecycle", "max_attempts", "checkpoint_interval_minutes")
_PLACEHOLDER = re.compile(r"\{\{|\}\}|\$\{[^}]*\}|\{([A-Za-z_][A-Za-z0-9_]*)\}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SUBMISSION_ID = re.compile(r"sub-\d{14}-[0-9a-f]{6}")
_JOB_ID = re.compile(r"(sub-\d{14}-[0-9a-f]{6})-(\d{5})")


class SpecError(ValueError):
    """A job spec or an expansion is invalid; `problems` lists every bad key with its value."""

    def __init__(self, problems: Sequence[str]):
        self.problems = tuple(problems)
        super().__init__("invalid job spec:\n  - " + "\n  - ".join(self.problems))


@dataclass(frozen=True)
class JobSpec:
    image: str
    command: tuple[str, ...]
    gpus: int
    vcpus: float
    memory_mib: int
    max_attempts: int
    environment: Mapping[str, str] = field(default_factory=dict)
    instance_type_pattern: str | None = None
    regions: tuple[str, ...] = ()
    lifecycle: str | None = None
    # Minutes between the job's checkpoints, as the job declares them (None: it restarts from zero).
    checkpoint_interval_minutes: int | None = None

    def to_document(self) -> dict:
        """Plain JSON-able form (the ledger stores it; parse_spec reads it back)."""
        document = {"image": self.image, "command": list(self.command), "environment": dict(self.environment),
                    "gpus": self.gpus, "vcpus": self.vcpus, "memory_mib": self.memory_mib,
                    "instance_type_pattern": self.instance_type_pattern, "regions": list(self.regions),
                    "lifecycle": self.lifecycle, "max_attempts": self.max_attempts}
        if self.checkpoint_interval_minutes is not None:
            document["checkpoint_interval_minutes"] = self.checkpoint_interval_minutes
        return document


@dataclass(frozen=True)
class Job:
    job_id: str
    submission_id: str
    index: int
    spec: JobSpec


def _number(problems: list[str], key: str, value, kind, minimum, *, inclusive: bool, maximum=None):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (kind is int and not float(value).is_integer()):
        problems.append(f"{key}={value!r}: must be a{'n integer' if kind is int else ' number'}")
        return None
    if (value < minimum) if inclusive else (value <= minimum):
        problems.append(f"{key}={value!r}: must be {'>=' if inclusive else '>'} {minimum}")
        return None
    if maximum is not None and value > maximum:
        problems.append(f"{key}={value!r}: must be <= {maximum}")
        return None
    return kind(value)


def parse_spec(document: Mapping, *, fleet_regions: Sequence[str], catalog: Catalog,
               default_max_attempts: int, fleet_types: Mapping[str, Sequence[str]] | None = None) -> JobSpec:
    """Validate a spec document, naming every bad key and value in one SpecError.

    `fleet_types` (region -> the instance types the stack's fleets launch there) judges size against what
    the stack can run; without it, against every catalog type priced in the fleet regions.
    """
    problems: list[str] = []
    for key in sorted(set(document) - set(KEYS)):
        problems.append(f"{key}={document[key]!r}: unknown key (known: {', '.join(KEYS)})")

    image = document.get("image")
    if not isinstance(image, str) or not image.strip() or any(c.isspace() for c in image):
        problems.append(f"image={image!r}: must be a container image reference such as repo/name:tag")

    command = document.get("command", [])
    if not isinstance(command, (list, tuple)) or not all(isinstance(a, str) for a in command):
        problems.append(f"command={command!r}: must be a list of strings")
        command = []

    environment = document.get("environment") or {}
    if not isinstance(environment, Mapping):
        problems.append(f"environment={environment!r}: must be a mapping of NAME to string value")
        environment = {}
    for name, value in environment.items():
        if not isinstance(name, str) or not _ENV_NAME.fullmatch(name):
            problems.append(f"environment key {name!r}: not a valid variable name")
        elif name in RESERVED_ENV:
            problems.append(f"environment key {name!r}: set by mlfleet on every task, cannot be given")
        if not isinstance(value, str):
            problems.append(f"environment {name}={value!r}: value must be a string")

    gpus = _number(problems, "gpus", document.get("gpus"), int, 1, inclusive=True)
    vcpus = _number(problems, "vcpus", document.get("vcpus"), float, 0, inclusive=False)
    memory_mib = _number(problems, "memory_mib", document.get("memory_mib"), int, 0, inclusive=False)
    max_attempts = _number(problems, "max_attempts", document.get("max_attempts", default_max_attempts), int, 1,
                           inclusive=True, maximum=MAX_ATTEMPTS_LIMIT)
    interval = document.get("checkpoint_interval_minutes")
    if interval is not None:
        interval = _number(problems, "checkpoint_interval_minutes", interval, int, 1, inclusive=True,
                           maximum=CHECKPOINT_INTERVAL_LIMIT_MINUTES)

    pattern = document.get("instance_type_pattern")
    compiled = None
    if pattern is not None:
        try:
            compiled = re.compile(pattern) if isinstance(pattern, str) and pattern else None
            if compiled is None:
                problems.append(f"instance_type_pattern={pattern!r}: must be a non-empty regular expression")
        except re.error as error:
            problems.append(f"instance_type_pattern={pattern!r}: not a regular expression ({error})")

    regions = document.get("regions") or ()
    if isinstance(regions, str) or not isinstance(regions, (list, tuple)):
        problems.append(f"regions={regions!r}: must be a list of region names")
        regions = ()
    for region in regions:
        if region not in fleet_regions:
            problems.append(f"regions: {region!r} is not a region of this stack's fleets ({', '.join(fleet_regions)})")

    lifecycle = document.get("lifecycle")
    if lifecycle is not None and lifecycle not in LIFECYCLES:
        problems.append(f"lifecycle={lifecycle!r}: must be one of {', '.join(LIFECYCLES)}")

    wanted = regions or fleet_regions
    if fleet_types is None:
        candidates = [(t, r) for t in catalog.types for r in wanted if r in t.regions()]
        where, holder = "catalog instance type", "catalog instance"
    else:
        candidates = [(catalog.get(name), r) for r in wanted for name in fleet_types.get(r, ()) if name in catalog]
        where = holder = "instance type of this stack's fleets"
    largest = max((t.gpus for t, _ in candidates), default=0)
    if gpus is not None and gpus > largest:
        problems.append(f"gpus={gpus}: more GPUs than any {holder} has (largest: {largest})")
    elif None not in (gpus, vcpus, memory_mib) and not problems:
        fitting = [t for t, _ in candidates
                   if (compiled is None or compiled.fullmatch(t.name))
                   and t.gpus >= gpus and t.schedulable_vcpus >= vcpus and t.schedulable_memory_mib >= memory_mib]
        if not fitting:
            problems.append(f"gpus={gpus}, vcpus={vcpus:g}, memory_mib={memory_mib}: no {where} "
                            f"{'matching ' + repr(pattern) + ' ' if pattern else ''}in "
                            f"{', '.join(regions or fleet_regions)} holds that much")
    if problems:
        raise SpecError(problems)
    return JobSpec(image=image, command=tuple(command), environment=dict(environment), gpus=gpus, vcpus=vcpus,
                   memory_mib=memory_mib, max_attempts=max_attempts, instance_type_pattern=pattern,
                   regions=tuple(regions), lifecycle=lifecycle, checkpoint_interval_minutes=interval)


def spec_from_document(document: Mapping) -> JobSpec:
    """A spec already validated at submission, read back from the ledger (no catalog checks again)."""
    return JobSpec(image=document["image"], command=tuple(document["command"]),
                   environment=dict(document.get("environment") or {}), gpus=int(document["gpus"]),
                   vcpus=float(document["vcpus"]), memory_mib=int(document["memory_mib"]),
                   max_attempts=int(document["max_attempts"]),
                   instance_type_pattern=document.get("instance_type_pattern") or None,
                   regions=tuple(document.get("regions") or ()), lifecycle=document.get("lifecycle") or None,
                   checkpoint_interval_minutes=document.get("checkpoint_interval_minutes"))


def parse_batches(text: str) -> list[tuple[int, int]]:
    """"0:10000:500" -> [(0, 500), (500, 1000), ..., (9500, 10000)]; the last range may be shorter."""
    parts = text.split(":") if isinstance(text, str) else []
    try:
        start, end, step = (int(p) for p in parts)
    except ValueError:
        raise SpecError([f"batches={text!r}: must be START:END:STEP with integers, e.g. 0:10000:500"]) from None
    problems = []
    if step <= 0:
        problems.append(f"batches={text!r}: STEP must be > 0")
    if start >= end:
        problems.append(f"batches={text!r}: START must be < END")
    if problems:
        raise SpecError(problems)
    return [(lo, min(lo + step, end)) for lo in range(start, end, step)]


def substitute(text: str, values: Mapping[str, str], where: str) -> str:
    """Replace `{name}` placeholders; `{{`/`}}` are literal braces, `${...}` is the shell's."""
    def one(match: re.Match) -> str:
        token = match.group(0)
        if token == "{{":
            return "{"
        if token == "}}":
            return "}"
        if token.startswith("$"):
            return token
        name = match.group(1)
        if name not in values:
            known = ", ".join(sorted(values)) or "none"
            raise SpecError([f"{where}: placeholder {{{name}}} has no value (sweep/batch parameters: {known})"])
        return values[name]
    return _PLACEHOLDER.sub(one, text)


def expand(spec: JobSpec, *, sweep: Mapping[str, Sequence[str]] | None = None, batches: str | None = None) -> list[JobSpec]:
    """The jobs of a submission: the cross product of sweep values (x batch ranges), substituted.

    A plain spec (no sweep, no batches) is one job and its command is not rewritten.
    """
    sweep = dict(sweep or {})
    problems = []
    for name, values in sweep.items():
        if not _ENV_NAME.fullmatch(name):
            problems.append(f"sweep parameter {name!r}: must be a name like lr or batch_size")
        if name in ("start", "end") and batches is not None:
            problems.append(f"sweep parameter {name!r}: reserved for --batches")
        if not values:
            problems.append(f"sweep parameter {name}: has no values")
    if problems:
        raise SpecError(problems)
    if not sweep and batches is None:
        return [spec]
    ranges = parse_batches(batches) if batches is not None else [None]
    names = sorted(sweep)
    count = len(ranges)
    for name in names:
        count *= len(sweep[name])
    if count > MAX_JOBS_PER_SUBMISSION:
        raise SpecError([f"submission expands into {count} jobs, more than {MAX_JOBS_PER_SUBMISSION} per submission"])
    jobs = []
    for combo in itertools.product(*(sweep[n] for n in names)):
        for batch in ranges:
            values = {name: str(value) for name, value in zip(names, combo)}
            environment = dict(spec.environment)
            if batch is not None:
                values.update(start=str(batch[0]), end=str(batch[1]))
                environment.update({BATCH_START_ENV: str(batch[0]), BATCH_END_ENV: str(batch[1])})
            command = tuple(substitute(arg, values, f"command argument {arg!r}") for arg in spec.command)
            environment = {k: substitute(v, values, f"environment {k}={v!r}") for k, v in environment.items()}
            jobs.append(replace(spec, command=command, environment=environment))
    return jobs


def expand_sweep(spec: JobSpec, params: Mapping[str, Sequence[str]]) -> list[JobSpec]:
    return expand(spec, sweep=params)


def expand_batches(spec: JobSpec, batches: str) -> list[JobSpec]:
    return expand(spec, batches=batches)


def new_submission_id(now: datetime | None = None, token: str | None = None) -> str:
    stamp = (now or datetime.now(timezone.utc)).astimezone(timezone.utc).strftime("%Y%m%d%H%M%S")
    return f"sub-{stamp}-{token or secrets.token_hex(3)}"


def job_id(submission_id: str, index: int) -> str:
    return f"{submission_id}-{index:05d}"


def is_submission_id(text: str) -> bool:
    return _SUBMISSION_ID.fullmatch(text) is not None


def is_job_id(text: str) -> bool:
    return _JOB_ID.fullmatch(text) is not None


def submission_of(job_id: str) -> str | None:
    """The submission a job id belongs to (`sub-...-00042` -> `sub-...`), or None for anything else."""
    match = _JOB_ID.fullmatch(job_id or "")
    return match.group(1) if match else None


def assign_ids(submission_id: str, specs: Sequence[JobSpec]) -> list[Job]:
    return [Job(job_id(submission_id, index), submission_id, index, spec) for index, spec in enumerate(specs)]


_MEMORY = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(GiB|MiB|G|M|)\s*", re.IGNORECASE)


def parse_memory(text: str) -> int:
    """"16GiB" -> 16384, "512MiB" -> 512, "2048" -> 2048 (MiB)."""
    match = _MEMORY.fullmatch(text or "")
    if not match:
        raise SpecError([f"memory={text!r}: must be a size like 16GiB or 512MiB"])
    amount, unit = float(match.group(1)), match.group(2).lower()
    mib = amount * 1024 if unit in ("gib", "g") else amount
    if not mib.is_integer():
        raise SpecError([f"memory={text!r}: must be a whole number of MiB"])
    return int(mib)
