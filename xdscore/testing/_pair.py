"""A client machine and a server machine joined by an in-memory network.

The network is one gRPC stream: two FIFO queues, one per direction. Nothing within one
direction is reordered (gRPC never does), but the two directions are independent, so a
test decides when each message arrives and requests and responses cross exactly as they
can on a real connection. `disconnect` drops what is in flight and starts a new
stream: a fresh server machine, and the client's reconnect requests. Every message goes
through the real codec (encoded, then decoded) unless ``wire=False``.

Like h11's ``ConnectionPair``, the pair checks that what arrives is what was sent: each
request as it comes off the wire equals (as a record) the one the client machine produced,
and each response carries exactly the type URL, version, nonce, resources (type URL, name,
version and body bytes, in order) and removals the server machine produced. A mismatch
raises `AssertionError` saying which field differs. The check is made as each
message comes off the wire, before it is queued for delivery, so it also holds for a test
that takes messages from ``requests`` or ``responses`` itself.

``features`` and ``deny`` are the client features and the resource policy every server
machine of the pair is given (``use_features``, ``use_authorization``), on each stream.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable, Collection
from typing import Any, Generic, TypeVar

import attrs

from ..protocol._delta_client import DeltaClient
from ..protocol._delta_server import DeltaResponse, DeltaServer
from ..protocol._events import Event
from ..protocol._features import NO_FEATURES, ClientFeatures
from ..protocol._machine import Deny
from ..protocol._sotw_client import SotwClient, Validator
from ..protocol._sotw_server import SotwResponse, SotwServer
from ..protocol._view import ResourceView
from ..server._codecs import DELTA, SOTW
from ..wire import _client_codec as client_codec
from ..wire import _codec as codec
from ..wire._records import (
    DeltaDiscoveryRequest,
    DeltaDiscoveryResponse,
    DiscoveryRequest,
    DiscoveryResponse,
    Node,
)
from ..wire._resource import Resource

__all__ = ["DeltaPair", "SotwPair"]

_Client = TypeVar("_Client", SotwClient, DeltaClient)
_Server = TypeVar("_Server", SotwServer, DeltaServer)
_Request = TypeVar("_Request", DiscoveryRequest, DeltaDiscoveryRequest)
_Response = TypeVar("_Response", DiscoveryResponse, DeltaDiscoveryResponse)


class _Pair(Generic[_Client, _Server, _Request, _Response]):
    """The shared mechanics of [`SotwPair`][xdscore.testing.SotwPair] and
    [`DeltaPair`][xdscore.testing.DeltaPair]."""

    client: _Client
    server: _Server
    _client_class: type[_Client]
    _server_class: type[_Server]

    def __init__(
        self,
        view: Callable[[], ResourceView | None],
        *,
        node: Node,
        validate: Validator | None = None,
        ordered: bool = True,
        wire: bool = True,
        features: ClientFeatures = NO_FEATURES,
        deny: Deny | None = None,
    ) -> None:
        self._view = view
        self._polled: object = None
        """The view the server last polled (the server is told when it polls the same)."""
        self._wire = wire
        self._ordered = ordered
        self._features = features
        self._deny = deny
        self.client = self._client_class(node=node, validate=validate)
        self._nonces = itertools.count(1)
        self.streams = 1
        self.requests: deque[_Request] = deque()
        self.responses: deque[_Response] = deque()
        self.events: list[Event] = []
        self.sent: list[_Response] = []
        """Every response the server sent, on every stream, in order."""
        self.server = self._new_server()

    def _new_server(self) -> _Server:
        server = self._server_class(nonce_source=self._nonce, ordered=self._ordered)
        server.use_features(self._features)
        server.use_authorization(self._deny)
        return server

    def _nonce(self) -> str:
        return f"{self.streams}.{next(self._nonces)}"

    def _record(self, response: SotwResponse | DeltaResponse) -> _Response:
        """``response`` as the client record it stands for, without the wire."""
        raise NotImplementedError

    def _to_client(self, response: SotwResponse | DeltaResponse) -> _Response:
        raise NotImplementedError

    def _through_wire(self, request: _Request) -> _Request:
        raise NotImplementedError

    def _arrived(self, response: SotwResponse | DeltaResponse) -> _Response:
        """``response`` as the client reads it off the wire, checked against what was sent."""
        arrived = self._to_client(response)
        _same(type(self).__name__, "response", _fields(self._record(response)), _fields(arrived))
        return arrived

    def send(self, request: _Request) -> None:
        """Put a client request on the wire (it arrives at `deliver_request`)."""
        arrived = self._through_wire(request) if self._wire else request
        _same(type(self).__name__, "request", _fields(request), _fields(arrived))
        self.requests.append(arrived)

    def deliver_request(self) -> list[Event]:
        """The server receives the oldest request in flight; its events are returned."""
        events = self.server.receive(self.requests.popleft())  # type: ignore[arg-type]
        self.events.extend(events)
        return events

    def poll(self) -> list[_Response]:
        """The server sends what is due against the current view."""
        view = self._view()
        same, self._polled = view is not None and view is self._polled, view
        out = [self._arrived(r) for r in self.server.poll(view, same_view=same)]
        self.responses.extend(out)
        self.sent.extend(out)
        return out

    def heartbeat(self, quiet: Collection[tuple[str, str]] = ()) -> list[_Response]:
        """The server sends the heartbeats due against the current view (as its runtime
        would when the time comes; see ``heartbeat`` on the server machines)."""
        out = [self._arrived(r) for r in self.server.heartbeat(self._view(), quiet=quiet)]
        self.responses.extend(out)
        self.sent.extend(out)
        return out

    def deliver_response(self) -> _Request:
        """The client receives the oldest response in flight; its ACK/NACK goes on the wire."""
        request = self.client.receive(self.responses.popleft())  # type: ignore[arg-type]
        self.send(request)  # type: ignore[arg-type]
        return request  # type: ignore[return-value]

    def disconnect(self) -> None:
        """Drop everything in flight; a new stream starts with the client's reconnect requests."""
        self.requests.clear()
        self.responses.clear()
        self.streams += 1
        self.server = self._new_server()
        for request in self.client.reconnect():
            self.send(request)  # type: ignore[arg-type]

    def settle(self, max_steps: int = 10_000) -> int:
        """Deliver and poll until nothing is in flight and nothing is due; return the steps."""
        for step in range(max_steps):
            if self.requests:
                self.deliver_request()
            elif self.responses:
                self.deliver_response()
            elif not self.poll():
                return step
        raise AssertionError(f"the pair did not settle within {max_steps} steps")


