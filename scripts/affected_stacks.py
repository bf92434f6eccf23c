"""Which stacks does a change affect? Reads changed paths (one per line) on stdin, prints a JSON list.

    git diff --name-only "$BASE...$HEAD" | python scripts/affected_stacks.py      # ["dev", "prod"]

The pull-request workflow runs `pulumi preview` for each stack printed. The rules:
- `stacks/Pulumi.<env>.yaml` affects that environment only;
- documentation, tests and benchmarks (docs/, tests/, benchmarks/, any *.md) affect none;
- every other path affects every environment: the program and what it ships (components/, lambdas/,
  policy/, __main__.py, Pulumi.yaml, requirements*.txt, packer/manifest.py), and also paths nobody
  classified yet, because a preview too many costs a minute while a missed one hides a diff.
Only environments whose stack file exists in the checkout are printed (a deleted stack file has no
stack left to preview).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from pathlib import Path, PurePosixPath

ROOT = Path(__file__).resolve().parent.parent

NO_INFRASTRUCTURE_DIRS = ("docs", "tests", "benchmarks")
STACKS_DIR = PurePosixPath("stacks")


def stacks_in(root: Path) -> list[str]:
    """Environments with a committed stack file, sorted."""
    return sorted(_stack_of(PurePosixPath("stacks", p.name)) for p in (root / "stacks").glob("Pulumi.*.yaml"))


def _stack_of(path: PurePosixPath) -> str | None:
    if path.parent == STACKS_DIR and path.name.startswith("Pulumi.") and path.suffix == ".yaml":
        return path.name.removeprefix("Pulumi.").removesuffix(".yaml")
    return None


def affected_stacks(changed_paths: Iterable[str], known_stacks: Iterable[str]) -> list[str]:
    """The known stacks the changed paths affect, sorted. Pure: no git, no file system."""
    known = sorted(set(known_stacks))
    affected: set[str] = set()
    for raw in changed_paths:
        if not raw.strip():
            continue
        path = PurePosixPath(raw.strip())
        if path.parts[0] in NO_INFRASTRUCTURE_DIRS or path.suffix == ".md":
            continue
        stack = _stack_of(path)
        if stack is None:
            return known
        affected.add(stack)
    return [stack for stack in known if stack in affected]


def main() -> int:
    print(json.dumps(affected_stacks(sys.stdin, stacks_in(ROOT))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
