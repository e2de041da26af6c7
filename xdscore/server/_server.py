"""The server runtime: a registry of the streams being served, each run by the driver.

A transport calls :meth:`XdsServer.run_stream` with one gRPC stream as bytes; the server
refuses it if it is closing or full, creates the stream's state machine and its
:class:`StreamInfo`, and hands both to the :class:`~xdscore.server.ServerDriver`, which
moves requests in and responses out until the stream ends. The runtime holds no protocol
rule.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

import anyio

from .._errors import GrpcStatus, RemoteProtocolError
from ..cache._interface import Cache
from ..protocol._delta_server import DeltaServer
from ..protocol._limits import StreamLimits
from ..protocol._sotw_server import SotwServer
from ..protocol._state import ProtocolName
from ._callbacks import ServerCallbacks, StreamInfo
from ._driver import DELTA, SOTW, ByteStream, ServerDriver, call_back

__all__ = ["ActiveStream", "XdsServer"]

log = logging.getLogger("xdscore.server")


class ActiveStream:
    """A stream being served: its :class:`StreamInfo` and its state machine."""

    __slots__ = ("info", "machine", "scope")

    def __init__(
        self, info: StreamInfo, machine: SotwServer | DeltaServer, scope: anyio.CancelScope
    ) -> None:
        self.info = info
        self.machine = machine
        self.scope = scope


class XdsServer:
    """Serves xDS streams from ``cache``; transports call :meth:`run_stream`.

    ``control_plane_id`` is sent in every response's ``control_plane.identifier``.
    ``max_streams`` bounds concurrent streams; one more is refused with RESOURCE_EXHAUSTED.
    ``ordered_ads`` applies make-before-break ordering on aggregated streams (see
    :mod:`xdscore.protocol._ordering`); switch it off only to see what it prevents.
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

    async def run_stream(
        self,
        stream: ByteStream,
        *,
        protocol: ProtocolName,
        type_url: str | None = None,
        peer: str = "",
    ) -> None:
        """Serve one stream until the client closes or leaves it.

        ``type_url`` fixes the type on a per-type service (``None``: ADS). Raises
        :class:`~xdscore.ProtocolError` with the status the stream should end with: the
        client broke the protocol, or the server refused the stream (UNAVAILABLE while
        closing, RESOURCE_EXHAUSTED when full).
        """
        if self._closed:
            raise RemoteProtocolError("the server is shutting down", GrpcStatus.UNAVAILABLE)
        if len(self._streams) >= self.max_streams:
            raise RemoteProtocolError(
                f"the server is at its limit of {self.max_streams} streams",
                GrpcStatus.RESOURCE_EXHAUSTED,
            )
        stream_id = next(self._ids)
        counter = itertools.count(1)
        info = StreamInfo(
            id=stream_id,
            protocol=protocol,
            type_url=type_url,
            peer=peer,
            opened_at=time.monotonic(),
        )
        machine, driver = self._driver(
            protocol, stream, info, lambda: f"{stream_id}.{next(counter)}", type_url
        )
        scope = anyio.CancelScope()
        self._streams[stream_id] = ActiveStream(info, machine, scope)
        error: Exception | None = None
        try:
            call_back(self.callbacks.on_stream_open, info)
            with scope:
                await driver.run()
        except Exception as exc:
            error = exc
            raise
        finally:
            self._streams.pop(stream_id, None)
            try:
                self.callbacks.on_stream_close(info, error)
            except Exception:
                log.exception("callback on_stream_close failed while the stream was closing")

    def _driver(
        self,
        protocol: ProtocolName,
        stream: ByteStream,
        info: StreamInfo,
        nonce_source: Callable[[], str],
        type_url: str | None,
    ) -> tuple[SotwServer | DeltaServer, ServerDriver[Any, Any]]:
        if protocol == "sotw":
            sotw = SotwServer(
                nonce_source=nonce_source,
                type_url=type_url,
                limits=self.limits,
                ordered=self.ordered_ads,
            )
            return sotw, ServerDriver(sotw, SOTW, stream, **self._driver_options(info))
        delta = DeltaServer(
            nonce_source=nonce_source,
            type_url=type_url,
            limits=self.limits,
            ordered=self.ordered_ads,
        )
        return delta, ServerDriver(delta, DELTA, stream, **self._driver_options(info))

    def _driver_options(self, info: StreamInfo) -> dict[str, Any]:
        return {
            "cache": self.cache,
            "info": info,
            "callbacks": self.callbacks,
            "max_request_bytes": self.limits.max_request_bytes,
            "control_plane_id": self.control_plane_id,
        }
