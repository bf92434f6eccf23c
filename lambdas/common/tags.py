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
