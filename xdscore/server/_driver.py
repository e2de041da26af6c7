"""The stream driver: a pump between one byte stream and its session.

A transport hands the runtime one gRPC stream as a [`ByteStream`][xdscore.server.ByteStream].
The driver reads each message, refuses one larger than the limit, decodes it, hands it to
the stream's session (`._session`, where every rule lives) and writes what the session
says is due, encoded; the observer reports what happened. Two tasks do it (see
`._tasks`): one reads, one writes, so a peer that stops reading never stops the driver
from reading, and a slow reader gets the latest state when it is ready, never a backlog.

A request that makes a response due is answered by the task that read it, in the same
loop turn, when the write task is idle, a push slot is free and the transport can write
without waiting ([`try_send_parts`][xdscore.server.ByteStream.try_send_parts]); what it cannot write
so is left to the write task, in order. Every other write goes through push slots
([`PushSlots`][xdscore.server.PushSlots]), held until a write would wait for the client.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Collection, Sequence
from typing import Any, Generic, TypeVar

import attrs
from mypy_extensions import mypyc_attr

from .._errors import GrpcStatus, RemoteProtocolError, StreamClosed
from ..protocol._machine import Response
from ..protocol._view import ResourceView
from ._catch_up import presents_unknown
from ._codecs import ServerCodec, checked
from ._facts import Identified, Synced
from ._metrics import type_label
from ._session import Round, StreamSession
from ._settings import StreamSettings
from ._stream import ByteStream
from ._tasks import Deadline, run_pair
from ._wakeup import Wakeup

__all__ = ["ServerDriver"]

log = logging.getLogger("xdscore.server")

LARGE_REQUEST = 1 << 20
"""Bytes over which a request is large: the objects its handling scattered may keep memory
after the stream ends until a full collection (see `Trimmer`)."""

_Request = TypeVar("_Request")
_Response = TypeVar("_Response", bound=Response)


@mypyc_attr(allow_interpreted_subclasses=True)
class ServerDriver(Generic[_Request, _Response]):
    """Serves one stream: its requests into ``session``, what the session says is due out.

    A request larger than ``settings.max_request_bytes`` ends the stream with
    RESOURCE_EXHAUSTED, and no first request within ``settings.first_request_timeout``
    seconds with DEADLINE_EXCEEDED. The client closing its side does not end the stream:
    the server goes on pushing until it leaves.
    """

    def __init__(
        self,
        session: StreamSession[_Request, _Response],
        codec: ServerCodec[_Request, _Response],
        stream: ByteStream,
        settings: StreamSettings,
    ) -> None:
        self.session = session
        self._codec = codec
        self._stream = stream
        self._settings = settings
        self._wake = Wakeup()
        self._wake_queued = False
        """A cache change's wake-up waits its turn (see
        [`PushSlots.wake`][xdscore.server.PushSlots.wake])."""
        self._order = settings.slots.next_order()
        self._cancel_watch: Any = None
        self._parked = False
        """The write task waits for a wake-up between rounds: a request's answer may be
        written by the read task at once."""
        self._backlog: _Backlog[_Response] | None = None
        """Responses the read task could not write without waiting: the write task writes
        them first."""
        self._nonce = ""
        """The nonce of the response sent last: the codec tries it first (see
        ``decode_request``)."""
        self.received_large = False
        """Whether a request over ``LARGE_REQUEST`` bytes arrived (refused or not)."""

    async def run(self) -> None:
        """Serve until the client closes its side or goes away; raises
        [`ProtocolError`][xdscore.ProtocolError]."""
        try:
            await run_pair(self._read, self._write)
        finally:
            if self._cancel_watch is not None:
                self._cancel_watch()
            # Nothing of the stream stays reachable from the driver once it has ended
            # (a task or an exception that still refers to the driver keeps only that).
            self._cancel_watch = self._backlog = None

    def refresh(self, type_url: str, names: Collection[str]) -> None:
        """Send ``names`` of ``type_url`` in full again, soon (see ``machine.refresh``)."""
        self.session.refresh(type_url, names)
        self._wake.set()

    def finish(self, *, now: bool = False) -> None:
        """End the stream cleanly between two writes (see `StreamSession.finish`)."""
        self.session.finish(now=now)
        self._wake.set()

    @property
    def finishing(self) -> bool:
        """Whether [`finish`][xdscore.server.ServerDriver.finish] was called."""
        return self.session.finishing

    # -- reading -------------------------------------------------------------------------

    async def _read(self) -> None:
        data = await self._first()
        if data is None:
            # The client closed its side before asking for anything: nothing will ever be
            # sent on this stream, so it ends now (with OK) rather than holding its slot.
            raise StreamClosed("the client closed its side before any request")
        admit = self._settings.admit
        if admit is not None:
            admit()  # may refuse the stream, its request read
        self.session.admitted = True
        while data is not None:
            await self._apply(data)
            # Nothing of the request stays referenced while the next one is awaited (its
            # names would be held once per stream).
            del data
            data = await self._stream.receive()
        await self._stream.closed()
        raise StreamClosed

    async def _first(self) -> bytes | None:
        """The first request's bytes, within ``first_request_timeout``."""
        timeout = self._settings.first_request_timeout
        if timeout <= 0:
            return await self._stream.receive()
        deadline = Deadline(timeout)
        try:
            return await self._stream.receive()
        except asyncio.CancelledError:
            if not deadline.passed():
                raise
        finally:
            deadline.clear()
        raise RemoteProtocolError(
            f"no request within {timeout:g} s of opening the stream",
            GrpcStatus.DEADLINE_EXCEEDED,
        )

    async def _apply(self, data: bytes) -> None:
        settings, session = self._settings, self.session
        info = session.info
        if len(data) > LARGE_REQUEST:
            self.received_large = True
        request = self._codec.decode(
            checked(data, settings.max_request_bytes, "request"),
            info.node,
            settings.max_names,
            self._nonce,
        )
        settings.observer.request(info, request)
        if settings.catch_up is not None:
            await self._wait_for_store(request)
        facts = session.received(request, time.monotonic())
        if facts and isinstance(facts[0], Identified):  # (the first request's first fact)
            self._identified(facts[0])
        settings.observer.facts(info, facts)
        if facts and isinstance(facts[-1], Synced):  # (the last fact, when there is one)
            if settings.synced is not None:
                settings.synced()
            self._stream.synced()
        if not (session.requested and self._answer_at_once()):
            self._wake.set()

    def _identified(self, fact: Identified) -> None:
        """The first request named the node: ask ``authorize`` before anything is sent,
        then watch the cache for it."""
        settings = self._settings
        settings.observer.identified(self.session.info)
        if settings.authorize is not None:
            reason = settings.authorize(self.session.info, fact.node)
            if reason is not None:
                settings.observer.refused("permission_denied")
                raise RemoteProtocolError(reason, GrpcStatus.PERMISSION_DENIED)
        self._cancel_watch = settings.cache.watch(fact.node, self._cache_changed)

    async def _wait_for_store(self, request: Any) -> None:
        """Before the first request of a type that presents versions this replica does not
        hold: wait, bounded, until it holds what its store has (see ``_catch_up``)."""
        settings, session = self._settings, self.session
        assert settings.catch_up is not None
        type_url = request.type_url or session.info.type_url or ""
        if type_url in session.machine.type_states():
            return
        node = session.info.node or request.node
        view = settings.cache.view(node) if node is not None else None
        if not presents_unknown(attrs.evolve(request, type_url=type_url), view):
            return
        started = time.monotonic()
        caught_up = await settings.catch_up.caught_up(settings.catch_up_timeout)
        log.log(
            logging.INFO if caught_up else logging.WARNING,
            "node=%s presented %s versions this replica does not hold; %s after %.3f s",
            "?" if node is None else node.id,
            type_label(type_url),
            "caught up with the store" if caught_up else "answering from what it has",
            time.monotonic() - started,
        )

    def _cache_changed(self) -> None:
        pacer = self._settings.pacer
        if pacer is not None and not pacer.told:
            pacer.changed(None)
        self.session.cache_changed(time.monotonic())
        if not self._wake_queued:
            # Through the push slots: in a storm, a change wakes streams a share a turn.
            self._wake_queued = True
            self._settings.slots.wake(self._woken_for_change, order=self._order)

    def _woken_for_change(self) -> None:
        self._wake_queued = False
        self._wake.set()

    # -- writing -------------------------------------------------------------------------

    async def _write(self) -> None:
        session = self.session
        while not session.finished:
            self._parked = True
            try:
                await self._wake.wait(session.heartbeat_at)
            finally:
                self._parked = False
            backlog, self._backlog = self._backlog, None
            if backlog is not None:
                syncing = not session.synced
                await self._settings.slots.acquire(syncing=syncing)
                await self._write_out(backlog.responses, backlog.round, syncing)
            more = True
            while more and not session.finished:
                only, more = await self._next_round()
                await self._push(only)

    async def _next_round(self) -> tuple[Collection[str] | None, bool]:
        """Which types to push now (``None``: all), and whether another round follows; on
        the way, heartbeats alone go out on time and the task waits for changes to settle."""
        session, pacer = self.session, self._settings.pacer
        while True:
            step = session.next_round(pacer, time.monotonic())
            if not step.push:
                await self._wake.wait(step.until)
            elif step.only is not None and not step.only:
                await self._push(())  # heartbeats alone: nothing that settles waits for them
            else:
                return step.only, step.more

    async def _push(self, only: Collection[str] | None) -> None:
        """Write what the session says is due now (of ``only`` those types, if given)."""
        session, slots = self.session, self._settings.slots
        round = session.begin(only, time.monotonic())
        syncing = not session.synced
        await slots.acquire(syncing=syncing)
        try:
            responses = session.due(self._view(), only, time.monotonic(), self._seq())
        except BaseException:
            slots.release(at_turn_end=syncing)
            raise
        await self._write_out(responses, round, syncing)

    def _answer_at_once(self) -> bool:
        """Answer a request from the read task (see the module); ``False`` when the write
        task must: it is busy, no push slot is free, or the stream is finishing."""
        session, slots = self.session, self._settings.slots
        if not self._parked or session.finishing or self._backlog is not None:
            return False
        syncing = not session.synced
        if not slots.try_acquire(syncing=syncing):
            return False
        planned = session.heartbeat_at
        try:
            now = time.monotonic()
            round = session.answer(now)
            responses = session.due(self._view(), None, now, self._seq())
            for index, response in enumerate(responses):
                data = self._codec.encode(response, self._settings.control_plane_id)
                if not self._stream.try_send_parts(data):
                    self._backlog = _Backlog(responses[index:], round)
                    self._wake.set()
                    return True
                self._sending(response, round)
                self._written(response, sum(map(len, data)), round)
            self._end(round)
        finally:
            slots.release(at_turn_end=syncing)
            if session.heartbeat_at != planned:
                # The write task waits for the heartbeat time it saw: tell it the new one.
                self._wake.set()
        return True

    async def _write_out(self, responses: Sequence[_Response], round: Round, syncing: bool) -> None:
        """Write ``responses`` in order, holding a push slot (taken by the caller, for a
        ``syncing`` stream or not) until a write would wait for the client."""
        stream = self._stream
        slots, metrics = self._settings.slots, self._settings.observer.metrics
        held = True
        try:
            for response in responses:
                data = self._codec.encode(response, self._settings.control_plane_id)
                size = sum(map(len, data))
                if held and not stream.writable(size):
                    # The client is not reading: nobody else waits for it.
                    slots.release(at_turn_end=syncing)
                    held = False
                # Before the write: the client's answer may be read before this task resumes.
                self._sending(response, round)
                if metrics is not None:
                    metrics.pushes_in_flight.inc()
                try:
                    await stream.send_parts(data)
                finally:
                    if metrics is not None:
                        metrics.pushes_in_flight.dec()
                del data
                self._written(response, size, round)
        finally:
            if held:
                slots.release(at_turn_end=syncing)
        self._end(round)

    def _end(self, round: Round) -> None:
        settled = self.session.end(round)
        if settled is not None:
            self._settings.observer.settled(self.session.info, settled)

    def _seq(self) -> int:
        """The revision the view read now is at (``-1``: revisions are not tracked)."""
        revisions = self._settings.revisions
        return -1 if revisions is None else revisions.seq

    def _sending(self, response: _Response, round: Round) -> None:
        self.session.sending(response, round)
        self._nonce = response.nonce

    def _written(self, response: _Response, size: int, round: Round) -> None:
        info = self.session.info
        self._settings.observer.sent(
            info, self.session.sent(response, size, round, time.monotonic())
        )

    def _view(self) -> ResourceView | None:
        # Not kept between rounds: an idle stream refers to no view (one each would add up).
        node = self.session.info.node
        return self._settings.cache.view(node) if node is not None else None


@attrs.frozen
class _Backlog(Generic[_Response]):
    """Responses the read task could not write at once, and their round."""

    responses: Sequence[_Response]
    round: Round
