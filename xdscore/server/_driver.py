"""The one stream driver: bytes in, records through a state machine, bytes out.

A transport hands the driver a :class:`ByteStream` (one gRPC stream as message bytes) and
nothing else. The driver decodes each message with the wire codec, refusing one larger
than the limit before decoding it, feeds it to the machine, and writes what the machine
answers, encoded. Two tasks do this (see :mod:`._tasks`): one reads, one writes, so a
peer that stops reading never stops the driver from reading, and a slow reader gets the
latest state when it is ready, never a backlog. The driver holds no protocol rule.

:class:`ServerDriver` runs a server machine against a cache: it writes whatever the
machine says is due whenever a request arrived or the cache changed. :class:`ClientDriver`
runs a client machine the way Envoy does: it ACKs or NACKs every response and, if asked,
subscribes to what the held resources refer to. Both end quietly when the peer goes away
(:class:`~xdscore.StreamClosed`) and raise the :class:`~xdscore.ProtocolError` that ended
the stream otherwise, for the transport to turn into a gRPC status.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, Generic, Protocol, TypeVar

import anyio
import attrs
from mypy_extensions import mypyc_attr

from .._errors import GrpcStatus, ProtocolError, RemoteProtocolError, StreamClosed
from ..protocol._delta_client import DeltaClient
from ..protocol._delta_server import DeltaResponse
from ..protocol._events import (
    Event,
    NodeIdentified,
    ResponseAcked,
    ResponseNacked,
    StaleNonceSeen,
    SubscriptionChanged,
)
from ..protocol._features import ASSUMED_FEATURES, ClientFeatures
from ..protocol._follow import Follower
from ..protocol._machine import Deny
from ..protocol._sotw_client import SotwClient
from ..protocol._sotw_server import SotwResponse
from ..protocol._state import Phase, ProtocolName
from ..protocol._view import ResourceView
from ..wire import _client_codec, _codec
from ..wire._records import (
    DeltaDiscoveryRequest,
    DeltaDiscoveryResponse,
    DiscoveryRequest,
    DiscoveryResponse,
    Node,
)
from ._admission import PushSlots
from ._authorization import Authorizer, ResourceAuthorizer
from ._callbacks import ServerCallbacks, StreamInfo
from ._catch_up import CatchUp, presents_unknown
from ._heartbeat import DEFAULT_HEARTBEAT_FRACTION, HeartbeatSchedule
from ._metrics import Metrics, type_label
from ._pacer import Pacer
from ._status import NackRecord, TypeRecord
from ._tasks import Deadline, run_pair
from ._wakeup import Wakeup

__all__ = [
    "DELTA",
    "SOTW",
    "ByteStream",
    "ClientDriver",
    "OnResponse",
    "ServerCodec",
    "ServerDriver",
    "ServerMachine",
    "call_back",
    "checked",
    "describe",
    "resource_policy",
]

log = logging.getLogger("xdscore.server")

_Request = TypeVar("_Request")
_Response = TypeVar("_Response")
_Request_in = TypeVar("_Request_in", contravariant=True)
_Response_out = TypeVar("_Response_out", covariant=True)


class ByteStream(Protocol):
    """One gRPC stream as its transport gives it: message bytes each way.

    A transport may also offer ``writable(size) -> bool`` (whether a write of ``size`` bytes
    would go out without waiting for the peer to read; push slots use it),
    ``async closed()`` (returns once the peer has gone away, for a peer that closed its side
    and sends nothing more; a transport that cancels the handler instead needs none) and
    ``async send_parts(parts)`` (write one message given as the buffers it is the
    concatenation of, without joining them: a response's body is shared by every stream,
    and at large sizes each copy costs time and memory), and ``settled()`` (called once,
    when the stream has finished its initial sync: a transport may then stop treating
    its reads as a new stream's).
    """

    async def receive(self) -> bytes | None:
        """The next message, or ``None`` once the peer closed its side.

        Raises :class:`~xdscore.StreamClosed` when the peer went away.
        """
        ...

    async def send(self, data: bytes) -> None:
        """Write one message; raises :class:`~xdscore.StreamClosed` when the peer went away."""
        ...


class ServerMachine(Protocol[_Request_in, _Response_out]):
    """What the driver needs of a server machine (:class:`~xdscore.protocol.SotwServer`,
    :class:`~xdscore.protocol.DeltaServer`)."""

    def receive(self, request: _Request_in) -> list[Event]: ...

    def poll(
        self, view: ResourceView | None, only: Collection[str] | None = None
    ) -> Sequence[_Response_out]: ...

    def heartbeat(
        self, view: ResourceView | None, *, quiet: Collection[tuple[str, str]] = ()
    ) -> Sequence[_Response_out]: ...

    def shortest_ttl(self) -> float | None: ...

    def refresh(self, type_url: str, names: Collection[str]) -> None: ...

    def use_features(self, features: ClientFeatures) -> None: ...

    def use_authorization(self, deny: Deny | None) -> None: ...

    def type_states(self) -> Mapping[str, _Phased]: ...


class _Phased(Protocol):
    @property
    def phase(self) -> Phase: ...


def checked(data: bytes, limit: int, what: str) -> bytes:
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
    decode: Callable[[bytes, Node | None], _Request]
    """A request, given the stream's node so far (taken as it is if the request repeats
    its bytes)."""
    encode: Callable[[_Response, str], tuple[bytes, ...]]
    """A response as the buffers its encoding is the concatenation of (shared bodies stay
    shared: see :meth:`ByteStream.send`)."""


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


class _View(Protocol):
    def view(self, node: Node) -> ResourceView | None: ...

    def watch(self, node: Node, notify: Callable[[], None]) -> Callable[[], None]: ...


@mypyc_attr(allow_interpreted_subclasses=True)
class ServerDriver(Generic[_Request, _Response]):
    """Serves one stream: requests into ``machine``, what it says is due out, from ``cache``.

    ``info`` is the stream as ``callbacks`` see it; the driver fills in its node. A request
    larger than ``max_request_bytes`` ends the stream with RESOURCE_EXHAUSTED, and no first
    request within ``first_request_timeout`` seconds with DEADLINE_EXCEEDED; ``on_first``
    runs when the first request's bytes arrive and may refuse the stream. Each push holds
    one of ``slots`` (see :class:`~xdscore.server.PushSlots`), and ``on_synced`` is called
    once the client has answered a response of every type it asked for. The client closing
    its side does not end the stream: the server goes on pushing until it leaves. The driver
    keeps each type's :class:`~xdscore.server.TypeRecord` in ``records`` and, given
    ``metrics``, records pushes, answers and convergence times.

    The first request's node says, with ``assumed_features`` (by user agent), which optional
    encodings the client reads (:class:`~xdscore.protocol.ClientFeatures`); the driver hands
    them to the machine. While the client holds resources with a TTL it sends heartbeats
    every ``heartbeat_fraction`` of the shortest one (0: never), except for the
    ``(type_url, name)`` pairs in ``quiet_heartbeats`` (a live set). ``authorize_resource``
    decides, per resource, what the stream's client may have (see
    :data:`~xdscore.server.ResourceAuthorizer`).
    """

    def __init__(
        self,
        machine: ServerMachine[_Request, _Response],
        codec: ServerCodec[_Request, _Response],
        stream: ByteStream,
        *,
        cache: _View,
        info: StreamInfo,
        callbacks: ServerCallbacks,
        max_request_bytes: int,
        control_plane_id: str = "",
        metrics: Metrics | None = None,
        authorize: Authorizer | None = None,
        slots: PushSlots | None = None,
        first_request_timeout: float = 0.0,
        on_synced: Callable[[], None] | None = None,
        on_first: Callable[[], None] | None = None,
        pacer: Pacer | None = None,
        catch_up: CatchUp | None = None,
        catch_up_timeout: float = 0.0,
        assumed_features: Mapping[str, Collection[str]] = ASSUMED_FEATURES,
        heartbeat_fraction: float = DEFAULT_HEARTBEAT_FRACTION,
        quiet_heartbeats: Collection[tuple[str, str]] = (),
        authorize_resource: ResourceAuthorizer | None = None,
    ) -> None:
        self.machine = machine
        self.info = info
        self.records: dict[str, TypeRecord] = {}
        self._codec = codec
        self._stream = stream
        self._cache = cache
        self._on_request = _hook(callbacks, "on_request")
        self._on_event = _hook(callbacks, "on_event")
        self._on_ack = _hook(callbacks, "on_ack")
        self._on_nack = _hook(callbacks, "on_nack")
        self._on_response = _hook(callbacks, "on_response")
        self._limit = max_request_bytes
        self._control_plane = control_plane_id
        self._metrics = metrics
        self._authorize = authorize
        self._slots = slots or PushSlots(0)
        self._first_request_timeout = first_request_timeout
        self._on_synced = on_synced
        self._on_first = on_first
        self._pacer = pacer
        self._catch_up = catch_up
        self._catch_up_timeout = catch_up_timeout
        self._assumed = assumed_features
        self._authorize_resource = authorize_resource
        self._heartbeats = HeartbeatSchedule(heartbeat_fraction, quiet_heartbeats, time.monotonic)
        self._beat_nonces: set[str] = set()
        """The nonces of the heartbeats in flight."""
        self._requested = False
        """A request arrived since the write task last looked: answer it at once."""
        self._polled = (-1.0, -1.0)
        """When the write task last looked at (fast, slow) types, for the pacer."""
        self.synced = False
        """Whether the client has answered a response of every type it asked for."""
        self.admitted = False
        """Whether the first request arrived and the stream was let in."""
        self._wake = Wakeup()
        self._wake_queued = False
        """A cache change's wake-up waits its turn (see :meth:`PushSlots.wake`)."""
        self._order = self._slots.next_order()
        self._cancel_watch: Callable[[], None] | None = None
        self._changed_at: float | None = None
        """When the cache first changed since the write task last read it."""
        self._waiting: dict[str, float] = {}
        """Types not yet answered since a cache change at this time (their turn may come
        after a response in flight)."""
        self._carrying: dict[str, float] = {}
        """Types whose response in flight carries a cache change made at this time."""
        self._in_flight: set[str] = set()
        """Types with a response written (or being written) that the client has not answered."""
        self._finishing = False
        self._finish_now = False
        self._parked = False
        """The write task waits for a wake-up (between rounds): a request's answer may be
        written by the read task at once (see ``_answer_at_once``)."""
        self._try_send: Callable[[Sequence[bytes]], bool] | None = getattr(
            stream, "try_send_parts", None
        )
        """The transport's write that never waits, if it has one."""
        self._backlog: _Backlog[_Response] | None = None
        """Responses the read task polled but could not write without waiting: the write
        task writes them first."""

    async def run(self) -> None:
        """Serve until the client closes its side or goes away; raises :class:`ProtocolError`."""
        try:
            await run_pair(self._read, self._write)
        finally:
            if self._cancel_watch is not None:
                self._cancel_watch()

    def _check_allowed(self, node: Node) -> None:
        """Ask the authorizer, before anything is sent; a denial ends the stream."""
        if self._authorize is None:
            return
        reason = self._authorize(self.info, node)
        if reason is not None:
            if self._metrics is not None:
                self._metrics.refused_streams.labels("permission_denied").inc()
            raise RemoteProtocolError(reason, GrpcStatus.PERMISSION_DENIED)

    async def _peer_gone(self) -> None:
        """After the client closed its side: wait for it to go away, where the transport
        says so (grpclib cancels the stream's handler instead)."""
        closed = getattr(self._stream, "closed", None)
        if closed is not None:
            await closed()
            raise StreamClosed

    def _check_synced(self) -> None:
        """Whether the client has now answered a response of every type it asked for."""
        states = self.machine.type_states()
        if states and {s.phase for s in states.values()} <= _SETTLED:
            self.synced = True
            if self._on_synced is not None:
                self._on_synced()
            settled = getattr(self._stream, "settled", None)
            if settled is not None:
                settled()

    def _cache_changed(self) -> None:
        if self._pacer is not None and not self._pacer.told:
            self._pacer.changed(None)
        if self._changed_at is None:
            self._changed_at = time.monotonic()
        if not self._wake_queued:
            # Through the push slots: in a storm, a change wakes streams a share a turn.
            self._wake_queued = True
            self._slots.wake(self._woken_for_change, order=self._order)

    def _woken_for_change(self) -> None:
        self._wake_queued = False
        self._wake.set()

    async def _first(self) -> bytes | None:
        """The first request's bytes, within ``first_request_timeout``."""
        if self._first_request_timeout <= 0:
            return await self._stream.receive()
        deadline = Deadline(self._first_request_timeout)
        try:
            return await self._stream.receive()
        except asyncio.CancelledError:
            if not deadline.passed():
                raise
        finally:
            deadline.clear()
        raise RemoteProtocolError(
            f"no request within {self._first_request_timeout:g} s of opening the stream",
            GrpcStatus.DEADLINE_EXCEEDED,
        )

    async def _read(self) -> None:
        data = await self._first()
        if data is not None and self._on_first is not None:
            self._on_first()  # admission: may refuse the stream, its request read
        self.admitted = data is not None
        if data is None:
            # The client closed its side before asking for anything: nothing will ever be
            # sent on this stream, so it ends now (with OK) rather than holding its slot.
            raise StreamClosed("the client closed its side before any request")
        while True:
            if data is None:
                await self._peer_gone()
                return
            await self._apply(data)
            # Nothing of the request stays referenced while the next one is awaited (its
            # names would be held once per stream).
            del data
            data = await self._stream.receive()

    async def _apply(self, data: bytes) -> None:
        request = self._codec.decode(checked(data, self._limit, "request"), self.info.node)
        if self._on_request is not None:
            call_back(self._on_request, self.info, request)
        if self._catch_up is not None:
            await self._wait_for_store(request)
        events = self.machine.receive(request)
        for event in events:
            if isinstance(event, NodeIdentified):
                self.info.node = event.node
                self.info.features = ClientFeatures.of(event.node, self._assumed)
                self.machine.use_features(self.info.features)
                _log_open(self.info)
                self._check_allowed(event.node)
                self.machine.use_authorization(resource_policy(self._authorize_resource, self.info))
                self._cancel_watch = self._cache.watch(event.node, self._cache_changed)
            self._record(event)
            self._dispatch(event)
        if not self.synced:
            self._check_synced()
        if not self._answers_heartbeats(events):
            self._requested = True  # answer at once, whatever is settling
        if not (self._requested and self._answer_at_once()):
            self._wake.set()

    async def _wait_for_store(self, request: Any) -> None:
        """Before the first request of a type that presents versions this replica does not
        hold: wait, bounded, until it holds what its store has (see ``_catch_up``)."""
        assert self._catch_up is not None
        type_url = request.type_url or self.info.type_url or ""
        if type_url in self.machine.type_states():
            return
        node = self.info.node or request.node
        view = self._cache.view(node) if node is not None else None
        if not presents_unknown(attrs.evolve(request, type_url=type_url), view):
            return
        started = time.monotonic()
        caught_up = await self._catch_up.caught_up(self._catch_up_timeout)
        log.log(
            logging.INFO if caught_up else logging.WARNING,
            "node=%s presented %s versions this replica does not hold; %s after %.3f s",
            _node_id(self.info) if node is None else node.id,
            type_label(type_url),
            "caught up with the store" if caught_up else "answering from what it has",
            time.monotonic() - started,
        )

    async def _write(self) -> None:
        while not self._finished():
            await self._wait()
            backlog, self._backlog = self._backlog, None
            if backlog is not None:
                syncing = not self.synced
                await self._slots.acquire(syncing=syncing)
                await self._write_out(
                    backlog.responses, backlog.changed, backlog.started, backlog.sent, syncing
                )
            more = True
            while more and not self._finished():
                only, more = await self._next_round()
                await self._push(only)

    def _answer_at_once(self) -> bool:
        """Write what a request made due from the read task, without waiting, when the
        write task is between rounds, a push slot is free and the transport can write
        without waiting (``try_send_parts``): a request's answer then costs no task switch.
        ``False`` if any of that is not so: the write task answers. A response that does
        not fit the windows is left to the write task (``_backlog``), in order. A stream in
        its initial sync keeps the slot until the end of the loop turn, as the write task
        does (see :class:`PushSlots`)."""
        try_send = self._try_send
        if try_send is None or not self._parked or self._finishing or self._backlog is not None:
            return False
        syncing = not self.synced
        if not self._slots.try_acquire(syncing=syncing):
            return False
        try:
            self._answer_now(try_send)
        finally:
            self._slots.release(at_turn_end=syncing)
        return True

    def _answer_now(self, try_send: Callable[[Sequence[bytes]], bool]) -> None:
        pacer = self._pacer
        self._requested = False
        now = pacer.clock() if pacer is not None else 0.0
        self._polled = (now, now)
        started = time.monotonic()
        changed, self._changed_at = self._changed_at, None
        sent: set[str] = set()
        planned = self._heartbeats.at
        try:
            self._write_now(try_send, self._due(None), changed, started, sent)
        finally:
            if self._heartbeats.at != planned:
                # The write task waits for the heartbeat time it saw: tell it the new one.
                self._wake.set()

    def _write_now(
        self,
        try_send: Callable[[Sequence[bytes]], bool],
        responses: list[_Response],
        changed: float | None,
        started: float,
        sent: set[str],
    ) -> None:
        for index, response in enumerate(responses):
            data = self._codec.encode(response, self._control_plane)
            if not try_send(data):
                self._backlog = _Backlog(responses[index:], changed, started, sent)
                self._wake.set()
                return
            type_url = self._sending(response, changed)
            self._sent(response, type_url, sum(map(len, data)), started)
            sent.add(type_url)
            del data
        self._follow_change(changed, sent)

    def _answers_heartbeats(self, events: Sequence[Event]) -> bool:
        """Whether ``events`` are only the ACKs or NACKs of heartbeats: nothing to answer at
        once (such a request must not push a burst of changes before it settles)."""
        nonces = self._beat_nonces
        if not nonces:
            return False
        answered = [e.nonce for e in events if isinstance(e, ResponseAcked | ResponseNacked)]
        if not answered or len(answered) != len(events):
            nonces.difference_update(answered)
            return False
        beats = all(nonce in nonces for nonce in answered)
        nonces.difference_update(answered)
        return beats

    async def _wait(self) -> None:
        """Until woken, or until the next heartbeat is due."""
        wait = self._heartbeats.wait()
        self._parked = True
        try:
            if wait is None:
                await self._wake.wait()
                return
            with anyio.move_on_after(wait):
                await self._wake.wait()
        finally:
            self._parked = False

    def refresh(self, type_url: str, names: Collection[str]) -> None:
        """Send ``names`` of ``type_url`` in full again, soon (see ``machine.refresh``)."""
        self.machine.refresh(type_url, names)
        self._requested = True
        self._wake.set()

    def finish(self, *, now: bool = False) -> None:
        """End the stream cleanly between two responses: once the client has answered every
        response in flight, or (``now``) at the next point between two writes. The write task
        returns there, which ends the stream as the client closing it would."""
        self._finishing = True
        self._finish_now = self._finish_now or now
        self._wake.set()

    @property
    def finishing(self) -> bool:
        """Whether :meth:`finish` was called."""
        return self._finishing

    def _finished(self) -> bool:
        return self._finishing and (self._finish_now or not self._in_flight)

    async def _next_round(self) -> tuple[Collection[str] | None, bool]:
        """Which types to look at now (``None``: all), and whether a later round follows
        (slow changes still settling after the fast ones went out)."""
        pacer = self._pacer
        while pacer is not None and not self._requested:
            now = pacer.clock()
            fast_due, slow_due = pacer.due(self._polled[0])[0], pacer.due(self._polled[1])[1]
            if not fast_due and not slow_due:
                break
            if slow_due and now >= pacer.settles(fast=False):
                break
            if fast_due and now >= pacer.settles(fast=True):
                self._polled = (now, self._polled[1])
                return pacer.fast_types, slow_due
            if self._heartbeats.due():
                # Heartbeats do not wait for a burst to settle: they send nothing it changed.
                await self._push(())
                continue
            ends = [pacer.settles(fast=True)] if fast_due else []
            ends += [pacer.settles(fast=False)] if slow_due else []
            beat = self._heartbeats.wait()
            ends += [now + beat] if beat is not None else []
            with anyio.move_on_after(min(ends) - now):
                await self._wake.wait()
        self._requested = False
        now = pacer.clock() if pacer is not None else 0.0
        self._polled = (now, now)
        return None, False

    async def _push(self, only: Collection[str] | None) -> None:
        """Send what the machine says is due now (of ``only``, if given; ``()``: heartbeats
        only, which leaves any cache change for the round that sends it)."""
        started = time.monotonic()
        if only is not None and not only:
            changed = None
        else:
            changed, self._changed_at = self._changed_at, None
        syncing = not self.synced
        await self._slots.acquire(syncing=syncing)
        try:
            responses = self._due(only)
        except BaseException:
            self._slots.release(at_turn_end=syncing)
            raise
        await self._write_out(responses, changed, started, set(), syncing)

    def _due(self, only: Collection[str] | None) -> list[_Response]:
        """What the machine says is due now (of ``only``), heartbeats included when due."""
        node = self.info.node
        view = self._cache.view(node) if node is not None else None
        responses = list(self.machine.poll(view, only))
        if self._heartbeats.due():
            responses += self.machine.heartbeat(view, quiet=self._heartbeats.quiet)
            self._heartbeats.beaten(self.machine.shortest_ttl())
        # Nothing of this round stays referenced while the stream waits: not the view, not
        # an encoded response (one per idle stream would add up).
        return responses

    async def _write_out(
        self,
        responses: Sequence[_Response],
        changed: float | None,
        started: float,
        sent: set[str],
        syncing: bool,
    ) -> None:
        """Write ``responses`` in order, holding a push slot (taken by the caller, for a
        ``syncing`` stream or not) until a write would wait for the client."""
        held = True
        try:
            for response in responses:
                data = self._codec.encode(response, self._control_plane)
                size = sum(map(len, data))
                if held and not _writable(self._stream, size):
                    # The client is not reading: nobody else waits for it.
                    self._slots.release(at_turn_end=syncing)
                    held = False
                sent.add(await self._send(response, data, size, changed, started))
                del data
        finally:
            if held:
                self._slots.release(at_turn_end=syncing)
        self._follow_change(changed, sent)

    async def _send(
        self,
        response: _Response,
        data: tuple[bytes, ...],
        size: int,
        changed: float | None,
        started: float,
    ) -> str:
        """Write one response (encoded as ``data``, ``size`` bytes) and record it; its type
        URL."""
        metrics = self._metrics
        # Before the write: the client's answer may be read before this task resumes.
        type_url = self._sending(response, changed)
        if metrics is not None:
            metrics.pushes_in_flight.inc()
        try:
            await _write(self._stream, data)
        finally:
            if metrics is not None:
                metrics.pushes_in_flight.dec()
        self._sent(response, type_url, size, started)
        return type_url

    def _sending(self, response: _Response, changed: float | None) -> str:
        """Record ``response`` as in flight, carrying the cache change made at ``changed``;
        its type URL."""
        type_url, _, nonce = _identity(response)
        if _heartbeats(response):
            self._beat_nonces.add(nonce)
            # A heartbeat carries no cache change: its type stays waiting for the one that does.
            since = None
        else:
            since = self._waiting.pop(type_url, changed)
        if since is not None:
            self._carrying[type_url] = since
        self._in_flight.add(type_url)
        return type_url

    def _sent(self, response: _Response, type_url: str, size: int, started: float) -> None:
        """Record ``response`` (``size`` bytes) as written."""
        metrics = self._metrics
        _, version, nonce = _identity(response)
        beats = _heartbeats(response)
        record = self._records_for(type_url)
        record.sent_version, record.sent_nonce = version, nonce
        record.sent_at = time.time()
        if beats or _carries_ttl(response):
            self._heartbeats.held(self.machine.shortest_ttl())
        if metrics is not None:
            metrics.push_seconds(type_url).observe(time.monotonic() - started)
            metrics.responses(type_url).inc()
            metrics.response_bytes(type_url).inc(size)
            if beats:
                metrics.heartbeats(type_url).inc()
                metrics.heartbeat_resources(type_url).inc(beats)
        if self._on_response is not None:
            call_back(self._on_response, self.info, response)

    def _follow_change(self, changed: float | None, sent: set[str]) -> None:
        """Remember, for convergence, which types may still owe a cache change."""
        if changed is not None:
            for type_url in self.records:
                if type_url not in sent:
                    self._waiting.setdefault(type_url, changed)
        if not self._in_flight:
            # Nothing is in flight: what was not sent did not need the change. (A response in
            # flight, even one that carries no change, may hold back a type that does.)
            self._waiting.clear()

    def _records_for(self, type_url: str) -> TypeRecord:
        record = self.records.get(type_url)
        if record is None:
            record = self.records[type_url] = TypeRecord()
        return record

    def _record(self, event: Event) -> None:
        metrics = self._metrics
        if isinstance(event, ResponseAcked):
            record = self._records_for(event.type_url)
            record.acked_version, record.acked_at = event.version_info, time.time()
            since = self._carrying.pop(event.type_url, None)
            self._in_flight.discard(event.type_url)
            if metrics is not None:
                metrics.acks(event.type_url).inc()
                if since is not None:
                    elapsed = time.monotonic() - since
                    metrics.convergence_seconds(event.type_url).observe(elapsed)
            log.debug(
                "ACK node=%s type=%s version=%s",
                _node_id(self.info),
                type_label(event.type_url),
                event.version_info,
            )
        elif isinstance(event, ResponseNacked):
            record = self._records_for(event.type_url)
            record.nack = NackRecord(
                version=event.rejected,
                nonce=event.nonce,
                code=event.error.code,
                message=event.error.message,
                at=time.time(),
            )
            self._carrying.pop(event.type_url, None)
            self._in_flight.discard(event.type_url)
            if metrics is not None:
                metrics.nacks(event.type_url).inc()
            log.warning(
                "NACK node=%s type=%s version=%s: %s",
                _node_id(self.info),
                type_label(event.type_url),
                event.rejected,
                event.error.message.strip(),
            )
        elif isinstance(event, StaleNonceSeen) and metrics is not None:
            metrics.stale_nonces(event.type_url).inc()
        elif isinstance(event, SubscriptionChanged):
            self._records_for(event.type_url)

    def _dispatch(self, event: Event) -> None:
        if self._on_event is not None:
            call_back(self._on_event, self.info, event)
        if isinstance(event, ResponseAcked):
            if self._on_ack is not None:
                call_back(self._on_ack, self.info, event)
        elif isinstance(event, ResponseNacked) and self._on_nack is not None:
            call_back(self._on_nack, self.info, event)


