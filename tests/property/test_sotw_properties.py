"""Stateful properties of the SotW server machine, driven through a real client machine.

A :class:`~xdscore.testing.SotwPair` joins an Envoy-like client machine to the server machine
over an in-memory ADS stream (one FIFO queue per direction, every message through the real
codec). Rules change the configuration (consistent Envoy resources, some carrying a marker
the client's ``validate`` hook NACKs), change what the client watches (legacy and explicit
wildcard included), arm a one-shot NACK, disconnect, and deliver requests and responses and
poll the server in any order gRPC allows: requests and responses cross freely.

The test keeps its own model of the stream, written from XDS_INVARIANTS.md rather than from
the machine: per type, the subscription the requests so far mean, the latest nonce and the
response still waiting for its ACK/NACK, the version the client is known to hold, the
version it NACKed last and whether it asked again. After every step the ``@invariant``
methods check what happened in that step against the model; their names carry the clause
number. ``teardown`` stops the rules, lets the pair settle and checks convergence.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import attrs
from hypothesis import event
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from xdscore import CLUSTER, ENDPOINT, Resource, Snapshot
from xdscore.builders import eds_cluster, load_assignment
from xdscore.protocol import ClientFeatures, Event, StaleNonceSeen
from xdscore.server._status import holds_current
from xdscore.testing import SotwPair
from xdscore.testing.strategies import (
    Disconnect,
    EnvoyConfig,
    NackNext,
    Watch,
    config_changes,
    configs,
    reject_marked,
    sotw_client_actions,
)
from xdscore.wire import type_info
from xdscore.wire._records import DiscoveryRequest, DiscoveryResponse

from ..factories import short
from . import _invariants as check
from ._heartbeats import HeartbeatRules
from ._model import (
    NAMES,
    NODE,
    STATEFUL,
    TYPES_IN_PLAY,
    Want,
    eds_closure,
    name_pool,
    resumable,
    sotw_want,
    wanted,
    with_ttls,
)
from ._stable_view import StableView, stable


@attrs.frozen
class TypeModel:
    """The model's view of one type on the current stream."""

    want: Want
    latest: str = ""
    unanswered: str | None = None
    """The nonce of the response whose ACK/NACK has not arrived yet."""
    acked: str | None = None
    """The version the client is known to hold: ACKed, or presented on the first request."""
    nacked: str | None = None
    """The version last NACKed, until an ACK or a subscription change."""
    owed: bool = False
    """The client asked again after every response was answered, or clusters were sent."""
    presented: str | None = None
    """The version_info of the type's first request on the stream."""
    rejected: str | None = None
    """The version last NACKed, until an ACK (what the server will not send again)."""
    requested: tuple[str, ...] = ()
    """The names of the type's last request, to tell a duplicate request."""


@attrs.frozen
class Expectation:
    """What one request must mean to the server, by the model."""

    first_of_type: bool
    stale_against: str | None = None
    acks: str | None = None
    """The version this request ACKs (its nonce is the unanswered one, no error_detail)."""
    nacks: str | None = None
    changed_to: Want | None = None
    stale_applied: bool = False
    """A stale nonce before anything of the type was sent: reported, names applied."""


@attrs.frozen
class RequestStep:
    request: DiscoveryRequest
    events: tuple[Event, ...]
    expect: Expectation
    first_of_stream: bool
    sent_nonces: frozenset[str]


@attrs.frozen
class OwedStep:
    """A poll that sent nothing of a type owed an answer (the selection's version)."""

    type_url: str
    before: TypeModel
    version: str


@attrs.frozen
class ResponseStep:
    response: DiscoveryResponse
    before: TypeModel
    duplicate_nonce: bool
    current: Mapping[str, Resource]
    """The view's resources of the type when the response was built."""
    held: Mapping[str, Resource]
    """What the server believed the client held (ordering reads it)."""
    held_back: frozenset[str]
    """Wanted names the ordering rules may hold back (see ``xdscore._ordering``)."""
    kept: frozenset[str]
    """Held names the ordering rules may keep (something held still refers to them)."""


