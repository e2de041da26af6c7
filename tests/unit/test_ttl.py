"""TTLs and heartbeats on the server machines (docs/protocol.md, invariant 38), SotW and Delta,
with and without the client features, and client features worked out from a node.

The machines are clock-free: a test asks for heartbeats when it wants them
(``machine.heartbeat(view)``); when they are due is the runtime's (tests/unit/test_driver.py).
"""

from __future__ import annotations

import pytest
from envoy.config.route.v3 import route_components_pb2
from envoy.service.discovery.v3 import discovery_pb2

from xdscore import (
    CLUSTER,
    ENDPOINT,
    LISTENER,
    ROUTE,
    VIRTUAL_HOST,
    LinearCache,
    Node,
    Resource,
    Snapshot,
    make_resource,
)
from xdscore.builders import eds_cluster, http_listener, load_assignment, route_configuration
from xdscore.protocol import (
    RESOURCE_IN_SOTW,
    SUPPORTS_TTL,
    ClientFeatures,
    DeltaClient,
    DeltaDiscoveryRequest,
    DeltaServer,
    SotwServer,
)
from xdscore.server._codecs import DELTA, SOTW
from xdscore.wire import RESOURCE_WRAPPER, decode_delta_response

from ..factories import NODE, sotw_nack
from ..factories import delta_ack as delta_ack_request
from ..factories import delta_nack as delta_nack_request
from ._delta import ack as delta_ack
from ._delta import start
from ._delta import stream as delta_stream
from ._sotw import ack, ads, first, settle

TTL_CLIENT = ClientFeatures(ttl=True, resource_in_sotw=True)

L1 = make_resource(http_listener("l1", 10001, "r1"), ttl=2.0)
L2 = make_resource(http_listener("l2", 10002, "r2"))
R1 = make_resource(route_configuration("r1", [("/", "a")]), ttl=1.5)
R2 = make_resource(route_configuration("r2", [("/", "a")]), ttl=3.0)
C1 = make_resource(eds_cluster("a"), ttl=2.0)
E1 = make_resource(load_assignment("a", [("10.0.0.1", 80)]))


def sotw(features: ClientFeatures = TTL_CLIENT) -> SotwServer:
    machine = ads()
    machine.use_features(features)
    return machine


def delta(features: ClientFeatures = TTL_CLIENT) -> DeltaServer:
    machine = delta_stream()
    machine.use_features(features)
    return machine


def sotw_message(response: object) -> discovery_pb2.DiscoveryResponse:
    return discovery_pb2.DiscoveryResponse.FromString(b"".join(SOTW.encode(response, "")))


def delta_message(response: object) -> discovery_pb2.DeltaDiscoveryResponse:
    return discovery_pb2.DeltaDiscoveryResponse.FromString(b"".join(DELTA.encode(response, "")))


# -- client features -------------------------------------------------------------------------


def test_features_are_what_the_node_advertises_plus_what_its_agent_is_assumed_to_read() -> None:
    envoy = Node(id="e", user_agent_name="envoy")
    assert ClientFeatures.of(envoy) == ClientFeatures(ttl=True, resource_in_sotw=True)
    assert ClientFeatures.of(envoy, {}) == ClientFeatures()
    grpc = Node(
        id="g",
        user_agent_name="gRPC C-core linux Python",
        client_features=("envoy.lb.does_not_support_overprovisioning", RESOURCE_IN_SOTW),
    )
    assert ClientFeatures.of(grpc) == ClientFeatures(resource_in_sotw=True, resource_errors=True)
    assert ClientFeatures.of(grpc, {}) == ClientFeatures(resource_in_sotw=True)
    other = Node(id="o", user_agent_name="envoyish", client_features=(SUPPORTS_TTL,))
    assert ClientFeatures.of(other) == ClientFeatures(ttl=True)  # a prefix needs a space
    assert not ClientFeatures(ttl=True).sotw_ttl  # the SotW TTL travels in the wrapper


# -- SotW ------------------------------------------------------------------------------------