@attrs.frozen
class _Backlog(Generic[_Response]):
    """Responses the read task could not write at once, with their round's change time,
    start time and the types it already sent."""

    responses: Sequence[_Response]
    changed: float | None
    started: float
    sent: set[str]


async def _write(stream: ByteStream, parts: tuple[bytes, ...]) -> None:
    """Write one message given as ``parts``, joined only for a transport that needs it."""
    send_parts = getattr(stream, "send_parts", None)
    if send_parts is not None:
        await send_parts(parts)
    else:
        await stream.send(parts[0] if len(parts) == 1 else b"".join(parts))


def _writable(stream: ByteStream, size: int) -> bool:
    """Whether ``stream`` can take ``size`` bytes without waiting for the peer to read
    (streams that cannot tell are taken to be writable)."""
    writable = getattr(stream, "writable", None)
    return True if writable is None else bool(writable(size))


def resource_policy(hook: ResourceAuthorizer | None, info: StreamInfo) -> Deny | None:
    """``hook`` for one stream, as its machine asks: by type URL and name."""
    if hook is None:
        return None
    return lambda type_url, name: hook(info, type_url, name)


def _carries_ttl(response: Any) -> bool:
    """Whether ``response`` sends a resource with a TTL to a client that reads TTLs (only
    those get heartbeats; the look at each resource is skipped for the others)."""
    if isinstance(response, SotwResponse):
        return response.selection.shortest_ttl is not None
    return response.ttl and any(resource.ttl is not None for resource in response.resources)


