"""Activate the `mlfleet:environment` cost allocation tag: a one-time step per AWS account (make cost-tag).

    python scripts/cost_allocation_tag.py activate     # make cost-tag
    python scripts/cost_allocation_tag.py status

Every environment's budget filters its costs on this tag (components/billing), and the tag counts only
once it is activated for cost allocation. The program cannot do this during `pulumi up`, because AWS
allows it only
- once the tag key has appeared in billing data, "up to 24 hours" after the first tagged resource
  (https://docs.aws.amazon.com/awsaccountbilling/latest/aboutv2/activating-tags.html), and
- from the management (payer) account of an organization, or an account in no organization ("Only a
  management account in an organization and single accounts that aren't members of an organization
  have access to the cost allocation tags manager",
  https://docs.aws.amazon.com/awsaccountbilling/latest/aboutv2/custom-tags.html).

So this runs once, a day after the first deployment, with the management account's credentials. It
checks the account (Organizations DescribeOrganization), that AWS lists the tag (Cost Explorer
ListCostAllocationTags), then calls UpdateCostAllocationTagsStatus
(https://docs.aws.amazon.com/aws-cost-management/latest/APIReference/API_UpdateCostAllocationTagsStatus.html),
which reports per-tag failures in `Errors` rather than failing the call. Activation is account-wide and
outlives every stack. Needs organizations:DescribeOrganization, ce:ListCostAllocationTags and
ce:UpdateCostAllocationTagsStatus; boto3 only.

Exit codes: 0 active, 1 AWS refused the update, 2 wrong account or no permission, 3 not in billing data
yet (run again later).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass

import boto3
from botocore.exceptions import ClientError

# lambdas/common/tags.py ENVIRONMENT (a test keeps them equal; scripts stay free of the package).
TAG_KEY = "mlfleet:environment"
# Cost Explorer has one endpoint, in us-east-1.
COST_EXPLORER_REGION = "us-east-1"

ACTIVE, WRONG_ACCOUNT, NOT_IN_BILLING_DATA, REFUSED = 0, 2, 3, 1


@dataclass(frozen=True)
class Outcome:
    code: int
    message: str


def management_account_problem(sts, organizations) -> str | None:
    """Why this account cannot activate cost allocation tags, or None when it can (or cannot tell)."""
    account = sts.get_caller_identity()["Account"]
    try:
        organization = organizations.describe_organization()["Organization"]
    except ClientError as error:
        if error.response["Error"]["Code"] == "AWSOrganizationsNotInUseException":
            return None  # a single account is its own payer
        if error.response["Error"]["Code"] == "AccessDeniedException":
            return None  # Cost Explorer will say whether the account may
        raise
    manager = organization["MasterAccountId"]
    if manager == account:
        return None
    return (f"account {account} is a member of organization {organization['Id']}: AWS activates cost allocation tags "
            f"only from its management account {manager}. Run `make cost-tag` again with credentials for {manager} "
            "(for example AWS_PROFILE=<management profile> make cost-tag).")


def tag_status(ce, tag_key: str) -> dict | None:
    """The tag as Cost Explorer lists it ({TagKey, Type, Status, ...}), or None when AWS does not list it yet."""
    tags = ce.list_cost_allocation_tags(TagKeys=[tag_key], Type="UserDefined")["CostAllocationTags"]
    return next((tag for tag in tags if tag["TagKey"] == tag_key), None)


NOT_LISTED = (
    "AWS does not list the cost allocation tag {key} yet: a tag key appears in billing data up to 24 hours after a "
    "resource first carries it. Deploy a stack (make up STACK=<env>), then run `make cost-tag` again a day later. "
    "Until then every mlfleet budget sees $0; the EstimatedCharges alarms still watch the whole account."
)


def activate(sts, organizations, ce, tag_key: str = TAG_KEY) -> Outcome:
    problem = management_account_problem(sts, organizations)
    if problem:
        return Outcome(WRONG_ACCOUNT, problem)
    try:
        current = tag_status(ce, tag_key)
        if current is None:
            return Outcome(NOT_IN_BILLING_DATA, NOT_LISTED.format(key=tag_key))
        if current["Status"] == "Active":
            return Outcome(ACTIVE, f"the cost allocation tag {tag_key} is already active"
                                   + (f" (since {current['LastUpdatedDate']})" if current.get("LastUpdatedDate") else ""))
        errors = ce.update_cost_allocation_tags_status(
            CostAllocationTagsStatus=[{"TagKey": tag_key, "Status": "Active"}]).get("Errors", [])
    except ClientError as error:
        if error.response["Error"]["Code"] in ("AccessDeniedException", "AccessDenied"):
            return Outcome(WRONG_ACCOUNT, f"Cost Explorer refused: {error.response['Error'].get('Message', '')}. Cost "
                           "allocation tags are activated from the management account, by a principal allowed "
                           "ce:ListCostAllocationTags and ce:UpdateCostAllocationTagsStatus.")
        raise
    if errors:
        details = "; ".join(f"{e.get('Code', '?')}: {e.get('Message', '')}" for e in errors)
        return Outcome(REFUSED, f"AWS did not activate {tag_key}: {details}")
    return Outcome(ACTIVE, f"activated the cost allocation tag {tag_key} for the whole account. Budgets and Cost "
                           "Explorer count costs under it from now on (allow up to a day for the data).")


def status(sts, organizations, ce, tag_key: str = TAG_KEY) -> Outcome:
    problem = management_account_problem(sts, organizations)
    if problem:
        return Outcome(WRONG_ACCOUNT, problem)
    current = tag_status(ce, tag_key)
    if current is None:
        return Outcome(NOT_IN_BILLING_DATA, NOT_LISTED.format(key=tag_key))
    if current["Status"] == "Active":
        return Outcome(ACTIVE, f"the cost allocation tag {tag_key} is active")
    return Outcome(REFUSED, f"the cost allocation tag {tag_key} is listed but {current['Status']}: run `make cost-tag`")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Activate mlfleet's cost allocation tag (once per AWS account).")
    parser.add_argument("command", choices=["activate", "status"])
    parser.add_argument("--tag-key", default=TAG_KEY)
    args = parser.parse_args(argv)
    session = boto3.session.Session()
    clients = (session.client("sts"), session.client("organizations", region_name=COST_EXPLORER_REGION),
               session.client("ce", region_name=COST_EXPLORER_REGION))
    outcome = (activate if args.command == "activate" else status)(*clients, tag_key=args.tag_key)
    print(outcome.message, file=sys.stdout if outcome.code == ACTIVE else sys.stderr)
    return outcome.code


if __name__ == "__main__":
    sys.exit(main())
