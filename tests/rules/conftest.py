"""Checks of the rendered stacks against the rules of the engine and the cloud (issue 12).

Mocks echo the program's own inputs back, so these tests take their rules from the rules' owners
(Pulumi's CLI source, the IAM service authorization reference, botocore's service models, AWS's
documentation) and cite them next to each rule. Every check has a test that feeds it a deliberately
broken input, so the check itself can be seen to fail.
"""

from __future__ import annotations

import pytest
from pulumi_harness import STACKS, Rendering, render_config, render_stack, stack_file_config


@pytest.fixture(scope="session")
def stack_renderings() -> dict[str, Rendering]:
    """Every committed stack rendered once per test session (rendering is deterministic)."""
    return {stack: render_stack(stack) for stack in STACKS}


@pytest.fixture(scope="session")
def new_environment_config(tmp_path_factory) -> dict[str, str]:
    """The config the CLI hands the program for a stack made by README's steps (tests/rules/new_environment.py)."""
    import new_environment

    return new_environment.program_config(new_environment.make(tmp_path_factory.mktemp("new-environment")))


@pytest.fixture(scope="session")
def renderings(stack_renderings, new_environment_config) -> dict[str, Rendering]:
    """What the rule checks run on: every committed stack and the README's new environment (RULE_STACKS)."""
    from new_environment import NAME

    return {**stack_renderings, NAME: render_config(new_environment_config, NAME)}


@pytest.fixture(scope="session")
def stack_configs(new_environment_config) -> dict[str, dict[str, str]]:
    """The program's config of each rendering in `renderings`."""
    from new_environment import NAME

    return {**{stack: stack_file_config(stack) for stack in STACKS}, NAME: new_environment_config}


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
