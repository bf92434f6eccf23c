"""`pulumi destroy` finishes in one pass: what each stack protects, retains, and deletes in which order.

Under mocks the options the program sets are recorded by a stack transformation (tests/pulumi_harness.py),
so these tests see protect / retain_on_delete / depends_on exactly as the engine would receive them.
"""

from __future__ import annotations

import copy
import dataclasses
import fnmatch
import functools
import json
import re

import pytest

from components.config import ConfigError

from pulumi_harness import STACKS, render_stack

ASG = "aws:autoscaling/group:Group"
CLUSTER = "aws:ecs/cluster:Cluster"
TABLE = "aws:dynamodb/table:Table"
ROLE = "aws:iam/role:Role"


@functools.cache
def rendered(stack: str, **overrides):
    return render_stack(stack, **overrides)


@pytest.fixture(scope="module", params=STACKS)
def rendering(request):
    return rendered(request.param)


def test_nothing_is_protected(rendering):
    protected = [name for (_, name), options in rendering.options.items() if options.protect]
    assert protected == []


def test_no_stack_declares_the_cost_allocation_tag_activation(rendering):
    """Activating needs the tag in billing data and the management account: an account step
    (`make cost-tag`, docs/billing.md), never a resource that would fail the first `pulumi up`."""
    assert rendering.of_type("aws:costexplorer/costAllocationTag:CostAllocationTag") == []
    # The budget still filters on the tag; it counts once the tag is active.
    (budget,) = rendering.of_type("aws:budgets/budget:Budget")
    assert budget.inputs["costFilters"] == [{"name": "TagKeyValue",
                                             "values": [f"user:mlfleet:environment${rendering.stack}"]}]


def test_only_the_prod_job_ledger_outlives_the_stack(rendering):
    retained = {(kind, name) for (kind, name), options in rendering.options.items() if options.retain_on_delete}
    expected = set()
    if rendering.stack == "prod":  # stacks/Pulumi.prod.yaml: retainJobLedger: true
        expected |= {(TABLE, r.name) for r in rendering.of_type(TABLE)}
    assert retained == expected


def roles_that_block_destroy(rendering) -> list[str]:
    """Roles DeleteRole would refuse while a policy a team attached by hand is still on them (IAM
    DeleteConflict): those without `force_detach_policies` (pulumi_aws iam.Role: "Whether to force
    detaching any policies the role has before destroying it. Defaults to `false`")."""
    return sorted(role.name for role in rendering.of_type(ROLE) if role.inputs.get("forceDetachPolicies") is not True)


def test_every_role_detaches_policies_a_team_attached_before_it_is_deleted(rendering):
    assert rendering.of_type(ROLE)
    assert roles_that_block_destroy(rendering) == []


def test_the_role_check_finds_a_role_without_force_detach():
    """The check above on a deliberately broken rendering: one role declared the old way."""
    broken = copy.deepcopy(rendered("dev"))
    job_role = next(r for r in broken.of_type(ROLE) if r.name.endswith("-job"))
    del job_role.inputs["forceDetachPolicies"]
    assert roles_that_block_destroy(broken) == [job_role.name]


def test_a_stack_imports_no_ledger_unless_it_adopts_one(rendering):
    assert [name for (_, name), options in rendering.options.items() if options.import_id] == []


def test_prod_adopts_its_kept_ledger_by_name_and_everything_still_points_at_it():
    """After `pulumi destroy`, prod's ledger is still there under its fixed name: with adoptJobLedger the
    next `up` imports it (the import ID of a table is its name), so CreateTable never runs."""
    adopted = rendered("prod", adoptJobLedger=True)
    (table,) = adopted.of_type(TABLE)
    options = adopted.options[(TABLE, table.name)]
    assert options.import_id == table.inputs["name"] == "mlfleet-prod-jobs"
    assert options.retain_on_delete and table.inputs["deletionProtectionEnabled"] is True
    # The declaration is the one the table was kept with, or the import would fail on a diff.
    assert table.inputs == rendered("prod").named(table.name).inputs
    discovery = json.loads(next(p for p in adopted.of_type("aws:ssm/parameter:Parameter")
                                if p.inputs["name"] == "/mlfleet/prod/job-service").inputs["insecureValue"])
    assert discovery["ledgerTable"] == "mlfleet-prod-jobs"
    functions = [f for f in adopted.of_type("aws:lambda/function:Function")
                 if "JOBS_TABLE" in f.inputs["environment"]["variables"]]
    assert functions and {f.inputs["environment"]["variables"]["JOBS_TABLE"] for f in functions} == {"mlfleet-prod-jobs"}
    table_arn = "arn:aws:dynamodb:us-east-1:123456789012:table/mlfleet-prod-jobs"
    granted = [resource for policy in adopted.of_type("aws:iam/rolePolicy:RolePolicy")
               for statement in json.loads(policy.inputs["policy"])["Statement"]
               if any(a.startswith("dynamodb:") for a in statement["Action"]) for resource in statement["Resource"]]
    ledger_arns = (table_arn, f"{table_arn}/index/by-state", f"{table_arn}/stream/2026-11-23T00:00:00.000")
    assert granted and all(any(fnmatch.fnmatchcase(arn, r) for arn in ledger_arns) for r in granted if r != "*")