class SotwPair(_Pair[SotwClient, SotwServer, DiscoveryRequest, DiscoveryResponse]):
    """A SotW client machine and server machine over an in-memory ADS stream."""

    _client_class = SotwClient
    _server_class = SotwServer

    def _through_wire(self, request: DiscoveryRequest) -> DiscoveryRequest:
        return codec.decode_request(client_codec.encode_request(request))

    def _to_client(self, response: SotwResponse | DeltaResponse) -> DiscoveryResponse:
        assert isinstance(response, SotwResponse)
        if self._wire:
            return client_codec.decode_response(b"".join(SOTW.encode(response, "")))
        return self._record(response)

    def _record(self, response: SotwResponse | DeltaResponse) -> DiscoveryResponse:
        assert isinstance(response, SotwResponse)
        return DiscoveryResponse(
            type_url=response.type_url,
            version_info=response.version_info,
            nonce=response.nonce,
            resources=tuple(response.selection.resources.values()),
            resource_errors=response.errors,
        )


class DeltaPair(_Pair[DeltaClient, DeltaServer, DeltaDiscoveryRequest, DeltaDiscoveryResponse]):
    """A Delta client machine and server machine over an in-memory ADS stream."""

    _client_class = DeltaClient
    _server_class = DeltaServer

    def _through_wire(self, request: DeltaDiscoveryRequest) -> DeltaDiscoveryRequest:
        return codec.decode_delta_request(client_codec.encode_delta_request(request))

    def _to_client(self, response: SotwResponse | DeltaResponse) -> DeltaDiscoveryResponse:
        assert isinstance(response, DeltaResponse)
        if self._wire:
            return client_codec.decode_delta_response(b"".join(DELTA.encode(response, "")))
        return self._record(response)

    def _record(self, response: SotwResponse | DeltaResponse) -> DeltaDiscoveryResponse:
        assert isinstance(response, DeltaResponse)
        resources = response.resources
        if response.heartbeat:  # names, versions and TTLs: what a heartbeat carries
            resources = tuple(
                Resource(
                    type_url=r.type_url,
                    name=r.name,
                    body=b"",
                    version=r.version,
                    ttl=r.ttl,
                    name_only=True,
                )
                for r in resources
            )
        return DeltaDiscoveryResponse(
            type_url=response.type_url,
            system_version_info=response.system_version_info,
            nonce=response.nonce,
            resources=resources,
            removed_resources=response.removed,
            resource_errors=response.errors,
        )


def _fields(
    message: DiscoveryRequest | DeltaDiscoveryRequest | DiscoveryResponse | DeltaDiscoveryResponse,
) -> dict[str, Any]:
    """What must survive the wire: every field of a request; every field of a response but
    the control plane's identifier (the pair sends none), its resources by type URL, name,
    version and body."""
    fields = attrs.asdict(message, recurse=False)
    if isinstance(message, DiscoveryResponse | DeltaDiscoveryResponse):
        del fields["control_plane"]
        fields["resources"] = [_content(resource) for resource in message.resources]
    return fields


def _content(resource: Resource) -> tuple[str, str, str, bytes]:
    return (resource.type_url, resource.name, resource.version, resource.body)


def _same(pair: str, what: str, sent: dict[str, Any], arrived: dict[str, Any]) -> None:
    """Raise `AssertionError` naming every field in which ``arrived`` differs."""
    if sent == arrived:
        return
    differences = [
        f"  {name}: sent {sent.get(name)!r:.300}, arrived {arrived.get(name)!r:.300}"
        for name in sorted(sent.keys() | arrived.keys())
        if sent.get(name) != arrived.get(name)
    ]
    raise AssertionError(
        f"{pair}: a {what} arrived other than it was sent "
        f"({sent.get('type_url')!r}):\n" + "\n".join(differences)
    )
