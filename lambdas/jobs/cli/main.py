"""The command line: arguments, one function per command, and every failure as one message (errors.py)."""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
from collections.abc import Callable, Sequence
from datetime import datetime, timezone

from boto3.dynamodb.types import Binary
from botocore.exceptions import BotoCoreError, ClientError

from ...common.aws import client
from .. import costs
from .. import ledger as L
from . import notify, report, submission, watch
from .errors import (
    AWS_FAILED, BROKEN_PIPE, INTERRUPTED, USAGE, CliError, Stopped, aws_message,
)
from .permissions import ACTIONS, policy
from .service import JobService, discover, from_stack_file, with_teams
from ..spec import SpecError, fractional_gpus_problem, is_job_id, is_submission_id


def _whole_gpus(text: str) -> int:
    """--gpus N: argparse's int, except that --gpus 0.5 says how to ask for part of a GPU."""
    try:
        return int(text)
    except ValueError:
        try:
            problem = fractional_gpus_problem(float(text))
        except ValueError:
            problem = None
        raise argparse.ArgumentTypeError(problem or f"invalid int value: {text!r}") from None


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="mlfleet", description="Submit, watch and cancel GPU jobs on mlfleet.")
    top.add_argument("-e", "--environment", default=os.environ.get("MLFLEET_ENVIRONMENT"),
                     help="the stack: dev, staging, prod (default $MLFLEET_ENVIRONMENT)")
    top.add_argument("--region", default=os.environ.get("MLFLEET_REGION") or os.environ.get("AWS_REGION")
                     or os.environ.get("AWS_DEFAULT_REGION"),
                     help="the stack's home region (default $MLFLEET_REGION, then $AWS_REGION, $AWS_DEFAULT_REGION)")
    commands = top.add_subparsers(dest="action", required=True)

    sub = commands.add_parser("submit", help="queue one job, a sweep or a batch run")
    sub.add_argument("-f", "--file", help="a job spec in JSON or YAML (may hold a `sweep:` mapping); flags override it")
    sub.add_argument("--image")
    sub.add_argument("--gpus", type=_whole_gpus, help="whole GPUs")
    sub.add_argument("--gpu-memory", metavar="SIZE",
                     help="instead of --gpus: part of one GPU, this much of its memory (e.g. 6GiB), shared with other "
                          "such jobs through NVIDIA MPS (docs/jobs.md, 'Sharing a GPU')")
    sub.add_argument("--gpu-compute-percent", type=int, metavar="1-100",
                     help="with --gpu-memory: at most this percentage of the GPU's compute (default: no limit)")
    sub.add_argument("--vcpus", type=float)
    sub.add_argument("--memory", help="e.g. 16GiB or 512MiB")
    sub.add_argument("--env", action="append", metavar="NAME=VALUE", help="environment variable (repeatable)")
    sub.add_argument("--secret", action="append", metavar="NAME=REF",
                     help="secret environment variable from an SSM parameter /mlfleet/<env>/... or a Secrets Manager "
                          "secret ARN ...:secret:mlfleet/<env>/... (repeatable)")
    sub.add_argument("--instance-type-pattern", help="regex the instance type must fully match, e.g. 'g6\\..*'")
    sub.add_argument("--regions", help="comma-separated regions the job may run in (default: any fleet region)")
    sub.add_argument("--lifecycle", choices=("spot", "on-demand"))
    sub.add_argument("--max-attempts", type=int)
    sub.add_argument("--expected-runtime", metavar="DURATION",
                     help="about how long each job runs, e.g. 90m, 2h or 1.5d: the scheduler packs jobs that end "
                          "together and keeps big machines from being pinned (docs/scheduler.md, 'Runtime beliefs')")
    sub.add_argument("--retry-on-exit-codes", metavar="CODES",
                     help="exit codes that run the job again while attempts remain, e.g. 137,143 (any other non-zero "
                          "exit fails it at once; spot interruptions and host failures are always retried)")
    sub.add_argument("--team", help="the team the work is for: its share of the GPUs and its cost reports; one of the "
                                    "stack's mlfleet:teams if it lists any (default $MLFLEET_TEAM, then the stack's "
                                    "default team)")
    sub.add_argument("--priority", type=int, metavar="0-9",
                     help="order within the team's queue, higher first (default 5; waiting adds one per hour)")
    sub.add_argument("--notify", action="append", metavar="ADDRESS|slack",
                     help="tell an e-mail address (subscribed once with `mlfleet notify subscribe`) or the "
                          "environment's Slack channel when the whole submission has ended (repeatable)")
    sub.add_argument("--sweep", action="append", default=[], metavar="NAME=V1,V2",
                     help="one job per combination, substituted into {NAME} (repeatable)")
    sub.add_argument("--batches", metavar="START:END:STEP", help="one job per range, as {start} and {end}")
    sub.add_argument("--dry-run", action="store_true", help="validate and print every job; queue nothing")
    sub.add_argument("--stack", metavar="ENV",
                     help="with --dry-run: check against the checkout's stacks/Pulumi.ENV.yaml, without AWS")
    sub.add_argument("--json", action="store_true")
    sub.add_argument("command", nargs=argparse.REMAINDER, help="after --: the command and its arguments")

    listing = commands.add_parser("list", help="jobs and their states")
    listing.add_argument("--submission")
    listing.add_argument("--state", action="append", type=str.upper,
                         help=f"one of {', '.join(L.STATES)} (repeatable; default the states of jobs not ended)")
    listing.add_argument("--mine", action="store_true", help="only the jobs you submitted")
    listing.add_argument("--json", action="store_true")

    status = commands.add_parser("status", help="one job, with its history and cost")
    status.add_argument("job_id")

    watching = commands.add_parser("follow", help="print state changes until the job or submission has ended")
    watching.add_argument("target", metavar="JOB_ID|SUBMISSION_ID")
    watching.add_argument("--logs", action="store_true", help="print the jobs' output too")
    watching.add_argument("--interval", type=float, default=10.0, help="seconds between looks (default 10)")

    stop = commands.add_parser("cancel", help="cancel a job or a whole submission")
    stop.add_argument("target", metavar="JOB_ID|SUBMISSION_ID")

    parked = commands.add_parser("quarantine", help="job records the functions could not read, and why")
    parked.add_argument("--json", action="store_true", help="with each record's stored attributes")

    spend = commands.add_parser("cost", help="what the jobs submitted in a period cost, and what they would have on demand")
    spend.add_argument("--since", default="7d", help="a period (7d, 24h, 90m, 2w) or a date (2026-11-01); default 7d")
    spend.add_argument("--by", choices=costs.GROUPINGS, default="submission")
    spend.add_argument("--json", action="store_true")

    tell = commands.add_parser("notify", help="e-mail notifications when submissions end")
    tell_commands = tell.add_subparsers(dest="notify_action", required=True)
    subscribe = tell_commands.add_parser("subscribe", help="subscribe an e-mail address once (AWS mails a link to confirm)")
    subscribe.add_argument("address")

    rights = commands.add_parser("policy", help="print the IAM policy these commands need")
    rights.add_argument("--account", required=True, help="the AWS account id of the stack")
    return top


