"""What a job costs: its dominant share of the instance, for the time it held it, at the price paid; each run
charged once, at the terminal transition of the run (job events), and the report that sums them."""

from __future__ import annotations

from dataclasses import replace

import pytest

from lambdas.common.catalog import load_catalog
from lambdas.job_events import decide as D
from lambdas.jobs import costs
from lambdas.jobs import ledger as L
from lambdas.jobs.spec import JobSpec

CATALOG = load_catalog()
JOB = "sub-20261122191103-0a1b2c-00007"
TASK = "arn:aws:ecs:us-east-1:123456789012:task/mlfleet-dev/abc"
# g5.12xlarge in us-east-1: 4 GPUs, 48 vCPUs, 187,719 MiB schedulable; on demand $5.672/h in the catalog.
PLACED_AT = 1_800_000_000.0
PLACE = L.Placement("us-east-1", "gpu4", "mlfleet-dev", "arn:ci/1", "i-1", "g5.12xlarge", TASK, lifecycle="spot",
                    price_per_hour=2.0, placed_at=PLACED_AT)


def spec(gpus=1, vcpus=4.0, memory_mib=16384, **changes) -> JobSpec:
    return JobSpec(image="img", command=("run",), gpus=gpus, vcpus=vcpus, memory_mib=memory_mib, max_attempts=3,
                   **changes)


def record(state=L.RUNNING, attempt=1, placement=PLACE, cost=None, **spec_changes) -> L.JobRecord:
    return L.JobRecord(job_id=JOB, submission_id=JOB[:-6], index=7, state=state, attempt=attempt, runs=1,
                       start_failures=0, submitted_at=0.0, updated_at=0.0, spec=spec(**spec_changes),
                       placement=placement, cost=cost)


@pytest.mark.parametrize("request_, share", [
    ({"gpus": 1, "vcpus": 4, "memory_mib": 16384}, 1 / 4),  # the GPU share dominates
    ({"gpus": 1, "vcpus": 36, "memory_mib": 16384}, 36 / 48),  # vCPUs dominate
    ({"gpus": 1, "vcpus": 4, "memory_mib": 150_000}, 150_000 / 187_719),  # memory dominates
    ({"gpus": 4, "vcpus": 48, "memory_mib": 187_719}, 1.0),
])
def test_the_share_is_the_largest_of_gpu_vcpu_and_memory(request_, share):
    assert costs.dominant_share(spec(**request_), CATALOG.get("g5.12xlarge")) == pytest.approx(share)


def test_a_run_costs_its_share_for_the_time_held_at_the_price_paid_and_on_demand():
    cost = costs.run_cost(record(), PLACED_AT + 1800, CATALOG)
    assert cost == L.Cost(usd=pytest.approx(0.25 * 2.0 * 0.5), on_demand_usd=pytest.approx(0.25 * 5.672 * 0.5),
                          seconds=1800, charged_attempt=1)


def test_a_run_is_charged_once_and_runs_add_up():
    first = costs.run_cost(record(), PLACED_AT + 3600, CATALOG)
    assert costs.run_cost(record(cost=first), PLACED_AT + 7200, CATALOG) is None  # the same attempt again
    second = costs.run_cost(record(attempt=2, cost=first), PLACED_AT + 7200, CATALOG)
    assert (second.seconds, second.charged_attempt) == (3600 + 7200, 2)
    assert second.usd == pytest.approx(0.25 * 2.0 * 3)


def test_without_a_recorded_price_the_catalog_price_of_the_lifecycle_is_used():
    spot = costs.run_cost(record(placement=replace(PLACE, price_per_hour=None)), PLACED_AT + 3600, CATALOG)
    on_demand = costs.run_cost(record(placement=replace(PLACE, price_per_hour=None, lifecycle="on-demand")),
                               PLACED_AT + 3600, CATALOG)
    entry = CATALOG.get("g5.12xlarge")
    assert spot.usd == pytest.approx(0.25 * entry.spot_price("us-east-1"))
    assert on_demand.usd == pytest.approx(on_demand.on_demand_usd) == pytest.approx(0.25 * entry.on_demand_price("us-east-1"))


def test_without_a_placement_time_the_claim_in_the_history_is_used():
    old = replace(record(placement=replace(PLACE, placed_at=None)),
                  reasons=({"at": PLACED_AT - 500, "attempt": 0, "state": L.QUEUED, "reason": "submitted"},
                           {"at": PLACED_AT + 100, "attempt": 1, "state": L.STARTING, "reason": "placed"}))
    assert costs.run_cost(old, PLACED_AT + 3700, CATALOG).seconds == 3600


