"""The Delta server state machine: the stream, its node and types, well-formed responses,
views that are not authoritative, limits.

One test per protocol invariant the machine implements; test names carry the number of the
invariant in the xDS invariants list (XDS_INVARIANTS.md) they check (``inv01`` … ``inv35``);
``limits`` tests check the StreamLimits bounds. The other Delta machine tests are in
test_delta_acks.py, test_delta_subscriptions.py and test_delta_warming.py.
"""

from __future__ import annotations

import random

import pytest

from xdscore import (
    CLUSTER,
    ENDPOINT,
    LBENDPOINT,
    LISTENER,
    ROUTE,
    VIRTUAL_HOST,
    GrpcStatus,
    LocalProtocolError,
    Node,
    RemoteProtocolError,
    Resource,
    ResponseAcked,
    ResponseNacked,
    Snapshot,
    StreamLimits,
    make_resource,
)
from xdscore.builders import load_assignment
from xdscore.protocol import (
    WILDCARD,
    DeltaResponse,
    NodeIdentified,
    StaleNonceSeen,
    StreamState,
    SubscriptionChanged,
)

from ..factories import (
    CL_A,
    CL_A2,
    CL_B,
    CL_C,
    EP_A,
    EP_A2,
    EP_B,
    EP_B2,
    EP_C,
    LS_1,
    LS_2,
    NODE,
    RC_1,
    RC_2,
    of_type,
    only,
    version,
)
from ._delta import (
    CL_B2,
    SAME_ID_OTHER_NODE,
    ack,
    assert_well_formed,
    change,
    nack,
    req,
    sent,
    settle,
    start,
    stream,
)

# --- 1. node -----------------------------------------------------------------------------


def test_inv01_first_request_must_carry_node_else_error_state() -> None:
    machine = stream()
    with pytest.raises(RemoteProtocolError) as caught:
        machine.receive(req(CLUSTER))
    assert caught.value.status == GrpcStatus.INVALID_ARGUMENT
    assert machine.state is StreamState.ERROR
    assert machine.node is None
    with pytest.raises(LocalProtocolError):
        machine.receive(req(CLUSTER, node=NODE))
    with pytest.raises(LocalProtocolError):
        machine.poll(Snapshot([CL_A]))


def test_inv01_node_identified_once_and_may_be_omitted_later() -> None:
    machine = stream()
    events = start(machine, CLUSTER)
    assert events[0] == NodeIdentified(node=NODE)
    assert machine.node == NODE
    response = only(machine.poll(Snapshot([CL_A])))
    events = ack(machine, response)  # no node
    assert of_type(events, NodeIdentified) == []
    assert of_type(events, ResponseAcked)
    events = list(machine.receive(req(ENDPOINT, ["a"])))  # a new type, still no node
    assert of_type(events, NodeIdentified) == []
    assert machine.state is StreamState.OPEN
    # Repeating an identical node (same encoding) is fine.
    machine.receive(req(LISTENER, node=Node(id="node-1", raw=NODE.raw)))
    assert machine.state is StreamState.OPEN
    assert machine.node == NODE


def test_inv01_changed_node_is_rejected_and_machine_enters_error_state() -> None:
    machine = stream()
    start(machine, CLUSTER)
    # Same id, different encoding: a different node.
    with pytest.raises(RemoteProtocolError) as caught:
        machine.receive(req(ENDPOINT, ["a"], node=SAME_ID_OTHER_NODE))
    assert caught.value.status == GrpcStatus.INVALID_ARGUMENT
    assert machine.state is StreamState.ERROR
    assert ENDPOINT not in machine.type_states()
    with pytest.raises(LocalProtocolError):
        machine.receive(req(CLUSTER))
    with pytest.raises(LocalProtocolError):
        machine.poll(Snapshot([CL_A]))


# --- 2. type_url -------------------------------------------------------------------------


def test_inv02_type_url_required_on_ads() -> None:
    machine = stream()
    with pytest.raises(RemoteProtocolError) as caught:
        machine.receive(req("", ["a"], node=NODE))
    assert caught.value.status == GrpcStatus.INVALID_ARGUMENT
    assert machine.state is StreamState.ERROR
    assert machine.type_states() == {}


