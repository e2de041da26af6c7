"""Where a stream's facts become metrics, log lines and user callbacks: one per server.

The session (:mod:`._session`) decides; this observer reports. It is the one place that
knows which fact counts in which metric, what is logged at which level, and which user
callback hears of it; a callback that raises a :class:`~xdscore.ProtocolError` ends its
stream, any other exception is logged and the stream carries on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from mypy_extensions import mypyc_attr

from .._errors import ProtocolError
from ..protocol._events import (
    Event,
    ResponseAcked,
    ResponseNacked,
    StaleNonceSeen,
)
from ..protocol._features import ClientFeatures
from ._callbacks import ServerCallbacks, StreamInfo
from ._facts import Converged, Fact, Sent
from ._metrics import Metrics, type_label

__all__ = ["Observer", "call_back", "describe"]

log = logging.getLogger("xdscore.server")


@mypyc_attr(allow_interpreted_subclasses=True)
class Observer:
    """Reports what streams do through ``metrics`` (``None``: none), the
    ``xdscore.server`` log and ``callbacks``."""

    def __init__(self, callbacks: ServerCallbacks, metrics: Metrics | None) -> None:
        self.callbacks = callbacks
        self.metrics = metrics
        # (Only the callbacks a subclass overrides are called: a call per request and per
        # event saved for the others.)
        self._on_request = _overridden(callbacks, "on_request")
        self._on_event = _overridden(callbacks, "on_event")
        self._on_ack = _overridden(callbacks, "on_ack")
        self._on_nack = _overridden(callbacks, "on_nack")
        self._on_response = _overridden(callbacks, "on_response")

    def opened(self, info: StreamInfo) -> None:
        call_back(self.callbacks.on_stream_open, info)

    def request(self, info: StreamInfo, request: Any) -> None:
        """A request arrived, before the session applied it."""
        if self._on_request is not None:
            call_back(self._on_request, info, request)

    def identified(self, info: StreamInfo) -> None:
        """The stream's first request named its node."""
        _log_open(info)

    def facts(self, info: StreamInfo, facts: Sequence[Fact | Event]) -> None:
        """What applying a request left (the machine's events among them)."""
        metrics = self.metrics
        for fact in facts:
            if isinstance(fact, Converged):
                if metrics is not None:
                    metrics.convergence_seconds(fact.type_url).observe(fact.seconds)
            elif isinstance(fact, Event):
                self._event(info, fact)

    def _event(self, info: StreamInfo, event: Event) -> None:
        metrics = self.metrics
        if isinstance(event, ResponseAcked):
            if metrics is not None:
                metrics.acks(event.type_url).inc()
            log.debug(
                "ACK node=%s type=%s version=%s",
                _node_id(info),
                type_label(event.type_url),
                event.version_info,
            )
        elif isinstance(event, ResponseNacked):
            if metrics is not None:
                metrics.nacks(event.type_url).inc()
            log.warning(
                "NACK node=%s type=%s version=%s: %s",
                _node_id(info),
                type_label(event.type_url),
                event.rejected,
                event.error.message.strip(),
            )
        elif isinstance(event, StaleNonceSeen) and metrics is not None:
            metrics.stale_nonces(event.type_url).inc()
        if self._on_event is not None:
            call_back(self._on_event, info, event)
        if isinstance(event, ResponseAcked):
            if self._on_ack is not None:
                call_back(self._on_ack, info, event)
        elif isinstance(event, ResponseNacked) and self._on_nack is not None:
            call_back(self._on_nack, info, event)

    def sent(self, info: StreamInfo, sent: Sent) -> None:
        """A response was written."""
        metrics = self.metrics
        response = sent.response
        if metrics is not None:
            type_url = response.type_url
            metrics.push_seconds(type_url).observe(sent.seconds)
            metrics.responses(type_url).inc()
            metrics.response_bytes(type_url).inc(sent.size)
            beats = response.heartbeats
            if beats:
                metrics.heartbeats(type_url).inc()
                metrics.heartbeat_resources(type_url).inc(beats)
        if self._on_response is not None:
            call_back(self._on_response, info, response)

    def refused(self, reason: str) -> None:
        """A stream or call was refused (``reason``: the metric's label)."""
        if self.metrics is not None:
            self.metrics.refused_streams.labels(reason).inc()


def _overridden(callbacks: ServerCallbacks, name: str) -> Callable[..., None] | None:
    """``callbacks``' method ``name``, or ``None`` where it is :class:`ServerCallbacks`'
    own, which does nothing."""
    method: Callable[..., None] = getattr(callbacks, name)
    if getattr(method, "__func__", None) is getattr(ServerCallbacks, name):
        return None
    return method


def call_back(method: Callable[..., None], *args: Any) -> None:
    """Run a user callback: a protocol error it raises ends the stream; others are logged."""
    try:
        method(*args)
    except ProtocolError:
        raise
    except Exception:
        log.exception("callback %s failed; the stream carries on", method)


def _node_id(info: StreamInfo) -> str:
    return info.node.id if info.node is not None else "?"


def describe(info: StreamInfo) -> str:
    """How a stream connects, for logs: protocol and ADS or the per-type service."""
    mode = "ads" if info.aggregated else type_label(info.type_url or "")
    return f"{info.protocol}/{mode}"


def _log_open(info: StreamInfo) -> None:
    node = info.node
    assert node is not None
    if not log.isEnabledFor(logging.INFO):
        return  # (its arguments cost more than the call)
    log.info(
        "stream %d opened: node=%s cluster=%s peer=%s mode=%s agent=%s/%s features=%s",
        info.id,
        node.id,
        node.cluster,
        info.peer or "?",
        describe(info),
        node.user_agent_name or "?",
        node.user_agent_version or "?",
        _feature_names(info.features),
    )


def _feature_names(features: ClientFeatures | None) -> str:
    """The optional encodings a stream uses, for its log line (``-``: none)."""
    if features is None:
        return "-"
    names = [
        name
        for name, used in (
            ("ttl", features.ttl),
            ("resource_in_sotw", features.resource_in_sotw),
            ("resource_errors", features.resource_errors),
        )
        if used
    ]
    return ",".join(names) or "-"
