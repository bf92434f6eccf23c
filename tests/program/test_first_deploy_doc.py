"""docs/first-deploy.md stays true to the code it quotes: the endpoint list, the make targets, the links."""

from __future__ import annotations

import re
from pathlib import Path

from components.network.network import INTERFACE_ENDPOINT_SERVICES

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "first-deploy.md"


def documented_endpoints(text: str) -> list[tuple[str, str]]:
    """(service, type) of each item between the endpoint markers of "Networking without egress"."""
    section = text.split("<!-- endpoints: derived from components/network/network.py -->")[1].split("<!-- /endpoints -->")[0]
    return re.findall(r"^- `([a-z0-9.-]+)` \((Gateway|Interface)\)", section, flags=re.MULTILINE)


def declared_endpoints() -> list[tuple[str, str]]:
    return [("s3", "Gateway"), *((service, "Interface") for service in INTERFACE_ENDPOINT_SERVICES)]


def test_the_networking_section_lists_exactly_what_components_network_declares():
    assert documented_endpoints(DOC.read_text()) == declared_endpoints(), (
        "docs/first-deploy.md 'Networking without egress' is derived from components/network/network.py: "
        "update the list between the endpoint markers")


def test_the_endpoint_check_fails_on_a_stale_list():
    stale = DOC.read_text().replace("- `sts` (Interface)\n", "")
    assert documented_endpoints(stale) != declared_endpoints()


def make_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text() + "".join(p.read_text() for p in (ROOT / "mk").glob("*.mk"))
    targets = set()
    for line in text.splitlines():
        match = re.match(r"^([a-z][a-z0-9 -]*):(?!=)", line)
        if match:
            targets.update(match.group(1).split())
    return targets


def make_commands(text: str) -> set[str]:
    return set(re.findall(r"(?:`|\$ )make\s+([a-z][a-z-]*)", text))


def test_every_make_command_the_checklist_gives_exists():
    used = make_commands(DOC.read_text())
    assert {"preview", "up", "destroy", "cost-tag", "ami-clean"} <= used
    assert used - make_targets() == set()


def test_the_make_check_finds_a_target_that_does_not_exist():
    assert make_commands("run `make cost-tags` once") - make_targets() == {"cost-tags"}


def test_the_readme_links_the_checklist_and_the_runbook_anchor_exists():
    assert "(docs/first-deploy.md)" in (ROOT / "README.md").read_text()
    assert "\n## 9. After `make destroy`\n" in DOC.read_text()
    assert "first-deploy.md#9-after-make-destroy" in (ROOT / "docs" / "runbook.md").read_text()
