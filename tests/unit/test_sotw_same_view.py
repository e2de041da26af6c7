"""The SotW machine's poll against the same view: what it may leave unlooked-at, and what not.

After a poll of every type, a caller that knows the cache has not changed says
``same_view=True``; if only ACKs of what that poll sent arrived since, the machine answers
"nothing due" from its own state. Anything else (a new request, a NACK, a type skipped
because something was in flight, a refresh) makes it look at every type again.
"""

from __future__ import annotations

from collections.abc import Mapping

from xdscore import CLUSTER, ENDPOINT, Resource, Snapshot
from xdscore.protocol import ClientFeatures, Selection, SotwServer, Subscription

from ..factories import CL_A, CL_B, EP_A, EP_A2, EP_B, only
from ._sotw import ack, ads, first, nack


class CountingView:
    """A snapshot that counts the selections asked of it."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        self.selects = 0

    def select(self, type_url: str, subscription: Subscription) -> Selection | None:
        self.selects += 1
        return self.snapshot.select(type_url, subscription)

    def resources(self, type_url: str) -> Mapping[str, Resource] | None:
        return self.snapshot.resources(type_url)

    def changed_since(
        self, type_url: str, previous: Mapping[str, Resource]
    ) -> frozenset[str] | None:
        return self.snapshot.changed_since(type_url, previous)


def _synced_clusters_and_endpoints() -> tuple[SotwServer, CountingView]:
    """A machine that sent CDS and EDS in one poll of every type, not yet ACKed."""
    machine = ads()
    view = CountingView(Snapshot([CL_A, CL_B, EP_A, EP_B]))
    first(machine, CLUSTER)
    first(machine, ENDPOINT, ["a", "b"])
    assert len(machine.poll(view)) == 2
    return machine, view


def _ack_both(machine: SotwServer, endpoints: list[str] | None = None) -> None:
    """The client ACKs the clusters and the endpoints in flight (asking for ``endpoints``,
    by default the same two)."""
    states = machine.type_states()
    ack(machine, states[CLUSTER].outstanding)
    ack(machine, states[ENDPOINT].outstanding, ["a", "b"] if endpoints is None else endpoints)


def test_acks_of_what_the_last_poll_sent_leave_nothing_to_look_at() -> None:
    machine, view = _synced_clusters_and_endpoints()
    clusters, endpoints = machine.type_states()[CLUSTER], machine.type_states()[ENDPOINT]
    assert clusters.outstanding is not None
    assert endpoints.outstanding is not None
    ack(machine, clusters.outstanding)
    looked = view.selects
    assert machine.poll(view, same_view=True) == []
    assert view.selects == looked
    assert machine.polled_current is False  # (the endpoints are still in flight)
    ack(machine, endpoints.outstanding, ["a", "b"])
    assert machine.poll(view, same_view=True) == []
    assert view.selects == looked
    assert machine.polled_current is True


def test_without_same_view_every_type_is_looked_at() -> None:
    machine, view = _synced_clusters_and_endpoints()
    _ack_both(machine)
    looked = view.selects
    machine.poll(view)
    assert view.selects > looked


def test_a_new_view_is_looked_at_and_sent() -> None:
    machine, _ = _synced_clusters_and_endpoints()
    _ack_both(machine)
    changed = CountingView(Snapshot([CL_A, CL_B, EP_A2, EP_B]))
    response = only(machine.poll(changed))  # (the caller never says same_view for a new view)
    assert response.type_url == ENDPOINT


def test_a_type_skipped_while_in_flight_is_looked_at_after_its_ack() -> None:
    machine, view = _synced_clusters_and_endpoints()
    states = machine.type_states()
    # The cache changes while the endpoints are in flight: the poll skips them.
    changed = CountingView(Snapshot([CL_A, CL_B, EP_A2, EP_B]))
    ack(machine, states[CLUSTER].outstanding)
    assert machine.poll(changed) == []
    ack(machine, states[ENDPOINT].outstanding, ["a", "b"])
    looked = changed.selects
    response = only(machine.poll(changed, same_view=True))
    assert response.type_url == ENDPOINT
    assert changed.selects > looked
    assert view.selects > 0


def test_a_request_other_than_an_ack_makes_the_machine_look_again() -> None:
    machine, view = _synced_clusters_and_endpoints()
    states = machine.type_states()
    ack(machine, states[CLUSTER].outstanding)
    nack(machine, states[ENDPOINT].outstanding, ["a", "b"])
    looked = view.selects
    assert machine.poll(view, same_view=True) == []  # (the rejected version is not resent)
    assert view.selects > looked


def test_a_subscription_change_is_answered_against_the_same_view() -> None:
    machine, view = _synced_clusters_and_endpoints()
    _ack_both(machine, ["a"])  # (the client drops "b")
    response = only(machine.poll(view, same_view=True))
    assert response.type_url == ENDPOINT
    assert list(response.selection.resources) == ["a"]


def test_a_refresh_makes_the_machine_look_again() -> None:
    machine, view = _synced_clusters_and_endpoints()
    _ack_both(machine)
    assert machine.poll(view, same_view=True) == []
    machine.refresh(CLUSTER, ["a"])
    sent = machine.poll(view, same_view=True)
    assert [r.type_url for r in sent] == [CLUSTER, ENDPOINT]  # (clusters warm on endpoints)


def test_new_features_or_authorization_make_the_machine_look_again() -> None:
    for change in (
        lambda machine: machine.use_features(ClientFeatures(resource_errors=True)),
        lambda machine: machine.use_authorization(lambda type_url, name: None),
    ):
        machine, view = _synced_clusters_and_endpoints()
        _ack_both(machine)
        assert machine.poll(view, same_view=True) == []
        looked = view.selects
        change(machine)
        assert machine.poll(view, same_view=True) == []
        assert view.selects > looked
