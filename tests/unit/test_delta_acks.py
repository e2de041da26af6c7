"""The Delta server state machine: ACKs, NACKs, nonces and what the client holds.

Test names carry the number of the invariant they check in the xDS invariants list
(XDS_INVARIANTS.md): ACK and requests without a nonce (10, 25), NACKs (11-14), stale nonces
(26), ``initial_resource_versions`` on reconnect (27, 7), and one outstanding response per
type.
"""

from __future__ import annotations

from xdscore import (
    CLUSTER,
    ENDPOINT,
    ResponseAcked,
    ResponseNacked,
    Snapshot,
)
from xdscore.builders import eds_cluster, load_assignment
from xdscore.protocol import (
    StaleNonceSeen,
    Subscription,
    SubscriptionChanged,
)

from ..factories import (
    CL_A,
    CL_A2,
    CL_B,
    EP_A,
    EP_A2,
    EP_A3,
    EP_B,
    EP_B2,
    ERROR,
    of_type,
    only,
    version,
)
from ._delta import (
    CL_B2,
    ack,
    change,
    nack,
    req,
    sent,
    sent_versions,
    settle,
    start,
    stream,
)

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


def test_inv14_a_version_held_before_a_nack_is_sent_again_when_it_comes_back() -> None:
    """Found by DeltaTtlProperties: the client held a at A, NACKed a response carrying a at
    A2 (for another resource's sake) and applied A2; the cache goes back to A. The server
    must not still believe the client holds A."""
    machine = stream()
    start(machine, ENDPOINT, ["a", "b"])
    ack(machine, only(machine.poll(Snapshot([EP_A, EP_B]))))
    nack(machine, only(machine.poll(Snapshot([EP_A2, EP_B2]))))
    assert machine.type_states()[ENDPOINT].held_versions == {"a": "", "b": ""}
    response = only(machine.poll(Snapshot([EP_A, EP_B2])))
    assert sent_versions(response) == {"a": version(EP_A)}


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
