"""Serving Envoy resources from a directory of YAML/JSON files."""

from ._loader import ConfigError, Problem, config_files, load_directory, read_directory
from ._watch import watch_directory

__all__ = [
    "ConfigError",
    "Problem",
    "config_files",
    "load_directory",
    "read_directory",
    "watch_directory",
]
