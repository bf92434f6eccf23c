"""A fleet region's checkpoint bucket: where each job's containers save and resume their work.

One bucket per fleet region, not one per environment: a region without internet egress reaches S3 only
through its S3 gateway endpoint, and "a gateway endpoint is available only in the Region where you
created it. Be sure to create your gateway endpoint in the same Region as your S3 buckets."
(https://docs.aws.amazon.com/vpc/latest/privatelink/vpc-endpoints-s3.html, Considerations). A job
therefore checkpoints to its region's bucket, and the scheduler places a job that has run once in the
same region again (lambdas/scheduler/planning/constraints.py).

The contract, from both sides, lives here: what the bucket allows (`bucket_policy`) and what the region's
job role gets (`job_access_policy`, attached in components/compute/cluster.py).

- Each job writes under `jobs/<job_id>/`. The bucket's name (`mlfleet-<env>-<account>-<region>-an`, in
  the account regional namespace where S3 offers it) and the job's URI come from lambdas/jobs/checkpoints.py,
  which the scheduler shares.
- Encryption: SSE-S3 (AES256). SSE-KMS would add a KMS grant to the job role and KMS requests to every
  checkpoint write and read, and a customer-managed key would outlive `pulumi destroy` in its 7-30 day
  deletion window (billed until then); for disposable checkpoints that only the job role can write, the
  key policy would guard nothing the bucket policy does not already guard.
- Unversioned (new buckets are; no BucketVersioning resource is declared): a job overwrites its
  checkpoint every few minutes, and versioning would keep and bill every superseded copy; once enabled
  it can only be suspended, never removed.
- Objects expire `retention_days` after their last write, so a running job's rewritten checkpoint never
  expires; incomplete multipart uploads (a job killed mid-save) are aborted after a day.
- `force_destroy`: checkpoints are disposable, so `pulumi destroy` empties and deletes the bucket in one
  pass (README, "Tear down"). The bucket policy depends on the bucket, so it is deleted first and
  cannot stand in the way of emptying it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from components.resources import child
from lambdas.jobs.checkpoints import PREFIX, bucket_namespace

# Incomplete multipart uploads (a save cut short) are aborted this many days after they began.
ABORT_UPLOADS_AFTER_DAYS = 1
# Object writes the bucket policy reserves to the job role: PutObject covers PutObject, CopyObject,
# CreateMultipartUpload, UploadPart(Copy) and CompleteMultipartUpload; ReplicateObject is what S3
# replication writes with. ACL writes need no deny: BucketOwnerEnforced disables ACLs.
# (https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazons3.html)
RESERVED_WRITES = ("s3:PutObject", "s3:ReplicateObject")
JOB_OBJECT_ACTIONS = ("s3:AbortMultipartUpload", "s3:DeleteObject", "s3:GetObject", "s3:PutObject")


def bucket_arn(bucket: str) -> str:
    return f"arn:aws:s3:::{bucket}"  # commercial partition: every region in components/config/regions.py


def bucket_policy(bucket: str, writer_role_arn: str) -> dict:
    """TLS only; object writes by the region's job role only.

    The deny names the role by `aws:PrincipalArn`, which for a role session is the role's ARN
    (https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_condition-keys.html#condition-keys-principalarn),
    so it also binds the account's administrators and root: nobody but a job plants a checkpoint that a
    job would load. Reads, deletes and the bucket's own configuration stay with IAM: operators may
    delete a broken checkpoint (the job restarts from zero), and `pulumi up` / `pulumi destroy` may
    change or remove this policy and then empty the bucket.
    """
    arn = bucket_arn(bucket)
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "DenyInsecureTransport",
                "Effect": "Deny",
                "Principal": "*",
                "Action": "s3:*",
                "Resource": [arn, f"{arn}/*"],
                "Condition": {"Bool": {"aws:SecureTransport": "false"}},
            },
            {
                "Sid": "OnlyJobsWriteCheckpoints",
                "Effect": "Deny",
                "Principal": "*",
                "Action": list(RESERVED_WRITES),
                "Resource": f"{arn}/*",
                "Condition": {"ArnNotEquals": {"aws:PrincipalArn": writer_role_arn}},
            },
        ],
    }


def job_access_policy(bucket: str, account_id: str) -> dict:
    """What the region's job role may do: objects under jobs/ and listing within jobs/, in this
    account's bucket only (aws:ResourceAccount: a bucket of that name in another account is refused)."""
    arn = bucket_arn(bucket)
    own = {"aws:ResourceAccount": account_id}
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "CheckpointObjects",
                "Effect": "Allow",
                "Action": list(JOB_OBJECT_ACTIONS),
                "Resource": f"{arn}/{PREFIX}*",
                "Condition": {"StringEquals": own},
            },
            {
                "Sid": "ListCheckpoints",
                "Effect": "Allow",
                "Action": "s3:ListBucket",
                "Resource": arn,
                "Condition": {"StringEquals": own, "StringLike": {"s3:prefix": f"{PREFIX}*"}},
            },
        ],
    }