class SotwProperties(RuleBasedStateMachine):
    """Rules and invariants over one SotwPair; subclasses fix ``ordered``."""

    ordered = False
    features = ClientFeatures()

    def __init__(self) -> None:
        super().__init__()
        self.config = EnvoyConfig()
        self.snapshot = self._snapshot_of(self.config)
        self.nack_next: set[str] = set()
        self.pool: list[str] = []
        self.version_of: dict[str, str] = {}
        """The version of every response sent, by nonce (nonces are unique across streams)."""
        self.content_of: dict[tuple[str, str], dict[str, str]] = {}
        """(name, version) pairs of every response sent, by (type URL, version_info)."""
        self.heartbeat_nonces: set[str] = set()
        """The nonces of the heartbeats sent."""

        self._stable: StableView | None = None
        self.pair = SotwPair(
            self._view,
            node=NODE,
            validate=self._validate,
            ordered=self.ordered,
            features=self.features,
        )
        self._new_stream()
        self._fresh_step()

    def _snapshot_of(self, config: EnvoyConfig) -> Snapshot:
        """The snapshot served for ``config``."""
        return config.snapshot()

    def _view(self) -> StableView:
        """The snapshot as served: the unchanged types through the last view's mappings."""
        self._stable = stable(self.snapshot, self._stable)
        return self._stable

    def _new_stream(self) -> None:
        self.types: dict[str, TypeModel] = {}
        self.nonces: list[str] = []
        self.first_of_stream = True
        self.endpoints_owed = False
        """Inv. 35: a cluster response was sent on this stream and no endpoints since."""

    def _validate(self, type_url: str, resources: Sequence[Resource]) -> str | None:
        if type_url in self.nack_next:
            self.nack_next.discard(type_url)
            return "the test armed a NACK of the next response"
        return reject_marked(type_url, resources)

    def _fresh_step(self) -> None:
        self.new_requests = []
        self.new_responses = []
        self.unanswered_owed: list[OwedStep] = []

    # --- rules -----------------------------------------------------------------------------

    @initialize(names=NAMES, types=TYPES_IN_PLAY, data=st.data())
    def start(self, names: list[str], types: tuple[str, ...], data: st.DataObject) -> None:
        self.config = data.draw(configs(names, marked=True), label="config")
        self.snapshot = self._snapshot_of(self.config)
        self.pool = name_pool(self.config, names)
        self.actions = sotw_client_actions(types, st.sampled_from(self.pool))

    @rule(data=st.data())
    def change_config(self, data: st.DataObject) -> None:
        self._fresh_step()
        for _ in range(data.draw(st.integers(1, 3), label="edits")):
            change = data.draw(config_changes(self.config, self.pool), label="change")
            self.config = change.apply(self.config)
        self.snapshot = self._snapshot_of(self.config)

    @rule(data=st.data())
    def client_acts(self, data: st.DataObject) -> None:
        self._fresh_step()
        action = data.draw(self.actions, label="action")
        if isinstance(action, Watch):
            self.pair.send(self.pair.client.watch(action.type_url, action.names))
        elif isinstance(action, NackNext):
            if action.enabled:
                self.nack_next.add(action.type_url)
            else:
                self.nack_next.discard(action.type_url)
        elif isinstance(action, Disconnect):
            self._disconnect()
            event("sotw: disconnect")

    def _disconnect(self) -> None:
        self.pair.disconnect()
        self._new_stream()

    @precondition(lambda self: self.pair.requests)
    @rule()
    def deliver_request(self) -> None:
        self._fresh_step()
        request = self.pair.requests[0]
        events = self.pair.deliver_request()
        self.new_requests.append(
            RequestStep(
                request=request,
                events=tuple(events),
                expect=self._apply_request(request),
                first_of_stream=self.first_of_stream,
                sent_nonces=frozenset(self.nonces),
            )
        )
        self.first_of_stream = False

    @rule()
    def poll(self) -> None:
        self._fresh_step()
        responses = self.pair.poll()
        for response in responses:
            self.new_responses.append(self._apply_response(response))
        judged = self.pair.server.polled_current
        if judged is not None and not responses:
            # What the runtime reads after such a poll instead of asking holds_current.
            assert judged == holds_current(self.pair.server, self.snapshot), (
                f"the poll judged the client current: {judged}, holds_current: {not judged}"
            )
        if self.ordered:
            return  # make-before-break may hold an owed response back (checked by inv21)
        answered = {response.type_url for response in responses}
        for type_url, model in self.types.items():
            owed = model.owed or (type_url == ENDPOINT and self.endpoints_owed)
            if type_url in answered or model.unanswered is not None or not owed:
                continue
            subscription = self.pair.server.subscription(type_url)
            assert subscription is not None
            selection = self.snapshot.select(type_url, subscription)
            if selection is not None:
                self.unanswered_owed.append(OwedStep(type_url, model, selection.version))

    @precondition(lambda self: self.pair.responses)
    @rule()
    def deliver_response(self) -> None:
        self._fresh_step()
        self.pair.deliver_response()

    # --- the model -------------------------------------------------------------------------

    def _apply_request(self, request: DiscoveryRequest) -> Expectation:
        type_url = request.type_url
        model = self.types.get(type_url)
        if model is None:
            want = sotw_want(None, request.resource_names, type_url)
            presented = request.version_info or None
            trusted = presented if resumable(type_url, want) else None
            self.types[type_url] = TypeModel(
                want=want, acked=trusted, presented=presented, requested=request.resource_names
            )
            return Expectation(first_of_type=True, changed_to=want)
        nonce = request.response_nonce
        stale = None
        if nonce and nonce != model.latest:
            event("sotw: stale nonce")
            if model.latest:
                return Expectation(first_of_type=False, stale_against=model.latest)
            # Nothing of the type was sent: reported, but the names still count.
            stale = model.latest
        acks = nacks = None
        if nonce and nonce == model.unanswered:
            version = self.version_of[nonce]
            if request.error_detail is not None and nonce in self.heartbeat_nonces:
                # A rejected heartbeat repeated what the client holds: it still holds that.
                event("sotw: NACK of a heartbeat")
                nacks = version
                model = attrs.evolve(model, unanswered=None)
            elif request.error_detail is not None:
                event("sotw: NACK")
                nacks = version
                model = attrs.evolve(
                    model, nacked=version, rejected=version, acked=None, unanswered=None
                )
            else:
                acks = version
                model = attrs.evolve(
                    model, nacked=None, rejected=None, acked=version, unanswered=None
                )
        elif model.unanswered is None and model.latest:
            duplicate = (
                nonce == model.latest
                and request.error_detail is None
                and request.resource_names == model.requested
                and request.version_info == (model.acked or "")
            )
            if duplicate:
                event("sotw: duplicate request, not answered")
            else:
                model = attrs.evolve(model, owed=True)
        model = attrs.evolve(model, requested=request.resource_names)
        want = sotw_want(model.want, request.resource_names, type_url)
        changed_to = None
        if want != model.want:
            if model.nacked is not None:
                event("sotw: subscription changed after a NACK")
            changed_to = want
            model = attrs.evolve(model, want=want, nacked=None)
            if not model.latest and not resumable(type_url, want):
                model = attrs.evolve(model, acked=None)
        self.types[type_url] = model
        return Expectation(
            first_of_type=False,
            stale_against=stale,
            acks=acks,
            nacks=nacks,
            changed_to=changed_to,
            stale_applied=stale is not None,
        )

    def _apply_response(self, response: DiscoveryResponse) -> ResponseStep:
        type_url = response.type_url
        before = self.types[type_url]
        current = self.snapshot.resources(type_url) or {}
        server = self.pair.server
        holding = server.type_states()[type_url].held
        held = dict(holding.resources) if holding is not None else {}
        held_back: frozenset[str] = frozenset()
        kept: frozenset[str] = frozenset()
        if self.ordered:
            allowed = check.ordering(server, self.snapshot, type_url)
            held_back, kept = allowed.held_back, allowed.kept & held.keys()
        if type_url == ENDPOINT and self.endpoints_owed:
            before = attrs.evolve(before, owed=True)
        step = ResponseStep(
            response=response,
            before=before,
            duplicate_nonce=response.nonce in self.nonces,
            current=current,
            held=held,
            held_back=held_back,
            kept=kept,
        )
        if step.held_back & step.current.keys() - {r.name for r in response.resources}:
            event("sotw: ordering held something back")
        if {r.name for r in response.resources} - step.current.keys():
            event("sotw: ordering kept a deleted resource")
        if self.first_of_stream is False and len(self.nonces) == 0 and self.pair.streams > 1:
            event("sotw: first response after a reconnect")
        if response.version_info == before.acked:
            event("sotw: owed re-send of held content")
        self.nonces.append(response.nonce)
        self.version_of[response.nonce] = response.version_info
        self.content_of[type_url, response.version_info] = {
            r.name: r.version for r in response.resources
        }
        self.types[type_url] = attrs.evolve(
            before, latest=response.nonce, unanswered=response.nonce, owed=False
        )
        if type_url == CLUSTER:
            # Inv. 35: clusters warm until their endpoints arrive, so EDS is owed an answer.
            self.endpoints_owed = True
        elif type_url == ENDPOINT:
            self.endpoints_owed = False
        return step

    # --- per-step invariants ---------------------------------------------------------------

    @invariant()
    def every_step_keeps_the_invariants(self) -> None:
        """Each ``invNN_`` check below, over what the last step did (or the whole stream)."""
        check.inv01_node_identified_on_the_first_request_only(self.new_requests, NODE)
        self.inv06_stale_nonce_reported_and_ignored()
        self.inv10_inv11_ack_and_nack_pair_with_the_sent_nonce()
        check.inv15_inv17_subscription_changes_reported(self.new_requests)
        check.inv04_resource_type_urls_equal_the_response_type_url(self.new_responses)
        check.inv05_nonces_unique_per_stream(self.new_responses)
        check.inv06_at_most_one_unacked_response_per_type(self.new_responses)
        self.inv09_unchanged_content_is_not_resent()
        self.inv12_nacked_version_not_resent()
        self.inv21_lds_cds_responses_are_full_state()
        check.inv22_no_duplicate_names_in_a_response(self.new_responses)
        self.inv20_inv35_owed_answers_are_sent()
        check.inv17_server_subscription_equals_the_model(self.pair.server, self.types)

    # --- requests --------------------------------------------------------------------------

    def inv06_stale_nonce_reported_and_ignored(self) -> None:
        for step in self.new_requests:
            stale = [e for e in step.events if isinstance(e, StaleNonceSeen)]
            if step.expect.stale_against is None:
                assert not stale, f"{step.request} is not stale, yet {stale}"
                continue
            expected = StaleNonceSeen(
                type_url=step.request.type_url,
                nonce=step.request.response_nonce,
                latest=step.expect.stale_against,
            )
            if step.expect.stale_applied:
                assert stale == [expected], (step.request, step.events)
                continue
            assert list(step.events) == [expected], (
                f"a request echoing a stale nonce must be reported and otherwise ignored: "
                f"{step.request} gave {step.events}"
            )

    def inv10_inv11_ack_and_nack_pair_with_the_sent_nonce(self) -> None:
        for step in self.new_requests:
            request = step.request
            if request.response_nonce and not step.expect.first_of_type:
                assert request.response_nonce in step.sent_nonces, (
                    f"the client echoed a nonce never sent on this stream: {request}"
                )
            check.inv10_ack_reported(request, step.events, step.expect.acks)
            nacked = check.inv11_nack_reported(request, step.events, step.expect.nacks)
            if nacked is not None:
                assert nacked.version_info == request.version_info, (request, nacked)

    # --- responses -------------------------------------------------------------------------

    def inv09_unchanged_content_is_not_resent(self) -> None:
        for step in self.new_responses:
            if step.response.version_info == step.before.acked:
                assert step.before.owed, (
                    f"{short(step.response.type_url)} version {step.before.acked} re-sent to a "
                    f"client that holds it and did not ask again"
                )

    def inv12_nacked_version_not_resent(self) -> None:
        for step in self.new_responses:
            assert step.response.version_info != step.before.nacked, (
                f"{short(step.response.type_url)} version {step.before.nacked} was NACKed and "
                f"re-sent although the subscription did not change"
            )

    def inv21_lds_cds_responses_are_full_state(self) -> None:
        for step in self.new_responses:
            type_url = step.response.type_url
            sent = {r.name: r.version for r in step.response.resources}
            due = wanted(step.before.want, step.current)
            full_state = type_info(type_url).sotw_full_state
            extra = check.not_current_or_not_wanted(
                step.response.resources, step.before.want, step.current
            )
            for name, version in extra.items():
                held = step.held.get(name)
                assert held is not None, (
                    f"{short(type_url)} response carries {name!r} at {version}, neither the "
                    f"current wanted version nor one the client holds"
                )
                assert held.version == version, f"{short(type_url)} {name!r} at {version}"
                if name in due:  # a changed resource held back by make-before-break
                    assert name in step.held_back, f"{short(type_url)} {name!r} held back"
                else:  # a resource kept because something held refers to it
                    assert full_state, f"{short(type_url)} response carries unwanted {name!r}"
                    assert name in step.kept, f"{short(type_url)} {name!r} kept needlessly"
            if not full_state:
                continue
            for name in due.keys() - sent.keys():
                lacks = f"full-state {short(type_url)} response lacks {name!r} ({sorted(sent)})"
                assert name in step.held_back, lacks
                assert name not in step.held, lacks

    def inv20_inv35_owed_answers_are_sent(self) -> None:
        """A type the client asked for again (inv. 20), or endpoints after clusters were sent
        on ADS (inv. 35), is answered on the next poll unless that is the NACKed version."""
        for step in self.unanswered_owed:
            assert step.version == step.before.rejected, (
                f"{short(step.type_url)} is owed an answer (version {step.version}); "
                f"the poll sent nothing"
            )

    # --- the whole stream ------------------------------------------------------------------

    # --- convergence -----------------------------------------------------------------------

    def teardown(self) -> None:
        if not self.pool:
            return
        self.nack_next.clear()
        if self.config.marked:
            # (Otherwise the view stays the same object: what the server left unlooked-at
            # against it must still converge.)
            self.config = self.config.unmarked()
            self.snapshot = self._snapshot_of(self.config)
        client = self.pair.client
        if self.ordered and client.type_state(ENDPOINT) is not None:
            # Envoy subscribes to the endpoints of every EDS cluster it holds; a client that
            # does not is held back by make-before-break on purpose (xdscore._ordering).
            state = client.type_state(ENDPOINT)
            assert state is not None
            names = set(state.subscription.names) | eds_closure(self.config)
            if state.subscription.wildcard:
                names.add("*")
            self.pair.send(client.watch(ENDPOINT, names))
        self._settle()
        if any(client.type_state(t).last_error is not None for t in client.type_urls()):  # type: ignore[union-attr]
            # The server does not re-send what the client NACKed (inv. 12): a new stream does.
            self._disconnect()
            self._settle()
        self.inv21_client_converges_to_the_subscribed_snapshot()
        self.inv07_reconnect_resumes_without_resending()
        self.inv21_client_converges_to_the_subscribed_snapshot()

    def inv07_reconnect_resumes_without_resending(self) -> None:
        """Inv. 7/8: a reconnecting client presents the version it accepted; when that is the
        version of what its subscription selects now, nothing of the type is sent (except
        endpoints after clusters, inv. 35)."""
        client = self.pair.client
        current = set()
        for type_url in client.type_urls():
            state = client.type_state(type_url)
            assert state is not None
            if state.subscription.empty:
                continue  # sent as an empty list: legacy wildcard again on a new stream
            if not resumable(type_url, Want.of(state.subscription)):
                continue  # inv. 8: a version is only trusted for wildcard full state
            selection = self.snapshot.select(type_url, state.subscription)
            if selection is not None and selection.version == state.version_info:
                current.add(type_url)
        sent = len(self.pair.sent)
        self._disconnect()
        self._settle()
        resent = [r for r in self.pair.sent[sent:] if r.type_url in current]
        if any(r.type_url == CLUSTER for r in self.pair.sent[sent:]):
            resent = [r for r in resent if r.type_url != ENDPOINT]
        assert not resent, f"a reconnecting client holding the current state was sent {resent}"

    def _settle(self) -> None:
        for _ in range(10_000):
            if self.pair.requests:
                self.deliver_request()
            elif self.pair.responses:
                self.deliver_response()
            else:
                self.poll()
                if not self.new_responses:
                    return
            self.every_step_keeps_the_invariants()
        raise AssertionError("the pair did not settle")

    def inv21_client_converges_to_the_subscribed_snapshot(self) -> None:
        """Settled, every type ACKed: the client holds what it watches of the snapshot; for
        types that are not full state it may keep watched names the snapshot deleted."""
        client = self.pair.client
        for type_url in client.type_urls():
            state = client.type_state(type_url)
            assert state is not None
            want = Want.of(state.subscription)
            check.assert_holds_the_subscribed_snapshot(
                type_url,
                {name: r.version for name, r in client.holds(type_url).items()},
                self.snapshot.resources(type_url) or {},
                want.wants,
                described=f"watching {want}",
                exact=type_info(type_url).sotw_full_state,
            )


