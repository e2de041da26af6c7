"""Serving Envoy resources from a directory of YAML/JSON files."""

from ..wire._descriptors import DescriptorSetError
from ._assemble import load_directory
from ._loader import (
    DEFAULT_MAX_CONFIG_BYTES,
    DEFAULT_MAX_FILE_BYTES,
    MAX_YAML_ALIAS_NODES,
    MAX_YAML_ALIASES,
    ConfigError,
    Problem,
    config_files,
    read_directory,
)
from ._process import register_descriptors
from ._scopes import (
    SCOPES_FILE,
    ScopesFile,
    load_scopes,
    parse_scopes,
    reload_scopes,
    with_scopes,
)
from ._watch import DEFAULT_RELOAD_TIMEOUT, load_directory_async, watch_directory

__all__ = [
    "DEFAULT_MAX_CONFIG_BYTES",
    "DEFAULT_MAX_FILE_BYTES",
    "DEFAULT_RELOAD_TIMEOUT",
    "MAX_YAML_ALIASES",
    "MAX_YAML_ALIAS_NODES",
    "ConfigError",
    "DescriptorSetError",
    "Problem",
    "SCOPES_FILE",
    "ScopesFile",
    "config_files",
    "load_directory",
    "load_directory_async",
    "load_scopes",
    "parse_scopes",
    "read_directory",
    "register_descriptors",
    "reload_scopes",
    "watch_directory",
    "with_scopes",
]
