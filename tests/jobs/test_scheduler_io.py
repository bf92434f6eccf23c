"""The scheduler's AWS reads and writes against moto.

Where moto differs from AWS: moto registers container instances with fixed resources (4096 CPU units,
7482 MiB) whatever the instance type, subtracts task-definition values (not overrides) from them, and
has no GPUs at all; the scheduler takes free GPUs from the catalog minus what tasks asked for, so these
tests check exactly that. moto records no failed scaling activities, so the circuit breaker's count is
tested with botocore's Stubber.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import boto3
import pytest
import ecs_agent
from botocore.exceptions import ClientError
from botocore.stub import Stubber
from conftest import ASG, CLUSTER, FAMILY, FLEET_TYPE, HOME, build_fleet, fleets_json, two_fleets_json

from lambdas.common import tags as tag_keys
from lambdas.common.catalog import load_catalog
from lambdas.common.permissions import statements
from lambdas.job_events import replacements
from lambdas.jobs import ledger as L
from lambdas.jobs.fleets import REBALANCE_TAG, parse_fleets
from lambdas.jobs.spec import JobSpec
from lambdas.scheduler import actions, state


@pytest.fixture
def fleet(aws):
    return build_fleet(size=2)


def start_gpu_task(instance_arn: str, gpus: int) -> str:
    ecs = boto3.client("ecs", HOME)
    return ecs.start_task(cluster=CLUSTER, taskDefinition=FAMILY, containerInstances=[instance_arn], startedBy="other",
                          overrides={"containerOverrides": [{"name": "job", "resourceRequirements": [
                              {"type": "GPU", "value": str(gpus)}], "cpu": 2048}]})["tasks"][0]["taskArn"]


def test_read_region_counts_gpus_from_tasks_not_from_the_instance(fleet):
    (busy_id, busy_arn), (free_id, _) = sorted(fleet.items())
    start_gpu_task(busy_arn, 3)
    boto3.client("ec2", HOME).create_tags(Resources=[free_id], Tags=[{"Key": REBALANCE_TAG, "Value": "x"}])
    view = state.read_region(HOME, parse_fleets(fleets_json()), load_catalog(), {})
    machines = {m.instance_id: m for m in view.machines}
    assert machines[busy_id].free_gpus == 1 and machines[free_id].free_gpus == 4
    assert not machines[busy_id].rebalance_recommended and machines[free_id].rebalance_recommended
    # moto's remainingResources: 4096 CPU units minus the task definition's 1024.
    assert machines[busy_id].free_vcpus == 3.0
    assert machines[busy_id].instance_type == FLEET_TYPE and machines[busy_id].lifecycle == "on-demand"
    assert machines[busy_id].price_per_hour == load_catalog().get(FLEET_TYPE).on_demand_price(HOME)
    (fleet_view,) = view.fleets
    assert (fleet_view.desired, fleet_view.current_instances, fleet_view.pending_instances, fleet_view.max_instances) == (2, 2, 0, 4)
    assert fleet_view.hourly_usd == pytest.approx(2 * load_catalog().get(FLEET_TYPE).on_demand_price(HOME))
    assert list(view.tasks.values()) == ["other"]


def test_draining_and_foreign_instances(fleet):
    arn = sorted(fleet.values())[0]
    boto3.client("ecs", HOME).update_container_instances_state(cluster=CLUSTER, containerInstances=[arn], status="DRAINING")
    view = state.read_region(HOME, parse_fleets(fleets_json()), load_catalog(), {})
    assert {m.container_instance_arn: m.draining for m in view.machines}[arn] is True


def test_task_definition_per_image_is_registered_once_and_reused(fleet):
    ecs = boto3.client("ecs", HOME)
    first = actions.TaskDefinitions(ecs)
    arn = first.arn_for(FAMILY, "ghcr.io/team/train:2")
    assert first.arn_for(FAMILY, "ghcr.io/team/train:2") == arn
    described = ecs.describe_task_definition(taskDefinition=arn, include=["TAGS"])
    base = ecs.describe_task_definition(taskDefinition=f"{FAMILY}:1")["taskDefinition"]
    assert described["taskDefinition"]["containerDefinitions"][0]["image"] == "ghcr.io/team/train:2"
    assert described["taskDefinition"]["taskRoleArn"] == base["taskRoleArn"]
    assert described["taskDefinition"]["containerDefinitions"][0]["logConfiguration"] == base["containerDefinitions"][0]["logConfiguration"]
    assert described["tags"] == [{"key": "mlfleet:environment", "value": "dev"}]
    # A later run finds the revision instead of registering another.
    assert actions.TaskDefinitions(ecs).arn_for(FAMILY, "ghcr.io/team/train:2") == arn
    assert len(ecs.list_task_definitions(familyPrefix=FAMILY)["taskDefinitionArns"]) == 2


def test_raise_desired_capacity_never_passes_the_cap(fleet):
    autoscaling = boto3.client("autoscaling", HOME)
    assert actions.raise_desired_capacity(autoscaling, ASG, 5, cap=3) == (2, 3)
    assert actions.raise_desired_capacity(autoscaling, ASG, 1, cap=3) is None
    assert autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=[ASG])["AutoScalingGroups"][0]["DesiredCapacity"] == 3


def test_failed_launches_counts_only_recent_failures():
    autoscaling = boto3.client("autoscaling", HOME)
    now = datetime(2026, 11, 22, 12, tzinfo=timezone.utc)
    activities = [{"ActivityId": str(i), "AutoScalingGroupName": ASG, "Cause": "c", "StartTime": now - timedelta(minutes=m),
                   "StatusCode": code, "Progress": 100}
                  for i, (m, code) in enumerate([(1, "Failed"), (5, "Successful"), (12, "Failed"), (29, "Failed"),
                                                 (31, "Failed"), (50, "Failed")])]
    with Stubber(autoscaling) as stub:
        stub.add_response("describe_scaling_activities", {"Activities": activities},
                          {"AutoScalingGroupName": ASG, "MaxRecords": 100})
        assert state.failed_launches(autoscaling, ASG, now, timedelta(minutes=30)) == 3


def test_receive_stops_when_time_runs_short(home):
    sqs = boto3.client("sqs", HOME)
    for i in range(25):
        sqs.send_message(QueueUrl=home["queue"], MessageBody='{"job_id": "sub-20261122120000-abcdef-%05d", "attempt": 0}' % i)
    sqs.send_message(QueueUrl=home["queue"], MessageBody="not json")
    assert state.receive_messages(sqs, home["queue"], max_messages=100, remaining_ms=lambda: 59_000) == []
    got = state.receive_messages(sqs, home["queue"], max_messages=100, remaining_ms=lambda: 300_000)
    assert len(got) == 26 and sum(r.message is None for r in got) == 1


def test_instances_not_yet_in_the_cluster_are_pending_not_usable(fleet):
    # The scheduler raised desired capacity: moto launches a third instance at once, but it has not
    # joined the cluster (in AWS it boots for minutes first). It is capacity on its way, not a machine.
    boto3.client("autoscaling", HOME).set_desired_capacity(AutoScalingGroupName=ASG, DesiredCapacity=3)
    view = state.read_region(HOME, parse_fleets(fleets_json()), load_catalog(), {})
    (fleet_view,) = view.fleets
    assert (fleet_view.desired, fleet_view.current_instances, fleet_view.pending_instances) == (3, 2, 1)
    assert len(view.machines) == 2


def test_a_draining_machine_is_not_usable_and_its_replacement_is_pending(fleet):
    arn = sorted(fleet.values())[0]
    boto3.client("ecs", HOME).update_container_instances_state(cluster=CLUSTER, containerInstances=[arn], status="DRAINING")
    (fleet_view,) = state.read_region(HOME, parse_fleets(fleets_json()), load_catalog(), {}).fleets
    assert (fleet_view.current_instances, fleet_view.pending_instances) == (1, 1)


def test_running_jobs_tell_which_submissions_a_machine_holds(fleet):
    ecs = boto3.client("ecs", HOME)
    arn = sorted(fleet.values())[0]
    ecs.start_task(cluster=CLUSTER, taskDefinition=FAMILY, containerInstances=[arn],
                   startedBy="sub-20261122120000-abcdef-00003")
    machines = {m.container_instance_arn: m for m in
                state.read_region(HOME, parse_fleets(fleets_json()), load_catalog(), {}).machines}
    assert machines[arn].submissions == frozenset({"sub-20261122120000-abcdef"})
    assert all(not m.submissions for key, m in machines.items() if key != arn)


def test_live_spot_prices_are_used_only_when_plausible(aws):
    # moto answers every DescribeSpotPriceHistory with a dummy $0.00001: implausible, so the catalog's
    # price stays in force. A realistic answer (through botocore's Stubber) is taken.
    catalog = load_catalog()
    assert state.spot_prices_for(HOME, [FLEET_TYPE], catalog) == {}
    on_demand = catalog.get(FLEET_TYPE).on_demand_price(HOME)
    ec2 = boto3.client("ec2", HOME)
    records = [{"AvailabilityZone": f"{HOME}{zone}", "InstanceType": FLEET_TYPE, "ProductDescription": "Linux/UNIX",
                "SpotPrice": price, "Timestamp": datetime(2026, 11, 22, tzinfo=timezone.utc)}
               for zone, price in (("a", "1.70"), ("b", "1.80"), ("c", str(on_demand * 3)))]
    with Stubber(ec2) as stub, pytest.MonkeyPatch.context() as patch:
        patch.setattr("lambdas.common.spot_prices.client", lambda service, region=None: ec2)
        stub.add_response("describe_spot_price_history", {"SpotPriceHistory": records})
        assert state.spot_prices_for(HOME, [FLEET_TYPE], catalog) == {FLEET_TYPE: 1.8}
        stub.add_response("describe_spot_price_history", {"SpotPriceHistory": records[2:]})
        assert state.spot_prices_for(HOME, [FLEET_TYPE], catalog) == {}


def test_spot_prices_fall_back_to_the_catalog_when_the_api_refuses(aws):
    ec2 = boto3.client("ec2", HOME)
    with Stubber(ec2) as stub, pytest.MonkeyPatch.context() as patch:
        patch.setattr("lambdas.common.spot_prices.client", lambda service, region=None: ec2)
        stub.add_client_error("describe_spot_price_history", "UnauthorizedOperation")
        assert state.spot_prices_for(HOME, [FLEET_TYPE], load_catalog()) == {}


def test_a_registered_revision_carries_its_environment_tag_as_the_scheduler_policy_requires(fleet):
    """The scheduler may register a revision only with `aws:RequestTag/mlfleet:environment` equal to its
    environment (lambdas/scheduler/actions.py; moto does not evaluate IAM, so the request is checked
    against the policy's condition here): the tag is sent even when the family's latest revision has none,
    or another environment's value."""
    ecs = boto3.client("ecs", HOME)
    base = ecs.describe_task_definition(taskDefinition=FAMILY, include=["TAGS"])["taskDefinition"]
    ecs.untag_resource(resourceArn=base["taskDefinitionArn"], tagKeys=["mlfleet:environment"])
    ecs.tag_resource(resourceArn=base["taskDefinitionArn"], tags=[{"key": "team", "value": "vision"}])
    sent = []
    ecs_of_the_scheduler = boto3.client("ecs", HOME)
    ecs_of_the_scheduler.meta.events.register("provide-client-params.ecs.RegisterTaskDefinition",
                                              lambda params, **_: sent.append(params))
    arn = actions.TaskDefinitions(ecs_of_the_scheduler, "dev").arn_for(FAMILY, "ghcr.io/team/train:3")
    (grant,) = [s for s in statements([p for p in actions.PERMISSIONS if "ecs:RegisterTaskDefinition" in p.actions],
                                      account="123456789012", region=HOME, environment="dev")]
    ((key, value),) = grant["Condition"]["StringEquals"].items()
    (request,) = sent
    assert {t["key"]: t["value"] for t in request["tags"]}[key.removeprefix("aws:RequestTag/")] == value == "dev"
    assert grant["Condition"]["BoolIfExists"] == {"ecs:privileged": "false"}
    assert not any(c.get("privileged") for c in request["containerDefinitions"])
    assert ecs.describe_task_definition(taskDefinition=arn, include=["TAGS"])["tags"] == [
        {"key": "team", "value": "vision"}, {"key": "mlfleet:environment", "value": "dev"}]


def test_an_instance_detached_at_its_notice_counts_against_its_fleets_cap_until_it_is_gone(fleet):
    """Outside its group it no longer counts in the desired capacity; the fleet's cap and the dollar cap
    must still hold while it runs its last two minutes. Its fleet is named by the `mlfleet.fleet`
    attribute the agent registers (components/compute/user_data.sh); moto's registration takes no
    attributes, so they are put as the agent would have."""
    (detached_id, detached_arn), _ = sorted(fleet.items())
    ecs = boto3.client("ecs", HOME)
    ecs.put_attributes(cluster=CLUSTER, attributes=[
        {"name": state.FLEET_ATTRIBUTE, "value": "gpu1", "targetId": arn}
        for arn in fleet.values()])
    catalog = load_catalog()
    price = catalog.get(FLEET_TYPE).on_demand_price(HOME)
    # A stack where buying alone is cheaper than the group's box, so the notice declines its replacement.
    spec = JobSpec(image="i", command=(), gpus=1, vcpus=2, memory_mib=8192, max_attempts=3)
    ran = [L.JobRecord(job_id="sub-20261122120000-abcdef-00000", submission_id="sub-20261122120000-abcdef", index=0,
                       state=L.RUNNING, attempt=1, runs=1, start_failures=0, submitted_at=0.0, updated_at=0.0, spec=spec,
                       placement=L.Placement(HOME, "gpu1", CLUSTER, detached_arn, detached_id, FLEET_TYPE, "task"))]
    now = datetime(2026, 11, 22, 12, tzinfo=timezone.utc)
    assert replacements.settle(detached_id, HOME, ran, two_fleets_json(), "dev", now)["replacement"] == "declined"

    (fleet_view,) = state.read_region(HOME, parse_fleets(fleets_json()), catalog, {}).fleets
    assert (fleet_view.desired, fleet_view.detached_instances, fleet_view.max_instances) == (1, 1, 4 - 1)
    assert fleet_view.hourly_usd == pytest.approx(2 * price)  # the member and the detached one
    cap = fleet_view.max_instances
    assert actions.raise_desired_capacity(boto3.client("autoscaling", HOME), ASG, 5, cap) == (1, cap)

    boto3.client("ec2", HOME).terminate_instances(InstanceIds=[detached_id])  # the spot market's reclaim
    (fleet_view,) = state.read_region(HOME, parse_fleets(fleets_json()), catalog, {}).fleets
    assert (fleet_view.detached_instances, fleet_view.max_instances) == (0, 4)
    assert tag_keys.DETACHED_AT in {t["Key"] for r in boto3.client("ec2", HOME).describe_instances(
        InstanceIds=[detached_id])["Reservations"] for t in r["Instances"][0].get("Tags", [])}


def test_detached_instances_are_counted_for_their_fleet_and_one_outliving_its_notice_is_logged(caplog):
    """The pure reading: only running instances outside every group, carrying the mark and the attribute
    of a fleet of this stack; past DETACHED_GRACE_MINUTES (or unreadable) the decision line says so."""
    now = datetime(2026, 11, 22, 12, tzinfo=timezone.utc)

    def registered(instance_id: str, fleet: str | None) -> tuple[str, dict]:
        attributes = [{"name": state.FLEET_ATTRIBUTE, "value": fleet}] if fleet else []
        return CLUSTER, {"ec2InstanceId": instance_id, "attributes": attributes}

    def instance(instance_id: str, detached: str | None, status: str = "running") -> dict:
        tags = [{"Key": tag_keys.DETACHED_AT, "Value": detached}] if detached is not None else []
        return {"InstanceId": instance_id, "State": {"Name": status}, "Tags": tags}

    recent, late, unreadable = (now - timedelta(minutes=1)).isoformat(), (now - timedelta(hours=1)).isoformat(), "x"
    cases = {"i-recent": ("gpu1", recent, "running"), "i-late": ("gpu1", late, "running"),
             "i-unreadable": ("gpu1", unreadable, "pending"), "i-gone": ("gpu1", late, "terminated"),
             "i-unmarked": ("gpu1", None, "running"), "i-other-stack": ("elsewhere", late, "running"),
             "i-no-attribute": (None, late, "running"), "i-member": ("gpu1", late, "running")}
    found = state.detached_from([registered(i, f) for i, (f, _, _) in cases.items()],
                                {i: instance(i, d, s) for i, (_, d, s) in cases.items()},
                                {"i-member": parse_fleets(fleets_json())[0]}, {"gpu1"}, now)
    assert {f: sorted(i["InstanceId"] for i in group) for f, group in found.items()} == {
        "gpu1": ["i-late", "i-recent", "i-unreadable"]}
    logged = [r.getMessage() for r in caplog.records if "detached-still-running" in r.getMessage()]
    assert len(logged) == 2 and any("i-late" in m for m in logged) and any("i-unreadable" in m for m in logged)


def test_an_instance_ec2_does_not_know_is_left_out_not_the_whole_region(fleet):
    """DescribeInstances given InstanceIds fails the whole call with InvalidInstanceID.NotFound when one id is
    unknown to EC2 (one terminated long ago whose container instance is still registered, or one just launched:
    EC2's reads are eventually consistent, the EC2 API reference's "Eventual consistency"); the region read
    failed with it, run after run. Given as the instance-id filter, an unknown id is only left out (as the
    removal executor reads them: lambdas/removal/execute.py FILTER_VALUES). moto raises that error as AWS does."""
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.ec2.models import ec2_backends

    ec2 = boto3.client("ec2", HOME)
    reservation = ec2.run_instances(ImageId="ami-12c6146b", InstanceType=FLEET_TYPE, MinCount=1, MaxCount=1)
    gone = reservation["Instances"][0]["InstanceId"]
    ecs_agent.register(boto3.client("ecs", HOME), CLUSTER, gone, HOME)
    # EC2 forgets it (moto checks the id at registration, so it is forgotten after).
    del ec2_backends[DEFAULT_ACCOUNT_ID][HOME].reservations[reservation["ReservationId"]]
    with pytest.raises(ClientError, match="InvalidInstanceID.NotFound"):
        ec2.describe_instances(InstanceIds=[gone])
    view = state.read_region(HOME, parse_fleets(fleets_json()), load_catalog(), {})
    assert sorted(m.instance_id for m in view.machines) == sorted(fleet)
    (fleet_view,) = view.fleets
    assert (fleet_view.current_instances, fleet_view.pending_instances) == (2, 0)


def test_groups_are_described_at_most_50_names_a_call(faults):
    """botocore autoscaling DescribeAutoScalingGroups: "By default, you can only specify up to 50 names"; a
    region with more fleets than that had every read refused. moto takes any number, so the calls are checked."""
    build_fleet(size=1)
    extra = [{**json.loads(fleets_json())[0], "fleet": f"more{n}", "asg_name": f"{ASG}-more{n}"} for n in range(55)]
    fleets = parse_fleets(json.dumps([*json.loads(fleets_json()), *extra]))
    view = state.read_region(HOME, fleets, load_catalog(), {})
    assert [fv.config.asg_name for fv in view.fleets] == [ASG] and len(view.machines) == 1
    calls = faults.carried_out("autoscaling", "DescribeAutoScalingGroups")
    assert calls and all(len(call["AutoScalingGroupNames"]) <= 50 for call in calls)
    assert sorted(n for call in calls for n in call["AutoScalingGroupNames"]) == sorted(f.asg_name for f in fleets)
