"""The SotW server state machine: nonces, versions, ACKs and NACKs (invariants 6-14).

Test names carry the number of the invariant they check in the xDS invariants list
(XDS_INVARIANTS.md): one response outstanding per type, stale nonces, the version the client
holds and resuming from it, what is (not) sent again after an ACK or a NACK.
"""

from __future__ import annotations

from xdscore import (
    CLUSTER,
    ENDPOINT,
    LISTENER,
    ResponseAcked,
    ResponseNacked,
    Snapshot,
)
from xdscore.protocol import (
    StaleNonceSeen,
    Subscription,
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
    ERROR,
    LS_1,
    of_type,
    only,
)
from ._sotw import ack, ads, first, nack, names, req

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
