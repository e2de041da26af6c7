"""What every stream of one server runs with, gathered once: the driver's one argument."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping

import attrs

from ..cache._interface import Cache
from ._admission import PushSlots
from ._authorization import Authorizer, ResourceAuthorizer
from ._catch_up import CatchUp
from ._observer import Observer
from ._pacer import Pacer

__all__ = ["StreamSettings"]


@attrs.frozen(kw_only=True)
class StreamSettings:
    """The server's settings and services as its streams' drivers use them (the server
    builds one; see :class:`~xdscore.XdsServer` for what each means)."""

    cache: Cache
    observer: Observer
    slots: PushSlots
    pacer: Pacer | None = None
    max_request_bytes: int
    max_names: int
    """The most names one request's list may hold (refused before it is decoded)."""
    control_plane_id: str = ""
    first_request_timeout: float = 0.0
    assumed_features: Mapping[str, Collection[str]]
    heartbeat_fraction: float
    quiet_heartbeats: Collection[tuple[str, str]] = ()
    """The live set of ``(type_url, name)`` whose heartbeats are stopped."""
    authorize: Authorizer | None = None
    authorize_resource: ResourceAuthorizer | None = None
    catch_up: CatchUp | None = None
    catch_up_timeout: float = 0.0
    admit: Callable[[], None] | None = None
    """Called as the first request's bytes arrive: may refuse the stream (admission)."""
    synced: Callable[[], None] | None = None
    """Called once a stream's client has answered a response of every type it asked for."""
