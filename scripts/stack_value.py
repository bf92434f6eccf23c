"""Print one key of a committed stack file, for Make targets: `python scripts/stack_value.py dev aws:region`.

Lists print one item per line. Exits 2 with a clear message for an unknown stack or key.
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python scripts/stack_value.py STACK KEY", file=sys.stderr)
        return 2
    stack, key = argv
    path = ROOT / "stacks" / f"Pulumi.{stack}.yaml"
    if not path.is_file():
        print(f"no stack file {path.relative_to(ROOT)}", file=sys.stderr)
        return 2
    config = (yaml.safe_load(path.read_text()) or {}).get("config", {})
    if key not in config:
        print(f"{path.relative_to(ROOT)} does not set {key}", file=sys.stderr)
        return 2
    value = config[key]
    print("\n".join(map(str, value)) if isinstance(value, list) else value)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
