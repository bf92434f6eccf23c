"""Checks of the rendered stacks against the rules of the engine and the cloud (issue 12).

Mocks echo the program's own inputs back, so these tests take their rules from the rules' owners
(Pulumi's CLI source, the IAM service authorization reference, botocore's service models, AWS's
documentation) and cite them next to each rule. Every check has a test that feeds it a deliberately
broken input, so the check itself can be seen to fail.
"""

from __future__ import annotations

import pytest
from pulumi_harness import Rendering, STACKS, committed_rendering, render_config, stack_file_config


@pytest.fixture(scope="session")
def stack_renderings() -> dict[str, Rendering]:
    """Every committed stack rendered once per test session (rendering is deterministic)."""
    return {stack: committed_rendering(stack) for stack in STACKS}


@pytest.fixture(scope="session")
def extra_stack_configs(tmp_path_factory) -> dict[str, dict[str, str]]:
    """The config the CLI hands the program for the stacks of tests/rules/rule_stacks.py."""
    import rule_stacks

    folder = tmp_path_factory.mktemp("rule-stacks")
    return {
        rule_stacks.NEW_ENVIRONMENT: rule_stacks.program_config(rule_stacks.make(folder)),
        rule_stacks.HOME_ELSEWHERE: rule_stacks.program_config(rule_stacks.make_home_elsewhere(folder),
                                                               rule_stacks.HOME_ELSEWHERE),
    }


@pytest.fixture(scope="session")
def renderings(stack_renderings, extra_stack_configs) -> dict[str, Rendering]:
    """What the rule checks run on: every committed stack and those of rule_stacks.py (RULE_STACKS)."""
    return {**stack_renderings, **{name: render_config(values, name) for name, values in extra_stack_configs.items()}}


@pytest.fixture(scope="session")
def stack_configs(extra_stack_configs) -> dict[str, dict[str, str]]:
    """The program's config of each rendering in `renderings`."""
    return {**{stack: stack_file_config(stack) for stack in STACKS}, **extra_stack_configs}


@pytest.fixture(scope="session")
def longest_rendering(tmp_path_factory) -> Rendering:
    """The stack at the longest names and the largest counts the config model allows (tests/rules/longest.py)."""
    from longest import every_region_priced, longest_config

    from components.config import model

    stack, values = longest_config(
        regions=model.MAX_REGIONS,
        fleets=model.MAX_FLEET_REGIONS,
        types_per_fleet=model.MAX_FLEET_REGION_INSTANCE_TYPES // model.MAX_FLEET_REGIONS,
        tags=model.MAX_COST_ALLOCATION_TAGS,
    )
    with every_region_priced(tmp_path_factory.mktemp("catalog")):
        return render_config(values, stack)
