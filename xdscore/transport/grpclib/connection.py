"""grpclib's server connection, held to what HTTP/2 asks and to the abuse bounds.

grpclib feeds each connection's bytes to h2 and hands the resulting events to an
``EventsProcessor``. :class:`GuardedH2Protocol` is grpclib's connection with a processor
of ours in front of grpclib's that:

* counts, per connection, the frames :class:`~xdscore.transport.ConnectionLimits` bounds
  (rapid resets, PING and SETTINGS floods; see :mod:`xdscore.transport._limits`), and cuts
  the connection past them;
* checks each request's headers as xdscore's own server does
  (:func:`xdscore.transport.h2.headers.parse_request`, RFC 9113 sections 8.2 and 8.3)
  before grpclib sees them: grpclib has h2 skip that check, then reads ``:method`` as if it
  were always there (a request without it logged a ``KeyError`` traceback and was never
  answered) and serves the rest. A malformed request's stream is reset with
  PROTOCOL_ERROR, as the RFC asks, and counts as a rapid reset;
* ignores frames of unknown types, as the RFC asks (sections 4.1 and 5.5): h2 reports them
  as an event grpclib has no handler for, and grpclib raised, which killed the connection
  with an ERROR traceback;
* ends with GOAWAY PROTOCOL_ERROR a connection whose header field h2 cannot decode as ASCII
  (grpclib has it decode them so), where h2's error killed it with an ERROR traceback;
* releases the streams grpclib itself never releases: a stream reset in the same batch of
  frames that opened it has its handler task cancelled before the task starts, so the
  task's ``finally`` (which releases the stream) never runs and the stream stayed in the
  connection's table for the connection's lifetime.

grpclib keeps h2's connection object in the private ``Connection._connection``; the
processor and the protocol reach it through :func:`_h2_of` alone, to reset a stream and to
send GOAWAY when the connection is cut.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from functools import partial
from typing import Any, cast

from grpclib.config import Configuration
from grpclib.protocol import AbstractHandler, Connection, EventsProcessor, H2Protocol
from h2.config import H2Configuration
from h2.connection import H2Connection
from h2.errors import ErrorCodes
from h2.events import (
    PingAckReceived,
    PingReceived,
    RemoteSettingsChanged,
    RequestReceived,
    StreamReset,
    UnknownFrameReceived,
)
from h2.exceptions import ProtocolError as H2ProtocolError

from .._limits import Bucket, ConnectionLimits, CutReason, bucket, log_cut
from .._methods import let_go
from ..h2.headers import MalformedRequest, parse_request

__all__ = ["GuardedH2Protocol"]

log = logging.getLogger("xdscore.transport")


def _h2_of(connection: Connection) -> H2Connection:
    """h2's connection inside grpclib's (grpclib does not expose it)."""
    h2: H2Connection = connection._connection
    return h2


def _gone(reason: CutReason, bucket: Bucket, last_stream_id: int) -> None:
    """What a processor whose connection is gone does about abuse: nothing."""


class _GuardedProcessor(EventsProcessor):
    """grpclib's events processor, counting the frames :class:`ConnectionLimits` bounds."""

    def __init__(
        self,
        handler: AbstractHandler,
        connection: Connection,
        limits: ConnectionLimits,
        abuse: Callable[[CutReason, Bucket, int], None],
    ) -> None:
        super().__init__(handler, connection)
        self._abuse = abuse
        self._reset_age = limits.reset_age
        self.resets = bucket(limits.resets_per_second, limits.resets_burst)
        self.pings = bucket(limits.pings_per_second, limits.pings_burst)
        self.settings = bucket(limits.settings_per_second, limits.settings_burst)
        self.last_stream_id = 0
        """The highest stream the server has acted on (the GOAWAY's last stream id)."""
        # (grpclib raises for an event it has no handler for.)
        self.processors[UnknownFrameReceived] = self.process_unknown_frame_received

    def release(self) -> None:
        """The connection is gone: let go of it."""
        self._abuse = _gone

    def process_request_received(self, event: RequestReceived) -> None:
        self.last_stream_id = event.stream_id
        try:
            parse_request(cast(list[tuple[str, str]], event.headers))
        except MalformedRequest as error:
            log.debug("HTTP/2 stream error on stream %d: %s", event.stream_id, error)
            _h2_of(self.connection).reset_stream(event.stream_id, ErrorCodes.PROTOCOL_ERROR)
            if self.resets is not None and self.resets.take():
                self._abuse("rapid_reset", self.resets, self.last_stream_id)
            return
        super().process_request_received(event)

    def process_unknown_frame_received(self, event: UnknownFrameReceived) -> None:
        """Frames of unknown types are ignored (RFC 9113 sections 4.1 and 5.5)."""

    def process_stream_reset(self, event: StreamReset) -> None:
        stream = self.streams.get(event.stream_id)
        task: asyncio.Task[None] | None = None
        if stream is not None:
            tasks: dict[Any, asyncio.Task[None]] | None = getattr(self.handler, "_tasks", None)
            task = tasks.get(stream) if tasks is not None else None
        super().process_stream_reset(event)
        if task is not None:
            task.add_done_callback(partial(self._forget, event.stream_id))
        if self.resets is None:
            return
        # A stream grpclib has already released cost its handler nothing more: not counted.
        created = stream.created if stream is not None else None
        if created is None:
            return
        if time.monotonic() - created < self._reset_age and self.resets.take():
            self._abuse("rapid_reset", self.resets, self.last_stream_id)

    def _forget(self, stream_id: int, task: asyncio.Task[None]) -> None:
        """Release a reset stream whose handler never ran (grpclib's release is in the
        handler's ``finally``; a task cancelled before it starts never gets there)."""
        stream = self.streams.pop(stream_id, None)
        if stream is None:
            return  # released by its handler, as usual
        self.connection.stream_close_waiter.set()
        if not self.connection.is_closing():
            self.connection.ack(stream_id, stream.buffer.unacked_size())

    def process_remote_settings_changed(self, event: RemoteSettingsChanged) -> None:
        super().process_remote_settings_changed(event)
        if self.settings is not None and self.settings.take():
            self._abuse("settings_flood", self.settings, self.last_stream_id)

    def process_ping_received(self, event: PingReceived) -> None:
        if self.pings is not None and self.pings.take():
            self._abuse("ping_flood", self.pings, self.last_stream_id)

    def process_ping_ack_received(self, event: PingAckReceived) -> None:
        super().process_ping_ack_received(event)
        if self.pings is not None and self.pings.take():
            self._abuse("ping_flood", self.pings, self.last_stream_id)


