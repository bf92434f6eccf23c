"""The IAM policy the `mlfleet` command needs (`mlfleet policy`), derived from what its calls declare."""

from __future__ import annotations

from ...common.permissions import needs, statements
from .. import ledger as L
from .. import queue
from .service import EMAIL_TOPIC_NAME, SCHEDULER_NAME
from ..teams import READ_PERMISSIONS as TEAMS_PERMISSIONS

PERMISSIONS = (
    needs("ssm:GetParameter", resources=("arn:{partition}:ssm:{region}:{account}:parameter/mlfleet/{environment}/job-service",
                                         "arn:{partition}:ssm:{region}:{account}:parameter/mlfleet/{environment}/admission"),
          why="find the job service; tell whether jobs are admitted"),
    *TEAMS_PERMISSIONS,
    *L.USER_PERMISSIONS,
    *queue.SEND_PERMISSIONS,
    needs("lambda:InvokeFunction", resources=("arn:{partition}:lambda:{region}:{account}:function:" + SCHEDULER_NAME,),
          why="wake the scheduler right after a submission"),
    needs("ecs:StopTask", resources=("arn:{partition}:ecs:*:{account}:task/mlfleet-{environment}/*",),
          condition={"ArnLike": {"ecs:cluster": "arn:{partition}:ecs:*:{account}:cluster/mlfleet-{environment}"}},
          why="stop the task of a cancelled job"),
    needs("logs:GetLogEvents", resources=("arn:{partition}:logs:*:{account}:log-group:/mlfleet/{environment}/jobs:log-stream:*",),
          why="follow a job's output"),
    # sns:Protocol is a condition key of Subscribe (the IAM reference, Amazon SNS): e-mail subscriptions only.
    needs("sns:Subscribe", resources=("arn:{partition}:sns:{region}:{account}:" + EMAIL_TOPIC_NAME,),
          condition={"StringEquals": {"sns:Protocol": "email"}},
          why="subscribe an e-mail address to the job notifications (confirmed from that address)"),
)
ACTIONS = tuple(sorted({action for permission in PERMISSIONS for action in permission.actions}))


def policy(environment: str, region: str, account: str) -> dict:
    return {"Version": "2012-10-17",
            "Statement": statements(PERMISSIONS, account=account, region=region, environment=environment)}
