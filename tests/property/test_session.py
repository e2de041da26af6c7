"""The stream session (server/_session.py) against a model: no sockets, no sleeps.

A SotW client machine and a server machine wrapped in a :class:`StreamSession` exchange
requests and responses in memory; hypothesis picks what happens next (the client asks,
answers a response with an ACK or a NACK, the cache changes, time passes, a round of writes
runs, the stream is asked to finish) and a model written from the session's rules predicts
what the session must say:

* ``in_flight_until_answered``: a type is in flight from the write of a response until the
  client answers it; the stream finishes once asked and nothing is in flight (or at once).
* ``synced_once``: ``Synced`` comes once, with the first request after which every type the
  client asked for has had a response answered.
* ``requests_are_answered_at_once``: a request makes the session owe an answer; a round
  clears it.
* ``convergence_times_the_change``: an ACK of a response that carried a cache change reports
  the time from the change's first sighting to the ACK; no other ACK reports one.
* ``records_follow_the_wire``: each type's record holds the last version and nonce written
  and the last version acknowledged.
* ``heartbeats_within_the_fraction``: after a response carrying a TTL (or heartbeats, or a
  round when they were due) the next heartbeat is due no later than ``fraction`` of the
  shortest TTL held.
* ``settled_means_held``: a round says ``Settled`` only when the client holds exactly what
  the view gives it of every type it asked for (names and versions), nothing but heartbeats
  in flight, with the view's revision; once per cache change or response (not again while
  nothing changed); ``changed`` when a response was written since it last settled.
* ``settled_when_held``: a complete round that writes nothing new, with nothing new in
  flight and the client holding the view (its last answer of each type an ACK), finds it
  settled (says so, or had said so).
"""

from __future__ import annotations

from collections import deque

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from xdscore import CLUSTER, ENDPOINT, Snapshot, make_resource
from xdscore.builders import eds_cluster, load_assignment
from xdscore.protocol import RESOURCE_IN_SOTW, SUPPORTS_TTL, SotwClient, SotwResponse, SotwServer
from xdscore.protocol._events import ResponseAcked
from xdscore.server._callbacks import StreamInfo
from xdscore.server._facts import Converged, Synced
from xdscore.server._session import StreamSession
from xdscore.wire import DiscoveryResponse, make_node

from ..factories import nonce_source
from ._stable_view import StableView

FRACTION = 0.25
TTL = 4.0
NAMES = ("a", "b", "c")


def _snapshot(generation: int) -> Snapshot:
    clusters = [make_resource(eds_cluster(name)) for name in NAMES]
    endpoints = [
        make_resource(load_assignment(name, [("10.0.0.1", 1000 + generation)]), ttl=TTL)
        for name in NAMES
    ]
    return Snapshot([*clusters, *endpoints])


