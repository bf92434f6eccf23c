"""`mlfleet submit`: a spec (file and flags) validated whole, expanded, then written and queued.

The submission id is printed first, before anything is written, so that a submission stopped part way
(Ctrl-C, AWS refusing a call) can always be cancelled by it. Jobs go to the ledger in transactions of
100 conditional puts (Ledger.put_new_batch), then one queue message per job in batches of 10, then the
scheduler is woken up; submissions of PROGRESS_FROM jobs or more report progress on stderr. A job in the
ledger runs even if its message was never sent: the scheduler reads the ledger, not only the queue.
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from botocore.exceptions import BotoCoreError, ClientError

from ...common import admission
from ...common.aws import client
from ...common.catalog import load_catalog
from .. import ledger as L
from .. import queue
from .errors import CliError, Stopped
from .service import JobService
from ..spec import (
    DEFAULT_PRIORITY, KEYS, SLACK, SUBMISSION_KEYS, Job, JobSpec, assign_ids, check_overrides, expand,
    new_submission_id, parse_duration, parse_memory, parse_spec, parse_sweep,
)

PROGRESS_FROM = 1_000
TEAM_VARIABLE = "MLFLEET_TEAM"


@dataclass(frozen=True)
class Submission:
    submission_id: str
    job_ids: tuple[str, ...]
    queued: bool
    admission: admission.Admission | None = None
    refused_messages: tuple[str, ...] = ()
    scheduler_woken: bool = False


# --- the spec: a file, flags over it --------------------------------------------------------------

def _pairs(items: Iterable[str], what: str) -> list[tuple[str, str]]:
    pairs = []
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise CliError(f"{what} {item!r}: expected NAME=VALUE")
        pairs.append((name, value))
    return pairs


def read_spec_file(path: str) -> dict:
    """A spec file as a mapping; one CliError naming the file (and line and column for YAML) otherwise."""
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        raise CliError(f"spec file {path}: no such file (give its path relative to {os.getcwd()}, or an "
                       "absolute one)") from None
    except IsADirectoryError:
        raise CliError(f"spec file {path}: is a directory; give the YAML or JSON file in it") from None
    except PermissionError:
        raise CliError(f"spec file {path}: not readable by you (check its permissions: ls -l {path})") from None
    except UnicodeDecodeError as error:
        raise CliError(f"spec file {path}: not text (byte {error.start} is not UTF-8); a spec is YAML or JSON") from None
    if path.endswith((".yaml", ".yml")):
        document = _yaml(path, text)
    else:
        try:
            document = json.loads(text, object_pairs_hook=_unique_pairs)
        except _KeyTwice as error:
            raise CliError(f"{path}: key {error.key!r} given twice in one mapping: keep one") from None
        except json.JSONDecodeError as error:
            raise CliError(f"{path}:{error.lineno}:{error.colno}: not valid JSON: {error.msg} (a spec file "
                           "ending in .yaml or .yml is read as YAML)") from None
        except ValueError as error:  # an integer past Python's sys.get_int_max_str_digits(), not JSONDecodeError
            raise CliError(f"{path}: not valid JSON: {str(error).split(';')[0]}") from None
        except RecursionError:
            raise CliError(f"{path}: not valid JSON: nested too deeply (a job spec is a flat mapping)") from None
    if document is None:
        raise CliError(f"spec file {path}: is empty; a job spec is a mapping of {', '.join(KEYS)}")
    if not isinstance(document, dict):
        raise CliError(f"spec file {path}: holds a {type(document).__name__}, not a mapping of "
                       f"{', '.join((*KEYS, *SUBMISSION_KEYS))}")
    return document


class _KeyTwice(Exception):
    def __init__(self, key):
        self.key = key


def _unique_pairs(pairs: list[tuple[str, object]]) -> dict:
    """A JSON object, refused when it names a key twice (json.loads keeps the last value without a word)."""
    document = {}
    for key, value in pairs:
        if key in document:
            raise _KeyTwice(key)
        document[key] = value
    return document


def _yaml(path: str, text: str):
    import yaml

    class UniqueKeyLoader(yaml.SafeLoader):
        """safe_load, refusing a key given twice in one mapping (PyYAML keeps the last value without a word; YAML
        says keys are unique). Keys a merge (`<<: *base`) brings in may still be overridden."""

        def construct_mapping(self, node, deep=False):
            if isinstance(node, yaml.MappingNode):
                seen = {}
                for key_node, _ in node.value:
                    if key_node.tag == "tag:yaml.org,2002:merge":
                        continue
                    key = self.construct_object(key_node, deep=deep)
                    try:
                        first = seen.setdefault(key, key_node.start_mark)
                    except TypeError:
                        continue  # an unhashable key: SafeLoader names it
                    if first is not key_node.start_mark:
                        raise yaml.constructor.ConstructorError(
                            "while constructing a mapping", node.start_mark,
                            f"found key {key!r} twice (first on line {first.line + 1}): keep one", key_node.start_mark)
            return super().construct_mapping(node, deep)

    try:
        return yaml.load(text, Loader=UniqueKeyLoader)
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else path
        context = f" ({error.context})" if error.context and error.problem else ""
        raise CliError(f"{where}: not valid YAML: {error.problem or error.context}{context}") from None
    except yaml.reader.ReaderError as error:
        # A character YAML does not allow (a control character): PyYAML gives its position in the text, not a mark.
        line, column = text.count("\n", 0, error.position) + 1, error.position - text.rfind("\n", 0, error.position)
        raise CliError(f"{path}:{line}:{column}: not valid YAML: character #x{error.character:04x}: "
                       f"{error.reason}") from None
    except yaml.YAMLError as error:
        raise CliError(f"{path}: not valid YAML: {error}") from None
    except RecursionError:
        raise CliError(f"{path}: not valid YAML: nested too deeply (a job spec is a flat mapping)") from None
    except (ValueError, TypeError, AttributeError, OverflowError) as error:
        # PyYAML's constructors raise these, not YAMLError, for a scalar they resolved but cannot build:
        # `2020-13-45` (a timestamp), `!!int x`, `!!timestamp x`, an integer of more than 4,300 digits.
        raise CliError(f"{path}: not valid YAML: {str(error).split(';')[0]}") from None


def spec_document(args, environment: Mapping[str, str] = os.environ) -> dict:
    """The spec from --file (JSON or YAML), with command-line flags taking precedence; the team defaults to
    $MLFLEET_TEAM."""
    document: dict = read_spec_file(args.file) if args.file else {}
    flags = {"image": args.image, "gpus": args.gpus, "vcpus": args.vcpus, "instance_type_pattern": args.instance_type_pattern,
             "lifecycle": args.lifecycle, "max_attempts": args.max_attempts, "team": args.team,
             "priority": args.priority, "gpu_compute_percent": args.gpu_compute_percent}
    document.update({k: v for k, v in flags.items() if v is not None})
    if args.memory is not None:
        document["memory_mib"] = parse_memory(args.memory)
    if args.gpu_memory is not None:
        document["gpu_memory_mib"] = parse_memory(args.gpu_memory, "gpu-memory")
        if args.gpus is None:
            document.pop("gpus", None)  # the file's whole GPUs give way to the flag's share of one
    elif args.gpus:
        document.pop("gpu_memory_mib", None)  # and the file's share of one GPU to the flag's whole GPUs,
        if args.gpu_compute_percent is None:
            document.pop("gpu_compute_percent", None)  # with the share's compute limit
    if args.expected_runtime is not None:
        document["expected_runtime_s"] = parse_duration(args.expected_runtime)
    if args.regions:
        document["regions"] = [r.strip() for r in args.regions.split(",") if r.strip()]
    if args.retry_on_exit_codes is not None:
        document["retry_on_exit_codes"] = _exit_codes(args.retry_on_exit_codes)
    if args.notify:
        document["notify"] = list(args.notify)
    if "team" not in document and environment.get(TEAM_VARIABLE):
        document["team"] = environment[TEAM_VARIABLE]
    if args.env:
        document["environment"] = _merged(document.get("environment"), _pairs(args.env, "--env"))
    if args.secret:
        document["secrets"] = _merged(document.get("secrets"), _pairs(args.secret, "--secret"))
    command = list(args.command or [])
    if command[:1] == ["--"]:
        command = command[1:]
    if command:
        document["command"] = command
    return document


def _merged(given, pairs: list[tuple[str, str]]):
    """The file's NAME: value mapping with the flags' pairs over it; a file value that is not a mapping is
    left as it is, for parse_spec to name (`environment=[...]: must be a mapping`)."""
    given = given or {}
    return {**given, **dict(pairs)} if isinstance(given, Mapping) else given


def _exit_codes(text: str) -> list[int]:
    try:
        return [int(code) for code in text.split(",") if code.strip()]
    except ValueError:
        raise CliError(f"--retry-on-exit-codes {text!r}: expected exit codes separated by commas, e.g. 137,143") from None


def sweep_of(document: dict, flags: Sequence[str]) -> dict[str, list[str]]:
    """The spec file's `sweep:` mapping with --sweep NAME=V1,V2 flags over it (a flag replaces the file's values
    of that parameter). Removes `sweep` from the document."""
    sweep = parse_sweep(document.pop("sweep")) if "sweep" in document else {}
    seen = set()
    for name, values in _pairs(flags, "--sweep"):
        if name in seen:
            raise CliError(f"--sweep {name}: given twice")
        seen.add(name)
        sweep[name] = [v for v in values.split(",") if v != ""]
    return sweep


# --- validation and expansion (the dry run's and the real run's) ------------------------------------

def prepare(service: JobService, document: Mapping, *, sweep: Mapping[str, Sequence[str]] | None = None,
            batches: str | None = None, now: datetime | None = None) -> list[Job]:
    """Validate against the environment (its fleets, limits, regions and what they can pull) and expand.
    SpecError names every problem; nothing is written here."""
    spec = parse_spec(document, fleet_regions=service.fleet_regions(), catalog=load_catalog(),
                      default_max_attempts=service.default_max_attempts, fleet_types=service.fleet_types(),
                      pulls=service.regions, notify_channels=tuple(service.notification_topics),
                      environment=service.environment, teams=service.teams,
                      default_team=service.default_team)
    jobs = assign_ids(new_submission_id(now), expand(spec, sweep=sweep, batches=batches, stack=service.environment))
    check_overrides(jobs)  # ECS's 8,192 characters: refused here, not five failed starts later
    return jobs


def describe_jobs(jobs: Sequence[Job], service: JobService) -> list[str]:
    """A dry run's listing: what every job of the submission shares, then each job's command and environment
    (secret references by name only: their values are never in mlfleet)."""
    spec = jobs[0].spec
    lines = [f"  image {spec.image}" + "".join(f"\n    {region} pulls {pulled}" for region, pulled in sorted(spec.images.items())),
             f"  each job: {_size(spec, service.fleet_regions())}"]
    for job in jobs:
        lines.append(f"{job.job_id}  {shlex.join(job.spec.command) or '(the image command)'}")
        lines.extend(f"    {name}={shlex.quote(value)}" for name, value in sorted(job.spec.environment.items()))
    return lines


def _size(spec: JobSpec, fleet_regions: Sequence[str]) -> str:
    gpus = f"{spec.gpus} GPU{'s' if spec.gpus != 1 else ''}" if not spec.shares_gpu else \
        f"{spec.gpu_memory_mib:,} MiB of a shared GPU" + (
            f" (at most {spec.gpu_compute_percent}% of its compute)" if spec.gpu_compute_percent else "")
    parts = [f"{gpus}, {spec.vcpus:g} vCPUs, {spec.memory_mib:,} MiB",
             f"{spec.lifecycle or 'spot or on-demand'}", f"in {', '.join(spec.regions or fleet_regions)}",
             f"up to {spec.max_attempts} attempt{'s' if spec.max_attempts != 1 else ''}"]
    if spec.expected_runtime_s:
        parts.append(f"expected to run about {_duration(spec.expected_runtime_s)}")
    if spec.retry_on_exit_codes:
        parts.append(f"retried on exit codes {', '.join(map(str, spec.retry_on_exit_codes))}")
    if spec.instance_type_pattern:
        parts.append(f"types matching {spec.instance_type_pattern!r}")
    if spec.team:
        parts.append(f"team {spec.team}")
    if spec.priority != DEFAULT_PRIORITY:
        parts.append(f"priority {spec.priority}")
    if spec.notify:
        parts.append(f"notify {', '.join(spec.notify)} when the submission ends")
    return "; ".join(parts)


def _duration(seconds: float) -> str:
    for unit, size in (("d", 86_400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.3g} {unit}"
    return f"{seconds:.3g} s"


# --- writing ------------------------------------------------------------------------------------------

class Progress:
    """Progress of a large submission on stderr: at most one line per tenth of the work per phase."""

    def __init__(self, total: int, report: Callable[[str], None]):
        self.total, self.report, self.shown = total, report, {}

    def __call__(self, phase: str, done: int) -> None:
        if self.total < PROGRESS_FROM:
            return
        tenth = done * 10 // self.total
        if tenth > self.shown.get(phase, 0):
            self.shown[phase] = tenth
            self.report(f"  {phase}: {done:,} of {self.total:,}")


def submit(service: JobService, document: Mapping, *, sweep: Mapping[str, Sequence[str]] | None = None,
           batches: str | None = None, owner: str | None = None, now: datetime | None = None,
           out: Callable[[str], None] = lambda _: None, err: Callable[[str], None] = lambda _: None) -> Submission:
    """Validate and expand (SpecError, nothing written), then write: see write()."""
    return write(service, prepare(service, document, sweep=sweep, batches=batches, now=now), owner=owner, now=now,
                 out=out, err=err)


def write(service: JobService, jobs: Sequence[Job], *, owner: str | None, now: datetime | None = None,
          out: Callable[[str], None] = lambda _: None, err: Callable[[str], None] = lambda _: None) -> Submission:
    """Ledger, queue, scheduler. The submission id is printed first; Stopped says what was written when a
    Ctrl-C or an AWS error ends it part way."""
    submission_id = jobs[0].submission_id
    out(f"{submission_id}: submitting {len(jobs):,} job(s) to {service.environment}")
    stamp = (now or datetime.now(timezone.utc)).timestamp()
    progress = Progress(len(jobs), err)
    written = 0

    def ledger_progress(count: int) -> None:
        nonlocal written
        written = count
        progress("written to the ledger", count)

    try:
        service.ledger.put_new_batch([L.new_record(job, stamp, owner) for job in jobs], progress=ledger_progress)
    except L.DuplicateJob as error:
        raise CliError(f"{error}: {written:,} job(s) of {submission_id} were written before it "
                       f"{_cancel_hint(service, submission_id, written)}. Submit again (a new submission id is "
                       "drawn).") from None
    except (KeyboardInterrupt, ClientError, BotoCoreError) as error:
        raise Stopped(error, f"{written:,} of {len(jobs):,} jobs of {submission_id} were written to the ledger "
                             f"(a batch in flight may have been written too){_cancel_hint(service, submission_id, 1)}")
    try:
        refused = queue.send_jobs(client("sqs", service.region), service.queue_url,
                                  [queue.JobMessage(j.job_id, 0) for j in jobs],
                                  progress=lambda count: progress("queued", count))
    except (KeyboardInterrupt, ClientError, BotoCoreError) as error:
        raise Stopped(error, f"all {len(jobs):,} jobs of {submission_id} are in the ledger and will run (the scheduler "
                             f"finds them without their messages){_cancel_hint(service, submission_id, 1)}")
    try:
        client("lambda", service.region).invoke(FunctionName=service.scheduler_function, InvocationType="Event",
                                                Payload=json.dumps({"trigger": "submit", "submission_id": submission_id}))
        woken = True
    except (ClientError, BotoCoreError):
        woken = False  # the every-minute schedule picks the jobs up anyway
    flag = admission.read_admission(client("ssm", service.region), service.environment)
    return Submission(submission_id, tuple(j.job_id for j in jobs), True, flag, tuple(refused), woken)


def _cancel_hint(service: JobService, submission_id: str, written: int) -> str:
    if not written:
        return ""
    return f"; to remove them: mlfleet -e {service.environment} --region {service.region} cancel {submission_id}"


def notify_hint(spec: JobSpec) -> str | None:
    """A reminder for e-mail recipients: SNS delivers only to confirmed subscriptions."""
    emails = [n for n in spec.notify if n != SLACK]
    if not emails:
        return None
    return (f"mail about the end goes only to subscribed addresses: `mlfleet notify subscribe ADDRESS` once for "
            f"each of {', '.join(emails)}, then the link in the mail AWS sends")