def _heartbeats(response: Any) -> int:
    """How many resources ``response`` heartbeats (0: it is no heartbeat)."""
    if not getattr(response, "heartbeat", False):
        return 0
    if isinstance(response, SotwResponse):
        return len(response.selection)
    return len(response.resources)


def _identity(response: Any) -> tuple[str, str, str]:
    """(type URL, version, nonce) of a SotW or Delta response."""
    if isinstance(response, SotwResponse):
        return response.type_url, response.version_info, response.nonce
    return response.type_url, response.system_version_info, response.nonce


def _node_id(info: StreamInfo) -> str:
    return info.node.id if info.node is not None else "?"


def describe(info: StreamInfo) -> str:
    """How a stream connects, for logs: protocol and ADS or the per-type service."""
    mode = "ads" if info.aggregated else type_label(info.type_url or "")
    return f"{info.protocol}/{mode}"


def _log_open(info: StreamInfo) -> None:
    node = info.node
    assert node is not None
    if not log.isEnabledFor(logging.INFO):
        return  # (its arguments cost more than the call)
    log.info(
        "stream %d opened: node=%s cluster=%s peer=%s mode=%s agent=%s/%s features=%s",
        info.id,
        node.id,
        node.cluster,
        info.peer or "?",
        describe(info),
        node.user_agent_name or "?",
        node.user_agent_version or "?",
        _feature_names(info.features),
    )


