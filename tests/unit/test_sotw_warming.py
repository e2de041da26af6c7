"""The SotW server state machine: order, make-before-break and warming (34-36).

Test names carry the number of the invariant they check in the xDS invariants list
(XDS_INVARIANTS.md). Make-before-break on both machines in more depth: test_ordering.py.
"""

from __future__ import annotations

from xdscore import (
    CLUSTER,
    ENDPOINT,
    LISTENER,
    ROUTE,
    Snapshot,
    make_resource,
)
from xdscore.builders import route_configuration
from xdscore.protocol import (
    SotwResponse,
    SotwServer,
    Subscription,
)

from ..factories import (
    CL_A,
    CL_A2,
    CL_B,
    EP_A,
    EP_B,
    LS_1,
    NODE,
    RC_1,
    RC_2,
    only,
)
from ._sotw import ack, ads, echo_names, first, names, per_type, req, settle

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