def test_inv38_sotw_wraps_resources_with_a_ttl_only_for_clients_that_read_both() -> None:
    view = Snapshot([L1, L2])
    for features, wrapped in [
        (TTL_CLIENT, True),
        (ClientFeatures(ttl=True), False),
        (ClientFeatures(resource_in_sotw=True), False),
        (ClientFeatures(), False),
    ]:
        machine = sotw(features)
        first(machine, LISTENER)
        (response,) = machine.poll(view)
        assert response.wrapped is wrapped
        entries = sotw_message(response).resources
        if not wrapped:
            assert [e.type_url for e in entries] == [LISTENER, LISTENER]
            continue
        assert [e.type_url for e in entries] == [RESOURCE_WRAPPER, LISTENER]
        wrapper = discovery_pb2.Resource.FromString(entries[0].value)
        assert (wrapper.name, wrapper.ttl.seconds, wrapper.ttl.nanos) == ("l1", 2, 0)
        assert wrapper.resource.type_url == LISTENER
        assert wrapper.resource.value == L1.body
        assert not wrapper.version  # SotW clients take the response's version


def test_inv38_sotw_wrapped_body_is_shared_and_the_plain_one_unchanged() -> None:
    view = Snapshot([L1, L2])
    a, b = sotw(), sotw()
    for machine in (a, b):
        first(machine, LISTENER)
    (ra,), (rb,) = a.poll(view), b.poll(view)
    assert ra.selection is rb.selection
    assert ra.selection.sotw_wrapped_body is rb.selection.sotw_wrapped_body
    plain = Snapshot([L2])
    machine = sotw()
    first(machine, LISTENER)
    (response,) = machine.poll(plain)
    assert response.selection.sotw_wrapped_body is response.selection.sotw_body  # no TTL


def test_inv38_sotw_heartbeat_repeats_the_held_state_at_the_held_version() -> None:
    view = Snapshot([L1, L2])
    machine = sotw()
    first(machine, LISTENER)
    (sent,) = settle(machine, view)
    (beat,) = machine.heartbeat(view)
    assert beat.heartbeat
    assert beat.wrapped
    assert beat.version_info == sent.version_info
    assert beat.selection is sent.selection  # the shared body, again
    assert machine.heartbeat(view) == []  # one in flight
    ack(machine, beat)
    state = machine.type_states()[LISTENER]
    assert state.held is sent.selection
    assert state.held_version == sent.version_info
    assert machine.poll(view) == []
    assert machine.shortest_ttl() == 2.0


def test_inv38_sotw_no_heartbeat_without_the_features_a_ttl_or_an_unchanged_state() -> None:
    view = Snapshot([L1, L2])
    plain = sotw(ClientFeatures(ttl=True))
    first(plain, LISTENER)
    settle(plain, view)
    assert plain.heartbeat(view) == []
    assert plain.shortest_ttl() is None
    machine = sotw()
    first(machine, LISTENER)
    settle(machine, Snapshot([L2]))
    assert machine.heartbeat(Snapshot([L2])) == []  # nothing has a TTL
    changed = Snapshot([L1])
    assert machine.heartbeat(changed) == []  # a change is due, not a heartbeat
    (update,) = machine.poll(changed)
    assert not update.heartbeat
    assert update.wrapped


def test_inv38_sotw_quiet_listener_stops_its_types_heartbeat_but_routes_go_by_name() -> None:
    view = Snapshot([L1, L2, R1, R2])
    machine = sotw()
    first(machine, LISTENER)
    first(machine, ROUTE, ["r1", "r2"])
    settle(machine, view)
    held = machine.type_states()[ROUTE].held
    (beat,) = machine.heartbeat(view, quiet={(LISTENER, "l1"), (ROUTE, "r1")})
    assert beat.type_url == ROUTE
    assert list(beat.selection.resources) == ["r2"]
    assert beat.version_info == machine.type_states()[ROUTE].held_version
    ack(machine, beat, ["r1", "r2"])
    # The client still holds both routes: the ACK of a part does not narrow what it holds.
    assert machine.type_states()[ROUTE].held is held
    assert machine.poll(view) == []


def test_inv38_sotw_cluster_heartbeat_owes_no_endpoints() -> None:
    view = Snapshot([C1, E1])
    machine = sotw()
    first(machine, CLUSTER)
    first(machine, ENDPOINT, ["a"])
    settle(machine, view)
    (beat,) = machine.heartbeat(view)
    assert beat.type_url == CLUSTER
    ack(machine, beat)
    assert machine.poll(view) == []  # a changed cluster would make EDS owed; a heartbeat not


def test_inv38_sotw_refresh_resends_in_full() -> None:
    view = Snapshot([L1, L2])
    machine = sotw()
    first(machine, LISTENER)
    (sent,) = settle(machine, view)
    machine.refresh(LISTENER, ["l1"])
    (again,) = machine.poll(view)
    assert not again.heartbeat
    assert again.version_info == sent.version_info


# -- Delta -----------------------------------------------------------------------------------


