"""Lambda entry point: one scheduler run places queued jobs and buys capacity for the rest.

Triggered every minute by a schedule and, asynchronously, by the CLI right after a submission.
Runs are sequential: a run first takes the placement lease (lambdas/common/lease.py); one that
cannot, because another run or a removal holds it, logs one line and returns. A submission made during a run is
then placed by the next scheduled run, within a minute. A run:
  1. drains up to MAX_MESSAGES queue messages (10 a call, stopping with < 60 s of Lambda time left)
     and checks each against the ledger: a message whose job moved past its attempt is a duplicate;
  2. recovers jobs stuck in STARTING (a run that died between its claim and StartTask);
  3. reads the admission flag; when closed, nothing is started or bought (running jobs continue, and
     empty machines are still given back);
  4. reads every fleet region (live spot prices, machines, free GPUs from the tasks on them, groups and
     the instances they are still launching, failed launches), and the machines first seen degraded in the
     breaker's window (fleet_health.py, one ledger item);
  5. reads what each team's running and starting jobs hold and updates its decayed use (with teams), and
     keeps the team names it sees, so that the queued jobs of a team no longer listed are read (read_pending);
     plans with lambdas.scheduler.planning.plan (its shares stage first: quotas, fair shares,
     priorities; runtime beliefs from the specs' estimates and the submissions' finished jobs, the
     pools' interruption rates, each job's checkpoint interval) and acts: per placement a conditional
     claim QUEUED(n) -> STARTING(n+1) in the ledger BEFORE StartTask, so a message delivered twice or a
     second run can never start the same attempt twice; then STARTING -> RUNNING with the task ARN;
  6. raises the chosen groups' desired capacity within the fleet cap and the dollars-per-hour cap,
     except where the circuit breaker has stopped a fleet's scaling (failed launches, or machines that came
     up degraded); with headroom on (HEADROOM_WINDOW_MINUTES
     > 0), keeps the jobs it bought for in the ledger's headroom item and then raises the groups for what
     the plan buys ahead (planning/headroom.py);
  7. hands the plan's releases (its release stage: empty machines past the release delay) to the removal
     executor (lambdas/removal, docs/removal.md), which validates them again, drains, re-checks and
     terminates them with a decrement, under the placement lease this run holds; and stops the tasks of
     the checkpointing jobs the plan moves into room other machines pay for (moving.py);
  8. quarantines the ledger items it could not read or write back, sends the dead-letter messages still
     owed (a send that failed, or a writer that died after its ledger write: lambdas/jobs/dead_letters.py),
     alerts once about new quarantines, and deletes the messages the ledger now reflects. Malformed ones
     stay, for the redrive policy.

Every failure is per item, never per run (lambdas/common/errors.py): an error with one message, job,
region, fleet or scale-out is logged with its reason and the run goes on with the rest; what failed is
tried again by the next run, or, when it can never succeed (a record it cannot decode or write, a job
ECS can never start), quarantined or failed at once with the reason.

Every attempt of a job gets the same checkpoint location (MLFLEET_CHECKPOINT_URI, in the bucket of the
region it runs in), and a job that has run goes back to the region of its checkpoint (requests.py).

Environment: ENVIRONMENT, JOBS_TABLE, JOBS_QUEUE_URL, JOBS_DLQ_URL, ADMISSION_PARAMETER, FLEETS,
MAX_HOURLY_USD, ALERT_TOPIC_ARN, DEFAULT_MAX_ATTEMPTS, REBALANCE_TIMEOUT_MINUTES, ACCOUNT_ID, and optionally
RELEASE_AFTER_EMPTY_MINUTES (unset: the measured boot time), DISRUPTION_BUDGET_PERCENT (default 10),
HEADROOM_WINDOW_MINUTES (default 0: no headroom), HEADROOM_MAX_JOBS (default 8) and
PURCHASE_SEARCH_CPU_SECONDS (default 30: planning/purchase.py COVER_MAX_CPU_SECONDS).
The teams' weights and quotas: the SSM parameter /mlfleet/<env>/teams (lambdas/jobs/teams.py).
"""

from __future__ import annotations

import heapq
import os
import time
import uuid
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone

from botocore.exceptions import BotoCoreError, ClientError

from ..common import admission, alerts, lease
from ..common.aws import client
from ..common.catalog import load_catalog
from ..common.errors import describe, per_item
from ..common.interruption_rates import load_interruption_rates
from ..common.logs import log_decision
from ..common.settings import SettingsError, from_env
from ..jobs import checkpoints, dead_letters
from ..jobs import ledger as L
from ..jobs import queue
from ..jobs.fleets import FleetConfig, parse_fleets, regions
from ..jobs.quarantine import Quarantine, alert_new
from ..jobs.teams import TeamsSettings, read_teams
from ..jobs.teams import parameter_name as teams_parameter_name
from ..removal.execute import LedgerSource
from . import actions, boot_health, fleet_health, headroom, releases, state, teams
from .planning import (
    Fleet, JobRequest, Limits, Machine, Plan, ReleasePolicy, ScaleOut, Shares, decayed_usage,
    plan,
)
from .planning.headroom import MAX_JOBS as MAX_HEADROOM_JOBS
from .planning.headroom import MAX_WINDOW_MINUTES as MAX_HEADROOM_WINDOW_MINUTES
from .planning.headroom import RecentWait, placeholders, remember
from .planning.purchase import COVER_MAX_CPU_SECONDS
from .beliefs import busy_until, runtime_beliefs, runtime_prior
from .moving import move_jobs, moves_under_way, running_jobs
from .requests import plannable
from .starting import recover_starting, start_one

PERMISSIONS = (
    *admission.READ_PERMISSIONS,
    *L.WRITE_PERMISSIONS,
    *L.RESERVE_PERMISSIONS,
    *L.QUARANTINE_PERMISSIONS,
    *queue.CONSUME_PERMISSIONS,
    *queue.SEND_PERMISSIONS,
    *dead_letters.PERMISSIONS,
    *state.PERMISSIONS,
    *actions.PERMISSIONS,
    *lease.PERMISSIONS,
    *releases.PERMISSIONS,
    *teams.PERMISSIONS,
    *headroom.PERMISSIONS,
    *boot_health.PUBLISH_PERMISSIONS,
)

