"""The SotW server state machine: subscriptions, wildcards and full state (15-18, 20, 21).

Test names carry the number of the invariant they check in the xDS invariants list
(XDS_INVARIANTS.md): ``resource_names`` as the full desired set, legacy and explicit
wildcard, names that do not exist yet, and LDS/CDS responses carrying every resource.
"""

from __future__ import annotations

import pytest

from xdscore import (
    CLUSTER,
    ENDPOINT,
    LISTENER,
    ROUTE,
    SECRET,
    ResponseAcked,
    Snapshot,
)
from xdscore.builders import eds_cluster
from xdscore.protocol import (
    Subscription,
    SubscriptionChanged,
)

from ..factories import (
    CL_A,
    CL_B,
    EP_A,
    EP_B,
    EP_C,
    LS_1,
    LS_2,
    RC_1,
    RC_2,
    of_type,
    only,
)
from ._sotw import LS_2B, ack, ads, first, names, req

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
    view = Snapshot([RC_1, RC_2])
    r1 = only(machine.poll(view))
    ack(machine, r1, ["r1"])
    assert machine.poll(view) == []
    # The client asks again with the latest nonce and another set of names: it is answered,
    # with everything it now wants, even what it already had.
    events = machine.receive(req(ROUTE, ["r1", "r2"], version=r1.version_info, nonce=r1.nonce))
    assert of_type(list(events), ResponseAcked) == []
    assert machine.type_states()[ROUTE].owed
    r2 = only(machine.poll(view))
    assert names(r2) == ["r1", "r2"]
    assert r2.nonce != r1.nonce
    assert not machine.type_states()[ROUTE].owed


def test_a_duplicate_request_after_an_ack_is_not_answered_again() -> None:
    machine = ads()
    first(machine, ROUTE, ["r1"])
    view = Snapshot([RC_1])
    r1 = only(machine.poll(view))
    ack(machine, r1, ["r1"])
    # The same names, the same version, the same nonce: nothing new is asked for.
    for _ in range(3):
        assert machine.receive(req(ROUTE, ["r1"], version=r1.version_info, nonce=r1.nonce)) == []
        assert not machine.type_states()[ROUTE].owed
        assert machine.poll(view) == []


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
