"""`mlfleet`: submit, watch and cancel GPU jobs on an mlfleet environment, and see what they cost (docs/jobs.md).

    mlfleet -e dev submit --image ghcr.io/team/train:3 --gpus 1 --vcpus 8 --memory 29GiB \\
        --sweep lr=0.1,0.01,0.001 -- python train.py --lr {lr}
    mlfleet submit --dry-run --stack dev -f infer.yaml --batches 0:10000:500   (no AWS: the checkout's stack file)
    mlfleet -e dev list [--submission SUB] [--state RUNNING] [--mine]
    mlfleet -e dev status JOB_ID
    mlfleet -e dev follow JOB_ID|SUBMISSION_ID [--logs]
    mlfleet -e dev cancel JOB_ID|SUBMISSION_ID
    mlfleet -e dev quarantine [--json]                (job records the functions could not read)
    mlfleet -e dev cost [--since 7d] [--by submission|owner|team]
    mlfleet -e dev notify subscribe you@example.com  (once; then submit --notify you@example.com)
    mlfleet -e dev policy --account 123456789012      (the IAM policy these commands need)

It needs AWS credentials for the home region and nothing of the repository: the stack publishes where
its queue, ledger, scheduler and fleets are in the SSM parameter /mlfleet/<env>/job-service.
A submission is validated whole before anything is written; then every job goes to the ledger (the
truth the scheduler reads), then a message per job to the queue, then the scheduler is woken up.

One module per concern: service (where the job service is), submission, watch (list, status, follow, cancel),
report (cost), notify, permissions (the policy), errors (one message per failure), main (the arguments).
"""

from .errors import CliError
from .main import main, parser, who
from .permissions import PERMISSIONS, policy
from .service import JobService, discover, from_stack_file, service_mismatches
from .submission import Submission, prepare, submit
from .watch import JOB_CONTAINER, cancel, follow, list_jobs, record_document, records_of, table
from ..fleets import parse_fleets

__all__ = [
    "JOB_CONTAINER", "PERMISSIONS", "CliError", "JobService", "Submission", "cancel", "discover", "follow",
    "from_stack_file", "list_jobs", "main", "parse_fleets", "parser", "policy", "prepare", "record_document",
    "records_of", "service_mismatches", "submit", "table", "who",
]
