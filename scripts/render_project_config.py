"""Write Pulumi.yaml's `config:` block from the config model (components/config/project.py says how).

    python scripts/render_project_config.py          # rewrite Pulumi.yaml
    python scripts/render_project_config.py --check  # exit 1 if the committed file is stale
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from components.config.project import render_pulumi_yaml


def main() -> int:
    target = ROOT / "Pulumi.yaml"
    current = target.read_text()
    text = render_pulumi_yaml(current)
    if "--check" in sys.argv:
        if current != text:
            print("Pulumi.yaml is stale: run python scripts/render_project_config.py")
            return 1
        return 0
    target.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
