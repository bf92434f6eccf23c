"""The environment a user adds by README's "Add an environment" steps, so that every rule check runs on it
as well as on the committed stacks.

README: "Copy `stacks/Pulumi.<source>.yaml` to `stacks/Pulumi.<name>.yaml`, edit it, ...". The copy is made
literally (the file, under the new name), and the program renders from the config the Pulumi CLI would
hand it (tests/rules/pulumi_project.py: the project file's defaults merged in), not from the stack file as
our own loader reads it.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from pulumi_harness import ROOT, STACKS
from pulumi_project import check_stack

NAME = "research"
# Every rendering the engine and cloud rule checks run on (besides the longest one, tests/rules/longest.py).
RULE_STACKS = (*STACKS, NAME)


def source_stack() -> str:
    """The committed stack README's "Add an environment" says to copy."""
    section = (ROOT / "README.md").read_text().split("### Add an environment", 1)[1].split("\n#", 1)[0]
    match = re.search(r"Copy `stacks/Pulumi\.([a-z0-9-]+)\.yaml` to `stacks/Pulumi\.<name>\.yaml`", section)
    assert match, "README's 'Add an environment' no longer says which stack file to copy"
    return match[1]


def make(folder: Path) -> Path:
    """The README's copy-and-rename, into `folder`."""
    path = folder / f"Pulumi.{NAME}.yaml"
    shutil.copyfile(ROOT / "stacks" / f"Pulumi.{source_stack()}.yaml", path)
    return path


def program_config(path: Path) -> dict[str, str]:
    """What the CLI hands the program for the new stack (PulumiConfigError if it would stop first)."""
    return check_stack(ROOT / "Pulumi.yaml", path, NAME)
