"""The group's replacement of a reclaimed spot instance: kept, or declined by detaching the instance.

At the spot notice, once the instance's jobs are requeued, the rule of
lambdas/scheduler/planning/replacement.py decides: the group replaces the instance only where that costs
no more an hour than buying for the jobs it ran one instance each. Both sides are priced as the planner
prices fleets, at the catalog's spot prices: the replacement at its fleet's dearest type (the group may
launch any of them). An instance of another environment, or one that is no longer InService in a fleet
group of this stack, is left alone.

Declining, in this order:
1. tag the instance `mlfleet:detached-at` (lambdas/common/tags.py). Outside its group it no longer counts
   in the group's desired capacity while it runs its last two minutes, so the scheduler counts it against
   its fleet's caps (lambdas/scheduler/state.py): the fleet's cap and the dollar cap stay hard;
2. DetachInstances with ShouldDecrementDesiredCapacity: "If you do not specify the option to decrement
   the desired capacity, Amazon EC2 Auto Scaling launches instances to replace the ones that are
   detached" (API reference, DetachInstances). The next scheduler run buys what the requeued jobs need.
A refusal (ValidationError: the group at its minimum, for one) keeps the replacement and removes the tag.
A delivery of the same notice again finds the instance outside its group and does nothing more. One that
comes after a failure left it in its group reads no job running there (the first requeued them; the
jobs are the ledger's running and starting ones, read before the requeue: one bounded read, never a
scan of the queue), so it declines: safe, since the planner then buys what the requeued jobs need.

Nothing here ends a detached instance: the spot market does, two minutes after the notice. "The default
behavior is that Amazon EC2 terminates Spot Instances when they are interrupted" (EC2 User Guide,
"Behavior of Spot Instance interruptions"), and the fleets' launch templates ask for no other
(components/compute/fleet.py sets no instance market options). So this function needs no
TerminateInstances. Should one still run, every scheduler run counts it against its fleet's caps and,
past state.DETACHED_GRACE_MINUTES, logs it (`detached-still-running`, lambdas/scheduler/state.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from botocore.exceptions import ClientError

from ..common.aws import client
from ..common.catalog import Catalog, load_catalog
from ..common.errors import describe, error_code
from ..common.logs import log_decision
from ..common.permissions import ISO_8601_TIME, needs
from ..common.tags import DETACHED_AT, ENVIRONMENT
from ..jobs import ledger as L
from ..jobs.fleets import FleetConfig, parse_fleets, regions
from ..scheduler.planning import Fleet, keeps_replacement
from ..scheduler.planning.fleets import purchase_options
from ..scheduler.requests import job_request

INSTANCES = ("arn:{partition}:ec2:*:{account}:instance/*",)
GROUPS = ("arn:{partition}:autoscaling:*:{account}:autoScalingGroup:*:autoScalingGroupName/mlfleet-{environment}-*",)

PERMISSIONS = (
    # Describe* actions of Auto Scaling take no resource (the IAM reference).
    needs("autoscaling:DescribeAutoScalingInstances", why="is a reclaimed instance still InService in its group"),
    needs("autoscaling:DetachInstances", resources=GROUPS, tag_scoped=True,
          why="decline the group's replacement of a reclaimed instance (detach it, desired capacity decremented)"),
    needs("ec2:CreateTags", resources=INSTANCES, tag_scoped=True, tag_keys=(DETACHED_AT,), tag_values=ISO_8601_TIME,
          why="mark a detached instance, so that the scheduler counts it against its fleet's caps"),
    needs("ec2:DeleteTags", resources=INSTANCES, tag_scoped=True, tag_keys=(DETACHED_AT,),
          why="unmark an instance whose detach was refused"),
)


def planning_fleets(fleets: Sequence[FleetConfig]) -> list[Fleet]:
    """The stack's fleets as things to buy (their sizes do not matter to a price)."""
    return [Fleet(f.region, f.fleet, f.asg_name, f.instance_types, 0, 0, f.max_instances,
                  on_demand_base=f.on_demand_base, on_demand_percent_above_base=f.on_demand_percent_above_base)
            for f in fleets]


def settle(instance_id: str, region: str, ran: Sequence[L.JobRecord], fleets_text: str, environment: str,
           now: datetime, catalog: Catalog | None = None) -> dict:
    """Keep or decline the replacement of `instance_id` (reclaimed; `ran`: the records of the jobs the
    ledger held running or starting there before they were requeued)."""
    outcome = {"instance_id": instance_id, "region": region}
    catalog = catalog or load_catalog()
    ec2, autoscaling = client("ec2", region), client("autoscaling", region)
    try:
        found = [i for r in ec2.describe_instances(InstanceIds=[instance_id])["Reservations"] for i in r["Instances"]]
    except ClientError as error:
        if error_code(error) not in ("InvalidInstanceID.NotFound", "InvalidInstanceID.Malformed"):
            raise
        found = []  # gone already: its group has replaced it, or will
    membership = autoscaling.describe_auto_scaling_instances(InstanceIds=[instance_id])["AutoScalingInstances"]
    fleets = parse_fleets(fleets_text)
    fleet = next((f for f in fleets if f.region == region and membership
                  and f.asg_name == membership[0]["AutoScalingGroupName"]), None)
    tags = {t["Key"]: t["Value"] for i in found for t in i.get("Tags", [])}
    reason = None
    if not found or tags.get(ENVIRONMENT) != environment:
        reason = "not an instance of this environment"
    elif fleet is None or membership[0].get("LifecycleState") != "InService":
        reason = "not InService in a fleet group of this environment (detached already, or leaving)"
    if reason is not None:
        log_decision("replacement-left", **outcome, reason=reason)
        return {**outcome, "replacement": "left", "reason": reason}
    # What the replacement may cost: the group launches any of its types, so its dearest (the price the
    # planner gives the fleet; a spot notice comes only for spot instances).
    stack_fleets = planning_fleets(fleets)
    price = next(o.price for o in purchase_options(stack_fleets, catalog, None) if o.fleet.asg_name == fleet.asg_name)
    jobs = [job_request(record, regions(fleets)) for record in ran]
    kept = keeps_replacement(price, jobs, stack_fleets, catalog)
    outcome.update(fleet=fleet.fleet, instance_type=found[0].get("InstanceType"), replacement_per_hour=price,
                   jobs=sorted(j.job_id for j in jobs))
    if kept:
        log_decision("replacement-kept", **outcome, reason="no dearer than buying for its jobs one instance each")
        return {**outcome, "replacement": "kept"}
    ec2.create_tags(Resources=[instance_id], Tags=[{"Key": DETACHED_AT, "Value": now.isoformat(timespec="seconds")}])
    try:
        autoscaling.detach_instances(InstanceIds=[instance_id], AutoScalingGroupName=fleet.asg_name,
                                     ShouldDecrementDesiredCapacity=True)
    except ClientError as error:
        if error_code(error) != "ValidationError":
            raise  # tried again with the event; a member's tag is not counted (state.detached_from)
        ec2.delete_tags(Resources=[instance_id], Tags=[{"Key": DETACHED_AT}])
        log_decision("replacement-kept", **outcome, reason=f"detach refused: {describe(error)}")
        return {**outcome, "replacement": "kept"}
    log_decision("replacement-declined", **outcome, asg=fleet.asg_name,
                 reason="dearer than buying for its jobs one instance each: the scheduler buys for them")
    return {**outcome, "replacement": "declined"}
