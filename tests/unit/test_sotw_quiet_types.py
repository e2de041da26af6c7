"""What the SotW machine leaves unlooked-at in a poll, and what it must look at again.

A type whose last look left nothing to send (it was current, absent, or sent in full),
with only ACKs of it since, is not selected again while the view's ``resources`` gives the
same mapping object for it (the view protocol's promise for an unchanged type); with
``same_view=True`` (the caller knows the cache has not changed since the last poll of every
type) the mappings are not asked for either. Anything else about the type (a new request,
a NACK, a skip because something was in flight, a refresh, a heartbeat, clusters sent that
it warms on) makes the machine look at it again.
"""

from __future__ import annotations

from collections.abc import Mapping

from xdscore import CLUSTER, ENDPOINT, Resource, Snapshot
from xdscore.protocol import ClientFeatures, Selection, SotwServer, Subscription

from ..factories import CL_A, CL_A2, CL_B, EP_A, EP_A2, EP_B, only
from ._sotw import ack, ads, first, nack


class JoinedView:
    """Each type from its own snapshot, as a mux of caches serves them; counts the
    selections and the mappings asked of it."""

    def __init__(self, clusters: Snapshot, endpoints: Snapshot) -> None:
        self.sources = {CLUSTER: clusters, ENDPOINT: endpoints}
        self.selects: list[str] = []
        self.mappings = 0

    def select(self, type_url: str, subscription: Subscription) -> Selection | None:
        self.selects.append(type_url)
        return self.sources[type_url].select(type_url, subscription)

    def resources(self, type_url: str) -> Mapping[str, Resource] | None:
        self.mappings += 1
        return self.sources[type_url].resources(type_url)

    def changed_since(
        self, type_url: str, previous: Mapping[str, Resource]
    ) -> frozenset[str] | None:
        return self.sources[type_url].changed_since(type_url, previous)


CLUSTERS = Snapshot([CL_A, CL_B])
ENDPOINTS = Snapshot([EP_A, EP_B])


def _synced_clusters_and_endpoints() -> tuple[SotwServer, JoinedView]:
    """A machine that sent CDS and EDS in one poll of every type, not yet ACKed."""
    machine = ads()
    view = JoinedView(CLUSTERS, ENDPOINTS)
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
    looked, asked = len(view.selects), view.mappings
    assert machine.poll(view, same_view=True) == []
    assert (len(view.selects), view.mappings) == (looked, asked)
    assert machine.polled_current is False  # (the endpoints are still in flight)
    ack(machine, endpoints.outstanding, ["a", "b"])
    assert machine.poll(view, same_view=True) == []
    assert (len(view.selects), view.mappings) == (looked, asked)
    assert machine.polled_current is True


def test_without_same_view_a_type_is_looked_at_only_if_its_mapping_is_new() -> None:
    machine, view = _synced_clusters_and_endpoints()
    _ack_both(machine)
    looked, asked = len(view.selects), view.mappings
    assert machine.poll(view) == []
    assert len(view.selects) == looked  # (the same mappings: nothing selected again)
    assert view.mappings == asked + 2
    assert machine.polled_current is True


def test_a_changed_type_alone_is_looked_at_in_a_new_view() -> None:
    machine, _ = _synced_clusters_and_endpoints()
    _ack_both(machine)
    changed = JoinedView(CLUSTERS, Snapshot([EP_A2, EP_B]))
    response = only(machine.poll(changed))
    assert response.type_url == ENDPOINT
    assert changed.selects == [ENDPOINT]  # (the clusters' mapping is the one looked at)
    ack(machine, response, ["a", "b"])
    assert machine.poll(changed) == []
    assert changed.selects == [ENDPOINT]
    assert machine.polled_current is True


def test_the_endpoints_are_sent_after_new_clusters_even_if_unchanged() -> None:
    machine, _ = _synced_clusters_and_endpoints()
    _ack_both(machine)
    changed = JoinedView(Snapshot([CL_A2, CL_B]), ENDPOINTS)  # (the endpoints' own mapping)
    sent = machine.poll(changed)
    assert [r.type_url for r in sent] == [CLUSTER, ENDPOINT]  # (clusters warm on endpoints)


def test_a_partial_poll_leaves_the_other_types_quiet() -> None:
    machine, _ = _synced_clusters_and_endpoints()
    _ack_both(machine)
    changed = JoinedView(CLUSTERS, Snapshot([EP_A2, EP_B]))
    response = only(machine.poll(changed, [ENDPOINT]))  # (a push of the endpoints alone)
    ack(machine, response, ["a", "b"])
    assert machine.poll(changed) == []  # (the ACK's poll, of every type)
    assert changed.selects == [ENDPOINT]


def test_a_type_skipped_while_in_flight_is_looked_at_after_its_ack() -> None:
    machine, view = _synced_clusters_and_endpoints()
    states = machine.type_states()
    # The cache changes while the endpoints are in flight: the poll skips them.
    changed = JoinedView(CLUSTERS, Snapshot([EP_A2, EP_B]))
    ack(machine, states[CLUSTER].outstanding)
    assert machine.poll(changed) == []
    ack(machine, states[ENDPOINT].outstanding, ["a", "b"])
    response = only(machine.poll(changed, same_view=True))
    assert response.type_url == ENDPOINT
    assert response.version == changed.sources[ENDPOINT].version(ENDPOINT)
    assert view.selects == [CLUSTER, ENDPOINT]  # (the first view was looked at once)


def test_a_request_other_than_an_ack_makes_the_machine_look_again() -> None:
    machine, view = _synced_clusters_and_endpoints()
    states = machine.type_states()
    ack(machine, states[CLUSTER].outstanding)
    nack(machine, states[ENDPOINT].outstanding, ["a", "b"])
    looked = len(view.selects)
    assert machine.poll(view, same_view=True) == []  # (the rejected version is not resent)
    assert view.selects[looked:] == [ENDPOINT]


def test_a_subscription_change_is_answered_against_the_same_view() -> None:
    machine, view = _synced_clusters_and_endpoints()
    _ack_both(machine, ["a"])  # (the client drops "b")
    looked = len(view.selects)
    response = only(machine.poll(view, same_view=True))
    assert response.type_url == ENDPOINT
    assert list(response.selection.resources) == ["a"]
    assert view.selects[looked:] == [ENDPOINT]


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
        looked = len(view.selects)
        change(machine)
        assert machine.poll(view, same_view=True) == []
        assert sorted(view.selects[looked:]) == [CLUSTER, ENDPOINT]
