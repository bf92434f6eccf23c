"""`mlfleet`: submit, watch and cancel GPU jobs on an mlfleet environment (docs/jobs.md).

    mlfleet -e dev submit --image ghcr.io/team/train:3 --gpus 1 --vcpus 8 --memory 30GiB \\
        --sweep lr=0.1,0.01,0.001 -- python train.py --lr {lr}
    mlfleet -e dev submit -f infer.yaml --batches 0:10000:500
    mlfleet -e dev list [--submission SUB] [--state RUNNING]
    mlfleet -e dev status JOB_ID
    mlfleet -e dev follow JOB_ID|SUBMISSION_ID [--logs]
    mlfleet -e dev cancel JOB_ID|SUBMISSION_ID
    mlfleet -e dev policy --account 123456789012      (the IAM policy these commands need)

It needs AWS credentials for the home region and nothing of the repository: the stack publishes where
its queue, ledger, scheduler and fleets are in the SSM parameter /mlfleet/<env>/job-service.
A submission is validated whole before anything is written; then every job goes to the ledger (the
truth the scheduler reads), then a message per job to the queue, then the scheduler is woken up.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from botocore.exceptions import BotoCoreError, ClientError

from lambdas.common import admission
from lambdas.common.aws import client
from lambdas.common.catalog import load_catalog
from lambdas.common.permissions import needs, statements
from lambdas.jobs import ledger as L
from lambdas.jobs import queue
from lambdas.jobs.fleets import FleetConfig, parse_fleets
from lambdas.jobs.spec import (
    KEYS, SpecError, assign_ids, expand, is_job_id, is_submission_id, new_submission_id, parse_memory, parse_spec,
)

# The job container's name in the task definition (components/compute/cluster.py JOB_CONTAINER_NAME): its
# awslogs streams are job/<container>/<task id>.
JOB_CONTAINER = "job"
ACTIVE_STATES = (L.QUEUED, L.STARTING, L.RUNNING)
# What the job-service parameter must name for environment {environment}: the resources the policy below
# grants (components/jobs and components/compute name them).
SCHEDULER_NAME = "mlfleet-{environment}-scheduler"
CLUSTER_NAME = "mlfleet-{environment}"
JOB_LOG_GROUP = "/mlfleet/{environment}/jobs"

PERMISSIONS = (
    needs("ssm:GetParameter", resources=("arn:{partition}:ssm:{region}:{account}:parameter/mlfleet/{environment}/job-service",
                                         "arn:{partition}:ssm:{region}:{account}:parameter/mlfleet/{environment}/admission"),
          why="find the job service; tell whether jobs are admitted"),
    *L.USER_PERMISSIONS,
    *queue.SEND_PERMISSIONS,
    needs("lambda:InvokeFunction", resources=("arn:{partition}:lambda:{region}:{account}:function:" + SCHEDULER_NAME,),
          why="wake the scheduler right after a submission"),
    needs("ecs:StopTask", resources=("arn:{partition}:ecs:*:{account}:task/mlfleet-{environment}/*",),
          condition={"ArnLike": {"ecs:cluster": "arn:{partition}:ecs:*:{account}:cluster/mlfleet-{environment}"}},
          why="stop the task of a cancelled job"),
    needs("logs:GetLogEvents", resources=("arn:{partition}:logs:*:{account}:log-group:/mlfleet/{environment}/jobs:log-stream:*",),
          why="follow a job's output"),
)


class CliError(Exception):
    """A problem the user can fix; printed without a traceback, exit code 2."""


@dataclass(frozen=True)
class JobService:
    environment: str
    region: str
    queue_url: str
    ledger_table: str
    scheduler_function: str
    fleets: tuple[FleetConfig, ...]
    default_max_attempts: int
    job_log_group: str

    @property
    def ledger(self) -> L.Ledger:
        return L.Ledger(client("dynamodb", self.region), self.ledger_table)

    def fleet_types(self) -> dict[str, list[str]]:
        types: dict[str, list[str]] = {}
        for fleet in self.fleets:
            types.setdefault(fleet.region, []).extend(fleet.instance_types)
        return types


def discover(environment: str, region: str) -> JobService:
    name = f"/mlfleet/{environment}/job-service"
    ssm = client("ssm", region)
    try:
        text = ssm.get_parameter(Name=name)["Parameter"]["Value"]
    except ssm.exceptions.ParameterNotFound:
        raise CliError(f"no parameter {name} in {region}: is stack {environment!r} deployed with {region} as "
                       "its home region (aws:region)?") from None
    try:
        value = json.loads(text)
        service = JobService(environment, value["homeRegion"], value["queueUrl"], value["ledgerTable"],
                             value["schedulerFunction"], parse_fleets(json.dumps(value["fleets"])),
                             int(value["defaultMaxAttempts"]), value["jobLogGroup"])
    except (ValueError, KeyError, TypeError) as error:
        raise CliError(f"parameter {name} in {region} is not a job-service description ({error!r}); "
                       "run `pulumi up` for the stack again") from None
    mismatches = service_mismatches(service, environment, region, value.get("environment", environment))
    if mismatches:
        raise CliError(f"parameter {name} in {region} does not describe environment {environment!r}: "
                       f"{'; '.join(mismatches)}. Nothing was written; check the parameter (was it "
                       "copied from another stack?) and run `pulumi up` for the stack again")
    return service


def service_mismatches(service: JobService, environment: str, region: str, claimed_environment: str) -> list[str]:
    """What of a job-service description names another environment's resources (or another region)."""
    names = {key: value.format(environment=environment) for key, value in (
        ("queue", queue.QUEUE_NAME), ("ledger", L.TABLE_NAME), ("scheduler", SCHEDULER_NAME),
        ("cluster", CLUSTER_NAME), ("log group", JOB_LOG_GROUP))}
    found = [("environment", claimed_environment, environment), ("homeRegion", service.region, region),
             ("queueUrl", service.queue_url.rstrip("/").rsplit("/", 1)[-1], names["queue"]),
             ("ledgerTable", service.ledger_table, names["ledger"]),
             ("schedulerFunction", service.scheduler_function, names["scheduler"]),
             ("jobLogGroup", service.job_log_group, names["log group"]),
             *((f"fleets[{fleet.fleet}].cluster", fleet.cluster, names["cluster"]) for fleet in service.fleets)]
    return [f"{key} is {actual!r}, expected {expected!r}" for key, actual, expected in found if actual != expected]


