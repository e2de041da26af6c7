"""Revisions: each state the control plane adopts, and which proxies hold it.

Theory of operation
-------------------
A **revision** is one snapshot a cache was given to serve (``SnapshotCache.set_snapshot``,
directly or behind a `MuxCache` or `ScopedCache`: a
config directory's reload, an etcd revision, an embedder's write). Its id is the snapshot's
content revision (a hash of every type's content version), so every replica that adopts the
same resources names it the same; the log numbers revisions locally too (``seq``, in the
order adopted) and keeps the last `REVISIONS_KEPT`.

Which proxies hold a revision is worked out from what each stream already knows, never from
a copy of what each proxy holds:

* a stream's session says when its client **settled** (`Settled`: it holds
  exactly what its view gives it, nothing of it in flight) and at which ``seq`` the view
  was read; a cache change or a response clears that (the session's ``held``);
* when a revision is adopted, the cache has already told the streams whose view changed:
  every stream that is not settled then is **pending** for it, and for every later revision,
  until it settles (``pending_from``); a stream that is settled holds it already (the
  revision does not change it). A stream that opens is pending for every revision kept
  until it settles: it holds nothing yet;
* a stream that settles at ``seq`` holds every revision up to ``seq`` it was pending for:
  each counts it as **acked**, and, when it was sent something on the way, as **changed**,
  with the time from the revision's adoption (its convergence time);
* a stream that rejects a response (`Rejected`) and stays unsettled is
  **nacked** for the revisions the rejected response (or, stuck with nothing to send, the
  round that found it so: the session's ``stuck_seq``) was at or after; what it rejected
  is named with its source (`RevisionLog.source_of`, from the snapshots'
  provenance);
* a stream that closes while pending **left**.

Each event costs O(revisions kept); adopting a revision costs O(streams) (a look at each
stream's flag); a revision's status (`RevisionLog.status`) costs O(streams). What is
kept is O(streams) per revision kept (a node id and a float per proxy changed), plus one
small record per stream: O(streams + resources) in all.
"""

from __future__ import annotations

import logging
import math
import re
import time
import weakref
from array import array
from collections.abc import Callable, Collection, Hashable
from typing import TYPE_CHECKING, Any

import anyio
import attrs

from ..cache._snapshot import Snapshot
from ..wire._resource import Resource
from ._callbacks import StreamInfo
from ._facts import Rejected, Settled
from ._metrics import Metrics, type_label
from ._status import SyncState, stream_status

if TYPE_CHECKING:
    from ..cache._interface import Cache
    from ._server import ActiveStream

__all__ = [
    "REVISIONS_KEPT",
    "Blamed",
    "ProxyNack",
    "ProxyState",
    "Revision",
    "RevisionLog",
    "RevisionStatus",
    "nack_json",
    "revision_json",
]

log = logging.getLogger("xdscore.server")

REVISIONS_KEPT = 16
"""Revisions the log keeps (the newest)."""
LEFT_KEPT = 20
"""Node ids of proxies that left while pending, kept per revision (the count is exact)."""
BLAMED_KEPT = 10
"""Resources a NACK's report names at most."""


@attrs.frozen
class Blamed:
    """A resource a proxy rejected, and where it came from (``None``: not said)."""

    type_url: str
    name: str
    version: str
    source: str | None

    def __str__(self) -> str:
        return f"{self.name} ({self.source})" if self.source else self.name


@attrs.frozen(kw_only=True)
class ProxyNack:
    """One NACK: the rejected response's type and version, the proxy's message, and the
    resources it rejected (those the response changed, narrowed to those the message
    names, when it names any)."""

    type_url: str
    version: str
    message: str
    resources: tuple[Blamed, ...]
    seq: int
    """The revision the rejected response's round read."""
    at: float
    """Wall-clock time."""

    def describe(self, node: str) -> str:
        """``listener_blocked (listeners.yaml, document 2) NACKed by edge-1: <message>``."""
        what = ", ".join(map(str, self.resources)) or f"{type_label(self.type_url)} response"
        return f"{what} NACKed by {node}: {self.message.strip()}"