def test_inv02_per_type_service_fixes_the_type() -> None:
    machine = stream(ENDPOINT)
    assert not machine.aggregated
    machine.receive(req("", ["a"], node=NODE))
    assert set(machine.type_states()) == {ENDPOINT}
    response = only(machine.poll(Snapshot([EP_A, CL_A])), ENDPOINT)
    assert sent(response) == ["a"]
    # Naming its own type explicitly is fine too.
    ack(machine, response)
    assert machine.state is StreamState.OPEN


def test_inv02_per_type_service_rejects_another_type() -> None:
    machine = stream(ENDPOINT)
    start(machine, ENDPOINT, ["a"])
    with pytest.raises(RemoteProtocolError):
        machine.receive(req(CLUSTER))
    assert machine.state is StreamState.ERROR


@pytest.mark.parametrize("type_url", [VIRTUAL_HOST, LBENDPOINT])
def test_inv02_vhds_and_leds_accepted_on_delta(type_url: str) -> None:
    ads = stream()
    events = start(ads, type_url, ["x"])
    assert of_type(events, SubscriptionChanged)
    assert ads.state is StreamState.OPEN
    per_type = stream(type_url)
    start(per_type, "", ["x"])
    assert set(per_type.type_states()) == {type_url}
    assert per_type.state is StreamState.OPEN


# --- 3. independent types ----------------------------------------------------------------


def test_inv03_each_type_is_an_independent_sub_stream() -> None:
    machine = stream()
    start(machine, CLUSTER)
    start(machine, ENDPOINT, ["a"])
    snapshot = Snapshot([CL_A, EP_A])
    cds, eds = machine.poll(snapshot)
    assert (cds.type_url, eds.type_url) == (CLUSTER, ENDPOINT)
    # The cluster nonce echoed on the endpoint type is not an ACK of anything there.
    events: list[object] = list(machine.receive(req(ENDPOINT, nonce=cds.nonce)))
    assert of_type(events, ResponseAcked) == []
    assert of_type(events, StaleNonceSeen)
    assert machine.type_states()[ENDPOINT].outstanding == eds
    # A cluster NACK leaves the endpoint ACK unaffected.
    events = nack(machine, cds)
    assert of_type(events, ResponseNacked)
    events = ack(machine, eds)
    assert of_type(events, ResponseAcked)
    status = machine.type_states()
    assert status[CLUSTER].nacks == 1
    assert status[CLUSTER].acks == 0
    assert status[ENDPOINT].acks == 1
    assert status[ENDPOINT].nacks == 0
    assert status[ENDPOINT].last_error is None
    assert dict(status[ENDPOINT].held_versions) == {"a": version(EP_A)}


# --- 4 / 24 / 34. response framing and order ---------------------------------------------


def test_inv04_response_type_url_matches_every_resource_and_inv34_order() -> None:
    machine = stream()
    start(machine, ROUTE, ["r1", "r2"])
    start(machine, LISTENER)
    start(machine, ENDPOINT, ["a", "b"])
    start(machine, CLUSTER)
    snapshot = Snapshot([CL_A, CL_B, EP_A, EP_B, LS_1, LS_2, RC_1, RC_2])
    responses = machine.poll(snapshot)
    # Routes name clusters the client does not hold yet: they wait (make-before-break).
    assert [r.type_url for r in responses] == [CLUSTER, ENDPOINT, LISTENER]
    for response in responses:
        ack(machine, response)
    responses += settle(machine, snapshot)
    assert [r.type_url for r in responses] == [CLUSTER, ENDPOINT, LISTENER, ROUTE]
    for response in responses:
        assert_well_formed(response)
        assert len(response.resources) == 2


def test_inv24_every_response_has_a_fresh_nonce_and_system_version_info() -> None:
    machine = stream()
    start(machine, CLUSTER)
    start(machine, ENDPOINT, ["a"])
    snapshot = Snapshot([CL_A, EP_A, EP_B])
    responses = machine.poll(snapshot)
    for response in responses:
        assert response.system_version_info == snapshot.version(response.type_url)
        assert response.system_version_info
        ack(machine, response)
    updated = Snapshot([CL_A2, EP_A2, EP_B])
    responses += machine.poll(updated)
    nonces = [r.nonce for r in responses]
    assert len(responses) == 4
    assert all(nonces)
    assert len(set(nonces)) == len(nonces)
    assert responses[2].system_version_info == updated.version(CLUSTER)
    assert responses[2].system_version_info != responses[0].system_version_info


