"""The scheduler's side of the removal protocol against moto: it notes when its machines became empty,
never places onto a machine being removed, and hands release candidates to the executor.

The candidates are built here with the fields of the planner's `Candidate`
(lambdas/scheduler/planning/model.py on branch `planner`: instance_id, container_instance_arn, region,
asg_name, method, reason); the executor takes any object with those fields. Where moto differs from
AWS: tests/removal/world.py.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

import boto3
from jobs.conftest import (
    ASG, CLUSTER, FAMILY, HOME, build_fleet, create_queues, create_table, open_admission, scheduler_settings, set_teams,
    teams_json,
)
from removal.world import aws, record_calls, stale_read

from lambdas.common import lease
from lambdas.common.catalog import load_catalog
from lambdas.jobs import ledger as L
from lambdas.jobs.fleets import parse_fleets
from lambdas.jobs.spec import assign_ids, parse_spec
from lambdas.removal.execute import LedgerSource
from lambdas.scheduler import releases, state
from lambdas.scheduler.handler import handler, run
from lambdas.scheduler.state import MachineView

NOW = datetime.now(timezone.utc)


@dataclass(frozen=True)
class PlannedRelease:
    """The planner's Candidate, field for field."""
    instance_id: str
    container_instance_arn: str
    region: str
    asg_name: str
    method: str
    reason: str


def home_world() -> dict:
    create_table(HOME)
    queue, dlq = create_queues(HOME)
    open_admission()
    set_teams(teams_json())  # the stack always writes its teams parameter; none listed
    return {"table": "mlfleet-dev-jobs", "queue": queue, "dlq": dlq}


def tags_of(instance_id: str) -> dict[str, str]:
    raw = aws("ec2", HOME).describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0]
    return {t["Key"]: t["Value"] for t in raw.get("Tags", [])}


def queue_one_job(home: dict) -> str:
    spec = parse_spec({"image": "ghcr.io/team/train:1", "command": ["python", "train.py"], "gpus": 1, "vcpus": 1,
                       "memory_mib": 1024}, fleet_regions=(HOME,), catalog=load_catalog(), default_max_attempts=3)
    (job,) = assign_ids("sub-20261122120000-abcdef", [spec])
    assert L.Ledger(boto3.client("dynamodb", HOME), home["table"]).put_new(L.new_record(job, NOW.timestamp()))
    return job.job_id


def test_a_run_marks_its_empty_machines_and_clears_the_mark_when_one_gets_work(fleet_aws):
    home = home_world()
    instances = build_fleet(size=2)
    run(scheduler_settings(home), lambda: 170_000, now=NOW)
    assert all("mlfleet:empty-since" in tags_of(i) for i in instances), "empty machines noted on first sight"
    first_seen = {i: tags_of(i)["mlfleet:empty-since"] for i in instances}

    job_id = queue_one_job(home)
    run(scheduler_settings(home), lambda: 170_000, now=NOW + timedelta(minutes=1))  # starts the job
    run(scheduler_settings(home), lambda: 170_000, now=NOW + timedelta(minutes=2))  # sees it running
    placed = L.Ledger(boto3.client("dynamodb", HOME), home["table"]).get(job_id).placement.instance_id
    assert "mlfleet:empty-since" not in tags_of(placed), "busy again: the mark is cleared"
    (other,) = set(instances) - {placed}
    assert tags_of(other)["mlfleet:empty-since"] == first_seen[other], "still empty: the first sighting stands"


def test_a_machine_being_removed_is_never_placed_onto_nor_counted_as_launching(fleet_aws):
    home = home_world()
    instances = build_fleet(size=2)
    removing, free = list(instances)
    # One job's task on the machine being removed makes it the best fit for the next job (fullest after).
    aws("ecs", HOME).start_task(cluster=CLUSTER, taskDefinition=FAMILY, containerInstances=[instances[removing]],
                                startedBy="sub-20261122110000-abcdef-00001")
    aws("ec2", HOME).create_tags(Resources=[removing], Tags=[{"Key": "mlfleet:removing",
                                                               "Value": "idle@2026-11-22T12:00:00+00:00"}])
    job_id = queue_one_job(home)
    run(scheduler_settings(home), lambda: 170_000, now=NOW)
    record = L.Ledger(boto3.client("dynamodb", HOME), home["table"]).get(job_id)
    assert record.placement is not None and record.placement.instance_id == free
    view = state.read_region(HOME, parse_fleets(scheduler_settings(home).fleets), load_catalog(), {}, NOW)
    (fleet,) = view.fleets
    assert fleet.removing_instances == 1 and fleet.pending_instances == 0, "not capacity on its way"
    assert {m.instance_id: m.removing for m in view.machines} == {removing: True, free: False}