MAX_MESSAGES = 100
# Pending jobs read per run (oldest first); more wait for the next run. With teams, each listed team and the
# jobs of no listed team (the default team's) get an equal part of it (read_pending).
MAX_PENDING = 5_000
# Acting stops with this much Lambda time left, leaving the rest of the plan to the next run.
ACT_RESERVE_MS = 20_000
# The purchase's cover (planning/purchase.py) may use at most this share of the CPU time left before
# acting must stop: the rest is for acting on the plan. Lambda gives CPU in proportion to memory, one vCPU
# at 1,769 MB (Lambda developer guide, "Configuring Lambda function memory",
# https://docs.aws.amazon.com/lambda/latest/dg/configuration-memory.html); the runtime sets
# AWS_LAMBDA_FUNCTION_MEMORY_SIZE (a reserved variable, "Using Lambda environment variables").
COVER_SHARE_OF_TIME_LEFT = 0.5
FULL_VCPU_MIB = 1769
BREAKER_FAILURES, BREAKER_WINDOW = 3, timedelta(minutes=30)


@dataclass(frozen=True)
class Settings:
    environment: str
    jobs_table: str
    jobs_queue_url: str
    jobs_dlq_url: str
    admission_parameter: str
    fleets: str
    max_hourly_usd: float
    alert_topic_arn: str
    default_max_attempts: int
    rebalance_timeout_minutes: int
    account_id: str
    # Giving back what it bought (lambdas/scheduler/releases.py): None measures the fleets' boot time.
    release_after_empty_minutes: int | None = None
    disruption_budget_percent: int = 10
    # Headroom (planning/headroom.py): room kept for jobs like those bought for in the window; 0: none.
    headroom_window_minutes: int = 0
    headroom_max_jobs: int = 8
    # The most CPU seconds a run's purchase covers may take (mlfleet:purchaseSearchCpuSeconds); 0: the greedy plan alone.
    purchase_search_cpu_seconds: float = COVER_MAX_CPU_SECONDS

    def __post_init__(self) -> None:
        if self.admission_parameter != admission.parameter_name(self.environment):
            raise SettingsError(f"ADMISSION_PARAMETER={self.admission_parameter!r}: expected "
                                f"{admission.parameter_name(self.environment)!r} for ENVIRONMENT={self.environment!r}")
        if not checkpoints.ACCOUNT_ID.fullmatch(self.account_id):
            raise SettingsError(f"ACCOUNT_ID={self.account_id!r}: expected the 12-digit AWS account id")
        if not 0 < self.disruption_budget_percent <= 100:
            raise SettingsError(f"DISRUPTION_BUDGET_PERCENT={self.disruption_budget_percent!r}: must be 1 to 100")
        if self.release_after_empty_minutes is not None and self.release_after_empty_minutes < 0:
            raise SettingsError(f"RELEASE_AFTER_EMPTY_MINUTES={self.release_after_empty_minutes!r}: must be 0 (at the "
                                "first run that finds it empty) or more")
        if not 0 <= self.headroom_window_minutes <= MAX_HEADROOM_WINDOW_MINUTES:
            raise SettingsError(f"HEADROOM_WINDOW_MINUTES={self.headroom_window_minutes!r}: must be 0 (no headroom) "
                                f"to {MAX_HEADROOM_WINDOW_MINUTES}")
        if not 1 <= self.headroom_max_jobs <= MAX_HEADROOM_JOBS:
            raise SettingsError(f"HEADROOM_MAX_JOBS={self.headroom_max_jobs!r}: must be 1 to {MAX_HEADROOM_JOBS}")
        if not 0 <= self.purchase_search_cpu_seconds <= COVER_MAX_CPU_SECONDS:
            raise SettingsError(f"PURCHASE_SEARCH_CPU_SECONDS={self.purchase_search_cpu_seconds!r}: must be 0 "
                                f"(the greedy plan alone) to {COVER_MAX_CPU_SECONDS:g}")

    def checkpoint_uri(self, region: str, job_id: str) -> str:
        """The job's location in the region's checkpoint bucket, as components/storage names the bucket."""
        return checkpoints.uri(checkpoints.bucket_name(self.environment, self.account_id, region), job_id)


def handler(event, context=None, *, settings: Settings | None = None, now: datetime | None = None):
    settings = settings or from_env(Settings)
    now = now or datetime.now(timezone.utc)
    # The schedule's event ({"source": "aws.events"}) or the command's ({"trigger": "submit", ...}); anyone
    # allowed to invoke the function chooses the payload, and it only names the run in the log.
    event = event if isinstance(event, dict) else {}
    trigger = next((str(v)[:100] for v in (event.get("source"), event.get("trigger")) if isinstance(v, str) and v),
                   "invoke")
    remaining = context.get_remaining_time_in_millis if context is not None else (lambda: 900_000)
    owner = f"scheduler:{getattr(context, 'aws_request_id', None) or uuid.uuid4()}"
    dynamodb = client("dynamodb")
    taken = lease.acquire(dynamodb, settings.jobs_table, owner, now=now.timestamp(), run_seconds=remaining() / 1000)
    if not taken.granted:
        holder = taken.holder
        log_decision("scheduler-skipped", trigger=trigger, reason="another run or a removal holds the placement lease",
                     holder=holder.owner if holder else None, holder_expires_at=holder.expires_at if holder else None)
        return {"skipped": "another run or a removal holds the placement lease"}
    try:
        log_decision("scheduler-run", trigger=trigger, lease_owner=owner)
        return run(settings, remaining, now, held=taken.lease)
    finally:
        lease.release(dynamodb, settings.jobs_table, taken.lease)