class Revision:
    """One adopted state and what its proxies did with it (updated as they do)."""

    __slots__ = (
        "_snapshot",
        "acked",
        "adopted_at",
        "adopted_wall",
        "changed",
        "completed_at",
        "connected",
        "group",
        "id",
        "joined",
        "label",
        "latencies",
        "left",
        "left_count",
        "pending",
        "reported",
        "seq",
        "store_revision",
    )

    def __init__(
        self, seq: int, snapshot: Snapshot, group: str, adopted_at: float, adopted_wall: float
    ) -> None:
        self.seq = seq
        self.id = snapshot.revision
        self.label = snapshot.label
        self.store_revision = snapshot.store_revision
        self.group = group
        self.adopted_at = adopted_at
        self.adopted_wall = adopted_wall
        self._snapshot: weakref.ref[Snapshot] = weakref.ref(snapshot)
        self.connected = 0
        """Streams connected when it was adopted."""
        self.pending = 0
        """Streams that do not hold it yet (NACKed ones among them)."""
        self.acked = 0
        """Streams that came to hold it after it was adopted (changed, or new)."""
        self.joined = 0
        """Of the acked, streams that opened after it was adopted."""
        self.changed: list[str] = []
        """The node ids of the proxies it changed, in the order they settled..."""
        self.latencies = array("d")
        """...and how long each took from its adoption (seconds)."""
        self.completed_at: float | None = None
        """When no stream was pending for it any more (monotonic)."""
        self.left: list[str] = []
        self.left_count = 0
        self.reported = False
        """Its convergence was observed (in the metric and the log), once."""

    @property
    def snapshot(self) -> Snapshot | None:
        """The snapshot, while the cache (or anything) still holds it."""
        return self._snapshot()

    def __repr__(self) -> str:
        return f"<Revision {self.id} #{self.seq}{' ' + self.label if self.label else ''}>"


@attrs.frozen(kw_only=True)
class ProxyState:
    """One stream as one revision sees it."""

    stream: int
    node: str
    state: str
    """``acked`` (it holds the revision, or a later one), ``nacked`` or ``pending``."""
    joined: bool
    """It opened after the revision was adopted."""
    nack: ProxyNack | None = None
    unsynced: tuple[str, ...] = ()
    """For a pending stream: its types not in sync, as ``lds STALE``."""


@attrs.frozen(kw_only=True)
class RevisionStatus:
    """Where one revision stands now, over the streams of one server."""

    id: str
    seq: int
    label: str
    group: str
    store_revision: int | None
    adopted_at: float
    """Wall-clock time."""
    newest: bool
    """No revision was adopted after it."""
    tracked: bool
    """Streams are tracked (the server was made with ``track_revisions``)."""
    connected: int
    """Streams connected when it was adopted."""
    changed: int
    acked: int
    joined: int
    left: tuple[str, ...]
    left_count: int
    proxies: tuple[ProxyState, ...]
    convergence: tuple[float, float, float] | None
    """p50, p99 and the longest of the proxies it changed (seconds; ``None``: none yet)."""
    completed_at: float | None
    """Wall-clock time no stream was pending any more (``None``: some still are)."""

    @property
    def nacked(self) -> tuple[ProxyState, ...]:
        return tuple(p for p in self.proxies if p.state == "nacked")

    @property
    def pending(self) -> tuple[ProxyState, ...]:
        return tuple(p for p in self.proxies if p.state == "pending")

    @property
    def done(self) -> bool:
        """Every stream holds it or rejected it: waiting longer changes nothing."""
        return not self.pending

    @property
    def converged(self) -> bool:
        """Every stream holds it."""
        return all(p.state == "acked" for p in self.proxies)


class _Position:
    """One stream, as the log follows it."""

    __slots__ = ("nack", "opened_at", "pending_from", "stream")

    def __init__(self, stream: ActiveStream, opened_at: float) -> None:
        self.stream = stream
        self.opened_at = opened_at
        self.pending_from: int | None = 0
        """The oldest revision it is pending for (it is for every later one); ``None``:
        it holds the newest."""
        self.nack: ProxyNack | None = None
        """Its last NACK, until it settles."""

    def pending_for(self, seq: int) -> bool:
        return self.pending_from is not None and self.pending_from <= seq

    def node(self) -> str:
        node = self.stream.info.node
        return node.id if node is not None else "?"


_NAME_EDGE = r"[A-Za-z0-9_.\-/:]"
_NAME_END = r"(?![A-Za-z0-9_\-/])(?![.:][A-Za-z0-9_\-/])"
"""After a name: not more of a name (``.`` or ``:`` ends it when a space or the end
follows: ``listener(s) listener_blocked: cannot bind``)."""


