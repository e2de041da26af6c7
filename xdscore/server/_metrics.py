"""The server's Prometheus metrics, with istiod's meanings, in a registry of their own.

Every label is bounded: ``type`` is a registered type's short name (``cds``, ``eds``, ...)
or ``other``; ``protocol``, ``mode`` and ``reason`` take a handful of fixed values. No node
id is ever a label. Children are bound once per label value, so recording costs a dict
look-up and an increment.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from ..wire._typeurls import all_types

__all__ = ["BUCKETS", "Metrics", "type_label"]

BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
"""Histogram buckets, 1 ms to 30 s."""

_SHORT = {info.type_url: info.short_name for info in all_types()}


def type_label(type_url: str) -> str:
    """The ``type`` label of ``type_url``: its short name, or ``other`` if unregistered."""
    return _SHORT.get(type_url, "other")


class _ByType:
    """One metric's children by type URL, bound on first use."""

    __slots__ = ("_bind", "_children")

    def __init__(self, bind: Callable[[str], Any]) -> None:
        self._bind = bind
        self._children: dict[str, Any] = {}

    def __call__(self, type_url: str) -> Any:
        child = self._children.get(type_url)
        if child is None:
            child = self._children[type_url] = self._bind(type_label(type_url))
        return child


class Metrics:
    """What the runtime records; ``registry`` is exposed at ``/metrics``."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        push = Histogram(
            "xdscore_push_seconds",
            "Time to write one response to a proxy, from reading the cache to the write's end.",
            ["type"],
            buckets=BUCKETS,
            registry=r,
        )
        convergence = Histogram(
            "xdscore_proxy_convergence_seconds",
            "Delay between a cache change and the proxy's ACK of the response carrying it.",
            ["type"],
            buckets=BUCKETS,
            registry=r,
        )
        nacks = Counter("xdscore_nacks", "Responses proxies rejected.", ["type"], registry=r)
        acks = Counter("xdscore_acks", "Responses proxies applied.", ["type"], registry=r)
        responses = Counter("xdscore_responses", "Responses written.", ["type"], registry=r)
        sent = Counter(
            "xdscore_response_bytes", "Bytes of responses written.", ["type"], registry=r
        )
        stale = Counter(
            "xdscore_stale_nonces",
            "Requests whose nonce was not the latest sent for their type.",
            ["type"],
            registry=r,
        )
        updates = Counter(
            "xdscore_cache_updates",
            "Cache writes that changed a type (one per type per snapshot or linear write).",
            ["type"],
            registry=r,
        )
        heartbeats = Counter(
            "xdscore_heartbeats",
            "Heartbeat responses written (they restart the TTLs of unchanged resources).",
            ["type"],
            registry=r,
        )
        beaten = Counter(
            "xdscore_heartbeat_resources",
            "Resources carried by heartbeat responses.",
            ["type"],
            registry=r,
        )
        self.heartbeats = _ByType(heartbeats.labels)
        self.heartbeat_resources = _ByType(beaten.labels)
        self.push_seconds = _ByType(push.labels)
        self.convergence_seconds = _ByType(convergence.labels)
        self.nacks = _ByType(nacks.labels)
        self.acks = _ByType(acks.labels)
        self.responses = _ByType(responses.labels)
        self.response_bytes = _ByType(sent.labels)
        self.stale_nonces = _ByType(stale.labels)
        self.cache_updates = _ByType(updates.labels)
        self.pushes_in_flight = Gauge(
            "xdscore_pushes_in_flight", "Responses being written now.", registry=r
        )
        self.streams = Gauge(
            "xdscore_streams",
            "Streams being served, by protocol (sotw, delta) and mode (ads, per_type).",
            ["protocol", "mode"],
            registry=r,
        )
        self.refused_streams = Counter(
            "xdscore_refused_streams",
            "Streams refused, by reason.",
            ["reason"],
            registry=r,
        )
        self.rebalanced_streams = Counter(
            "xdscore_rebalanced_streams",
            "Streams ended cleanly because they reached their maximum age (rebalancing).",
            registry=r,
        )
        self.fetches = Counter(
            "xdscore_fetches",
            "Unary Fetch calls answered, by type and gRPC status (ok, not_found, ...).",
            ["type", "code"],
            registry=r,
        )
        self.connections_cut = Counter(
            "xdscore_connections_cut",
            "HTTP/2 connections cut for abuse, or closed at accept past max_connections.",
            ["reason"],
            registry=r,
        )
        for protocol in ("sotw", "delta"):
            for mode in ("ads", "per_type"):
                self.streams.labels(protocol, mode)
        for reason in ("closing", "max_streams", "initial_syncs", "rate", "permission_denied"):
            self.refused_streams.labels(reason)
        for reason in ("rapid_reset", "ping_flood", "settings_flood", "max_connections"):
            self.connections_cut.labels(reason)
        for info in all_types():
            # Every registered type's series exists from the start, so that increase()
            # sees the first NACK.
            for counter in (self.nacks, self.acks, self.responses, self.stale_nonces):
                counter(info.type_url)
