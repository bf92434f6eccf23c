"""What a scheduler run plans from (lambdas/scheduler/handler.py read_pending), over queues of every shape held
in plain data: a ledger whose two indexes answer as DynamoDB's Query does (oldest first, pages of at most
Limit items) and count what they read. docs/scheduler.md, "One run at scale": with teams, an equal part
of MAX_PENDING for each listed team and for the jobs of no listed team, which are the default team's
(docs/scheduler.md, "Teams, shares and priorities"), whatever the queue's length."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lambdas.common.catalog import load_catalog
from lambdas.jobs import ledger as L
from lambdas.jobs.spec import assign_ids, parse_spec
from lambdas.scheduler import handler, teams

SPEC = parse_spec({"image": "img:1", "command": ["run"], "gpus": 1, "vcpus": 2, "memory_mib": 4096},
                  fleet_regions=("us-east-1",), catalog=load_catalog(), default_max_attempts=2)
LISTED, UNLISTED = ("vision", "speech", "nlp"), ("gone", "old-name")


@dataclass
class Queued:
    record: L.JobRecord
    indexed: bool  # under its team's key (or NO_TEAM) in the by-team index: written since the index and the key


@dataclass
class PlainLedger:
    """The ledger's reads as read_pending uses them, over a list of queued jobs."""
    jobs: list[Queued]
    read: int = 0  # items the queries returned
    limits: list[int | None] = field(default_factory=list)

    def _pages(self, records, page_size):
        ordered = sorted(records, key=lambda r: (r.submitted_at, r.job_id))
        self.limits.append(page_size)
        for start in range(0, len(ordered), page_size or len(ordered) or 1):
            page = ordered[start:start + (page_size or len(ordered))]
            self.read += len(page)
            yield from page

    def by_state(self, state, limit=None):
        assert state == L.QUEUED
        return list(itertools.islice(self._pages([q.record for q in self.jobs], limit), limit))

    def iter_queued_of_team(self, team, page_size=None):
        return self._pages([q.record for q in self.jobs if q.indexed and q.record.spec.team == team], page_size)

    def queued_of_team(self, team, limit=None):
        return list(itertools.islice(self.iter_queued_of_team(team, page_size=limit), limit))


@st.composite
def queues(draw):
    teams = draw(st.lists(st.sampled_from([*LISTED, *UNLISTED, None]), max_size=40))
    jobs = []
    for n, team in enumerate(teams):
        (job,) = assign_ids(f"sub-20261122{n:06d}-0a1b2c", [replace(SPEC, team=team)])
        at = draw(st.integers(0, 50))  # ties on the submission time too
        jobs.append(Queued(L.new_record(job, now=float(at)), indexed=draw(st.integers(0, 5)) > 0))
    return jobs


@settings(max_examples=300, deadline=None)
@given(queues(), st.integers(1, 3), st.lists(st.sampled_from(UNLISTED), unique=True), st.integers(4, 16))
def test_each_listed_team_and_the_jobs_of_no_listed_team_get_their_part_within_bounded_reads(
        jobs, listed_count, known, max_pending):
    listed = LISTED[:listed_count]
    ledger = PlainLedger(jobs)
    original, handler.MAX_PENDING = handler.MAX_PENDING, max_pending
    try:
        pending = handler.read_pending(ledger, listed, unlisted=known)
    finally:
        handler.MAX_PENDING = original
    each = max(1, max_pending // (len(listed) + 1))
    order = [(r.submitted_at, r.job_id) for r in pending]
    ids = {r.job_id for r in pending}

    assert len(pending) <= max_pending and order == sorted(set(order))
    oldest_first = sorted(jobs, key=lambda q: (q.record.submitted_at, q.record.job_id))
    # Each listed team: its oldest `each` the index holds.
    taken = set()
    for team in listed:
        mine = [q.record.job_id for q in oldest_first if q.indexed and q.record.spec.team == team][:each]
        assert set(mine) <= ids, team
        taken |= set(mine)
    # The default team's part: the oldest `each` of the jobs of no listed team the index holds under no team or
    # a name it knows, and of the oldest `each` of all, those no team's part took (not in the index yet).
    readable = [q for q in oldest_first
                if (q.indexed and (q.record.spec.team is None or q.record.spec.team in known))]
    among_oldest = [q for q in oldest_first[:each] if q.record.job_id not in taken]
    rest = sorted({q.record.job_id: q for q in [*readable, *among_oldest]}.values(),
                  key=lambda q: (q.record.submitted_at, q.record.job_id))[:each]
    assert {q.record.job_id for q in rest} <= ids
    assert ids == taken | {q.record.job_id for q in rest}
    # Bounded and batched: pages of at most a part, and no more read than the parts and two more.
    assert all(limit is not None and limit <= each for limit in ledger.limits)
    assert ledger.read <= max_pending + 2 * each + len(known) + 1


def test_a_job_of_an_unlisted_team_behind_a_listed_team_s_backlog_is_read():
    """The starvation this fixes: a listed team's backlog older than a part filled the oldest of all, where
    alone the jobs of no listed team were read, and a renamed team's job was never planned."""
    backlog = [Queued(L.new_record(job, now=float(job.index)), True)
               for job in assign_ids("sub-20261122000001-0a1b2c", [replace(SPEC, team="vision")] * 10)]
    (renamed,) = assign_ids("sub-20261122000002-0a1b2c", [replace(SPEC, team="gone")])
    (of_none,) = assign_ids("sub-20261122000003-0a1b2c", [SPEC])
    late = [Queued(L.new_record(renamed, now=100.0), True), Queued(L.new_record(of_none, now=101.0), True)]
    original, handler.MAX_PENDING = handler.MAX_PENDING, 6
    try:
        pending = handler.read_pending(PlainLedger([*backlog, *late]), ("vision", "speech"), unlisted=("gone",))
    finally:
        handler.MAX_PENDING = original
    assert {r.job_id for r in pending} >= {renamed.job_id, of_none.job_id} and len(pending) <= 6


NAMES = st.sampled_from(["vision", "speech", "gone", "old-name"])


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(NAMES, st.floats(0, 4 * teams.FORGET_AFTER_S)), st.lists(NAMES | st.none()),
       st.floats(0, 4 * teams.FORGET_AFTER_S))
def test_team_names_are_remembered_while_seen_and_forgotten_a_day_after(seen, names, now):
    """teams.py: a name is kept while a run sees it (listed, or a job of it read) and forgotten FORGET_AFTER_S
    after a run last saw it; None (a job of no team) is no name."""
    kept = teams.remember(seen, names, now)
    for name in {n for n in names if n}:
        assert kept[name] == now
    for name, when in seen.items():
        if name not in names:
            assert (name in kept) == (now - when < teams.FORGET_AFTER_S) and kept.get(name, when) == when
    assert set(kept) <= set(seen) | set(names) and None not in kept


@pytest.mark.parametrize(("seen", "listed", "unlisted"), [
    ({"vision": 1.0, "speech": 1.0}, ("vision", "speech"), []),
    ({"vision": 1.0, "speech": 1.0}, ("vision",), ["speech"]),  # speech renamed away or removed
    ({}, ("vision",), []),  # the first run that keeps names
    ({"vision": 1.0, "gone": 1.0, "old-name": 1.0}, (), ["gone", "old-name", "vision"]),
])
def test_the_unlisted_names_are_those_seen_and_not_listed(seen, listed, unlisted):
    assert teams.unlisted(seen, listed) == unlisted
