"""How a stream's requests are decoded and responses encoded, per protocol."""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

import attrs

from .._errors import GrpcStatus, RemoteProtocolError
from ..protocol._delta_server import DeltaResponse
from ..protocol._sotw_server import SotwResponse
from ..protocol._state import ProtocolName
from ..wire import _codec
from ..wire._records import DeltaDiscoveryRequest, DiscoveryRequest, Node

__all__ = ["DELTA", "SOTW", "ServerCodec", "checked"]

_Request = TypeVar("_Request")
_Response = TypeVar("_Response")


def checked(data: bytes, limit: int, what: str) -> bytes:
    """``data``, unless it is longer than ``limit`` (RESOURCE_EXHAUSTED)."""
    if len(data) > limit:
        raise RemoteProtocolError(
            f"a {what} of {len(data)} bytes exceeds the limit of {limit}",
            GrpcStatus.RESOURCE_EXHAUSTED,
        )
    return data


@attrs.frozen
class ServerCodec(Generic[_Request, _Response]):
    """How one protocol's requests are decoded and responses encoded on the server."""

    protocol: ProtocolName
    decode: Callable[[bytes, Node | None, int, str], _Request]
    """A request, given the stream's node so far (taken as it is if the request repeats
    its bytes), the most names a list may hold and the nonce the stream sent last."""
    encode: Callable[[_Response, str], tuple[bytes, ...]]
    """A response as the buffers its encoding is the concatenation of (shared bodies stay
    shared: see [`ByteStream.send_parts`][xdscore.server.ByteStream.send_parts])."""


def _encode_sotw(response: SotwResponse, control_plane: str) -> tuple[bytes, ...]:
    selection = response.selection
    return _codec.sotw_response_parts(
        version_info=response.version_info,
        nonce=response.nonce,
        body=selection.sotw_wrapped_body if response.wrapped else selection.sotw_body,
        control_plane=control_plane,
        errors=response.errors,
    )


def _encode_delta(response: DeltaResponse, control_plane: str) -> tuple[bytes, ...]:
    return _codec.delta_response_parts(
        type_url=response.type_url,
        nonce=response.nonce,
        system_version_info=response.system_version_info,
        resources=response.resources,
        removed=response.removed,
        control_plane=control_plane,
        ttl=response.ttl,
        heartbeat=response.heartbeat,
        errors=response.errors,
    )


SOTW: ServerCodec[DiscoveryRequest, SotwResponse] = ServerCodec(
    "sotw", _codec.decode_request, _encode_sotw
)
DELTA: ServerCodec[DeltaDiscoveryRequest, DeltaResponse] = ServerCodec(
    "delta", _codec.decode_delta_request, _encode_delta
)
