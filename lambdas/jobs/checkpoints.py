"""Where a job saves and resumes its work: `s3://<its region's checkpoint bucket>/jobs/<job_id>/`.

The stack declares one checkpoint bucket per fleet region (components/storage/checkpoints.py), named by
`bucket_name` here, so that the scheduler (which gets the account in ACCOUNT_ID) derives the same name
without a list of buckets in its environment (Lambda allows 4 KB of variables in all). Every attempt of a
job gets the same location in MLFLEET_CHECKPOINT_URI, and a job that has run once is placed again in
the region of its checkpoint (docs/jobs.md, "Checkpoints").
"""

from __future__ import annotations

import re

PREFIX = "jobs/"
URI_VARIABLE = "MLFLEET_CHECKPOINT_URI"
# Set when the spec declares checkpoint_interval_minutes, so the job saves as often as the scheduler assumes.
INTERVAL_VARIABLE = "MLFLEET_CHECKPOINT_INTERVAL_MINUTES"
ACCOUNT_ID = re.compile(r"\d{12}")
# The StopTask reason of a scheduler's move (lambdas/scheduler/planning/moves.py), followed by the instance
# the job goes to: the job-events function requeues such a job without counting an attempt, and the next
# scheduler run places it on that instance first. ECS shows the reason as the task's stoppedReason
# (botocore's ecs model, StopTask `reason`: "the message appears in subsequent DescribeTasks API
# operations on this task").
MOVED_REASON = "mlfleet: moved into room on"
MOVED_TO = re.compile(re.escape(MOVED_REASON) + r" (i-[0-9a-f]{1,17})\b")

# S3 account regional namespace: names ending `-<account>-<region>-an` that only this account can create,
# so no other account can take the name first or re-create it after a destroy ("Namespaces for general
# purpose buckets", https://docs.aws.amazon.com/AmazonS3/latest/userguide/gpbucketnamespaces.html). "You
# can create buckets in your account regional namespace in all AWS Regions except Middle East (Bahrain)
# and Middle East (UAE)": there the bucket goes in the global namespace, without the reserved -an suffix.
ACCOUNT_REGIONAL, GLOBAL = "account-regional", "global"
NO_ACCOUNT_REGIONAL_NAMESPACE = frozenset({"me-south-1", "me-central-1"})
ACCOUNT_REGIONAL_SUFFIX = "-an"


def bucket_namespace(region: str) -> str:
    return GLOBAL if region in NO_ACCOUNT_REGIONAL_NAMESPACE else ACCOUNT_REGIONAL


def bucket_name(environment: str, account_id: str, region: str) -> str:
    """`mlfleet-<env>-<account>-<region>[-an]`, the environment's bucket in the region (DESIGN.md: "a
    per-job checkpoint location in the environment's bucket"); checkpoints are its `jobs/` prefix.

    At most 63 characters (the S3 limit) for every environment name and region the config allows
    (tests/program/test_checkpoint_buckets.py); a word such as "checkpoints" does not fit: the account
    regional suffix takes 31 characters in the longest regions and the prefix 28 at a 20-character
    environment name.
    """
    name = f"mlfleet-{environment}-{account_id}-{region}"
    return name + ACCOUNT_REGIONAL_SUFFIX if bucket_namespace(region) == ACCOUNT_REGIONAL else name


def uri(bucket: str, job_id: str) -> str:
    """The job's checkpoint location: the same for every attempt."""
    return f"s3://{bucket}/{PREFIX}{job_id}/"
