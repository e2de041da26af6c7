"""The Delta server state machine: subscribing, unsubscribing, wildcards and aliases.

Test names carry the number of the invariant they check in the xDS invariants list
(XDS_INVARIANTS.md): every subscribed name answered (28), unsubscribing (29, 30), names that
do not exist (31, 18), legacy and explicit wildcard (16, 17, 32), VHDS aliases (33).
"""

from __future__ import annotations

import pytest
from envoy.config.route.v3 import route_components_pb2
from envoy.service.discovery.v3 import discovery_pb2

from xdscore import (
    CLUSTER,
    ENDPOINT,
    LISTENER,
    VIRTUAL_HOST,
    Resource,
    Snapshot,
    make_resource,
)
from xdscore.protocol import (
    WILDCARD,
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
    EP_A3,
    EP_B,
    EP_B2,
    EP_C,
    LS_1,
    LS_2,
    NODE,
    of_type,
    only,
    version,
)
from ._delta import (
    CL_B2,
    ack,
    assert_well_formed,
    change,
    nack,
    req,
    sent,
    sent_versions,
    settle,
    start,
    stream,
)

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


def test_inv33_unknown_alias_is_answered_with_an_alias_only_entry() -> None:
    # Envoy waits for an entry carrying the alias it asked for; a removal would not end
    # its wait (xds_protocol.rst, VHDS aliases).
    machine = stream()
    start(machine, VIRTUAL_HOST, ["rc/unknown.com"])
    snapshot = Snapshot([vhost(["example.com"])])
    response = only(machine.poll(snapshot))
    assert_well_formed(response)
    assert response.resources == (Resource.unresolved(VIRTUAL_HOST, "rc/unknown.com"),)
    entry = response.resources[0]
    assert (entry.name, entry.aliases, entry.name_only) == (
        "rc/unknown.com",
        ("rc/unknown.com",),
        True,
    )
    assert response.removed == ()
    ack(machine, response)
    # Held and still unresolved: nothing more, even after an unrelated change.
    assert machine.poll(snapshot) == []
    assert (
        machine.poll(Snapshot([vhost(["example.com"]), vhost(["x.com"], "rc/vh2", "rc/x.com")]))
        == []
    )
    # Asked again (Envoy asks again for each new request to the host): answered again.
    change(machine, VIRTUAL_HOST, ["rc/unknown.com"])
    assert only(machine.poll(snapshot)).resources == (entry,)


def test_inv33_host_added_after_an_unknown_alias_is_pushed() -> None:
    machine = stream()
    start(machine, VIRTUAL_HOST, ["rc/later.com"])
    ack(machine, only(machine.poll(Snapshot([vhost(["example.com"])]))))
    later = vhost(["later.com"], name="rc/vh2", alias="rc/later.com")
    response = only(machine.poll(Snapshot([vhost(["example.com"]), later])))
    assert response.resources == (later,)
    assert response.removed == ()
    ack(machine, response)
    # The host goes again: the resource is removed, the alias is not answered again.
    response = only(machine.poll(Snapshot([vhost(["example.com"])])))
    assert (response.resources, response.removed) == ((), ("rc/vh2",))


def test_inv33_unknown_alias_unsubscribed_is_forgotten() -> None:
    machine = stream()
    start(machine, VIRTUAL_HOST, ["rc/unknown.com"])
    snapshot = Snapshot([vhost(["example.com"])])
    ack(machine, only(machine.poll(snapshot)), unsubscribe=["rc/unknown.com"])
    assert "rc/unknown.com" not in machine.type_states()[VIRTUAL_HOST].held_versions
    assert machine.poll(Snapshot([])) == []


def test_inv33_other_types_still_remove_unknown_names() -> None:
    machine = stream()
    start(machine, ENDPOINT, ["missing"])
    response = only(machine.poll(Snapshot([EP_A])))
    assert (response.resources, response.removed) == ((), ("missing",))


def test_inv33_empty_first_vhds_request_gets_no_answer_and_a_later_host_does() -> None:
    # Envoy's first VHDS request names nothing; an empty answer would not end its wait (its
    # VHDS watch is by namespace, not wildcard), so none is sent.
    machine = stream()
    start(machine, VIRTUAL_HOST)
    assert machine.poll(Snapshot([vhost(["example.com"])])) == []
    # A host asked for later is answered as usual.
    change(machine, VIRTUAL_HOST, ["rc/example.com"])
    assert sent(only(machine.poll(Snapshot([vhost(["example.com"])])))) == ["rc/vh1"]


def test_inv33_alias_only_entry_has_no_body_on_the_wire() -> None:
    wire = discovery_pb2.DeltaDiscoveryResponse.FromString(
        Resource.unresolved(VIRTUAL_HOST, "rc/unknown.com").delta_entry
    )
    (item,) = wire.resources
    assert item.name == "rc/unknown.com"
    assert list(item.aliases) == ["rc/unknown.com"]
    assert item.version
    assert not item.HasField("resource")
    (full,) = discovery_pb2.DeltaDiscoveryResponse.FromString(
        vhost(["a.com"]).delta_entry
    ).resources
    assert full.HasField("resource")
