"""The end of a submission, announced once, to whoever it asked (`notify`: e-mail addresses, the Slack channel).

The ledger's stream (NEW_IMAGE, filtered to records whose new state is terminal, components/jobs) brings
every job that ends, whoever ended it: the job-events function itself, the scheduler giving up on a job
that cannot start, a person cancelling. For each submission in a batch that asked to be told:

1. its jobs are read through the by-submission index, page by page in job order; the index is eventually
   consistent, so a job it still shows active is read again from the table (consistently) before the
   submission counts as running. Reading stops at the first job really active: while a large submission
   runs, each look reads the pages up to that job, not one read per job nor every page (a submission of
   10,000 jobs is about ten 1 MB pages, and its stream brings a look for each batch of its jobs that end).
2. for each channel (e-mail, Slack), the submission's first job is marked with a conditional write
   (Ledger.mark_notified: `notified` lists the channels told, `notified_at` says when the first was): of
   two invocations that both see the end (a retried batch, two batches), only one marks, so the message
   goes out once. If publishing fails, or the mark's own answer is lost, that channel's mark is taken back
   and the batch fails, so Lambda delivers it again and only the channels not yet told are told (a message
   whose answer was lost may go out twice).
3. e-mail: one message to the job-notification topic with the attribute `notify` listing the addresses;
   each address's subscription filters on it (lambdas/jobs/cli/notify.py). Slack: a custom notification
   (the format AWS Chatbot renders: https://docs.aws.amazon.com/chatbot/latest/adminguide/custom-notifs.html)
   to the topic the environment's Chatbot channel subscribes to.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ..common.alerts import chatbot_notification, sns_subject
from ..common.logs import log_decision, shown
from ..jobs import ledger as L
from ..jobs.spec import SLACK

ATTRIBUTE = "notify"  # the message attribute e-mail subscriptions filter on
SHOWN_FAILURES = 5


def _new_image(record: object) -> Mapping:
    dynamodb = record.get("dynamodb") if isinstance(record, Mapping) else None
    image = dynamodb.get("NewImage") if isinstance(dynamodb, Mapping) else None
    return image if isinstance(image, Mapping) else {}



def submissions_to_check(records: Iterable[Mapping]) -> list[str]:
    """Submissions of the stream records whose job ended and whose spec asks for a notification."""
    found: dict[str, None] = {}
    for position, record in enumerate(records):
        source = record.get("eventSource") if isinstance(record, Mapping) else None
        if source != "aws:dynamodb":
            what = f".eventSource={shown(source)}" if isinstance(record, Mapping) else f"={shown(record)}"
            log_decision("stream-record-skipped", record=position,
                         error=f"Records[{position}]{what}: not a record of the ledger's stream")
            continue
        image = _new_image(record)
        submission = image.get("submission_id")
        submission = submission.get("S") if isinstance(submission, Mapping) else None
        if image.get("state") == {"S": L.QUARANTINED}:
            # Quarantined: it never runs again, but its item cannot be decoded (that is why it is quarantined),
            # so whether its submission asked to be told is read from the submission's other jobs (announce).
            if isinstance(submission, str) and submission:
                found.setdefault(submission)
            continue
        try:
            job = L.decode(record["dynamodb"]["NewImage"])
        except Exception as error:  # a record this code cannot read: say so, and still look at its submission
            log_decision("stream-record-skipped", record=position,
                         error=f"Records[{position}].dynamodb.NewImage: {type(error).__name__}: {str(error)[:200]}")
            # Its job may be the submission's last: announce meets the item through the submission's jobs, the
            # batch's sweep quarantines it, and the quarantine's own record announces the submission. Skipped
            # alone, nothing would ever look at the submission again.
            if isinstance(submission, str) and submission:
                found.setdefault(submission)
            continue
        if job.state in L.TERMINAL and job.spec.notify:
            found.setdefault(job.submission_id)
    return list(found)


def still_running(ledger: L.Ledger, records: Sequence[L.JobRecord]) -> str | None:
    """A job of the submission that is really still active (re-read consistently), or None when all ended."""
    for record in records:
        if record.state in L.TERMINAL:
            continue
        current = ledger.get(record.job_id)
        if current is not None and current.state not in L.TERMINAL:
            return current.job_id
    return None


@dataclass(frozen=True)
class Summary:
    environment: str
    submission_id: str
    jobs: int
    states: Mapping[str, int]
    owner: str | None
    team: str | None
    usd: float
    on_demand_usd: float
    hours: float
    failures: tuple[tuple[str, str], ...]  # (job id, last reason), the first SHOWN_FAILURES

    @property
    def title(self) -> str:
        counts = ", ".join(f"{n} {state.lower()}" for state, n in sorted(self.states.items()))
        return f"mlfleet {self.environment}: {self.submission_id} ended: {counts}"

    def lines(self) -> list[str]:
        who = f"submitted by {self.owner or 'unknown'}" + (f", team {self.team}" if self.team else "")
        text = [f"Submission {self.submission_id} ({self.jobs} job{'s' if self.jobs != 1 else ''}, {who}) has ended "
                f"in {self.environment}."]
        text += [f"  {state:<10} {n}" for state, n in sorted(self.states.items())]
        if self.on_demand_usd:
            text.append(f"Cost: ${self.usd:,.2f} at the prices paid (${self.on_demand_usd:,.2f} on demand, "
                        f"{1 - self.usd / self.on_demand_usd:.0%} saved), {self.hours:,.1f} hours of held capacity.")
        if self.failures:
            text.append(f"Failed jobs{' (the first ' + str(SHOWN_FAILURES) + ')' if len(self.failures) == SHOWN_FAILURES else ''}:")
            text += [f"  {job_id}  {reason}" for job_id, reason in self.failures]
        return text

    def next_steps(self) -> list[str]:
        steps = [f"mlfleet -e {self.environment} follow {self.submission_id}   (the whole history)"]
        if self.failures:
            steps.insert(0, f"mlfleet -e {self.environment} list --submission {self.submission_id} --state FAILED")
        if self.states.get(L.QUARANTINED):
            steps.insert(0, f"mlfleet -e {self.environment} quarantine   (why each was quarantined, and how to resubmit)")
        return steps


def summarize(environment: str, records: Sequence[L.JobRecord],
              quarantined: Sequence[L.Undecodable] = ()) -> Summary:
    """The submission's end: its decoded jobs, and those quarantined (listed with the failures: they went to
    the dead-letter queue with the reason, like a failed job)."""
    first = min(records, key=lambda r: r.index)
    costs = [r.cost for r in records if r.cost is not None]
    failed = [(r.job_id, r.last_reason[:300]) for r in sorted(records, key=lambda r: r.index) if r.state == L.FAILED]
    # The decode error of a quarantined item reads "quarantined: <why>" (ledger.decode).
    failed += [(q.job_id, q.error[:300]) for q in sorted(quarantined, key=lambda q: q.job_id)]
    states = Counter(r.state for r in records) + Counter(L.QUARANTINED for _ in quarantined)
    return Summary(environment=environment, submission_id=first.submission_id, jobs=len(records) + len(quarantined),
                   states=dict(states), owner=first.owner, team=first.spec.team,
                   usd=sum(c.usd for c in costs), on_demand_usd=sum(c.on_demand_usd for c in costs),
                   hours=sum(c.seconds for c in costs) / 3600, failures=tuple(failed[:SHOWN_FAILURES]))


def email(summary: Summary) -> tuple[str, str]:
    """Subject (one SNS accepts: common/alerts.py, sns_subject) and text of the e-mail."""
    return sns_subject(summary.title), "\n".join([*summary.lines(), "", *summary.next_steps()]) + "\n"


def chatbot(summary: Summary) -> str:
    """The Slack message as an AWS Chatbot custom notification."""
    return chatbot_notification(summary.title, "\n".join(summary.lines()), notification_id=summary.submission_id,
                                text_type="client-markdown", next_steps=[f"`{step}`" for step in summary.next_steps()],
                                event_type="SubmissionEnded",
                                additional_context={"submission_id": summary.submission_id})


def announce(ledger: L.Ledger, sns, *, environment: str, submission_id: str, email_topic_arn: str,
             slack_topic_arn: str, now: float) -> str:
    """Announce the submission's end if it has ended and nobody did yet; returns what happened."""
    skipped = len(ledger.undecodable)
    records = []
    for record in ledger.iter_submission(submission_id):
        if (active := still_running(ledger, [record])) is not None:
            return f"running ({active})"  # the pages after this job's are not read
        records.append(record)
    unreadable = ledger.undecodable[skipped:]
    if not records:
        return "no jobs"
    # An item that cannot be decoded and is not quarantined yet is a job whose end is not known: this
    # batch's sweep (or the scheduler) quarantines it, and that record brings the submission back here.
    active = next((bad.job_id for bad in unreadable if not bad.quarantined), None)
    if active is not None:
        return f"running ({active})"
    first = min(records, key=lambda r: r.index)
    wanted = first.spec.notify
    if not wanted:
        return "nobody to tell"
    summary = summarize(environment, records, [bad for bad in unreadable if bad.quarantined])
    addresses = [w for w in wanted if w != SLACK]
    messages = {}  # channel -> the publish that tells it
    if addresses:
        subject, text = email(summary)
        messages["email"] = dict(TopicArn=email_topic_arn, Subject=subject, Message=text, MessageAttributes={
            ATTRIBUTE: {"DataType": "String.Array", "StringValue": json.dumps(addresses)}})
    if SLACK in wanted:
        if slack_topic_arn:
            messages["slack"] = dict(TopicArn=slack_topic_arn, Message=chatbot(summary))
        else:
            log_decision("notify-skipped", submission_id=submission_id, reason="no Slack channel in this environment")
    if not messages:
        return "nobody to tell"
    told = [channel for channel, message in messages.items() if tell(ledger, sns, first.job_id, channel, message, now)]
    if not told:
        return "already announced"
    log_decision("submission-ended", submission_id=submission_id, notified=list(wanted), channels=told,
                 states=dict(summary.states), usd=round(summary.usd, 4))
    return "announced"


def tell(ledger: L.Ledger, sns, first_job_id: str, channel: str, message: Mapping, now: float) -> bool:
    """Publish `message` on `channel` unless it was told already; True when it is told now. The channel is
    marked first (a conditional write: of two invocations only one marks) and the mark taken back when the
    publish fails or the mark's own answer is lost, so the retried batch tells this channel, and only it."""
    try:
        marked = ledger.mark_notified(first_job_id, now, channel)
    except Exception:
        # The mark may have been written and its answer lost: take it back (best effort), so the retried
        # batch announces rather than finding it marked and staying silent.
        ledger.mark_notified(first_job_id, now, channel, undo=True)
        raise
    if not marked:
        return False
    try:
        sns.publish(**message)
    except Exception:
        ledger.mark_notified(first_job_id, now, channel, undo=True)  # so that the retried batch tells it
        raise
    return True
