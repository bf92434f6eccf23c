"""The removal executor against moto (lambdas/removal/execute.py). Each test names the race or fault it
guards against; tests/removal/world.py says where moto differs from AWS."""

from __future__ import annotations

import functools
from datetime import datetime, timedelta, timezone

import moto_state
import pytest
from ecs_agent import held_task_statuses, stopped, stopping
from removal.world import (ASG, CLUSTER, FAULTS, FLEET_REGION, HOME, aws, build, decisions, group_state, inject,
                           interrupt, on_call, place_job_in_ledger, record_calls, run, stale_read, start_task_on,
                           status_of, tags_of)

from lambdas.removal import decide



class Killed(BaseException):
    """The Lambda stopped at its timeout: nothing after this point of the run happens."""


def cut_short_after_the_drain(world, machine: str, method: str = decide.IDLE) -> None:
    """A run that stops (the Lambda's timeout) after draining `machine`, before its re-check."""
    inject("ecs", "ListTasks", lambda op: Killed(), times=1)
    with pytest.raises(Killed):
        run(world, machine, method=method)
    assert status_of(world, machine) == "DRAINING" and tags_of(machine)["mlfleet:removing"].startswith(f"{method}@")


def settled(world, instance_id: str) -> bool:
    """Not left half-done: ACTIVE and untagged, or out of the group."""
    desired, members = group_state()
    if instance_id not in members:
        return True
    return status_of(world, instance_id) == "ACTIVE" and "mlfleet:removing" not in tags_of(instance_id)


def test_an_idle_machine_is_tagged_drained_and_terminated_with_the_group_shrunk(fleet_aws, caplog):
    world = build(size=3)
    idle = world.ids[0]
    outcome = run(world, idle)
    assert outcome.terminated == [idle]
    desired, members = group_state()
    assert desired == 2 and idle not in members, "terminated with the decrement: no replacement"
    steps = [(d["decision"], d.get("instance_id")) for d in decisions(caplog) if d["decision"].startswith("removal-")]
    assert steps == [("removal-propose", idle), ("removal-drain", idle), ("removal-terminate", idle)]


def test_race_a_task_placed_between_the_read_and_the_drain_is_never_killed(fleet_aws):
    """The reaper's finding: it read the machine idle, a task started, then it drained and terminated.
    The re-check after the drain sees the task; the machine is re-activated and kept."""
    world = build(size=3)
    machine = world.ids[0]
    on_call("ecs", "UpdateContainerInstancesState", lambda params: start_task_on(world, machine))
    outcome = run(world, machine)
    assert outcome.terminated == [] and "gained work: 1 ECS task" in outcome.reactivated[machine]
    assert machine in group_state()[1] and group_state()[0] == 3
    assert settled(world, machine)


def test_race_a_re_check_that_still_reads_active_after_the_drain_re_activates_the_machine_it_drained(fleet_aws):
    """ECS reads are eventually consistent ("The Amazon ECS API follows an eventual consistency model",
    botocore's ECS model, RunTask): right after the drain, the re-check may still read the container
    instance ACTIVE. The machine gained work and is kept; the drain this run made must still be undone,
    or it stays DRAINING with its tag gone: never placed onto, never released. moto's reads never lag:
    the stale answer is injected."""
    world = build(size=3)
    machine = world.ids[0]
    start_task_on(world, machine)  # the method read it idle; the task came before the drain

    def still_active(answer):
        for ci in answer["containerInstances"]:
            ci["status"] = "ACTIVE"

    stale_read("ecs", "DescribeContainerInstances", still_active, skip=1)  # the re-check's read
    outcome = run(world, machine)
    assert "gained work" in outcome.reactivated[machine]
    assert status_of(world, machine) == "ACTIVE" and settled(world, machine)


def test_race_a_job_claimed_in_the_ledger_before_its_task_starts_keeps_the_machine(fleet_aws):
    """The scheduler claims a job (STARTING, placed on the machine) before StartTask. A claim with no
    task yet still means the machine is about to get work."""
    world = build(size=2)
    machine = world.ids[1]
    place_job_in_ledger("sub-20261122120000-abcdef-00001", machine)
    outcome = run(world, machine)
    assert "the ledger places sub-20261122120000-abcdef-00001" in outcome.reactivated[machine]
    assert settled(world, machine) and machine in group_state()[1]


