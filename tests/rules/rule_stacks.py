"""The stacks every rule check runs on besides the committed ones (and the longest one, longest.py).

- NEW_ENVIRONMENT: the environment a user adds by README's "Add an environment" steps. README: "Copy
  `stacks/Pulumi.<source>.yaml` to `stacks/Pulumi.<name>.yaml`, edit it, ...". The copy is made literally
  (the file, under the new name).
- HOME_ELSEWHERE: the README's copy with its home region moved out of us-east-1 while a fleet still runs
  there. Every committed stack has its home in us-east-1, so none renders the billing resources in a
  region other than home, beside a fleet region's own.

Each renders from the config the Pulumi CLI would hand the program (tests/rules/pulumi_project.py: the
project file's defaults merged in), not from the stack file as our own loader reads it.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import yaml
from pulumi_harness import ROOT, STACKS
from pulumi_project import check_stack

NEW_ENVIRONMENT = "research"
HOME_ELSEWHERE = "west"
HOME_ELSEWHERE_REGION = "us-west-2"
RULE_STACKS = (*STACKS, NEW_ENVIRONMENT, HOME_ELSEWHERE)


def source_stack() -> str:
    """The committed stack README's "Add an environment" says to copy."""
    section = (ROOT / "README.md").read_text().split("### Add an environment", 1)[1].split("\n#", 1)[0]
    match = re.search(r"Copy `stacks/Pulumi\.([a-z0-9-]+)\.yaml` to `stacks/Pulumi\.<name>\.yaml`", section)
    assert match, "README's 'Add an environment' no longer says which stack file to copy"
    return match[1]


def make(folder: Path, name: str = NEW_ENVIRONMENT) -> Path:
    """The README's copy-and-rename, into `folder`."""
    path = folder / f"Pulumi.{name}.yaml"
    shutil.copyfile(ROOT / "stacks" / f"Pulumi.{source_stack()}.yaml", path)
    return path


def make_home_elsewhere(folder: Path) -> Path:
    """The README's copy with its home region moved to HOME_ELSEWHERE_REGION, its fleet regions kept."""
    path = make(folder, HOME_ELSEWHERE)
    document = yaml.safe_load(path.read_text())
    regions = document["config"]["mlfleet:regions"]
    assert "us-east-1" in regions and HOME_ELSEWHERE_REGION in regions, regions
    document["config"]["aws:region"] = HOME_ELSEWHERE_REGION
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def program_config(path: Path, name: str = NEW_ENVIRONMENT) -> dict[str, str]:
    """What the CLI hands the program for the stack (PulumiConfigError if it would stop first)."""
    return check_stack(ROOT / "Pulumi.yaml", path, name)
