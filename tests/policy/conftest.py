"""Policy tests import the pack the way Pulumi runs it: from the policy/ folder (top-level `rules`, `pack`)."""

from __future__ import annotations

import sys
from pathlib import Path

POLICY_DIR = Path(__file__).resolve().parents[2] / "policy"
if str(POLICY_DIR) not in sys.path:
    sys.path.insert(0, str(POLICY_DIR))
