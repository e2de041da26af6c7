"""The server runtime: a registry of the streams being served, each run by the driver.

A transport calls :meth:`XdsServer.run_stream` with one gRPC stream as bytes; the server
refuses it if it is closing or full, creates the stream's state machine, its session (the
runtime's rules for the stream) and its :class:`StreamInfo`, and hands them to the
:class:`~xdscore.server.ServerDriver`, which moves requests in and responses out until the
stream ends. It keeps the registry that status pages, CSDS and the metrics read.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import secrets
import time
from collections.abc import Callable, Collection, Iterator, Mapping
from typing import Any, Literal, NoReturn

from mypy_extensions import mypyc_attr

from .._errors import GrpcStatus, RemoteProtocolError
from ..cache._interface import Cache
from ..protocol._delta_server import DeltaServer
from ..protocol._features import ASSUMED_FEATURES
from ..protocol._limits import StreamLimits
from ..protocol._sotw_server import SotwServer
from ..protocol._state import ProtocolName
from ..wire._names import canonical_name
from ._admission import (
    SYNC_BACKLOG,
    SYNC_TURN_SPREAD,
    PushSlots,
    RateMeter,
    ServerLimits,
    SyncTurns,
    TokenBucket,
    refusal,
)
from ._authorization import Authorizer, OperatorCheck, PeerIdentity, ResourceAuthorizer
from ._callbacks import ServerCallbacks, StreamInfo
from ._catch_up import DEFAULT_CATCH_UP_TIMEOUT, CatchUp
from ._codecs import DELTA, SOTW
from ._csds import ClientStatus
from ._driver import ServerDriver
from ._fetch import fetch
from ._heartbeat import DEFAULT_HEARTBEAT_FRACTION
from ._metrics import Metrics
from ._observer import Observer, describe
from ._pacer import Pacer, Pacing
from ._rebalance import Rebalancing, Recycler
from ._session import StreamSession
from ._settings import StreamSettings
from ._status import StreamStatus, TypeRecord, stream_status
from ._stream import ByteStream
from ._tasks import StreamStop
from ._trim import Trimmer

__all__ = ["ActiveStream", "XdsServer"]

log = logging.getLogger("xdscore.server")


class ActiveStream:
    """A stream being served: its :class:`StreamInfo`, state machine, sync records, the
    stop that ends it, and its driver."""

    __slots__ = ("driver", "info", "machine", "records", "stop")

    def __init__(
        self,
        info: StreamInfo,
        machine: SotwServer | DeltaServer,
        records: dict[str, TypeRecord],
        stop: StreamStop,
        driver: ServerDriver[Any, Any],
    ) -> None:
        self.info = info
        self.machine = machine
        self.records = records
        self.stop = stop
        self.driver = driver


@mypyc_attr(allow_interpreted_subclasses=True)
class XdsServer:
    """Serves xDS streams from ``cache``; transports call :meth:`run_stream`.

    ``control_plane_id`` is sent in every response's ``control_plane.identifier``.
    ``server_limits`` bounds what the server takes on as a whole (streams, new streams per
    second, initial syncs at once, pushes at once, the first request's deadline; see
    :class:`~xdscore.server.ServerLimits`); a stream beyond them is refused with
    RESOURCE_EXHAUSTED. ``pacing`` debounces cache writes (see
    :class:`~xdscore.server.Pacing`: 100 ms quiet, 10 s at most, endpoints on their own
    immediate path).
    ``ordered_ads`` applies make-before-break ordering on aggregated streams (see
    :mod:`xdscore.protocol._ordering`); switch it off only to see what it prevents.
    ``metrics`` records Prometheus metrics (``None``: a fresh :class:`Metrics` of its own;
    ``False``: none at all). ``authorize`` decides, once the first request names the node
    and before anything is sent, whether the stream may go on (see
    :class:`~xdscore.server.SpiffeNodePolicy`); a denial ends it with PERMISSION_DENIED.
    ``replica_id`` starts every nonce this server sends, so that a nonce from one replica is
    never mistaken for another's by a client that moved (default: 8 random hex digits).
    ``catch_up`` is the source to wait for, up to ``catch_up_timeout`` seconds, before
    answering a first request that presents versions this replica does not hold (see
    :mod:`xdscore.server._catch_up`); ``None``: answer at once.
    ``rebalancing`` ends streams that reached a maximum age, a few a second, so that
    proxies spread over replicas (see :class:`~xdscore.server.Rebalancing`; off by default).
    ``assumed_features`` gives, by ``user_agent_name`` (a name or a prefix before a space),
    the client features taken as supported beyond what a node advertises (default
    :data:`~xdscore.protocol.ASSUMED_FEATURES`: Envoy reads TTLs and wrapped SotW entries
    without saying so; ``{}``: only what clients advertise).
    ``heartbeat_fraction``: while a client holds resources with a TTL, heartbeats go out
    every this fraction of the shortest one (0: never; see :meth:`stop_heartbeats`).
    ``authorize_resource`` decides, per stream and resource, what a client may have (see
    :data:`~xdscore.server.ResourceAuthorizer`): a denied resource is withheld, and reported
    in ``resource_errors`` to clients that read them.
    ``operators`` says which client identities may read every node's status over CSDS (see
    :class:`~xdscore.server.SpiffeOperators`); any other client with a certificate is told
    about its own node only (see :mod:`xdscore.server._csds`).
    """

    def __init__(
        self,
        cache: Cache,
        *,
        callbacks: ServerCallbacks | None = None,
        limits: StreamLimits | None = None,
        control_plane_id: str = "",
        server_limits: ServerLimits | None = None,
        pacing: Pacing | None = None,
        ordered_ads: bool = True,
        metrics: Metrics | Literal[False] | None = None,
        authorize: Authorizer | None = None,
        replica_id: str | None = None,
        catch_up: CatchUp | None = None,
        catch_up_timeout: float = DEFAULT_CATCH_UP_TIMEOUT,
        rebalancing: Rebalancing | None = None,
        assumed_features: Mapping[str, Collection[str]] | None = None,
        heartbeat_fraction: float = DEFAULT_HEARTBEAT_FRACTION,
        authorize_resource: ResourceAuthorizer | None = None,
        operators: OperatorCheck | None = None,
    ) -> None:
        if not 0 <= heartbeat_fraction < 1:
            raise ValueError(f"heartbeat_fraction must be in [0, 1), not {heartbeat_fraction}")
        self.cache = cache
        self.assumed_features: Mapping[str, Collection[str]] = (
            ASSUMED_FEATURES if assumed_features is None else assumed_features
        )
        self.heartbeat_fraction = heartbeat_fraction
        self.authorize_resource = authorize_resource
        self.operators = operators
        self._quiet: set[tuple[str, str]] = set()
        self.replica_id = secrets.token_hex(4) if replica_id is None else replica_id
        self.catch_up = catch_up
        self.catch_up_timeout = catch_up_timeout
        self.callbacks = callbacks or ServerCallbacks()
        self.limits = limits or StreamLimits()
        self.control_plane_id = control_plane_id
        self.server_limits = server_limits or ServerLimits()
        bounds = self.server_limits
        self._syncs_done = RateMeter()
        """Initial syncs finished lately with a backlog behind them: how fast this server
        syncs (``max_sync_seconds``, and the retry hint of a refusal for syncs)."""
        self._sync_turns = SyncTurns()
        self._arrivals = (
            TokenBucket(bounds.new_streams_per_second, bounds.new_streams_burst)
            if bounds.new_streams_per_second > 0
            else None
        )
        self.pacer = Pacer(pacing or Pacing())
        self._syncing = 0
        self.ordered_ads = ordered_ads
        self.authorize = authorize
        self.metrics: Metrics | None = Metrics() if metrics is None else (metrics or None)
        self.observer = Observer(self.callbacks, self.metrics)
        """Turns what streams do into metrics, log lines and callbacks."""
        self._slots = PushSlots(
            bounds.push_concurrency,
            on_deferred=None if self.metrics is None else self.metrics.wakes_deferred.inc,
        )
        self.client_status = ClientStatus(self)
        """Answers CSDS about this server's clients (the transport serves it)."""
        self._ids = itertools.count(1)
        self._streams: dict[int, ActiveStream] = {}
        self.rebalancing = rebalancing or Rebalancing()
        self._recycler = (
            Recycler(self.rebalancing, lambda: len(self._streams), on_recycled=self._recycled)
            if self.rebalancing.enabled
            else None
        )
        self._trimmer = Trimmer()
        self._closed = False
        self.serving = False
        """Set by the transport while it listens."""
        cache.on_update(self.pacer.changed)
        if self.metrics is not None:
            updates = self.metrics.cache_updates
            cache.on_update(lambda type_url: updates(type_url).inc())
        self._settings = StreamSettings(
            cache=cache,
            observer=self.observer,
            slots=self._slots,
            pacer=self.pacer,
            max_request_bytes=self.limits.max_request_bytes,
            max_names=self.limits.max_names_per_request,
            control_plane_id=control_plane_id,
            first_request_timeout=bounds.first_request_timeout,
            assumed_features=self.assumed_features,
            heartbeat_fraction=heartbeat_fraction,
            quiet_heartbeats=self._quiet,
            authorize=authorize,
            authorize_resource=authorize_resource,
            catch_up=catch_up,
            catch_up_timeout=catch_up_timeout,
            admit=self._admit_first,
            synced=self._synced,
        )

    def streams(self) -> Iterator[ActiveStream]:
        """The streams being served now."""
        return iter(list(self._streams.values()))

    def status(self) -> list[StreamStatus]:
        """Every stream's sync status now, oldest stream first (reads; never waits)."""
        out = []
        for stream in self.streams():
            node = stream.info.node
            view = self.cache.view(node) if node is not None else None
            scope = self.cache.scope_of(node) if node is not None else None
            out.append(
                stream_status(stream.info, stream.machine, stream.records, view, scope=scope)
            )
        return out

    def stop_heartbeats(self, type_url: str, *names: str) -> None:
        """Send no more heartbeats for ``names`` of ``type_url``: clients that support TTLs
        drop each when its TTL lapses, while the cache still has it unchanged (a change
        is still sent, and restarts the TTL). On SotW a listener, cluster or scoped route
        configuration stops the heartbeats of its whole type (see docs/protocol.md)."""
        self._quiet.update((type_url, canonical_name(name)) for name in names)

    def resume_heartbeats(self, type_url: str, *names: str) -> None:
        """Heartbeat ``names`` of ``type_url`` again; every stream holding one is sent it in
        full first, since its client may have let it expire."""
        canonical = [canonical_name(name) for name in names]
        self._quiet.difference_update((type_url, name) for name in canonical)
        for stream in self.streams():
            stream.driver.refresh(type_url, canonical)

    def ready(self) -> bool:
        """Whether a transport listens and the cache has something to serve."""
        return self.serving and not self._closed and self.cache.ready

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called: new streams and fetches are refused."""
        return self._closed

    def close(self) -> None:
        """End every stream and refuse new ones."""
        self._closed = True
        for stream in list(self._streams.values()):
            stream.stop.cancel()

    async def run_stream(
        self,
        stream: ByteStream,
        *,
        protocol: ProtocolName,
        type_url: str | None = None,
        peer: str = "",
        identity: PeerIdentity | None = None,
    ) -> None:
        """Serve one stream until the client closes or leaves it.

        ``type_url`` fixes the type on a per-type service (``None``: ADS); ``identity`` is
        the client certificate's, when the transport verified one. Raises
        :class:`~xdscore.ProtocolError` with the status the stream should end with: the
        client broke the protocol, or the server refused the stream (UNAVAILABLE while
        closing, RESOURCE_EXHAUSTED when full).
        """
        self._admit_open()
        stream_id = next(self._ids)
        counter = itertools.count(1)
        info = StreamInfo(
            id=stream_id,
            protocol=protocol,
            type_url=type_url,
            peer=peer,
            opened_at=time.monotonic(),
            connected_at=time.time(),
            identity=identity,
        )
        machine, driver = self._driver(
            protocol,
            stream,
            info,
            lambda: f"{self.replica_id}-{stream_id}.{next(counter)}",
            type_url,
        )
        session = driver.session
        stop = StreamStop()
        self._streams[stream_id] = ActiveStream(info, machine, session.records, stop, driver)
        gauge = None
        if self.metrics is not None:
            mode = "ads" if type_url is None else "per_type"
            gauge = self.metrics.streams.labels(protocol, mode)
            gauge.inc()
        error: Exception | None = None
        recycled = False
        try:
            self.observer.opened(info)
            if self._recycler is None:
                await driver.run()
            else:
                recycled = await self._recycler.run(driver, info.opened_at, stream)
        except asyncio.CancelledError:
            if not stop.caught():
                raise
        except Exception as exc:
            error = exc
            raise
        finally:
            stop.done()
            self._streams.pop(stream_id, None)
            if session.admitted and not session.synced:
                self._syncing -= 1
            if gauge is not None:
                gauge.dec()
            self._trimmer.stream_ended()
            _log_close(info, error, stop.called, recycled)
            try:
                self.callbacks.on_stream_close(info, error)
            except Exception:
                log.exception("callback on_stream_close failed while the stream was closing")
            # The error's traceback holds this frame: keeping it here would be a cycle that
            # keeps the stream's whole state until a full collection.
            error = None

    async def fetch(
        self,
        data: bytes,
        *,
        type_url: str,
        peer: str = "",
        identity: PeerIdentity | None = None,
    ) -> bytes:
        """Answer one unary ``Fetch<Type>`` call of the per-type service for ``type_url``:
        the encoded ``DiscoveryResponse`` to the encoded ``DiscoveryRequest`` ``data``.

        Answered from the same view and with the same rules as a SotW stream's first
        request (see :mod:`xdscore.server._fetch`). Raises :class:`~xdscore.ProtocolError`
        with the status the call should end with: NOT_FOUND when the cache serves this node
        nothing of the type, FAILED_PRECONDITION ("not modified") when ``version_info`` is
        the current version, PERMISSION_DENIED, INVALID_ARGUMENT, RESOURCE_EXHAUSTED, or
        UNAVAILABLE while closing.
        """
        return await fetch(
            self,
            data,
            fetch_id=next(self._ids),
            type_url=type_url,
            peer=peer,
            identity=identity,
        )

    def full(self, connections: int = 0) -> bool:
        """Whether a new stream would be refused for ``max_streams`` now, counting as
        streams too the ``connections`` a transport holds (each carries one stream or
        will). A transport stops accepting connections while the server is full."""
        bound = self.server_limits.max_streams
        return bool(bound) and max(len(self._streams), connections) >= bound

    @property
    def syncing(self) -> int:
        """Streams that have not yet answered a response of every type they asked for."""
        return self._syncing

    def _admit_open(self) -> None:
        """Refuse a new stream as it opens: the server is closing, or full."""
        bounds = self.server_limits
        if self._closed:
            self._refuse("closing")
            raise RemoteProtocolError("the server is shutting down", GrpcStatus.UNAVAILABLE)
        if bounds.max_streams and len(self._streams) >= bounds.max_streams:
            self._refuse("max_streams")
            raise refusal(f"the server is at its limit of {bounds.max_streams} streams", 1.0)

    def _admit_first(self) -> None:
        """Refuse a stream at its first request (read, so that the client sees the status
        rather than a write racing it): too many initial syncs, or too many new streams a
        second. An admitted stream counts as syncing until it has answered its first
        responses."""
        bounds = self.server_limits
        syncing = self._syncing
        rate = self._syncs_done.rate()
        if bounds.max_initial_syncs and syncing >= bounds.max_initial_syncs:
            self._refuse_sync("the most this server takes on at once", rate)
        if bounds.max_sync_seconds and rate and syncing >= rate * bounds.max_sync_seconds:
            self._refuse_sync(
                f"{syncing / rate:.1f} s of syncs at the {rate:.0f} a second they finish at, "
                f"more than the {bounds.max_sync_seconds:g} s this server queues",
                rate,
            )
        if self._arrivals is not None:
            wait = self._arrivals.take()
            if wait > 0:
                self._refuse("rate")
                raise refusal(
                    f"new streams arrive faster than {bounds.new_streams_per_second:g} a second",
                    max(wait, 0.1),
                )
        self._syncing += 1

    def _refuse_sync(self, why: str, rate: float) -> NoReturn:
        self._refuse("initial_syncs")
        raise refusal(
            f"{self._syncing} streams are in their initial sync, {why}",
            self._sync_turns.retry_after(self._syncing, rate),
            spread=SYNC_TURN_SPREAD,
        )

    def _synced(self) -> None:
        if self._syncing > SYNC_BACKLOG:
            # Only syncs that finish with others queued behind them say how fast this server
            # syncs; with none queued, the rate would be the rate streams arrive at.
            self._syncs_done.mark()
        self._syncing -= 1

    def _recycled(self) -> None:
        if self.metrics is not None:
            self.metrics.rebalanced_streams.inc()

    def _refuse(self, reason: str) -> None:
        self.observer.refused(reason)
        log.info("stream refused: %s", reason)

    def _driver(
        self,
        protocol: ProtocolName,
        stream: ByteStream,
        info: StreamInfo,
        nonce_source: Callable[[], str],
        type_url: str | None,
    ) -> tuple[SotwServer | DeltaServer, ServerDriver[Any, Any]]:
        machine_type = SotwServer if protocol == "sotw" else DeltaServer
        machine = machine_type(
            nonce_source=nonce_source,
            type_url=type_url,
            limits=self.limits,
            ordered=self.ordered_ads,
        )
        settings = self._settings
        session: StreamSession[Any, Any] = StreamSession(
            machine,
            info,
            assumed_features=settings.assumed_features,
            heartbeat_fraction=settings.heartbeat_fraction,
            quiet=settings.quiet_heartbeats,
            authorize_resource=settings.authorize_resource,
        )
        codec: Any = SOTW if protocol == "sotw" else DELTA
        return machine, ServerDriver(session, codec, stream, settings)


def _log_close(
    info: StreamInfo, error: Exception | None, cancelled: bool, recycled: bool = False
) -> None:
    if not log.isEnabledFor(logging.INFO):
        return  # (its arguments cost more than the call)
    node = info.node.id if info.node is not None else "?"
    lasted = time.monotonic() - info.opened_at
    if error is not None:
        reason = str(error) or type(error).__name__
    elif recycled:
        reason = "rebalanced: it reached its maximum age"
    elif cancelled:
        reason = "server closed it"
    else:
        reason = "client closed it"
    log.info(
        "stream %d closed: node=%s peer=%s mode=%s after %.1f s: %s",
        info.id,
        node,
        info.peer or "?",
        describe(info),
        lasted,
        reason,
    )