def test_group_at_its_minimum_nothing_is_tagged_or_drained(fleet_aws):
    """The reaper's finding: a group at its minimum. Validation drops the candidate before any write."""
    world = build(size=2, min_size=2)
    outcome = run(world, world.ids[0])
    assert "group at its minimum" in outcome.dropped[world.ids[0]]
    assert settled(world, world.ids[0]) and group_state()[0] == 2


def test_a_terminate_refused_below_the_minimum_re_activates_the_machine(fleet_aws):
    """moto does not refuse a terminate that takes desired below the minimum; AWS does, with this
    ValidationError (aws/aws-cli#47). Injected: the survivor must not be left DRAINING."""
    world = build(size=2)
    machine = world.ids[0]
    refusal = "Currently, desiredSize equals minSize (2). Terminating instance without replacement will violate " \
              "group's min size constraint. Either set shouldDecrementDesiredCapacity flag to false or lower group's min size."
    from botocore.exceptions import ClientError
    inject("autoscaling", "TerminateInstanceInAutoScalingGroup",
           lambda op: ClientError({"Error": {"Code": "ValidationError", "Message": refusal}}, op))
    outcome = run(world, machine)
    assert "terminate refused: ValidationError: Currently, desiredSize equals minSize" in outcome.reactivated[machine]
    assert settled(world, machine) and machine in group_state()[1]


def test_race_the_minimum_raised_after_validation_is_read_again_before_the_terminate(fleet_aws):
    world = build(size=2)
    machine = world.ids[0]
    on_call("ecs", "UpdateContainerInstancesState", lambda params: aws("autoscaling")
            .update_auto_scaling_group(AutoScalingGroupName=ASG, MinSize=2))
    outcome = run(world, machine)
    assert "group at its minimum right before the terminate" in outcome.reactivated[machine]
    assert settled(world, machine) and group_state()[0] == 2


def test_race_a_member_reclaimed_after_validation_counts_before_the_terminate(fleet_aws):
    """Validation finds the group one above its minimum (min(desired, in service) = 2, min 1); then the spot
    market takes the other member. The group moves it to Terminating and keeps its desired capacity (it
    launches a replacement): terminating the candidate with the decrement would leave the group with no
    member in service, below its minimum, until the replacement boots. The terminate's read counts the
    members in service, as validation does. moto has no Terminating state (and replaces an instance EC2
    terminated at once): the group's answer to that read is made to say so. Found by the executor's property."""
    world = build(size=2, min_size=1)
    machine, other = world.ids

    def reclaimed(answer):
        for group in answer["AutoScalingGroups"]:
            for member in group["Instances"]:
                if member["InstanceId"] == other:
                    member["LifecycleState"] = "Terminating"

    stale_read("autoscaling", "DescribeAutoScalingGroups", reclaimed, skip=1)  # the terminate's read
    outcome = run(world, machine)
    assert outcome.terminated == [] and "group at its minimum right before the terminate: desired 2, in service 1" \
        in outcome.reactivated[machine]
    assert settled(world, machine) and machine in group_state()[1]


def test_a_lambda_cut_short_after_the_drain_is_resumed_by_the_method_s_next_run(fleet_aws):
    world = build(size=3)
    machine = world.ids[0]
    cut_short_after_the_drain(world, machine)
    # The next run proposes nothing new: it finds the removal in flight and finishes it.
    assert run(world).terminated == [machine]
    assert group_state() == (2, set(world.ids[1:]))


def test_a_resumed_removal_whose_machine_gained_work_is_re_activated(fleet_aws):
    world = build(size=3)
    machine = world.ids[0]
    cut_short_after_the_drain(world, machine)
    start_task_on(world, machine)  # e.g. a user's run-task that ignores DRAINING
    outcome = run(world)
    assert "gained work" in outcome.reactivated[machine] and settled(world, machine)


