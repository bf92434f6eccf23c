"""The Pulumi CLI's project-config rules, ported from its Go source: what `pulumi preview` does with
Pulumi.yaml and a stack file before the program runs, and the config the program then receives.

    project = load_project(ROOT / "Pulumi.yaml")             # projectLoader.load + Project.Validate
    stack = load_stack_config(path)                          # ProjectStack's config.Map
    merged = merge_config("dev", project, stack)             # mergeConfig + validateStackConfigValues
    values = program_config(merged)                          # {"mlfleet:regions": '["us-east-1"]', ...}

Sources (github.com/pulumi/pulumi, at the commit given; each rule below names its function):
- sdk/go/common/workspace/loaders.go      projectLoader.load: the order of the steps (0498be11)
- sdk/go/common/workspace/project.json    the project file's JSON schema, config declarations (5351d868)
- sdk/go/common/workspace/project.go      ValidateProject, RewriteConfigPathIntoStackConfigDir,
                                          RewriteShorthandConfigValues, Project.Validate,
                                          ValidateConfigValue, InferFullTypeName, isPrimitiveValue (0351806b)
- sdk/go/common/workspace/config.go       mergeConfig, validateStackConfigValues,
                                          validateStackConfigValue, createConfigValue,
                                          formatMissingKeys, parseConfigKey (0a7aa0e2)
- sdk/go/common/resource/config/key.go    ParseKey (30ed5568)
- sdk/go/common/resource/config/value.go  Value.unmarshalValue: how a stack file's value is read (099d2642)
- sdk/go/common/encoding/marshal.go       YAML files are read with gopkg.in/yaml.v2 (YAML 1.1, like
                                          PyYAML) (478141e6)

Not ported, and refused rather than guessed: ESC environments (a stack file's `environment:`), property
paths in config keys (`a.b[0]`), decrypting secrets (pass `decrypter` to check a secure value's type).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from components.config.stack_file import StackFileError, parse_yaml


class PulumiConfigError(Exception):
    """What the CLI would print before the program runs (the message is the CLI's own wording)."""


# --- reading YAML as gopkg.in/yaml.v2 does ------------------------------------------------------------

class _Yaml11Loader(yaml.SafeLoader):
    """PyYAML's safe loader resolves like yaml.v2 (YAML 1.1: yes/no/on/off are booleans), except that
    yaml.v2 leaves an untagged timestamp a string when decoding into interface{}."""


_Yaml11Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def _load_yaml(path: Path) -> tuple[Any, yaml.Node | None]:
    """The document (values) and its node graph (raw scalar text), or StackFileError for bad YAML."""
    node = parse_yaml(path, compose=True, loader=_Yaml11Loader)
    return (_Yaml11Loader("").construct_document(node) if node is not None else None), node


def _go_string(key: Any) -> str:
    """fmt.Sprintf("%v", key), for map keys (value.go interfaceMapToStringMap)."""
    if isinstance(key, bool):
        return "true" if key else "false"
    return "<nil>" if key is None else str(key)


def _simplify(value: Any) -> Any:
    """interfaceMapToStringMap (value.go) / SimplifyMarshalledValue (project.go): string map keys."""
    if isinstance(value, dict):
        return {_go_string(k): _simplify(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_simplify(v) for v in value]
    return value


def _go_json(value: Any) -> str:
    """encoding/json.Marshal: map keys sorted, no spaces, a whole float without a fraction."""
    def normal(v: Any) -> Any:
        if isinstance(v, float) and v.is_integer() and abs(v) < 1e21:
            return int(v)
        if isinstance(v, dict):
            return {k: normal(x) for k, x in v.items()}
        if isinstance(v, list):
            return [normal(x) for x in v]
        return v
    return json.dumps(normal(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


# --- config keys and values (resource/config/key.go, value.go) ----------------------------------------

@dataclass(frozen=True, order=True)
class Key:
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}:{self.name}"


def parse_key(text: str) -> Key:
    """key.go ParseKey: `<namespace>:<name>`, or the legacy `<namespace>:config:<name>`."""
    parts = text.split(":")
    if len(parts) == 2:
        return Key(parts[0], parts[1])
    if len(parts) == 3 and parts[1] == "config":
        return Key(parts[0], parts[2])
    raise PulumiConfigError(f"could not parse {text} as a configuration key "
                            "(configuration keys should be of the form `<namespace>:<name>`)")


def parse_config_key(project_name: str, key: str) -> Key:
    """config.go parseConfigKey: a project config key without a namespace is in the project's."""
    return _without_path(parse_key(key) if ":" in key else Key(project_name, key))


def _without_path(key: Key) -> Key:
    # mergeConfig looks keys up with path=true, where `a.b[0]` addresses inside an object: not ported.
    if "." in key.name or "[" in key.name:
        raise PulumiConfigError(f"{key}: property paths in config keys are not ported to this check")
    return key


@dataclass(frozen=True)
class Value:
    """config.Value: a plain string, or JSON text for an object/array; `secure` for a `{secure: ...}`."""
    value: str
    secure: bool = False
    object: bool = False


def _has_secure_value(value: Any) -> bool:
    """value.go hasSecureValue."""
    if isinstance(value, dict):
        return _is_secure_value(value) is not None or any(_has_secure_value(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_secure_value(v) for v in value)
    return False


def _is_secure_value(value: Any) -> str | None:
    """value.go isSecureValue: a one-key mapping {secure: <string>}; returns the ciphertext."""
    if isinstance(value, dict) and len(value) == 1 and isinstance(value.get("secure"), str):
        return value["secure"]
    return None


def _stack_value(node: yaml.Node, value: Any) -> Value:
    """value.go unmarshalValue: first try the value as a string (yaml.v2 decodes any scalar into a
    string as written: `True` stays "True", `5` is "5", null is ""); otherwise it is an object."""
    if isinstance(node, yaml.ScalarNode):
        return Value("" if value is None else node.value)
    obj = _simplify(value)
    ciphertext = _is_secure_value(obj)
    if ciphertext is not None:
        return Value(ciphertext, secure=True)
    return Value(_go_json(obj), secure=_has_secure_value(obj), object=True)


def load_stack_config(path: Path) -> dict[Key, Value]:
    """A stack file's `config:` as the CLI holds it (workspace/loaders.go projectStackLoader.load)."""
    document, node = _load_yaml(path)
    if document is None:
        return {}
    if not isinstance(document, dict):
        raise PulumiConfigError(f"{path.name}: a stack file is a mapping")
    if document.get("environment"):
        raise PulumiConfigError(f"{path.name}: ESC environments are not ported to this check")
    config_node = next((v for k, v in node.value if k.value == "config"), None)
    if config_node is None or document.get("config") is None:
        return {}
    config = {}
    for key_node, value_node in config_node.value:
        key = _without_path(parse_key(key_node.value))
        config[key] = _stack_value(value_node, document["config"][key_node.value])
    return config


# --- the project file (workspace/project.go, project.json) ----------------------------------------------

# project.json $defs.simpleConfigType. ValidateConfigValue also knows "object", which the schema refuses.
SIMPLE_CONFIG_TYPES = ("string", "integer", "boolean", "array")


@dataclass(frozen=True)
class ItemsType:
    """ProjectConfigItemsType."""
    type: str
    items: ItemsType | None = None


@dataclass(frozen=True)
class ConfigType:
    """ProjectConfigType. `default`/`value` None is Go's nil: absent, or written as null."""
    type: str | None = None
    description: str = ""
    items: ItemsType | None = None
    default: Any = None
    value: Any = None
    secret: bool = False


@dataclass(frozen=True)
class Project:
    name: str
    config: Mapping[str, ConfigType]
    stack_config_dir: str | None


def _items(raw: Any) -> ItemsType | None:
    if raw is None:
        return None
    return ItemsType(type=raw["type"], items=_items(raw.get("items")))


def _schema_items_errors(path: str, raw: Any) -> list[str]:
    """project.json $defs.configItemsType."""
    if not isinstance(raw, dict):
        return [f"{path}: expected object"]
    errors = []
    if "type" not in raw:
        errors.append(f"{path}: missing properties: 'type'")
    elif raw["type"] not in SIMPLE_CONFIG_TYPES:
        errors.append(f"{path}/type: value must be one of {', '.join(map(repr, SIMPLE_CONFIG_TYPES))}")
    if raw.get("type") == "array" and "items" not in raw:
        errors.append(f"{path}: missing properties: 'items'")
    if "items" in raw:
        errors += _schema_items_errors(f"{path}/items", raw["items"])
    return errors


def _schema_errors(project: dict[str, Any]) -> list[str]:
    """The parts of project.json that concern mlfleet: name, runtime, stackConfigDir and `config`."""
    errors = []
    if "runtime" not in project:
        errors.append("#: missing properties: 'runtime'")
    config = project.get("config")
    if config is None or isinstance(config, str):
        return errors
    if not isinstance(config, dict):
        return errors + ["#/config: expected object, string or null"]
    # project.json: config.properties.secret is a boolean (a key literally named `secret`).
    if "secret" in config and not isinstance(config["secret"], bool):
        errors.append("#/config/secret: expected boolean")
    declaration_properties = {"type", "items", "description", "secret", "default", "value"}
    for key, raw in config.items():
        path = f"#/config/{key}"
        # additionalProperties.oneOf: string | integer | boolean | array | configTypeDeclaration
        if isinstance(raw, (str, int, bool, list)):
            continue
        if not isinstance(raw, dict):
            errors.append(f"{path}: oneOf failed, expected string, integer, boolean, array or a declaration")
            continue
        for extra in sorted(set(raw) - declaration_properties):
            errors.append(f"{path}: additionalProperties '{extra}' not allowed")
        if "type" in raw and raw["type"] not in SIMPLE_CONFIG_TYPES:
            errors.append(f"{path}/type: value must be one of {', '.join(map(repr, SIMPLE_CONFIG_TYPES))}")
        if "items" in raw:
            errors += _schema_items_errors(f"{path}/items", raw["items"])
        if "description" in raw and not isinstance(raw["description"], str):
            errors.append(f"{path}/description: expected string")
        if "secret" in raw and not isinstance(raw["secret"], bool):
            errors.append(f"{path}/secret: expected boolean")
    return errors


def _is_primitive(value: Any) -> bool:
    """project.go isPrimitiveValue: string, int, bool (yaml.v2 decodes a float as float64: not primitive)."""
    return isinstance(value, (str, int, bool))


def validate_config_value(type_name: str, items: ItemsType | None, value: Any) -> bool:
    """project.go ValidateConfigValue, on values as Go decodes them (YAML or JSON)."""
    if type_name == "string":
        return isinstance(value, str)
    if type_name == "integer":
        if isinstance(value, bool):
            return False
        if isinstance(value, int):
            return True
        if isinstance(value, float):  # YAML/JSON numbers may be floats: a whole number is allowed
            return math.isfinite(value) and value == math.trunc(value)
        if isinstance(value, str):  # strconv.Atoi: optional sign, decimal digits, within int64
            return bool(re.fullmatch(r"[+-]?[0-9]+", value)) and -(2**63) <= int(value) < 2**63
        return False
    if type_name == "boolean":
        return value in ("true", "false") if isinstance(value, str) else isinstance(value, bool)
    if type_name == "object":
        return isinstance(value, dict)
    if not isinstance(value, list) or items is None:
        return False
    return all(validate_config_value(items.type, items.items, item) for item in value)


def infer_full_type_name(type_name: str, items: ItemsType | None) -> str:
    """project.go InferFullTypeName: array<array<string>>."""
    return f"array<{infer_full_type_name(items.type, items.items)}>" if items is not None else type_name


def _namespaced_by_project(project_name: str, key: str) -> bool:
    """project.go configKeyIsNamespacedByProject."""
    return ":" not in key or key.startswith(project_name + ":")


def validate_project(project: Project) -> None:
    """project.go (*Project).Validate. The CLI stops at the first error, in Go's (random) map order."""
    if not project.name:
        raise PulumiConfigError("project is missing a 'name' attribute")
    for key, declared in project.config.items():
        if declared.default is not None and declared.value is not None:
            raise PulumiConfigError(f"project config '{key}' cannot have both a 'default' and 'value' attribute")
        if _namespaced_by_project(project.name, key):
            if declared.type == "array" and declared.items is None:
                raise PulumiConfigError(f"The configuration key '{key}' declares an array but does not specify the "
                                        "underlying type via the 'items' attribute")
            if (declared.type is not None and declared.default is not None
                    and not validate_config_value(declared.type, declared.items, declared.default)):
                raise PulumiConfigError(
                    f"The default value specified for configuration key '{key}' is not of the expected type "
                    f"'{infer_full_type_name(declared.type, declared.items)}'")
        else:
            if declared.type is not None:
                raise PulumiConfigError(f"Configuration key '{key}' is not namespaced by the project and should "
                                        "not define a type")
            if declared.default is not None:
                raise PulumiConfigError(f"Configuration key '{key}' is not namespaced by the project and should "
                                        "not define a default value. Did you mean to use the 'value' attribute "
                                        "instead of 'default'?")
            if declared.value is None:
                raise PulumiConfigError(f"Configuration key '{key}' is namespaced and must provide an attribute "
                                        "'value'")


def load_project(path: Path) -> Project:
    """loaders.go projectLoader.load: YAML, ValidateProject (schema), the two rewrites, Project.Validate."""
    raw, _ = _load_yaml(path)
    if not isinstance(raw, dict):
        raise PulumiConfigError(f"expected project to be an object, was '{type(raw).__name__}'")
    raw = _simplify(raw)
    # project.go ValidateProject: the name first, then the JSON schema.
    if "name" not in raw:
        raise PulumiConfigError("project is missing a 'name' attribute")
    if not isinstance(raw["name"], str) or not raw["name"]:
        raise PulumiConfigError("project is missing a non-empty string 'name' attribute")
    errors = _schema_errors(raw)
    if errors:
        raise PulumiConfigError(f"could not validate '{path}': {len(errors)} errors occurred:\n"
                                + "\n".join(f"\t* {e}" for e in errors))
    config = raw.get("config")
    stack_config_dir = raw.get("stackConfigDir")
    # project.go RewriteConfigPathIntoStackConfigDir: the old `config: <dir>` form.
    if isinstance(config, str):
        if stack_config_dir is not None:
            raise PulumiConfigError("Should not use both config and stackConfigDir to define the stack directory. "
                                    "Use only stackConfigDir instead.")
        config, stack_config_dir = None, config
    declarations = {}
    for key, declared in (config or {}).items():
        # project.go RewriteShorthandConfigValues: a bare value is a project key's default, or another
        # namespace's value.
        if _is_primitive(declared) or isinstance(declared, list):
            declared = {"default" if _namespaced_by_project(raw["name"], key) else "value": declared}
        declarations[key] = ConfigType(type=declared.get("type"), description=declared.get("description", ""),
                                       items=_items(declared.get("items")), default=declared.get("default"),
                                       value=declared.get("value"), secret=bool(declared.get("secret", False)))
    project = Project(name=raw["name"], config=declarations, stack_config_dir=stack_config_dir)
    validate_project(project)
    return project


# --- the merge (workspace/config.go) -------------------------------------------------------------------

def _create_config_value(raw: Any) -> Value:
    """config.go createConfigValue: a primitive as fmt %v, anything else as a JSON object value."""
    if _is_primitive(raw):
        return Value(_go_string(raw))
    return Value(_go_json(_simplify(raw)), object=True)


def _format_missing_keys(keys: list[str]) -> str:
    """config.go formatMissingKeys: 'a', 'b' and 'c' (sorted)."""
    if len(keys) == 1:
        return f"'{keys[0]}'"
    keys = sorted(keys)
    return ", ".join(f"'{k}'" for k in keys[:-1]) + f" and '{keys[-1]}'"


Decrypter = Callable[[str], str]


def _plaintext(value: Value, decrypter: Decrypter | None) -> str:
    """value.go Value.Value: a secure value needs the decrypter."""
    if not value.secure:
        return value.value
    if decrypter is None:
        raise PulumiConfigError("non-nil decrypter required for secret")
    if value.object:
        def decrypt(v: Any) -> Any:
            ciphertext = _is_secure_value(v)
            if ciphertext is not None:
                return decrypter(ciphertext)
            if isinstance(v, dict):
                return {k: decrypt(x) for k, x in v.items()}
            return [decrypt(x) for x in v] if isinstance(v, list) else v
        return _go_json(decrypt(json.loads(value.value)))
    return decrypter(value.value)


def _validate_stack_config_value(stack: str, key: str, declared: ConfigType, value: Value, plaintext: str) -> None:
    """config.go validateStackConfigValue: a secret key must be encrypted; then the type."""
    if declared.secret and not value.secure:
        raise PulumiConfigError(f"Stack '{stack}' with configuration key '{key}' must be encrypted as it's secret")
    content: Any = json.loads(plaintext) if value.object else plaintext
    if not validate_config_value(declared.type, declared.items, content):
        raise PulumiConfigError(f"Stack '{stack}' with configuration key '{key}' must be of type "
                                f"'{infer_full_type_name(declared.type, declared.items)}'")


def merge_config(stack: str, project: Project, stack_config: Mapping[Key, Value],
                 decrypter: Decrypter | None = None) -> dict[Key, Value]:
    """config.go mergeConfig (validate=true, no ESC environment) and validateStackConfigValues.

    Returns the stack's config with the project's defaults and values filled in.
    """
    merged = dict(stack_config)
    missing = []
    for project_key in sorted(project.config):
        declared = project.config[project_key]
        key = parse_config_key(project.name, project_key)
        found = key in merged
        has_default, has_value = declared.default is not None, declared.value is not None
        if not found and not has_value and not has_default and key.namespace == project.name:
            missing.append(project_key)
            continue
        if not found and (has_value or has_default):
            merged[key] = _create_config_value(declared.default if has_default else declared.value)
    if missing:
        values = "values" if len(missing) > 1 else "value"
        raise PulumiConfigError(f"Stack '{stack}' is missing configuration {values} {_format_missing_keys(missing)}")
    for project_key in sorted(project.config):
        declared = project.config[project_key]
        if declared.type is None:  # IsExplicitlyTyped
            continue
        key = parse_config_key(project.name, project_key)
        value = merged.get(key, Value(""))
        _validate_stack_config_value(stack, project_key, declared, value, _plaintext(value, decrypter))
    return merged


def program_config(merged: Mapping[Key, Value], decrypter: Decrypter | None = None) -> dict[str, str]:
    """The config the language host hands the program: `namespace:name` -> string (objects as JSON)."""
    return {str(key): _plaintext(value, decrypter) for key, value in sorted(merged.items())}


def check_stack(project_file: Path, stack_file: Path, stack: str) -> dict[str, str]:
    """Everything the CLI checks before running the program; returns the program's config."""
    try:
        return program_config(merge_config(stack, load_project(project_file), load_stack_config(stack_file)))
    except StackFileError as error:
        raise PulumiConfigError(str(error)) from None
