"""A Python Lambda function packaged from its own folder, with a role derived from its declared needs.

The archive holds `lambdas/<function>/` and the `lambdas` modules it imports, followed import by import
(the scheduler needs `lambdas/jobs/` and `lambdas/common/`, not the `mlfleet` command beside them),
with their packages' __init__ files and data files, nothing else of the repository, listed file by file (no __pycache__) so the same source always gives the same archive
and an unchanged function shows no diff. The role's policy is generated from the `PERMISSIONS` the
function's modules declare next to their AWS calls (lambdas/common/permissions.py), plus writing to
its own log group; tag-scoped permissions get the environment's tag condition.
"""

from __future__ import annotations

import ast
import functools
import importlib
import json
import pkgutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pulumi
import pulumi_aws as aws

from components.resources import assume_role_policy, child, invoke
from lambdas.common.permissions import Permission, statements

PROJECT_ROOT = Path(__file__).resolve().parents[2]
RUNTIME = "python3.13"
ARCHITECTURE = "arm64"  # Graviton: cheaper per GB-second, and nothing here needs x86 wheels
PACKAGED_SUFFIXES = (".py", ".json")


def function_name(environment: str, function: str) -> str:
    return f"mlfleet-{environment}-{function}"


def package_files(function: str) -> list[str]:
    """Project-relative paths of every file the function's archive holds, sorted: the modules of
    lambdas/<function>/, every lambdas module they import (followed import by import), the packages'
    __init__.py files, and the data files (.json) of those packages."""
    lambdas = PROJECT_ROOT / "lambdas"
    if not (lambdas / function / "handler.py").is_file():
        raise ValueError(f"lambdas/{function}/handler.py does not exist")
    modules: set[Path] = set()
    todo = sorted((lambdas / function).rglob("*.py"))
    while todo:
        path = todo.pop()
        if path in modules or "__pycache__" in path.parts:
            continue
        modules.add(path)
        todo += _imported_modules(path)
    files = set(modules)
    for module in modules:
        for package in module.relative_to(PROJECT_ROOT).parents[:-1]:
            files.add(PROJECT_ROOT / package / "__init__.py")
    for package in {m.parent for m in modules}:
        files.update(p for p in package.rglob("*") if p.is_file() and p.suffix in PACKAGED_SUFFIXES
                     and p.suffix != ".py" and "__pycache__" not in p.parts)
    return sorted(str(p.relative_to(PROJECT_ROOT)) for p in files)


def _imported_modules(path: Path) -> list[Path]:
    """Files of the `lambdas` modules a module imports, relative (`from ..jobs import ledger`) or absolute
    (`from lambdas.jobs import ledger`); `from package import name` may name a module, and a package
    brings its __init__.py, whose own imports are followed in turn."""
    stat = path.stat()
    return list(_imports_of(path, stat.st_mtime_ns, stat.st_size))


@functools.lru_cache(maxsize=None)
def _imports_of(path: Path, mtime_ns: int, size: int) -> tuple[Path, ...]:
    """_imported_modules of one version of a file. Parsed once per program run: every function of every
    region follows the same shared modules (lambdas/common, lambdas/jobs), and parsing them again for each
    was most of the time a stack took to render. The file's modification time and size are in the key, so
    an edited file is read again."""
    found = []
    package = list(path.relative_to(PROJECT_ROOT).parent.parts)
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.level:
            module = package[:len(package) - node.level + 1] + (node.module.split(".") if node.module else [])
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "lambdas":
            module, names = node.module.split("."), [alias.name for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [PROJECT_ROOT.joinpath(*a.name.split(".")).with_suffix(".py") for a in node.names
                      if a.name.split(".")[0] == "lambdas"]
            continue
        else:
            continue
        base = PROJECT_ROOT.joinpath(*module)
        found += [base.with_suffix(".py"), base / "__init__.py"] + [base / f"{name}.py" for name in names]
    return tuple(candidate for candidate in found if candidate.is_file())


def covers(granted: Permission, permission: Permission) -> bool:
    """`granted` allows all that `permission` does: every action of it, on the same resources under the same
    conditions (its `why` aside). Two modules declaring the same need, each with its own reason, is one
    statement: the scheduler's policy is near IAM's 10,240 characters for a role's inline policies."""
    return (set(permission.actions) <= set(granted.actions) and permission.resources == granted.resources
            and permission.tag_scoped == granted.tag_scoped and dict(permission.condition) == dict(granted.condition)
            and permission.tag_keys == granted.tag_keys and permission.tag_values == granted.tag_values)


def declared_permissions(function: str) -> tuple[Permission, ...]:
    """Every `PERMISSIONS` declared by the modules of lambdas/<function>/, in module order, less those an
    earlier one covers."""
    package = importlib.import_module(f"lambdas.{function}")
    found: list[Permission] = []
    for module_info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"lambdas.{function}.{module_info.name}")
        for permission in getattr(module, "PERMISSIONS", ()):
            if not any(covers(granted, permission) for granted in found):
                found.append(permission)
    if not found:
        raise ValueError(f"lambdas/{function} declares no PERMISSIONS")
    return tuple(found)