@pytest.mark.parametrize("placement", [None, replace(PLACE, instance_type="x9.huge"), replace(PLACE, region="mars-1")])
def test_nothing_is_charged_that_cannot_be_priced(placement):
    assert costs.run_cost(record(placement=placement), PLACED_AT + 60, CATALOG) is None


# --- charged by job events at the end of each run -------------------------------------------------

def stopped(exit_code=0, stop_code="EssentialContainerExited", attempt=1, stopped_at="2027-01-15T08:30:00Z") -> D.TaskStateChange:
    return D.parse_event({
        "detail-type": "ECS Task State Change", "source": "aws.ecs", "region": "us-east-1", "time": "2027-01-15T08:31:00Z",
        "detail": {"clusterArn": "arn:aws:ecs:us-east-1:123456789012:cluster/mlfleet-dev", "taskArn": TASK,
                   "startedBy": JOB, "lastStatus": "STOPPED", "desiredStatus": "STOPPED", "stopCode": stop_code,
                   "stoppedAt": stopped_at, "containers": [{"name": "job", "exitCode": exit_code}],
                   "overrides": {"containerOverrides": [{"name": "job", "environment": [
                       {"name": "MLFLEET_ATTEMPT", "value": str(attempt)}]}]}}})


STOPPED_AT = 1_800_000_000.0 + 1800  # 2027-01-15T08:30:00Z


def test_the_stopped_event_charges_the_run_up_to_the_tasks_stoppedAt():
    assert stopped().stopped_at == STOPPED_AT
    for event, to_state in ((stopped(0), L.SUCCEEDED), (stopped(1), L.FAILED), (stopped(0, "SpotInterruption"), L.QUEUED)):
        decision = D.decide_task_change(event, record(), CATALOG)
        assert decision.to_state == to_state and decision.changes["cost"].seconds == 1800


def test_a_job_cancelled_while_it_ran_is_charged_when_its_task_stops_and_only_once():
    decision = D.decide_task_change(stopped(143), record(state=L.CANCELLED), CATALOG)
    assert decision.to_state is None and decision.expect_state == L.CANCELLED
    assert decision.changes == {"cost": costs.run_cost(record(), STOPPED_AT, CATALOG)}
    charged = record(state=L.CANCELLED, cost=decision.changes["cost"])
    assert D.decide_task_change(stopped(143), charged, CATALOG).changes == {}
    # a cancelled job that no task of this attempt ran for is never charged
    assert D.decide_task_change(stopped(143), record(state=L.CANCELLED, placement=None), CATALOG).changes == {}


def test_an_interruption_charges_the_run_up_to_the_warning():
    (decision,) = D.decide_interruption("i-1", [record()], now=PLACED_AT + 600, catalog=CATALOG)
    assert decision.to_state == L.QUEUED and decision.changes["cost"].seconds == 600


# --- the report ---------------------------------------------------------------------------------------

def test_the_report_groups_sums_and_totals():
    def finished(job, owner, team, usd, on_demand, state=L.SUCCEEDED):
        return replace(record(state=state, team=team), job_id=job, owner=owner,
                       cost=L.Cost(usd, on_demand, 3600, 1) if usd else None)

    records = [finished("a", "ana", "vision", 1.0, 3.0), finished("b", "ana", "vision", 2.0, 4.0),
               finished("c", "bo", None, 0.5, 2.0), finished("d", "bo", None, 0.0, 0.0, state=L.QUEUED)]
    by_team = costs.cost_report(records, "team", sorted(L.TERMINAL))
    assert [(r.group, r.jobs, r.ended, r.usd, r.on_demand_usd) for r in by_team] == [
        ("vision", 2, 2, 3.0, 7.0), ("(none)", 2, 1, 0.5, 2.0), ("total", 4, 3, 3.5, 9.0)]
    assert by_team[-1].saved == pytest.approx(1 - 3.5 / 9.0) and by_team[-1].hours == 3
    assert [r.group for r in costs.cost_report(records, "owner", L.TERMINAL)] == ["ana", "bo", "total"]
    assert costs.cost_report([], "submission", L.TERMINAL)[-1].saved is None
    with pytest.raises(ValueError, match="cannot group costs by 'colour'"):
        costs.cost_report(records, "colour", L.TERMINAL)
