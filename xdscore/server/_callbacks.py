"""Hooks for users: what happens on each stream, reported synchronously."""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from ..protocol._events import Event, ResponseAcked, ResponseNacked
from ..protocol._features import ClientFeatures
from ..wire._records import DeltaDiscoveryRequest, DiscoveryRequest, Node
from ._authorization import PeerIdentity

if TYPE_CHECKING:
    from ..protocol._delta_server import DeltaResponse
    from ..protocol._sotw_server import SotwResponse

__all__ = ["ServerCallbacks", "StreamInfo"]


@attrs.define(kw_only=True, eq=False)
class StreamInfo:
    """One gRPC stream as the callbacks see it. ``node`` is set by the first request."""

    id: int
    protocol: str
    """``"sotw"`` or ``"delta"``."""
    type_url: str | None
    """The type of a per-type service; ``None`` on ADS."""
    peer: str = ""
    node: Node | None = None
    opened_at: float = 0.0
    """``time.monotonic()`` when the stream opened."""
    connected_at: float = 0.0
    """``time.time()`` when the stream opened."""
    identity: PeerIdentity | None = None
    """The client certificate's identity, when TLS verified one."""
    features: ClientFeatures | None = None
    """The optional encodings the stream uses, from the node (set with ``node``)."""

    @property
    def aggregated(self) -> bool:
        """True on ADS."""
        return self.type_url is None


class ServerCallbacks:
    """Subclass and override what you need; every method is a no-op here.

    Callbacks run synchronously on the event loop, so keep them short. Raising a
    [`RemoteProtocolError`][xdscore.RemoteProtocolError] from one ends that stream with its status
    (for instance to refuse a node in [`on_request`][xdscore.server.ServerCallbacks.on_request]);
    any other exception is logged and the stream carries on.
    """

    def on_stream_open(self, stream: StreamInfo) -> None:
        """A stream opened (its node is not known yet)."""

    def on_stream_close(self, stream: StreamInfo, error: BaseException | None) -> None:
        """A stream ended; ``error`` is why, if it did not end cleanly."""

    def on_request(
        self, stream: StreamInfo, request: DiscoveryRequest | DeltaDiscoveryRequest
    ) -> None:
        """A request arrived, before the state machine applied it.

        On the first request ``stream.node`` is still ``None``: read ``request.node``.
        """

    def on_event(self, stream: StreamInfo, event: Event) -> None:
        """The state machine reported ``event`` (every kind, ACKs and NACKs included)."""

    def on_ack(self, stream: StreamInfo, event: ResponseAcked) -> None:
        """The client applied a response."""

    def on_nack(self, stream: StreamInfo, event: ResponseNacked) -> None:
        """The client rejected a response; ``event.error`` says why."""

    def on_response(self, stream: StreamInfo, response: SotwResponse | DeltaResponse) -> None:
        """A response was written to the stream."""