def code_archive(function: str) -> pulumi.AssetArchive:
    # Paths are relative to the project root, where Pulumi runs the program.
    return pulumi.AssetArchive({path: pulumi.FileAsset(path) for path in package_files(function)})


def policy_document(permissions: Sequence[Permission], *, account: str, region: str, environment: str,
                    log_group_arn: str) -> str:
    """The role policy: one statement per declared permission, plus the function's own logs."""
    own_logs = {"Sid": "OwnLogs", "Effect": "Allow", "Action": ["logs:CreateLogStream", "logs:PutLogEvents"],
                "Resource": [f"{log_group_arn}:*"]}
    rendered = statements(permissions, account=account, region=region, environment=environment)
    return json.dumps({"Version": "2012-10-17", "Statement": [own_logs, *rendered]}, sort_keys=True)


@dataclass(frozen=True)
class PythonFunctionArgs:
    function: str  # folder under lambdas/
    description: str
    region: str
    environment: str
    log_retention_days: int
    tags: Mapping[str, str]
    variables: Mapping[str, pulumi.Input[str]] = field(default_factory=dict)
    timeout_seconds: int = 300
    memory_mib: int = 512
    # No reserved concurrency, on purpose: a reservation fails on accounts whose Lambda concurrency quota
    # is 10 (lambdas/common/lease.py says why and how the scheduler runs one at a time instead).
    # None: what the function's modules declare (declared_permissions).
    permissions: Sequence[Permission] | None = None


class PythonFunction(pulumi.ComponentResource):
    function_name: pulumi.Output[str]
    arn: pulumi.Output[str]
    role_name: pulumi.Output[str]

    def __init__(self, name: str, args: PythonFunctionArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("mlfleet:functions:PythonFunction", name, None, opts)
        tags = dict(args.tags)
        physical_name = function_name(args.environment, args.function)
        permissions = tuple(args.permissions) if args.permissions is not None else declared_permissions(args.function)

        log_group = aws.cloudwatch.LogGroup(
            f"{name}-logs",
            name=f"/aws/lambda/{physical_name}",
            retention_in_days=args.log_retention_days,
            tags=tags,
            opts=child(self),
        )
        role = aws.iam.Role(
            f"{name}-role",
            assume_role_policy=assume_role_policy("lambda.amazonaws.com"),
            description=f"mlfleet {args.function} function in {args.environment}/{args.region}",
            # A policy a team attached by hand must not stop `pulumi destroy` (DeleteConflict).
            force_detach_policies=True,
            tags=tags,
            opts=child(self),
        )
        caller = aws.get_caller_identity_output(opts=invoke(self))
        # The log group's ARN from its name in AWS's format (as pulumi-aws reports it, without ":*"), so the
        # policy is derived from declared names alone and the IAM lint checks the real ARN form.
        policy = aws.iam.RolePolicy(
            f"{name}-policy",
            role=role.id,
            policy=caller.account_id.apply(
                lambda account: policy_document(
                    permissions, account=account, region=args.region, environment=args.environment,
                    log_group_arn=f"arn:aws:logs:{args.region}:{account}:log-group:/aws/lambda/{physical_name}",
                )
            ),
            opts=child(self),
        )
        function = aws.lambda_.Function(
            f"{name}-function",
            name=physical_name,
            description=args.description,
            runtime=RUNTIME,
            architectures=[ARCHITECTURE],
            handler=f"lambdas.{args.function}.handler.handler",
            code=code_archive(args.function),
            role=role.arn,
            timeout=args.timeout_seconds,
            memory_size=args.memory_mib,
            environment={"variables": {"ENVIRONMENT": args.environment, **args.variables}},
            tags=tags,
            # The log group and the policy exist before the first invocation can need them.
            opts=child(self, depends_on=[log_group, policy]),
        )
        self.function_name = function.name
        self.arn = function.arn
        self.role_name = role.name
        self.register_outputs({"function_name": self.function_name, "arn": self.arn})