@dataclass(frozen=True)
class CheckpointBucketArgs:
    region: str
    bucket_name: pulumi.Input[str]  # lambdas.jobs.checkpoints.bucket_name(...)
    writer_role_arn: pulumi.Input[str]  # the region's job role (EcsGpuCluster.job_role_arn)
    retention_days: int
    tags: Mapping[str, str]


class CheckpointBucket(pulumi.ComponentResource):
    bucket_name: pulumi.Output[str]
    bucket_arn: pulumi.Output[str]

    def __init__(self, name: str, args: CheckpointBucketArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("mlfleet:storage:CheckpointBucket", name, None, opts)
        bucket = aws.s3.Bucket(
            f"{name}-bucket",
            bucket=args.bucket_name,
            bucket_namespace=bucket_namespace(args.region),
            force_destroy=True,
            tags=dict(args.tags),
            opts=child(self),
        )
        # One configuration call at a time: S3 answers concurrent ones on a new bucket with
        # "OperationAborted: A conflicting conditional operation is currently in progress"
        # (hashicorp/terraform-provider-aws#7628, #33552), so each waits for the one before.
        previous: list[pulumi.Resource] = []

        def configure(resource_type, suffix: str, **inputs) -> pulumi.Resource:
            resource = resource_type(f"{name}-{suffix}", bucket=bucket.id, opts=child(self, depends_on=list(previous)),
                                     **inputs)
            previous[:] = [resource]
            return resource

        configure(aws.s3.BucketOwnershipControls, "ownership", rule={"object_ownership": "BucketOwnerEnforced"})
        configure(aws.s3.BucketPublicAccessBlock, "public-access", block_public_acls=True, block_public_policy=True,
                  ignore_public_acls=True, restrict_public_buckets=True)
        configure(aws.s3.BucketServerSideEncryptionConfiguration, "encryption",
                  rules=[{"apply_server_side_encryption_by_default": {"sse_algorithm": "AES256"}}])
        configure(aws.s3.BucketLifecycleConfiguration, "lifecycle", rules=[{
            "id": "expire-checkpoints",
            "status": "Enabled",
            "filter": {"prefix": PREFIX},
            "expiration": {"days": args.retention_days},
            "abort_incomplete_multipart_upload": {"days_after_initiation": ABORT_UPLOADS_AFTER_DAYS},
        }])
        configure(aws.s3.BucketPolicy, "policy", policy=pulumi.Output.all(bucket.bucket, args.writer_role_arn).apply(
            lambda values: json.dumps(bucket_policy(*values))))

        self.bucket_name = bucket.bucket
        self.bucket_arn = bucket.arn
        self.register_outputs({"bucket_name": self.bucket_name, "bucket_arn": self.bucket_arn})