# At a spot interruption notice ECS's agent (ECS_ENABLE_SPOT_INSTANCE_DRAINING) and job-events drain the
# machine; the Spot request's status says so at once (EC2 User Guide, "Spot request status": marked-for-stop,
# marked-for-termination, or instance-terminated-no-capacity while the instance runs out its two minutes).
NOTICE_CODES = ["marked-for-termination", "marked-for-stop", "instance-terminated-no-capacity"]


def spot_drain(world, machine: str) -> None:
    """What the notice does to the container instance, by the agent's hand or job-events' (the tests' own client)."""
    aws("ecs").update_container_instances_state(cluster=CLUSTER, containerInstances=[world.instances[machine]],
                                               status="DRAINING")


@pytest.mark.parametrize("code", NOTICE_CODES)
def test_race_a_resumed_removal_never_undoes_the_drain_of_a_spot_interruption(fleet_aws, code, caplog):
    """A run tagged the machine and stopped (the Lambda's timeout) before draining it; then its spot notice
    came, and ECS's agent drained it. The next run resumes the removal and finds it DRAINING with work on it
    (a task started by hand): it keeps the machine, but must not set it ACTIVE, or the scheduler places jobs
    on a machine gone within two minutes. It stays DRAINING and tagged, and is finished later (terminated
    here once empty; in AWS the spot market ends it first)."""
    world = build(size=3, spot=True)
    machine = world.ids[0]
    inject("ecs", "UpdateContainerInstancesState", lambda op: Killed())
    with pytest.raises(Killed):
        run(world, machine)
    assert status_of(world, machine) == "ACTIVE" and "mlfleet:removing" in tags_of(machine), "tagged, not drained"
    spot_drain(world, machine)
    interrupt(machine, code)
    task = start_task_on(world, machine)
    outcome = run(world)
    assert machine not in outcome.reactivated, "the notice's drain was undone"
    assert f"under a spot interruption: its Spot request is {code}" in outcome.left[machine]
    assert status_of(world, machine) == "DRAINING" and tags_of(machine)["mlfleet:removing"].startswith("idle@")
    (kept,) = [d for d in decisions(caplog) if d["decision"] == "removal-kept-draining"]
    assert kept["instance_id"] == machine and kept["resumed"] is True

    aws("ecs").stop_task(cluster=CLUSTER, task=task)  # the notice stopped it; the removal is finished
    assert run(world).terminated == [machine] and group_state() == (2, set(world.ids[1:]))


def test_race_a_spot_notice_during_the_removal_s_own_drain_is_never_undone(fleet_aws):
    """The run drains the machine; the notice comes at once, and a task started before the drain is found
    by the re-check. The drain is the run's own, but undoing it now would undo the notice's too."""
    world = build(size=3, spot=True)
    machine = world.ids[0]

    def task_and_notice(params):
        start_task_on(world, machine)
        interrupt(machine)

    on_call("ecs", "UpdateContainerInstancesState", task_and_notice)
    outcome = run(world, machine)
    assert machine not in outcome.reactivated, "the notice's drain was undone"
    assert "gained work: 1 ECS task" in outcome.left[machine] and "marked-for-termination" in outcome.left[machine]
    assert status_of(world, machine) == "DRAINING" and "mlfleet:removing" in tags_of(machine)


def test_a_machine_under_a_spot_interruption_stays_drained_when_its_group_reaches_its_minimum(fleet_aws):
    """The terminate is not made (the minimum was raised since validation): the machine is kept, drained,
    for the spot market to end; its group then replaces it, the minimum holding."""
    world = build(size=3, spot=True)
    machine = world.ids[0]

    def minimum_and_notice(params):
        aws("autoscaling").update_auto_scaling_group(AutoScalingGroupName=ASG, MinSize=3)
        interrupt(machine, "instance-terminated-no-capacity")

    on_call("ecs", "UpdateContainerInstancesState", minimum_and_notice)
    outcome = run(world, machine)
    assert machine not in outcome.reactivated, "the notice's drain was undone"
    assert "group at its minimum right before the terminate" in outcome.left[machine]
    assert "instance-terminated-no-capacity" in outcome.left[machine]
    assert status_of(world, machine) == "DRAINING" and "mlfleet:removing" in tags_of(machine)
    assert group_state()[0] == 3