def test_members_terminating_are_counted_apart_for_the_release_stage_s_budget(fleet_aws):
    """A member in Terminating:Wait (a lifecycle hook holds it, up to an hour) is in no count the planner
    had (not usable, not launching, not being removed), so the release stage never counted it against the
    disruption budget while the executor's validation would. moto terminates at once: the answer is made to
    say what AWS says of a member terminated with the decrement."""
    home = home_world()
    instances = build_fleet(size=3)
    held = next(iter(instances))

    def one_terminating(answer):
        for group in answer["AutoScalingGroups"]:
            group["DesiredCapacity"] -= 1
            for member in group["Instances"]:
                if member["InstanceId"] == held:
                    member["LifecycleState"] = "Terminating:Wait"

    stale_read("autoscaling", "DescribeAutoScalingGroups", one_terminating, region=HOME)
    view = state.read_region(HOME, parse_fleets(scheduler_settings(home).fleets), load_catalog(), {}, NOW)
    (fleet,) = view.fleets
    assert fleet.terminating_instances == 1 and fleet.removing_instances == 0


def machine(instance_id: str, *, tasks: int = 0, empty_since: float | None = None, launched: float | None = 1000.0,
            registered: float | None = 1150.0, removing: bool = False) -> MachineView:
    return MachineView(container_instance_arn=f"arn:{instance_id}", instance_id=instance_id, region=HOME, fleet="gpu1",
                       cluster=CLUSTER, instance_type="g5.12xlarge", availability_zone=f"{HOME}a", lifecycle="spot",
                       free_gpus=4, free_vcpus=48, free_memory_mib=190_000, price_per_hour=2.0,
                       rebalance_recommended=False, draining=False, tasks=tasks, empty_since=empty_since,
                       launched_at=launched, registered_at=registered, removing=removing)


def test_empty_marks_are_written_for_new_empties_and_cleared_for_busy_machines_only():
    to_mark, to_clear = releases.empty_changes([
        machine("i-new-empty"), machine("i-still-empty", empty_since=5.0), machine("i-busy", tasks=1),
        machine("i-busy-again", tasks=2, empty_since=5.0), machine("i-being-removed", removing=True)])
    assert to_mark == ["i-new-empty"] and to_clear == ["i-busy-again"]


def test_the_release_delay_is_configured_or_the_measured_boot_time():
    machines = [machine("a", launched=0, registered=150), machine("b", launched=0, registered=170),
                machine("c", launched=0, registered=9_000), machine("d", launched=None), machine("e", registered=None)]
    assert releases.boot_seconds(machines) == 170  # the median: one agent that re-registered late does not count
    assert releases.release_delay_s(None, machines) == 170
    assert releases.release_delay_s(5, machines) == 300
    assert releases.release_delay_s(None, []) == releases.UNMEASURED_BOOT_S


def test_release_candidates_go_through_the_executor_and_a_half_done_release_is_finished(fleet_aws):
    home = home_world()
    instances = build_fleet(size=4, max_size=6)
    arns = dict(instances)
    ids = list(instances)
    view = state.read_region(HOME, parse_fleets(scheduler_settings(home).fleets), load_catalog(), {}, NOW)
    planned = [PlannedRelease(ids[0], arns[ids[0]], HOME, ASG, "release", "empty 600 s, release delay 170 s")]
    outcome = releases.give_back(planned, [view], budget_percent=50, ledger=LedgerSource(HOME, home["table"]),
                                 lease_expires_at=time.time() + 600, now=NOW)
    assert outcome.terminated == [ids[0]]

    # A release cut short (tagged by the scheduler, then the Lambda stopped) is finished by the next run,
    # which proposes nothing new.
    aws("ec2", HOME).create_tags(Resources=[ids[1]], Tags=[{"Key": "mlfleet:removing",
                                                             "Value": f"release@{NOW.isoformat(timespec='seconds')}"}])
    view = state.read_region(HOME, parse_fleets(scheduler_settings(home).fleets), load_catalog(), {}, NOW)
    calls = record_calls(("autoscaling", HOME))
    outcome = releases.give_back([], [view], budget_percent=50, ledger=LedgerSource(HOME, home["table"]),
                                 lease_expires_at=time.time() + 600, now=NOW)
    assert outcome.terminated == [ids[1]] and ("autoscaling", "TerminateInstanceInAutoScalingGroup") in calls


