"""Stateful properties of the Delta server machine, driven through a real client machine.

A :class:`~xdscore.testing.DeltaPair` joins an Envoy-like Delta client machine to the server
machine over an in-memory ADS stream (one FIFO queue per direction, the real codec). Rules
change the configuration, subscribe and unsubscribe (wildcard included), arm one-shot NACKs,
disconnect, deliver and poll in any order gRPC allows, and two things the Envoy-like client
never does by itself but the protocol allows: a subscription change that echoes an old nonce
(inv. 26: honoured all the same) and an ACK/NACK that also changes the subscription (inv. 13).

The model keeps, per type and stream, what the requests mean (:func:`delta_want`), what the
server can know the client holds (``initial_resource_versions`` then ACKs), the names owed
an answer (inv. 28, 30, 31; endpoints after clusters, inv. 35), the versions NACKed (inv. 12)
and the response awaiting its ACK. ``@invariant`` checks run after every step; ``teardown``
settles the pair and checks convergence (wildcard semantics included).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import attrs
from hypothesis import event
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from xdscore import CLUSTER, ENDPOINT, LISTENER, Resource, Snapshot
from xdscore.builders import eds_cluster, http_listener, load_assignment
from xdscore.protocol import (
    WILDCARD,
    ClientFeatures,
    DeltaDiscoveryRequest,
    Event,
    StaleNonceSeen,
)
from xdscore.testing import DeltaPair
from xdscore.testing.strategies import (
    NACK_MARKER,
    Disconnect,
    EnvoyConfig,
    NackNext,
    Subscribe,
    Unsubscribe,
    config_changes,
    configs,
    delta_client_actions,
    reject_marked,
)
from xdscore.wire._records import DeltaDiscoveryResponse

from ..factories import short
from . import _invariants as check
from ._heartbeats import HeartbeatRules
from ._model import (
    NAMES,
    NODE,
    STATEFUL,
    TYPES_IN_PLAY,
    Want,
    delta_want,
    eds_closure,
    name_pool,
    with_ttls,
)

REMOVED = "<removed>"
"""The version the model records for a NACKed removal."""


@attrs.frozen
class TypeModel:
    """The model's view of one type on the current stream."""

    want: Want
    acked: Mapping[str, str] = attrs.field(factory=dict)
    """Name → version the server can know the client holds."""
    owed: frozenset[str] = frozenset()
    """Names the client asked about (subscribed, or unsubscribed while in the wildcard)."""
    warm: frozenset[str] = frozenset()
    """Endpoints owed because their clusters were sent (inv. 35)."""
    rejected: Mapping[str, str] = attrs.field(factory=dict)
    """Name → version (or :data:`REMOVED`) NACKed and not ACKed since."""
    unanswered: str | None = None
    latest: str = ""
    phantom: Mapping[str, str] = attrs.field(factory=dict)
    """Name → version ACKed although the subscription no longer wanted it when the ACK
    arrived: the client dropped it (inv. 19), the server counts it as held (a known bug)."""
    initial: Mapping[str, str] | None = None
    """The initial_resource_versions, until the first response of the type on the stream."""
    pristine: bool = True
    """No request after the first one arrived yet (for the exact reconnect difference)."""


@attrs.frozen
class Expectation:
    first_of_type: bool
    stale: bool = False
    acks: str | None = None
    nacks: str | None = None
    changed_to: Want | None = None


@attrs.frozen
class RequestStep:
    request: DeltaDiscoveryRequest
    events: tuple[Event, ...]
    expect: Expectation
    first_of_stream: bool


@attrs.frozen
class ResponseStep:
    response: DeltaDiscoveryResponse
    before: TypeModel
    duplicate_nonce: bool
    current: Mapping[str, Resource]
    deferred: frozenset[str]
    """Names make-before-break may hold back now (blocked additions, kept removals)."""


@attrs.frozen
class SilentStep:
    """A poll that sent nothing of a type although names were owed."""

    type_url: str
    before: TypeModel
    deferred: frozenset[str]