def test_another_method_s_removal_is_left_to_it_until_stale_then_adopted_by_the_safety_net(fleet_aws):
    world = build(size=3)
    machine = world.ids[0]
    cut_short_after_the_drain(world, machine, decide.RELEASE)
    assert run(world, method=decide.IDLE, adopt_after=timedelta(minutes=30)).terminated == []
    later = datetime.now(timezone.utc) + timedelta(minutes=31)
    assert run(world, method=decide.IDLE, adopt_after=timedelta(minutes=30), now=later).terminated == [machine]


def test_two_actors_propose_the_same_machine_only_one_removes_it(fleet_aws):
    """The scheduler's release and the reaper both propose the machine. They act one after the other
    (the lease); the second finds it gone, or being removed by the first, and drops it."""
    world = build(size=4)
    machine = world.ids[0]
    assert run(world, machine, method=decide.RELEASE).terminated == [machine]
    second = run(world, machine, method=decide.IDLE)
    assert "no longer in group" in second.dropped[machine]
    assert group_state()[0] == 3, "decremented once"

    other = world.ids[1]
    cut_short_after_the_drain(world, other)
    racing = run(world, other, method=decide.RELEASE)
    assert "already being removed (idle since" in racing.dropped[other]


def test_the_disruption_budget_and_the_minimum_bound_one_run(fleet_aws):
    world = build(size=10, min_size=7)
    outcome = run(world, *world.ids, budget_percent=20)
    assert len(outcome.terminated) == 2  # 20% of 10
    assert all("disruption budget of 2" in reason for reason in outcome.dropped.values())
    outcome = run(world, *world.ids[2:], budget_percent=100)
    assert len(outcome.terminated) == 1, "8 - 1 = 7, the minimum"
    assert group_state()[0] == 7


def test_members_terminating_count_against_the_budget(fleet_aws):
    """Two members were terminated with the decrement and a lifecycle hook holds them in Terminating:Wait
    (up to an hour): capacity still being lost. 20% of the 8 desired is 2, both taken: nothing more is
    drained. moto terminates at once (no Terminating state): the group's answer is made to say so."""
    world = build(size=10)
    held = set(world.ids[8:])

    def two_terminating(answer):
        for group in answer["AutoScalingGroups"]:
            group["DesiredCapacity"] = 8
            for member in group["Instances"]:
                if member["InstanceId"] in held:
                    member["LifecycleState"] = "Terminating:Wait"

    stale_read("autoscaling", "DescribeAutoScalingGroups", two_terminating)
    outcome = run(world, *world.ids[:2], budget_percent=20)
    assert outcome.terminated == [] and set(outcome.dropped) == set(world.ids[:2])
    assert all("2 member(s) terminating" in reason for reason in outcome.dropped.values())
    assert all(settled(world, i) for i in world.ids[:2]), "nothing tagged or drained"


def test_a_lease_running_out_defers_everything_before_any_write(fleet_aws):
    world = build(size=3)
    outcome = run(world, world.ids[0], lease_seconds=5)
    assert "lease running out" in outcome.left[world.ids[0]] and settled(world, world.ids[0])


def test_a_dry_run_changes_nothing(fleet_aws):
    world = build(size=3)
    outcome = run(world, world.ids[0], dry_run=True)
    assert outcome.left == {world.ids[0]: "dry run: not drained"} and settled(world, world.ids[0])
    assert group_state()[0] == 3


def test_race_a_keep_alive_written_during_the_drain_keeps_the_machine(fleet_aws):
    """A user protects the machine after validation read its tags (here, while it is being drained): the
    re-check reads the instance's tags again, as it reads its tasks again, and keeps it."""
    world = build(size=3)
    machine = world.ids[0]
    on_call("ecs", "UpdateContainerInstancesState", lambda params: aws("ec2").create_tags(
        Resources=[machine], Tags=[{"Key": "mlfleet:keep-alive", "Value": "true"}]))
    outcome = run(world, machine)
    assert "protected since it was proposed" in outcome.reactivated[machine]
    assert settled(world, machine) and machine in group_state()[1]
    assert run(world, world.ids[1]).terminated == [world.ids[1]]


