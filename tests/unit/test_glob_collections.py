"""Glob collections (invariant 40, xRFC TP1 "Glob") and the VHDS namespace watch (33).

A Delta subscription to ``xdstp://<authority>/<type>/<path>/*`` wants every resource whose
canonical name is ``xdstp://<authority>/<type>/<path>/<id>`` with the same context
parameters; members added later are sent, removed ones removed, and a name of the same
collection subscribed to on its own still works beside the glob.
"""

from __future__ import annotations

import pytest
from envoy.config.endpoint.v3 import endpoint_components_pb2
from envoy.config.route.v3 import route_components_pb2, route_pb2

from xdscore import (
    LBENDPOINT,
    ROUTE,
    VIRTUAL_HOST,
    LinearCache,
    Resource,
    Snapshot,
    make_resource,
)
from xdscore import builders as b
from xdscore.cache import EVERYTHING, Subscription
from xdscore.protocol import DeltaServer
from xdscore.protocol import _view as view_module
from xdscore.wire import canonical_name
from xdscore.wire._names import collection_of, is_glob

from ..factories import nonce_source, only
from ._delta import ack, assert_well_formed, change, sent, settle, start, stream

AUTHORITY = "xdstp://xdscore.test/envoy.config.endpoint.v3.LbEndpoint"
GLOB = f"{AUTHORITY}/web/local/*"


def member(path: str, port: int = 80) -> Resource:
    lb_endpoint = endpoint_components_pb2.LbEndpoint()
    lb_endpoint.endpoint.address.socket_address.address = "10.0.0.1"
    lb_endpoint.endpoint.address.socket_address.port_value = port
    return make_resource(lb_endpoint, name=f"{AUTHORITY}/{path}")


IN_1, IN_2 = member("web/local/a"), member("web/local/b")
NESTED = member("web/local/deep/c")
OTHER_PATH = member("web/remote/d")
WITH_PARAM = member("web/local/e?zone=z1")


@pytest.mark.parametrize(
    ("name", "collection"),
    [
        (f"{AUTHORITY}/web/local/a", GLOB),
        (f"{AUTHORITY}/web/local/a?b=2&a=1", f"{AUTHORITY}/web/local/*?b=2&a=1"),
        (f"{AUTHORITY}/a", f"{AUTHORITY}/*"),
        (f"{AUTHORITY}", f"{AUTHORITY}/*"),
        (GLOB, GLOB),
        ("route_0/a.example", "route_0/*"),
        ("route_0/x/y", "route_0/x/*"),
        ("plain", None),
        ("xdstp://xdscore.test", None),  # no resource type: no collection
        ("xdstp://xdscore.test/", None),
    ],
)
def test_inv40_collection_of_a_name(name: str, collection: str | None) -> None:
    assert collection_of(name) == collection


def test_inv40_globs_are_xdstp_names_whose_last_id_segment_is_a_star() -> None:
    assert is_glob(GLOB)
    assert is_glob(f"{AUTHORITY}/*")
    assert not is_glob(f"{AUTHORITY}/web/local/a")
    assert not is_glob("route_0/*")  # a namespace is no glob a client can name
    assert not is_glob(f"{AUTHORITY}/web/lo*")


def test_inv40_a_glob_wants_its_members_with_the_same_context_parameters_only() -> None:
    subscription = Subscription(frozenset({GLOB}))
    assert subscription.collections == {GLOB}
    assert subscription.wants(IN_1.name)
    assert subscription.wants(IN_2.name)
    assert not subscription.wants(NESTED.name)
    assert not subscription.wants(OTHER_PATH.name)
    assert not subscription.wants(WITH_PARAM.name)
    with_param = Subscription(frozenset({canonical_name(f"{AUTHORITY}/web/local/*?zone=z1")}))
    assert with_param.wants(WITH_PARAM.name)
    assert not with_param.wants(IN_1.name)


def test_inv40_glob_subscription_is_answered_with_every_member() -> None:
    machine = stream()
    start(machine, LBENDPOINT, [GLOB])
    response = only(machine.poll(Snapshot([IN_1, IN_2, NESTED, OTHER_PATH, WITH_PARAM])))
    assert_well_formed(response)
    assert sent(response) == sorted([IN_1.name, IN_2.name])
    assert response.removed == ()