class SessionMachine(RuleBasedStateMachine):
    @initialize()
    def start(self) -> None:
        self.now = 100.0
        self.generation = 0
        self.view = StableView(_snapshot(0), None)
        info = StreamInfo(id=1, protocol="sotw", type_url=None, opened_at=self.now)
        self.server = SotwServer(nonce_source=nonce_source())
        self.session: StreamSession[object, SotwResponse] = StreamSession(
            self.server,
            info,
            assumed_features={},
            heartbeat_fraction=FRACTION,
            quiet=(),
        )
        node = make_node(id="edge", client_features=[SUPPORTS_TTL, RESOURCE_IN_SOTW])
        self.reject = False
        self.client = SotwClient(
            node=node, validate=lambda _type_url, _resources: "refused" if self.reject else None
        )
        self.wire: deque[SotwResponse] = deque()
        # The model.
        self.in_flight: dict[str, tuple[str, float | None]] = {}
        """Type -> (nonce, change time it carries) of the response awaiting an answer."""
        self.asked: set[str] = set()
        self.answered: set[str] = set()
        self.synced_count = 0
        self.owed = False
        self.changed_at: float | None = None
        self.waiting: dict[str, float] = {}
        self.finishing = False
        self.finish_now = False
        self.sent: dict[str, tuple[str, str]] = {}
        self.acked: dict[str, str] = {}
        self.ttl_sent_at: float | None = None
        self.held = False
        """The session said Settled, and nothing changed or was sent since."""
        self.rejecting: set[str] = set()
        """Types whose last response the client rejected (SotW: the server cannot tell
        what the client then holds: it may have dropped names it no longer asks for)."""
        self.sent_since_settled = False

    # -- the client ----------------------------------------------------------------------

    def _receive(self, request: object) -> None:
        facts = self.session.received(request, self.now)
        converged = [f for f in facts if isinstance(f, Converged)]
        acked = [f for f in facts if isinstance(f, ResponseAcked)]
        expected = []
        for ack in acked:
            nonce, since = self.in_flight.pop(ack.type_url, ("", None))
            assert nonce == ack.nonce
            self.answered.add(ack.type_url)
            self.acked[ack.type_url] = ack.version_info
            if since is not None:
                expected.append((ack.type_url, self.now - since))
        # convergence_times_the_change
        assert [(c.type_url, c.seconds) for c in converged] == expected
        self.synced_count += sum(1 for f in facts if isinstance(f, Synced))
        self.owed = self.session.requested

    @rule(type_url=st.sampled_from([CLUSTER, ENDPOINT]), names=st.sets(st.sampled_from(NAMES)))
    def client_asks(self, type_url: str, names: set[str]) -> None:
        wildcard = type_url == CLUSTER and not names
        request = self.client.watch(type_url, None if wildcard else sorted(names))
        self.asked.add(type_url)
        self._receive(request)
        # requests_are_answered_at_once
        assert self.session.requested

    @precondition(lambda self: bool(self.wire))
    @rule(reject=st.booleans())
    def client_answers(self, reject: bool) -> None:
        response = self.wire.popleft()
        record = DiscoveryResponse(
            type_url=response.type_url,
            version_info=response.version_info,
            nonce=response.nonce,
            resources=tuple(response.selection.resources.values()),
        )
        self.reject = reject
        answer = self.client.receive(record)
        if answer.error_detail is not None:
            self.in_flight.pop(response.type_url, None)
            self.answered.add(response.type_url)
            self.rejecting.add(response.type_url)
        else:
            self.rejecting.discard(response.type_url)
        self._receive(answer)

    # -- the server's side ----------------------------------------------------------------

    @rule()
    def cache_changes(self) -> None:
        self.generation += 1
        self.view = StableView(_snapshot(self.generation), self.view)
        self.session.cache_changed(self.now)
        self.held = False
        if self.changed_at is None:
            self.changed_at = self.now

    @rule(seconds=st.floats(min_value=0.01, max_value=3.0))
    def time_passes(self, seconds: float) -> None:
        self.now += seconds

    @rule()
    def round_of_writes(self) -> None:
        step = self.session.next_round(None, self.now)
        assert step.push
        round = self.session.begin(step.only, self.now)
        assert round.changed == self.changed_at
        self.changed_at = None
        self.owed = False
        at = self.session.heartbeat_at
        if at is not None and self.now >= at:
            self.ttl_sent_at = self.now  # heartbeats were due: the next are planned from now
        wrote_news = False
        for response in self.session.due(self.view, step.only, self.now, self.generation):
            self.session.sending(response, round)
            if not response.heartbeats:
                wrote_news = self.sent_since_settled = True
                self.held = False
            since = (
                None if response.heartbeats else self.waiting.pop(response.type_url, round.changed)
            )
            self.in_flight[response.type_url] = (response.nonce, since)
            self.session.sent(response, 100, round, self.now)
            self.sent[response.type_url] = (response.version_info, response.nonce)
            if response.carries_ttl or response.heartbeats:
                self.ttl_sent_at = self.now
            self.wire.append(response)
        settled = self.session.end(round)
        holds = self._client_holds_the_view() and all(r.heartbeats for r in self.wire)
        if settled is not None:
            # settled_means_held
            assert holds
            assert not self.held, "settled twice with nothing changed"
            assert settled.seq == self.generation
            assert settled.changed == self.sent_since_settled
            self.held, self.sent_since_settled = True, False
        elif step.only is None and not wrote_news and holds and not self.rejecting:
            # settled_when_held
            assert self.held
        if round.changed is not None:
            for type_url in self.session.records:
                if type_url not in round.sent:
                    self.waiting.setdefault(type_url, round.changed)
        if not self.in_flight:
            self.waiting.clear()

    def _client_holds_the_view(self) -> bool:
        for type_url in self.asked:
            # (What a request means is the protocol's business, checked elsewhere: after
            # names, an empty list is no names, not the wildcard. The server's reading.)
            state = self.server.type_state(type_url)
            assert state is not None
            wants = state.subscription.wants
            resources = self.view.resources(type_url) or {}
            wanted = {n: r.version for n, r in resources.items() if wants(n)}
            held = {n: r.version for n, r in self.client.holds(type_url).items()}
            if held != wanted:
                return False
        return True

    @rule(now=st.booleans())
    def asked_to_finish(self, now: bool) -> None:
        self.session.finish(now=now)
        self.finishing = True
        self.finish_now = self.finish_now or now

    # -- invariants ------------------------------------------------------------------------

    @invariant()
    def in_flight_until_answered(self) -> None:
        if not hasattr(self, "session"):
            return
        expected = self.finishing and (self.finish_now or not self.in_flight)
        assert self.session.finished == expected

    @invariant()
    def synced_once(self) -> None:
        if not hasattr(self, "session"):
            return
        done = bool(self.asked) and self.asked <= self.answered and not self.in_flight
        assert self.synced_count == (1 if self.session.synced else 0)
        if done:
            assert self.session.synced

    @invariant()
    def requests_are_answered_at_once(self) -> None:
        if hasattr(self, "session"):
            assert self.session.requested == self.owed

    @invariant()
    def records_follow_the_wire(self) -> None:
        if not hasattr(self, "session"):
            return
        for type_url, (version, nonce) in self.sent.items():
            record = self.session.records[type_url]
            assert (record.sent_version, record.sent_nonce) == (version, nonce)
        for type_url, version in self.acked.items():
            assert self.session.records[type_url].acked_version == version

    @invariant()
    def heartbeats_within_the_fraction(self) -> None:
        if not hasattr(self, "session") or self.ttl_sent_at is None:
            return
        at = self.session.heartbeat_at
        if at is not None:
            assert at <= self.ttl_sent_at + FRACTION * TTL + 1e-9


SessionMachine.TestCase.settings = settings(max_examples=300, stateful_step_count=40)
test_the_session_follows_its_rules = SessionMachine.TestCase
