"""Shortcuts through moto and botocore, for the suite's time (tests/conftest.py installs them).

Five shortcuts, each compared with what moto or botocore does by tests/ci/test_moto_shortcuts.py:
- DynamoDB item values, written as moto's backend holds them (below);
- the names moto looks a member up under, worked out once per kind of member (`pick`);
- whether a response class answers an action, asked of the class, not of a list of its members
  (`FunctionNames`);
- a service's client class and its model, each made once (`create_client_class`, `load_service_model`, at the
  end).

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

import inspect
from typing import Any

from botocore.client import ClientCreator
from moto.core.serialize import AttributePicker, BaseJSONSerializer
from moto.core.utils import MISSING, get_value

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


# moto's XFormedAttributePicker works out, for every member of every structure it writes, the names to look
# the member up under: six alias providers (moto/core/serialize.py, DEFAULT_ALIAS_PROVIDERS), each built
# anew and asked about the object, the member's shape and the shape's parent structure, each name then
# also in snake_case. Most members of an EC2 or ECS answer are absent, so all of them are tried. What the
# providers answer depends only on what `alias_signature` holds: the object's class (its name, its
# `Meta.serialization_aliases`), the member's name, its shape's name, type and serialized name, and the
# parent structure, whose members its name gives within one service model. So the names are worked out once
# per signature. A context without a service model is left to moto: shape names are only unique within one.
# Measured: ten rounds of DescribeInstances (20 instances), DescribeClusters and ListTasks took 0.64 s of CPU
# with moto's picker and 0.53 s with this one (the least of ten runs each).
ORIGINAL_PICK = AttributePicker.__call__
POSSIBLE_KEYS: dict[tuple, tuple[str, ...]] = {}


def alias_signature(picker: AttributePicker, context) -> tuple | None:
    """What the names `picker` tries for `context` depend on, or None where that is not known."""
    if context.service_model is None:
        return None
    shape = context.shape
    parent = getattr(shape, "parent", None)
    return (type(picker), tuple(picker.alias_providers), type(context.obj), context.key,
            context.service_model.service_name, context.service_model.api_version,
            None if shape is None else (shape.name, shape.type_name, shape.serialization.get("name")),
            None if parent is None else (parent.name, parent.type_name))


def pick(self: AttributePicker, context) -> Any:
    """AttributePicker.__call__, with the names to try worked out once per `alias_signature`."""
    signature = alias_signature(self, context)
    if signature is None:
        return ORIGINAL_PICK(self, context)
    keys = POSSIBLE_KEYS.get(signature)
    if keys is None:
        keys = POSSIBLE_KEYS[signature] = tuple(self.get_possible_keys(context))
    obj = context.obj
    for key in keys:
        value = get_value(obj, key, MISSING)
        if value is not MISSING:
            break
    else:
        value = None
    if self.response_transformers:
        key_path = f"{context.key_path}.{context.key}"
        for transform_path, transform in self.response_transformers.items():
            if key_path.endswith(transform_path):
                return transform(value)
    return value


class FunctionNames:
    """`name in FunctionNames(cls)` is `name in moto.core.utils.method_names_from_class(cls)`: whether the
    class has a plain function of that name. moto asks it of each request's response class to find the
    action's method (moto/core/responses.py, call_action, its only caller), and listed every member of the
    class with `inspect.getmembers` to answer: 1.4% of the suite's time and 6% of the removal protocol's moto
    tests' (py-spy). `getmembers` takes each name of `dir(cls)` through `getattr`; asking `getattr` for the one
    name gives the same answer, as a class has no attribute outside its `dir` but its metaclass's, none of
    which is a plain function."""

    def __init__(self, clazz: type) -> None:
        self.clazz = clazz

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and inspect.isfunction(getattr(self.clazz, name, None))


# botocore makes a class for every client it makes, a method per operation (ClientCreator._create_client_class;
# EC2 has hundreds), and the functions and tests make their clients from a new session in each moto context:
# tests/jobs/test_scheduler_run.py and test_degraded_machines.py took 27 s of CPU, 21.5 s with one class per
# service. The class holds the operations' methods and what the `creating-client-class` handlers add to it;
# those handlers are botocore's and boto3's defaults in every session (neither the functions nor the tests
# register one), and a client's own state is on the instance. So one class per service and API version serves
# every session.
ORIGINAL_CLIENT_CLASS = ClientCreator._create_client_class
CLIENT_CLASSES: dict[tuple[str, str], type] = {}


def create_client_class(self: ClientCreator, service_name: str, service_model) -> type:
    """ClientCreator._create_client_class, made once per service and API version."""
    key = (service_name, service_model.api_version)
    if key not in CLIENT_CLASSES:
        CLIENT_CLASSES[key] = ORIGINAL_CLIENT_CLASS(self, service_name, service_model)
    return CLIENT_CLASSES[key]


# botocore also builds a new ServiceModel for every client (ClientCreator._load_service_model), and with it
# every OperationModel and shape the client then uses: making a client works out which of the service's
# operations discovers endpoints (ServiceModel.endpoint_discovery_operation builds the OperationModel of each
# of EC2's hundreds), and a client's first call of an operation resolves its input and output shapes again.
# A ServiceModel is made from the parsed model alone (which tests/conftest.py already shares), and neither
# botocore's handlers nor boto3's change it, so one per service and API version serves every client.
ORIGINAL_SERVICE_MODEL = ClientCreator._load_service_model
SERVICE_MODELS: dict[tuple[str, str | None], object] = {}


def load_service_model(self: ClientCreator, service_name: str, api_version: str | None = None):
    """ClientCreator._load_service_model, made once per service and API version."""
    key = (service_name, api_version)
    if key not in SERVICE_MODELS:
        SERVICE_MODELS[key] = ORIGINAL_SERVICE_MODEL(self, service_name, api_version)
    return SERVICE_MODELS[key]