def test_inv40_members_added_later_are_sent_and_removed_ones_removed() -> None:
    cache = LinearCache(LBENDPOINT, [IN_1, OTHER_PATH])
    machine = stream()
    start(machine, LBENDPOINT, [GLOB])
    ack(machine, only(machine.poll(cache.view())))
    cache.set_resource(IN_2)
    cache.set_resource(member("web/remote/z"))
    response = only(machine.poll(cache.view()))
    assert (sent(response), response.removed) == ([IN_2.name], ())
    ack(machine, response)
    cache.delete_resource(IN_1.name)
    cache.delete_resource(OTHER_PATH.name)
    response = only(machine.poll(cache.view()))
    assert (sent(response), response.removed) == ([], (IN_1.name,))
    ack(machine, response)
    changed = member("web/local/b", port=81)
    cache.set_resource(changed)
    response = only(machine.poll(cache.view()))
    assert response.resources == (changed,)
    ack(machine, response)
    assert machine.poll(cache.view()) == []


def test_inv40_a_named_member_subscribed_beside_its_glob_stays_after_the_glob_goes() -> None:
    snapshot = Snapshot([IN_1, IN_2])
    machine = stream()
    start(machine, LBENDPOINT, [GLOB, IN_1.name])
    response = only(machine.poll(snapshot))
    assert sent(response) == sorted([IN_1.name, IN_2.name])
    ack(machine, response, unsubscribe=[GLOB])
    # The glob's other member leaves silently (a pure unsubscribe needs no answer); the
    # name subscribed on its own is still wanted and still served when it changes.
    assert machine.poll(snapshot) == []
    changed = member("web/local/a", port=81)
    response = only(machine.poll(Snapshot([changed, IN_2])))
    assert (response.resources, response.removed) == ((changed,), ())


def test_inv40_inv30_unsubscribing_a_member_of_a_subscribed_glob_keeps_it() -> None:
    # As under the wildcard (30): the client cannot tell whether the glob still holds the
    # name, so it is answered again; and it stays tracked, so its removal is sent later.
    # (Found by tests/property/test_glob_properties.py.)
    cache = LinearCache(LBENDPOINT, [IN_1, IN_2])
    machine = stream()
    start(machine, LBENDPOINT, [GLOB])
    ack(machine, only(machine.poll(cache.view())))
    change(machine, LBENDPOINT, unsubscribe=[IN_1.name])
    response = only(machine.poll(cache.view()))
    assert (sent(response), response.removed) == ([IN_1.name], ())
    ack(machine, response)
    cache.delete_resource(IN_1.name)
    response = only(machine.poll(cache.view()))
    assert (sent(response), response.removed) == ([], (IN_1.name,))


def test_inv40_leaving_the_wildcard_keeps_what_a_glob_still_wants() -> None:
    cache = LinearCache(LBENDPOINT, [IN_1, OTHER_PATH])
    machine = stream()
    start(machine, LBENDPOINT, ["*", GLOB])
    ack(machine, only(machine.poll(cache.view())))
    change(machine, LBENDPOINT, unsubscribe=["*"])
    assert machine.poll(cache.view()) == []
    # Still tracked through the glob: its removal reaches the client.
    cache.delete_resource(IN_1.name)
    response = only(machine.poll(cache.view()))
    assert (sent(response), response.removed) == ([], (IN_1.name,))


def test_inv40_an_empty_glob_is_answered_with_its_own_name_removed() -> None:
    # Envoy's glob watch matches the glob's own name: a removal of it is an answer that
    # reaches the watch (an empty response would reach only wildcard watches).
    machine = stream()
    start(machine, LBENDPOINT, [GLOB])
    response = only(machine.poll(Snapshot([OTHER_PATH])))
    assert (sent(response), response.removed) == ([], (GLOB,))
    ack(machine, response)
    response = only(machine.poll(Snapshot([OTHER_PATH, IN_1])))
    assert (sent(response), response.removed) == ([IN_1.name], ())