# A resource the destroyed stack kept (retain_on_delete) under a fixed name is still there: the next `up`
# must import it, because the owner refuses a second one of that name. One rule per retained type (the
# sentence of the installed botocore model that states it); a retained type without a rule fails.
NAME_TAKEN = {
    TABLE: ("dynamodb", "CreateTable", "table names must be unique within each Region"),
}


def next_up_conflicts(destroyed, next_up) -> list[str]:
    """What `next_up` would create again under a name the `destroyed` stack kept."""
    problems = []
    for (kind, name), options in destroyed.options.items():
        if not options.retain_on_delete:
            continue
        physical = destroyed.named(name).inputs.get("name")
        if kind not in NAME_TAKEN:
            problems.append(f"{name}: {kind} is kept on destroy; add the owner's name rule to NAME_TAKEN")
            continue
        for again in next_up.of_type(kind):
            adopted = next_up.options[(kind, again.name)].import_id == physical
            if physical and again.inputs.get("name") == physical and not adopted:
                service, operation, rule = NAME_TAKEN[kind]
                problems.append(f"{again.name}: {service}:{operation} of {physical!r}, which the destroyed stack kept "
                                f"({rule})")
    return problems


def test_the_next_up_after_destroy_takes_the_kept_ledger_back():
    assert next_up_conflicts(rendered("prod"), rendered("prod", adoptJobLedger=True)) == []


def test_the_next_up_without_adopting_would_create_the_ledger_again():
    """Issue 12's finding on a broken copy: prod's next `up` as the stack file stands, without adopting."""
    (problem,) = next_up_conflicts(rendered("prod"), rendered("prod"))
    assert "dynamodb:CreateTable of 'mlfleet-prod-jobs'" in problem


def test_a_kept_resource_of_a_type_without_a_name_rule_fails():
    destroyed = copy.deepcopy(rendered("prod"))
    queue = destroyed.of_type("aws:sqs/queue:Queue")[0]
    key = ("aws:sqs/queue:Queue", queue.name)
    destroyed.options[key] = dataclasses.replace(destroyed.options[key], retain_on_delete=True)
    assert any("add the owner's name rule" in p for p in next_up_conflicts(destroyed, rendered("prod")))


def test_each_rendering_keeps_its_own_options():
    """Two renderings of the same resources, whichever came first: neither sees the other's options
    (tests/pulumi_harness.py gives each its own root stack)."""
    kept, adopted = rendered("prod"), rendered("prod", adoptJobLedger=True)
    assert [o.import_id for o in kept.options.values() if o.import_id] == []
    assert [o.import_id for o in adopted.options.values() if o.import_id] == ["mlfleet-prod-jobs"]


@pytest.mark.parametrize("kind", sorted(NAME_TAKEN))
def test_each_name_rule_is_what_the_installed_model_says(kind):
    import botocore.session

    service, operation, rule = NAME_TAKEN[kind]
    model = botocore.session.get_session().get_service_model(service).operation_model(operation)
    assert rule in " ".join(re.sub(r"<[^>]+>", "", model.documentation).split())


def test_adopting_needs_the_ledger_to_have_been_kept():
    with pytest.raises(ConfigError, match="adoptJobLedger takes back a ledger kept by retainJobLedger"):
        render_stack("dev", adoptJobLedger=True)


def test_data_is_deletable_unless_the_config_keeps_it(rendering):
    for table in rendering.of_type(TABLE):
        keep = rendering.stack == "prod"
        assert table.inputs.get("deletionProtectionEnabled", False) is keep
        assert table.inputs["pointInTimeRecovery"]["enabled"] is keep


def test_no_capacity_provider_can_block_the_cluster_deletion(rendering):
    kinds = {r.type for r in rendering.resources}
    assert "aws:ecs/capacityProvider:CapacityProvider" not in kinds
    assert "aws:ecs/clusterCapacityProviders:ClusterCapacityProviders" not in kinds


def test_groups_go_with_their_protected_instances_before_the_cluster(rendering):
    clusters = {r.name for r in rendering.of_type(CLUSTER)}
    for group in rendering.of_type(ASG):
        # Scale-in protection does not stop a forced delete: instances are terminated with the group.
        assert group.inputs["forceDelete"] is True
        depends_on = rendering.options[(ASG, group.name)].depends_on
        assert set(depends_on) & clusters, f"{group.name} must be deleted before its cluster"


def test_functions_are_deleted_before_their_log_groups(rendering):
    for (kind, name), options in rendering.options.items():
        if kind == "aws:lambda/function:Function":
            assert any(d.endswith("-logs") for d in options.depends_on), name


def test_every_log_group_is_declared_with_retention(rendering):
    groups = rendering.of_type("aws:cloudwatch/logGroup:LogGroup")
    assert groups
    names = {g.inputs["name"] for g in groups}
    for group in groups:
        assert group.inputs["retentionInDays"] > 0
    # Container Insights would otherwise create a group with no retention that outlives the stack.
    for cluster in rendering.of_type(CLUSTER):
        assert f"/aws/ecs/containerinsights/{cluster.inputs['name']}/performance" in names
