"""HTTP/2 abuse bounds, per connection: rapid resets, PING floods and SETTINGS floods.

grpclib feeds each connection's bytes to h2 and hands the resulting events to an
``EventsProcessor``. This module puts a processor in front of grpclib's that counts, per
connection, three kinds of frame that cost the server work and give the client nothing it
needs at a high rate:

* **rapid resets** (CVE-2023-44487): streams the client opens and resets (RST_STREAM) while
  they are young, and streams h2 resets because the client broke the protocol on them
  (the "made you reset" variant). Every such stream costs a request handler being
  started and cancelled; the concurrent-stream limit does not bound them, since a reset
  stream no longer counts as open;
* **PING frames**, each of which h2 answers with a PING ACK whether or not the client reads;
* **SETTINGS frames**, each applied and acknowledged.

Each kind has a token bucket (a sustained rate, and a burst that can arrive at once). A
frame arriving with the bucket empty cuts the connection: GOAWAY with ENHANCE_YOUR_CALM
naming the streams the server acted on, every stream on the connection ended, one WARNING
naming the peer, and one count in ``xdscore_connections_cut_total{reason}``. Counting
costs a clock read and a few float operations per counted frame (the runtime's token
bucket, ``xdscore.server._admission.TokenBucket``); other frames cost nothing.

The processor also releases the streams grpclib itself never releases: a stream reset in
the same batch of frames that opened it has its handler task cancelled before the task
starts, so the task's ``finally`` (which releases the stream) never runs and the stream
stayed in the connection's table for the connection's lifetime.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from functools import partial
from typing import Any, Literal, cast

import attrs
from grpclib.config import Configuration
from grpclib.protocol import AbstractHandler, Connection, EventsProcessor, H2Protocol
from h2.config import H2Configuration
from h2.errors import ErrorCodes
from h2.events import (
    PingAckReceived,
    PingReceived,
    RemoteSettingsChanged,
    RequestReceived,
    StreamReset,
)
from h2.exceptions import ProtocolError as H2ProtocolError

from ..server._admission import TokenBucket

__all__ = ["Bucket", "ConnectionLimits", "CutReason", "GuardedH2Protocol", "bucket", "log_cut"]

log = logging.getLogger("xdscore.transport")

CutReason = Literal["rapid_reset", "ping_flood", "settings_flood"]


@attrs.frozen(kw_only=True)
class ConnectionLimits:
    """Per-connection bounds on HTTP/2 frames that cost work; a rate of 0 means no bound.

    Each bound is a token bucket: ``*_burst`` frames may arrive at once, and the bucket
    refills at ``*_per_second``. Past it the connection is cut (GOAWAY ENHANCE_YOUR_CALM).
    """

    resets_per_second: float = 200.0
    """Sustained rate of rapid resets (see :attr:`reset_age`) once the burst is used up."""
    resets_burst: int = 400
    """Rapid resets accepted at once."""
    reset_age: float = 1.0
    """A stream reset (by the client, or by h2 for the client's protocol error) less than
    this many seconds after it opened counts as a rapid reset."""
    pings_per_second: float = 100.0
    """Sustained rate of PING frames (and unsolicited PING ACKs) from the client."""
    pings_burst: int = 100
    """PING frames accepted at once."""
    settings_per_second: float = 100.0
    """Sustained rate of SETTINGS frames from the client."""
    settings_burst: int = 100
    """SETTINGS frames accepted at once."""
    close_grace: float = 1.0
    """Seconds a cut connection may take to flush its GOAWAY before it is aborted."""


class Bucket(TokenBucket):
    """The runtime's token bucket, counting what it is asked for (for the log line)."""

    count = 0

    def take(self) -> float:
        self.count += 1
        return super().take()


def bucket(rate: float, burst: int) -> Bucket | None:
    return Bucket(rate, burst) if rate > 0 else None


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

    def process_request_received(self, event: RequestReceived) -> None:
        super().process_request_received(event)
        self.last_stream_id = event.stream_id

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

WHAT = {
    "rapid_reset": "streams reset within {age:g} s of opening",
    "ping_flood": "PING frames",
    "settings_flood": "SETTINGS frames",
}


def log_cut(
    peer: str, reason: CutReason, bucket: Bucket, limits: ConnectionLimits, opened: float
) -> None:
    """The one WARNING a cut connection gets."""
    log.warning(
        "cut the connection from %s (%s): %d %s %.2f s after it opened, past %g a second "
        "with a burst of %d; sent GOAWAY ENHANCE_YOUR_CALM",
        peer,
        reason,
        bucket.count,
        WHAT[reason].format(age=limits.reset_age),
        time.monotonic() - opened,
        bucket.rate,
        bucket.burst,
    )


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
            except H2ProtocolError:
                log.debug("HTTP/2 protocol error from %s", self._peer(), exc_info=True)
                self.connection.flush()
                self.processor.close("Protocol error")
                return
            for event in events:
                process(event)
                if self._is_cut():
                    return
        self.connection.flush()

    def _is_cut(self) -> bool:
        return self.cut is not None

    def _abuse(self, reason: CutReason, bucket: Bucket, last_stream_id: int) -> None:
        if self.cut is not None:
            return
        self.cut = reason
        limits = self._limits
        log_cut(self._peer(), reason, bucket, limits, self._opened)
        h2_connection = self.connection._connection
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