def _mentions(message: str, name: str) -> bool:
    """Whether ``message`` names ``name`` as a word of its own."""
    return re.search(rf"(?<!{_NAME_EDGE}){re.escape(name)}{_NAME_END}", message) is not None


def _quantile(ordered: list[float], fraction: float) -> float:
    return ordered[min(len(ordered) - 1, max(0, math.ceil(fraction * len(ordered)) - 1))]


class RevisionLog:
    """The revisions a server's cache adopted, and its streams' positions on them (see the
    module). ``track`` follows the streams; without it, revisions are still logged (their
    ids, labels and provenance) but nothing is known of who holds them."""

    def __init__(
        self,
        cache: Cache,
        *,
        metrics: Metrics | None = None,
        track: bool = True,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.cache = cache
        self.track = track
        self._metrics = metrics
        self._clock = clock
        self._wall = wall
        self.seq = 0
        """The newest revision's number (0: none yet)."""
        self._log: list[Revision] = []
        self._positions: dict[int, _Position] = {}
        self._nacking = 0
        """Positions with a NACK they have not settled since."""
        self._event: anyio.Event | None = None
        cache.on_snapshot(self.adopted)

    # -- what the cache and the streams report -------------------------------------------

    def adopted(self, key: Hashable, snapshot: Snapshot) -> None:
        """The cache serves ``snapshot`` to group ``key`` now (its watchers were told)."""
        self.seq += 1
        revision = Revision(
            self.seq, snapshot, "" if key is None else repr(key), self._clock(), self._wall()
        )
        if self.track:
            pending = 0
            for position in self._positions.values():
                if position.pending_from is None and not position.stream.driver.session.held:
                    position.pending_from = revision.seq
                if position.pending_from is not None:
                    pending += 1
            revision.connected = len(self._positions)
            revision.pending = pending
            if not pending:
                revision.completed_at = revision.adopted_at
        self._log.append(revision)
        del self._log[:-REVISIONS_KEPT]
        if self._metrics is not None:
            self._metrics.revisions.inc()
            self._metrics.revision_pending.value = revision.pending
        log.debug("revision %s adopted: %s", revision.id, revision.label or revision.group or "-")
        self._wake()

    def opened(self, stream: ActiveStream) -> None:
        """A stream opened: it is pending for every revision kept until it settles."""
        if not self.track:
            return
        self._positions[stream.info.id] = _Position(stream, self._clock())
        for revision in self._log:
            revision.pending += 1
            revision.completed_at = None
        self._gauge()

    def closed(self, stream: ActiveStream) -> None:
        """A stream ended; for the revisions it was pending for, it left."""
        position = self._positions.pop(stream.info.id, None)
        if position is None:
            return
        if position.nack is not None:
            self._nacking -= 1
        if position.pending_from is not None and stream.info.node is not None:
            node = position.node()
            now = self._clock()
            for revision in self._log:
                if position.pending_for(revision.seq):
                    revision.left_count += 1
                    if len(revision.left) < LEFT_KEPT:
                        revision.left.append(node)
                    self._unpend(revision, now, observe=False)
        elif position.pending_from is not None:
            # A stream that never named its node held nothing and is not worth a name.
            for revision in self._log:
                if position.pending_for(revision.seq):
                    self._unpend(revision, self._clock(), observe=False)
        self._gauge()
        self._wake()

    def settled(self, info: StreamInfo, fact: Settled) -> None:
        """The stream's client holds what revision ``fact.seq`` gives it."""
        position = self._positions.get(info.id)
        if position is None:
            return
        if position.nack is not None:
            position.nack = None
            self._nacking -= 1
        start = position.pending_from
        if start is None:
            return
        now = self._clock()
        node = position.node()
        # Still held: no revision adopted since the round looked changed what it is to
        # have, so it holds those too.
        upto = self.seq if position.stream.driver.session.held else fact.seq
        later = None
        for revision in self._log:
            if revision.seq < start:
                continue
            if revision.seq > upto:
                later = revision.seq if later is None else later
                continue
            revision.acked += 1
            if position.opened_at > revision.adopted_at:
                revision.joined += 1
            elif fact.changed:
                seconds = now - revision.adopted_at
                revision.changed.append(node)
                revision.latencies.append(seconds)
                if self._metrics is not None:
                    self._metrics.revision_proxy_seconds.observe(seconds)
            self._unpend(revision, now, observe=True)
        position.pending_from = later
        self._gauge()
        self._wake()

    def rejected(self, info: StreamInfo, fact: Rejected) -> ProxyNack:
        """The stream's client rejected a response: what it rejected, and from where."""
        nack = fact.nack
        sent: Collection[Resource] = fact.response.carried
        held = fact.held
        # (What it held at that version it did not reject: a heartbeat names nothing.)
        new = [r for r in sent if (h := held.get(r.name)) is None or h.version != r.version]
        message = nack.error.message
        named = [r for r in new if _mentions(message, r.name)]
        blamed = tuple(
            Blamed(r.type_url, r.name, r.version, self.source_of(r))
            for r in (named or new)[:BLAMED_KEPT]
        )
        report = ProxyNack(
            type_url=nack.type_url,
            version=nack.rejected,
            message=message,
            resources=blamed,
            seq=fact.seq,
            at=self._wall(),
        )
        position = self._positions.get(info.id)
        if position is not None:
            if position.nack is None:
                self._nacking += 1
            position.nack = report
            self._wake()
        return report

    # -- reading -------------------------------------------------------------------------

    @property
    def current(self) -> Revision | None:
        """The newest revision, if any."""
        return self._log[-1] if self._log else None

    def revisions(self) -> list[Revision]:
        """The revisions kept, oldest first."""
        return list(self._log)

    def find(self, revision: str | int | Revision | None) -> Revision | None:
        """The revision with that id (the newest adoption of it), number (``seq``), or the
        newest (``None``); ``None`` when the log does not hold it."""
        if revision is None:
            return self.current
        if isinstance(revision, Revision):
            return revision if revision in self._log else None
        for kept in reversed(self._log):
            if kept.seq == revision or kept.id == revision:
                return kept
        return None

    def holds(self, stream: int) -> Revision | None:
        """The newest revision the stream holds, if it holds any kept."""
        position = self._positions.get(stream)
        if position is None:
            return None
        for revision in reversed(self._log):
            if not position.pending_for(revision.seq):
                return revision
        return None

    def source_of(self, resource: Resource) -> str | None:
        """Where ``resource`` came from, as the snapshot that holds it says (the newest
        kept snapshot with this version of it, else the newest with its name)."""
        fallback: str | None = None
        for revision in reversed(self._log):
            snapshot = revision.snapshot
            if snapshot is None:
                continue
            found = snapshot.resources(resource.type_url)
            if found is None or resource.name not in found:
                continue
            kept = found[resource.name]
            if kept is resource or kept.version == resource.version:
                return snapshot.source_of(resource.type_url, resource.name)
            if fallback is None:
                fallback = snapshot.source_of(resource.type_url, resource.name)
        return fallback

    def status(self, revision: Revision) -> RevisionStatus:
        """Where ``revision`` stands now: every stream, acked, nacked or pending."""
        proxies = []
        for position in self._positions.values():
            stream = position.stream
            joined = position.opened_at > revision.adopted_at
            if not position.pending_for(revision.seq):
                state = ProxyState(
                    stream=stream.info.id, node=position.node(), state="acked", joined=joined
                )
            else:
                state = self._unsettled(position, revision, joined)
            proxies.append(state)
        latencies = sorted(revision.latencies)
        convergence = (
            (_quantile(latencies, 0.5), _quantile(latencies, 0.99), latencies[-1])
            if latencies
            else None
        )
        completed = revision.completed_at
        return RevisionStatus(
            id=revision.id,
            seq=revision.seq,
            label=revision.label,
            group=revision.group,
            store_revision=revision.store_revision,
            adopted_at=revision.adopted_wall,
            newest=revision is self.current,
            tracked=self.track,
            connected=revision.connected,
            changed=len(revision.changed),
            acked=revision.acked,
            joined=revision.joined,
            left=tuple(revision.left),
            left_count=revision.left_count,
            proxies=tuple(proxies),
            convergence=convergence,
            completed_at=None
            if completed is None
            else revision.adopted_wall + (completed - revision.adopted_at),
        )

    def _unsettled(self, position: _Position, revision: Revision, joined: bool) -> ProxyState:
        stream = position.stream
        session = stream.driver.session
        nack = position.nack
        if nack is not None and (nack.seq >= revision.seq or session.stuck_seq >= revision.seq):
            return ProxyState(
                stream=stream.info.id,
                node=position.node(),
                state="nacked",
                joined=joined,
                nack=nack,
            )
        node = stream.info.node
        view = self.cache.view(node) if node is not None else None
        status = stream_status(stream.info, stream.machine, stream.records, view)
        unsynced = tuple(
            f"{type_label(t.type_url)} {t.sync.value}"
            for t in status.types
            if t.sync not in (SyncState.SYNCED, SyncState.IGNORED)
        )
        return ProxyState(
            stream=stream.info.id,
            node=position.node(),
            state="pending",
            joined=joined,
            nack=nack,
            unsynced=unsynced,
        )

    async def converged(
        self, revision: str | int | Revision | None = None, *, timeout: float | None = None
    ) -> RevisionStatus:
        """Wait until every stream holds ``revision`` (an id, a number, a
        `Revision`; ``None``: the newest) or rejected it, at most ``timeout``
        seconds; its status then (see `RevisionStatus.done`, ``converged``).

        Raises `LookupError` for a revision the log does not hold and
        `RuntimeError` when streams are not tracked."""
        target = self.find(revision)
        if target is None:
            raise LookupError(f"no revision {revision!r} in the log of this server")
        if not self.track:
            raise RuntimeError("this server does not track revisions (track_revisions=False)")
        with anyio.move_on_after(math.inf if timeout is None else timeout):
            while True:
                # Cheap first: while more streams are pending than have a NACK, some stream
                # is still on its way.
                if target.pending <= self._nacking:
                    status = self.status(target)
                    if status.done:
                        return status
                await self._next_change()
        return self.status(target)

    async def _next_change(self) -> None:
        if self._event is None:
            self._event = anyio.Event()
        await self._event.wait()

    # -- helpers ---------------------------------------------------------------------------

    def _unpend(self, revision: Revision, now: float, *, observe: bool) -> None:
        revision.pending -= 1
        if revision.pending == 0 and revision.completed_at is None:
            revision.completed_at = now
            if revision.changed and not revision.reported:
                # Once per revision (a stream that opens later makes it pending again), and
                # timed to the last proxy it changed, not to a later one's first sync.
                revision.reported = True
                seconds = max(revision.latencies)
                if observe and self._metrics is not None:
                    self._metrics.revision_seconds.observe(seconds)
                changed = len(revision.changed)
                log.info(
                    "revision %s converged: %d %s changed, the last %.3f s after it was adopted",
                    revision.id,
                    changed,
                    "proxy" if changed == 1 else "proxies",
                    seconds,
                )

    def _gauge(self) -> None:
        if self._metrics is not None and self._log:
            self._metrics.revision_pending.value = self._log[-1].pending

    def _wake(self) -> None:
        event, self._event = self._event, None
        if event is not None:
            event.set()


def nack_json(nack: ProxyNack, node: str) -> dict[str, Any]:
    """One NACK as JSON: what was rejected, where it came from, the proxy's message."""
    return {
        "type": type_label(nack.type_url),
        "type_url": nack.type_url,
        "version": nack.version,
        "message": nack.message.strip(),
        "resources": [
            {
                "name": r.name,
                "type": type_label(r.type_url),
                "version": r.version,
                "source": r.source,
            }
            for r in nack.resources
        ],
        "at": nack.at,
        "description": nack.describe(node),
    }


def revision_json(status: RevisionStatus, *, replica: str, proxies: bool = True) -> dict[str, Any]:
    """Where a revision stands as JSON (``/status``, ``/revision``; ``xdscore wait`` reads
    it); ``proxies=False`` leaves out the per-proxy list (the counts stay)."""
    convergence = status.convergence
    document: dict[str, Any] = {
        "id": status.id,
        "seq": status.seq,
        "label": status.label,
        "group": status.group,
        "store_revision": status.store_revision,
        "adopted_at": status.adopted_at,
        "newest": status.newest,
        "tracked": status.tracked,
        "replica": replica,
        "connected": status.connected,
        "changed": status.changed,
        "acked": status.acked,
        "joined": status.joined,
        "nacked": len(status.nacked),
        "pending": len(status.pending),
        "left": list(status.left),
        "left_count": status.left_count,
        "done": status.done,
        "converged": status.converged,
        "convergence_seconds": None
        if convergence is None
        else dict(zip(("p50", "p99", "max"), convergence, strict=True)),
        "completed_at": status.completed_at,
    }
    if proxies:
        document["proxies"] = [
            {
                "stream": proxy.stream,
                "node": proxy.node,
                "state": proxy.state,
                "joined": proxy.joined,
                "nack": None if proxy.nack is None else nack_json(proxy.nack, proxy.node),
                "unsynced": list(proxy.unsynced),
            }
            for proxy in status.proxies
        ]
    return document
