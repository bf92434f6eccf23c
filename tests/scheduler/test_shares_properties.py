"""Properties of the shares stage (lambdas/scheduler/planning/shares.py) against docs/scheduler.md "Teams,
shares and priorities", over random teams, queues, held and reserved jobs and room: each test names the
sentence it holds the stage to."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from lambdas.jobs.spec import PRIORITIES
from lambdas.scheduler.planning import JobRequest, Shares, Team
from lambdas.scheduler.planning.shares import AGING_S, MAX_PRIORITY, queue_order

HOUR = AGING_S


def request(job_id: str, team: str | None = "a", gpus: int = 1, *, priority: int = 5, at: float = 0.0,
            **kw) -> JobRequest:
    return JobRequest(job_id, f"sub-{team}", gpus, kw.pop("vcpus", 8 * max(gpus, 1)),
                      kw.pop("memory_mib", 32768 * max(gpus, 1)), submitted_at=at, team=team, priority=priority, **kw)


# --- within a team: priority, then age, one step per hour waited ---------------------------------------

def test_escalation_stops_at_the_highest_priority_a_job_may_have():
    assert MAX_PRIORITY == PRIORITIES.stop - 1


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 9), st.integers(0, 9), st.floats(0, 40_000), st.floats(1, 40_000), st.floats(0, 30 * HOUR))
def test_no_newer_job_stays_ahead_of_a_waiting_job_for_more_than_ten_hours(old_priority, new_priority, submitted,
                                                                           later, past_bound):
    """"A waiting job gains one priority step per hour, so no newer job of its team stays ahead of a
    priority-0 job for more than ten hours": whatever the newer job's priority, and however long it has
    waited too. Before, both aged alike, so a priority-9 job submitted a minute after a priority-0 one
    stayed nine steps ahead of it for ever."""
    old = request("old", priority=old_priority, at=submitted)
    new = request("new", priority=new_priority, at=submitted + later)
    now = submitted + 10 * HOUR + past_bound
    assert queue_order(old, now) < queue_order(new, now)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 9), st.integers(0, 9), st.floats(0, 20 * HOUR), st.floats(1, 20 * HOUR))
def test_a_newer_job_is_ahead_only_by_a_higher_priority_not_yet_made_up_by_waiting(old_priority, new_priority,
                                                                                     waited, later):
    """"Higher priority first, then the oldest": an older job is ahead unless the newer one's priority is
    higher than the older's plus its whole hours waited (both capped at the highest priority)."""
    old = request("old", priority=old_priority, at=0.0)
    new = request("new", priority=new_priority, at=later)
    now = later + waited
    old_level = min(MAX_PRIORITY, old_priority + int(now // HOUR))
    new_level = min(MAX_PRIORITY, new_priority + int(waited // HOUR))
    assert (queue_order(new, now) < queue_order(old, now)) == (new_level > old_level)


def test_a_team_of_one_queue_keeps_the_bound_in_the_stage():
    """Through the stage: one free slot, a priority-0 job of ten hours and a priority-9 job of nine hours
    fifty-nine minutes: the older is offered."""
    from lambdas.common.catalog import load_catalog
    from lambdas.scheduler.planning import Fleet, Limits, Machine
    from lambdas.scheduler.planning.shares import offer_jobs

    catalog = load_catalog()
    four = catalog.get("g6.12xlarge")
    machine = Machine("m", "i-m", "us-east-1", "gpu4", four.name, "us-east-1a", "spot", 1, four.schedulable_vcpus - 24,
                      four.schedulable_memory_mib - 3 * 32768, four.spot_price("us-east-1"))
    now = 10 * HOUR
    jobs = [request("old", priority=0, at=0.0), request("urgent", priority=9, at=60.0)]
    offer = offer_jobs(jobs, [machine], [Fleet("us-east-1", "gpu4", "mlfleet-dev-gpu4", (four.name,), 1, 0, 1)],
                       catalog, Limits(max_hourly_usd=1000, current_hourly_usd=0), Shares({"a": Team()}, now=now))
    assert [j.job_id for j in offer.jobs] == ["old"]
