"""The validated, immutable stack configuration (one place for every key, type and default)."""

from .loader import ConfigError, load_stack_config, parse_stack_config
from .model import ExistingNetwork, FleetConfig, StackConfig, stack_keys
from .stack_file import StackFileError, read_stack_file, stack_path

__all__ = [
    "ConfigError",
    "ExistingNetwork",
    "FleetConfig",
    "StackConfig",
    "StackFileError",
    "load_stack_config",
    "parse_stack_config",
    "read_stack_file",
    "stack_keys",
    "stack_path",
]
