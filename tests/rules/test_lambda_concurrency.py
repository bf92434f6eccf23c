"""Lambda: no function reserves concurrency, so every stack deploys on every account.

The rule's owner: "You can reserve up to the Unreserved account concurrency value minus 100 for
functions that don't have reserved concurrency"
(https://docs.aws.amazon.com/lambda/latest/dg/configuration-concurrency.html). New accounts often get
a concurrency quota of 10, and then any reservation fails: "Specified ReservedConcurrentExecutions for
function decreases account's UnreservedConcurrentExecution below its minimum value of [10]"
(aws-samples/amazon-rekognition-serverless-large-scale-image-and-video-processing#6). The scheduler
runs one at a time with a lease in its ledger instead (lambdas/common/lease.py).
"""

from __future__ import annotations

import copy

from pulumi_harness import Rendering

FUNCTION = "aws:lambda/function:Function"


def reservations(rendering: Rendering) -> list[tuple[str, int]]:
    """(function name, reserved concurrency) for every function that reserves any (-1 means none)."""
    found = []
    for function in rendering.of_type(FUNCTION):
        reserved = function.inputs.get("reservedConcurrentExecutions")
        if reserved is not None and reserved != -1:
            found.append((function.inputs["name"], int(reserved)))
    return found


def test_no_function_of_any_stack_reserves_concurrency(stack_renderings):
    for stack, rendering in stack_renderings.items():
        assert rendering.of_type(FUNCTION), stack
        assert reservations(rendering) == [], stack


def test_the_check_finds_the_scheduler_as_it_was_declared_before(stack_renderings):
    broken = copy.deepcopy(stack_renderings["dev"])
    scheduler = next(f for f in broken.of_type(FUNCTION) if f.inputs["name"] == "mlfleet-dev-scheduler")
    scheduler.inputs["reservedConcurrentExecutions"] = 1
    assert reservations(broken) == [("mlfleet-dev-scheduler", 1)]
