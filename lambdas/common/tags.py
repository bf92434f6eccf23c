"""Tag keys users see (DESIGN.md "Names users see"). The program and the Lambdas both use these."""

ENVIRONMENT = "mlfleet:environment"
MANAGED_BY = "mlfleet:managed-by"
MANAGED_BY_VALUE = "pulumi"
# The fleet (Auto Scaling group role) an instance belongs to, e.g. "gpu1"; set by the ASG at launch.
FLEET = "mlfleet:fleet"
# On an instance: the reaper never touches it. Value "true", or an ISO-8601 time until which it is kept.
KEEP_ALIVE = "mlfleet:keep-alive"
# Written by the reaper when it first finds an instance idle; removed when it is busy again.
IDLE_SINCE = "mlfleet:idle-since"
# On an instance a removal is draining (docs/removal.md): `<method>@<ISO-8601 time>`, and `;found-draining`
# when it was DRAINING already (an operator's drain: never set ACTIVE by the removal), written before the
# drain, removed when the machine is re-activated (never while EC2 is taking it away: a spot notice keeps
# it, drained). The scheduler never places onto a machine carrying it.
REMOVING = "mlfleet:removing"
# Written by the scheduler when it first sees a fleet instance with no task; removed when it runs one.
# The release method gives an instance back once it has been empty for the release delay.
EMPTY_SINCE = "mlfleet:empty-since"
# On a reclaimed spot instance the job-events function detached from its group (the group's replacement
# declined, lambdas/scheduler/planning/replacement.py): when (ISO-8601). The scheduler counts it against
# its fleet's caps until the spot market ends it.
DETACHED_AT = "mlfleet:detached-at"
# Written by the scheduler on an instance ECS refused a start on for a reason about the machine (its
# resources, its agent, its registration: lambdas/scheduler/actions.py machine_refused): when (ISO-8601).
# Nothing is placed on the instance for a while after (lambdas/scheduler/state.py START_REFUSED_HOLD).
START_REFUSED_AT = "mlfleet:start-refused-at"
# Written by the reaper on an idle standalone machine EC2 refused to stop and the reaper may not terminate (an
# on-demand machine with an instance-store root): when (ISO-8601). It is left running and reported again once
# a day (lambdas/reaper/idle.py REFUSAL_REMINDER), not every run; removed with the idle mark when it is busy
# again. Never on a fleet instance.
STOP_REFUSED_AT = "mlfleet:stop-refused-at"