# --- submit -------------------------------------------------------------------------------------------

def _pairs(items: Iterable[str], what: str) -> list[tuple[str, str]]:
    pairs = []
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise CliError(f"{what} {item!r}: expected NAME=VALUE")
        pairs.append((name, value))
    return pairs


def spec_document(args) -> dict:
    """The spec from --file (JSON or YAML), with command-line flags taking precedence."""
    document: dict = {}
    if args.file:
        text = Path(args.file).read_text()
        try:
            if args.file.endswith((".yaml", ".yml")):
                import yaml

                document = yaml.safe_load(text) or {}
            else:
                document = json.loads(text)
        except ValueError as error:  # yaml.YAMLError and json.JSONDecodeError are both ValueErrors
            raise CliError(f"{args.file}: not valid {'YAML' if args.file.endswith(('.yaml', '.yml')) else 'JSON'}: "
                           f"{error}") from None
        if not isinstance(document, dict):
            raise CliError(f"{args.file}: a job spec is a mapping of {', '.join(KEYS)}")
    flags = {"image": args.image, "gpus": args.gpus, "vcpus": args.vcpus, "instance_type_pattern": args.instance_type_pattern,
             "lifecycle": args.lifecycle, "max_attempts": args.max_attempts}
    document.update({k: v for k, v in flags.items() if v is not None})
    if args.memory is not None:
        document["memory_mib"] = parse_memory(args.memory)
    if args.regions:
        document["regions"] = [r.strip() for r in args.regions.split(",") if r.strip()]
    if args.env:
        document["environment"] = {**(document.get("environment") or {}), **dict(_pairs(args.env, "--env"))}
    command = list(args.command or [])
    if command[:1] == ["--"]:
        command = command[1:]
    if command:
        document["command"] = command
    return document


def parse_sweep(items: Sequence[str]) -> dict[str, list[str]]:
    sweep: dict[str, list[str]] = {}
    for name, values in _pairs(items, "--sweep"):
        if name in sweep:
            raise CliError(f"--sweep {name}: given twice")
        sweep[name] = [v for v in values.split(",") if v != ""]
    return sweep


@dataclass(frozen=True)
class Submission:
    submission_id: str
    job_ids: tuple[str, ...]
    queued: bool
    admission: admission.Admission | None = None
    refused_messages: tuple[str, ...] = ()
    scheduler_woken: bool = False