def test_a_machine_an_operator_drained_and_that_is_kept_stays_drained(fleet_aws):
    """An operator drains a machine by hand (docs/runbook.md, "Taking a machine out of service"), and the
    reaper proposes it. Kept (a keep-alive written during the re-check), it is not set ACTIVE: the removal
    undoes only a drain it made itself. Its own tag goes; the operator's drain stays."""
    world = build(size=3)
    machine = world.ids[0]
    aws("ecs").update_container_instances_state(cluster=CLUSTER, containerInstances=[world.instances[machine]],
                                                status="DRAINING")
    # Written during the re-check's ledger read, before it reads the instance's tags again.
    on_call("dynamodb", "Query", lambda params: aws("ec2").create_tags(
        Resources=[machine], Tags=[{"Key": "mlfleet:keep-alive", "Value": "true"}]), region=HOME)
    outcome = run(world, machine)
    assert "protected since it was proposed" in outcome.reactivated[machine]
    assert status_of(world, machine) == "DRAINING" and "mlfleet:removing" not in tags_of(machine)
    assert machine in group_state()[1]


def test_an_operator_s_drain_stays_when_a_removal_cut_short_is_resumed_and_kept(fleet_aws):
    """The same machine, but the run that began its removal stops before the re-check (the Lambda's timeout),
    and a task is placed on it by hand meanwhile. The next run resumes the removal and keeps the machine: its
    mark says it was DRAINING when the removal began, so the operator's drain stays. Before, a resumed removal
    set any DRAINING machine it kept ACTIVE, the operator's drain included."""
    world = build(size=3)
    machine = world.ids[0]
    aws("ecs").update_container_instances_state(cluster=CLUSTER, containerInstances=[world.instances[machine]],
                                                status="DRAINING")
    cut_short_after_the_drain(world, machine)
    assert tags_of(machine)["mlfleet:removing"].endswith(";found-draining")
    start_task_on(world, machine)
    outcome = run(world)
    assert "gained work" in outcome.reactivated[machine]
    assert status_of(world, machine) == "DRAINING" and "mlfleet:removing" not in tags_of(machine)


def test_a_resumed_removal_the_protocol_drained_itself_is_still_set_active(fleet_aws):
    """Its counterpart: a machine ACTIVE when its removal began carries no such note, and is set ACTIVE again."""
    world = build(size=3)
    machine = world.ids[0]
    cut_short_after_the_drain(world, machine)
    assert not tags_of(machine)["mlfleet:removing"].endswith(";found-draining")
    start_task_on(world, machine)
    run(world)
    assert settled(world, machine)


def stop_on(world, machine: str) -> str:
    """A task on `machine` ECS is stopping, and no job the ledger places there: a job cancelled (the ledger says
    CANCELLED at once) or requeued at its spot notice, saving its results or checkpoint on SIGTERM."""
    task = start_task_on(world, machine)
    aws("ecs").stop_task(cluster=CLUSTER, task=task, reason="moved by the scheduler")
    stopping(task)
    return task


def test_a_machine_whose_last_task_is_still_stopping_is_left_drained_until_the_task_has_stopped(fleet_aws, caplog):
    """After StopTask a task runs up to its stop timeout (110 s: the job saves its checkpoint on SIGTERM) with
    desiredStatus STOPPED, so neither the container instance's counts nor ListTasks' default (RUNNING) show it
    (botocore's ecs model: runningTasksCount counts desiredStatus RUNNING). Before, the re-check called such a
    machine empty and terminated it, and the checkpoint with it. Now it stays drained and tagged, never placed
    onto, and the method's next run after the task has stopped terminates it."""
    world = build(size=3)
    machine = world.ids[0]
    with held_task_statuses():
        task = stop_on(world, machine)
        outcome = run(world, machine)
        assert outcome.terminated == [] and "1 task(s) ECS is stopping" in outcome.left[machine]
        assert status_of(world, machine) == "DRAINING" and tags_of(machine)["mlfleet:removing"].startswith("idle@")
        assert group_state() == (3, set(world.ids))
        (line,) = [d for d in decisions(caplog) if d["decision"] == "removal-deferred"]
        assert line["instance_id"] == machine and "saving its checkpoint" in line["reason"]

        assert machine in run(world).left, "resumed while the task still stops: left again"
        stopped(task)
        assert run(world).terminated == [machine]
    assert group_state()[0] == 2