class SotwUnorderedProperties(SotwProperties):
    ordered = False


class SotwOrderedProperties(SotwProperties):
    ordered = True


@attrs.frozen
class HeartbeatStep:
    response: DiscoveryResponse
    before: TypeModel
    duplicate_nonce: bool
    version: str | None
    """The version of what the subscription selects when the heartbeat went out."""
    current: Mapping[str, Resource]


class SotwTtlProperties(HeartbeatRules, SotwProperties):
    """The ordered machine with TTLs on clusters, endpoints and listeners, a client that reads TTLs
    and wrapped entries, and heartbeats at any step (inv. 38). A SotW heartbeat repeats the
    held state at the held version; the model pairs its ACK or NACK like a response's."""

    ordered = True
    label = "sotw"
    features = ClientFeatures(ttl=True, resource_in_sotw=True)

    def _snapshot_of(self, config: EnvoyConfig) -> Snapshot:
        return with_ttls(config.snapshot())

    def _fresh_step(self) -> None:
        super()._fresh_step()
        self.new_heartbeats: list[HeartbeatStep] = []

    def _holds_a_ttl(self) -> bool:
        """Whether the server believes the client holds a resource with a TTL."""
        for state in self.pair.server.type_states().values():
            if state.held is not None and state.held.shortest_ttl is not None:
                return True
        return False

    def _beat(self) -> None:
        for response in self.pair.heartbeat():
            type_url = response.type_url
            before = self.types[type_url]
            subscription = self.pair.server.subscription(type_url)
            assert subscription is not None
            selection = self.snapshot.select(type_url, subscription)
            self.new_heartbeats.append(
                HeartbeatStep(
                    response=response,
                    before=before,
                    duplicate_nonce=response.nonce in self.nonces,
                    version=selection.version if selection is not None else None,
                    current=self.snapshot.resources(type_url) or {},
                )
            )
            self.nonces.append(response.nonce)
            self.version_of[response.nonce] = response.version_info
            self.heartbeat_nonces.add(response.nonce)
            self.types[type_url] = attrs.evolve(
                before, latest=response.nonce, unanswered=response.nonce
            )

    @invariant()
    def inv38_heartbeats_repeat_what_the_client_holds_unchanged(self) -> None:
        """Each heartbeat: one per type with nothing in flight, a fresh nonce, the version the
        client holds, which is what its subscription selects now; every resource current,
        wanted and (but for full-state types, which repeat their whole state) with a TTL."""
        for step in self.new_heartbeats:
            response, before = step.response, step.before
            kind = short(response.type_url)
            assert before.unanswered is None, f"{kind} heartbeat while a response is in flight"
            assert not step.duplicate_nonce, f"{kind} heartbeat reuses nonce {response.nonce}"
            assert response.version_info == before.acked, (
                f"{kind} heartbeat at {response.version_info}, the client holds {before.acked}"
            )
            assert response.version_info == step.version, f"{kind} heartbeat of changed state"
            assert not before.owed, f"{kind} heartbeat instead of an owed answer"
            full_state = type_info(response.type_url).sotw_full_state
            for resource in response.resources:
                current = step.current.get(resource.name)
                assert current is not None, f"{kind} heartbeat of {resource.name!r}: gone"
                assert resource.version == current.version, f"{kind} {resource.name!r} changed"
                assert resource.ttl == current.ttl, f"{kind} {resource.name!r}: TTL not sent"
                assert before.want.wants(resource.name), f"{kind} {resource.name!r} unwanted"
                if not full_state:
                    assert current.ttl is not None, f"{kind} {resource.name!r}: no TTL"

    def teardown(self) -> None:
        """Converged, a heartbeat of everything held goes out and changes nothing held."""
        super().teardown()
        if not self.pool:
            return
        self._fresh_step()
        self.converged = True
        self._beat()
        self._tell()
        self.inv38_heartbeats_repeat_what_the_client_holds_unchanged()
        self._settle()
        self.inv21_client_converges_to_the_subscribed_snapshot()