_SLICE = 16_384
"""Bytes of a read h2 parses before the events so far are counted."""


class GuardedH2Protocol(H2Protocol):
    """grpclib's server connection with the bounds of :class:`ConnectionLimits`.

    ``on_cut`` is called with the reason once, when the connection is cut.
    """

    processor: _GuardedProcessor
    _transport: asyncio.Transport

    def __init__(
        self,
        handler: AbstractHandler,
        config: Configuration,
        h2_config: H2Configuration,
        *,
        limits: ConnectionLimits,
        on_cut: Callable[[CutReason], None],
    ) -> None:
        super().__init__(handler, config, h2_config)
        self._limits = limits
        self._on_cut = on_cut
        self._opened = 0.0
        self.cut: CutReason | None = None
        """Why the connection was cut, once it was."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._transport = cast(asyncio.Transport, transport)
        self._opened = time.monotonic()
        # grpclib's own processor, replaced, keeps its handlers as bound methods of itself
        # (a cycle holding the connection) until closed: it never will be.
        self.processor.processors.clear()
        self.processor = _GuardedProcessor(self.handler, self.connection, self._limits, self._abuse)

    def data_received(self, data: bytes) -> None:
        # grpclib's, except that:
        # * h2 is fed at most _SLICE bytes at a time, and the events of each slice are
        #   counted before the next is parsed: h2 takes some 60 us to parse a HEADERS and
        #   RST_STREAM pair, so a 256 KiB read of them would hold the event loop for half
        #   a second before the first could be counted;
        # * what h2 queued in answer (PING and SETTINGS ACKs) goes out after the events are
        #   counted, not before, so a cut drops the answers to a flood;
        # * nothing after a cut is parsed or acted on;
        # * the GOAWAY h2 prepares for a protocol error is sent before closing.
        if self._is_cut():
            return
        process = self.processor.process
        for start in range(0, len(data), _SLICE):
            try:
                events = self.connection.feed(data[start : start + _SLICE])
            except H2ProtocolError as error:
                log.debug("HTTP/2 protocol error from %s: %s", self._peer(), error)
                self.connection.flush()
                self.processor.close("Protocol error")
                return
            except UnicodeDecodeError:
                # grpclib has h2 decode header fields as ASCII, and h2 fails half-way
                # through the stream's headers: the connection ends.
                self._refuse_connection(b"a header field that is not ASCII")
                return
            for event in events:
                process(event)
                if self._is_cut():
                    return
        self.connection.flush()

    def _refuse_connection(self, reason: bytes) -> None:
        """End the connection with GOAWAY PROTOCOL_ERROR for what h2 could not take."""
        log.debug("HTTP/2 protocol error from %s: %s", self._peer(), reason.decode())
        try:
            _h2_of(self.connection).close_connection(
                error_code=ErrorCodes.PROTOCOL_ERROR, additional_data=reason
            )
            self.connection.flush()
        except H2ProtocolError:
            pass  # h2 has closed the connection already
        self.processor.close("Protocol error")

    def connection_lost(self, exc: BaseException | None) -> None:
        super().connection_lost(exc)  # (grpclib drops its processor's own cycle there)
        let_go(self._transport)
        # Our processor keeps a callback to this connection: a cycle that would keep the
        # whole connection (h2's state, buffers, streams) until a full collection.
        self.processor.release()

    def _is_cut(self) -> bool:
        return self.cut is not None

    def _abuse(self, reason: CutReason, bucket: Bucket, last_stream_id: int) -> None:
        if self.cut is not None:
            return
        self.cut = reason
        limits = self._limits
        log_cut(self._peer(), reason, bucket, limits, self._opened)
        h2_connection = _h2_of(self.connection)
        h2_connection.clear_outbound_data_buffer()  # the answers to the flood, unsent
        try:
            h2_connection.close_connection(
                error_code=ErrorCodes.ENHANCE_YOUR_CALM,
                additional_data=reason.encode(),
                last_stream_id=last_stream_id,
            )
            self.connection.flush()
        except H2ProtocolError:
            pass  # h2 has closed the connection already
        # Closing flushes the GOAWAY first; a client that does not read gets aborted.
        asyncio.get_running_loop().call_later(limits.close_grace, self._transport.abort)
        self.processor.close(f"connection cut: {reason}")
        try:
            self._on_cut(reason)
        except Exception:
            log.exception("counting a cut connection failed")

    def _peer(self) -> str:
        address = self._transport.get_extra_info("peername")
        if not address:
            return "an unknown peer"
        return f"{address[0]}:{address[1]}"