def test_inv40_inv27_reconnect_to_a_glob_sends_only_the_difference() -> None:
    snapshot = Snapshot([IN_1, IN_2])
    machine = stream()
    gone = f"{AUTHORITY}/web/local/gone"
    start(machine, LBENDPOINT, [GLOB], initial={IN_1.name: IN_1.version, gone: "v0"})
    response = only(machine.poll(snapshot))
    assert (sent(response), response.removed) == ([IN_2.name], (gone,))


def test_inv40_resubscribing_a_glob_answers_every_member_again() -> None:
    # inv28: a name in resource_names_subscribe is answered even if held; for a glob, its
    # members are.
    snapshot = Snapshot([IN_1, IN_2])
    machine = stream()
    start(machine, LBENDPOINT, [GLOB])
    ack(machine, only(machine.poll(snapshot)))
    change(machine, LBENDPOINT, [GLOB])
    assert sent(only(machine.poll(snapshot))) == sorted([IN_1.name, IN_2.name])


def test_inv40_sotw_selection_of_a_glob_holds_its_members() -> None:
    snapshot = Snapshot([IN_1, IN_2, NESTED, OTHER_PATH])
    selection = snapshot.select(LBENDPOINT, Subscription(frozenset({GLOB, OTHER_PATH.name})))
    assert selection is not None
    assert sorted(selection.resources) == sorted([IN_1.name, IN_2.name, OTHER_PATH.name])


