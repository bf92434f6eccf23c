"""Each function is given exactly the environment variables its code reads.

A variable no code of the function reads only takes room: Lambda allows 4 KB of variables per function
(https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html, tests/rules `lambda-environment-size`),
and the job functions carry every fleet in FLEETS. What a function reads is taken from its code, not listed
here: the fields of the settings dataclass its modules pass to `lambdas.common.settings.from_env` (a field
`foo` is the variable FOO; a field with a default is optional), plus any variable named as a constant in
`os.environ[...]`, `os.environ.get(...)` or `os.getenv(...)` in the modules its archive holds (package_files).
Variables Lambda itself sets (reserved: AWS_*, LAMBDA_*, ..., "Using Lambda environment variables") are
not the program's to give.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib

import pytest
from pulumi_harness import STACKS, committed_rendering, render_stack

from components.functions.python_function import PROJECT_ROOT, package_files

FUNCTIONS = sorted(p.parent.name for p in (PROJECT_ROOT / "lambdas").glob("*/handler.py"))
# https://docs.aws.amazon.com/lambda/latest/dg/configuration-envvars.html#configuration-envvars-runtime
RESERVED_PREFIXES = ("AWS_", "LAMBDA_", "_")
RESERVED = {"TZ", "LANG", "PATH", "LD_LIBRARY_PATH", "PYTHONPATH"}
# The one module that reads os.environ as a whole: it reads the fields of the dataclass it is given.
SETTINGS_MODULE = "lambdas/common/settings.py"
# Every optional setting of the stack config that adds a variable, on (components/jobs/jobs.py `releases`).
EVERY_OPTION = {"releaseAfterEmptyMinutes": 30, "headroomWindowMinutes": 30, "headroomMaxJobs": 4,
                "purchaseSearchCpuSeconds": 1}


@dataclasses.dataclass(frozen=True)
class Reads:
    names: frozenset[str]  # every variable the code may read
    required: frozenset[str]  # those it fails without


def _module_name(path: str) -> str:
    return path.removesuffix(".py").removesuffix("/__init__").replace("/", ".")


def _is_os_environ(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "environ" and isinstance(node.value, ast.Name) \
        and node.value.id == "os"


def _constant(node: ast.AST | None) -> str:
    assert isinstance(node, ast.Constant) and isinstance(node.value, str), ast.dump(node) if node else node
    return node.value


def module_reads(path: str, source: str) -> tuple[set[str], set[str]]:
    """(every variable, the required ones) one module of a function reads."""
    names: set[str] = set()
    required: set[str] = set()
    tree = ast.parse(source, path)
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "from_env":
            settings = getattr(importlib.import_module(_module_name(path)), node.args[0].id)
            for field in dataclasses.fields(settings):
                names.add(field.name.upper())
                if field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
                    required.add(field.name.upper())
        elif _is_os_environ(node):
            parent = parents[node]
            if isinstance(parent, ast.Subscript):  # os.environ["NAME"]
                names.add(_constant(parent.slice))
                required.add(_constant(parent.slice))
            elif isinstance(parent, ast.Attribute) and parent.attr == "get":  # os.environ.get("NAME")
                names.add(_constant(parents[parent].args[0]))
            else:
                pytest.fail(f"{path}:{node.lineno}: reads os.environ in a way this test cannot follow")
        elif isinstance(node, ast.Attribute) and node.attr == "getenv":  # os.getenv("NAME")
            names.add(_constant(parents[node].args[0]))
    return names, required


def variables_read(function: str) -> Reads:
    """What the modules of the function's archive read, less the variables Lambda sets."""
    names: set[str] = set()
    required: set[str] = set()
    for path in package_files(function):
        if path.endswith(".py") and path != SETTINGS_MODULE:
            module_names, module_required = module_reads(path, (PROJECT_ROOT / path).read_text())
            names |= module_names
            required |= module_required
    assert names, f"lambdas/{function} reads no environment variable"
    own = {n for n in names if not n.startswith(RESERVED_PREFIXES) and n not in RESERVED}
    return Reads(frozenset(own), frozenset(required & own))


@pytest.fixture(scope="module")
def given() -> dict[str, list[tuple[str, set[str]]]]:
    """{stack: [(function folder, names of the variables the program gives it)]}, for every committed stack and
    dev with every optional setting on."""
    renderings = {stack: committed_rendering(stack) for stack in STACKS}
    renderings["every-option"] = render_stack("dev", **EVERY_OPTION)
    found = {}
    for stack, rendering in renderings.items():
        found[stack] = [(f.inputs["handler"].removeprefix("lambdas.").removesuffix(".handler.handler"),
                         set(f.inputs["environment"]["variables"]))
                        for f in rendering.of_type("aws:lambda/function:Function")]
        assert {function for function, _ in found[stack]} == set(FUNCTIONS), stack
    return found


def test_the_reads_come_from_the_code():
    job_events = variables_read("job_events")
    assert {"FLEETS", "JOBS_TABLE", "ENVIRONMENT"} <= job_events.required
    assert "NOTIFY_SLACK_TOPIC_ARN" in job_events.names - job_events.required
    # The scheduler reads Lambda's AWS_LAMBDA_FUNCTION_MEMORY_SIZE too: Lambda's, not the program's to give.
    assert "AWS_LAMBDA_FUNCTION_MEMORY_SIZE" not in variables_read("scheduler").names


@pytest.mark.parametrize("stack", [*STACKS, "every-option"])
def test_each_function_gets_only_what_it_reads_and_all_it_needs(given, stack):
    for function, names in given[stack]:
        reads = variables_read(function)
        assert names <= reads.names, f"{stack} {function}: given but never read: {sorted(names - reads.names)}"
        assert reads.required <= names, f"{stack} {function}: required but not given: {sorted(reads.required - names)}"


def test_with_every_option_on_each_function_gets_exactly_what_it_reads(given):
    for function, names in given["every-option"]:
        assert names == variables_read(function).names, function


def test_the_reading_of_the_environment_is_followed():
    source = 'import os\nA = os.environ["A"]\nB = os.environ.get("B", "")\nC = os.getenv("C")\n'
    assert module_reads("lambdas/fake/handler.py", source) == ({"A", "B", "C"}, {"A"})
    # Any other reading of os.environ is a failure, not a miss.
    with pytest.raises(pytest.fail.Exception, match="cannot follow"):
        module_reads("lambdas/fake/handler.py", "import os\nVARIABLES = dict(os.environ)\n")