def test_a_task_stopping_past_any_stop_timeout_no_longer_holds_the_machine(fleet_aws, caplog):
    """ECS kills a job's containers at its stop timeout (at most 120 s on EC2); a task still not stopped 15
    minutes after the removal began is held by a stuck agent, and the machine would be paid for forever."""
    world = build(size=3)
    machine = world.ids[0]
    began = datetime.now(timezone.utc)
    with held_task_statuses():
        stop_on(world, machine)
        assert machine in run(world, machine, now=began).left
        assert machine in run(world, now=began + decide.STOPPING_GRACE - timedelta(seconds=1)).left
        assert run(world, now=began + decide.STOPPING_GRACE).terminated == [machine]
    (line,) = [d for d in decisions(caplog) if d["decision"] == "removal-terminate"]
    assert "past any stop timeout" in line["recheck"]


def test_a_task_stopping_past_the_grace_on_a_machine_ec2_is_interrupting_is_left_for_ec2_to_end(fleet_aws):
    """The grace counts from the removal's mark; a spot notice that came after it (the machine kept drained, not
    re-activated) starts stops whose saves run out the notice's two minutes: EC2 ends the machine itself."""
    world = build(size=3, spot=True)
    machine, other = world.ids[:2]
    began = datetime.now(timezone.utc)
    with held_task_statuses():
        stop_on(world, machine)
        stop_on(world, other)
        assert {machine, other} <= set(run(world, machine, other, now=began, budget_percent=100).left)
        interrupt(machine)
        outcome = run(world, now=began + decide.STOPPING_GRACE, budget_percent=100)
    assert "under a spot interruption" in outcome.left[machine] and outcome.terminated == [other]
    assert status_of(world, machine) == "DRAINING" and "mlfleet:removing" in tags_of(machine)


def test_a_machine_whose_stopping_tasks_cannot_be_read_is_kept(fleet_aws):
    """Unknown means busy, as for the tasks meant to run."""
    world = build(size=3)
    machine = world.ids[0]
    with held_task_statuses():
        stop_on(world, machine)
        inject("ecs", "DescribeTasks", FAULTS["throttle"])
        outcome = run(world, machine)
    assert outcome.terminated == [] and "could not read its stopping tasks" in outcome.reactivated[machine]
    assert settled(world, machine)


# Fault injection: each AWS call of the executor throttles, times out or is refused before it reaches
# AWS, and each write also times out after AWS applied it. Whatever fails, no machine with work is
# terminated, and after the method's next run nothing is left DRAINING or tagged.
CALLS = [
    ("autoscaling", "DescribeAutoScalingGroups", 0), ("autoscaling", "DescribeAutoScalingGroups", 1),
    ("ec2", "DescribeInstances", 0), ("ec2", "DescribeInstances", 1), ("ec2", "CreateTags", 0),
    ("ecs", "DescribeContainerInstances", 0), ("ecs", "DescribeContainerInstances", 1), ("ecs", "UpdateContainerInstancesState", 0),
    ("ecs", "UpdateContainerInstancesState", 1), ("ecs", "ListTasks", 0), ("ecs", "ListTasks", 3),
    ("ecs", "DescribeTasks", 0), ("dynamodb", "Query", 0),
    ("autoscaling", "TerminateInstanceInAutoScalingGroup", 0), ("ec2", "DeleteTags", 0),
    ("ec2", "DescribeSpotInstanceRequests", 0),
]
WRITES = {"CreateTags", "UpdateContainerInstancesState", "TerminateInstanceInAutoScalingGroup", "DeleteTags"}
# Only a timeout can follow a write AWS applied (its answer lost); a throttle or a refusal means it was not.
CASES = [(service, operation, skip, fault, applied) for service, operation, skip in CALLS for fault in FAULTS
         for applied in ((False, True) if operation in WRITES and fault == "timeout" else (False,))]


