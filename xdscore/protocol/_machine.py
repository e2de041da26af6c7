"""What the SotW and Delta server machines share: identity, life cycle, the per-type table."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Generic, Protocol, TypeVar

from .._errors import ProtocolError
from ..wire._records import Node
from ..wire._typeurls import type_info
from ._events import Event
from ._limits import StreamLimits
from ._state import StreamState, ensure_open
from ._subscription import Subscription
from ._view import ResourceView

__all__ = ["ServerMachine"]


class _TypeState(Protocol):
    @property
    def subscription(self) -> Subscription: ...


_Status = TypeVar("_Status", bound=_TypeState)
_Request = TypeVar("_Request")
_Response = TypeVar("_Response")


class ServerMachine(Generic[_Status, _Request, _Response]):
    """One gRPC stream's server side; subclasses say how a request applies and what is due.

    ``type_url`` fixes the type on per-type services (``None``: ADS). ``ordered`` applies
    make-before-break ordering, which only an aggregated stream can do.
    """

    def __init__(
        self,
        *,
        nonce_source: Callable[[], str],
        type_url: str | None = None,
        limits: StreamLimits | None = None,
        ordered: bool = True,
    ) -> None:
        self._nonce_source = nonce_source
        self._fixed_type = type_url
        self._limits = limits or StreamLimits()
        self._ordered = ordered and type_url is None
        self._types: dict[str, _Status] = {}
        self.node: Node | None = None
        self.state = StreamState.OPEN

    @property
    def aggregated(self) -> bool:
        """True on ADS, where one stream carries every type."""
        return self._fixed_type is None

    def status(self) -> Mapping[str, _Status]:
        """A read-only copy of the per-type state, by type URL."""
        return dict(self._types)

    def subscription(self, type_url: str) -> Subscription | None:
        """The client's subscription for ``type_url``, if it asked for the type."""
        status = self._types.get(type_url)
        return status.subscription if status is not None else None

    def receive(self, request: _Request) -> list[Event]:
        """Apply one request; return what it meant. Raises :class:`RemoteProtocolError`.

        After a protocol error the machine is in ERROR for good: the stream must end.
        """
        ensure_open(self.state)
        try:
            return self._receive(request)
        except ProtocolError:
            self.state = StreamState.ERROR
            raise

    def poll(self, view: ResourceView | None) -> list[_Response]:
        """The responses due now against ``view`` (``None``: no data for this client yet),
        in make-before-break order of their types."""
        ensure_open(self.state)
        if view is None:
            return []
        out: list[_Response] = []
        for type_url in sorted(self._types, key=lambda url: (type_info(url).rank, url)):
            response = self._respond(type_url, view)
            if response is not None:
                out.append(response)
        return out

    def _receive(self, request: _Request) -> list[Event]:
        raise NotImplementedError

    def _respond(self, type_url: str, view: ResourceView) -> _Response | None:
        raise NotImplementedError
