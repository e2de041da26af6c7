"""Identity checks shared by the SotW and Delta machines: the node and the type URL."""

from __future__ import annotations

from .._errors import RemoteProtocolError
from ..wire._node import same_node
from ..wire._records import Node
from ..wire._typeurls import TypeInfo, type_info

__all__ = ["check_node", "resolve_type"]


def check_node(known: Node | None, presented: Node | None) -> Node:
    """The stream's node after a request presenting ``presented``.

    The first request must carry a node; later ones may omit it, and if they repeat it, it
    must be identical (a client may not change identity mid-stream).
    """
    if known is None:
        if presented is None:
            raise RemoteProtocolError("the first request on a stream must carry a node")
        return presented
    if presented is not None and presented is not known and not same_node(presented, known):
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