@functools.cache
def kept_matrix_world() -> dict:
    """Every case's world, built in the first case and put back in the others (tests/moto_state.py): four
    Spot Instances in the group (as the fleets are: a re-activation reads the Spot requests); the first ran a
    job that has ended (its stopped task is listed and described, not stopping), the second runs a task, and
    a job is claimed on the third in the ledger."""
    world = build(size=4, spot=True)
    idle, busy, claimed = world.ids[:3]
    aws("ecs").stop_task(cluster=CLUSTER, task=start_task_on(world, idle), reason="the job ended")
    start_task_on(world, busy)
    place_job_in_ledger("sub-20261122120000-abcdef-00001", claimed)
    return moto_state.keep(world)


@pytest.mark.parametrize("service, operation, skip, fault, applied", CASES,
                         ids=[f"{o}#{s}-{f}{'-applied' if a else ''}" for _, o, s, f, a in CASES])
def test_fault_on_each_call_never_kills_work_and_the_next_run_settles_everything(fleet_aws, service, operation, skip,
                                                                                    fault, applied):
    world = moto_state.put_back(kept_matrix_world())
    idle, busy, claimed = world.ids[:3]
    # The busy machines look idle to the method (it read them before they got work): all three proposed.
    proposed = (idle, busy, claimed)
    fired = inject(service, operation, FAULTS[fault], region=HOME if service == "dynamodb" else FLEET_REGION,
                   applied=applied, skip=skip)
    run(world, *proposed, budget_percent=100)
    assert fired, f"{operation} was not called {skip + 1} time(s): the case tests nothing"
    run(world, *proposed, budget_percent=100)  # the next run, proposing what is still idle

    desired, members = group_state()
    assert busy in members and claimed in members, "a machine with work was terminated"
    assert idle not in members, "the idle machine is removed by the second run at the latest"
    assert desired == 3
    for instance_id in members:
        assert settled(world, instance_id), f"{instance_id} left DRAINING or tagged after the next run"


def test_each_call_the_executor_makes_is_one_the_fault_matrix_covers(fleet_aws):
    """The matrix above is only complete if it names every call a removal makes; record them."""
    world = build(size=3, spot=True)
    start_task_on(world, world.ids[1])
    aws("ecs").stop_task(cluster=CLUSTER, task=start_task_on(world, world.ids[0]), reason="the job ended")
    made = record_calls(("autoscaling", FLEET_REGION), ("ec2", FLEET_REGION), ("ecs", FLEET_REGION), ("dynamodb", HOME))
    run(world, world.ids[0], world.ids[1], budget_percent=100)
    assert set(made) == {(s, o) for s, o, _ in CALLS}, set(made) ^ {(s, o) for s, o, _ in CALLS}


@pytest.mark.parametrize(("skip", "decision", "why"), [
    (0, "removal-dropped", "groups unreadable"),  # the read before validation: nothing tagged or drained
    (1, "removal-deferred", "groups unreadable before the terminate"),  # the read right before the terminate
], ids=["before-validation", "before-the-terminate"])
def test_groups_unreadable_each_machine_gets_its_line_with_the_reason(fleet_aws, caplog, skip, decision, why):
    """docs/removal.md: one structured line per decision, so that `filter instance_id = ...` answers why a
    machine was not removed. A group read that fails logs one removal-error without any machine; each
    machine it stops must still get its own line (dropped before the drain, deferred before the terminate)."""
    world = build(size=3)
    machine = world.ids[0]
    inject("autoscaling", "DescribeAutoScalingGroups", FAULTS["throttle"], skip=skip)
    outcome = run(world, machine)
    assert outcome.terminated == [] and why in {**outcome.dropped, **outcome.left}[machine]
    lines = [d for d in decisions(caplog) if d.get("instance_id") == machine and d["decision"] == decision]
    assert len(lines) == 1 and why in lines[0]["reason"], decisions(caplog)
