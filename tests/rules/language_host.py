"""What `pulumi preview` prints when the Python program raises, ported from Pulumi's Python language host.

Source: pulumi/pulumi sdk/python/cmd/pulumi-language-python-exec (commit 061aba8f), which runs the program
and reports its exception:

    except pulumi.RunError as e:
        pulumi.log.error(str(e))
    except Exception:
        pulumi.log.error("Program failed with an unhandled exception:")
        pulumi.log.error(traceback.format_exc())

So a `pulumi.RunError` reaches the user as its message alone; anything else as a Python traceback.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable

import pulumi

UNHANDLED = "Program failed with an unhandled exception:"


def host_errors(program: Callable[[], object]) -> list[str]:
    """The error lines the language host logs for `program` ([] when it succeeds)."""
    try:
        program()
    except pulumi.RunError as error:
        return [str(error)]
    except Exception:  # noqa: BLE001 - the host catches everything, as ported
        return [UNHANDLED, traceback.format_exc()]
    return []
