from .checkpoints import CheckpointBucket, CheckpointBucketArgs, job_access_policy

__all__ = ["CheckpointBucket", "CheckpointBucketArgs", "job_access_policy"]
