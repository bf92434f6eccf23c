"""Checks of the rendered stacks against the rules of the engine and the cloud (issue 12).

Mocks echo the program's own inputs back, so these tests take their rules from the rules' owners
(Pulumi's CLI source, the IAM service authorization reference, botocore's service models, AWS's
documentation) and cite them next to each rule. Every check has a test that feeds it a deliberately
broken input, so the check itself can be seen to fail.
"""

from __future__ import annotations

import pytest

from pulumi_harness import STACKS, Rendering, render_stack


@pytest.fixture(scope="session")
def stack_renderings() -> dict[str, Rendering]:
    """Every committed stack rendered once per test session (rendering is deterministic)."""
    return {stack: render_stack(stack) for stack in STACKS}