@attrs.frozen
class ReconnectStep:
    held: Mapping[str, Mapping[str, str]]
    requests: tuple[DeltaDiscoveryRequest, ...]


class DeltaProperties(RuleBasedStateMachine):
    """Rules and invariants over one DeltaPair; subclasses fix ``ordered``."""

    ordered = False
    features = ClientFeatures()

    def __init__(self) -> None:
        super().__init__()
        self.config = EnvoyConfig()
        self.snapshot = self._snapshot_of(self.config)
        self.nack_next: set[str] = set()
        self.pool: list[str] = []
        self.sent: dict[str, DeltaDiscoveryResponse] = {}
        """Every response sent, by nonce (nonces are unique across streams)."""
        self.heartbeat_nonces: set[str] = set()
        """The nonces of the heartbeats among them."""
        self.pair = DeltaPair(
            lambda: self.snapshot,
            node=NODE,
            validate=self._validate,
            ordered=self.ordered,
            features=self.features,
        )
        self.holdings_seen: dict[int, tuple[object, dict[str, object]]] = {}
        """Every holdings mapping a state held, with its contents when first seen."""
        self._new_stream()
        self._fresh_step()

    def _snapshot_of(self, config: EnvoyConfig) -> Snapshot:
        """The snapshot served for ``config``."""
        return config.snapshot()

    def _new_stream(self) -> None:
        self.types: dict[str, TypeModel] = {}
        self.nonces: list[str] = []
        self.first_of_stream = True
        self.endpoints_pending: frozenset[str] = frozenset()
        """Endpoints owed by clusters sent before the EDS subscription arrived (inv. 35)."""

    def _fresh_step(self) -> None:
        self.new_requests: list[RequestStep] = []
        self.new_responses: list[ResponseStep] = []
        self.silent: list[SilentStep] = []
        self.reconnect: ReconnectStep | None = None

    def _validate(self, type_url: str, resources: Sequence[Resource]) -> str | None:
        if type_url in self.nack_next:
            self.nack_next.discard(type_url)
            return "the test armed a NACK of the next response"
        return reject_marked(type_url, resources)

    # --- rules -----------------------------------------------------------------------------

    @initialize(names=NAMES, types=TYPES_IN_PLAY, data=st.data())
    def start(self, names: list[str], types: tuple[str, ...], data: st.DataObject) -> None:
        self.config = data.draw(configs(names, marked=True), label="config")
        self.snapshot = self._snapshot_of(self.config)
        self.pool = name_pool(self.config, names)
        self.actions = delta_client_actions(types, st.sampled_from(self.pool))

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
        if isinstance(action, NackNext):
            if action.enabled:
                self.nack_next.add(action.type_url)
            else:
                self.nack_next.discard(action.type_url)
        elif isinstance(action, Disconnect):
            self._disconnect()
        else:
            request = self._subscription_request(action)
            if request is None:
                return
            if data.draw(st.booleans(), label="old nonce"):
                # Inv. 26: the nonce only pairs ACK/NACK; a change carrying another is applied.
                state = self.pair.client.type_state(action.type_url)
                nonce = state.nonce if state is not None and state.nonce else "never-sent"
                event("delta: subscription change echoing an old nonce")
                request = attrs.evolve(request, response_nonce=nonce)
            self.pair.send(request)

    def _subscription_request(
        self, action: Subscribe | Unsubscribe
    ) -> DeltaDiscoveryRequest | None:
        client = self.pair.client
        if isinstance(action, Subscribe):
            return client.subscribe(action.type_url, action.names)
        if isinstance(action, Unsubscribe) and client.type_state(action.type_url) is not None:
            return client.unsubscribe(action.type_url, action.names)
        return None

    @precondition(lambda self: self.pair.responses)
    @rule(data=st.data())
    def deliver_response_and_change_subscription(self, data: st.DataObject) -> None:
        """Inv. 13: one request both ACKs/NACKs and changes the subscription."""
        self._fresh_step()
        response = self.pair.responses.popleft()
        ack = self.pair.client.receive(response)
        names = data.draw(st.lists(st.sampled_from([*self.pool, WILDCARD]), max_size=3))
        if data.draw(st.booleans(), label="unsubscribe"):
            change = self.pair.client.unsubscribe(response.type_url, names)
        else:
            change = self.pair.client.subscribe(response.type_url, names)
        event("delta: ACK/NACK with a subscription change")
        self.pair.send(
            attrs.evolve(change, response_nonce=ack.response_nonce, error_detail=ack.error_detail)
        )

    def _disconnect(self) -> None:
        client = self.pair.client
        held = {
            t: {name: r.version for name, r in client.holds(t).items()} for t in client.type_urls()
        }
        self.pair.disconnect()
        self._new_stream()
        self.reconnect = ReconnectStep(held=held, requests=tuple(self.pair.requests))
        event("delta: disconnect")

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
            )
        )
        self.first_of_stream = False

    @rule()
    def poll(self) -> None:
        self._fresh_step()
        responses = self.pair.poll()
        answered = {response.type_url for response in responses}
        for response in responses:  # in order: clusters sent make endpoints owed (inv. 35)
            before = self.types[response.type_url]
            self.new_responses.append(self._apply_response(response, before))
        for type_url, model in self.types.items():
            if type_url not in answered and model.unanswered is None and (model.owed | model.warm):
                self.silent.append(SilentStep(type_url, model, self._deferred(type_url)))

    @precondition(lambda self: self.pair.responses)
    @rule()
    def deliver_response(self) -> None:
        self._fresh_step()
        self.pair.deliver_response()

    # --- the model -------------------------------------------------------------------------

    def _apply_request(self, request: DeltaDiscoveryRequest) -> Expectation:
        type_url = request.type_url
        subscribe = frozenset(request.resource_names_subscribe)
        unsubscribe = frozenset(request.resource_names_unsubscribe)
        model = self.types.get(type_url)
        if model is None:
            want = delta_want(None, subscribe, unsubscribe, type_url)
            initial = dict(request.initial_resource_versions)
            warm = frozenset()
            if type_url == ENDPOINT:
                warm = frozenset(n for n in self.endpoints_pending if want.wants(n))
                self.endpoints_pending = frozenset()
            self.types[type_url] = TypeModel(
                want=want,
                acked=initial,
                owed=subscribe - {WILDCARD} - initial.keys(),
                warm=warm,
                initial=initial,
            )
            return Expectation(first_of_type=True, changed_to=want)
        model = attrs.evolve(model, pristine=False)
        expect = Expectation(first_of_type=False)
        nonce = request.response_nonce
        if nonce and nonce == model.unanswered:
            response = self.sent[nonce]
            if request.error_detail is not None and nonce in self.heartbeat_nonces:
                # A rejected heartbeat carried nothing to apply: nothing changes but the nonce.
                event("delta: NACK of a heartbeat")
                model = attrs.evolve(model, unanswered=None)
                expect = attrs.evolve(expect, nacks=response.system_version_info)
            elif request.error_detail is not None:
                event("delta: NACK")
                rejected = dict(model.rejected)
                rejected.update({r.name: r.version for r in response.resources})
                rejected.update(dict.fromkeys(response.removed_resources, REMOVED))
                # The client may have applied the valid part: those names are held at a
                # version the server cannot know (the one before, or the one rejected).
                acked = dict(model.acked)
                for resource in response.resources:
                    if model.want.wants(resource.name):
                        acked[resource.name] = ""
                model = attrs.evolve(model, acked=acked, rejected=rejected, unanswered=None)
                expect = attrs.evolve(expect, nacks=response.system_version_info)
            else:
                acked = dict(model.acked)
                rejected = dict(model.rejected)
                phantom = dict(model.phantom)
                for resource in response.resources:
                    if model.want.wants(resource.name):
                        acked[resource.name] = resource.version
                    else:  # the client ignored it (inv. 19)
                        acked.pop(resource.name, None)
                        phantom[resource.name] = resource.version
                    rejected.pop(resource.name, None)
                for name in response.removed_resources:
                    acked.pop(name, None)
                    rejected.pop(name, None)
                model = attrs.evolve(
                    model, acked=acked, rejected=rejected, phantom=phantom, unanswered=None
                )
                expect = attrs.evolve(expect, acks=response.system_version_info)
        elif nonce:
            event("delta: stale nonce")
            expect = attrs.evolve(expect, stale=True)
        want = delta_want(model.want, subscribe, unsubscribe, type_url)
        owed = model.owed | (subscribe - {WILDCARD})
        warm = model.warm
        acked = dict(model.acked)
        rejected = model.rejected
        dropped = unsubscribe - {WILDCARD}
        if dropped:
            if want.wildcard:
                owed |= dropped  # inv. 30: still in the wildcard or not? The server must say.
            else:
                owed -= dropped - subscribe
                warm -= dropped - subscribe  # no longer wanted: nothing left to warm
                acked = {n: v for n, v in acked.items() if n not in dropped}
        if WILDCARD in unsubscribe and not want.wildcard:
            acked = {n: v for n, v in acked.items() if n in want.names}
        if acked.keys() != model.acked.keys():
            # What the client stopped wanting is forgotten, its NACKs included: asking for it
            # again asks for it anew.
            rejected = {n: v for n, v in rejected.items() if want.wants(n)}
        phantom = {n: v for n, v in model.phantom.items() if n not in unsubscribe}
        model = attrs.evolve(
            model,
            want=want,
            owed=owed,
            warm=warm,
            acked=acked,
            rejected=rejected,
            phantom=phantom,
        )
        if want != self.types[type_url].want:
            expect = attrs.evolve(expect, changed_to=want)
        self.types[type_url] = model
        return expect

    def _deferred(self, type_url: str) -> frozenset[str]:
        """What make-before-break may hold back of ``type_url`` right now."""
        if not self.ordered:
            return frozenset()
        allowed = check.ordering(self.pair.server, self.snapshot, type_url)
        return allowed.held_back | allowed.kept

    def _apply_response(self, response: DeltaDiscoveryResponse, before: TypeModel) -> ResponseStep:
        type_url = response.type_url
        step = ResponseStep(
            response=response,
            before=before,
            duplicate_nonce=response.nonce in self.nonces,
            current=dict(self.snapshot.resources(type_url) or {}),
            deferred=self._deferred(type_url),
        )
        self.nonces.append(response.nonce)
        self.sent[response.nonce] = response
        answered = {r.name for r in response.resources} | set(response.removed_resources)
        self.types[type_url] = attrs.evolve(
            self.types[type_url],
            unanswered=response.nonce,
            latest=response.nonce,
            owed=before.owed - answered,
            warm=before.warm - answered,
            phantom={n: v for n, v in before.phantom.items() if n not in answered},
            initial=None,
        )
        if type_url == CLUSTER:
            names = frozenset(
                ref.name
                for resource in response.resources
                for ref in resource.references
                if ref.type_url == ENDPOINT
            )
            endpoints = self.types.get(ENDPOINT)
            if endpoints is None:
                self.endpoints_pending |= names
            else:
                # A NACKed version is not pushed again for warming (as in SotW).
                warm = endpoints.warm | {
                    n for n in names if endpoints.want.wants(n) and n not in endpoints.rejected
                }
                self.types[ENDPOINT] = attrs.evolve(endpoints, warm=warm)
        return step

    # --- per-step invariants ---------------------------------------------------------------

    @invariant()
    def every_step_keeps_the_invariants(self) -> None:
        """Each ``invNN_`` check below, over what the last step did (or the whole stream)."""
        check.inv01_node_identified_on_the_first_request_only(self.new_requests, NODE)
        self.inv25_inv26_nonce_pairs_ack_nack_or_is_reported_stale()
        check.inv17_inv32_subscription_changes_reported(self.new_requests)
        self.inv27_initial_resource_versions_list_what_the_client_holds()
        check.inv04_resource_type_urls_equal_the_response_type_url(self.new_responses)
        check.inv24_nonces_present_and_unique_per_stream(self.new_responses)
        check.inv06_at_most_one_unacked_response_per_type(self.new_responses)
        self.inv22_no_duplicates_and_no_name_both_sent_and_removed()
        self.inv21_sent_resources_are_current_and_wanted()
        self.inv09_inv29_nothing_sent_the_client_already_has()
        self.inv12_nacked_versions_not_resent()
        self.inv28_inv30_inv31_owed_names_are_answered()
        self.inv27_reconnect_sends_exactly_the_difference()
        check.inv26_server_subscription_equals_the_model(self.pair.server, self.types)
        self.holdings_are_never_changed_in_place()

    def holdings_are_never_changed_in_place(self) -> None:
        """What streams in the same state share (``_memos.DELTA_ANSWERS``/``ACCEPTED``) is
        only safe if no holdings mapping changes once a state holds it: each one seen keeps
        the contents it had."""
        seen = self.holdings_seen
        for state in self.pair.server.type_states().values():
            for holdings in (state.held_versions, state.held, state.rejected_versions):
                if id(holdings) not in seen:
                    seen[id(holdings)] = (holdings, dict(holdings))
        for holdings, contents in seen.values():
            assert dict(holdings) == contents, "a holdings mapping was changed in place"

    # --- requests --------------------------------------------------------------------------

    def inv25_inv26_nonce_pairs_ack_nack_or_is_reported_stale(self) -> None:
        for step in self.new_requests:
            request, expect = step.request, step.expect
            stale = [e for e in step.events if isinstance(e, StaleNonceSeen)]
            assert len(stale) == int(expect.stale), (
                f"{request} {'is' if expect.stale else 'is not'} stale; events {step.events}"
            )
            check.inv10_ack_reported(request, step.events, expect.acks)
            check.inv11_nack_reported(request, step.events, expect.nacks)

    def inv27_initial_resource_versions_list_what_the_client_holds(self) -> None:
        if self.reconnect is None:
            return
        for request in self.reconnect.requests:
            held = self.reconnect.held.get(request.type_url, {})
            assert dict(request.initial_resource_versions) == held, (
                f"{short(request.type_url)}: initial_resource_versions "
                f"{dict(request.initial_resource_versions)} but the client held {held}"
            )

    # --- responses -------------------------------------------------------------------------

    def inv22_no_duplicates_and_no_name_both_sent_and_removed(self) -> None:
        check.inv22_no_duplicate_names_in_a_response(self.new_responses)
        for step in self.new_responses:
            removed = list(step.response.removed_resources)
            assert len(removed) == len(set(removed)), f"duplicate removals {removed}"
            both = {r.name for r in step.response.resources} & set(removed)
            assert not both, f"{sorted(both)} both sent and removed"

    def inv21_sent_resources_are_current_and_wanted(self) -> None:
        for step in self.new_responses:
            want = step.before.want
            extra = check.not_current_or_not_wanted(step.response.resources, want, step.current)
            assert not extra, (
                f"{short(step.response.type_url)} sent {extra}: not current or not wanted ({want})"
            )
            for name in step.response.removed_resources:
                assert not (name in step.current and want.wants(name)), (
                    f"{short(step.response.type_url)} {name!r} removed but exists and is wanted"
                )

    def inv09_inv29_nothing_sent_the_client_already_has(self) -> None:
        for step in self.new_responses:
            before = step.before
            asked = before.owed | before.warm
            for resource in step.response.resources:
                if before.acked.get(resource.name) == resource.version:
                    assert resource.name in asked, (
                        f"{short(resource.type_url)} {resource.name!r} re-sent at the version "
                        f"the client holds, unasked"
                    )
            for name in step.response.removed_resources:
                assert name in before.acked or name in before.phantom or name in asked, (
                    f"{short(step.response.type_url)} removal of {name!r}, which the client "
                    f"neither holds nor asked about"
                )

    def inv12_nacked_versions_not_resent(self) -> None:
        for step in self.new_responses:
            before = step.before
            asked = before.owed | before.warm
            for resource in step.response.resources:
                if before.rejected.get(resource.name) == resource.version:
                    assert resource.name in asked, (
                        f"{short(resource.type_url)} {resource.name!r} at NACKed version "
                        f"{resource.version} re-sent although not asked for again"
                    )
            for name in step.response.removed_resources:
                if before.rejected.get(name) == REMOVED:
                    assert name in asked, f"NACKed removal of {name!r} re-sent"

    def inv28_inv30_inv31_owed_names_are_answered(self) -> None:
        for step in self.new_responses:
            answered = {r.name for r in step.response.resources}
            answered |= set(step.response.removed_resources)
            owed = step.before.owed | step.before.warm
            missing = owed - answered - step.deferred
            assert not missing, (
                f"{short(step.response.type_url)} response leaves {sorted(missing)} unanswered"
            )
        for silent in self.silent:
            missing = (silent.before.owed | silent.before.warm) - silent.deferred
            assert not missing, (
                f"{short(silent.type_url)}: {sorted(missing)} owed an answer, nothing sent"
            )

    def inv27_reconnect_sends_exactly_the_difference(self) -> None:
        for step in self.new_responses:
            before = step.before
            if before.initial is None or not before.pristine:
                continue
            want = before.want
            asked = before.owed | before.warm
            due = {
                n: r.version
                for n, r in step.current.items()
                if want.wants(n) and (before.initial.get(n) != r.version or n in asked)
            }
            gone = {
                n
                for n in before.initial.keys() | asked
                if not (n in step.current and want.wants(n))
            }
            sent = {r.name: r.version for r in step.response.resources}
            removed = set(step.response.removed_resources)
            assert sent.items() <= due.items(), f"needless re-send after reconnect: {sent}"
            assert removed <= gone, f"needless removal after reconnect: {removed - gone}"
            assert due.keys() - sent.keys() <= step.deferred, (
                f"after reconnect {sorted(due.keys() - sent.keys())} not sent"
            )
            assert gone - removed <= step.deferred, f"after reconnect {gone - removed} kept"
            event("delta: first response after a reconnect checked")

    # --- the whole stream ------------------------------------------------------------------

    # --- convergence -----------------------------------------------------------------------

    def teardown(self) -> None:
        if not self.pool:
            return
        self.nack_next.clear()
        self.config = self.config.unmarked()
        self.snapshot = self._snapshot_of(self.config)
        client = self.pair.client
        if self.ordered:
            # Envoy subscribes to the endpoints of every EDS cluster it holds; a client that
            # does not is held back by make-before-break on purpose (xdscore._ordering).
            state = client.type_state(ENDPOINT)
            if state is not None and not state.wildcard:
                missing = eds_closure(self.config) - state.requested.keys()
                if missing:
                    self.pair.send(client.subscribe(ENDPOINT, missing))
        self._settle()
        if self._rejected_pending():
            # NACKed versions are not re-sent on this stream (inv. 12), including those that
            # were only in the same response as the culprit (the known bug pinned by
            # test_inv12_inv14_innocent_resources_of_a_nacked_response_are_delivered): a new
            # stream forgets them.
            self._fresh_step()
            self._disconnect()
            self.every_step_keeps_the_invariants()
            self._settle()
        self.inv17_client_converges_to_the_subscribed_snapshot()
        self._fresh_step()
        self._disconnect()
        self.every_step_keeps_the_invariants()
        self._settle()
        self.inv17_client_converges_to_the_subscribed_snapshot()

    def _rejected_pending(self) -> bool:
        """Whether the server will, by inv. 12, not send some current version on this stream."""
        for type_url, model in self.types.items():
            current = self.snapshot.resources(type_url) or {}
            for name, version in model.rejected.items():
                resource = current.get(name)
                if (resource.version if resource is not None else REMOVED) == version:
                    event("delta: NACKed versions still current at teardown (new stream)")
                    return True
        return False

    def _settle(self) -> None:
        for _ in range(10_000):
            if self.pair.requests:
                self.deliver_request()
            elif self.pair.responses:
                self.deliver_response()
            else:
                self.poll()
                if not self.new_responses:
                    self.every_step_keeps_the_invariants()
                    return
            self.every_step_keeps_the_invariants()
        raise AssertionError("the pair did not settle")

    def inv17_client_converges_to_the_subscribed_snapshot(self) -> None:
        """Settled: the client holds exactly what it subscribes to of the snapshot (every
        resource under the wildcard). (Names unsubscribed under the wildcard are answered per
        step, inv. 30; a client that NACKed the answer may keep them ambiguous.)"""
        client = self.pair.client
        for type_url in client.type_urls():
            state = client.type_state(type_url)
            assert state is not None
            current = self.snapshot.resources(type_url) or {}
            wants = Want(frozenset(state.requested), wildcard=state.wildcard).wants
            holds = {name: r.version for name, r in client.holds(type_url).items()}
            model = self.types.get(type_url)
            phantoms = model.phantom if model is not None else {}
            gap = {
                n
                for n, r in current.items()
                if wants(n) and n not in holds and phantoms.get(n) == r.version
            }
            if gap:
                event("delta: BUG ACK of an unwanted resource tolerated")
            check.assert_holds_the_subscribed_snapshot(
                type_url,
                holds,
                current,
                wants,
                described=f"(wildcard={state.wildcard}, names={sorted(state.requested)})",
                excused=gap,
            )