def run(settings: Settings, remaining_ms: Callable[[], int], now: datetime | None = None,
        held: lease.Lease | None = None) -> dict:
    """One run. `held`: the placement lease the handler took; without it (a run outside the handler)
    nothing is released, since a removal may only act under the lease."""
    now = now or datetime.now(timezone.utc)
    stamp = now.timestamp()
    fleets = parse_fleets(settings.fleets)
    catalog = load_catalog()
    ledger = L.Ledger(client("dynamodb"), settings.jobs_table)
    sqs = client("sqs")
    quarantine = Quarantine(ledger, sqs, settings.jobs_dlq_url, by="scheduler")
    summary: dict = {"duplicates": 0, "malformed": 0, "started": [], "start_failed": [], "waiting": 0,
                     "scaled": [], "recovered": 0, "quarantined": [], "dead_lettered": [], "errors": []}

    received = []
    with per_item("receive-failed", summary["errors"], queue=settings.jobs_queue_url):
        received = state.receive_messages(sqs, settings.jobs_queue_url, max_messages=MAX_MESSAGES,
                                          remaining_ms=remaining_ms)
    to_delete = triage_messages(received, ledger, quarantine, stamp, summary)
    summary["recovered"] = recover_starting(ledger, settings, stamp, summary)
    known = read_team_shares(settings, ledger, stamp, summary)
    shares = known.shares if known is not None else None

    flag = read_admission(settings, summary)
    pending: list[L.JobRecord] = []
    with per_item("read-pending-failed", summary["errors"], state=L.QUEUED):
        pending = read_pending(ledger, shares.teams if shares is not None else (),
                               unlisted=known.unlisted if known is not None else ())
    if known is not None:
        keep_teams(ledger, known, pending, stamp)
    if not flag.is_open:
        log_decision("admission-closed", pending=len(pending), reason=flag.reason)
    starts_allowed = flag.is_open and shares is not None
    # Every run reads the fleets, pending jobs or not: the empty machines it bought are given back when
    # nothing waits (lambdas/scheduler/releases.py), and admission closed stops starts, not releases.
    # Anything the plan or its execution could not foresee fails this stage, not the run: the quarantine,
    # its alert and the messages' deletion below still happen (each job's own failures are per item inside).
    with per_item("place-and-scale-failed", summary["errors"], action="nothing more started or bought this run"):
        place_and_scale(settings, fleets, catalog, ledger, quarantine, pending if starts_allowed else [], remaining_ms,
                        now, summary, held, shares, headroom_allowed=starts_allowed)

    summary["quarantined"].extend(quarantine.sweep(stamp, summary["errors"]))
    with per_item("dead-letter-sweep-failed", summary["errors"]):
        summary["dead_lettered"] = dead_letters.DeadLetters.of(ledger, sqs, settings.jobs_dlq_url).sweep(
            stamp, summary["errors"])
    with per_item("quarantine-alert-failed", summary["errors"]):
        alert_new(ledger, lambda subject, message: alerts.publish_alert(
            client("sns", settings.alert_topic_arn.split(":")[3]), settings.alert_topic_arn, subject, message),
            settings.environment, summary["errors"], now=stamp, quarantined_now=any(quarantine.done.values()))
    with per_item("delete-messages-failed", summary["errors"], messages=len(to_delete)):
        queue.delete_messages(sqs, settings.jobs_queue_url, to_delete)
    summary["pending"] = len(pending)
    summary["admission"] = flag.state
    log_decision("scheduler-summary", **{k: (len(v) if isinstance(v, list) else v) for k, v in summary.items()})
    return summary


