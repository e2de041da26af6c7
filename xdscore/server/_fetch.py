"""Unary ``Fetch<Type>``: one ``DiscoveryRequest`` in, one ``DiscoveryResponse`` out.

Every per-type discovery service that defines a ``Fetch`` method (CDS, EDS, LDS, RDS, SRDS,
SDS, RTDS, ECDS; VHDS and LEDS have none) is answered from the same cache view, with the
same rules, as a State-of-the-World stream's first request: a fresh per-type
:class:`~xdscore.protocol.SotwServer` applies the request (a node is required, the type is
the service's, the name limits, empty ``resource_names`` is the wildcard only for LDS, CDS
and SRDS) and its first response is the answer, framed as the stream would frame it, with
the selection's content version as ``version_info`` and a nonce of the server's scheme.

Outcomes other than an answer, each a :class:`~xdscore.RemoteProtocolError`:

* the cache serves this node nothing of the type (no view, or a view that is not
  authoritative for it): NOT_FOUND, since a unary call cannot wait as a stream does;
* ``version_info`` equal to the version the answer would carry: FAILED_PRECONDITION,
  "not modified". This is the REST protocol's ``304 Not Modified`` (Envoy's REST fetcher
  keeps what it has; go-control-plane's ``Fetch`` returns its ``SkipFetchError``): the
  client's condition "only if changed" was false. Versions are content hashes of what the
  names select, so an equal version means the same resources;
* the authorization hook denies the node: PERMISSION_DENIED, counted as a stream refused
  would be (``xdscore_refused_streams_total{reason="permission_denied"}``); the server is
  stopping:
  UNAVAILABLE; a request that does not parse or breaks a rule of the first request:
  INVALID_ARGUMENT; one over a limit: RESOURCE_EXHAUSTED.

A fetch is not a stream: it is not in the registry the status pages and CSDS read, and
``on_stream_open``/``on_stream_close`` are not called; ``on_request`` (which may refuse it)
and ``on_response`` are, with a :class:`~xdscore.StreamInfo` of its own.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

import attrs

from .._errors import GrpcStatus, ProtocolError, RemoteProtocolError
from ..protocol._features import ClientFeatures
from ..protocol._sotw_server import SotwServer
from ..wire._codec import decode_request
from ..wire._typeurls import type_info
from ._authorization import PeerIdentity
from ._callbacks import StreamInfo
from ._catch_up import presents_unknown
from ._codecs import SOTW, checked
from ._metrics import type_label
from ._observer import call_back, describe
from ._session import resource_policy

if TYPE_CHECKING:
    from ._server import XdsServer

__all__ = ["fetch"]

log = logging.getLogger("xdscore.server")

NOT_MODIFIED = "not modified"
"""How the FAILED_PRECONDITION of a fetch whose ``version_info`` is current begins."""


async def fetch(
    server: XdsServer,
    data: bytes,
    *,
    fetch_id: int,
    type_url: str,
    peer: str = "",
    identity: PeerIdentity | None = None,
) -> bytes:
    """The encoded ``DiscoveryResponse`` answering the encoded request ``data``.

    Raises :class:`~xdscore.ProtocolError` with the status the call should end with (see
    the module docstring).
    """
    info = StreamInfo(
        id=fetch_id,
        protocol="sotw",
        type_url=type_url,
        peer=peer,
        opened_at=time.monotonic(),
        connected_at=time.time(),
        identity=identity,
    )
    code = "internal"
    outcome = ""
    try:
        answer, outcome = await _answer(server, data, info)
    except ProtocolError as exc:
        code = exc.status.name.lower()
        outcome = f"{exc.status.name}: {exc.message}"
        raise
    else:
        code = "ok"
        return answer
    finally:
        if server.metrics is not None:
            server.metrics.fetches.labels(type_label(type_url), code).inc()
        log.log(
            logging.DEBUG if code == "failed_precondition" else logging.INFO,
            "fetch %d: node=%s peer=%s mode=%s after %.3f s: %s",
            info.id,
            info.node.id if info.node is not None else "?",
            peer or "?",
            describe(info),
            time.monotonic() - info.opened_at,
            outcome or "failed",
        )


async def _answer(server: XdsServer, data: bytes, info: StreamInfo) -> tuple[bytes, str]:
    """The encoded answer and what to log of it."""
    if server.closed:
        raise RemoteProtocolError("the server is shutting down", GrpcStatus.UNAVAILABLE)
    type_url = info.type_url
    assert type_url is not None
    request = decode_request(checked(data, server.limits.max_request_bytes, "request"))
    machine = SotwServer(
        nonce_source=lambda: f"{server.replica_id}-{info.id}.1",
        type_url=type_url,
        limits=server.limits,
    )
    # As a stream's first request, but one that holds nothing: the version is compared
    # below, and a nonce or error detail mean nothing without a response to answer.
    machine.receive(attrs.evolve(request, version_info="", response_nonce="", error_detail=None))
    node = machine.node
    assert node is not None
    info.node = node
    info.features = ClientFeatures.of(node, server.assumed_features)
    machine.use_features(info.features)
    machine.use_authorization(resource_policy(server.authorize_resource, info))
    if server.authorize is not None:
        reason = server.authorize(info, node)
        if reason is not None:
            server.observer.refused("permission_denied")
            raise RemoteProtocolError(reason, GrpcStatus.PERMISSION_DENIED)
    call_back(server.callbacks.on_request, info, request)
    view = server.cache.view(node)
    if server.catch_up is not None and presents_unknown(
        attrs.evolve(request, type_url=type_url, response_nonce=""), view
    ):
        await server.catch_up.caught_up(server.catch_up_timeout)
        view = server.cache.view(node)
    responses = machine.poll(view)
    if not responses:
        short = type_info(type_url).short_name
        raise RemoteProtocolError(
            f"this server serves no {short} ({type_url}) to node {node.id!r}",
            GrpcStatus.NOT_FOUND,
        )
    (response,) = responses
    if request.version_info and request.version_info == response.version_info:
        raise RemoteProtocolError(
            f"{NOT_MODIFIED}: version {response.version_info} is current",
            GrpcStatus.FAILED_PRECONDITION,
        )
    answer = b"".join(SOTW.encode(response, server.control_plane_id))
    metrics = server.metrics
    if metrics is not None:
        metrics.responses(type_url).inc()
        metrics.response_bytes(type_url).inc(len(answer))
    call_back(server.callbacks.on_response, info, response)
    count = len(response.selection)
    return answer, f"version={response.version_info} ({count} resources)"