class DeltaUnorderedProperties(DeltaProperties):
    ordered = False


class DeltaOrderedProperties(DeltaProperties):
    ordered = True


@attrs.frozen
class HeartbeatStep:
    response: DeltaDiscoveryResponse
    before: TypeModel
    duplicate_nonce: bool
    current: Mapping[str, Resource]


class DeltaTtlProperties(HeartbeatRules, DeltaProperties):
    """The ordered machine with TTLs on clusters, endpoints and listeners, a client that supports
    them, and heartbeats at any step (inv. 38): the runtime may ask for them at any time, so
    they interleave with everything else. A heartbeat is in flight like a response; the
    model pairs its ACK or NACK the same way."""

    ordered = True
    label = "delta"
    features = ClientFeatures(ttl=True)

    def _snapshot_of(self, config: EnvoyConfig) -> Snapshot:
        return with_ttls(config.snapshot())

    def _fresh_step(self) -> None:
        super()._fresh_step()
        self.new_heartbeats: list[HeartbeatStep] = []

    def _holds_a_ttl(self) -> bool:
        """Whether the server believes the client holds a resource with a TTL."""
        states = self.pair.server.type_states().values()
        return any(r.ttl is not None for state in states for r in state.held.values())

    def _beat(self) -> None:
        for response in self.pair.heartbeat():
            type_url = response.type_url
            before = self.types[type_url]
            self.new_heartbeats.append(
                HeartbeatStep(
                    response=response,
                    before=before,
                    duplicate_nonce=response.nonce in self.nonces,
                    current=dict(self.snapshot.resources(type_url) or {}),
                )
            )
            self.nonces.append(response.nonce)
            self.sent[response.nonce] = response
            self.heartbeat_nonces.add(response.nonce)
            self.types[type_url] = attrs.evolve(
                before, unanswered=response.nonce, latest=response.nonce, initial=None
            )

    def teardown(self) -> None:
        """Converged, a heartbeat of everything held goes out and changes nothing held."""
        super().teardown()
        if not self.pool:
            return
        self._fresh_step()
        self.converged = True
        self._beat()
        self._tell()
        self.inv38_heartbeats_carry_only_what_the_client_holds_unchanged()
        self._settle()
        self.inv17_client_converges_to_the_subscribed_snapshot()

    @invariant()
    def inv38_heartbeats_carry_only_what_the_client_holds_unchanged(self) -> None:
        """Each heartbeat: one per type with nothing in flight, a fresh nonce, no removals,
        and for each resource its name, the version the client holds (which is still the
        current one), its TTL and no body; only resources with a TTL that it wants."""
        for step in self.new_heartbeats:
            response, before = step.response, step.before
            kind = short(response.type_url)
            assert before.unanswered is None, f"{kind} heartbeat while a response is in flight"
            assert not step.duplicate_nonce, f"{kind} heartbeat reuses nonce {response.nonce}"
            assert response.removed_resources == (), f"{kind} heartbeat removes names"
            assert response.resources, f"{kind} empty heartbeat"
            for resource in response.resources:
                current = step.current.get(resource.name)
                assert resource.name_only, f"{kind} heartbeat of {resource.name!r} has a body"
                assert current is not None, f"{kind} heartbeat of {resource.name!r}: gone"
                assert current.ttl is not None, f"{kind} heartbeat of {resource.name!r}: no TTL"
                assert resource.ttl == current.ttl, f"{kind} {resource.name!r}: TTL not sent"
                assert resource.version == current.version, f"{kind} {resource.name!r} changed"
                assert before.acked.get(resource.name) == resource.version, (
                    f"{kind} heartbeat of {resource.name!r} at {resource.version}, which the "
                    f"client does not hold ({before.acked.get(resource.name)!r})"
                )
                assert before.want.wants(resource.name), (
                    f"{kind} heartbeat of {resource.name!r}, which the client does not want"
                )


