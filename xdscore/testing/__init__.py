"""Helpers for testing control planes against real peers (public API)."""

from ._envoy import Envoy, EnvoyError, envoy_binary, envoy_bootstrap
from ._net import HttpBackend, free_port, http_get

__all__ = [
    "Envoy",
    "EnvoyError",
    "HttpBackend",
    "envoy_binary",
    "envoy_bootstrap",
    "free_port",
    "http_get",
]