def test_no_removal_in_view_and_no_candidate_costs_no_call(fleet_aws):
    home = home_world()
    build_fleet(size=2)
    view = state.read_region(HOME, parse_fleets(scheduler_settings(home).fleets), load_catalog(), {}, NOW)
    calls = record_calls(("autoscaling", HOME), ("ec2", HOME), ("ecs", HOME))
    assert releases.give_back([], [view], budget_percent=10, ledger=LedgerSource(HOME, home["table"]),
                              lease_expires_at=time.time() + 600, now=NOW).terminated == []
    assert calls == []


class Context:
    """What the scheduler reads of the Lambda context."""
    aws_request_id = "req-release"

    @staticmethod
    def get_remaining_time_in_millis() -> int:
        return 170_000


def test_the_handler_finishes_a_release_cut_short_under_its_lease_and_a_run_without_it_does_not(fleet_aws,
                                                                                                 monkeypatch):
    home = home_world()
    instances = build_fleet(size=3)
    for name, value in vars(scheduler_settings(home)).items():
        if value is not None:
            monkeypatch.setenv(name.upper(), str(value))
    cut_short, *others = instances
    aws("ec2", HOME).create_tags(Resources=[cut_short], Tags=[{"Key": "mlfleet:removing",
                                                                "Value": f"release@{NOW.isoformat(timespec='seconds')}"}])
    aws("ecs", HOME).update_container_instances_state(cluster=CLUSTER, containerInstances=[instances[cut_short]],
                                                      status="DRAINING")
    assert run(scheduler_settings(home), lambda: 170_000, now=NOW).get("released") is None, "no lease, no removal"
    assert handler({}, Context())["released"] == [cut_short]
    group = aws("autoscaling", HOME).describe_auto_scaling_groups(AutoScalingGroupNames=[ASG])["AutoScalingGroups"][0]
    assert group["DesiredCapacity"] == 2 and {i["InstanceId"] for i in group["Instances"]} == set(others)


def test_race_a_run_that_spent_its_lease_before_its_releases_leaves_them_to_the_next_run(fleet_aws):
    """The executor acts only with more than LEASE_MARGIN_SECONDS of the placement lease left. The releases
    come at the end of the scheduler's run, so what is left is the lease's time at that point: here the run
    took its lease 160 s ago for a 170-second run, and a release cut short earlier is left, drained and
    tagged, to the next run instead of being carried on past the margin."""
    home = home_world()
    instances = build_fleet(size=3)
    cut_short = next(iter(instances))
    aws("ec2", HOME).create_tags(Resources=[cut_short], Tags=[{"Key": "mlfleet:removing",
                                                                "Value": f"release@{NOW.isoformat(timespec='seconds')}"}])
    aws("ecs", HOME).update_container_instances_state(cluster=CLUSTER, containerInstances=[instances[cut_short]],
                                                      status="DRAINING")
    started = time.time() - 160
    taken = lease.acquire(boto3.client("dynamodb", HOME), home["table"], "scheduler:slow", now=started,
                          run_seconds=170)
    summary = run(scheduler_settings(home), lambda: 10_000, now=datetime.fromtimestamp(started, timezone.utc),
                  held=taken.lease)
    assert summary["released"] == []
    assert "mlfleet:removing" in tags_of(cut_short)
    group = aws("autoscaling", HOME).describe_auto_scaling_groups(AutoScalingGroupNames=[ASG])["AutoScalingGroups"][0]
    assert group["DesiredCapacity"] == 3 and cut_short in {i["InstanceId"] for i in group["Instances"]}


def test_an_error_in_one_region_s_removals_never_stops_the_run(fleet_aws, monkeypatch):
    home = home_world()
    instances = build_fleet(size=2)
    ids = list(instances)
    view = state.read_region(HOME, parse_fleets(scheduler_settings(home).fleets), load_catalog(), {}, NOW)

    def broken(*args, **kwargs):
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(releases.execute, "remove", broken)
    planned = [PlannedRelease(ids[0], instances[ids[0]], HOME, ASG, "release", "empty")]
    outcome = releases.give_back(planned, [view], budget_percent=50, ledger=LedgerSource(HOME, home["table"]),
                                 lease_expires_at=time.time() + 600, now=NOW)
    assert outcome.left == {ids[0]: "removal failed: RecursionError"} and outcome.terminated == []