TestDeltaUnordered = DeltaUnorderedProperties.TestCase
TestDeltaOrdered = DeltaOrderedProperties.TestCase
TestDeltaTtl = DeltaTtlProperties.TestCase
TestDeltaUnordered.settings = TestDeltaOrdered.settings = TestDeltaTtl.settings = STATEFUL


def test_inv12_inv14_resources_of_a_nacked_response_are_not_resent_until_they_change() -> None:
    """A deliberate choice (docs/protocol.md, inv. 14): clients apply the valid resources of a
    rejected update (as the client machine does), so none of a NACKed response is re-sent
    on its own: only what changes goes out again."""
    bad = http_listener("a", 10000, "r")
    bad.stat_prefix = NACK_MARKER
    good = http_listener("x", 10001, "r")
    view = [Snapshot([bad, good], types=[LISTENER])]
    pair = DeltaPair(lambda: view[0], node=NODE, validate=reject_marked)
    pair.send(pair.client.subscribe(LISTENER))
    pair.settle()  # {a, x} is NACKed because of a; the client applies x
    view[0] = Snapshot([http_listener("a", 10000, "r"), good], types=[LISTENER])
    sent = len(pair.sent)
    pair.settle()
    assert [[r.name for r in response.resources] for response in pair.sent[sent:]] == [["a"]]
    assert sorted(pair.client.holds(LISTENER)) == ["a", "x"]


def test_inv19_ack_does_not_count_resources_the_client_no_longer_wanted() -> None:
    snapshot = Snapshot([eds_cluster("a"), load_assignment("a", [])])
    pair = DeltaPair(lambda: snapshot, node=NODE)
    pair.send(pair.client.subscribe(CLUSTER, ["*"]))
    pair.deliver_request()
    pair.poll()  # {a} is in flight
    pair.send(pair.client.unsubscribe(CLUSTER, ["*"]))  # the client leaves the wildcard
    pair.deliver_response()  # it ignores a, and ACKs
    pair.send(pair.client.subscribe(CLUSTER, ["*"]))  # and comes back
    pair.settle()
    assert "a" in pair.client.holds(CLUSTER)
