"""The validated, immutable stack configuration (one place for every key, type and default)."""

from .loader import ConfigError, load_stack_config, parse_stack_config
from .model import ExistingNetwork, FleetConfig, StackConfig, stack_keys

__all__ = [
    "ConfigError",
    "ExistingNetwork",
    "FleetConfig",
    "StackConfig",
    "load_stack_config",
    "parse_stack_config",
    "stack_keys",
]
