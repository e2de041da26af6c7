"""One stream's runtime rules, as a pure state machine: what the driver only pumps.

Theory of operation
-------------------
The protocol machine ([`SotwServer`][xdscore.protocol.SotwServer] or
[`DeltaServer`][xdscore.protocol.DeltaServer]) says what the protocol allows. Around it, a stream
served by this runtime has rules of its own, and this session owns all of them:

* **Identity.** The first request's node fixes the client's features (by what it advertises
  and, with ``assumed_features``, by its user agent), which the machine encodes for, and
  ``authorize_resource`` says per resource what the client may have. (Whether the node may
  be served at all is the driver's question to the ``authorize`` hook, on
  `Identified`, before anything is written.)
* **Answering.** A request is answered at once, whatever is settling, unless all it did was
  answer heartbeats (which must not push a settling burst early). A cache change waits for
  its burst to settle (`Pacer`), the fast types on their own
  window: `next_round` says what to do next.
* **Heartbeats.** While the client holds resources with a TTL, heartbeats are due every
  ``heartbeat_fraction`` of the shortest one, except for the ``quiet`` ones.
* **In flight and convergence.** Each type with a response the client has not answered is
  in flight; a cache change is carried by the response that sends it, and its ACK says how
  long the change took to reach the client.
* **Sync.** The stream is synced once the client has answered a response of every type it
  asked for; status records say what was sent, acknowledged and rejected, per type.
* **Settling.** A round that leaves nothing but heartbeats in flight checks whether the
  client holds exactly what the view gives it (`holds_current`); the first
  time it does since a cache change or a response, the session says `Settled`, with
  the revision the view was read at: the server's revision tracking counts it (per ACK that
  is one check of O(types), once). A rejected response is reported as `Rejected`,
  with what it carried and what the client held, for the NACK's report to say what was
  refused and where it came from.
* **Finishing.** Asked to finish (rebalancing), the stream ends between two writes once the
  client has answered everything in flight, or at once.

The session never awaits, reads no clock and does no I/O: every method that needs the time
is given it (``now``, monotonic seconds). It returns facts (`._facts`) for the
`Observer` to turn into metrics, logs and callbacks.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any, Final, Generic, TypeVar

from mypy_extensions import mypyc_attr

from ..protocol._events import (
    Event,
    NodeIdentified,
    ResponseAcked,
    ResponseNacked,
    SubscriptionChanged,
)
from ..protocol._features import ClientFeatures
from ..protocol._machine import Deny, Response, ServerMachine
from ..protocol._state import Phase
from ..protocol._view import ResourceView
from ..wire._records import Node
from ._authorization import ResourceAuthorizer
from ._callbacks import StreamInfo
from ._facts import Converged, Fact, Identified, Rejected, Sent, Settled, Synced
from ._heartbeat import HeartbeatSchedule
from ._pacer import Pacer
from ._status import NackRecord, TypeRecord, holds_current

__all__ = ["Round", "StreamSession", "resource_policy"]

_Request = TypeVar("_Request")
_Response = TypeVar("_Response", bound=Response)

_ANSWERED = frozenset((Phase.ACKED, Phase.NACKED))
"""The phases of a type whose client answered what it was sent."""


@mypyc_attr(allow_interpreted_subclasses=True)
class Round:
    """One round of writes: ``changed`` is when the cache change it carries was first seen
    (``None``: none), ``started`` when it began; ``sent`` the types it wrote."""

    __slots__ = ("changed", "sent", "started")

    def __init__(self, changed: float | None, started: float) -> None:
        self.changed = changed
        self.started = started
        self.sent: set[str] = set()


@mypyc_attr(allow_interpreted_subclasses=True)
class Next:
    """What the write task does next (`StreamSession.next_round`): wait until
    ``until`` (a ``now`` time; ``None``: for a wake-up alone), or push ``only`` those types
    (``None``: all; ``()``: heartbeats alone), then go on at once if ``more``."""

    __slots__ = ("more", "only", "push", "until")

    def __init__(
        self,
        *,
        push: bool,
        only: Collection[str] | None = None,
        more: bool = False,
        until: float | None = None,
    ) -> None:
        self.push = push
        self.only = only
        self.more = more
        self.until = until


_HEARTBEATS_ONLY: Final = ()


@mypyc_attr(allow_interpreted_subclasses=True)
class StreamSession(Generic[_Request, _Response]):
    """One stream's runtime state around its protocol ``machine`` (see the module)."""

    def __init__(
        self,
        machine: ServerMachine[Any, _Request, _Response],
        info: StreamInfo,
        *,
        assumed_features: Mapping[str, Collection[str]],
        heartbeat_fraction: float,
        quiet: Collection[tuple[str, str]],
        authorize_resource: ResourceAuthorizer | None = None,
        settling: bool = True,
    ) -> None:
        self.machine = machine
        self.info = info
        self.records: dict[str, TypeRecord] = {}
        """What was sent, acknowledged and rejected, per type (status pages read them)."""
        self.admitted = False
        """Whether the first request arrived and the stream was let in."""
        self.synced = False
        """Whether the client has answered a response of every type it asked for."""
        self.requested = False
        """A request arrived that the write task has not answered yet."""
        self.finishing = False
        self._finish_now = False
        self._assumed = assumed_features
        self._authorize_resource = authorize_resource
        self._heartbeats = HeartbeatSchedule(heartbeat_fraction, quiet)
        self._beat_nonces: set[str] = set()
        """The nonces of the heartbeats in flight."""
        self._changed_at: float | None = None
        """When the cache first changed since the last round read it."""
        self._polled = (-1.0, -1.0)
        """When rounds last looked at the (fast, slow) types, for the pacer."""
        self._waiting: dict[str, float] = {}
        """Types not yet answered since a cache change at this time (their turn may come
        after a response in flight)."""
        self._carrying: dict[str, float] = {}
        """Types whose response in flight carries a cache change made at this time."""
        self._in_flight: dict[str, tuple[_Response, int]] = {}
        """Types with a response written (or being written) the client has not answered,
        with the response and the revision its round read."""
        self._settling = settling
        """Whether rounds check that the client settled (revision tracking is on)."""
        self.held = False
        """The client was last seen holding exactly what the cache gives it (see
        `Settled`), and nothing changed since."""
        self.held_seq = -1
        """The revision the view was read at when the client was last seen settled."""
        self.stuck_seq = -1
        """The revision of the last complete round that found the client not settled with
        nothing in flight: it waits for nothing the server will send (a rejected version,
        say) until the cache changes (``-1``: not so)."""
        self._sent_since_held = False
        self._seq = -1
        """The revision the last round's view was read at."""
        self._same_view = False
        """The cache has not changed since a round last polled every type (so the view now
        gives what that round's gave)."""
        self._settled: Settled | None = None
        """What the round being written found, for `end` to return."""

    # -- requests ------------------------------------------------------------------------

    def received(self, request: _Request, now: float) -> list[Fact | Event]:
        """Apply one decoded request; the facts it leaves, the machine's events among them
        (`Identified` first, on the first request; `Synced` last, once).

        Raises [`RemoteProtocolError`][xdscore.RemoteProtocolError] for what the protocol
        forbids."""
        events = self.machine.receive(request)
        facts: list[Fact | Event] = []
        for event in events:
            if isinstance(event, NodeIdentified):
                self._identify(event.node)
                facts.append(Identified(event.node))
            self._record(event, now, facts)
            facts.append(event)
        if not self.synced and self._answered_all():
            self.synced = True
            facts.append(Synced())
        if not self._answers_heartbeats(events):
            self.requested = True  # answered at once, whatever is settling
        return facts

    def _identify(self, node: Node) -> None:
        info = self.info
        info.node = node
        info.features = ClientFeatures.of(node, self._assumed)
        self.machine.use_features(info.features)
        self.machine.use_authorization(resource_policy(self._authorize_resource, info))

    def _record(self, event: Event, now: float, facts: list[Fact | Event]) -> None:
        if isinstance(event, ResponseAcked):
            record = self._record_of(event.type_url)
            record.acked_version, record.acked_at = event.version_info, self._wall(now)
            since = self._carrying.pop(event.type_url, None)
            self._in_flight.pop(event.type_url, None)
            if since is not None:
                facts.append(Converged(event.type_url, now - since))
        elif isinstance(event, ResponseNacked):
            record = self._record_of(event.type_url)
            record.nack = NackRecord(
                version=event.rejected,
                nonce=event.nonce,
                code=event.error.code,
                message=event.error.message,
                at=self._wall(now),
            )
            self._carrying.pop(event.type_url, None)
            rejected = self._in_flight.pop(event.type_url, None)
            if rejected is not None:
                facts.append(
                    Rejected(event, rejected[0], rejected[1], self.machine.holds(event.type_url))
                )
        elif isinstance(event, SubscriptionChanged):
            self._record_of(event.type_url)

    def _answered_all(self) -> bool:
        states = self.machine.type_states()
        return bool(states) and {s.phase for s in states.values()} <= _ANSWERED

    def _answers_heartbeats(self, events: Sequence[Event]) -> bool:
        """Whether ``events`` are only the ACKs or NACKs of heartbeats."""
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

    # -- cache changes and rounds -------------------------------------------------------

    def cache_changed(self, now: float) -> None:
        """What the client is to have may have changed (first seen at ``now``)."""
        if self._changed_at is None:
            self._changed_at = now
        self.held = False
        self._same_view = False

    def next_round(self, pacer: Pacer | None, now: float) -> Next:
        """What the write task does next, woken at ``now`` (see `Next`): a request is
        answered at once; a cache change once its burst settled, the fast types on their
        own; heartbeats on time, whatever is settling."""
        if pacer is not None and not self.requested:
            polled_fast, polled_slow = self._polled
            fast_due, slow_due = pacer.due(polled_fast)[0], pacer.due(polled_slow)[1]
            if fast_due or slow_due:
                settle_slow = pacer.settles(fast=False)
                settle_fast = pacer.settles(fast=True)
                if slow_due and now >= settle_slow:
                    return self._polling(now, None)
                if fast_due and now >= settle_fast:
                    self._polled = (now, polled_slow)
                    return Next(push=True, only=pacer.fast_types, more=slow_due)
                if self._heartbeats.due(now):
                    return Next(push=True, only=_HEARTBEATS_ONLY)
                ends = [settle_fast] if fast_due else []
                ends += [settle_slow] if slow_due else []
                if self._heartbeats.at is not None:
                    ends.append(self._heartbeats.at)
                return Next(push=False, until=min(ends))
        return self._polling(now if pacer is not None else 0.0, None)

    def answer(self, now: float) -> Round:
        """A request is answered at once, from what is due now of every type."""
        self._polling(now, None)
        return self.begin(None, now)

    def _polling(self, now: float, only: Collection[str] | None) -> Next:
        self.requested = False
        self._polled = (now, now)
        return Next(push=True, only=only)

    def begin(self, only: Collection[str] | None, now: float) -> Round:
        """A round of writes starts at ``now`` (for ``only`` those types; ``()``: heartbeats
        alone, which carry no cache change)."""
        if only is not None and not only:
            return Round(None, now)
        changed, self._changed_at = self._changed_at, None
        return Round(changed, now)

    def due(
        self,
        view: ResourceView | None,
        only: Collection[str] | None,
        now: float,
        seq: int = -1,
    ) -> list[_Response]:
        """What to write now against ``view`` (of ``only`` those types), heartbeats
        included when due; each response returned is in flight. ``seq`` is the revision the
        view was read at: when nothing but heartbeats is due, the round checks whether the
        client settled (`end` returns the `Settled` fact)."""
        responses = self.machine.poll(view, only, same_view=self._same_view)
        if only is None:
            self._same_view = view is not None
        heartbeats = self._heartbeats
        if heartbeats.due(now):
            responses += self.machine.heartbeat(view, quiet=heartbeats.quiet)
            heartbeats.beaten(self.machine.shortest_ttl(), now)
        self._seq = seq
        if self._settling and not self.held and all(r.heartbeats for r in responses):
            self._settle(view, seq, complete=only is None)
        return responses

    def _settle(self, view: ResourceView | None, seq: int, *, complete: bool) -> None:
        """Whether the client holds what ``view`` gives it, nothing of it in flight."""
        for response, _ in self._in_flight.values():
            if not response.heartbeats:
                return
        machine: Any = self.machine
        current = machine.polled_current  # (this round's poll, against ``view``)
        if current is None:
            current = holds_current(machine, view)
        if current:
            self.held, self.held_seq, self.stuck_seq = True, seq, -1
            self._settled = Settled(seq, self._sent_since_held)
            self._sent_since_held = False
        elif complete:
            self.stuck_seq = seq

    def sending(self, response: _Response, round: Round) -> None:
        """``response`` is about to be written in ``round`` (the client's answer may be
        read before the write returns)."""
        type_url = response.type_url
        if response.heartbeats:
            self._beat_nonces.add(response.nonce)
            # A heartbeat carries no cache change: its type waits for the one that does.
            since = None
        else:
            since = self._waiting.pop(type_url, round.changed)
        if since is not None:
            self._carrying[type_url] = since
        if not response.heartbeats:
            self.held, self.stuck_seq, self._sent_since_held = False, -1, True
        self._in_flight[type_url] = (response, self._seq)

    def sent(self, response: _Response, size: int, round: Round, now: float) -> Sent:
        """``response`` (``size`` bytes) was written at ``now``."""
        type_url = response.type_url
        record = self._record_of(type_url)
        record.sent_version, record.sent_nonce = response.version, response.nonce
        record.sent_at = self._wall(now)
        if response.heartbeats or response.carries_ttl:
            self._heartbeats.held(self.machine.shortest_ttl(), now)
        round.sent.add(type_url)
        return Sent(response, size, now - round.started)

    def end(self, round: Round) -> Settled | None:
        """The round is over: remember, for convergence, which types may still owe the
        cache change it carried; the client settled, if the round found so."""
        if round.changed is not None:
            for type_url in self.records:
                if type_url not in round.sent:
                    self._waiting.setdefault(type_url, round.changed)
        if not self._in_flight:
            # Nothing is in flight: what was not sent did not need the change. (A response in
            # flight, even one that carries no change, may hold back a type that does.)
            self._waiting.clear()
        settled, self._settled = self._settled, None
        return settled

    @property
    def heartbeat_at(self) -> float | None:
        """When the next heartbeat is due (``None``: none is planned)."""
        return self._heartbeats.at

    def refresh(self, type_url: str, names: Collection[str]) -> None:
        """Send ``names`` of ``type_url`` in full again, soon (see ``machine.refresh``)."""
        self.machine.refresh(type_url, names)
        self.requested = True

    # -- finishing -----------------------------------------------------------------------

    def finish(self, *, now: bool = False) -> None:
        """End the stream cleanly between two writes: once the client has answered every
        response in flight, or (``now``) at the next point between two writes."""
        self.finishing = True
        self._finish_now = self._finish_now or now

    @property
    def finished(self) -> bool:
        """Whether the stream is to end now (see `finish`)."""
        return self.finishing and (self._finish_now or not self._in_flight)

    # -- helpers --------------------------------------------------------------------------

    def _record_of(self, type_url: str) -> TypeRecord:
        record = self.records.get(type_url)
        if record is None:
            record = self.records[type_url] = TypeRecord()
        return record

    def _wall(self, now: float) -> float:
        """``now`` (monotonic) as wall-clock time, from when the stream opened."""
        info = self.info
        return info.connected_at + (now - info.opened_at)


def resource_policy(hook: ResourceAuthorizer | None, info: StreamInfo) -> Deny | None:
    """``hook`` for one stream, as its machine asks: by type URL and name."""
    if hook is None:
        return None
    return lambda type_url, name: hook(info, type_url, name)
