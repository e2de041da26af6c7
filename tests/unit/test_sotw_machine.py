"""The SotW server state machine, one test per protocol invariant it implements.

Test names carry the number of the invariant they check in the xDS invariants list
(XDS_INVARIANTS.md), ``inv01`` … ``inv35``; ``limits`` tests check the StreamLimits bounds.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

import pytest

from xdscore import (
    CLUSTER,
    ENDPOINT,
    LBENDPOINT,
    LISTENER,
    ROUTE,
    SECRET,
    VIRTUAL_HOST,
    GrpcStatus,
    LocalProtocolError,
    Node,
    RemoteProtocolError,
    ResponseAcked,
    ResponseNacked,
    Snapshot,
    StreamLimits,
    make_resource,
)
from xdscore.builders import eds_cluster, http_listener, load_assignment, route_configuration
from xdscore.protocol import (
    DiscoveryRequest,
    ErrorDetail,
    NodeIdentified,
    SotwResponse,
    SotwServer,
    StaleNonceSeen,
    StreamState,
    Subscription,
    SubscriptionChanged,
)

T = TypeVar("T")

NODE = Node(id="node-1", raw=b"\n\x06node-1")
OTHER_NODE = Node(id="node-2", raw=b"\n\x06node-2")
ERROR = ErrorDetail(code=13, message="rejected: bad cluster")

CL_A = eds_cluster("a")
CL_B = eds_cluster("b")
CL_C = eds_cluster("c")
CL_A2 = eds_cluster("a", connect_timeout=5.0)
EP_A = load_assignment("a", [("10.0.0.1", 80)])
EP_A2 = load_assignment("a", [("10.0.0.2", 80)])
EP_A3 = load_assignment("a", [("10.0.0.3", 80)])
EP_B = load_assignment("b", [("10.0.1.1", 80)])
EP_C = load_assignment("c", [("10.0.2.1", 80)])
LS_1 = http_listener("l1", 10001, "r1")
LS_2 = http_listener("l2", 10002, "r2")
LS_2B = http_listener("l2", 10003, "r2")
RC_1 = route_configuration("r1", [("/", "a")])
RC_2 = route_configuration("r2", [("/", "b")])


def nonce_source() -> Callable[[], str]:
    counter = itertools.count(1)
    return lambda: f"n{next(counter)}"


def ads(limits: StreamLimits | None = None) -> SotwServer:
    return SotwServer(nonce_source=nonce_source(), limits=limits)


def per_type(type_url: str) -> SotwServer:
    return SotwServer(nonce_source=nonce_source(), type_url=type_url)


def req(
    type_url: str,
    names: Iterable[str] = (),
    *,
    version: str = "",
    nonce: str = "",
    error: ErrorDetail | None = None,
    node: Node | None = None,
) -> DiscoveryRequest:
    return DiscoveryRequest(
        type_url=type_url,
        version_info=version,
        resource_names=tuple(names),
        response_nonce=nonce,
        error_detail=error,
        node=node,
    )


def first(
    machine: SotwServer, type_url: str, names: Iterable[str] = (), *, version: str = ""
) -> list[object]:
    """The first request of a type; carries the node only if the stream has none yet."""
    node = NODE if machine.node is None else None
    return list(machine.receive(req(type_url, names, version=version, node=node)))


def ack(machine: SotwServer, response: SotwResponse, names: Iterable[str] = ()) -> list[object]:
    return list(
        machine.receive(
            req(
                response.type_url,
                names,
                version=response.version_info,
                nonce=response.nonce,
            )
        )
    )


def nack(
    machine: SotwServer,
    response: SotwResponse,
    names: Iterable[str] = (),
    *,
    held: str = "",
) -> list[object]:
    return list(
        machine.receive(
            req(response.type_url, names, version=held, nonce=response.nonce, error=ERROR)
        )
    )


def echo_names(machine: SotwServer, type_url: str) -> tuple[str, ...]:
    """The resource_names a client repeats to keep its current subscription."""
    subscription = machine.type_states()[type_url].subscription
    if subscription.legacy:
        return ()
    wildcard = ("*",) if subscription.wildcard else ()
    return wildcard + tuple(sorted(subscription.names))


def settle(machine: SotwServer, view: Snapshot, limit: int = 20) -> list[SotwResponse]:
    """Poll and ACK everything until nothing more is sent; every response, in order."""
    sent: list[SotwResponse] = []
    for _ in range(limit):
        responses = machine.poll(view)
        if not responses:
            return sent
        sent.extend(responses)
        for response in responses:
            ack(machine, response, echo_names(machine, response.type_url))
    raise AssertionError(f"still sending after {limit} rounds")


def only(responses: list[SotwResponse], type_url: str | None = None) -> SotwResponse:
    assert len(responses) == 1, responses
    if type_url is not None:
        assert responses[0].type_url == type_url
    return responses[0]


def names(response: SotwResponse) -> list[str]:
    return list(response.selection.resources)


def of_type(events: Sequence[object], cls: type[T]) -> list[T]:
    return [event for event in events if isinstance(event, cls)]


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


# --- 6. stale nonces, one outstanding response, coalescing -------------------------------


def test_inv06_stale_nonce_is_ignored_and_reported() -> None:
    machine = ads()
    first(machine, ENDPOINT, ["a"])
    r1 = only(machine.poll(Snapshot([EP_A, EP_B])))
    ack(machine, r1, ["a"])
    r2 = only(machine.poll(Snapshot([EP_A2, EP_B])))
    ack(machine, r2, ["a"])
    before = machine.type_states()[ENDPOINT]
    # A request echoing the older nonce, even one that would change the subscription.
    events = machine.receive(req(ENDPOINT, ["a", "b"], version=r1.version_info, nonce=r1.nonce))
    assert list(events) == [StaleNonceSeen(type_url=ENDPOINT, nonce=r1.nonce, latest=r2.nonce)]
    assert machine.type_states()[ENDPOINT] == before
    assert machine.poll(Snapshot([EP_A2, EP_B])) == []


def test_inv06_stale_nack_is_not_taken_as_nack() -> None:
    machine = ads()
    first(machine, ENDPOINT, ["a"])
    r1 = only(machine.poll(Snapshot([EP_A])))
    ack(machine, r1, ["a"])
    r2 = only(machine.poll(Snapshot([EP_A2])))
    events = machine.receive(req(ENDPOINT, ["a"], nonce=r1.nonce, error=ERROR))
    assert of_type(list(events), ResponseNacked) == []
    assert of_type(list(events), StaleNonceSeen)
    status = machine.type_states()[ENDPOINT]
    assert status.rejected_version is None
    assert status.nacks == 0
    assert status.outstanding == r2


def test_inv06_at_most_one_unacked_response_per_type() -> None:
    machine = ads()
    first(machine, CLUSTER)
    r1 = only(machine.poll(Snapshot([CL_A])))
    assert machine.type_states()[CLUSTER].outstanding == r1
    # The cache changes while r1 is outstanding: nothing more is sent.
    assert machine.poll(Snapshot([CL_A, CL_B])) == []
    assert machine.poll(Snapshot([CL_A, CL_B])) == []
    ack(machine, r1)
    r2 = only(machine.poll(Snapshot([CL_A, CL_B])))
    assert names(r2) == ["a", "b"]
    assert r2.nonce != r1.nonce


def test_inv06_changes_during_an_outstanding_response_coalesce_to_the_latest() -> None:
    machine = ads()
    first(machine, CLUSTER)
    r1 = only(machine.poll(Snapshot([CL_A])))
    assert machine.poll(Snapshot([CL_A, CL_B])) == []
    newest = Snapshot([CL_A2, CL_B, CL_C])
    assert machine.poll(newest) == []
    ack(machine, r1)
    r2 = only(machine.poll(newest))
    assert names(r2) == ["a", "b", "c"]
    assert r2.version_info == newest.version(CLUSTER)
    assert r2.selection.resources["a"].version != r1.selection.resources["a"].version
    ack(machine, r2)
    assert machine.poll(newest) == []


def test_inv06_poll_without_a_view_sends_nothing_and_consumes_nothing() -> None:
    machine = ads()
    first(machine, CLUSTER)
    first(machine, ENDPOINT, ["a"])
    assert machine.poll(None) == []
    assert all(status.outstanding is None for status in machine.type_states().values())
    assert len(machine.poll(Snapshot([CL_A, EP_A]))) == 2


# --- 7. versions held, resume ------------------------------------------------------------


def test_inv07_ack_records_the_version_the_client_holds() -> None:
    machine = ads()
    first(machine, CLUSTER)
    response = only(machine.poll(Snapshot([CL_A])))
    status = machine.type_states()[CLUSTER]
    assert status.held_version is None
    assert status.outstanding == response
    ack(machine, response)
    status = machine.type_states()[CLUSTER]
    assert status.held_version == response.version_info
    assert status.outstanding is None
    assert status.acks == 1


def test_inv07_reconnect_with_current_version_is_sent_nothing() -> None:
    view = Snapshot([CL_A, CL_B, EP_A])
    machine = ads()
    first(machine, CLUSTER, version=view.version(CLUSTER))
    assert machine.type_states()[CLUSTER].held_version == view.version(CLUSTER)
    assert machine.poll(view) == []
    # The next real change is sent.
    response = only(machine.poll(Snapshot([CL_A, EP_A])))
    assert names(response) == ["a"]


def test_inv07_reconnect_with_other_version_gets_the_content() -> None:
    view = Snapshot([CL_A, CL_B])
    machine = ads()
    first(machine, CLUSTER, version="some-older-version")
    response = only(machine.poll(view))
    assert names(response) == ["a", "b"]
    assert response.version_info == view.version(CLUSTER)


def test_inv07_reconnect_resume_is_per_type() -> None:
    view = Snapshot([CL_A, EP_A, LS_1])
    machine = ads()
    first(machine, CLUSTER, version=view.version(CLUSTER))
    first(machine, LISTENER, version="stale")
    response = only(machine.poll(view))
    assert response.type_url == LISTENER


# --- 9. nothing unchanged is resent ------------------------------------------------------


def test_inv09_unchanged_content_is_not_resent() -> None:
    machine = ads()
    first(machine, CLUSTER)
    first(machine, ENDPOINT, ["a"])
    for response in machine.poll(Snapshot([CL_A, EP_A])):
        ack(machine, response, ["a"] if response.type_url == ENDPOINT else ())
    assert machine.poll(Snapshot([CL_A, EP_A])) == []
    # An unrelated resource changing does not resend the selection it is not part of.
    assert machine.poll(Snapshot([CL_A, EP_A, EP_B])) == []


# --- 10/11. ACK and NACK ------------------------------------------------------------------


def test_inv10_ack_is_matching_nonce_without_error_detail() -> None:
    machine = ads()
    first(machine, CLUSTER)
    response = only(machine.poll(Snapshot([CL_A])))
    events = ack(machine, response)
    assert events == [
        ResponseAcked(type_url=CLUSTER, version_info=response.version_info, nonce=response.nonce)
    ]


def test_inv11_nack_recognised_by_error_detail_not_by_version() -> None:
    machine = ads()
    first(machine, ENDPOINT, ["a"])
    r1 = only(machine.poll(Snapshot([EP_A])))
    # error_detail present, even though the version echoes the response's: a NACK.
    events = machine.receive(
        req(ENDPOINT, ["a"], version=r1.version_info, nonce=r1.nonce, error=ERROR)
    )
    assert of_type(events, ResponseNacked)
    assert of_type(events, ResponseAcked) == []
    r2 = only(machine.poll(Snapshot([EP_A2])))
    # No error_detail, although the version is not the response's (the subscription may have
    # changed): an ACK.
    events = machine.receive(req(ENDPOINT, ["a"], version="whatever", nonce=r2.nonce))
    assert events == [
        ResponseAcked(type_url=ENDPOINT, version_info=r2.version_info, nonce=r2.nonce)
    ]


def test_inv11_nack_reports_rejected_version_and_error_and_keeps_it_in_status() -> None:
    machine = ads()
    first(machine, CLUSTER)
    good = only(machine.poll(Snapshot([CL_A])))
    ack(machine, good)
    bad = only(machine.poll(Snapshot([CL_A, CL_B])))
    events = nack(machine, bad, held=good.version_info)
    assert events == [
        ResponseNacked(
            type_url=CLUSTER,
            rejected=bad.version_info,
            version_info=good.version_info,
            nonce=bad.nonce,
            error=ERROR,
        )
    ]
    status = machine.type_states()[CLUSTER]
    assert status.rejected_version == bad.version_info
    assert status.last_error == ERROR
    assert status.nacks == 1
    assert status.outstanding is None
    assert status.held_version is None


# --- 12. rejected content is not resent ---------------------------------------------------


def test_inv12_nacked_version_not_resent_next_different_version_is() -> None:
    machine = ads()
    first(machine, CLUSTER)
    bad_view = Snapshot([CL_A, CL_B])
    bad = only(machine.poll(bad_view))
    nack(machine, bad)
    assert machine.poll(bad_view) == []
    assert machine.poll(Snapshot([CL_B, CL_A])) == []  # equal content, rebuilt
    fixed = only(machine.poll(Snapshot([CL_A2, CL_B])))
    assert fixed.version_info != bad.version_info
    assert names(fixed) == ["a", "b"]


def test_inv12_nacked_version_not_resent_when_client_re_requests_with_same_nonce() -> None:
    machine = ads()
    first(machine, ENDPOINT, ["a"])
    view = Snapshot([EP_A])
    bad = only(machine.poll(view))
    nack(machine, bad, ["a"])
    # Envoy repeats its request (same nonce, still the last good version).
    events = machine.receive(req(ENDPOINT, ["a"], nonce=bad.nonce))
    assert of_type(list(events), StaleNonceSeen) == []
    assert machine.poll(view) == []
    events = machine.receive(req(ENDPOINT, ["a"], nonce=bad.nonce, error=ERROR))
    assert machine.poll(view) == []


def test_inv12_nacked_endpoints_not_resent_by_the_warming_rule() -> None:
    machine = ads()
    first(machine, CLUSTER)
    first(machine, ENDPOINT, ["a"])
    cds, eds = machine.poll(Snapshot([CL_A, EP_A]))
    ack(machine, cds)
    nack(machine, eds, ["a"])
    # A cluster change is sent; the endpoints would be owed for warming, but they are the
    # rejected content.
    responses = machine.poll(Snapshot([CL_A2, EP_A]))
    assert [response.type_url for response in responses] == [CLUSTER]
    ack(machine, responses[0])
    assert machine.poll(Snapshot([CL_A2, EP_A])) == []


# --- 13. NACK and subscription change together --------------------------------------------


def test_inv13_nack_and_subscription_change_in_same_request_are_both_processed() -> None:
    machine = ads()
    first(machine, ENDPOINT, ["a"])
    view = Snapshot([EP_A, EP_B])
    bad = only(machine.poll(view))
    events = nack(machine, bad, ["a", "b"])
    nacked = of_type(events, ResponseNacked)
    changed = of_type(events, SubscriptionChanged)
    assert len(nacked) == 1
    assert nacked[0].rejected == bad.version_info
    assert changed == [
        SubscriptionChanged(
            type_url=ENDPOINT,
            previous=Subscription(frozenset({"a"})),
            subscription=Subscription(frozenset({"a", "b"})),
        )
    ]
    response = only(machine.poll(view))
    assert names(response) == ["a", "b"]


# --- 14. after a NACK the client may hold anything ----------------------------------------


def test_inv14_revert_to_previously_acked_content_is_sent_after_nack() -> None:
    machine = ads()
    first(machine, CLUSTER)
    good_view = Snapshot([CL_A])
    good = only(machine.poll(good_view))
    ack(machine, good)
    bad = only(machine.poll(Snapshot([CL_A, CL_B])))
    nack(machine, bad, held=good.version_info)
    # The client may have applied part of the rejected response: reverting must be sent.
    revert = only(machine.poll(good_view))
    assert revert.version_info == good.version_info
    assert names(revert) == ["a"]


# --- 15/16/17. subscriptions and wildcard -------------------------------------------------


def test_inv15_resource_names_is_the_full_desired_set() -> None:
    machine = ads()
    first(machine, ENDPOINT, ["a", "b"])
    view = Snapshot([EP_A, EP_B, EP_C])
    r1 = only(machine.poll(view))
    assert names(r1) == ["a", "b"]
    events = ack(machine, r1, ["b", "c"])
    assert of_type(events, SubscriptionChanged)[0].subscription == Subscription(
        frozenset({"b", "c"})
    )
    r2 = only(machine.poll(view))
    assert names(r2) == ["b", "c"]


def test_inv15_subscription_change_while_a_response_is_outstanding_is_kept() -> None:
    machine = ads()
    first(machine, ENDPOINT, ["a"])
    view = Snapshot([EP_A, EP_B])
    r1 = only(machine.poll(view))
    # The client has not seen r1 yet (no nonce) and asks for more.
    events = machine.receive(req(ENDPOINT, ["a", "b"]))
    assert of_type(list(events), SubscriptionChanged)
    assert machine.type_states()[ENDPOINT].outstanding == r1
    assert machine.poll(view) == []
    ack(machine, r1, ["a", "b"])
    assert names(only(machine.poll(view))) == ["a", "b"]


@pytest.mark.parametrize("type_url", [ENDPOINT, ROUTE, SECRET])
def test_inv16_empty_first_request_means_nothing_for_non_wildcard_types(type_url: str) -> None:
    machine = ads()
    first(machine, type_url)
    subscription = machine.type_states()[type_url].subscription
    assert subscription.empty
    assert not subscription.wildcard
    view = Snapshot([EP_A, EP_B, RC_1], types=[SECRET])
    responses = machine.poll(view)
    assert len(responses) <= 1
    assert all(not response.selection.resources for response in responses)


def test_inv16_emptying_the_list_unsubscribes_everything_for_eds() -> None:
    machine = ads()
    first(machine, ENDPOINT, ["a"])
    view = Snapshot([EP_A, EP_B])
    response = only(machine.poll(view))
    ack(machine, response, [])
    assert machine.type_states()[ENDPOINT].subscription.empty
    responses = machine.poll(view)
    assert len(responses) <= 1
    assert all(not response.selection.resources for response in responses)


@pytest.mark.parametrize("type_url", [CLUSTER, LISTENER])
def test_inv17_legacy_wildcard_empty_first_request_gets_everything(type_url: str) -> None:
    machine = ads()
    first(machine, type_url)
    subscription = machine.type_states()[type_url].subscription
    assert subscription.wildcard
    assert subscription.legacy
    response = only(machine.poll(Snapshot([CL_A, CL_B, LS_1, LS_2])))
    assert names(response) == (["a", "b"] if type_url == CLUSTER else ["l1", "l2"])


def test_inv17_legacy_wildcard_survives_further_empty_requests() -> None:
    machine = ads()
    first(machine, CLUSTER)
    r1 = only(machine.poll(Snapshot([CL_A])))
    ack(machine, r1)
    assert machine.type_states()[CLUSTER].subscription.legacy
    r2 = only(machine.poll(Snapshot([CL_A, CL_B])))
    assert names(r2) == ["a", "b"]


def test_inv17_explicit_wildcard_gets_everything() -> None:
    machine = ads()
    first(machine, CLUSTER, ["*"])
    subscription = machine.type_states()[CLUSTER].subscription
    assert subscription.wildcard
    assert not subscription.legacy
    assert names(only(machine.poll(Snapshot([CL_A, CL_B])))) == ["a", "b"]


def test_inv17_explicit_wildcard_on_a_non_wildcard_type() -> None:
    machine = ads()
    first(machine, ENDPOINT, ["*"])
    assert names(only(machine.poll(Snapshot([EP_A, EP_B])))) == ["a", "b"]


def test_inv17_wildcard_plus_names_is_the_union() -> None:
    machine = ads()
    first(machine, CLUSTER, ["*", "x"])
    subscription = machine.type_states()[CLUSTER].subscription
    assert subscription.wildcard
    assert subscription.names == frozenset({"x"})
    r1 = only(machine.poll(Snapshot([CL_A, CL_B])))
    assert names(r1) == ["a", "b"]
    # Dropping "*" but keeping a name narrows to that name.
    ack(machine, r1, ["a"])
    assert names(only(machine.poll(Snapshot([CL_A, CL_B])))) == ["a"]


def test_inv17_legacy_wildcard_ends_once_names_were_sent() -> None:
    machine = ads()
    first(machine, CLUSTER)
    view = Snapshot([CL_A, CL_B])
    r1 = only(machine.poll(view))
    assert names(r1) == ["a", "b"]
    ack(machine, r1, ["a"])
    r2 = only(machine.poll(view))
    assert names(r2) == ["a"]
    # Clearing the list now means "nothing", not legacy wildcard again.
    events = ack(machine, r2, [])
    subscription = machine.type_states()[CLUSTER].subscription
    assert subscription.empty
    assert not subscription.legacy
    assert of_type(events, SubscriptionChanged)[0].subscription == subscription
    r3 = only(machine.poll(view))
    assert names(r3) == []


def test_inv17_explicit_wildcard_then_empty_list_means_nothing() -> None:
    machine = ads()
    first(machine, LISTENER, ["*"])
    view = Snapshot([LS_1, LS_2])
    r1 = only(machine.poll(view))
    ack(machine, r1, [])
    assert machine.type_states()[LISTENER].subscription.empty
    assert names(only(machine.poll(view))) == []


# --- 18/20. missing names, newly subscribed names ------------------------------------------


def test_inv18_requested_missing_names_are_sent_when_they_appear() -> None:
    machine = ads()
    first(machine, ENDPOINT, ["a", "b"])
    r1 = only(machine.poll(Snapshot([EP_A])))
    assert names(r1) == ["a"]
    ack(machine, r1, ["a", "b"])
    assert machine.poll(Snapshot([EP_A])) == []
    r2 = only(machine.poll(Snapshot([EP_A, EP_B])))
    assert names(r2) == ["a", "b"]


def test_inv18_requested_missing_cluster_sent_when_it_appears() -> None:
    machine = ads()
    first(machine, CLUSTER, ["a", "z"])
    r1 = only(machine.poll(Snapshot([CL_A])))
    ack(machine, r1, ["a", "z"])
    r2 = only(machine.poll(Snapshot([CL_A, eds_cluster("z")])))
    assert names(r2) == ["a", "z"]


def test_inv20_newly_subscribed_names_are_sent() -> None:
    machine = ads()
    first(machine, ROUTE, ["r1"])
    view = Snapshot([RC_1, RC_2])
    r1 = only(machine.poll(view))
    assert names(r1) == ["r1"]
    ack(machine, r1, ["r1", "r2"])
    r2 = only(machine.poll(view))
    assert names(r2) == ["r1", "r2"]


def test_inv20_re_request_with_latest_nonce_after_ack_is_answered() -> None:
    machine = ads()
    first(machine, ROUTE, ["r1"])
    view = Snapshot([RC_1])
    r1 = only(machine.poll(view))
    ack(machine, r1, ["r1"])
    assert machine.poll(view) == []
    # The client asks again (e.g. a second listener now wants "r1"): it expects an answer
    # even though nothing changed.
    events = machine.receive(req(ROUTE, ["r1"], version=r1.version_info, nonce=r1.nonce))
    assert of_type(list(events), ResponseAcked) == []
    assert machine.type_states()[ROUTE].owed
    r2 = only(machine.poll(view))
    assert r2.version_info == r1.version_info
    assert names(r2) == ["r1"]
    assert r2.nonce != r1.nonce
    assert not machine.type_states()[ROUTE].owed


# --- 21. full state for LDS/CDS ----------------------------------------------------------


def test_inv21_removing_a_cluster_sends_cds_without_it() -> None:
    machine = ads()
    first(machine, CLUSTER)
    r1 = only(machine.poll(Snapshot([CL_A, CL_B, EP_A, EP_B])))
    ack(machine, r1)
    r2 = only(machine.poll(Snapshot([CL_A, EP_A, EP_B])))
    assert names(r2) == ["a"]


def test_inv21_lds_responses_carry_every_listener_each_time() -> None:
    machine = ads()
    first(machine, LISTENER)
    r1 = only(machine.poll(Snapshot([LS_1, LS_2])))
    ack(machine, r1)
    r2 = only(machine.poll(Snapshot([LS_1, LS_2B])))
    assert names(r2) == ["l1", "l2"]
    assert r2.selection.resources["l1"] == r1.selection.resources["l1"]


@pytest.mark.parametrize("type_url", [CLUSTER, LISTENER])
def test_inv21_empty_snapshot_type_sends_an_empty_response(type_url: str) -> None:
    machine = ads()
    first(machine, type_url)
    view = Snapshot([], types=[CLUSTER, LISTENER])
    response = only(machine.poll(view))
    assert response.type_url == type_url
    assert names(response) == []
    assert response.nonce
    ack(machine, response)
    assert machine.poll(view) == []


def test_inv21_type_the_view_is_not_authoritative_for_gets_no_response() -> None:
    machine = ads()
    first(machine, CLUSTER)
    first(machine, LISTENER)
    # The view holds clusters only: an empty LDS response would delete every listener.
    responses = machine.poll(Snapshot([CL_A]))
    assert [response.type_url for response in responses] == [CLUSTER]
    assert machine.type_states()[LISTENER].outstanding is None
    assert machine.type_states()[LISTENER].latest_nonce == ""
    # Once the view declares listeners (even none), they are served.
    response = only(machine.poll(Snapshot([CL_A], types=[LISTENER])), LISTENER)
    assert names(response) == []


def test_inv21_deleting_every_cluster_sends_an_empty_cds_response() -> None:
    machine = ads()
    first(machine, CLUSTER)
    r1 = only(machine.poll(Snapshot([CL_A], types=[CLUSTER])))
    ack(machine, r1)
    r2 = only(machine.poll(Snapshot([], types=[CLUSTER])))
    assert names(r2) == []


# --- 34. order ---------------------------------------------------------------------------


def test_inv34_responses_of_one_poll_follow_make_before_break_order() -> None:
    machine = ads()
    # Subscribe in the "wrong" order.
    # (The route names a cluster the client does not subscribe to, so it is not held back
    # waiting for that cluster: see invariant 36.)
    first(machine, ROUTE, ["r9"])
    first(machine, LISTENER)
    first(machine, ENDPOINT, ["a"])
    first(machine, CLUSTER, ["a"])
    view = Snapshot([CL_A, EP_A, LS_1, route_configuration("r9", [("/", "elsewhere")])])
    responses = machine.poll(view)
    assert [response.type_url for response in responses] == [CLUSTER, ENDPOINT, LISTENER, ROUTE]


# --- 36. routes are not warmed: clusters first ------------------------------------------


def _route_names(responses: list[SotwResponse]) -> list[str]:
    return [name for r in responses if r.type_url == ROUTE for name in names(r)]


def _ack_type(machine: SotwServer, responses: list[SotwResponse], type_url: str) -> None:
    for response in responses:
        if response.type_url == type_url:
            ack(machine, response, echo_names(machine, type_url))


def test_inv36_route_to_a_new_cluster_waits_until_the_cluster_is_warm_on_ads() -> None:
    machine = ads()
    first(machine, CLUSTER)
    first(machine, ENDPOINT, ["a"])
    first(machine, ROUTE, ["r1"])
    view = Snapshot([CL_A, EP_A, RC_1])  # r1 routes to cluster "a"
    sent = machine.poll(view)
    cds = only([r for r in sent if r.type_url == CLUSTER])
    eds = only([r for r in sent if r.type_url == ENDPOINT])
    assert "r1" not in _route_names(sent)
    _ack_type(machine, sent, ROUTE)
    sent = machine.poll(view)
    assert "r1" not in _route_names(sent)
    # The cluster is held but not warm (no endpoints yet): the route still waits.
    ack(machine, cds)
    _ack_type(machine, sent, ROUTE)
    sent = machine.poll(view)
    assert "r1" not in _route_names(sent)
    _ack_type(machine, sent, ROUTE)
    ack(machine, eds, ["a"])
    sent = settle(machine, view)
    assert "r1" in _route_names(sent)


def test_inv36_removed_cluster_stays_while_a_held_route_refers_to_it() -> None:
    machine = ads()
    first(machine, CLUSTER)
    first(machine, ENDPOINT, ["a", "b"])
    first(machine, ROUTE, ["r2"])
    settle(machine, Snapshot([CL_A, CL_B, EP_A, EP_B, RC_2]))  # r2 routes to "b"
    moved = route_configuration("r2", [("/", "a")])
    view = Snapshot([CL_A, EP_A, EP_B, moved])
    sent = machine.poll(view)
    for response in sent:
        if response.type_url == CLUSTER:
            assert "b" in names(response)
    routes = [r for r in sent if r.type_url == ROUTE]
    assert routes
    assert routes[0].selection.resources["r2"].version == make_resource(moved).version
    for response in sent:
        ack(machine, response, echo_names(machine, response.type_url))
    later = settle(machine, view)
    clusters = [r for r in later if r.type_url == CLUSTER]
    assert clusters
    assert names(clusters[-1]) == ["a"]


def test_inv36_route_to_a_cluster_without_endpoints_is_not_held_back_forever() -> None:
    machine = ads()
    first(machine, CLUSTER)
    first(machine, ENDPOINT, ["a", "b"])
    first(machine, ROUTE, ["r"])
    routes = route_configuration("r", [("/a", "a"), ("/b", "b")])
    # Cluster "a" has no ClusterLoadAssignment: Envoy warms it until its initial fetch
    # timeout and then uses it; no EDS response for "a" will ever come from this view.
    view = Snapshot([CL_A, CL_B, EP_B, routes], types=[ENDPOINT])
    sent = settle(machine, view)
    assert "b" in [name for r in sent if r.type_url == ENDPOINT for name in names(r)]
    assert "r" in _route_names(sent)


def test_inv36_per_type_route_stream_is_not_held_back() -> None:
    machine = per_type(ROUTE)
    machine.receive(req("", ["r1"], node=NODE))
    assert names(only(machine.poll(Snapshot([CL_A, EP_A, RC_1])))) == ["r1"]


# --- 35. warming -------------------------------------------------------------------------


def test_inv35_endpoints_resent_after_a_cluster_response_on_ads() -> None:
    machine = ads()
    first(machine, CLUSTER)
    first(machine, ENDPOINT, ["a"])
    cds, eds = machine.poll(Snapshot([CL_A, EP_A]))
    ack(machine, cds)
    ack(machine, eds, ["a"])
    # The cluster changes, its endpoints do not: the cluster warms until it gets them.
    responses = machine.poll(Snapshot([CL_A2, EP_A]))
    assert [response.type_url for response in responses] == [CLUSTER, ENDPOINT]
    assert responses[1].version_info == eds.version_info
    assert names(responses[1]) == ["a"]
    for response in responses:
        ack(machine, response, ["a"] if response.type_url == ENDPOINT else ())
    assert machine.poll(Snapshot([CL_A2, EP_A])) == []


def test_inv35_endpoints_owed_while_outstanding_are_sent_after_the_ack() -> None:
    machine = ads()
    first(machine, ENDPOINT, ["a"])
    eds = only(machine.poll(Snapshot([EP_A])))
    first(machine, CLUSTER)
    cds = only(machine.poll(Snapshot([CL_A, EP_A])), CLUSTER)
    ack(machine, eds, ["a"])
    again = only(machine.poll(Snapshot([CL_A, EP_A])), ENDPOINT)
    assert again.version_info == eds.version_info
    assert cds.nonce != again.nonce


def test_inv35_no_warming_resend_on_per_type_streams() -> None:
    cds_stream = per_type(CLUSTER)
    eds_stream = per_type(ENDPOINT)
    cds_stream.receive(req("", node=NODE))
    eds_stream.receive(req("", ["a"], node=NODE))
    view = Snapshot([CL_A, EP_A])
    cds = only(cds_stream.poll(view))
    eds = only(eds_stream.poll(view))
    ack(cds_stream, cds)
    ack(eds_stream, eds, ["a"])
    changed = Snapshot([CL_A2, EP_A])
    assert names(only(cds_stream.poll(changed))) == ["a"]
    assert eds_stream.poll(changed) == []


def test_inv35_endpoints_answered_after_cluster_response_on_reconnect() -> None:
    view = Snapshot([CL_A2, EP_A])
    machine = ads()
    # Reconnect: Envoy re-requests CDS with an old version and then EDS with its (current)
    # version; the driver polls between the two requests.
    first(machine, CLUSTER, version="clusters-before-disconnect")
    cds = only(machine.poll(view), CLUSTER)
    assert names(cds) == ["a"]
    endpoints = view.select(ENDPOINT, Subscription(frozenset({"a"})))
    assert endpoints is not None
    first(machine, ENDPOINT, ["a"], version=endpoints.version)
    # Cluster "a" changed and warms until it receives its endpoints.
    responses = machine.poll(view)
    assert [response.type_url for response in responses] == [ENDPOINT]


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
