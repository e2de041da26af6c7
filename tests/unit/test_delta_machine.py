"""The Delta server state machine, one test per protocol invariant it implements.

Test names carry the number of the invariant in the xDS invariants list (XDS_INVARIANTS.md) they
check (``inv01`` … ``inv35``); ``limits`` tests check the StreamLimits bounds. Tests marked
``xfail(strict=True)`` document a behaviour believed to be a bug in the machine.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterable, Mapping, Sequence

import pytest
from envoy.config.route.v3 import route_components_pb2

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
from xdscore.builders import eds_cluster, http_listener, load_assignment, route_configuration
from xdscore.protocol import (
    WILDCARD,
    DeltaDiscoveryRequest,
    DeltaResponse,
    DeltaServer,
    ErrorDetail,
    NodeIdentified,
    ResourceView,
    StaleNonceSeen,
    StreamState,
    Subscription,
    SubscriptionChanged,
)

NODE = Node(id="node-1", raw=b"\n\x06node-1")
SAME_ID_OTHER_NODE = Node(id="node-1", raw=b"\n\x06node-1\x12\x01x")
ERROR = ErrorDetail(code=13, message="rejected: bad resource")

CL_A = eds_cluster("a")
CL_A2 = eds_cluster("a", connect_timeout=5.0)
CL_B = eds_cluster("b")
CL_B2 = eds_cluster("b", connect_timeout=7.0)
CL_C = eds_cluster("c")
CL_SVC = eds_cluster("s", service_name="svc-s")
CL_SVC2 = eds_cluster("s", service_name="svc-s", connect_timeout=3.0)
EP_A = load_assignment("a", [("10.0.0.1", 80)])
EP_A2 = load_assignment("a", [("10.0.0.2", 80)])
EP_A3 = load_assignment("a", [("10.0.0.3", 80)])
EP_B = load_assignment("b", [("10.0.1.1", 80)])
EP_B2 = load_assignment("b", [("10.0.1.2", 80)])
EP_C = load_assignment("c", [("10.0.2.1", 80)])
EP_SVC = load_assignment("svc-s", [("10.0.3.1", 80)])
LS_1 = http_listener("l1", 10001, "r1")
LS_2 = http_listener("l2", 10002, "r2")
RC_1 = route_configuration("r1", [("/", "a")])
RC_2 = route_configuration("r2", [("/", "b")])


def version(message: object) -> str:
    return make_resource(message).version


def stream(
    type_url: str | None = None,
    limits: StreamLimits | None = None,
    *,
    ordered: bool = True,
) -> DeltaServer:
    counter = itertools.count(1)
    return DeltaServer(
        nonce_source=lambda: str(next(counter)),
        type_url=type_url,
        limits=limits,
        ordered=ordered,
    )


def req(
    type_url: str,
    subscribe: Iterable[str] = (),
    unsubscribe: Iterable[str] = (),
    *,
    initial: Mapping[str, str] | None = None,
    nonce: str = "",
    error: ErrorDetail | None = None,
    node: Node | None = None,
) -> DeltaDiscoveryRequest:
    return DeltaDiscoveryRequest(
        type_url=type_url,
        resource_names_subscribe=tuple(subscribe),
        resource_names_unsubscribe=tuple(unsubscribe),
        initial_resource_versions=dict(initial or {}),
        response_nonce=nonce,
        error_detail=error,
        node=node,
    )


def start(
    machine: DeltaServer,
    type_url: str,
    subscribe: Iterable[str] = (),
    *,
    initial: Mapping[str, str] | None = None,
) -> list[object]:
    """The first request of a type; carries the node only if the stream has none yet."""
    node = NODE if machine.node is None else None
    return list(machine.receive(req(type_url, subscribe, initial=initial, node=node)))


def change(
    machine: DeltaServer,
    type_url: str,
    subscribe: Iterable[str] = (),
    unsubscribe: Iterable[str] = (),
    *,
    nonce: str = "",
) -> list[object]:
    """A spontaneous subscription change (no nonce unless given)."""
    return list(machine.receive(req(type_url, subscribe, unsubscribe, nonce=nonce)))


def ack(
    machine: DeltaServer,
    response: DeltaResponse,
    subscribe: Iterable[str] = (),
    unsubscribe: Iterable[str] = (),
) -> list[object]:
    return list(
        machine.receive(req(response.type_url, subscribe, unsubscribe, nonce=response.nonce))
    )


def nack(
    machine: DeltaServer,
    response: DeltaResponse,
    subscribe: Iterable[str] = (),
    unsubscribe: Iterable[str] = (),
) -> list[object]:
    return list(
        machine.receive(
            req(response.type_url, subscribe, unsubscribe, nonce=response.nonce, error=ERROR)
        )
    )


def only(responses: list[DeltaResponse], type_url: str | None = None) -> DeltaResponse:
    assert len(responses) == 1, responses
    if type_url is not None:
        assert responses[0].type_url == type_url
    return responses[0]


def sent(response: DeltaResponse) -> list[str]:
    return [resource.name for resource in response.resources]


def sent_versions(response: DeltaResponse) -> dict[str, str]:
    return {resource.name: resource.version for resource in response.resources}


def of_type(events: Sequence[object], cls: type) -> list[object]:
    return [event for event in events if isinstance(event, cls)]


def assert_well_formed(response: DeltaResponse) -> None:
    """Invariants 4, 22 and 24 for one response."""
    names = sent(response)
    assert response.nonce
    assert len(names) == len(set(names)), f"duplicate resources in {response}"
    assert len(response.removed) == len(set(response.removed)), f"duplicate removals {response}"
    assert not set(names) & set(response.removed), f"name both sent and removed: {response}"
    assert all(resource.type_url == response.type_url for resource in response.resources)


def settle(machine: DeltaServer, view: ResourceView | None) -> list[DeltaResponse]:
    """Poll and ACK until nothing more is due; every response sent on the way."""
    out: list[DeltaResponse] = []
    for _ in range(20):
        responses = machine.poll(view)
        if not responses:
            return out
        for response in responses:
            assert_well_formed(response)
            ack(machine, response)
        out.extend(responses)
    raise AssertionError(f"the machine never quiesced: {out}")


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


# --- 10 / 25. ACK, and requests without a nonce ------------------------------------------


def test_inv10_ack_updates_what_the_client_holds() -> None:
    machine = stream()
    start(machine, ENDPOINT, ["a", "b"])
    response = only(machine.poll(Snapshot([EP_A, EP_B])))
    assert sent(response) == ["a", "b"]
    events = ack(machine, response)
    assert of_type(events, ResponseAcked) == [
        ResponseAcked(
            type_url=ENDPOINT, version_info=response.system_version_info, nonce=response.nonce
        )
    ]
    assert dict(machine.type_states()[ENDPOINT].held_versions) == {
        "a": version(EP_A),
        "b": version(EP_B),
    }
    # A new view object with the same content: nothing to send.
    assert machine.poll(Snapshot([EP_A, EP_B])) == []
    # One changed resource: only that one.
    response = only(machine.poll(Snapshot([EP_A, EP_B2])))
    assert sent_versions(response) == {"b": version(EP_B2)}
    assert response.removed == ()


def test_inv25_request_without_nonce_is_neither_ack_nor_nack() -> None:
    machine = stream()
    start(machine, ENDPOINT, ["a"])
    response = only(machine.poll(Snapshot([EP_A, EP_B])))
    events = change(machine, ENDPOINT, ["b"])
    assert of_type(events, ResponseAcked) == []
    assert of_type(events, ResponseNacked) == []
    assert of_type(events, StaleNonceSeen) == []
    assert machine.type_states()[ENDPOINT].outstanding == response
    assert machine.type_states()[ENDPOINT].held_versions == {}


# --- 11 / 12 / 13 / 14. NACK -------------------------------------------------------------


def test_inv11_nack_is_recognised_by_error_detail() -> None:
    machine = stream()
    start(machine, ENDPOINT, ["a"])
    response = only(machine.poll(Snapshot([EP_A])))
    events = nack(machine, response)
    assert of_type(events, ResponseNacked) == [
        ResponseNacked(
            type_url=ENDPOINT,
            rejected=response.system_version_info,
            version_info="",
            nonce=response.nonce,
            error=ERROR,
        )
    ]
    assert of_type(events, ResponseAcked) == []
    status = machine.type_states()[ENDPOINT]
    assert status.outstanding is None
    assert status.last_error == ERROR
    assert status.nacks == 1
    # The client may have applied it or not: its version is unknown, so a removal of "a"
    # would be sent if it went away.
    assert status.held_versions["a"] == ""
    assert only(machine.poll(Snapshot([], types=[ENDPOINT]))).removed == ("a",)


def test_inv12_nacked_versions_are_not_resent() -> None:
    machine = stream()
    start(machine, ENDPOINT, ["a", "b"])
    snapshot = Snapshot([EP_A, EP_B])
    response = only(machine.poll(snapshot))
    nack(machine, response)
    assert machine.poll(snapshot) == []
    # Another view object with the same content: still nothing.
    assert machine.poll(Snapshot([EP_B, EP_A])) == []


def test_inv12_next_different_version_is_sent_after_nack() -> None:
    machine = stream()
    start(machine, ENDPOINT, ["a", "b"])
    response = only(machine.poll(Snapshot([EP_A, EP_B])))
    nack(machine, response)
    response = only(machine.poll(Snapshot([EP_A2, EP_B])))
    assert sent_versions(response) == {"a": version(EP_A2)}
    assert response.removed == ()


def test_inv12_nacked_removal_is_not_resent() -> None:
    machine = stream()
    start(machine, ENDPOINT, ["a", "b"])
    settle(machine, Snapshot([EP_A, EP_B]))
    without_a = Snapshot([EP_B])
    response = only(machine.poll(without_a))
    assert response.removed == ("a",)
    nack(machine, response)
    assert machine.poll(without_a) == []
    assert machine.poll(Snapshot([EP_B])) == []


def test_inv12_nacked_resource_resent_when_client_asks_for_it_again() -> None:
    machine = stream()
    start(machine, ENDPOINT, ["a"])
    snapshot = Snapshot([EP_A])
    response = only(machine.poll(snapshot))
    nack(machine, response)
    assert machine.poll(snapshot) == []
    change(machine, ENDPOINT, ["a"])
    assert sent(only(machine.poll(snapshot))) == ["a"]


def test_inv12_two_nacked_responses_do_not_ping_pong() -> None:
    machine = stream()
    start(machine, ENDPOINT, ["a"])
    snapshot = Snapshot([EP_A, EP_B])
    first = only(machine.poll(snapshot))
    assert sent(first) == ["a"]
    nack(machine, first, subscribe=["b"])
    second = only(machine.poll(snapshot))
    assert sent(second) == ["b"]
    nack(machine, second)
    # Both versions were rejected and the view is unchanged: nothing may be sent.
    assert machine.poll(snapshot) == []


def test_inv12_unrelated_ack_does_not_resend_nacked_version() -> None:
    machine = stream()
    start(machine, ENDPOINT, ["a", "b"])
    settle(machine, Snapshot([EP_B]))
    snapshot = Snapshot([EP_A, EP_B])
    rejected = only(machine.poll(snapshot))
    assert sent(rejected) == ["a"]
    nack(machine, rejected)
    unrelated = only(machine.poll(Snapshot([EP_A, EP_B2])))
    assert sent(unrelated) == ["b"]
    ack(machine, unrelated)
    # b changes again; a is still at the rejected version and must not be sent again.
    response = only(machine.poll(Snapshot([EP_A, EP_B])))
    assert sent(response) == ["b"]


def test_inv13_nack_and_subscription_change_in_one_request_are_both_processed() -> None:
    machine = stream()
    start(machine, ENDPOINT, ["a"])
    snapshot = Snapshot([EP_A, EP_B])
    response = only(machine.poll(snapshot))
    events = nack(machine, response, subscribe=["b"])
    assert of_type(events, ResponseNacked)
    changed = of_type(events, SubscriptionChanged)
    assert len(changed) == 1
    assert isinstance(changed[0], SubscriptionChanged)
    assert changed[0].subscription == Subscription(frozenset({"a", "b"}))
    response = only(machine.poll(snapshot))
    assert sent(response) == ["b"]  # a's version stays rejected


def test_inv14_after_nack_the_server_assumes_nothing_and_resends_on_change() -> None:
    machine = stream()
    start(machine, ENDPOINT, ["a", "b"])
    response = only(machine.poll(Snapshot([EP_A, EP_B])))
    nack(machine, response)
    # The server cannot know which parts were applied: a later version of a is sent, and b
    # (whose rejected version is unchanged) is not pushed again.
    response = only(machine.poll(Snapshot([EP_A2, EP_B])))
    assert sent(response) == ["a"]
    ack(machine, response)
    assert machine.type_states()[ENDPOINT].held_versions["a"] == version(EP_A2)


# --- 26. stale nonces ----------------------------------------------------------------------


def test_inv26_subscription_change_honoured_with_stale_nonce() -> None:
    machine = stream()
    start(machine, ENDPOINT, ["a"])
    first = only(machine.poll(Snapshot([EP_A, EP_B])))
    ack(machine, first)
    second = only(machine.poll(Snapshot([EP_A2, EP_B])))
    # The client has not seen `second` yet: it subscribes to b echoing the older nonce.
    events = change(machine, ENDPOINT, ["b"], nonce=first.nonce)
    assert of_type(events, StaleNonceSeen) == [
        StaleNonceSeen(type_url=ENDPOINT, nonce=first.nonce, latest=second.nonce)
    ]
    assert of_type(events, ResponseAcked) == []
    assert of_type(events, SubscriptionChanged)
    assert machine.type_states()[ENDPOINT].subscription.names == {"a", "b"}
    # Not an ACK: `second` is still outstanding, so nothing more is sent yet.
    assert machine.type_states()[ENDPOINT].outstanding == second
    assert machine.poll(Snapshot([EP_A2, EP_B])) == []
    ack(machine, second)
    response = only(machine.poll(Snapshot([EP_A2, EP_B])))
    assert sent(response) == ["b"]


def test_inv26_subscription_change_with_stale_nonce_answered_when_nothing_outstanding() -> None:
    machine = stream()
    start(machine, ENDPOINT, ["a"])
    snapshot = Snapshot([EP_A, EP_B])
    first = only(machine.poll(snapshot))
    ack(machine, first)
    events = change(machine, ENDPOINT, ["b"], nonce=first.nonce)
    assert of_type(events, StaleNonceSeen)
    assert sent(only(machine.poll(snapshot))) == ["b"]


def test_inv26_stale_nonce_is_not_taken_as_ack_or_nack() -> None:
    machine = stream()
    start(machine, ENDPOINT, ["a"])
    first = only(machine.poll(Snapshot([EP_A])))
    ack(machine, first)
    second = only(machine.poll(Snapshot([EP_A2])))
    events = list(machine.receive(req(ENDPOINT, nonce=first.nonce, error=ERROR)))
    assert of_type(events, ResponseNacked) == []
    assert of_type(events, ResponseAcked) == []
    assert of_type(events, StaleNonceSeen)
    status = machine.type_states()[ENDPOINT]
    assert status.outstanding == second
    assert status.nacks == 0
    assert status.rejected_versions == {}
    assert status.held_versions == {"a": version(EP_A)}


# --- 27. initial_resource_versions (reconnect) -------------------------------------------


def test_inv27_reconnect_with_current_versions_sends_nothing() -> None:
    snapshot = Snapshot([CL_A, CL_B, EP_A, EP_B])
    old = stream()
    start(old, CLUSTER)
    start(old, ENDPOINT, ["a", "b"])
    settle(old, snapshot)
    held = {url: dict(status.held_versions) for url, status in old.type_states().items()}
    assert held[CLUSTER] == {"a": version(CL_A), "b": version(CL_B)}

    new = stream()
    start(new, CLUSTER, initial=held[CLUSTER])
    start(new, ENDPOINT, ["a", "b"], initial=held[ENDPOINT])
    assert new.poll(snapshot) == []
    assert new.poll(Snapshot([CL_A, CL_B, EP_A, EP_B])) == []


def test_inv27_reconnect_sends_only_the_changed_resource() -> None:
    new = stream()
    start(new, CLUSTER, initial={"a": version(CL_A), "b": version(CL_B)})
    start(new, ENDPOINT, ["a", "b"], initial={"a": version(EP_A), "b": version(EP_B)})
    eds = only(new.poll(Snapshot([CL_A, CL_B, EP_A, EP_B2])), ENDPOINT)
    assert sent_versions(eds) == {"b": version(EP_B2)}
    assert eds.removed == ()


def test_inv27_reconnect_sends_only_the_changed_cluster_and_its_endpoints() -> None:
    new = stream()
    start(new, CLUSTER, initial={"a": version(CL_A), "b": version(CL_B)})
    start(new, ENDPOINT, ["a", "b"], initial={"a": version(EP_A), "b": version(EP_B)})
    cds, eds = new.poll(Snapshot([CL_A, CL_B2, EP_A, EP_B]))
    assert sent_versions(cds) == {"b": version(CL_B2)}
    assert cds.removed == ()
    # The updated cluster warms: its (unchanged) endpoints are owed (inv. 35).
    assert sent_versions(eds) == {"b": version(EP_B)}


def test_inv27_reconnect_removes_held_names_that_no_longer_exist() -> None:
    new = stream()
    start(new, CLUSTER, initial={"a": version(CL_A), "gone": "v0"})
    start(new, ENDPOINT, ["a", "gone"], initial={"a": version(EP_A), "gone": "v0"})
    responses = new.poll(Snapshot([CL_A, EP_A]))
    assert [(r.type_url, sent(r), r.removed) for r in responses] == [
        (CLUSTER, [], ("gone",)),
        (ENDPOINT, [], ("gone",)),
    ]


def test_inv27_reconnect_sends_names_the_client_does_not_hold_yet() -> None:
    new = stream()
    start(new, ENDPOINT, ["a", "b"], initial={"a": version(EP_A)})
    response = only(new.poll(Snapshot([EP_A, EP_B])))
    assert sent(response) == ["b"]


def test_inv27_initial_versions_only_count_on_the_first_request_of_a_type() -> None:
    machine = stream()
    start(machine, ENDPOINT, ["a"])
    machine.receive(req(ENDPOINT, ["b"], initial={"a": version(EP_A), "b": version(EP_B)}))
    assert machine.type_states()[ENDPOINT].held_versions == {}
    response = only(machine.poll(Snapshot([EP_A, EP_B])))
    assert sent(response) == ["a", "b"]


def test_inv07_versions_identical_across_restarts_and_replicas() -> None:
    def build() -> Snapshot:
        return Snapshot(
            [
                eds_cluster("a"),
                eds_cluster("b"),
                load_assignment("a", [("10.0.0.1", 80)]),
                load_assignment("b", [("10.0.1.1", 80)]),
            ]
        )

    replica_1, replica_2 = build(), build()
    assert replica_1 is not replica_2
    seen = []
    for snapshot in (replica_1, replica_2):
        machine = stream()
        start(machine, CLUSTER)
        start(machine, ENDPOINT, ["a", "b"])
        seen.append(
            [(r.type_url, r.system_version_info, sent_versions(r)) for r in machine.poll(snapshot)]
        )
    assert seen[0] == seen[1]
    assert len(seen[0]) == 2
    # A client that got everything from replica 1 reconnects to replica 2: nothing to send.
    reconnect = stream()
    start(reconnect, CLUSTER, initial=seen[0][0][2])
    start(reconnect, ENDPOINT, ["a", "b"], initial=seen[0][1][2])
    assert reconnect.poll(replica_2) == []


# --- 28. every subscribed name is answered ---------------------------------------------


def test_inv28_remove_then_add_resends_the_resource() -> None:
    machine = stream()
    start(machine, ENDPOINT, ["a"])
    snapshot = Snapshot([EP_A])
    response = only(machine.poll(snapshot))
    ack(machine, response)
    assert machine.poll(snapshot) == []
    change(machine, ENDPOINT, unsubscribe=["a"])
    assert machine.poll(snapshot) == []
    change(machine, ENDPOINT, ["a"])
    response = only(machine.poll(snapshot))
    assert sent_versions(response) == {"a": version(EP_A)}


def test_inv28_resubscribing_a_held_name_is_answered() -> None:
    machine = stream()
    start(machine, ENDPOINT, ["a", "b"])
    snapshot = Snapshot([EP_A, EP_B])
    settle(machine, snapshot)
    change(machine, ENDPOINT, ["a"])
    response = only(machine.poll(snapshot))
    assert sent(response) == ["a"]


def test_inv28_remove_then_add_in_one_burst_before_the_poll() -> None:
    machine = stream()
    start(machine, ENDPOINT, ["a"])
    snapshot = Snapshot([EP_A])
    settle(machine, snapshot)
    change(machine, ENDPOINT, unsubscribe=["a"])
    change(machine, ENDPOINT, ["a"])
    assert sent(only(machine.poll(snapshot))) == ["a"]


def test_inv28_subscribed_wildcard_name_is_answered_even_if_held() -> None:
    machine = stream()
    start(machine, CLUSTER, [WILDCARD])
    snapshot = Snapshot([CL_A, CL_B])
    settle(machine, snapshot)
    change(machine, CLUSTER, ["a"])
    assert sent(only(machine.poll(snapshot))) == ["a"]


# --- 29. unsubscribing -------------------------------------------------------------------


def test_inv29_superfluous_unsubscribe_is_accepted_silently() -> None:
    machine = stream()
    start(machine, ENDPOINT, ["a"])
    snapshot = Snapshot([EP_A])
    settle(machine, snapshot)
    before = machine.type_states()[ENDPOINT]
    events = change(machine, ENDPOINT, unsubscribe=["never-subscribed"])
    assert events == []
    assert machine.state is StreamState.OPEN
    assert machine.type_states()[ENDPOINT].subscription == before.subscription
    assert machine.poll(snapshot) == []
    assert machine.poll(Snapshot([EP_A])) == []


def test_inv29_pure_unsubscribe_needs_no_response() -> None:
    machine = stream()
    start(machine, ENDPOINT, ["a", "b"])
    snapshot = Snapshot([EP_A, EP_B])
    settle(machine, snapshot)
    events = change(machine, ENDPOINT, unsubscribe=["a"])
    assert of_type(events, SubscriptionChanged)
    assert machine.poll(snapshot) == []
    assert "a" not in machine.type_states()[ENDPOINT].held_versions
    # Later changes to a are not sent; changes to b are.
    assert machine.poll(Snapshot([EP_A2, EP_B])) == []
    response = only(machine.poll(Snapshot([EP_A3, EP_B2])))
    assert sent(response) == ["b"]
    assert response.removed == ()
    ack(machine, response)
    # Nor is a's deletion.
    assert machine.poll(Snapshot([EP_B2])) == []


# --- 30. explicit unsubscribe while subscribed to the wildcard -----------------------------


def test_inv30_wildcard_unsubscribe_answered_with_resource_still_in_wildcard() -> None:
    machine = stream()
    start(machine, CLUSTER, [WILDCARD, "a"])
    snapshot = Snapshot([CL_A, CL_B])
    settle(machine, snapshot)
    change(machine, CLUSTER, unsubscribe=["a"])
    response = only(machine.poll(snapshot))
    assert sent_versions(response) == {"a": version(CL_A)}
    assert response.removed == ()


def test_inv30_wildcard_unsubscribe_of_missing_name_answered_with_removal() -> None:
    machine = stream()
    start(machine, CLUSTER, [WILDCARD, "ghost"])
    snapshot = Snapshot([CL_A])
    responses = settle(machine, snapshot)
    assert [(sent(r), r.removed) for r in responses] == [(["a"], ("ghost",))]
    change(machine, CLUSTER, unsubscribe=["ghost"])
    response = only(machine.poll(snapshot))
    assert sent(response) == []
    assert response.removed == ("ghost",)


def test_inv30_legacy_wildcard_unsubscribe_is_answered() -> None:
    machine = stream()
    start(machine, LISTENER)
    snapshot = Snapshot([LS_1, LS_2])
    settle(machine, snapshot)
    change(machine, LISTENER, unsubscribe=["l1"])
    response = only(machine.poll(snapshot))
    assert sent(response) == ["l1"]


# --- 31 / 18. names that do not exist ------------------------------------------------------


def test_inv31_nonexistent_subscribed_names_are_in_removed() -> None:
    machine = stream()
    start(machine, ENDPOINT, ["a", "missing-1", "missing-2"])
    response = only(machine.poll(Snapshot([EP_A])))
    assert sent(response) == ["a"]
    assert response.removed == ("missing-1", "missing-2")
    ack(machine, response)
    # Told once; not repeated while nothing changes.
    assert machine.poll(Snapshot([EP_A, CL_A])) == []


def test_inv18_nonexistent_name_is_sent_when_it_appears() -> None:
    machine = stream()
    start(machine, ENDPOINT, ["a", "b"])
    settle(machine, Snapshot([EP_A]))
    response = only(machine.poll(Snapshot([EP_A, EP_B])))
    assert sent_versions(response) == {"b": version(EP_B)}
    assert response.removed == ()


def test_inv18_deleted_then_recreated_resource_is_sent_again() -> None:
    machine = stream()
    start(machine, ENDPOINT, ["a"])
    settle(machine, Snapshot([EP_A]))
    response = only(machine.poll(Snapshot([], types=[ENDPOINT])))
    assert response.removed == ("a",)
    ack(machine, response)
    assert sent(only(machine.poll(Snapshot([EP_A])))) == ["a"]


# --- 16 / 17 / 32. wildcard ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("type_url", "everything"),
    [(CLUSTER, [CL_A, CL_B, CL_C]), (LISTENER, [LS_1, LS_2])],
)
def test_inv32_legacy_wildcard_sends_everything(type_url: str, everything: list[object]) -> None:
    machine = stream()
    events = start(machine, type_url)
    subscription = machine.type_states()[type_url].subscription
    assert subscription.wildcard
    assert subscription.legacy
    assert of_type(events, SubscriptionChanged)
    snapshot = Snapshot(everything)
    response = only(machine.poll(snapshot), type_url)
    assert sent(response) == sorted(make_resource(m).name for m in everything)


def test_inv32_first_request_with_only_an_unsubscribe_is_not_legacy_wildcard() -> None:
    machine = stream()
    machine.receive(req(CLUSTER, unsubscribe=["x"], node=NODE))
    subscription = machine.type_states()[CLUSTER].subscription
    assert not subscription.wildcard
    assert subscription.empty
    assert machine.poll(Snapshot([CL_A])) == []


def test_inv16_empty_first_request_for_a_non_wildcard_type_means_nothing() -> None:
    machine = stream()
    start(machine, ENDPOINT)
    subscription = machine.type_states()[ENDPOINT].subscription
    assert subscription.empty
    assert machine.poll(Snapshot([EP_A, EP_B])) == []


def test_inv17_explicit_wildcard_for_a_named_type() -> None:
    machine = stream()
    start(machine, ENDPOINT, [WILDCARD])
    response = only(machine.poll(Snapshot([EP_A, EP_B, EP_C])))
    assert sent(response) == ["a", "b", "c"]
    assert WILDCARD not in response.removed


def test_inv17_wildcard_plus_names_is_the_union() -> None:
    machine = stream()
    start(machine, CLUSTER, [WILDCARD, "a", "missing"])
    response = only(machine.poll(Snapshot([CL_A, CL_B])))
    assert sent(response) == ["a", "b"]
    assert response.removed == ("missing",)


def test_inv17_new_resource_in_wildcard_is_sent_and_deleted_one_removed() -> None:
    machine = stream()
    start(machine, CLUSTER)
    settle(machine, Snapshot([CL_A, CL_B]))
    response = only(machine.poll(Snapshot([CL_B, CL_C])))
    assert sent(response) == ["c"]
    assert response.removed == ("a",)


def test_inv17_subscribing_a_name_ends_legacy_wildcard() -> None:
    machine = stream()
    start(machine, CLUSTER)
    snapshot = Snapshot([CL_A, CL_B])
    settle(machine, snapshot)
    change(machine, CLUSTER, ["a"])
    assert not machine.type_states()[CLUSTER].subscription.wildcard
    response = only(machine.poll(snapshot))
    assert sent(response) == ["a"]
    assert response.removed == ("b",)
    ack(machine, response)
    # c is no longer wanted.
    assert machine.poll(Snapshot([CL_A, CL_C])) == []


def test_inv17_unsubscribing_wildcard_keeps_explicit_names_only() -> None:
    machine = stream()
    start(machine, CLUSTER, [WILDCARD, "a"])
    settle(machine, Snapshot([CL_A, CL_B]))
    change(machine, CLUSTER, unsubscribe=[WILDCARD])
    subscription = machine.type_states()[CLUSTER].subscription
    assert not subscription.wildcard
    assert subscription.names == {"a"}
    assert machine.poll(Snapshot([CL_A, CL_B2, CL_C])) == []
    assert sent(only(machine.poll(Snapshot([CL_A2, CL_B2])))) == ["a"]


def test_inv17_clearing_every_name_after_legacy_wildcard_means_nothing() -> None:
    machine = stream()
    start(machine, CLUSTER)
    change(machine, CLUSTER, ["a"])
    change(machine, CLUSTER, unsubscribe=["a"])
    subscription = machine.type_states()[CLUSTER].subscription
    assert subscription.empty
    assert machine.poll(Snapshot([CL_A, CL_B])) == []


# --- 33. VHDS aliases ------------------------------------------------------------------------


def test_inv33_vhds_subscription_by_alias_is_answered_with_the_resource() -> None:
    host = make_resource(
        route_components_pb2.VirtualHost(name="rc/vh1", domains=["example.com"]),
        aliases=("rc/example.com",),
    )
    machine = stream()
    start(machine, VIRTUAL_HOST, ["rc/example.com"])
    response = only(machine.poll(Snapshot([host])))
    assert sent(response) == ["rc/vh1"]
    assert response.removed == ()


def vhost(domains: list[str], name: str = "rc/vh1", alias: str = "rc/example.com") -> Resource:
    return make_resource(
        route_components_pb2.VirtualHost(name=name, domains=domains), aliases=(alias,)
    )


def test_inv33_host_subscribed_by_alias_is_not_removed_by_an_unrelated_change() -> None:
    machine = stream()
    start(machine, VIRTUAL_HOST, ["rc/example.com"])
    response = only(machine.poll(Snapshot([vhost(["example.com"])])))
    assert sent(response) == ["rc/vh1"]
    ack(machine, response)
    other = vhost(["other.com"], name="rc/vh2", alias="rc/other.com")
    assert machine.poll(Snapshot([vhost(["example.com"]), other])) == []


def test_inv33_changed_host_subscribed_by_alias_is_sent_not_also_removed() -> None:
    machine = stream()
    start(machine, VIRTUAL_HOST, ["rc/example.com"])
    ack(machine, only(machine.poll(Snapshot([vhost(["example.com"])]))))
    changed = vhost(["example.com", "www.example.com"])
    response = only(machine.poll(Snapshot([changed])))
    assert_well_formed(response)
    assert response.resources == (changed,)
    assert response.removed == ()


def test_inv33_nacked_host_subscribed_by_alias_is_not_resent() -> None:
    machine = stream()
    start(machine, VIRTUAL_HOST, ["rc/example.com"])
    snapshot = Snapshot([vhost(["example.com"])])
    nack(machine, only(machine.poll(snapshot)))
    assert machine.poll(snapshot) == []


def test_inv33_vhds_subscription_by_name_is_answered_with_aliases() -> None:
    host = make_resource(
        route_components_pb2.VirtualHost(name="rc/vh1", domains=["example.com"]),
        aliases=("rc/example.com",),
    )
    machine = stream()
    start(machine, VIRTUAL_HOST, ["rc/vh1"])
    response = only(machine.poll(Snapshot([host])))
    assert response.resources == (host,)
    assert response.resources[0].aliases == ("rc/example.com",)


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


# --- coalescing: at most one outstanding response per type ----------------------------------


def test_at_most_one_outstanding_response_per_type_and_changes_coalesce() -> None:
    machine = stream()
    start(machine, ENDPOINT, ["a", "b"])
    first = only(machine.poll(Snapshot([EP_A, EP_B])))
    assert machine.poll(Snapshot([EP_A2, EP_B])) == []
    assert machine.poll(Snapshot([EP_A3, EP_B2])) == []
    ack(machine, first)
    latest = Snapshot([EP_A3, EP_B2])
    response = only(machine.poll(latest))
    assert sent_versions(response) == {"a": version(EP_A3), "b": version(EP_B2)}
    assert machine.poll(latest) == []
    ack(machine, response)
    assert machine.poll(latest) == []


def test_outstanding_response_on_one_type_does_not_block_another() -> None:
    machine = stream()
    start(machine, CLUSTER)
    start(machine, ENDPOINT, ["a"])
    cds, eds = machine.poll(Snapshot([CL_A, EP_A]))
    ack(machine, eds)
    response = only(machine.poll(Snapshot([CL_A2, EP_A2])), ENDPOINT)
    assert sent(response) == ["a"]
    assert machine.type_states()[CLUSTER].outstanding == cds


# --- 35. warming ---------------------------------------------------------------------------


def test_inv35_ads_cluster_update_resends_unchanged_endpoints() -> None:
    machine = stream()
    start(machine, CLUSTER)
    start(machine, ENDPOINT, ["a", "b"])
    settle(machine, Snapshot([CL_A, CL_B, EP_A, EP_B]))
    responses = machine.poll(Snapshot([CL_A2, CL_B, EP_A, EP_B]))
    assert [(r.type_url, sent(r)) for r in responses] == [(CLUSTER, ["a"]), (ENDPOINT, ["a"])]
    assert sent_versions(responses[1]) == {"a": version(EP_A)}


def test_inv35_endpoints_owed_by_eds_service_name() -> None:
    machine = stream()
    start(machine, CLUSTER)
    start(machine, ENDPOINT, ["svc-s", "a"])
    settle(machine, Snapshot([CL_SVC, CL_A, EP_SVC, EP_A]))
    responses = machine.poll(Snapshot([CL_SVC2, CL_A, EP_SVC, EP_A]))
    assert [(r.type_url, sent(r)) for r in responses] == [
        (CLUSTER, ["s"]),
        (ENDPOINT, ["svc-s"]),
    ]


def test_inv35_endpoints_owed_while_eds_response_outstanding_are_sent_after_ack() -> None:
    machine = stream()
    start(machine, CLUSTER)
    start(machine, ENDPOINT, ["a", "b"])
    settle(machine, Snapshot([CL_A, CL_B, EP_A, EP_B]))
    eds = only(machine.poll(Snapshot([CL_A, CL_B, EP_A, EP_B2])), ENDPOINT)
    cds = only(machine.poll(Snapshot([CL_A2, CL_B, EP_A, EP_B2])), CLUSTER)
    ack(machine, cds)
    ack(machine, eds)
    response = only(machine.poll(Snapshot([CL_A2, CL_B, EP_A, EP_B2])), ENDPOINT)
    assert sent(response) == ["a"]


def test_inv35_not_on_per_type_streams() -> None:
    cds = stream(CLUSTER)
    eds = stream(ENDPOINT)
    start(cds, CLUSTER)
    start(eds, ENDPOINT, ["a"])
    before = Snapshot([CL_A, EP_A])
    settle(cds, before)
    settle(eds, before)
    after = Snapshot([CL_A2, EP_A])
    assert [sent(r) for r in cds.poll(after)] == [["a"]]
    assert eds.poll(after) == []
    assert not cds.aggregated


def test_inv35_endpoints_not_owed_for_unsubscribed_names() -> None:
    machine = stream()
    start(machine, CLUSTER)
    start(machine, ENDPOINT, ["b"])
    settle(machine, Snapshot([CL_A, CL_B, EP_A, EP_B]))
    responses = machine.poll(Snapshot([CL_A2, CL_B, EP_A, EP_B]))
    assert [(r.type_url, sent(r)) for r in responses] == [(CLUSTER, ["a"])]


def test_inv35_endpoints_answered_when_eds_subscription_arrives_after_cluster_response() -> None:
    machine = stream()
    start(machine, CLUSTER, initial={"a": version(CL_A)})
    snapshot = Snapshot([CL_A2, EP_A])
    assert [sent(r) for r in machine.poll(snapshot)] == [["a"]]
    start(machine, ENDPOINT, ["a"], initial={"a": version(EP_A)})
    response = only(machine.poll(snapshot), ENDPOINT)
    assert sent(response) == ["a"]


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


# --- 34 / 36. make-before-break on ADS --------------------------------------------------------


def test_inv34_route_waits_until_its_cluster_and_endpoints_are_acked() -> None:
    machine = stream()
    start(machine, CLUSTER)
    start(machine, ENDPOINT, ["a"])
    start(machine, ROUTE, ["r1"])
    snapshot = Snapshot([CL_A, EP_A, RC_1])
    cds, eds = machine.poll(snapshot)
    assert machine.poll(snapshot) == []  # r1 names cluster a, not held yet
    ack(machine, cds)
    assert machine.poll(snapshot) == []  # a is held but not warm: no endpoints yet
    ack(machine, eds)
    assert sent(only(machine.poll(snapshot), ROUTE)) == ["r1"]


def test_inv34_removed_cluster_kept_while_a_held_route_refers_to_it() -> None:
    machine = stream()
    start(machine, CLUSTER)
    start(machine, ENDPOINT, ["a", "b"])
    start(machine, ROUTE, ["r1"])
    settle(machine, Snapshot([CL_A, EP_A, EP_B, RC_1]))
    moved = Snapshot([CL_B, EP_A, EP_B, route_configuration("r1", [("/", "b")])])
    cds, eds = machine.poll(moved)
    assert (sent(cds), cds.removed) == (["b"], ())  # a stays: r1 still names it
    assert sent(eds) == ["b"]
    ack(machine, cds)
    ack(machine, eds)
    rds = only(machine.poll(moved), ROUTE)
    assert sent(rds) == ["r1"]
    ack(machine, rds)
    cds = only(machine.poll(moved), CLUSTER)
    assert (sent(cds), cds.removed) == ([], ("a",))


def test_inv34_per_type_and_unordered_streams_send_immediately() -> None:
    snapshot = Snapshot([CL_A, EP_A, RC_1])
    per_type = stream(ROUTE)
    start(per_type, ROUTE, ["r1"])
    assert sent(only(per_type.poll(snapshot))) == ["r1"]
    unordered = stream(ordered=False)
    start(unordered, CLUSTER)
    start(unordered, ROUTE, ["r1"])
    assert [r.type_url for r in unordered.poll(snapshot)] == [CLUSTER, ROUTE]


def test_inv34_reference_to_a_resource_the_server_lacks_holds_nothing_back() -> None:
    machine = stream()
    start(machine, CLUSTER)
    start(machine, ROUTE, ["r1", "r3"])
    both = route_configuration("r3", [("/a", "a"), ("/b", "b")])
    snapshot = Snapshot([CL_B, RC_1, both])
    # r1 names only cluster a, which does not exist: waiting for it could never end, so it
    # goes at once. r3 also names b, which exists and the client does not hold yet: it waits.
    cds, rds = machine.poll(snapshot)
    assert (cds.type_url, sent(cds)) == (CLUSTER, ["b"])
    assert (rds.type_url, sent(rds)) == (ROUTE, ["r1"])
    ack(machine, cds)
    ack(machine, rds)
    assert sent(only(machine.poll(snapshot), ROUTE)) == ["r3"]
