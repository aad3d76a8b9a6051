"""Configuration: flat Flink-style keys from YAML files, ``-D`` overrides and dicts."""

from accelflow.config.keys import KEYS, RESOURCE_SUFFIXES, Key
from accelflow._names import kubernetes_extended_resource_problem, yarn_resource_type_problem
from accelflow.config._load import config_from, load_config
from accelflow.config._read import parse_definitions, read_yaml, read_yaml_layer
from accelflow.config._parse import memory_bytes
from accelflow.config._model import Configuration, ExternalResourceSpec, local_slots
from accelflow.config._paths import state_dir, user_state_dir

__all__ = [
    "KEYS",
    "RESOURCE_SUFFIXES",
    "Configuration",
    "ExternalResourceSpec",
    "Key",
    "config_from",
    "kubernetes_extended_resource_problem",
    "load_config",
    "local_slots",
    "memory_bytes",
    "parse_definitions",
    "read_yaml",
    "read_yaml_layer",
    "state_dir",
    "user_state_dir",
    "yarn_resource_type_problem",
]