def read_pending(ledger: L.Ledger, team_names: Collection[str], unlisted: Collection[str] = ()) -> list[L.JobRecord]:
    """The queued jobs this run plans, oldest first, at most MAX_PENDING. Without teams, the oldest.
    With teams, an equal part each: the oldest of each listed team, and the oldest of the jobs of no listed
    team (the default team's: of no team, or of a team no longer listed), so that one team's backlog of
    thousands cannot hide the other teams' newer jobs, nor the default team's, from the shares stage until
    it drains. Each team's come from the by-team index; the last part merges, oldest first, the index's jobs
    of no team (L.NO_TEAM), those of each name in `unlisted` (teams.py: the index lists a job under its own
    team's name, and DynamoDB lists no index's keys without reading every item) and the oldest of all (jobs
    written before the index, or their team's key, existed). Every read is a Query of pages of at most a
    part, and the last part's are read only as the merge uses them: a run reads at most MAX_PENDING jobs and
    two parts more, whatever the queue's length."""
    if not team_names:
        return ledger.by_state(L.QUEUED, limit=MAX_PENDING)
    listed = sorted(team_names)
    each = max(1, MAX_PENDING // (len(listed) + 1))
    oldest = ledger.by_state(L.QUEUED, limit=each)
    found: dict[str, L.JobRecord] = {}
    try:
        for team in listed:
            for record in ledger.queued_of_team(team, limit=each):
                found.setdefault(record.job_id, record)
        # The default team's part. A listed team's job among the oldest of all is among its own team's oldest,
        # read above, unless it is not in the index yet: only such jobs count here.
        others = [None, *(name for name in sorted(set(unlisted) - set(listed)))]
        page = max(1, each // len(others))
        rest = 0
        for record in heapq.merge(oldest, *(ledger.iter_queued_of_team(name, page_size=page) for name in others),
                                  key=_submission_order):
            if record.job_id not in found:
                found[record.job_id] = record
                rest += 1
                if rest >= each:
                    break  # before the merge asks a source for more
    except ClientError as error:
        # The index unreadable (IndexStatus CREATING, backfilling, while the `pulumi up` that adds it runs:
        # botocore's DynamoDB model, GlobalSecondaryIndexDescription; or throttled): this run plans the
        # oldest of all, as before the index, rather than nothing.
        log_decision("team-pending-read-failed", error=describe(error), reading="the oldest of all instead")
        return ledger.by_state(L.QUEUED, limit=MAX_PENDING)
    return sorted(found.values(), key=_submission_order)


def _submission_order(record: L.JobRecord) -> tuple[float, str]:
    return record.submitted_at, record.job_id


def read_admission(settings: Settings, summary: dict) -> admission.Admission:
    """The admission flag; unreadable (throttled, denied) counts as closed for this run."""
    try:
        return admission.read_admission(client("ssm"), settings.environment)
    except (ClientError, BotoCoreError) as error:
        summary["errors"].append(log_decision("read-admission-failed", error=describe(error)))
        return admission.Admission(admission.CLOSED, f"admission flag unreadable this run ({describe(error)})", "")


def triage_messages(received: list[state.Received], ledger: L.Ledger, quarantine: Quarantine, now: float,
                    summary: dict) -> list[str]:
    """Receipt handles to delete: messages the ledger reflects (the job is queued at that attempt, so
    the by-state index lists it), duplicates (the job moved past that attempt) and messages of
    quarantined jobs. A message that fails to be looked at stays, and comes back."""
    to_delete = []
    for item in received:
        if item.message is None:
            summary["malformed"] += 1
            log_decision("malformed-message", error=item.error, action="left for the redrive policy")
            continue
        with per_item("triage-failed", summary["errors"], job_id=item.message.job_id, action="message left"):
            if triage_one(item.message, ledger, quarantine, now, summary):
                to_delete.append(item.receipt_handle)
    return to_delete


def triage_one(message: queue.JobMessage, ledger: L.Ledger, quarantine: Quarantine, now: float, summary: dict) -> bool:
    """True when the message can be deleted."""
    try:
        record = ledger.get(message.job_id)
    except L.UndecodableRecord as error:
        newly = not error.bad.quarantined
        if quarantine.item(error.bad, now):
            if newly:
                summary["quarantined"].append(message.job_id)
            log_decision("quarantined-job-message", job_id=message.job_id, reason=error.bad.error, action="deleted")
            return True
        return False
    if record is None:
        log_decision("unknown-job-message", job_id=message.job_id, action="left for the redrive policy")
        return False
    if record.attempt > message.attempt or (record.attempt == message.attempt and record.state != L.QUEUED):
        summary["duplicates"] += 1
        log_decision("duplicate-message", job_id=record.job_id, message_attempt=message.attempt,
                     ledger_state=record.state, ledger_attempt=record.attempt)
    elif record.attempt < message.attempt:
        log_decision("future-attempt-message", job_id=record.job_id, message_attempt=message.attempt,
                     ledger_attempt=record.attempt, action="left for the redrive policy")
        return False
    return True


@dataclass(frozen=True)
class TeamsRead:
    """What a run knows of the teams: the shares stage's view, and what it keeps for the next run (teams.py)."""
    shares: Shares
    usage: dict[str, float] | None = None  # each team's decayed use up to now; None without teams (nothing kept)
    seen_before: dict[str, float] = field(default_factory=dict)  # the team names the last run kept
    seen: dict[str, float] = field(default_factory=dict)  # ... and those this run listed, or saw running or starting

    @property
    def unlisted(self) -> list[str]:
        """Names of teams the parameter no longer lists: their queued jobs are the default team's."""
        return teams.unlisted(self.seen, self.shares.teams) if self.usage is not None else []


def read_team_shares(settings: Settings, ledger: L.Ledger, now: float, summary: dict) -> TeamsRead | None:
    """The teams' shares, or None when this run cannot know them (the teams parameter missing, malformed
    or unreadable, or the ledger's use item unreadable): then nothing is started or bought this run, since
    placing without the quotas would break them, and everything else the run does goes on (messages,
    recovery, releases, quarantine). The error is in the run's summary and log."""
    with per_item("read-teams-failed", summary["errors"], parameter=teams_parameter_name(settings.environment)):
        return team_shares(read_teams(client("ssm"), settings.environment), ledger, now)
    log_decision("starts-held", reason="the teams and their shares are unknown this run")
    return None


def team_shares(settings: TeamsSettings, ledger: L.Ledger, now: float) -> TeamsRead:
    """The shares stage's view of the teams. With teams configured: what each team's running and starting
    jobs hold, and its use decayed up to now (kept in the ledger for the next run by keep_teams, with the
    team names seen). Without teams, one team holds everything: only priorities and age order its jobs."""
    if not settings.teams:
        return TeamsRead(Shares({}, settings.fallback_team, now=now))
    holding = [*ledger.by_state(L.RUNNING), *ledger.by_state(L.STARTING)]
    held = teams.held_gpus(holding, settings, load_catalog())
    kept = teams.read_kept(ledger.dynamodb, ledger.table)
    usage = decayed_usage(kept.usage, kept.at, held, now, settings.half_life_s)
    log_decision("team-shares", held_gpus=held, usage={t: round(u, 2) for t, u in usage.items()},
                 weights={t: p.weight for t, p in settings.teams.items()},
                 quotas={t: p.max_gpus for t, p in settings.teams.items() if p.max_gpus is not None})
    return TeamsRead(Shares(settings.teams, settings.fallback_team, held_gpus=held, usage=usage, now=now), usage,
                     kept.seen, teams.remember(kept.seen, [*settings.teams, *(r.spec.team for r in holding)], now))


def keep_teams(ledger: L.Ledger, known: TeamsRead, pending: Collection[L.JobRecord], now: float) -> None:
    """Keep each team's use and the team names seen (the queued jobs read this run's too) for the next run,
    and log the jobs of no listed team this run plans as the default team's, and the names it forgets."""
    if known.usage is None:
        return
    seen = teams.remember(known.seen, (r.spec.team for r in pending), now)
    default = known.shares.default_team
    counts = Counter(r.spec.team or "(no team)" for r in pending if r.spec.team not in known.shares.teams)
    if counts:
        log_decision("unlisted-team-jobs", jobs=dict(sorted(counts.items())), as_team=default,
                     reason=f"jobs of no team, or of a team the teams parameter does not list, are team {default}'s")
    for name in sorted(set(known.seen_before) - set(seen)):
        log_decision("team-forgotten", team=name, last_seen=known.seen_before[name],
                     reason=f"not listed, and no job of it seen for {teams.FORGET_AFTER_S / 3600:g} hours")
    teams.write_usage(ledger.dynamodb, ledger.table, known.usage, now, seen)


def fleets_without_gpu_sharing(machines: Collection[state.MachineView], catalog) -> set[tuple[str, str]]:
    """Fleets whose machines boot without `ecs.capability.gpu-sharing-mps` though their GPUs could be shared
    (an AMI without nvidia-mps.service, such as an older stock image): nothing is bought from them for a
    job that shares a GPU, since it would never be placed there. Logged once a run per fleet."""
    found = {}
    for m in machines:
        if m.instance_type in catalog and catalog.get(m.instance_type).shareable_gpu_memory_mib and not m.gpu_memory_mib:
            found.setdefault((m.region, m.fleet), m.instance_id)
    for (region, fleet), instance_id in sorted(found.items()):
        log_decision("no-gpu-sharing", region=region, fleet=fleet, instance_id=instance_id,
                     reason=f"its agent does not advertise {state.GPU_SHARING_CAPABILITY}; jobs that share a GPU are "
                            "not bought for in this fleet (docs/jobs.md, 'Sharing a GPU')")
    return set(found)


def circuit_breaker(view: state.FleetView, now: datetime, settings: Settings,
                    degraded: Sequence[fleet_health.Sighting] = ()) -> bool:
    """True when the fleet's scaling is stopped: >= 3 failed launches in the last 30 minutes, or its machines
    that came up degraded hold the breaker open (`degraded`: the fleet's sightings inside the window when
    fleet_health.judge says so, else none). The group's mark (SCALING_PAUSED_TAG) makes the alert go out once
    per opening, whatever its cause."""
    autoscaling = client("autoscaling", view.config.region)
    failures = state.failed_launches(autoscaling, view.config.asg_name, now, BREAKER_WINDOW)
    causes = [cause for cause, met in (("failed-launches", failures >= BREAKER_FAILURES),
                                       ("degraded-machines", bool(degraded))) if met]
    tripped = bool(causes)
    if tripped and not view.scaling_paused:
        actions.set_scaling_paused(autoscaling, view.config.asg_name, now.isoformat(timespec="seconds"))
        alerts.publish_alert(
            client("sns", settings.alert_topic_arn.split(":")[3]), settings.alert_topic_arn,
            f"mlfleet {settings.environment}: scaling of {view.config.fleet} in {view.config.region} stopped",
            breaker_message(view, failures, degraded))
    elif not tripped and view.scaling_paused:
        actions.set_scaling_paused(autoscaling, view.config.asg_name, None)
    if tripped or view.scaling_paused:
        log_decision("circuit-breaker", region=view.config.region, fleet=view.config.fleet, failed_launches=failures,
                     causes=causes, degraded_machines=[
                         {"instance_id": s.instance_id, "first_seen": _iso(s.at), "reason": s.reason} for s in degraded],
                     scaling_stopped=tripped, newly_opened=tripped and not view.scaling_paused)
    return tripped


# The degraded machines an alert lists by name; the rest are counted.
ALERT_MACHINES = 10


def breaker_message(view: state.FleetView, failures: int, degraded: Sequence[fleet_health.Sighting]) -> str:
    """The alert's text: why the breaker opened (launches failed, machines came up degraded, or both), the
    degraded machines with their reasons, and what to check."""
    minutes = int(BREAKER_WINDOW.total_seconds() // 60)
    group = view.config.asg_name
    launches = failures >= BREAKER_FAILURES
    why = [f"{failures} launches of Auto Scaling group {group} failed"] if launches else []
    if degraded:
        why.append(f"{len(degraded)} of its machines came up degraded" if launches
                   else f"{len(degraded)} machines of Auto Scaling group {group} came up degraded")
    text = (f"{' and '.join(why)} in the last {minutes} minutes, so the scheduler stopped raising its desired "
            "capacity.")
    if degraded:
        text += (" No job is placed on a degraded machine, and each is given back once empty: buying more for "
                 "the waiting jobs would only buy more such machines.")
        text += "".join(f"\n- {s.instance_id}, first seen degraded at {_iso(s.at)}: {s.reason}"
                        for s in degraded[:ALERT_MACHINES])
        if len(degraded) > ALERT_MACHINES:
            text += f"\n- and {len(degraded) - ALERT_MACHINES} more (the circuit-breaker line in the scheduler's log)"
        text += "\n"
    text += ("" if degraded else " ") + "Jobs keep running and keep being placed on existing machines."
    checks = ["Check the group's activity history (capacity, quotas, launch template)"] if launches else []
    if degraded:
        checks.append("When every new machine of a fleet comes up degraded, its image or launch template is at fault, "
                      "not the machines: check the AMI (mlfleet:amiIds, the Packer build), the launch template's user "
                      "data (ECS_ENABLE_GPU_SUPPORT=true in /etc/ecs/ecs.config) and the NVIDIA driver (nvidia-smi on "
                      "one through Session Manager); docs/runbook.md, 'Circuit breaker open'")
    resumes = ([f"fewer than {BREAKER_FAILURES} launches failed"] if launches else []) + \
        ([f"fewer than {BREAKER_FAILURES} machines were first seen degraded"] if degraded else [])
    return f"{text} {'. '.join(checks)}; scaling resumes by itself once {' and '.join(resumes)} in the window."


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, timezone.utc).isoformat(timespec="seconds")


def read_regions(fleets: tuple[FleetConfig, ...], catalog, pending: bool, now: datetime,
                 summary: dict) -> tuple[list[state.RegionView], dict]:
    """Every fleet region that can be read this run; a region that cannot is left out (its jobs wait, its
    machines are neither marked empty nor released this run)."""
    views, prices = [], {}
    for region in dict.fromkeys(f.region for f in fleets):
        in_region = [f for f in fleets if f.region == region]
        with per_item("read-region-failed", summary["errors"], region=region, action="region skipped this run"):
            # Live spot prices matter for buying; with nothing pending the catalog's prices do.
            spot = state.spot_prices_for(region, [t for f in in_region for t in f.instance_types], catalog) \
                if pending else {}
            views.append(state.read_region(region, in_region, catalog, spot, now))
            prices.update({(region, instance_type): price for instance_type, price in spot.items()})
    return views, prices


def breaker_stopped(fleet_views: dict, now: datetime, settings: Settings, summary: dict,
                    degraded: Mapping[tuple[str, str], Sequence[fleet_health.Sighting]] | None = None) -> set:
    """Fleets that may not grow this run: breaker open, or its state unreadable (no purchase on a guess).
    `degraded`: the fleets whose machines came up degraded trip it (fleet_health.judge's `tripped`)."""
    stopped = set()
    for key, fv in fleet_views.items():
        tripped = True
        with per_item("circuit-breaker-failed", summary["errors"], region=key[0], fleet=key[1],
                      action="no scale-out for this fleet this run"):
            tripped = circuit_breaker(fv, now, settings, (degraded or {}).get(key, ()))
        if tripped:
            stopped.add(key)
    return stopped


def judge_fleet_health(ledger: L.Ledger, fleets: tuple[FleetConfig, ...], views: Sequence[state.RegionView],
                       now: datetime, summary: dict) -> fleet_health.Judgement:
    """The fleets whose machines keep coming up degraded (fleet_health.py), from the sightings kept in the
    ledger and this run's degraded machines; the sightings kept again when they changed.

    An item that cannot be read is no memory this run, logged (`fleet-health-read-failed`), not a stopped
    run nor stopped fleets. Failing open is the cheaper error here: the brake only slows a leak that the
    fleet's cap and MAX_HOURLY_USD already bound (a machine bought and given back every few minutes), the
    machines this run sees degraded still count, and the failed-launch breaker still works; failing closed
    would stop every fleet's purchases, healthy ones too, whenever one GetItem is throttled, and leave every
    job waiting, the harm the brake is there to prevent. (A fleet whose failed launches cannot be read is
    stopped, by contrast: that read is of the fleet itself, one fleet at a time.) The write that follows an
    unread item is still conditional (fleet_health.write): it cannot replace sightings it did not read."""
    kept = fleet_health.Kept({})
    with per_item("fleet-health-read-failed", summary["errors"], key=fleet_health.KEY,
                  action="no memory of degraded machines this run: only this run's count toward the breaker"):
        kept = fleet_health.read(ledger.dynamodb, ledger.table)
    read_regions = {view.region for view in views}
    configured = {(f.region, f.fleet) for f in fleets}
    # Machines that came up degraded only (boot_health.came_up_degraded): a fleet whose every machine does is the
    # image's or the launch template's fault. One that degrades while it runs (a GPU fallen off, a start ECS
    # refused) is its own: it is given back, and stopping the fleet's purchases for it would leave jobs waiting.
    degraded = [fleet_health.Degraded(m.region, m.fleet, m.instance_id, m.degraded)
                for view in views for m in view.machines if boot_health.came_up_degraded(m, now)]
    judged = fleet_health.judge(kept.memory, degraded, now.timestamp(), window_s=BREAKER_WINDOW.total_seconds(),
                                threshold=BREAKER_FAILURES, read={k for k in configured if k[0] in read_regions},
                                unread={k for k in configured if k[0] not in read_regions})
    if judged.changed:
        log_decision("fleet-health", first_seen_degraded=[
            {"region": d.region, "fleet": d.fleet, "instance_id": d.instance_id, "reason": d.reason} for d in judged.new],
            in_window={f"{region}/{fleet}": sum(1 for s in memory.sightings
                                                if now.timestamp() - s.at <= BREAKER_WINDOW.total_seconds())
                       for (region, fleet), memory in judged.kept.items()},
            opened=[f"{region}/{fleet}" for region, fleet in judged.opened],
            closed=[f"{region}/{fleet}" for region, fleet in judged.closed],
            remembered=sum(len(memory.sightings) for memory in judged.kept.values()), dropped=judged.dropped)
        fleet_health.write(ledger.dynamodb, ledger.table, judged.kept, kept.version, now.timestamp())
    return judged


def cover_cpu_seconds(remaining_ms: int, memory_mib: str | None) -> float:
    """The most CPU seconds the purchase's cover may take in a run with `remaining_ms` left, on a Lambda of
    `memory_mib` (AWS_LAMBDA_FUNCTION_MEMORY_SIZE; a full vCPU when unknown, as outside Lambda)."""
    mib = int(memory_mib) if memory_mib and memory_mib.isdigit() else 0
    vcpus = min(1.0, mib / FULL_VCPU_MIB) if mib else 1.0
    return max(0.0, (remaining_ms - ACT_RESERVE_MS) / 1000 * vcpus * COVER_SHARE_OF_TIME_LEFT)


def place_and_scale(settings: Settings, fleets: tuple[FleetConfig, ...], catalog, ledger: L.Ledger,
                    quarantine: Quarantine, pending: list[L.JobRecord], remaining_ms: Callable[[], int], now: datetime,
                    summary: dict, held: lease.Lease | None = None, shares: Shares | None = None,
                    headroom_allowed: bool = False) -> None:
    waits = read_recent_waits(settings, ledger, summary) if headroom_allowed else None
    window_s = settings.headroom_window_minutes * 60
    spare = placeholders(waits or [], now.timestamp(), window_s, settings.headroom_max_jobs)
    views, prices = read_regions(fleets, catalog, bool(pending or spare), now, summary)
    with per_item("empty-since-failed", summary["errors"], action="empty times left as they were this run"):
        releases.record_empty(views, now)
    machines = {m.container_instance_arn: m for view in views for m in view.machines}
    fleet_views = {(fv.config.region, fv.config.fleet): fv for view in views for fv in view.fleets}
    health = judge_fleet_health(ledger, fleets, views, now, summary)
    # The metric each fleet's instance refresh stops on (boot_health.py); a failure is logged, never fatal.
    boot_health.publish(settings.environment, fleets, views, now, summary["errors"])
    stopped = breaker_stopped(fleet_views, now, settings, summary, health.tripped)
    current_hourly = sum(fv.hourly_usd for fv in fleet_views.values())
    running: dict[str, L.JobRecord] = {}
    if any(m.jobs for m in machines.values()):
        with per_item("read-running-failed", summary["errors"], state=L.RUNNING,
                      action="machines' busy-until unknown this run"):
            running = {r.job_id: r for r in ledger.by_state(L.RUNNING)}
    beliefs = runtime_beliefs(ledger, [*pending, *running.values()], summary["errors"])
    in_view = list(machines.values())
    boot_s = releases.boot_seconds(in_view) or releases.UNMEASURED_BOOT_S
    no_sharing = fleets_without_gpu_sharing(in_view, catalog)
    requests = plannable(pending, regions(fleets), beliefs, quarantine, now.timestamp(), summary)
    # Only live placement uses it (machines' ends and jobs without a belief): read when there is a job to place.
    prior = runtime_prior(ledger, summary["errors"]) if requests or spare else None
    # A fleet whose breaker is open may not grow: its cap is what it already has.
    plan_fleets = [Fleet(region=fv.config.region, fleet=fv.config.fleet, asg_name=fv.config.asg_name,
                         instance_types=fv.config.instance_types, current_instances=fv.current_instances,
                         pending_instances=fv.pending_instances,
                         max_instances=(fv.current_instances + fv.pending_instances) if key in stopped
                         else fv.max_instances,
                         on_demand_base=fv.config.on_demand_base,
                         on_demand_percent_above_base=fv.config.on_demand_percent_above_base,
                         min_size=fv.min_size, removing_instances=fv.removing_instances,
                         terminating_instances=fv.terminating_instances,
                         gpu_sharing=key not in no_sharing, scaling_stopped=key in stopped)
                   for key, fv in fleet_views.items()]
    cover_budget_s = min(settings.purchase_search_cpu_seconds,
                         cover_cpu_seconds(remaining_ms(), os.environ.get("AWS_LAMBDA_FUNCTION_MEMORY_SIZE")))
    # Jobs an earlier run moved whose tasks are still stopping: the room they go to is held for them.
    moving = moves_under_way(running, {v.region for v in views}, {t for v in views for t in v.tasks},
                             regions(fleets), beliefs, summary)
    # Their tasks still hold the GPUs of the machines they leave until ECS has stopped them: the region view
    # counts them there (state.read_region, `stopping`), as it counts any task ECS is stopping.
    planning_started = time.process_time()
    the_plan = plan(
        requests,
        [Machine(key=m.container_instance_arn, instance_id=m.instance_id, region=m.region, fleet=m.fleet,
                 instance_type=m.instance_type, availability_zone=m.availability_zone, lifecycle=m.lifecycle,
                 free_gpus=m.free_gpus, free_vcpus=m.free_vcpus, free_memory_mib=m.free_memory_mib,
                 price_per_hour=m.price_per_hour, rebalance_recommended=m.rebalance_recommended,
                 draining=m.draining, removing=m.removing,  # never placed onto either
                 submissions=m.submissions, jobs=m.jobs, launched_at=m.launched_at, empty_since=m.empty_since,
                 protected=m.protected, busy_until=busy_until(m, running, beliefs, now.timestamp(), prior),
                 gpu_memory_mib=m.gpu_memory_mib, shared_gpus=m.shared_gpus, gpus=m.gpus, degraded=m.degraded)
         for m in in_view],
        plan_fleets,
        catalog,
        Limits(max_hourly_usd=settings.max_hourly_usd, current_hourly_usd=current_hourly, admission_open=True,
               scaling_allowed=True),
        prices=prices, now=now.timestamp(),
        release=ReleasePolicy(after_empty_s=releases.release_delay_s(settings.release_after_empty_minutes, in_view),
                              budget_percent=settings.disruption_budget_percent),
        interruption_rate=load_interruption_rates().per_hour, boot_s=boot_s,
        shares=shares, headroom=spare, headroom_on=settings.headroom_window_minutes > 0,
        cover_cpu_seconds=cover_budget_s, running=running_jobs(running, regions(fleets), beliefs), moving=moving,
        runtime_prior=prior,
    )
    # In the run's summary line: a plan near its cover's budget is a burst the cover did not finish.
    summary["plan_cpu_s"] = round(time.process_time() - planning_started, 3)
    summary["runtime_prior_runs"] = len(prior.seconds) if prior else 0  # 0: jobs without a belief judged by dear room
    summary["cover_budget_cpu_s"] = round(cover_budget_s, 3)
    records = {r.job_id: r for r in pending}
    definitions: dict[str, actions.TaskDefinitions] = {}
    refused: set[str] = set()  # machines ECS refused a start on for the machine this run: no more starts there
    for n, placement in enumerate(the_plan.placements):
        if remaining_ms() < ACT_RESERVE_MS:
            summary["left_for_next_run"] = len(the_plan.placements) - n
            log_decision("stop-acting", reason="Lambda time running out", left=len(the_plan.placements) - n)
            break
        machine = machines[placement.machine_key]
        if machine.container_instance_arn in refused:
            log_decision("wait", job_id=placement.job_id, instance_id=machine.instance_id,
                         reason="ECS refused a start on its machine this run: placed afresh by the next run")
            continue
        fleet = next(f for f in fleets if (f.region, f.fleet) == (machine.region, machine.fleet))
        definitions.setdefault(machine.region, actions.TaskDefinitions(client("ecs", machine.region),
                                                                           settings.environment))
        with per_item("start-failed-unexpectedly", summary["errors"], job_id=placement.job_id,
                      instance_id=machine.instance_id):
            if start_one(settings, ledger, quarantine, records[placement.job_id], machine, fleet,
                         definitions[machine.region], now.timestamp(), summary) == actions.MACHINE_REFUSED:
                refused.add(machine.container_instance_arn)
                mark_start_refused(machine, now, summary["errors"])
    for job_id, reason in the_plan.waiting:
        log_decision("wait", job_id=job_id, reason=reason)
    summary["waiting"] = len(the_plan.waiting)

    spent = current_hourly
    bought: list[ScaleOut] = []  # what the groups really added, and the jobs it was for
    for scale_out in the_plan.scale_outs:
        with per_item("scale-out-failed", summary["errors"], region=scale_out.region, fleet=scale_out.fleet,
                      asg=scale_out.asg_name):
            launched = scale_one(settings, ledger, records, scale_out, fleet_views, stopped, spent, now, remaining_ms,
                                 summary)
            if launched:
                spent += scale_out.hourly_usd
                bought.append(replace(scale_out, for_jobs=tuple(j for box in scale_out.boxes[:launched] for j in box)))
    if waits is not None:
        keep_recent_waits(settings, ledger, waits, requests, the_plan, bought, spare, now, plan_fleets)
    for scale_out in the_plan.headroom:  # after the real jobs' purchases: what the caps leave
        with per_item("headroom-scale-out-failed", summary["errors"], region=scale_out.region, fleet=scale_out.fleet,
                      asg=scale_out.asg_name):
            if scale_one(settings, ledger, records, scale_out, fleet_views, stopped, spent, now, remaining_ms, summary):
                spent += scale_out.hourly_usd
    with per_item("release-failed", summary["errors"], action="releases tried again next run"):
        give_back(settings, views, the_plan.releases, held, now, summary, remaining_ms)
    move_jobs(the_plan.moves, running, remaining_ms, ACT_RESERVE_MS, summary)


def mark_start_refused(machine: state.MachineView, now: datetime, errors: list[dict]) -> None:
    """Tag the machine ECS refused a start on for the machine, so that later runs place nothing on it for
    state.START_REFUSED_HOLD. A tag that cannot be written costs the job nothing (its start was not counted):
    a later run may place on the machine again, and be refused again."""
    with per_item("start-refused-mark-failed", errors, instance_id=machine.instance_id, region=machine.region,
                  action="not marked: a later run may place on it again"):
        actions.mark_start_refused(client("ec2", machine.region), machine.instance_id, now.isoformat(timespec="seconds"))
        log_decision("start-refused-mark", instance_id=machine.instance_id, region=machine.region,
                     container_instance=machine.container_instance_arn, hold=str(state.START_REFUSED_HOLD))


def read_recent_waits(settings: Settings, ledger: L.Ledger, summary: dict) -> list[RecentWait] | None:
    """The jobs recently bought for (headroom.py), or None when headroom is off or the item unreadable."""
    if settings.headroom_window_minutes == 0:
        return None
    with per_item("read-headroom-failed", summary["errors"], action="no headroom this run"):
        return headroom.read_waits(ledger.dynamodb, ledger.table)
    return None


def keep_recent_waits(settings: Settings, ledger: L.Ledger, waits: list[RecentWait], requests: list[JobRequest],
                      the_plan: Plan, bought: list[ScaleOut], spare: list[JobRequest], now: datetime,
                      fleets: list[Fleet]) -> None:
    """Add the jobs this run bought for to the waits kept, and log what headroom did this run. Only what
    the groups really added (`bought`): a job whose purchase was skipped or cut short is still unreserved,
    and is remembered by the run that buys for it, once."""
    window_s = settings.headroom_window_minutes * 60
    kept = remember(waits, requests, bought, now.timestamp(), window_s, settings.headroom_max_jobs, fleets)
    if kept != waits:
        headroom.write_waits(ledger.dynamodb, ledger.table, kept, now.timestamp())
    if spare or kept:
        log_decision("headroom", placeholders=len(spare), waits_kept=len(kept),
                     bought_ahead=[{"fleet": s.fleet, "region": s.region, "add": s.add_instances}
                                   for s in the_plan.headroom],
                     window_minutes=settings.headroom_window_minutes)


def scale_one(settings: Settings, ledger: L.Ledger, records: dict[str, L.JobRecord], scale_out: ScaleOut,
              fleet_views: dict, stopped: set, spent: float, now: datetime, remaining_ms: Callable[[], int],
              summary: dict) -> int:
    """Raise one group's desired capacity within the caps; returns how many instances it added."""
    key = (scale_out.region, scale_out.fleet)
    fv = fleet_views.get(key)
    if fv is None or key in stopped:
        log_decision("skip-scale-out", region=scale_out.region, fleet=scale_out.fleet, reason="circuit breaker open"
                     if key in stopped else "unknown fleet")
        return 0
    if spent + scale_out.hourly_usd > settings.max_hourly_usd:
        log_decision("skip-scale-out", region=scale_out.region, fleet=scale_out.fleet, hourly_usd=scale_out.hourly_usd,
                     reason=f"would exceed MAX_HOURLY_USD {settings.max_hourly_usd} (now {spent:.2f})")
        return 0
    changed = actions.raise_desired_capacity(client("autoscaling", scale_out.region), scale_out.asg_name,
                                             scale_out.add_instances, fv.max_instances)
    log_decision("scale-out", region=scale_out.region, fleet=scale_out.fleet, asg=scale_out.asg_name,
                 add=scale_out.add_instances, hourly_usd=scale_out.hourly_usd, for_jobs=scale_out.for_jobs,
                 before=changed[0] if changed else None, after=changed[1] if changed else None,
                 applied=changed is not None, cap=fv.max_instances)
    if not changed:
        return 0
    summary["scaled"].append({"asg": scale_out.asg_name, "before": changed[0], "after": changed[1]})
    if scale_out.boxes:  # headroom bought ahead reserves nothing
        reserve_boxes(ledger, records, scale_out, changed[1] - changed[0], now, remaining_ms, summary)
    return changed[1] - changed[0]


def give_back(settings: Settings, views: list[state.RegionView], candidates, held: lease.Lease | None, now: datetime,
              summary: dict, remaining_ms: Callable[[], int]) -> None:
    """The plan's release candidates through the removal executor, under the lease this run holds, and
    the releases an earlier run left half-done (lambdas/scheduler/releases.py)."""
    if held is None:
        if candidates:
            log_decision("release-skipped", reason="no placement lease held: a removal acts only under it",
                         candidates=[c.instance_id for c in candidates])
        return
    # The lease runs to the Lambda's deadline (plus the clock margin): the time it has left is the run's
    # remaining time now, at the end of the run, not what it had when the run took it.
    deadline = held.expires_at - lease.CLOCK_SKEW_SECONDS
    outcome = releases.give_back(
        candidates, views, budget_percent=settings.disruption_budget_percent,
        ledger=LedgerSource(client("dynamodb").meta.region_name, settings.jobs_table),
        lease_expires_at=deadline, now=now, clock=lambda: deadline - remaining_ms() / 1000)
    summary["released"] = sorted(outcome.terminated)
    summary["release_kept"] = dict(sorted(outcome.reactivated.items()))


def reserve_boxes(ledger: L.Ledger, records: dict[str, L.JobRecord], scale_out: ScaleOut, launched: int,
                  now: datetime, remaining_ms: Callable[[], int], summary: dict) -> None:
    """Note in the ledger which jobs each new instance was bought for, so that later runs start them
    together on one instance of the fleet (the packing paid for) instead of repacking them. Only as
    many boxes as instances the group really added (its cap may have cut the raise short). A job left
    unnoted (time running out) is simply packed afresh by the next run."""
    stamp = now.strftime("%Y%m%dT%H%M%S")
    noted = 0
    for n, box in enumerate(scale_out.boxes[:launched]):
        if remaining_ms() < ACT_RESERVE_MS // 2:
            log_decision("stop-reserving", reason="Lambda time running out", asg=scale_out.asg_name, boxes_left=launched - n)
            break
        reservation = (scale_out.region, scale_out.fleet, f"{scale_out.asg_name}/{stamp}/{n}")
        for job_id in box:
            # A job left unnoted is packed afresh by the next run.
            with per_item("reserve-failed", summary["errors"], job_id=job_id):
                noted += ledger.reserve(job_id, records[job_id].attempt, reservation, now.timestamp())
    log_decision("reserve", region=scale_out.region, fleet=scale_out.fleet, asg=scale_out.asg_name,
                 boxes=min(launched, len(scale_out.boxes)), jobs=noted)


