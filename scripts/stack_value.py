"""Print one key of a committed stack file, for Make targets: `python scripts/stack_value.py dev aws:region`.

Lists print one item per line. Exits 2 with one clear message for an unknown stack or key, or a stack
file that is not valid YAML (file, line and column).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _stack_file_module():
    """components/config/stack_file.py, loaded by path: importing the package would need the program's
    requirements (pydantic, pulumi), and Make runs this with the system Python when there is no venv."""
    spec = importlib.util.spec_from_file_location("stack_file", ROOT / "components" / "config" / "stack_file.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python scripts/stack_value.py STACK KEY", file=sys.stderr)
        return 2
    stack, key = argv
    stack_file = _stack_file_module()
    path = stack_file.stack_path(stack)
    try:
        config = stack_file.read_stack_file(path)
    except stack_file.StackFileError as error:
        print(error, file=sys.stderr)
        return 2
    if key not in config:
        print(f"{path.relative_to(ROOT)} does not set {key}", file=sys.stderr)
        return 2
    value = config[key]
    print("\n".join(map(str, value)) if isinstance(value, list) else value)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