# --- 22. no duplicates, never both lists -----------------------------------------------------


def test_inv22_no_duplicates_and_no_overlap_over_mixed_operations() -> None:
    machine = stream()
    start(machine, CLUSTER, [WILDCARD, "a", "ghost"])
    start(machine, ENDPOINT, ["a", "b", "a"])
    views = [
        Snapshot([CL_A, CL_B, EP_A, EP_B]),
        Snapshot([CL_A2, CL_B, EP_A2]),
        Snapshot([CL_B2, CL_C, EP_A2, EP_B]),
        Snapshot([CL_A, CL_C, EP_B2, EP_C]),
    ]
    steps: list[tuple[str, tuple[str, ...], tuple[str, ...]]] = [
        (CLUSTER, ("a", "b"), ("ghost",)),
        (ENDPOINT, ("c",), ("a",)),
        (CLUSTER, (), ("a", "c")),
        (ENDPOINT, ("a", "a"), ("b", "missing")),
        (CLUSTER, ("c", "ghost"), (WILDCARD,)),
        (ENDPOINT, (WILDCARD,), ()),
        (CLUSTER, (WILDCARD,), ("b",)),
        (ENDPOINT, ("b",), ("b", "c")),
    ]
    total = 0
    for index, (type_url, subscribe, unsubscribe) in enumerate(steps):
        view = views[index % len(views)]
        change(machine, type_url, subscribe, unsubscribe)
        responses = machine.poll(view)
        for response in responses:
            assert_well_formed(response)
            if index % 3 == 2:
                nack(machine, response)
            else:
                ack(machine, response)
        total += len(responses)
        # Change the view while a response may be outstanding, then settle.
        for response in settle(machine, views[(index + 1) % len(views)]):
            assert_well_formed(response)
            total += 1
    assert total >= len(steps)


class _Client:
    """A minimal Delta client: what it wants, what it holds, and the response in flight."""

    def __init__(self) -> None:
        self.wildcard = False
        self.names: set[str] = set()
        self.held: dict[str, str] = {}
        self.pending: DeltaResponse | None = None

    def wants(self, name: str) -> bool:
        return self.wildcard or name in self.names

    def subscribe(self, names: set[str]) -> None:
        if WILDCARD in names:
            self.wildcard = True
        self.names |= names - {WILDCARD}

    def unsubscribe(self, names: set[str]) -> None:
        self.names -= names
        if WILDCARD in names:
            self.wildcard = False
        if not self.wildcard:
            self.held = {n: v for n, v in self.held.items() if n in self.names}

    def apply(self, response: DeltaResponse) -> None:
        for resource in response.resources:
            if self.wants(resource.name):  # clients ignore what they did not ask for
                self.held[resource.name] = resource.version
        for name in response.removed:
            self.held.pop(name, None)


