"""A job spec: what one container run needs, validated once, expanded into the jobs of a submission.

Shared by the CLI (refuses a bad spec before anything is queued) and the Lambdas (read specs back from
the ledger). Standard library only, plus the instance catalog.

    spec = parse_spec({"image": "...", "command": [...], "gpus": 1, "vcpus": 4, "memory_mib": 16384},
                      fleet_regions=("us-east-1",), catalog=load_catalog(), default_max_attempts=3)
    specs = expand(spec, sweep={"lr": ["0.1", "0.01"]}, batches="0:10000:500")
    jobs = assign_ids(new_submission_id(), specs)

Placeholders: `{name}` in command arguments and environment values is replaced by the sweep parameter
`name` (or `{start}`/`{end}` for batches). `{{` and `}}` are literal braces and `${NAME}` is left for
the shell. A placeholder with no value is an error, never left in the command; so is a sweep parameter
no placeholder uses (it would queue identical jobs) and a sweep value given twice.

Images: the reference must follow distribution/reference's grammar, and every region the job may run in
must be able to pull it (lambdas/common/registries.py): a region without internet egress reaches only its
own ECR and ECR Public through its pull-through cache. ECR Public images are pulled through the region's
cache wherever the stack has one, as the default job image is (`JobSpec.images`, `image_for`).

A job takes whole GPUs (`gpus`), or part of one (`gpu_memory_mib`, optionally `gpu_compute_percent`): ECS
shares that GPU with other such jobs through NVIDIA MPS (the `nvidiaMps` sharing strategy), limits the
job to that much GPU memory, and places it by free GPU memory. docs/jobs.md says when to share and when not.

Secrets are passed by reference: `secrets: {NAME: ref}` names an SSM parameter (`/mlfleet/<env>/...` or
its ARN) or a Secrets Manager secret ARN (`...:secret:mlfleet/<env>/...`); ECS reads it with the task
execution role and sets NAME in the container, so the value is in neither the ledger nor the task's
overrides. A plain `environment` value that looks like a credential is refused.
"""

from __future__ import annotations

import difflib
import itertools
import json
import math
import re
import secrets
import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone

from ..common.catalog import Catalog, InstanceType
from ..common.logs import quoted
from ..common.registries import DOCKER_HUB, ECR_PUBLIC, reachable_without_egress, reference_problem, \
    registry_of, through_cache
from .checkpoints import INTERVAL_VARIABLE, URI_VARIABLE, uri
from .credentials import credential_problem
from .credentials import reference_problem as secret_reference_problem

SPOT, ON_DEMAND = "spot", "on-demand"
# A job's priority within its team: 0-9, higher first (lambdas/scheduler/planning/shares.py).
PRIORITIES = range(0, 10)
DEFAULT_PRIORITY = 5
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

KEYS = ("image", "command", "environment", "secrets", "gpus", "gpu_memory_mib", "gpu_compute_percent", "vcpus",
        "memory_mib", "instance_type_pattern", "regions", "lifecycle", "max_attempts", "checkpoint_interval_minutes",
        "retry_on_exit_codes", "team", "priority", "notify", "expected_runtime_s")