def submit(service: JobService, document: Mapping, *, sweep: Mapping[str, Sequence[str]] | None = None,
           batches: str | None = None, dry_run: bool = False, now: datetime | None = None) -> Submission:
    """Validate and expand first (SpecError, nothing written), then ledger, queue, scheduler."""
    spec = parse_spec(document, fleet_regions=tuple(dict.fromkeys(f.region for f in service.fleets)),
                      catalog=load_catalog(), default_max_attempts=service.default_max_attempts,
                      fleet_types=service.fleet_types())
    jobs = assign_ids(new_submission_id(now), expand(spec, sweep=sweep, batches=batches))
    submission_id = jobs[0].submission_id
    if dry_run:
        return Submission(submission_id, tuple(j.job_id for j in jobs), queued=False)
    stamp = (now or datetime.now(timezone.utc)).timestamp()
    ledger = service.ledger
    for job in jobs:
        if not ledger.put_new(L.new_record(job, stamp)):
            raise CliError(f"job {job.job_id} already exists in the ledger; nothing else of the submission was "
                           "written after it. Submit again (a new submission id is drawn).")
    refused = queue.send_jobs(client("sqs", service.region), service.queue_url,
                              [queue.JobMessage(j.job_id, 0) for j in jobs])
    try:
        client("lambda", service.region).invoke(FunctionName=service.scheduler_function, InvocationType="Event",
                                                Payload=json.dumps({"trigger": "submit", "submission_id": submission_id}))
        woken = True
    except ClientError:
        woken = False  # the every-minute schedule picks the jobs up anyway
    flag = admission.read_admission(client("ssm", service.region), service.environment)
    return Submission(submission_id, tuple(j.job_id for j in jobs), True, flag, tuple(refused), woken)


# --- list, status, cancel, follow ---------------------------------------------------------------------

def records_of(service: JobService, target: str) -> list[L.JobRecord]:
    ledger = service.ledger
    if is_job_id(target):
        record = ledger.get(target)
        if record is None:
            raise CliError(f"no job {target} in {service.environment}")
        return [record]
    if is_submission_id(target):
        records = ledger.by_submission(target)
        if not records:
            raise CliError(f"no submission {target} in {service.environment}")
        return sorted(records, key=lambda r: r.index)
    raise CliError(f"{target!r} is neither a job id (sub-YYYYmmddHHMMSS-xxxxxx-NNNNN) nor a submission id")


def list_jobs(service: JobService, *, submission: str | None = None, states: Sequence[str] = ACTIVE_STATES,
              ) -> list[L.JobRecord]:
    unknown = [s for s in states if s not in L.STATES]
    if unknown:
        raise CliError(f"--state {', '.join(unknown)}: not a job state ({', '.join(L.STATES)})")
    if submission:
        return [r for r in records_of(service, submission) if r.state in states]
    return [r for state in states for r in service.ledger.by_state(state)]


def cancel(service: JobService, target: str, *, who: str) -> list[tuple[str, str]]:
    """Cancel every job of `target` that has not ended; stop its task if one runs. Safe to repeat."""
    results = []
    for record in records_of(service, target):
        if record.state in L.TERMINAL:
            results.append((record.job_id, f"already {record.state}"))
            continue
        outcome = service.ledger.cancel(record, reason=f"cancelled by {who}", now=time.time())
        if not outcome.applied:
            current = outcome.record.state if outcome.record else "gone"
            results.append((record.job_id, f"not cancelled: it changed meanwhile (now {current}); run cancel again"))
            continue
        placement = record.placement
        if placement is not None and placement.task_arn and record.state in (L.STARTING, L.RUNNING):
            client("ecs", placement.region).stop_task(cluster=placement.cluster, task=placement.task_arn,
                                                      reason=f"mlfleet cancel by {who}"[:255])
            results.append((record.job_id, f"cancelled; task {placement.task_arn.rsplit('/', 1)[-1]} stopping"))
        else:
            # A STARTING job without a task yet: the scheduler stops the task it starts when it sees CANCELLED.
            results.append((record.job_id, "cancelled"))
    return results


def _where(record: L.JobRecord) -> str:
    p = record.placement
    if record.state == L.QUEUED and record.reserved:
        region, fleet, _ = record.reserved
        return f"new {fleet} instance {region}"  # bought for it, still booting
    return f"{p.instance_type} {p.region}" if p else "-"


def table(records: Sequence[L.JobRecord]) -> str:
    rows = [("JOB", "STATE", "ATTEMPT", "RUNS", "WHERE", "LAST REASON")]
    rows += [(r.job_id, r.state, str(r.attempt), f"{r.runs}/{r.spec.max_attempts}", _where(r), r.last_reason[:80])
             for r in records]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    return "\n".join("  ".join([c.ljust(w) for c, w in zip(row, widths)] + [row[-1]]) for row in rows)