def who(region: str | None) -> str:
    """The caller's IAM identity name: an assumed role's session name (often the e-mail address of an SSO
    user) or the IAM user's name. GetCallerIdentity needs no permission."""
    return client("sts", region).get_caller_identity()["Arn"].rsplit("/", 1)[-1]


def main(argv: Sequence[str] | None = None, out: Callable[[str], None] = print,
         err: Callable[[str], None] | None = None) -> int:
    err = err or (lambda line: print(line, file=sys.stderr))
    args = parser().parse_args(argv)
    try:
        return _dispatch(args, out, err)
    except SpecError as error:
        err(f"mlfleet: {error}\nNothing was queued.")
    except CliError as error:
        err(f"mlfleet: {error}")
    except Stopped as stopped:
        if isinstance(stopped.cause, KeyboardInterrupt):
            err(f"mlfleet: interrupted: {stopped.done}")
            return INTERRUPTED
        err(f"mlfleet: {_aws(stopped.cause, args)}\n  {stopped.done}")
        return AWS_FAILED
    except KeyboardInterrupt:
        err(f"mlfleet: {_interrupted(args)}")
        return INTERRUPTED
    except (ClientError, BotoCoreError) as error:
        err(f"mlfleet: {_aws(error, args)}")
        return AWS_FAILED
    except BrokenPipeError:
        _quiet_stdout()
        return BROKEN_PIPE
    return USAGE