def test_inv38_delta_entries_carry_the_ttl_only_for_clients_that_support_it() -> None:
    view = Snapshot([L1, L2])
    for features, ttl in [(TTL_CLIENT, True), (ClientFeatures(resource_in_sotw=True), False)]:
        machine = delta(features)
        start(machine, LISTENER)
        (response,) = machine.poll(view)
        entries = {e.name: e for e in delta_message(response).resources}
        assert entries["l1"].HasField("ttl") is ttl
        assert not entries["l2"].HasField("ttl")
        if ttl:
            assert entries["l1"].ttl.seconds == 2
        assert entries["l1"].resource.value == L1.body


def test_inv38_delta_heartbeat_names_versions_and_ttls_without_bodies() -> None:
    view = Snapshot([L1, L2, C1, E1])
    machine = delta()
    start(machine, LISTENER)
    start(machine, CLUSTER)
    start(machine, ENDPOINT, ["a"])
    for _ in range(5):
        for response in machine.poll(view):
            delta_ack(machine, response)
    beats = machine.heartbeat(view)
    assert [(b.type_url, [r.name for r in b.resources]) for b in beats] == [
        (CLUSTER, ["a"]),
        (LISTENER, ["l1"]),
    ]
    listener_beat = beats[1]
    assert listener_beat.heartbeat
    (entry,) = delta_message(listener_beat).resources
    assert (entry.name, entry.version, entry.ttl.seconds) == ("l1", L1.version, 2)
    assert not entry.HasField("resource")
    for beat in beats:
        delta_ack(machine, beat)
    # Nothing changed: no endpoints owed for the cluster's heartbeat, nothing else due.
    assert machine.poll(view) == []
    assert machine.type_states()[LISTENER].held["l1"] is L1
    assert machine.shortest_ttl() == 2.0


def test_inv38_delta_heartbeat_leaves_out_quiet_changed_and_unheld_resources() -> None:
    view = Snapshot([L1, R1, R2])
    machine = delta()
    start(machine, LISTENER)
    start(machine, ROUTE, ["r1", "r2"])
    for _ in range(3):
        for response in machine.poll(view):
            delta_ack(machine, response)
    (beat,) = machine.heartbeat(view, quiet={(LISTENER, "l1"), (ROUTE, "r2")})
    assert [r.name for r in beat.resources] == ["r1"]
    delta_ack(machine, beat)
    r1_changed = make_resource(route_configuration("r1", [("/", "b")]), ttl=1.5)
    changed = Snapshot([L1, r1_changed, R2])
    assert [r.name for b in machine.heartbeat(changed) for r in b.resources] == ["l1", "r2"]
    without = delta(ClientFeatures(resource_in_sotw=True))
    start(without, LISTENER)
    for response in without.poll(view):
        delta_ack(without, response)
    assert without.heartbeat(view) == []
    assert without.shortest_ttl() is None


def test_inv38_delta_virtual_hosts_are_repeated_in_full() -> None:
    host = make_resource(
        route_components_pb2.VirtualHost(name="r/a", domains=["a"]), aliases=("r/a",), ttl=2.0
    )
    view = Snapshot([host])
    machine = delta()
    start(machine, VIRTUAL_HOST, ["r/a"])
    (sent,) = machine.poll(view)
    delta_ack(machine, sent)
    (beat,) = machine.heartbeat(view)
    assert not beat.heartbeat
    (entry,) = delta_message(beat).resources
    assert entry.resource.value == host.body
    assert entry.ttl.seconds == 2


def test_inv38_delta_refresh_resends_in_full() -> None:
    view = Snapshot([L1, L2])
    machine = delta()
    start(machine, LISTENER)
    (sent,) = machine.poll(view)
    delta_ack(machine, sent)
    machine.refresh(LISTENER, ["l1", "nope"])
    (again,) = machine.poll(view)
    assert [r.name for r in again.resources] == ["l1"]
    assert not again.heartbeat