def record_document(record: L.JobRecord) -> dict:
    return {"job_id": record.job_id, "submission_id": record.submission_id, "state": record.state,
            "attempt": record.attempt, "runs": record.runs, "start_failures": record.start_failures,
            "submitted_at": _time(record.submitted_at), "updated_at": _time(record.updated_at),
            "placement": dict(vars(record.placement)) if record.placement else None,
            "reserved": dict(zip(("region", "fleet", "box"), record.reserved)) if record.reserved else None,
            "spec": record.spec.to_document(), "reasons": [{**r, "at": _time(r["at"])} for r in record.reasons]}


def _time(stamp: float) -> str:
    return datetime.fromtimestamp(stamp, timezone.utc).isoformat(timespec="seconds")


def follow(service: JobService, target: str, *, interval: float = 10.0, logs: bool = False,
           out: Callable[[str], None] = print, sleep: Callable[[float], None] = time.sleep,
           max_polls: int | None = None) -> int:
    """Print every state change (and, with logs, the output) until all jobs have ended; 1 if any FAILED."""
    seen: dict[str, int] = {}
    tokens: dict[str, str] = {}
    polls = 0
    while True:
        records = records_of(service, target)
        for record in records:
            for reason in record.reasons[seen.get(record.job_id, 0):]:
                out(f"{_time(reason['at'])}  {record.job_id}  {reason['state']:<9}  attempt {reason['attempt']}  "
                    f"{reason['reason']}")
            seen[record.job_id] = len(record.reasons)
            if logs and record.placement is not None and record.placement.task_arn:
                _print_logs(service, record, tokens, out)
        if all(r.state in L.TERMINAL for r in records):
            return 1 if any(r.state == L.FAILED for r in records) else 0
        polls += 1
        if max_polls is not None and polls >= max_polls:
            return 3  # still running when the caller stopped watching
        sleep(interval)


def _print_logs(service: JobService, record: L.JobRecord, tokens: dict[str, str], out) -> None:
    stream = f"job/{JOB_CONTAINER}/{record.placement.task_arn.rsplit('/', 1)[-1]}"
    logs = client("logs", record.placement.region)
    while True:
        kwargs = {"nextToken": tokens[stream]} if stream in tokens else {"startFromHead": True}
        try:
            page = logs.get_log_events(logGroupName=service.job_log_group, logStreamName=stream, **kwargs)
        except logs.exceptions.ResourceNotFoundException:
            return  # the task has not written anything yet
        for event in page.get("events", []):
            out(f"{record.job_id} | {event['message']}")
        if page.get("nextForwardToken") in (None, tokens.get(stream)):
            return
        tokens[stream] = page["nextForwardToken"]


def policy(environment: str, region: str, account: str) -> dict:
    return {"Version": "2012-10-17",
            "Statement": statements(PERMISSIONS, account=account, region=region, environment=environment)}


# --- the command line ---------------------------------------------------------------------------------

def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="mlfleet", description="Submit, watch and cancel GPU jobs on mlfleet.")
    top.add_argument("-e", "--environment", default=os.environ.get("MLFLEET_ENVIRONMENT"),
                     help="the stack: dev, staging, prod (default $MLFLEET_ENVIRONMENT)")
    top.add_argument("--region", default=os.environ.get("MLFLEET_REGION") or os.environ.get("AWS_REGION")
                     or os.environ.get("AWS_DEFAULT_REGION"),
                     help="the stack's home region (default $MLFLEET_REGION, then $AWS_REGION, $AWS_DEFAULT_REGION)")
    commands = top.add_subparsers(dest="action", required=True)

    sub = commands.add_parser("submit", help="queue one job, a sweep or a batch run")
    sub.add_argument("-f", "--file", help="a job spec in JSON or YAML; flags override its keys")
    sub.add_argument("--image")
    sub.add_argument("--gpus", type=int)
    sub.add_argument("--vcpus", type=float)
    sub.add_argument("--memory", help="e.g. 16GiB or 512MiB")
    sub.add_argument("--env", action="append", metavar="NAME=VALUE", help="environment variable (repeatable)")
    sub.add_argument("--instance-type-pattern", help="regex the instance type must fully match, e.g. 'g6\\..*'")
    sub.add_argument("--regions", help="comma-separated regions the job may run in (default: any fleet region)")
    sub.add_argument("--lifecycle", choices=("spot", "on-demand"))
    sub.add_argument("--max-attempts", type=int)
    sub.add_argument("--sweep", action="append", default=[], metavar="NAME=V1,V2",
                     help="one job per combination, substituted into {NAME} (repeatable)")
    sub.add_argument("--batches", metavar="START:END:STEP", help="one job per range, as {start} and {end}")
    sub.add_argument("--dry-run", action="store_true", help="validate and list the jobs; queue nothing")
    sub.add_argument("--json", action="store_true")
    sub.add_argument("command", nargs=argparse.REMAINDER, help="after --: the command and its arguments")

    listing = commands.add_parser("list", help="jobs and their states")
    listing.add_argument("--submission")
    listing.add_argument("--state", action="append", help=f"one of {', '.join(L.STATES)} (repeatable; default "
                                                           "the states of jobs not ended)")
    listing.add_argument("--json", action="store_true")

    status = commands.add_parser("status", help="one job, with its history")
    status.add_argument("job_id")

    watch = commands.add_parser("follow", help="print state changes until the job or submission has ended")
    watch.add_argument("target", metavar="JOB_ID|SUBMISSION_ID")
    watch.add_argument("--logs", action="store_true", help="print the jobs' output too")
    watch.add_argument("--interval", type=float, default=10.0, help="seconds between looks (default 10)")

    stop = commands.add_parser("cancel", help="cancel a job or a whole submission")
    stop.add_argument("target", metavar="JOB_ID|SUBMISSION_ID")

    rights = commands.add_parser("policy", help="print the IAM policy these commands need")
    rights.add_argument("--account", required=True, help="the AWS account id of the stack")
    return top