@pytest.mark.parametrize("seed", range(40))
def test_inv22_random_walk_keeps_responses_well_formed_and_client_converges(seed: int) -> None:
    rng = random.Random(seed)
    universe = [f"n{i}" for i in range(6)]
    variants = [
        [load_assignment(name, [(f"10.0.{i}.{j}", 80)]) for j in range(3)]
        for i, name in enumerate(universe)
    ]
    current: dict[str, Resource] = {}

    def view() -> Snapshot:
        return Snapshot(current.values(), types=[ENDPOINT])

    machine = stream()
    client = _Client()
    initial = set(rng.sample([*universe, WILDCARD], 2))
    client.subscribe(initial)
    start(machine, ENDPOINT, sorted(initial))
    snapshot = view()
    for _ in range(60):
        op = rng.randrange(5)
        if op == 0:
            index = rng.randrange(len(universe))
            if rng.random() < 0.3:
                current.pop(universe[index], None)
            else:
                current[universe[index]] = make_resource(rng.choice(variants[index]))
            snapshot = view()
        elif op == 1:
            names = set(rng.sample([*universe, WILDCARD], rng.randint(1, 2)))
            client.subscribe(names)
            change(machine, ENDPOINT, sorted(names))
        elif op == 2:
            names = set(rng.sample([*universe, WILDCARD], rng.randint(1, 2)))
            client.unsubscribe(names)
            change(machine, ENDPOINT, unsubscribe=sorted(names))
        elif op == 3 and client.pending is not None:
            client.apply(client.pending)
            ack(machine, client.pending)
            client.pending = None
        else:
            responses = machine.poll(snapshot)
            if client.pending is not None:
                assert responses == [], "a second response while one is outstanding"
            elif responses:
                response = only(responses, ENDPOINT)
                assert_well_formed(response)
                resources = snapshot.resources(ENDPOINT) or {}
                for resource in response.resources:
                    assert resources[resource.name] is resource
                client.pending = response
    # Quiesce: deliver everything still due.
    for _ in range(10):
        if client.pending is not None:
            client.apply(client.pending)
            ack(machine, client.pending)
            client.pending = None
        responses = machine.poll(snapshot)
        if not responses:
            break
        client.pending = only(responses)
        assert_well_formed(client.pending)
    assert client.pending is None
    expected = {name: resource.version for name, resource in current.items() if client.wants(name)}
    assert client.held == expected


# --- views not authoritative for a type -----------------------------------------------------


def test_view_without_a_type_sends_nothing_and_removes_nothing_for_it() -> None:
    machine = stream()
    start(machine, CLUSTER)
    start(machine, ENDPOINT, ["a"])
    settle(machine, Snapshot([CL_A, EP_A]))
    clusters_only = Snapshot([CL_A2])
    assert clusters_only.resources(ENDPOINT) is None
    responses = machine.poll(clusters_only)
    # The cluster update owes a's endpoints, but the view has no say about endpoints.
    assert [(r.type_url, sent(r), r.removed) for r in responses] == [(CLUSTER, ["a"], ())]
    assert machine.type_states()[ENDPOINT].held_versions == {"a": version(EP_A)}
    assert machine.poll(None) == []


def test_view_authoritative_but_empty_removes_everything() -> None:
    machine = stream()
    start(machine, LISTENER)
    settle(machine, Snapshot([LS_1, LS_2]))
    assert machine.poll(Snapshot([CL_A])) == []  # no say about listeners
    response = only(machine.poll(Snapshot([CL_A], types=[LISTENER])))
    assert response.resources == ()
    assert response.removed == ("l1", "l2")


def test_poll_with_no_view_sends_nothing() -> None:
    machine = stream()
    start(machine, CLUSTER)
    assert machine.poll(None) == []
    assert machine.type_states()[CLUSTER].outstanding is None


# --- limits -----------------------------------------------------------------------------------


def test_limits_too_many_names_in_one_request() -> None:
    machine = stream(limits=StreamLimits(max_names_per_request=2))
    with pytest.raises(RemoteProtocolError) as caught:
        start(machine, ENDPOINT, ["a", "b", "c"])
    assert caught.value.status == GrpcStatus.RESOURCE_EXHAUSTED
    assert machine.state is StreamState.ERROR


def test_limits_subscribed_names_and_types() -> None:
    machine = stream(limits=StreamLimits(max_subscribed_names=2, max_types=1))
    start(machine, ENDPOINT, ["a", "b"])
    with pytest.raises(RemoteProtocolError) as caught:
        change(machine, ENDPOINT, ["c"])
    assert caught.value.status == GrpcStatus.RESOURCE_EXHAUSTED
    other = stream(limits=StreamLimits(max_types=1))
    start(other, ENDPOINT, ["a"])
    with pytest.raises(RemoteProtocolError):
        change(other, CLUSTER)
    assert other.state is StreamState.ERROR


def test_limits_initial_resource_versions_bounded() -> None:
    machine = stream(limits=StreamLimits(max_names_per_request=2))
    with pytest.raises(RemoteProtocolError):
        start(machine, CLUSTER, initial={"a": "1", "b": "2", "c": "3"})