def _feature_names(features: ClientFeatures | None) -> str:
    """The optional encodings a stream uses, for its log line (``-``: none)."""
    if features is None:
        return "-"
    names = [
        name for name in ("ttl", "resource_in_sotw", "resource_errors") if getattr(features, name)
    ]
    return ",".join(names) or "-"


_SETTLED = frozenset((Phase.ACKED, Phase.NACKED))
"""The phases of a type whose client answered what it was sent."""


def _hook(callbacks: ServerCallbacks, name: str) -> Callable[..., None] | None:
    """``callbacks``' method ``name``, or ``None`` where it is :class:`ServerCallbacks`'
    own, which does nothing (not calling it saves a call per request and per event)."""
    method: Callable[..., None] = getattr(callbacks, name)
    if getattr(method, "__func__", None) is getattr(ServerCallbacks, name):
        return None
    return method


def call_back(method: Callable[..., None], *args: Any) -> None:
    """Run a user callback: a protocol error it raises ends the stream; others are logged."""
    try:
        method(*args)
    except ProtocolError:
        raise
    except Exception:
        log.exception("callback %s failed; the stream carries on", method)


OnResponse = Callable[[Any, Any], None]
"""Called with each decoded response and the ACK or NACK the client sent for it."""


@mypyc_attr(allow_interpreted_subclasses=True)
class ClientDriver:
    """Runs a client machine over a byte stream, as Envoy runs its xDS client.

    Call :meth:`watch` (SotW) or :meth:`subscribe` / :meth:`unsubscribe` (Delta) to say
    what the client wants, and :meth:`run` to process responses until the stream ends.
    With ``follow``, the client also subscribes by name to what its resources refer to,
    as Envoy subscribes to a cluster's endpoints and a listener's routes, and gRPC to a
    route's clusters; types it watches with a wildcard are left alone. ``on_response`` sees
    each response after the machine applied it. ``decode`` replaces the codec's response
    decoder (a load generator shares one decoded response between its clients).
    """

    def __init__(
        self,
        machine: SotwClient | DeltaClient,
        stream: ByteStream,
        *,
        follow: bool = True,
        on_response: OnResponse | None = None,
        decode: Callable[[bytes], DiscoveryResponse | DeltaDiscoveryResponse] | None = None,
        max_response_bytes: int = 1 << 30,
    ) -> None:
        self.machine: SotwClient | DeltaClient = machine
        self._stream = stream
        self._delta = isinstance(machine, DeltaClient)
        self._follower = Follower() if follow else None
        self._on_response = on_response
        if decode is None:
            decode = (
                _client_codec.decode_delta_response
                if self._delta
                else _client_codec.decode_response
            )
        self._decode = decode
        self._limit = max_response_bytes

    async def send(self, request: DiscoveryRequest | DeltaDiscoveryRequest) -> None:
        """Encode and write one request the machine produced."""
        if isinstance(request, DeltaDiscoveryRequest):
            data = _client_codec.encode_delta_request(request)
        else:
            data = _client_codec.encode_request(request)
        await self._stream.send(data)

    async def watch(self, type_url: str, names: Sequence[str] | None) -> None:
        """SotW: watch exactly ``names`` of ``type_url`` (``None``: legacy wildcard)."""
        assert isinstance(self.machine, SotwClient)
        await self.send(self.machine.watch(type_url, names))

    async def subscribe(self, type_url: str, names: Sequence[str] = ()) -> None:
        """Delta: subscribe to ``names`` (none on a first request: legacy wildcard)."""
        assert isinstance(self.machine, DeltaClient)
        await self.send(self.machine.subscribe(type_url, names))

    async def unsubscribe(self, type_url: str, names: Sequence[str]) -> None:
        """Delta: unsubscribe from ``names``."""
        assert isinstance(self.machine, DeltaClient)
        await self.send(self.machine.unsubscribe(type_url, names))

    async def run(self) -> None:
        """Apply responses until the server ends the stream; raises :class:`ProtocolError`."""
        while True:
            data = await self._stream.receive()
            if data is None:
                return
            response = self._decode(checked(data, self._limit, "response"))
            answer = self._apply(response)
            await self.send(answer)
            if self._on_response is not None:
                self._on_response(response, answer)
            if self._follower is not None:
                await self._follow(response.type_url)

    def _apply(
        self, response: DiscoveryResponse | DeltaDiscoveryResponse
    ) -> DiscoveryRequest | DeltaDiscoveryRequest:
        machine = self.machine
        if isinstance(machine, SotwClient):
            assert isinstance(response, DiscoveryResponse)
            return machine.receive(response)
        assert isinstance(response, DeltaDiscoveryResponse)
        return machine.receive(response)

    async def _follow(self, type_url: str) -> None:
        assert self._follower is not None
        if not self._follower.refers(type_url):
            return
        changed = self._follower.update(type_url, self.machine.holds(type_url))
        for target, names in changed.items():
            await self._want(target, names)

    async def _want(self, type_url: str, names: frozenset[str]) -> None:
        machine = self.machine
        if isinstance(machine, SotwClient):
            state = machine.type_state(type_url)
            if state is None and not names:
                return  # an empty first request would mean the wildcard
            if state is not None and state.subscription.wildcard:
                return
            await self.send(machine.watch(type_url, sorted(names)))
            return
        delta = machine.type_state(type_url)
        if delta is not None and delta.wildcard:
            return
        current = set(delta.requested) if delta is not None else set()
        if names - current:
            await self.send(machine.subscribe(type_url, sorted(names - current)))
        if current - names:
            await self.send(machine.unsubscribe(type_url, sorted(current - names)))
