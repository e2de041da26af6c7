"""The SotW server state machine: the stream, its node and types, response framing, limits.

One test per protocol invariant the machine implements; test names carry the number of the
invariant they check in the xDS invariants list (XDS_INVARIANTS.md), ``inv01`` … ``inv35``
(here 1-5); ``limits`` tests check the StreamLimits bounds. The other SotW machine tests are
in test_sotw_acks.py, test_sotw_subscriptions.py and test_sotw_warming.py.
"""

from __future__ import annotations

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
    ResponseAcked,
    ResponseNacked,
    Snapshot,
    StreamLimits,
)
from xdscore.protocol import (
    NodeIdentified,
    SotwResponse,
    StaleNonceSeen,
    StreamState,
    Subscription,
    SubscriptionChanged,
)

from ..factories import (
    CL_A,
    CL_B,
    EP_A,
    EP_A2,
    EP_A3,
    EP_B,
    ERROR,
    LS_1,
    LS_2,
    NODE,
    OTHER_NODE,
    RC_1,
    RC_2,
    of_type,
    only,
)
from ._sotw import ack, ads, first, nack, names, per_type, req, settle

# --- 1. node -----------------------------------------------------------------------------


def test_inv01_node_taken_from_first_request() -> None:
    machine = ads()
    events = machine.receive(req(CLUSTER, node=NODE))
    assert events[0] == NodeIdentified(node=NODE)
    assert machine.node == NODE
    # A second type's first request does not identify the node again.
    events = machine.receive(req(LISTENER))
    assert of_type(list(events), NodeIdentified) == []
    assert machine.node == NODE


def test_inv01_node_required_on_first_request() -> None:
    machine = ads()
    with pytest.raises(RemoteProtocolError) as caught:
        machine.receive(req(CLUSTER))
    assert caught.value.status == GrpcStatus.INVALID_ARGUMENT
    assert machine.state is StreamState.ERROR
    assert machine.node is None


def test_inv01_node_may_be_omitted_later() -> None:
    machine = ads()
    first(machine, ENDPOINT, ["a"])
    response = only(machine.poll(Snapshot([EP_A])))
    events = machine.receive(
        req(ENDPOINT, ["a", "b"], version=response.version_info, nonce=response.nonce)
    )
    assert machine.node == NODE
    assert machine.state is StreamState.OPEN
    assert any(isinstance(event, ResponseAcked) for event in events)
    # Repeating the identical node is fine as well.
    machine.receive(req(LISTENER, node=Node(id="node-1", raw=NODE.raw)))
    assert machine.state is StreamState.OPEN


def test_inv01_changed_node_is_rejected_and_machine_enters_error_state() -> None:
    machine = ads()
    first(machine, CLUSTER)
    with pytest.raises(RemoteProtocolError) as caught:
        machine.receive(req(LISTENER, node=OTHER_NODE))
    assert caught.value.status == GrpcStatus.INVALID_ARGUMENT
    assert machine.state is StreamState.ERROR
    with pytest.raises(LocalProtocolError):
        machine.receive(req(LISTENER))
    with pytest.raises(LocalProtocolError):
        machine.poll(Snapshot([CL_A]))


def test_inv01_changed_node_detected_by_raw_encoding() -> None:
    machine = ads()
    first(machine, CLUSTER)
    # Same id, different encoding (e.g. other metadata): a different node.
    with pytest.raises(RemoteProtocolError):
        machine.receive(req(CLUSTER, node=Node(id="node-1", raw=b"\n\x06node-1\x12\x01x")))


# --- 2. type URLs ------------------------------------------------------------------------


def test_inv02_type_url_required_on_ads() -> None:
    machine = ads()
    with pytest.raises(RemoteProtocolError) as caught:
        machine.receive(req("", node=NODE))
    assert caught.value.status == GrpcStatus.INVALID_ARGUMENT
    assert machine.state is StreamState.ERROR


def test_inv02_per_type_service_rejects_other_type() -> None:
    machine = per_type(CLUSTER)
    assert not machine.aggregated
    with pytest.raises(RemoteProtocolError) as caught:
        machine.receive(req(LISTENER, node=NODE))
    assert caught.value.status == GrpcStatus.INVALID_ARGUMENT
    assert machine.state is StreamState.ERROR


