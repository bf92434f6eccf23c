"""scripts/cost_allocation_tag.py (make cost-tag): the account step that activates the budget's tag.

Where moto differs from AWS: moto implements STS and Organizations (a management account, a member
account, no organization at all) but not Cost Explorer's ListCostAllocationTags and
UpdateCostAllocationTagsStatus, so those calls go to botocore's Stubber, which checks every request
against botocore's service model for Cost Explorer (operation names, parameter names, enums).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import boto3
import pytest
from botocore.stub import Stubber

from lambdas.common import tags

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import cost_allocation_tag as cost_tag  # noqa: E402

KEY = "mlfleet:environment"
LIST = {"TagKeys": [KEY], "Type": "UserDefined"}
ACTIVATE = {"CostAllocationTagsStatus": [{"TagKey": KEY, "Status": "Active"}]}


def listed(status: str) -> dict:
    return {"CostAllocationTags": [{"TagKey": KEY, "Type": "UserDefined", "Status": status,
                                    "LastUpdatedDate": "2026-11-23T10:00:00Z"}]}


@pytest.fixture
def ce():
    client = boto3.client("ce", region_name="us-east-1")
    with Stubber(client) as stubber:
        yield client, stubber
        stubber.assert_no_pending_responses()


def clients(ce_client):
    return boto3.client("sts"), boto3.client("organizations", region_name="us-east-1"), ce_client


def test_the_script_activates_the_tag_the_program_puts_on_everything():
    assert cost_tag.TAG_KEY == tags.ENVIRONMENT


def test_a_listed_inactive_tag_is_activated_from_the_management_account(aws, ce):
    boto3.client("organizations", region_name="us-east-1").create_organization(FeatureSet="ALL")
    client, stubber = ce
    stubber.add_response("list_cost_allocation_tags", listed("Inactive"), LIST)
    stubber.add_response("update_cost_allocation_tags_status", {"Errors": []}, ACTIVATE)
    outcome = cost_tag.activate(*clients(client))
    assert outcome.code == cost_tag.ACTIVE and outcome.message.startswith("activated the cost allocation tag")


def test_an_account_in_no_organization_is_its_own_payer(aws, ce):
    client, stubber = ce
    stubber.add_response("list_cost_allocation_tags", listed("Inactive"), LIST)
    stubber.add_response("update_cost_allocation_tags_status", {"Errors": []}, ACTIVATE)
    assert cost_tag.activate(*clients(client)).code == cost_tag.ACTIVE


def test_a_tag_not_yet_in_billing_data_says_to_come_back_in_a_day_and_changes_nothing(aws, ce):
    client, stubber = ce
    stubber.add_response("list_cost_allocation_tags", {"CostAllocationTags": []}, LIST)
    outcome = cost_tag.activate(*clients(client))
    assert outcome.code == cost_tag.NOT_IN_BILLING_DATA
    assert "24 hours" in outcome.message and "make cost-tag" in outcome.message  # and no update was sent


def test_a_member_account_is_sent_to_its_management_account_before_any_cost_explorer_call(aws, ce, monkeypatch):
    organizations = boto3.client("organizations", region_name="us-east-1")
    organizations.create_organization(FeatureSet="ALL")
    manager = organizations.describe_organization()["Organization"]["MasterAccountId"]
    member = organizations.create_account(AccountName="ml", Email="ml@example.com")["CreateAccountStatus"]["AccountId"]
    monkeypatch.setenv("MOTO_ACCOUNT_ID", member)  # the caller is now the member account
    client, _ = ce  # nothing stubbed: any Cost Explorer call would fail the test
    outcome = cost_tag.activate(*clients(client))
    assert outcome.code == cost_tag.WRONG_ACCOUNT
    assert f"account {member} is a member" in outcome.message and f"management account {manager}" in outcome.message


def test_an_active_tag_is_left_alone(aws, ce):
    client, stubber = ce
    stubber.add_response("list_cost_allocation_tags", listed("Active"), LIST)
    outcome = cost_tag.activate(*clients(client))
    assert outcome.code == cost_tag.ACTIVE and "already active" in outcome.message


def test_errors_reported_in_the_response_are_shown_not_swallowed(aws, ce):
    """UpdateCostAllocationTagsStatus answers 200 and lists per-tag failures in Errors."""
    client, stubber = ce
    stubber.add_response("list_cost_allocation_tags", listed("Inactive"), LIST)
    stubber.add_response("update_cost_allocation_tags_status",
                         {"Errors": [{"TagKey": KEY, "Code": "TagKeysNotFoundException", "Message": "not found"}]},
                         ACTIVATE)
    outcome = cost_tag.activate(*clients(client))
    assert outcome.code == cost_tag.REFUSED and "TagKeysNotFoundException: not found" in outcome.message


def test_access_denied_by_cost_explorer_points_at_the_management_account(aws, ce):
    client, stubber = ce
    stubber.add_client_error("list_cost_allocation_tags", "AccessDeniedException", "linked account", 400,
                             expected_params=LIST)
    outcome = cost_tag.activate(*clients(client))
    assert outcome.code == cost_tag.WRONG_ACCOUNT and "management account" in outcome.message


@pytest.mark.parametrize("status, code", [("Active", 0), ("Inactive", 1)])
def test_status_reports_without_changing_anything(aws, ce, status, code):
    client, stubber = ce
    stubber.add_response("list_cost_allocation_tags", listed(status), LIST)
    assert cost_tag.status(*clients(client)).code == code


def test_make_cost_tag_runs_the_activation():
    quiet = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}  # under make test
    dry = subprocess.run(["make", "--no-print-directory", "-n", "cost-tag"], cwd=ROOT, capture_output=True, text=True,
                         check=True, env=quiet).stdout
    assert dry.strip().endswith("scripts/cost_allocation_tag.py activate")
    with pytest.raises(SystemExit):
        cost_tag.main(["deactivate"])
