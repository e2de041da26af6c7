"""The Delta server state machine: warming and make-before-break on ADS (34-36).

Test names carry the number of the invariant they check in the xDS invariants list
(XDS_INVARIANTS.md). Make-before-break on both machines in more depth: test_ordering.py.
"""

from __future__ import annotations

from xdscore import (
    CLUSTER,
    ENDPOINT,
    ROUTE,
    Snapshot,
)
from xdscore.builders import route_configuration

from ..factories import (
    CL_A,
    CL_A2,
    CL_B,
    EP_A,
    EP_B,
    EP_B2,
    RC_1,
    only,
    version,
)
from ._delta import (
    CL_SVC,
    CL_SVC2,
    EP_SVC,
    ack,
    sent,
    sent_versions,
    settle,
    start,
    stream,
)

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