def _who() -> str:
    try:
        return client("sts", None).get_caller_identity()["Arn"].rsplit("/", 1)[-1]
    except (ClientError, BotoCoreError):
        return os.environ.get("USER", "unknown")


def main(argv: Sequence[str] | None = None, out: Callable[[str], None] = print) -> int:
    args = parser().parse_args(argv)
    missing = [flag for flag, value in (("--environment", args.environment), ("--region", args.region)) if not value]
    if missing:
        print(f"mlfleet: error: {' and '.join(missing)} required (or MLFLEET_ENVIRONMENT / MLFLEET_REGION)",
              file=sys.stderr)
        return 2
    try:
        if args.action == "policy":
            out(json.dumps(policy(args.environment, args.region, args.account), indent=2, sort_keys=True))
            return 0
        service = discover(args.environment, args.region)
        return _run(args, service, out)
    except SpecError as error:
        print(f"mlfleet: {error}\nNothing was queued.", file=sys.stderr)
        return 2
    except CliError as error:
        print(f"mlfleet: {error}", file=sys.stderr)
        return 2
    except (ClientError, BotoCoreError) as error:
        print(f"mlfleet: AWS refused: {error}", file=sys.stderr)
        return 1


def _run(args, service: JobService, out) -> int:
    if args.action == "submit":
        result = submit(service, spec_document(args), sweep=parse_sweep(args.sweep), batches=args.batches,
                        dry_run=args.dry_run)
        if args.json:
            out(json.dumps({"submission_id": result.submission_id, "jobs": list(result.job_ids),
                            "queued": result.queued, "admission": result.admission.state if result.admission else None,
                            "refused_messages": list(result.refused_messages)}, indent=1))
        else:
            verb = "would queue" if args.dry_run else "queued"
            out(f"{result.submission_id}: {verb} {len(result.job_ids)} job(s)")
            if args.dry_run:
                out("\n".join(result.job_ids))
        if result.admission is not None and not result.admission.is_open:
            print(f"mlfleet: warning: {service.environment} is not admitting new jobs ({result.admission.reason}); "
                  f"they wait in the queue until someone runs `make admission-open STACK={service.environment}`",
                  file=sys.stderr)
        if result.refused_messages:
            print(f"mlfleet: warning: the queue refused {len(result.refused_messages)} message(s); the jobs are in "
                  "the ledger and the scheduler finds them on its next run", file=sys.stderr)
        return 0
    if args.action == "list":
        records = list_jobs(service, submission=args.submission, states=tuple(args.state or ACTIVE_STATES))
        out(json.dumps([record_document(r) for r in records], indent=1) if args.json else table(records))
        return 0
    if args.action == "status":
        (record,) = records_of(service, args.job_id) if is_job_id(args.job_id) else (None,)
        if record is None:
            raise CliError(f"{args.job_id!r} is not a job id")
        out(json.dumps(record_document(record), indent=1))
        return 0
    if args.action == "follow":
        return follow(service, args.target, interval=args.interval, logs=args.logs, out=out)
    results = cancel(service, args.target, who=_who())
    out("\n".join(f"{job_id}: {what}" for job_id, what in results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