def test_inv02_type_is_implicit_on_per_type_service() -> None:
    machine = per_type(CLUSTER)
    events = machine.receive(req("", node=NODE))
    assert SubscriptionChanged(
        type_url=CLUSTER,
        previous=None,
        subscription=Subscription(frozenset(), wildcard=True, legacy=True),
    ) in list(events)
    assert set(machine.type_states()) == {CLUSTER}
    response = only(machine.poll(Snapshot([CL_A, EP_A])), CLUSTER)
    assert names(response) == ["a"]
    # Naming its own type explicitly is accepted too.
    machine.receive(req(CLUSTER, version=response.version_info, nonce=response.nonce))
    assert machine.type_states()[CLUSTER].acks == 1


@pytest.mark.parametrize("type_url", [VIRTUAL_HOST, LBENDPOINT])
def test_inv02_delta_only_types_rejected_on_sotw(type_url: str) -> None:
    machine = ads()
    with pytest.raises(RemoteProtocolError) as caught:
        machine.receive(req(type_url, ["x"], node=NODE))
    assert caught.value.status == GrpcStatus.INVALID_ARGUMENT
    assert machine.state is StreamState.ERROR


def test_inv02_delta_only_type_rejected_on_its_own_sotw_service() -> None:
    machine = per_type(VIRTUAL_HOST)
    with pytest.raises(RemoteProtocolError):
        machine.receive(req("", ["x"], node=NODE))


# --- 3. independent sub-streams ----------------------------------------------------------


def test_inv03_each_type_is_an_independent_substream() -> None:
    machine = ads()
    first(machine, CLUSTER)
    first(machine, ENDPOINT, ["a"])
    view = Snapshot([CL_A, EP_A])
    cds, eds = machine.poll(view)
    assert (cds.type_url, eds.type_url) == (CLUSTER, ENDPOINT)
    # An outstanding CDS response does not block EDS and vice versa; an EDS NACK does not
    # touch CDS.
    events = nack(machine, eds, ["a"])
    assert of_type(events, ResponseNacked)
    events = ack(machine, cds)
    assert events == [
        ResponseAcked(type_url=CLUSTER, version_info=cds.version_info, nonce=cds.nonce)
    ]
    status = machine.type_states()
    assert status[CLUSTER].held_version == cds.version_info
    assert status[CLUSTER].rejected_version is None
    assert status[CLUSTER].last_error is None
    assert status[ENDPOINT].rejected_version == eds.version_info
    assert status[ENDPOINT].last_error == ERROR


def test_inv03_nonce_of_another_type_is_neither_ack_nor_nack() -> None:
    machine = ads()
    first(machine, CLUSTER)
    first(machine, ENDPOINT, ["a"])
    cds, eds = machine.poll(Snapshot([CL_A, EP_A]))
    events = machine.receive(req(ENDPOINT, ["a"], version=cds.version_info, nonce=cds.nonce))
    assert of_type(list(events), ResponseAcked) == []
    assert of_type(list(events), StaleNonceSeen) == [
        StaleNonceSeen(type_url=ENDPOINT, nonce=cds.nonce, latest=eds.nonce)
    ]
    assert machine.type_states()[CLUSTER].outstanding == cds
    assert machine.type_states()[ENDPOINT].outstanding == eds


# --- 4. response type URL ----------------------------------------------------------------


def test_inv04_response_type_url_equals_every_resource_type_url() -> None:
    machine = ads()
    for type_url, subscribed in (
        (CLUSTER, ()),
        (ENDPOINT, ("a", "b")),
        (LISTENER, ()),
        (ROUTE, ("r1", "r2")),
    ):
        first(machine, type_url, subscribed)
    responses = settle(machine, Snapshot([CL_A, CL_B, EP_A, EP_B, LS_1, LS_2, RC_1, RC_2]))
    assert {response.type_url for response in responses} == {CLUSTER, ENDPOINT, LISTENER, ROUTE}
    sent = {(url, name) for response in responses for url, name in _named(response)}
    assert sent == {
        (CLUSTER, "a"),
        (CLUSTER, "b"),
        (ENDPOINT, "a"),
        (ENDPOINT, "b"),
        (LISTENER, "l1"),
        (LISTENER, "l2"),
        (ROUTE, "r1"),
        (ROUTE, "r2"),
    }
    for response in responses:
        assert response.selection.type_url == response.type_url
        for resource in response.selection.resources.values():
            assert resource.type_url == response.type_url
        assert response.version_info == response.selection.version


