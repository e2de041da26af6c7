"""Helpers for testing control planes against real peers, and `conformance`, the
conformance suite for any control plane (public API)."""

from . import conformance
from ._envoy import Envoy, EnvoyError, envoy_binary, envoy_bootstrap
from ._memory import MemoryByteStream, byte_stream_pair
from ._net import HttpBackend, free_port, http_get
from ._pair import DeltaPair, SotwPair

__all__ = [
    "DeltaPair",
    "Envoy",
    "EnvoyError",
    "HttpBackend",
    "MemoryByteStream",
    "SotwPair",
    "byte_stream_pair",
    "conformance",
    "envoy_binary",
    "envoy_bootstrap",
    "free_port",
    "http_get",
]