def _aws(error: BaseException, args) -> str:
    message = aws_message(error, environment=args.environment, region=args.region, actions=ACTIONS)
    if args.action == "submit" and args.dry_run:
        message += (f" (a dry run needs no AWS against the checkout's stack file: --dry-run --stack "
                    f"{args.environment or '<env>'})")
    return message


def _interrupted(args) -> str:
    if args.action == "follow":
        return (f"stopped following {args.target}; its jobs go on (`mlfleet follow {args.target}` watches again, "
                f"`mlfleet cancel {args.target}` stops them)")
    return "interrupted"


def _quiet_stdout() -> None:
    """The reader of our output went away (`mlfleet list | head`): point stdout at /dev/null, so that Python's
    flush at exit does not fail again (https://docs.python.org/3/library/signal.html#note-on-sigpipe)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass  # stdout is not a file (a test's capture): nothing will flush it


def _required(args, *names: str) -> None:
    missing = [f"--{n}" for n in names if not getattr(args, n)]
    if missing:
        raise CliError(f"{' and '.join(missing)} required (or MLFLEET_ENVIRONMENT / MLFLEET_REGION)")


def _check_offline(args) -> None:
    """What can be refused without AWS is refused before the first call, so that a typo is never reported as
    missing credentials or a refusal."""
    if args.action == "policy" and not re.fullmatch(r"\d{12}", args.account):
        raise CliError(f"--account {args.account!r}: an AWS account id is 12 digits (`aws sts get-caller-identity "
                       "--query Account` prints yours)")
    if args.action == "status" and not is_job_id(args.job_id):
        raise CliError(f"{args.job_id!r} is not a job id (sub-YYYYmmddHHMMSS-xxxxxx-NNNNN)")
    if args.action in ("follow", "cancel") and not (is_job_id(args.target) or is_submission_id(args.target)):
        raise CliError(f"{args.target!r} is neither a job id (sub-YYYYmmddHHMMSS-xxxxxx-NNNNN) nor a submission id "
                       "(sub-YYYYmmddHHMMSS-xxxxxx): `mlfleet list --mine` shows yours")
    if args.action == "follow" and not (math.isfinite(args.interval) and args.interval > 0):
        # time.sleep refuses these only after the first look (ValueError, OverflowError).
        raise CliError(f"--interval {args.interval}: seconds between looks, more than 0 (default 10)")
    if args.action == "list":
        unknown = [s for s in args.state or () if s not in L.STATES]
        if unknown:
            raise CliError(f"--state {', '.join(unknown)}: not a job state ({', '.join(L.STATES)})")
        if args.submission and not is_submission_id(args.submission):
            raise CliError(f"--submission {args.submission!r} is not a submission id (sub-YYYYmmddHHMMSS-xxxxxx)")
    if args.action == "cost":
        report.since(args.since, datetime.now(timezone.utc))


def _dispatch(args, out, err) -> int:
    _check_offline(args)
    if args.action == "policy":
        _required(args, "environment", "region")
        out(json.dumps(policy(args.environment, args.region, args.account), indent=2, sort_keys=True))
        return 0
    if args.action == "submit":
        return _submit(args, out, err)
    _required(args, "environment", "region")
    service = discover(args.environment, args.region)
    if args.action == "list":
        owner = who(service.region) if args.mine else None
        records = watch.list_jobs(service, submission=args.submission, states=tuple(args.state or watch.ACTIVE_STATES),
                                  owner=owner)
        # default=_plain: a value JSON has no form for (a set, bytes) in a record's history as text, not a traceback
        out(json.dumps([watch.record_document(r) for r in records], indent=1, default=_plain) if args.json
            else watch.table(records))
        _note(err, watch.unreadable_note(service, "listed"))
        return 0
    if args.action == "status":
        (record,) = watch.records_of(service, args.job_id)
        out(json.dumps(watch.record_document(record), indent=1, default=_plain))
        return 0
    if args.action == "quarantine":
        items = service.ledger.quarantined()
        out(json.dumps(watch.quarantine_documents(items), indent=1, default=_plain) if args.json
            else watch.quarantine_table(items))
        return 0
    if args.action == "follow":
        try:
            code = watch.follow(service, args.target, interval=args.interval, logs=args.logs, out=out)
        except KeyboardInterrupt:
            _note(err, watch.unreadable_note(service, "followed"))
            raise
        _note(err, watch.unreadable_note(service, "followed"))
        return code
    if args.action == "cost":
        start = report.since(args.since, datetime.now(timezone.utc))
        rows = report.cost_rows(service, start, args.by)
        out(json.dumps(costs.report_document(rows, args.by, start.timestamp()), indent=1) if args.json
            else report.cost_table(rows, args.by, start))
        _note(err, watch.unreadable_note(service, "counted"))
        return 0
    if args.action == "notify":
        notify.subscribe(service, args.address)
        out(f"{args.address}: subscribed to {service.environment}'s job notifications, pending confirmation: open the "
            f"link in the mail from AWS Notifications (once). Then `mlfleet submit --notify {args.address} ...` mails "
            "you when that submission has ended.")
        return 0
    results = watch.cancel(service, args.target, who=who(service.region))
    out("\n".join(f"{job_id}: {what}" for job_id, what in results))
    return 0


def _plain(value):
    """What JSON has no form for, in a record a hand edit left (a set, binary, a DynamoDB number): as a list or
    text, never a traceback."""
    if isinstance(value, (set, frozenset)):
        return sorted(value, key=str)
    if isinstance(value, Binary):
        return repr(value.value)
    return str(value)


def _note(err, line: str | None) -> None:
    if line:
        err(line)


def _service_for_submit(args) -> JobService:
    if args.stack:
        if not args.dry_run:
            raise CliError("--stack checks a dry run against the checkout's stack file; a real submission goes to "
                           "the deployed stack: drop --stack (and give -e)")
        if args.environment and args.environment != args.stack:
            raise CliError(f"-e {args.environment} and --stack {args.stack} name different environments")
        return from_stack_file(args.stack)
    _required(args, "environment", "region")
    return with_teams(discover(args.environment, args.region))


def _submit(args, out, err) -> int:
    document = submission.spec_document(args)
    sweep = submission.sweep_of(document, args.sweep)
    service = _service_for_submit(args)
    jobs = submission.prepare(service, document, sweep=sweep, batches=args.batches)
    spec = jobs[0].spec
    if args.dry_run:
        where = f"checked against {service.source}" if service.source else f"checked against {service.environment}"
        if args.json:
            out(json.dumps({"submission_id": jobs[0].submission_id, "queued": False, "jobs": [
                {"job_id": j.job_id, **j.spec.to_document()} for j in jobs]}, indent=1))
        else:
            out(f"{jobs[0].submission_id}: would queue {len(jobs):,} job(s) in {service.environment} ({where}; "
                "nothing written)")
            out("\n".join(submission.describe_jobs(jobs, service)))
        return 0
    result = submission.write(service, jobs, owner=who(service.region), out=err if args.json else out, err=err)
    if args.json:
        out(json.dumps({"submission_id": result.submission_id, "jobs": list(result.job_ids), "queued": result.queued,
                        "admission": result.admission.state if result.admission else None,
                        "refused_messages": list(result.refused_messages)}, indent=1))
    else:
        out(f"{result.submission_id}: queued {len(result.job_ids):,} job(s); watch them: mlfleet follow "
            f"{result.submission_id}")
    if result.admission is not None and not result.admission.is_open:
        err(f"mlfleet: warning: {service.environment} is not admitting new jobs ({result.admission.reason}); "
            f"they wait in the queue until someone runs `make admission-open STACK={service.environment}`")
    if result.refused_messages:
        err(f"mlfleet: warning: the queue refused {len(result.refused_messages)} message(s); the jobs are in "
            "the ledger and the scheduler finds them on its next run")
    hint = submission.notify_hint(spec)
    if hint:
        err(f"mlfleet: note: {hint}")
    return 0