def _named(response: SotwResponse) -> list[tuple[str, str]]:
    return [(response.type_url, name) for name in response.selection.resources]


# --- 5. nonces ---------------------------------------------------------------------------


def test_inv05_every_response_carries_a_nonce_unique_within_the_stream() -> None:
    machine = ads()
    first(machine, CLUSTER)
    first(machine, ENDPOINT, ["a", "b"])
    first(machine, LISTENER)
    first(machine, ROUTE, ["r1"])
    views = [
        Snapshot([CL_A, EP_A, LS_1, RC_1]),
        Snapshot([CL_A, CL_B, EP_A2, EP_B, LS_1, LS_2, RC_1]),
        Snapshot([CL_B, EP_A3, LS_2, RC_1, RC_2]),
    ]
    seen: list[str] = []
    for view in views:
        responses = machine.poll(view)
        assert responses
        for response in responses:
            assert response.nonce
            seen.append(response.nonce)
            assert machine.type_states()[response.type_url].latest_nonce == response.nonce
            ack(machine, response, {ENDPOINT: ["a", "b"], ROUTE: ["r1"]}.get(response.type_url, ()))
    assert len(seen) == len(set(seen))
    assert len({machine.type_states()[url].latest_nonce for url in machine.type_states()}) == 4


def test_inv05_nonce_from_a_previous_stream_is_not_an_ack() -> None:
    old = ads()
    first(old, CLUSTER)
    response = only(old.poll(Snapshot([CL_A])))
    # The client reconnects and echoes the nonce of the old stream.
    new = ads()
    events = new.receive(req(CLUSTER, version="v-old", nonce=response.nonce, node=NODE))
    assert of_type(list(events), ResponseAcked) == []
    assert of_type(list(events), StaleNonceSeen) == []
    assert new.type_states()[CLUSTER].acks == 0
    assert names(only(new.poll(Snapshot([CL_A])))) == ["a"]


# --- limits ------------------------------------------------------------------------------


def test_limits_too_many_names_in_one_request_is_resource_exhausted() -> None:
    machine = ads(StreamLimits(max_names_per_request=2))
    first(machine, ENDPOINT, ["a", "b"])
    with pytest.raises(RemoteProtocolError) as caught:
        machine.receive(req(ENDPOINT, ["a", "b", "c"]))
    assert caught.value.status == GrpcStatus.RESOURCE_EXHAUSTED
    assert machine.state is StreamState.ERROR


def test_limits_too_many_names_on_first_request_is_resource_exhausted() -> None:
    machine = ads(StreamLimits(max_names_per_request=1))
    with pytest.raises(RemoteProtocolError) as caught:
        first(machine, ENDPOINT, ["a", "b"])
    assert caught.value.status == GrpcStatus.RESOURCE_EXHAUSTED


def test_limits_too_many_subscribed_names_is_resource_exhausted() -> None:
    machine = ads(StreamLimits(max_subscribed_names=2))
    first(machine, ENDPOINT, ["a", "b"])
    with pytest.raises(RemoteProtocolError) as caught:
        machine.receive(req(ENDPOINT, ["a", "b", "c"]))
    assert caught.value.status == GrpcStatus.RESOURCE_EXHAUSTED


def test_limits_name_too_long_is_resource_exhausted() -> None:
    machine = ads(StreamLimits(max_name_length=8))
    with pytest.raises(RemoteProtocolError) as caught:
        first(machine, ENDPOINT, ["x" * 9])
    assert caught.value.status == GrpcStatus.RESOURCE_EXHAUSTED


def test_limits_too_many_types_is_resource_exhausted() -> None:
    machine = ads(StreamLimits(max_types=2))
    first(machine, CLUSTER)
    first(machine, ENDPOINT, ["a"])
    # Another request of a known type is fine.
    machine.receive(req(CLUSTER))
    with pytest.raises(RemoteProtocolError) as caught:
        machine.receive(req(LISTENER))
    assert caught.value.status == GrpcStatus.RESOURCE_EXHAUSTED
    assert machine.state is StreamState.ERROR
    with pytest.raises(LocalProtocolError):
        machine.poll(Snapshot([CL_A]))
