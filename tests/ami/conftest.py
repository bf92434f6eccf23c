"""Fixtures for the GPU image tests: the Packer templates parsed into plain Python, fake AWS credentials."""

from __future__ import annotations

from pathlib import Path

import hcl2
import pytest

PACKER = Path(__file__).resolve().parents[2] / "packer"


def plain(value):
    """python-hcl2 8.x output without its markers: quoted strings unquoted, `__is_block__` and comments gone."""
    if isinstance(value, dict):
        return {plain(key): plain(item) for key, item in value.items() if key not in ("__is_block__", "__comments__")}
    if isinstance(value, list):
        return [plain(item) for item in value]
    if isinstance(value, str) and len(value) >= 2 and value[0] == value[-1] == '"':
        return value[1:-1]
    return value


def load_hcl(name: str) -> dict:
    with open(PACKER / name, encoding="utf-8") as handle:
        return plain(hcl2.load(handle))


@pytest.fixture(scope="session")
def template() -> dict:
    """All *.pkr.hcl files merged the way Packer merges a directory: block lists concatenated."""
    merged: dict[str, list] = {}
    for path in sorted(PACKER.glob("*.pkr.hcl")):
        for block, items in load_hcl(path.name).items():
            merged.setdefault(block, []).extend(items)
    return merged


@pytest.fixture(scope="session")
def variables(template) -> dict[str, dict]:
    return {name: body for block in template["variable"] for name, body in block.items()}


@pytest.fixture(scope="session")
def locals_(template) -> dict:
    return {name: value for block in template["locals"] for name, value in block.items()}


@pytest.fixture(scope="session")
def source(template) -> dict:
    (block,) = template["source"]
    return block["amazon-ebs"]["al2023_gpu"]


@pytest.fixture(scope="session")
def build(template) -> dict:
    (block,) = template["build"]
    return block


@pytest.fixture(scope="session")
def pinned_versions() -> dict:
    return load_hcl("versions.pkrvars.hcl")


@pytest.fixture(autouse=True)
def no_public_amis(monkeypatch):
    """Fake credentials come from tests/conftest.py."""
    # moto otherwise loads thousands of public AMIs (and their snapshots) into every region it touches.
    monkeypatch.setenv("MOTO_EC2_LOAD_DEFAULT_AMIS", "false")
