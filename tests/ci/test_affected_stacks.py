"""scripts/affected_stacks.py: which stacks a pull request previews."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
from affected_stacks import ROOT, affected_stacks, stacks_in  # noqa: E402

STACKS = ["dev", "prod", "staging"]


@pytest.mark.parametrize("paths, expected", [
    (["stacks/Pulumi.dev.yaml"], ["dev"]),
    (["stacks/Pulumi.prod.yaml", "stacks/Pulumi.staging.yaml"], ["prod", "staging"]),
    (["stacks/Pulumi.qa.yaml"], []),  # deleted or not yet committed: no stack file to preview
    (["components/compute/fleet.py"], STACKS),
    (["lambdas/reaper/idle.py"], STACKS),
    (["policy/rules.py"], STACKS),
    (["__main__.py"], STACKS),
    (["Pulumi.yaml"], STACKS),
    (["requirements.txt"], STACKS),
    (["requirements-dev.txt"], STACKS),
    (["packer/manifest.py"], STACKS),
    (["docs/ci.md"], []),
    (["tests/program/test_stacks.py", "tests/snapshots/dev.json"], []),
    (["benchmarks/render.py"], []),
    (["README.md"], []),
    (["docs/ci.md", "stacks/Pulumi.dev.yaml", "README.md"], ["dev"]),
    (["stacks/Pulumi.dev.yaml", "components/network/network.py"], STACKS),
    ([".github/workflows/pull-request.yml"], STACKS),  # unclassified: preview everything
    ([], []),
    (["", "  "], []),
])
def test_affected_stacks(paths, expected):
    assert affected_stacks(paths, STACKS) == expected


@given(st.lists(st.sampled_from(["docs/a.md", "tests/x.py", "README.md", "benchmarks/b.py",
                                 "stacks/Pulumi.dev.yaml", "components/c.py", "Makefile"]), max_size=6))
def test_result_is_a_sorted_subset_of_the_known_stacks(paths):
    result = affected_stacks(paths, STACKS)
    assert result == sorted(set(result)) and set(result) <= set(STACKS)


def test_known_stacks_are_the_committed_stack_files():
    assert stacks_in(ROOT) == STACKS


def test_command_line_prints_a_json_list_for_the_matrix():
    completed = subprocess.run([sys.executable, str(ROOT / "scripts" / "affected_stacks.py")],
                               input="stacks/Pulumi.prod.yaml\ndocs/x.md\n", capture_output=True, text=True, check=True)
    assert json.loads(completed.stdout) == ["prod"]
