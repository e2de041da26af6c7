"""The server runtime: connects each stream's state machine to a cache, on anyio.

Each stream runs two tasks under one task group: one reads requests and feeds them to the
machine, the other sends whatever the machine says is due whenever a request arrived or
the cache changed. Both wake-ups are level-triggered flags, so a client that reads slowly
gets the latest state when it is ready, never a backlog. The runtime holds no protocol
rule; it only moves requests in and responses out.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any, Protocol, TypeVar

import anyio

from .._errors import GrpcStatus, ProtocolError, RemoteProtocolError
from ..cache._interface import Cache, Cancel
from ..protocol._delta_server import DeltaResponse, DeltaServer
from ..protocol._events import Event, NodeIdentified, ResponseAcked, ResponseNacked
from ..protocol._limits import StreamLimits
from ..protocol._sotw_server import SotwResponse, SotwServer
from ..protocol._view import ResourceView
from ..wire._codec import encode_delta_response, encode_sotw_response
from ._callbacks import ServerCallbacks, StreamInfo
from ._wakeup import Wakeup

__all__ = ["ActiveStream", "ClientGone", "XdsServer"]

log = logging.getLogger("xdscore.server")

_Request = TypeVar("_Request", contravariant=True)
_Response = TypeVar("_Response", covariant=True)


class ClientGone(Exception):
    """Raised by a transport's send or receive when the client went away (reset its stream
    or dropped its connection): the stream ends cleanly, it is not a failure."""


Receive = Callable[[], Awaitable[Any]]
"""Returns the next decoded request, or ``None`` when the client closed its side."""
Send = Callable[[bytes], Awaitable[None]]
"""Writes one encoded response."""


class _Machine(Protocol[_Request, _Response]):
    def receive(self, request: _Request) -> list[Event]: ...

    def poll(self, view: ResourceView | None) -> Sequence[_Response]: ...


class ActiveStream:
    """A stream being served: its :class:`StreamInfo` and its state machine."""

    __slots__ = ("info", "machine", "scope")

    def __init__(self, info: StreamInfo, machine: Any, scope: anyio.CancelScope) -> None:
        self.info = info
        self.machine = machine
        self.scope = scope


class XdsServer:
    """Serves xDS streams from ``cache``; transports call ``run_sotw_stream``/``run_delta_stream``.

    ``control_plane_id`` is sent in every response's ``control_plane.identifier``.
    ``max_streams`` bounds concurrent streams; one more is refused with RESOURCE_EXHAUSTED.
    ``ordered_ads`` applies make-before-break ordering on aggregated streams (see
    :mod:`xdscore._ordering`); switch it off only to see what it prevents.
    """

    def __init__(
        self,
        cache: Cache,
        *,
        callbacks: ServerCallbacks | None = None,
        limits: StreamLimits | None = None,
        control_plane_id: str = "",
        max_streams: int = 100_000,
        ordered_ads: bool = True,
    ) -> None:
        self.cache = cache
        self.callbacks = callbacks or ServerCallbacks()
        self.limits = limits or StreamLimits()
        self.control_plane_id = control_plane_id
        self.max_streams = max_streams
        self.ordered_ads = ordered_ads
        self._ids = itertools.count(1)
        self._streams: dict[int, ActiveStream] = {}
        self._closed = False

    def streams(self) -> Iterator[ActiveStream]:
        """The streams being served now."""
        return iter(list(self._streams.values()))

    def close(self) -> None:
        """End every stream and refuse new ones."""
        self._closed = True
        for stream in list(self._streams.values()):
            stream.scope.cancel()

    async def run_sotw_stream(
        self, receive: Receive, send: Send, *, type_url: str | None = None, peer: str = ""
    ) -> None:
        """Serve one SotW stream until the client closes it; raises :class:`ProtocolError`."""
        await self._run(SotwServer, "sotw", self._encode_sotw, receive, send, type_url, peer)

    async def run_delta_stream(
        self, receive: Receive, send: Send, *, type_url: str | None = None, peer: str = ""
    ) -> None:
        """Serve one Delta stream until the client closes it; raises :class:`ProtocolError`."""
        await self._run(DeltaServer, "delta", self._encode_delta, receive, send, type_url, peer)

    async def _run(
        self,
        machine_class: type[SotwServer] | type[DeltaServer],
        protocol: str,
        encode: Callable[[Any], bytes],
        receive: Receive,
        send: Send,
        type_url: str | None,
        peer: str,
    ) -> None:
        stream_id = next(self._ids)
        counter = itertools.count(1)
        machine = machine_class(
            nonce_source=lambda: f"{stream_id}.{next(counter)}",
            type_url=type_url,
            limits=self.limits,
            ordered=self.ordered_ads,
        )
        info = StreamInfo(
            id=stream_id,
            protocol=protocol,
            type_url=type_url,
            peer=peer,
            opened_at=time.monotonic(),
        )
        await self._drive(info, machine, encode, receive, send)

    def _encode_delta(self, response: DeltaResponse) -> bytes:
        return encode_delta_response(
            type_url=response.type_url,
            nonce=response.nonce,
            system_version_info=response.system_version_info,
            resources=response.resources,
            removed=response.removed,
            control_plane=self.control_plane_id,
        )

    def _encode_sotw(self, response: SotwResponse) -> bytes:
        return encode_sotw_response(
            version_info=response.version_info,
            nonce=response.nonce,
            body=response.selection.sotw_body,
            control_plane=self.control_plane_id,
        )

    async def _drive(
        self,
        info: StreamInfo,
        machine: _Machine[Any, Any],
        encode: Callable[[Any], bytes],
        receive: Receive,
        send: Send,
    ) -> None:
        if self._closed:
            raise RemoteProtocolError("the server is shutting down", GrpcStatus.UNAVAILABLE)
        if len(self._streams) >= self.max_streams:
            raise RemoteProtocolError(
                f"the server is at its limit of {self.max_streams} streams",
                GrpcStatus.RESOURCE_EXHAUSTED,
            )
        wake = Wakeup()
        watch: list[Cancel] = []
        failure: list[BaseException] = []
        scope = anyio.CancelScope()
        self._streams[info.id] = ActiveStream(info, machine, scope)

        async def pump_requests(group: anyio.abc.TaskGroup) -> None:
            try:
                while True:
                    request = await receive()
                    if request is None:
                        break
                    self._callback(self.callbacks.on_request, info, request)
                    for event in machine.receive(request):
                        if isinstance(event, NodeIdentified):
                            info.node = event.node
                            watch.append(self.cache.watch(event.node, wake.set))
                        self._dispatch(info, event)
                    wake.set()
            except ClientGone:
                pass
            except Exception as exc:
                failure.append(exc)
            group.cancel_scope.cancel()

        async def push_responses(group: anyio.abc.TaskGroup) -> None:
            try:
                while True:
                    await wake.wait()
                    node = info.node
                    view = self.cache.view(node) if node is not None else None
                    for response in machine.poll(view):
                        await send(encode(response))
                        self._callback(self.callbacks.on_response, info, response)
            except ClientGone:
                pass
            except Exception as exc:
                failure.append(exc)
            group.cancel_scope.cancel()

        try:
            self._callback(self.callbacks.on_stream_open, info)
            with scope:
                async with anyio.create_task_group() as group:
                    group.start_soon(pump_requests, group)
                    group.start_soon(push_responses, group)
        except ProtocolError as exc:
            failure.append(exc)
        finally:
            for cancel in watch:
                cancel()
            self._streams.pop(info.id, None)
            error = failure[0] if failure else None
            self._callback(self.callbacks.on_stream_close, info, error, swallow=True)
        if failure:
            raise failure[0]

    def _dispatch(self, info: StreamInfo, event: Event) -> None:
        self._callback(self.callbacks.on_event, info, event)
        if isinstance(event, ResponseAcked):
            self._callback(self.callbacks.on_ack, info, event)
        elif isinstance(event, ResponseNacked):
            self._callback(self.callbacks.on_nack, info, event)

    @staticmethod
    def _callback(method: Callable[..., None], *args: Any, swallow: bool = False) -> None:
        try:
            method(*args)
        except ProtocolError:
            if swallow:
                log.exception("callback %s raised while the stream was closing", method)
                return
            raise
        except Exception:
            log.exception("callback %s failed; the stream carries on", method)