def test_inv40_the_collection_index_is_built_once_per_view_and_shared_by_streams(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    looked_up: list[str] = []

    def counting(name: str) -> str | None:
        looked_up.append(name)
        return collection_of(name)

    monkeypatch.setattr(view_module, "collection_of", counting)
    snapshot = Snapshot([IN_1, IN_2, NESTED, OTHER_PATH])
    for _ in range(3):
        machine = stream()
        start(machine, LBENDPOINT, [GLOB])
        assert sent(only(machine.poll(snapshot))) == sorted([IN_1.name, IN_2.name])
    # One pass over the type's names for the view, not one per stream.
    assert sorted(looked_up) == sorted([IN_1.name, IN_2.name, NESTED.name, OTHER_PATH.name])
    everything = snapshot.select(LBENDPOINT, EVERYTHING)
    assert everything is not None
    assert everything.collections[GLOB] == (IN_1.name, IN_2.name)
    assert everything.collections[f"{AUTHORITY}/web/local/deep/*"] == (NESTED.name,)


# -- VHDS: the namespace of the route configurations sent (33) -------------------------------


def vhds_route(name: str = "route_0") -> Resource:
    config = route_pb2.RouteConfiguration(name=name)
    config.vhds.config_source.CopyFrom(b.ads_source())
    return make_resource(config)


def vhost(name: str) -> Resource:
    host = route_components_pb2.VirtualHost(name=name, domains=[name.split("/")[-1]])
    return make_resource(host, aliases=(name,))


def test_inv33_vhds_route_configuration_names_its_namespace() -> None:
    assert vhds_route().vhds_namespace == "route_0/*"
    plain = make_resource(b.route_configuration("route_1", [("/", "a")]))
    assert plain.vhds_namespace is None
    assert vhost("route_0/a.example").vhds_namespace is None


def ads_with_vhds_route(snapshot: Snapshot) -> DeltaServer:
    """An ADS machine that sent (and had ACKed) ``route_0`` with VHDS."""
    machine = stream()
    start(machine, ROUTE, ["route_0"])
    assert sent(only(settle(machine, snapshot))) == ["route_0"]
    return machine


def test_inv33_first_vhds_request_naming_nothing_gets_the_route_namespace() -> None:
    hosts = [vhost("route_0/a.example"), vhost("route_0/b.example"), vhost("route_1/c.example")]
    snapshot = Snapshot([vhds_route(), *hosts])
    machine = ads_with_vhds_route(snapshot)
    start(machine, VIRTUAL_HOST)
    response = only(machine.poll(snapshot))
    assert sent(response) == ["route_0/a.example", "route_0/b.example"]
    assert response.removed == ()
    ack(machine, response)
    assert machine.poll(snapshot) == []
    # A host added to the namespace later is pushed; one removed is removed.
    later = vhost("route_0/later.example")
    response = only(machine.poll(Snapshot([vhds_route(), *hosts, later])))
    assert (sent(response), response.removed) == (["route_0/later.example"], ())
    ack(machine, response)
    response = only(machine.poll(Snapshot([vhds_route(), hosts[1], later])))
    assert (sent(response), response.removed) == ([], ("route_0/a.example",))


def test_inv33_an_empty_namespace_is_answered_with_its_name_removed() -> None:
    # Envoy matches the removal of route_0/* to the watch on the namespace route_0: its
    # listener stops waiting, which an empty response would not make it do.
    snapshot = Snapshot([vhds_route(), vhost("route_1/c.example")])
    machine = ads_with_vhds_route(snapshot)
    start(machine, VIRTUAL_HOST)
    response = only(machine.poll(snapshot))
    assert (sent(response), response.removed) == ([], ("route_0/*",))


def test_inv33_a_route_configuration_with_vhds_sent_later_adds_its_namespace() -> None:
    first = Snapshot([vhds_route(), vhost("route_0/a.example"), vhost("route_1/c.example")])
    machine = ads_with_vhds_route(first)
    start(machine, VIRTUAL_HOST)
    ack(machine, only(machine.poll(first)))
    change(machine, ROUTE, ["route_1"])
    both = Snapshot(
        [
            vhds_route(),
            vhds_route("route_1"),
            vhost("route_0/a.example"),
            vhost("route_1/c.example"),
        ]
    )
    responses = settle(machine, both)
    assert [(r.type_url, sent(r)) for r in responses] == [
        (ROUTE, ["route_1"]),
        (VIRTUAL_HOST, ["route_1/c.example"]),
    ]


def test_inv33_vhds_without_route_configurations_sent_is_unchanged() -> None:
    snapshot = Snapshot([vhds_route(), vhost("route_0/a.example")])
    # No route configuration sent on this stream: nothing asked, nothing answered.
    machine = stream()
    start(machine, VIRTUAL_HOST)
    assert machine.poll(snapshot) == []
    # On VHDS's own service the route configurations travel on another stream.
    alone = DeltaServer(nonce_source=nonce_source(""), type_url=VIRTUAL_HOST)
    start(alone, VIRTUAL_HOST)
    assert alone.poll(snapshot) == []


def test_inv33_aliases_asked_on_demand_add_to_the_namespace() -> None:
    snapshot = Snapshot([vhds_route(), vhost("route_0/a.example"), vhost("route_1/b.example")])
    machine = ads_with_vhds_route(snapshot)
    start(machine, VIRTUAL_HOST, ["route_1/b.example", "route_0/nope.example"])
    response = only(machine.poll(snapshot))
    assert response.resources == (
        vhost("route_0/a.example"),
        Resource.unresolved(VIRTUAL_HOST, "route_0/nope.example"),
        vhost("route_1/b.example"),
    )


def test_inv33_inv27_vhds_reconnect_keeps_the_namespace_hosts_it_holds() -> None:
    # After a reconnect Envoy 1.40's first VHDS request subscribes to "*" and the aliases it
    # asked for on demand, and lists what it holds (test_vhds_envoy.py reads it off the
    # wire); the hosts it holds are neither removed nor resent, and only what it holds that
    # is gone is removed.
    a, b_host = vhost("route_0/a.example"), vhost("route_0/b.example")
    snapshot = Snapshot([vhds_route(), a, b_host])
    machine = ads_with_vhds_route(snapshot)
    unresolved = Resource.unresolved(VIRTUAL_HOST, "route_0/nope.example")
    start(
        machine,
        VIRTUAL_HOST,
        ["*", "route_0/nope.example"],
        initial={
            a.name: a.version,
            b_host.name: b_host.version,
            unresolved.name: unresolved.version,
            "route_0/gone": "v0",
        },
    )
    response = only(machine.poll(snapshot))
    assert (sent(response), response.removed) == ([], ("route_0/gone",))