# DynamoDB's smallest positive number ("Positive range: 1E-130 to 9.9999999999999999999999999999999999999E+125",
# the DynamoDB developer guide, "Data types"): a float spec value below it cannot be written to the ledger.
SMALLEST_NUMBER = 1e-130
# A runtime estimate beyond this is a typo (minutes given as seconds twice over), not a plan.
MAX_EXPECTED_RUNTIME_S = 90 * 86_400
# Keys of a spec file that belong to the submission, not to each job: `sweep: {name: [values]}`.
SUBMISSION_KEYS = ("sweep",)
# Exit codes are what the container's main process returns: 0-255, and 0 is success.
EXIT_CODES = range(1, 256)
# A team is a short name for cost reports and fair shares between teams (mlfleet:teams).
TEAM_NAME = re.compile(r"[a-z][a-z0-9-]{0,29}")
# Who hears about a submission's end: an e-mail address (subscribed once with `mlfleet notify subscribe`)
# or the environment's Slack channel.
SLACK = "slack"
EMAIL = re.compile(r"[^@\s]+@[^@\s]+\.[^@\s]+")
MAX_NOTIFY = 10
# The job container's name in the job task definition (components/compute/cluster.py JOB_CONTAINER_NAME).
JOB_CONTAINER_NAME = "job"
# "A total of 8192 characters are allowed for overrides. This limit includes the JSON formatting
# characters of the override structure." (ECS API reference, StartTask and RunTask `overrides`:
# https://docs.aws.amazon.com/AmazonECS/latest/APIReference/API_StartTask.html, and botocore's ecs model
# StartTaskRequest.overrides.) ECS refuses more with InvalidParameterException "Container Overrides
# length must be at most 8192".
OVERRIDES_LIMIT = 8192
# A submission's overrides are sized with an attempt of this many digits and a checkpoint bucket name of
# S3's longest (63 characters: the region's bucket is not known at submit).
_ATTEMPT_DIGITS, _BUCKET_NAME_LIMIT = 4, 63
_PLACEHOLDER = re.compile(r"\{\{|\}\}|\$\{[^}]*\}|\{([A-Za-z_][A-Za-z0-9_]*)\}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SUBMISSION_ID = re.compile(r"sub-\d{14}-[0-9a-f]{6}")
_JOB_ID = re.compile(r"(sub-\d{14}-[0-9a-f]{6})-(\d{5})")
_PLAIN_KEY = re.compile(r"[A-Za-z0-9_.-]+")


# A problem is shown whole up to this many characters. A longer one (a spec file's 240 KB value echoed) keeps
# its beginning, the key and the start of its value, and its end, what is wrong; the middle is left out.
PROBLEM_CHARS = 1000


def _brief(problem: str) -> str:
    if len(problem) <= PROBLEM_CHARS:
        return problem
    keep = PROBLEM_CHARS // 2
    return f"{problem[:keep]} ... ({len(problem) - 2 * keep:,} characters left out) ... {problem[-keep:]}"


class SpecError(ValueError):
    """A job spec or an expansion is invalid; `problems` lists every bad key with its value."""

    def __init__(self, problems: Sequence[str]):
        self.problems = tuple(_brief(problem) for problem in problems)
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
    # Non-zero exit codes that mean "run it again" (while attempts remain); any other fails the job at once.
    retry_on_exit_codes: tuple[int, ...] = ()
    team: str | None = None
    priority: int = DEFAULT_PRIORITY
    # E-mail addresses and/or SLACK: told once when the whole submission has ended.
    notify: tuple[str, ...] = ()
    # region -> the reference that region pulls, where it is not `image` (ECR Public through the cache).
    images: Mapping[str, str] = field(default_factory=dict)
    # The user's estimate of one run's length, for the scheduler's duration-aware placement (optional).
    expected_runtime_s: float | None = None
    # NAME -> SSM parameter name or ARN, or Secrets Manager secret ARN: references only, never values.
    secrets: Mapping[str, str] = field(default_factory=dict)
    # Part of one GPU instead of whole ones (gpus is then 0): MiB of its memory, and optionally at most this
    # percentage of its compute (ECS nvidiaMps `memory` and `maxComputePercent`).
    gpu_memory_mib: int = 0
    gpu_compute_percent: int | None = None

    @property
    def shares_gpu(self) -> bool:
        return self.gpu_memory_mib > 0

    def image_for(self, region: str) -> str:
        return self.images.get(region, self.image)

    def to_document(self) -> dict:
        """Plain JSON-able form (the ledger stores it; parse_spec reads it back). Optional keys only when set."""
        document = {"image": self.image, "command": list(self.command), "environment": dict(self.environment),
                    "gpus": self.gpus, "vcpus": self.vcpus, "memory_mib": self.memory_mib,
                    "instance_type_pattern": self.instance_type_pattern, "regions": list(self.regions),
                    "lifecycle": self.lifecycle, "max_attempts": self.max_attempts}
        optional = {"checkpoint_interval_minutes": self.checkpoint_interval_minutes,
                    "retry_on_exit_codes": list(self.retry_on_exit_codes), "team": self.team,
                    "notify": list(self.notify), "images": dict(self.images),
                    "expected_runtime_s": self.expected_runtime_s, "secrets": dict(self.secrets),
                    "gpu_memory_mib": self.gpu_memory_mib, "gpu_compute_percent": self.gpu_compute_percent}
        document.update({key: value for key, value in optional.items() if value})
        if self.priority != DEFAULT_PRIORITY:
            document["priority"] = self.priority
        return document


@dataclass(frozen=True)
class RegionPulls:
    """How a fleet region's machines pull images (the job-service parameter says, per region)."""
    internet_egress: bool
    # The region's ECR pull-through cache for ECR Public (components/network/image_cache.py), if any:
    # "<account>.dkr.ecr.<region>.amazonaws.com" and the environment's prefix "mlfleet/<env>".
    cache_registry: str | None = None
    cache_prefix: str | None = None


@dataclass(frozen=True)
class Job:
    job_id: str
    submission_id: str
    index: int
    spec: JobSpec


# What a spec that leaves out a required key is told (the command's flags and the spec file's keys).
MISSING = {
    "image": "the container image to run (--image REF, or image: in the spec file)",
    "gpus": "the whole GPUs each job reserves (--gpus N, or gpus: in the spec file; or part of one GPU with "
            "--gpu-memory SIZE, gpu_memory_mib:)",
    "vcpus": "the vCPUs each job reserves (--vcpus N, or vcpus: in the spec file)",
    "memory_mib": "the memory each job reserves (--memory 16GiB, or memory_mib: in the spec file)",
}


def _required_number(problems: list[str], document: Mapping, key: str, kind, minimum, *, inclusive: bool):
    if document.get(key) is None:
        problems.append(f"{key}: missing: {MISSING[key]}")
        return None
    return _number(problems, key, document[key], kind, minimum, inclusive=inclusive)


def _number(problems: list[str], key: str, value, kind, minimum, *, inclusive: bool, maximum=None):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or \
            (kind is int and isinstance(value, float) and not value.is_integer()):
        problems.append(f"{key}={value!r}: must be a{'n integer' if kind is int else ' number'}")
        return None
    # YAML's .nan/.inf and Python's json (NaN, Infinity) give these; NaN compares false with every bound.
    if isinstance(value, float) and not math.isfinite(value):
        problems.append(f"{key}={value!r}: must be a finite number")
        return None
    # An integer past float's range (vcpus: 1e400 written out) cannot be held, let alone be a size.
    if kind is float and abs(value) > sys.float_info.max:
        problems.append(f"{key}={value!r}: too large")
        return None
    # The ledger keeps the spec in DynamoDB, whose numbers reach down to 1E-130 (boto3 refuses 1e-300 with
    # decimal.Underflow, after the submission id was printed); no size or time is that small anyway.
    if kind is float and 0 < abs(value) < SMALLEST_NUMBER:
        problems.append(f"{key}={value!r}: too small (the ledger stores numbers from {SMALLEST_NUMBER:g})")
        return None
    if (value < minimum) if inclusive else (value <= minimum):
        problems.append(f"{key}={value!r}: must be {'>=' if inclusive else '>'} {minimum}")
        return None
    if maximum is not None and value > maximum:
        problems.append(f"{key}={value!r}: must be <= {maximum}")
        return None
    return kind(value)


def fractional_gpus_problem(value) -> str | None:
    """`gpus: 0.5` is how many first ask for part of a GPU: the problem says how to ask for it, else None."""
    if not isinstance(value, float) or not math.isfinite(value):
        return None
    if 0 < value < 1:
        return (f"gpus={value!r}: must be a whole number of GPUs; for part of one GPU ask for its memory instead "
                f"(gpu_memory_mib: in the spec file, --gpu-memory 8GiB on the command line: docs/jobs.md, "
                f"'Sharing a GPU')")
    return None


def _named_values(problems: list[str], document: Mapping, key: str, what: str) -> Mapping:
    values = document.get(key) or {}
    if not isinstance(values, Mapping):
        problems.append(f"{key}={values!r}: must be a mapping of NAME to {what}")
        return {}
    return values


def _name_problem(key: str, name, taken: Mapping | None = None) -> str | None:
    if not isinstance(name, str) or not _ENV_NAME.fullmatch(name):
        return f"{key} key {name!r}: not a valid variable name"
    if name in RESERVED_ENV:
        return f"{key} key {name!r}: set by mlfleet on every task, cannot be given"
    if taken and name in taken:
        return f"{key} key {name!r}: already set by environment"
    return None


def parse_spec(document: Mapping, *, fleet_regions: Sequence[str], catalog: Catalog,
               default_max_attempts: int, fleet_types: Mapping[str, Sequence[str]] | None = None,
               pulls: Mapping[str, RegionPulls] | None = None, notify_channels: Sequence[str] = (),
               environment: str | None = None, teams: Sequence[str] = (),
               default_team: str | None = None) -> JobSpec:
    """Validate a spec document, naming every bad key and value in one SpecError.

    `fleet_types` (region -> the instance types the stack's fleets launch there) judges size against what
    the stack can run; without it, against every catalog type priced in the fleet regions. `pulls`
    (region -> RegionPulls) checks that each region the job may run in can pull its image. `notify_channels`
    says which of "email" and SLACK the environment can deliver. `environment` (the stack)
    scopes secret references; a spec with `secrets` needs it. `teams` (the stack's mlfleet:teams, if any):
    the team must be one of them, `default_team` when none is given. SUBMISSION_KEYS are left to the caller.
    """
    problems: list[str] = []
    known = (*KEYS, *SUBMISSION_KEYS)
    for key in sorted(set(document) - set(known), key=str):
        close = difflib.get_close_matches(str(key), known, n=1)
        hint = f"did you mean {close[0]}?" if close else f"known: {', '.join(known)}"
        problems.append(f"{_shown(key)}={document[key]!r}: unknown key ({hint})")

    image = document.get("image")
    image_problem = reference_problem(image) if isinstance(image, str) else "must be a container image reference"
    if image is None:
        problems.append(f"image: missing: {MISSING['image']}")
    elif image_problem:
        problems.append(f"image={image!r}: {image_problem}")

    command = document.get("command", [])
    if isinstance(command, str):
        problems.append(f"command={command!r}: must be a list of strings, one per argument: "
                        f"command: {json.dumps(command.split())}")
        command = []
    elif not isinstance(command, (list, tuple)) or not all(isinstance(a, str) for a in command):
        problems.append(f"command={command!r}: must be a list of strings")
        command = []

    environment_values = _named_values(problems, document, "environment", "string value")
    for name, value in environment_values.items():
        if problem := _name_problem("environment", name):
            problems.append(problem)  # the name alone: a value after a name that is none is no variable
        elif not isinstance(value, str):
            problems.append(f"environment {name}={value!r}: value must be a string")
        elif problem := credential_problem(name, value, environment):
            problems.append(problem)

    secret_refs = _named_values(problems, document, "secrets", "an SSM parameter or secret reference")
    for name, reference in secret_refs.items():
        if problem := _name_problem("secrets", name, taken=environment_values):
            problems.append(problem)
        elif environment is None:
            problems.append(f"secrets {name}={reference!r}: the environment the job runs in is not known here")
        elif problem := secret_reference_problem(name, reference, environment):
            problems.append(problem)

    gpu_memory_mib, gpu_compute_percent = _gpu_share(problems, document)
    if gpu_memory_mib is None:
        if problem := fractional_gpus_problem(document.get("gpus")):
            problems.append(problem)
            gpus = None
        else:
            gpus = _required_number(problems, document, "gpus", int, 1, inclusive=True)
    else:
        gpus = 0
    vcpus = _required_number(problems, document, "vcpus", float, 0, inclusive=False)
    memory_mib = _required_number(problems, document, "memory_mib", int, 0, inclusive=False)
    max_attempts = _number(problems, "max_attempts", document.get("max_attempts", default_max_attempts), int, 1,
                           inclusive=True, maximum=MAX_ATTEMPTS_LIMIT)
    interval = document.get("checkpoint_interval_minutes")
    if interval is not None:
        interval = _number(problems, "checkpoint_interval_minutes", interval, int, 1, inclusive=True,
                           maximum=CHECKPOINT_INTERVAL_LIMIT_MINUTES)
    expected_runtime_s = document.get("expected_runtime_s")
    if expected_runtime_s is not None:
        expected_runtime_s = _number(problems, "expected_runtime_s", expected_runtime_s, float, 0, inclusive=False,
                                     maximum=MAX_EXPECTED_RUNTIME_S)

    pattern = document.get("instance_type_pattern")
    compiled = None
    if pattern is not None:
        try:
            compiled = re.compile(pattern) if isinstance(pattern, str) and pattern else None
            if compiled is None:
                problems.append(f"instance_type_pattern={pattern!r}: must be a non-empty regular expression")
        except (re.error, RecursionError, OverflowError) as error:
            # sre refuses a repeat past its limit (`g5{99999999999}`) with OverflowError, and nesting
            # deeper than the interpreter's stack with RecursionError, not re.error.
            problems.append(f"instance_type_pattern={pattern!r}: not a regular expression ({error})")

    regions = document.get("regions") or ()
    if isinstance(regions, str) or not isinstance(regions, (list, tuple)):
        problems.append(f"regions={regions!r}: must be a list of region names")
        regions = ()
    for region in regions:
        if region not in fleet_regions:
            problems.append(f"regions: {region!r} is not a region of this stack's fleets ({', '.join(fleet_regions)})")
    # Only the stack's regions are looked up below (`regions: [[us-east-1]]` is no key of fleet_types or pulls).
    regions = [region for region in regions if region in fleet_regions]

    lifecycle = document.get("lifecycle")
    if lifecycle is not None and lifecycle not in LIFECYCLES:
        problems.append(f"lifecycle={lifecycle!r}: must be one of {', '.join(LIFECYCLES)}")

    retry = _exit_codes(problems, document.get("retry_on_exit_codes") or [], max_attempts)
    team = document.get("team")
    if team is not None and (not isinstance(team, str) or not TEAM_NAME.fullmatch(team)):
        problems.append(f"team={team!r}: must be a short name of lower-case letters, digits and '-' (1-30 "
                        "characters, starting with a letter), e.g. ml-platform")
    team = _team_of_stack(problems, team if team is None or isinstance(team, str) else None, teams, default_team)
    priority = _number(problems, "priority", document.get("priority", DEFAULT_PRIORITY), int, PRIORITIES.start,
                       inclusive=True, maximum=PRIORITIES.stop - 1)
    notify = _notify(problems, document.get("notify") or [], notify_channels)

    wanted = tuple(regions or fleet_regions)
    if fleet_types is None:
        candidates = [(t, r) for t in catalog.types for r in wanted if r in t.regions()]
        where, holder = "catalog instance type", "catalog instance"
    else:
        candidates = [(catalog.get(name), r) for r in wanted for name in fleet_types.get(r, ()) if name in catalog]
        where = holder = "instance type of this stack's fleets"
    largest = max((t.gpus for t, _ in candidates), default=0)
    matching = [t for t, _ in candidates if compiled is None or compiled.fullmatch(t.name)]
    if compiled is not None and candidates and not matching:
        # Said of the pattern itself: "no type matching it holds that much" read as a problem of the sizes.
        names = sorted({t.name for t, _ in candidates})
        shown = ", ".join(names[:SHOWN_TYPES]) + (f" and {len(names) - SHOWN_TYPES} more" if len(names) > SHOWN_TYPES else "")
        problems.append(f"instance_type_pattern={pattern!r}: matches no {where} in {', '.join(wanted)} ({shown})")
    if gpu_memory_mib is not None:
        if None not in (vcpus, memory_mib) and not problems:
            _shared_gpu_fits(problems, matching, gpu_memory_mib, vcpus, memory_mib, where, wanted, pattern)
    elif gpus is not None and gpus > largest:
        biggest = sorted({t.name for t, _ in candidates if t.gpus == largest})
        problems.append(f"gpus={gpus}: more GPUs than any {holder} has (largest: {largest}, "
                        f"{', '.join(biggest) or 'none'})")
    elif None not in (gpus, vcpus, memory_mib) and not problems:
        fitting = [t for t in matching
                   if t.gpus >= gpus and t.schedulable_vcpus >= vcpus and t.schedulable_memory_mib >= memory_mib]
        if not fitting:
            problems.append(f"gpus={gpus}, vcpus={vcpus:g}, memory_mib={memory_mib}: no {where} "
                            f"{'matching ' + repr(pattern) + ' ' if pattern else ''}in "
                            f"{', '.join(wanted)} holds that much{closest_types(matching, gpus, vcpus, memory_mib)}")
    images: dict[str, str] = {}
    if pulls is not None and not image_problem:
        images = _pull_references(problems, image, wanted, pulls)
    if problems:
        raise SpecError(problems)
    return JobSpec(image=image, command=tuple(command), environment=dict(environment_values), gpus=gpus, vcpus=vcpus,
                   memory_mib=memory_mib, max_attempts=max_attempts, instance_type_pattern=pattern,
                   regions=tuple(regions), lifecycle=lifecycle, checkpoint_interval_minutes=interval,
                   retry_on_exit_codes=retry, team=team, priority=priority,
                   notify=notify, images=images, expected_runtime_s=expected_runtime_s,
                   secrets=dict(secret_refs), gpu_memory_mib=gpu_memory_mib or 0,
                   gpu_compute_percent=gpu_compute_percent)


def _gpu_share(problems: list[str], document: Mapping) -> tuple[int | None, int | None]:
    """`gpu_memory_mib` and `gpu_compute_percent` of a job that shares a GPU; (None, None) for whole GPUs."""
    memory, compute = document.get("gpu_memory_mib"), document.get("gpu_compute_percent")
    if memory is None:
        if compute is not None:
            problems.append(f"gpu_compute_percent={compute!r}: only for a job that shares a GPU (with "
                            "gpu_memory_mib); a job with whole GPUs has all of their compute")
        return None, None
    memory = _number(problems, "gpu_memory_mib", memory, int, 1, inclusive=True)
    if compute is not None:
        compute = _number(problems, "gpu_compute_percent", compute, int, 1, inclusive=True, maximum=100)
    if document.get("gpus") not in (None, 0):
        problems.append(f"gpus={document['gpus']!r}, gpu_memory_mib={document['gpu_memory_mib']!r}: a job asks for "
                        "whole GPUs (gpus) or for part of one (gpu_memory_mib), not both")
    return memory or 0, compute


SHOWN_TYPES = 12  # the types a pattern matching none of them is shown: a catalog has hundreds


def _shared_gpu_fits(problems: list[str], matching: Sequence[InstanceType], gpu_memory_mib: int, vcpus: float,
                     memory_mib: int, where: str, regions: Sequence[str], pattern) -> None:
    """A job sharing a GPU needs a type whose GPUs can be shared (not a vGPU slice), with that much GPU
    memory to share and the vCPUs and memory besides."""
    sharing = [t for t in matching if t.shareable_gpu_memory_mib]
    matched = f"{'matching ' + repr(pattern) + ' ' if pattern else ''}in {', '.join(regions)}"
    if not sharing:
        names = ", ".join(sorted({t.name for t in matching})) or "none"
        problems.append(f"gpu_memory_mib={gpu_memory_mib}: no {where} {matched} can share its GPUs (types: "
                        f"{names}); ask for whole GPUs with gpus instead")
        return
    most = max(t.shareable_gpu_memory_mib for t in sharing)
    if gpu_memory_mib > most:
        biggest = sorted({t.name for t in sharing if t.shareable_gpu_memory_mib == most})
        problems.append(f"gpu_memory_mib={gpu_memory_mib}: more GPU memory than one GPU of any {where} {matched} "
                        f"can share (largest: {most:,} MiB per GPU, {', '.join(biggest)}); ask for gpus: 1 to have a "
                        "whole GPU, or for less memory")
        return
    able = [t for t in sharing if t.shareable_gpu_memory_mib >= gpu_memory_mib]
    if not any(t.schedulable_vcpus >= vcpus and t.schedulable_memory_mib >= memory_mib for t in able):
        problems.append(f"gpu_memory_mib={gpu_memory_mib}, vcpus={vcpus:g}, memory_mib={memory_mib}: no {where} "
                        f"{matched} with that much GPU memory to share holds that much"
                        f"{closest_types(able, 1, vcpus, memory_mib)}")


def _team_of_stack(problems: list[str], team: str | None, teams: Sequence[str], default_team: str | None) -> str | None:
    """The job's team: the one given, else the stack's default; one of the stack's teams when it has any."""
    team = team or default_team
    if not teams or (team is not None and team in teams) or (team is not None and not TEAM_NAME.fullmatch(team)):
        return team
    listed = ", ".join(sorted(teams))
    if team is None:
        problems.append(f"team: not given, and this environment shares its GPUs between teams ({listed}) with no "
                        "default team: name yours with --team (or `team:` in the spec file)")
    else:
        close = difflib.get_close_matches(team, list(teams), n=1)
        problems.append(f"team={team!r}: not a team of this environment ({listed})"
                        + (f"; did you mean {close[0]}?" if close else ""))
    return None


def _exit_codes(problems: list[str], codes, max_attempts: int | None) -> tuple[int, ...]:
    if not isinstance(codes, (list, tuple)) or not all(isinstance(c, int) and not isinstance(c, bool) for c in codes):
        problems.append(f"retry_on_exit_codes={codes!r}: must be a list of exit codes, e.g. [137, 143]")
        return ()
    bad = [c for c in codes if c not in EXIT_CODES]
    if bad:
        problems.append(f"retry_on_exit_codes={list(codes)!r}: {', '.join(map(str, bad))} not an exit code a "
                        "failed run returns (1-255; 0 is success)")
    repeated = sorted(c for c, n in Counter(codes).items() if n > 1)
    if repeated:
        problems.append(f"retry_on_exit_codes={list(codes)!r}: {', '.join(map(str, repeated))} given twice")
    if codes and max_attempts == 1:
        problems.append(f"retry_on_exit_codes={list(codes)!r}: max_attempts is 1, so no run is ever retried; "
                        "set max_attempts to 2 or more")
    return tuple(codes)


def _notify(problems: list[str], entries, channels: Sequence[str]) -> tuple[str, ...]:
    if isinstance(entries, str) or not isinstance(entries, (list, tuple)) \
            or not all(isinstance(e, str) for e in entries):
        problems.append(f"notify={entries!r}: must be a list of e-mail addresses and/or {SLACK!r}")
        return ()
    for entry in entries:
        if entry == SLACK:
            if SLACK not in channels:
                problems.append(f"notify: {SLACK!r}: this environment has no Slack channel (the stack's "
                                "slackWorkspaceId and slackChannelId)")
        elif not EMAIL.fullmatch(entry):
            problems.append(f"notify: {entry!r} is neither an e-mail address nor {SLACK!r}")
        elif "email" not in channels:
            problems.append(f"notify: {entry!r}: this environment publishes no job notifications (run `pulumi up` "
                            "for the stack with this version of mlfleet)")
    repeated = sorted(e for e, n in Counter(entries).items() if n > 1)
    if repeated:
        problems.append(f"notify: {', '.join(map(repr, repeated))} given twice")
    if len(entries) > MAX_NOTIFY:
        problems.append(f"notify: {len(entries)} recipients, more than {MAX_NOTIFY}")
    return tuple(entries)


def closest_types(types: Sequence[InstanceType], gpus: int, vcpus: float, memory_mib: int, shown: int = 3) -> str:
    """The instance types that come closest to holding a request, grouped by what they can schedule, with what
    is over and the request that fits the closest group (a suffix for the sizing error)."""
    groups: dict[tuple[int, int, int], list[str]] = {}
    for t in types:
        groups.setdefault((t.gpus, t.schedulable_vcpus, t.schedulable_memory_mib), []).append(t.name)
    if not groups:
        return ""

    def over(capacity: tuple[int, int, int]) -> float:
        # How many times the request exceeds the type in its tightest dimension: 1.0 would just fit.
        g, v, m = capacity
        return max(_ratio(gpus, g), _ratio(vcpus, v), _ratio(memory_mib, m))

    ranked = sorted((c for c in groups if over(c) > 1), key=lambda c: (over(c), c))[:shown]
    if not ranked:
        return ""
    lines = []
    for rank, capacity in enumerate(ranked):
        g, v, m = capacity
        excess = [f"{key} is {amount} over" for key, amount in (
            ("gpus", f"{gpus - g}" if gpus > g else None), ("vcpus", f"{vcpus - v:g}" if vcpus > v else None),
            ("memory_mib", f"{memory_mib - m:,} MiB" if memory_mib > m else None)) if amount]
        line = (f"{', '.join(sorted(groups[capacity]))} schedule{'s' if len(groups[capacity]) == 1 else ''} "
                f"{g} GPU{'s' if g != 1 else ''}, {v} vCPUs, {m:,} MiB ({m / 1024:.1f} GiB): {', '.join(excess)}")
        if rank == 0 and gpus <= g:
            fits = [f"vcpus <= {v}" if vcpus > v else "", f"memory_mib <= {m}" if memory_mib > m else ""]
            flags = [f"--vcpus {v}" if vcpus > v else "", f"--memory {_fitting_memory(m)}" if memory_mib > m else ""]
            line += f"; ask for {' and '.join(f for f in fits if f)} (e.g. {' '.join(f for f in flags if f)})"
        lines.append(line)
    return "; closest:\n      " + "\n      ".join(lines)


def _shown(key) -> str:
    """A key as an error names it: quoted when it is not a plain name (empty, spaces, a newline, a number)."""
    return key if isinstance(key, str) and _PLAIN_KEY.fullmatch(key) else repr(key)


def _ratio(request: float, capacity: float) -> float:
    # An integer request past float's range (memory_mib: 10**400) overflows true division; it is over anyway.
    return request / capacity if capacity and request <= sys.float_info.max else float("inf")


def _fitting_memory(mib: int) -> str:
    """The largest round --memory value within `mib`: whole GiB when there is one, else MiB."""
    return f"{mib // 1024}GiB" if mib >= 1024 else f"{mib}MiB"


def _pull_references(problems: list[str], image: str, regions: Sequence[str],
                     pulls: Mapping[str, RegionPulls]) -> dict[str, str]:
    """What each region pulls for `image` (only where it differs), or a problem naming the regions that
    cannot pull it and the fixes."""
    registry = registry_of(image)
    images, unreachable = {}, []
    for region in regions:
        pull = pulls.get(region, RegionPulls(internet_egress=True))
        cached = registry == ECR_PUBLIC and pull.cache_registry and pull.cache_prefix
        if cached:
            images[region] = through_cache(image, pull.cache_registry, pull.cache_prefix)
        if not pull.internet_egress and not (reachable_without_egress(image, region)
                                             and (registry != ECR_PUBLIC or cached)):
            unreachable.append(region)
    if unreachable:
        open_regions = [r for r in regions if pulls.get(r, RegionPulls(True)).internet_egress]
        fixes = ["an ECR Public image (public.ecr.aws/..., pulled through each region's ECR cache)"]
        if len(unreachable) == 1:
            fixes.append(f"an image pushed to {unreachable[0]}'s own ECR (<account>.dkr.ecr.{unreachable[0]}"
                         ".amazonaws.com/...)")
        if open_regions:
            fixes.append(f"regions the image can be pulled in (--regions {','.join(open_regions)})")
        source = "Docker Hub" if registry == DOCKER_HUB else registry
        problems.append(f"image={image!r}: {', '.join(unreachable)} cannot pull from {source} (no internet "
                        f"egress there); use {' or '.join(fixes)}")
    return images


def _strings(value, where: str) -> tuple[str, ...]:
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise TypeError(f"{where} is not a list of strings")
    return tuple(value)


def _string_map(value, where: str) -> dict[str, str]:
    if not isinstance(value, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise TypeError(f"{where} is not a mapping of strings")
    return dict(value)


def _size(document: Mapping, key: str, kind: type, optional: bool = False) -> int | float:
    """int() or float() of a size in a stored spec; TypeError naming the key when it is not one."""
    value = (document.get(key) or 0) if optional else document[key]
    try:
        return kind(value)
    except (TypeError, ValueError, OverflowError):
        raise TypeError(f"spec.{key}={quoted(value, 80)} is not {'an integer' if kind is int else 'a number'}") from None


def spec_from_document(document: Mapping) -> JobSpec:
    """A spec already validated at submission, read back from the ledger (no catalog checks again).

    Types are checked (KeyError, TypeError or ValueError naming the field): an item written by hand or
    by an older version must fail here, where the ledger quarantines it, not later in the middle of a run.
    """
    image = document["image"]
    if not isinstance(image, str) or not image:
        raise TypeError(f"spec.image={quoted(image, 80)} is not an image reference")
    optional = {key: document.get(key) or None for key in ("instance_type_pattern", "lifecycle")}
    for key, value in optional.items():
        if value is not None and not isinstance(value, str):
            raise TypeError(f"spec.{key}={quoted(value, 80)} is not a string")
    spec = JobSpec(image=image, command=_strings(document["command"], "spec.command"),
                   environment=_string_map(document.get("environment") or {}, "spec.environment"),
                   secrets=_string_map(document.get("secrets") or {}, "spec.secrets"),
                   gpus=_size(document, "gpus", int), vcpus=_size(document, "vcpus", float),
                   memory_mib=_size(document, "memory_mib", int), max_attempts=_size(document, "max_attempts", int),
                   regions=_strings(document.get("regions") or [], "spec.regions"),
                   checkpoint_interval_minutes=_interval(document.get("checkpoint_interval_minutes")),
                   retry_on_exit_codes=_integers(document.get("retry_on_exit_codes") or [], "spec.retry_on_exit_codes"),
                   team=_optional_string(document.get("team"), "spec.team"),
                   priority=_priority(document.get("priority", DEFAULT_PRIORITY)),
                   notify=_strings(document.get("notify") or [], "spec.notify"),
                   images=_string_map(document.get("images") or {}, "spec.images"),
                   expected_runtime_s=_optional_number(document.get("expected_runtime_s"), "spec.expected_runtime_s"),
                   gpu_memory_mib=_size(document, "gpu_memory_mib", int, optional=True),
                   gpu_compute_percent=_optional_integer(document.get("gpu_compute_percent"), "spec.gpu_compute_percent"),
                   **optional)
    if spec.gpus < 0 or spec.vcpus <= 0 or spec.memory_mib <= 0 or spec.max_attempts < 1 or \
            spec.gpu_memory_mib < 0 or (spec.gpus == 0) == (spec.gpu_memory_mib == 0):
        raise ValueError(f"spec sizes out of range: gpus={spec.gpus}, gpu_memory_mib={spec.gpu_memory_mib}, "
                         f"vcpus={spec.vcpus}, memory_mib={spec.memory_mib}, max_attempts={spec.max_attempts}")
    # What the planner compiles or compares (lambdas/scheduler/planning/constraints.py): a value parse_spec
    # would refuse fails here, for this record alone, not in the middle of every run's plan.
    if spec.instance_type_pattern is not None:
        try:
            re.compile(spec.instance_type_pattern)
        except (re.error, RecursionError, OverflowError) as error:
            raise ValueError(f"spec.instance_type_pattern={spec.instance_type_pattern[:80]!r} is not a regular "
                             f"expression ({error})") from None
    if spec.lifecycle is not None and spec.lifecycle not in LIFECYCLES:
        raise ValueError(f"spec.lifecycle={spec.lifecycle[:40]!r} is not one of {', '.join(LIFECYCLES)}")
    if spec.expected_runtime_s is not None and not spec.expected_runtime_s > 0:
        raise ValueError(f"spec.expected_runtime_s={spec.expected_runtime_s!r} is not a positive number")
    return spec


def _integers(value, where: str) -> tuple[int, ...]:
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise TypeError(f"{where}={quoted(value, 40)} is not a list of integers")
    return tuple(value)


def _priority(value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value not in PRIORITIES:
        raise ValueError(f"spec.priority={quoted(value, 40)} is not a priority (0-9)")
    return value


def _optional_number(value, where: str) -> float | None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
        raise TypeError(f"{where}={quoted(value, 40)} is not a number")
    return float(value) if value is not None else None


def _optional_integer(value, where: str) -> int | None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
        raise TypeError(f"{where}={quoted(value, 40)} is not an integer")
    return value


def _optional_string(value, where: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise TypeError(f"{where}={quoted(value, 40)} is not a string")
    return value or None


def _interval(value) -> int | None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
        raise TypeError(f"spec.checkpoint_interval_minutes={quoted(value, 40)} is not an integer")
    return value


ATTEMPT_VARIABLE = "MLFLEET_ATTEMPT"
_ATTEMPT = re.compile(r"[0-9]{1,9}")


def parse_attempt(value: object) -> int | None:
    """A task's ATTEMPT_VARIABLE as container_overrides writes it (ASCII digits), else None: str.isdigit()
    also takes "²", which int() refuses, and "٣", which it reads as 3."""
    return int(value) if isinstance(value, str) and _ATTEMPT.fullmatch(value) else None


def container_overrides(spec: JobSpec, job_id: str, attempt: int, checkpoint_uri: str,
                        container_name: str = JOB_CONTAINER_NAME) -> dict:
    """StartTask's `overrides` for one attempt of a job: command, plain environment (with the job's id,
    attempt and checkpoint location) and size. Secrets are not here: ECS takes them only in the task
    definition (ContainerOverride has no `secrets`)."""
    environment = {**spec.environment, "MLFLEET_JOB_ID": job_id, ATTEMPT_VARIABLE: str(attempt),
                   URI_VARIABLE: checkpoint_uri}
    if spec.checkpoint_interval_minutes is not None:
        environment[INTERVAL_VARIABLE] = str(spec.checkpoint_interval_minutes)
    override = {
        "name": container_name,
        "environment": [{"name": k, "value": v} for k, v in sorted(environment.items())],
        "resourceRequirements": [gpu_requirement(spec)],
        "cpu": max(1, round(spec.vcpus * 1024)),
        # A soft reservation (what ECS and the planner count); no hard limit, so a job is not
        # OOM-killed for briefly using more memory than it asked for while the machine has it.
        "memoryReservation": spec.memory_mib,
    }
    if spec.command:
        override["command"] = list(spec.command)
    return {"containerOverrides": [override]}


def gpu_requirement(spec: JobSpec) -> dict:
    """The container's GPU resource requirement: whole GPUs (`value`), or a share of one through NVIDIA MPS
    (`sharingStrategy.nvidiaMps`: "For a GPU resource requirement, specify either value or sharingStrategy,
    but not both", botocore's ecs model, ResourceRequirement)."""
    if not spec.shares_gpu:
        return {"type": "GPU", "value": str(spec.gpus)}
    allocation = {"memory": spec.gpu_memory_mib}
    if spec.gpu_compute_percent is not None:
        allocation["maxComputePercent"] = spec.gpu_compute_percent
    return {"type": "GPU", "sharingStrategy": {"nvidiaMps": allocation}}


def overrides_size(overrides: Mapping) -> int:
    """Characters of the overrides as botocore sends them (json.dumps with its default separators and
    ASCII escapes: botocore/serialize.py JSONSerializer). ECS does not say how it counts; this is the larger
    of the plausible counts, so a job accepted here is not refused there."""
    return len(json.dumps(overrides))


def check_overrides(jobs: Sequence[Job]) -> None:
    """SpecError naming every job whose overrides ECS would refuse (OVERRIDES_LIMIT), with its size."""
    problems = []
    for job in jobs:
        size = overrides_size(container_overrides(job.spec, job.job_id, int("9" * _ATTEMPT_DIGITS),
                                                  uri("x" * _BUCKET_NAME_LIMIT, job.job_id)))
        if size > OVERRIDES_LIMIT:
            problems.append(f"job {job.index}: command and environment make {size:,} characters of ECS container "
                            f"overrides, more than ECS's limit of {OVERRIDES_LIMIT:,} (StartTask `overrides`); "
                            "shorten them, or pass large inputs as a file in S3 or as secrets")
    if problems:
        if len(problems) > 5:
            problems = [*problems[:5], f"... and {len(problems) - 5} more jobs of the submission"]
        raise SpecError(problems)


def parse_sweep(value, where: str = "sweep") -> dict[str, list[str]]:
    """A spec file's `sweep: {name: [values]}` as strings. Numbers keep Python's spelling of them (YAML's
    0.10 becomes "0.1"): quote a value to keep its text exactly. Booleans and nested values are refused."""
    if not isinstance(value, Mapping):
        raise SpecError([f"{where}={value!r}: must be a mapping of parameter name to a list of values"])
    problems, sweep = [], {}
    for name, values in value.items():
        if isinstance(name, bool) or name is None:
            # `on: [...]` would be parameter "True", and overwrite a parameter "True" given beside it.
            problems.append(f"{where}.{name}: not a parameter name (YAML reads yes, no, on, off, true, false and null "
                            "as values: quote it)")
            continue
        if isinstance(values, (str, int, float)) and not isinstance(values, bool):
            values = [values]
        if not isinstance(values, (list, tuple)) or not all(
                isinstance(v, (str, int, float)) and not isinstance(v, bool) for v in values):
            problems.append(f"{where}.{_shown(name)}={values!r}: must be a list of strings or numbers (quote true/false/yes/no)")
            continue
        sweep[str(name)] = [str(v) for v in values]
    if problems:
        raise SpecError(problems)
    return sweep


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
    # Counted before the ranges are listed: 0:1000000000:1 would hold a billion tuples before expand() refused it.
    if not problems and (count := -(-(end - start) // step)) > MAX_JOBS_PER_SUBMISSION:
        problems.append(f"batches={text!r}: {count:,} ranges, more than {MAX_JOBS_PER_SUBMISSION:,} jobs per submission")
    if problems:
        raise SpecError(problems)
    return [(lo, min(lo + step, end)) for lo in range(start, end, step)]


def placeholders(texts: Sequence[str]) -> set[str]:
    """The `{name}` placeholders used in `texts` (not `{{`, `}}` or the shell's `${NAME}`)."""
    return {m.group(1) for text in texts for m in _PLACEHOLDER.finditer(text) if m.group(1)}


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


def expand(spec: JobSpec, *, sweep: Mapping[str, Sequence[str]] | None = None, batches: str | None = None,
           stack: str | None = None) -> list[JobSpec]:
    """The jobs of a submission: the cross product of sweep values (x batch ranges), substituted.

    A plain spec (no sweep, no batches) is one job and its command is not rewritten. A substituted environment
    value that looks like a credential is refused as parse_spec refuses a plain one (`stack` names the
    environment in the message).
    """
    sweep = dict(sweep or {})
    problems = []
    for name, values in sweep.items():
        if not _ENV_NAME.fullmatch(name):
            problems.append(f"sweep parameter {name!r}: must be a name like lr or batch_size")
        if name in ("start", "end") and batches is not None:
            problems.append(f"sweep parameter {name!r}: reserved for --batches")
        if not values:
            problems.append(f"sweep parameter {_shown(name)}: has no values")
        repeated = [v for v, n in Counter(values).items() if n > 1]
        if repeated:
            problems.append(f"sweep parameter {_shown(name)}: {', '.join(map(repr, repeated))} given twice (it would "
                            "queue the same job twice)")
    if batches is not None:
        for key, names in (("environment", spec.environment), ("secrets", spec.secrets)):
            problems.extend(f"{key} key {name!r}: set by --batches to each range's start and end, cannot be given "
                            "with --batches" for name in (BATCH_START_ENV, BATCH_END_ENV) if name in names)
    used = placeholders([*spec.command, *spec.environment.values()])
    for name in sweep:
        if name not in used and _ENV_NAME.fullmatch(name):  # a name that is none was named above, once
            problems.append(f"sweep parameter {name}: no {{{name}}} in the command or environment, so its "
                            f"{len(sweep[name])} values would queue identical jobs; put {{{name}}} where the value "
                            "belongs, or drop the parameter")
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
        keys = " and ".join(["sweep"] * bool(names) + ["batches"] * (batches is not None))
        factors = [*(f"{len(sweep[name])} values of {name}" for name in names),
                   *([f"{len(ranges):,} ranges of {batches}"] if batches is not None else [])]
        raise SpecError([f"{keys}: {' x '.join(factors)} make {count:,} jobs, more than {MAX_JOBS_PER_SUBMISSION:,} "
                         "per submission"])
    jobs, credentials = [], []
    for combo in itertools.product(*(sweep[n] for n in names)):
        for batch in ranges:
            values = {name: str(value) for name, value in zip(names, combo)}
            environment = dict(spec.environment)
            if batch is not None:
                values.update(start=str(batch[0]), end=str(batch[1]))
                environment.update({BATCH_START_ENV: str(batch[0]), BATCH_END_ENV: str(batch[1])})
            command = tuple(substitute(arg, values, f"command argument {arg!r}") for arg in spec.command)
            environment = {k: substitute(v, values, f"environment {k}={v!r}") for k, v in environment.items()}
            credentials.extend(f"job {len(jobs)}: {problem}" for k, v in environment.items()
                               if v != spec.environment.get(k) and (problem := credential_problem(k, v, stack)))
            jobs.append(replace(spec, command=command, environment=environment))
    if credentials:
        raise SpecError(credentials if len(credentials) <= 5 else
                        [*credentials[:5], f"... and {len(credentials) - 5} more jobs of the submission"])
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
_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", re.IGNORECASE)
_SECONDS_PER = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86_400}


def parse_duration(text: str, what: str = "expected-runtime", maximum_s: float = MAX_EXPECTED_RUNTIME_S) -> float:
    """"90m" -> 5400.0, "2h" -> 7200.0, "1.5d" -> 129600.0, "45s" or "45" -> 45.0 (seconds), more than 0
    and at most `maximum_s`; errors name the flag as typed."""
    match = _DURATION.fullmatch(text or "")
    if not match:
        raise SpecError([f"{what}={text!r}: must be a duration like 90m, 2h or 1.5d (or seconds)"])
    seconds = float(match.group(1)) * _SECONDS_PER[match.group(2).lower()]
    if not 0 < seconds <= maximum_s:
        raise SpecError([f"{what}={text!r}: must be more than 0 and at most {maximum_s / 86_400:g} days"])
    return seconds


def parse_memory(text: str, what: str = "memory") -> int:
    """"16GiB" -> 16384, "512MiB" -> 512, "2048" -> 2048 (MiB)."""
    match = _MEMORY.fullmatch(text or "")
    if not match:
        raise SpecError([f"{what}={text!r}: must be a size like 16GiB or 512MiB"])
    amount, unit = float(match.group(1)), match.group(2).lower()
    mib = amount * 1024 if unit in ("gib", "g") else amount
    if not mib.is_integer():
        raise SpecError([f"{what}={text!r}: must be a whole number of MiB"])
    return int(mib)