def test_ttl_through_the_api_and_a_linear_cache() -> None:
    listener = http_listener("l9", 10009, "r9")
    plain = make_resource(listener)
    timed = make_resource(listener.SerializeToString(), type_url=LISTENER, ttl=0.25)
    assert (timed.name, timed.ttl, timed.body) == ("l9", 0.25, plain.body)
    assert timed.version != plain.version  # a new TTL is a new version
    assert make_resource(listener, ttl=0.25).version == timed.version  # and a stable one
    cache = LinearCache(LISTENER)
    cache.set_resource(listener, ttl=5.0)
    stored = cache.get("l9")
    assert stored is not None
    assert stored.ttl == 5.0
    generation = cache.generation
    cache.set_resource(listener, ttl=5.0)
    assert cache.generation == generation  # the same content and TTL: no change
    cache.set_resource(listener)
    assert cache.generation == generation + 1  # the TTL removed: a change
    (entry,) = delta_message_of(cache.get("l9"))
    assert not entry.HasField("ttl")
    with pytest.raises(ValueError, match="must be a positive number of seconds"):
        make_resource(listener, ttl=0)


def delta_message_of(resource: object) -> list[discovery_pb2.Resource]:
    assert isinstance(resource, Resource)
    wrapper = discovery_pb2.DeltaDiscoveryResponse.FromString(resource.delta_entry)
    return list(wrapper.resources)


def test_inv38_delta_heartbeat_crossing_an_unsubscribe_is_nacked_once_and_harmless() -> None:
    """Envoy rejects a body-less entry for a name it no longer tracks, so a heartbeat that
    crosses an unsubscribe of one of its names is NACKed; the server sends nothing because
    of it, and the next heartbeat carries only what the client still wants."""
    view = Snapshot([R1, R2])
    server = delta()
    client = DeltaClient(node=NODE)

    def deliver(response: object) -> DeltaDiscoveryRequest:
        return client.receive(decode_delta_response(b"".join(DELTA.encode(response, ""))))

    server.receive(client.subscribe(ROUTE, ["r1", "r2"]))
    (sent,) = server.poll(view)
    server.receive(deliver(sent))
    (beat,) = server.heartbeat(view)
    assert [r.name for r in beat.resources] == ["r1", "r2"]
    unsubscribe = client.unsubscribe(ROUTE, ["r2"])  # crosses the heartbeat
    answer = deliver(beat)
    assert answer.error_detail is not None
    assert "no body for 'r2'" in answer.error_detail.message
    assert client.holds(ROUTE)["r1"].body == R1.body  # the rejected heartbeat changed nothing
    server.receive(unsubscribe)
    server.receive(answer)
    assert server.poll(view) == []
    (again,) = server.heartbeat(view)
    assert [r.name for r in again.resources] == ["r1"]
    assert deliver(again).error_detail is None


def test_inv38_delta_no_heartbeat_for_what_the_subscription_no_longer_wants() -> None:
    """Found by DeltaTtlProperties: a legacy wildcard left by naming a resource no longer
    wants what it held; its removal is due, and a heartbeat must not carry it meanwhile."""
    view = Snapshot([C1])
    machine = delta()
    start(machine, CLUSTER)  # legacy wildcard
    (sent,) = machine.poll(view)
    machine.receive(delta_ack_request(sent, subscribe=["other"]))  # ACK, and name one
    assert not machine.type_states()[CLUSTER].subscription.wants("a")
    assert machine.heartbeat(view) == []
    (removal,) = machine.poll(view)
    assert removal.removed == ("a", "other")  # "other" does not exist either


def test_inv38_a_rejected_heartbeat_changes_nothing_held() -> None:
    """A heartbeat repeats what the client holds (SotW) or carries no body (Delta): if the
    client rejects it, it still holds what it held, nothing is marked rejected, and the next
    heartbeat goes out as planned (the resources would expire otherwise)."""
    view = Snapshot([L1, L2])
    sotw_machine = sotw()
    first(sotw_machine, LISTENER)
    (sent,) = settle(sotw_machine, view)
    (beat,) = sotw_machine.heartbeat(view)
    sotw_machine.receive(sotw_nack(beat))
    state = sotw_machine.type_states()[LISTENER]
    assert (state.held_version, state.rejected_version) == (sent.version_info, None)
    assert sotw_machine.poll(view) == []
    assert len(sotw_machine.heartbeat(view)) == 1

    delta_machine = delta()
    start(delta_machine, LISTENER)
    (sent_delta,) = delta_machine.poll(view)
    delta_ack(delta_machine, sent_delta)
    (delta_beat,) = delta_machine.heartbeat(view)
    delta_machine.receive(delta_nack_request(delta_beat))
    delta_state = delta_machine.type_states()[LISTENER]
    assert dict(delta_state.held_versions) == {"l1": L1.version, "l2": L2.version}
    assert dict(delta_state.rejected_versions) == {}
    assert delta_machine.poll(view) == []
    (again,) = delta_machine.heartbeat(view)
    assert [r.name for r in again.resources] == ["l1"]