TestSotwUnordered = SotwUnorderedProperties.TestCase
TestSotwOrdered = SotwOrderedProperties.TestCase
TestSotwTtl = SotwTtlProperties.TestCase
TestSotwUnordered.settings = TestSotwOrdered.settings = TestSotwTtl.settings = STATEFUL


def _resume_pair() -> SotwPair:
    snapshot = Snapshot([eds_cluster("x"), load_assignment("x", [("10.0.0.1", 80)])])
    return SotwPair(lambda: snapshot, node=NODE)


def test_inv08_resume_only_when_the_client_holds_its_version() -> None:
    pair = _resume_pair()
    pair.send(pair.client.watch(ENDPOINT, ["x"]))
    pair.deliver_request()
    pair.poll()  # EDS {x} at version V is in flight
    pair.send(pair.client.watch(ENDPOINT, ["other"]))
    pair.deliver_response()  # the client accepts V but keeps nothing: it no longer watches x
    pair.send(pair.client.watch(ENDPOINT, ["x"]))
    pair.disconnect()  # the stream drops before the server answers; V is presented again
    pair.settle()
    assert "x" in pair.client.holds(ENDPOINT)


def test_inv08_subscription_change_before_the_first_response_after_reconnect() -> None:
    pair = _resume_pair()
    pair.send(pair.client.watch(ENDPOINT, ["x"]))
    pair.settle()
    pair.disconnect()  # the reconnect request presents V = {x}
    pair.send(pair.client.watch(ENDPOINT, ["other"]))  # the client drops x ...
    pair.send(pair.client.watch(ENDPOINT, ["x"]))  # ... and wants it again
    pair.settle()  # the server still takes V as held: nothing is sent
    assert "x" in pair.client.holds(ENDPOINT)
