"""Request checks shared by the SotW and Delta machines: identity, type URL and bounds."""

from __future__ import annotations

from collections.abc import Collection

from ._errors import GrpcStatus, RemoteProtocolError
from ._limits import StreamLimits
from ._records import Node
from ._typeurls import TypeInfo, type_info

__all__ = [
    "check_names",
    "check_node",
    "check_subscribed",
    "check_type_count",
    "resolve_type",
]


def check_node(known: Node | None, presented: Node | None) -> Node:
    """The stream's node after a request presenting ``presented``.

    The first request must carry a node; later ones may omit it, and if they repeat it, it
    must be identical (a client may not change identity mid-stream).
    """
    if known is None:
        if presented is None:
            raise RemoteProtocolError("the first request on a stream must carry a node")
        return presented
    if presented is not None and presented.raw != known.raw:
        raise RemoteProtocolError(
            f"node changed mid-stream: first request named id={known.id!r} "
            f"cluster={known.cluster!r}, this one id={presented.id!r} "
            f"cluster={presented.cluster!r}"
        )
    return known


def resolve_type(fixed: str | None, requested: str, *, delta: bool) -> TypeInfo:
    """The type a request is about: ``fixed`` on a per-type service, else its ``type_url``."""
    if fixed is not None:
        if requested and requested != fixed:
            raise RemoteProtocolError(
                f"request for {requested!r} on the discovery service for {fixed!r}"
            )
        type_url = fixed
    elif not requested:
        raise RemoteProtocolError("type_url is required on the aggregated (ADS) stream")
    else:
        type_url = requested
    info = type_info(type_url)
    if info.delta_only and not delta:
        raise RemoteProtocolError(
            f"{info.short_name} ({type_url}) is served only over the incremental (Delta) protocol"
        )
    return info


def check_names(names: Collection[str], limits: StreamLimits, what: str) -> None:
    """Reject a request whose name list exceeds the stream limits."""
    if len(names) > limits.max_names_per_request:
        raise RemoteProtocolError(
            f"{what} lists {len(names)} names; the limit is {limits.max_names_per_request}",
            GrpcStatus.RESOURCE_EXHAUSTED,
        )
    longest = max(map(len, names), default=0)
    if longest > limits.max_name_length:
        raise RemoteProtocolError(
            f"a name in {what} is {longest} characters long; the limit is {limits.max_name_length}",
            GrpcStatus.RESOURCE_EXHAUSTED,
        )


def check_type_count(known: int, limits: StreamLimits) -> None:
    """Reject subscribing to one more type once ``limits.max_types`` are in use."""
    if known >= limits.max_types:
        raise RemoteProtocolError(
            f"a stream may subscribe to at most {limits.max_types} types",
            GrpcStatus.RESOURCE_EXHAUSTED,
        )


def check_subscribed(count: int, limits: StreamLimits) -> None:
    """Reject a subscription holding more than ``limits.max_subscribed_names`` names."""
    if count > limits.max_subscribed_names:
        raise RemoteProtocolError(
            f"subscription of {count} names exceeds the limit of {limits.max_subscribed_names}",
            GrpcStatus.RESOURCE_EXHAUSTED,
        )
