"""Shortcuts through moto's answer serialization, for the suite's time (tests/conftest.py installs them).

moto writes each answer through the service model, member by member: every structure member is looked up
under several names (moto/core/serialize.py, XFormedAttributePicker). A DynamoDB AttributeValue has ten
members, and the ledger's items are maps of maps, so writing DynamoDB's answers was about a quarter of a
scheduler run's time in moto (tests/jobs/test_fault_injection.py under cProfile; its scheduler case took
15.8 s before this shortcut, 12.6 s with it). moto's DynamoDB backend already holds
those values in DynamoDB JSON; a value made of strings, numbers, booleans, nulls, string and number sets,
maps and lists is written as it is, which is what the serializer writes for it
(tests/ci/test_moto_shortcuts.py compares the two). Anything else (binary, a map with an empty key, a
malformed value) goes through moto's serializer as before.
"""

from __future__ import annotations

from typing import Any

from moto.core.serialize import BaseJSONSerializer

# Members written as they are, with the type their value must have (botocore's DynamoDB model,
# AttributeValue: S and N are strings, NULL and BOOL booleans, SS and NS lists of strings).
SCALARS = {"S": str, "N": str, "NULL": bool, "BOOL": bool}
SETS = ("SS", "NS")

ORIGINAL_STRUCTURE = BaseJSONSerializer._serialize_type_structure


def dynamodb_json(value: Any) -> dict | None:
    """`value` as moto's JSON serializer writes an AttributeValue, or None where the shortcut does not apply."""
    if not isinstance(value, dict) or len(value) != 1:
        return None
    ((kind, inner),) = value.items()
    if kind in SCALARS:
        return {kind: inner} if type(inner) is SCALARS[kind] else None
    if kind in SETS:
        return {kind: list(inner)} if isinstance(inner, list) and all(type(v) is str for v in inner) else None
    if kind == "M" and isinstance(inner, dict) and "" not in inner:  # moto writes an empty key's value into the map
        members = {key: dynamodb_json(member) for key, member in inner.items()}
        return None if None in members.values() else {"M": members}
    if kind == "L" and isinstance(inner, list):
        items = [dynamodb_json(item) for item in inner]
        return None if None in items else {"L": items}
    return None


def serialize_structure(self, serialized, value, shape, key) -> None:
    """BaseJSONSerializer._serialize_type_structure, with AttributeValues in DynamoDB JSON written directly."""
    if shape.name == "AttributeValue" and key and (written := dynamodb_json(value)) is not None:
        serialized[self.get_serialized_name(shape, key)] = written
        return
    ORIGINAL_STRUCTURE(self, serialized, value, shape, key)
