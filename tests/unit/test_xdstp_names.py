"""xdstp:// names in canonical form (xRFC TP1 "Normalization", Envoy's URN codec): the form
itself, where names enter (resources, references, request records, the codec, the client
machines, the linear cache), and both server machines delivering a resource asked for with
its context parameters in another order."""

from __future__ import annotations

import string

import pytest
from envoy.service.discovery.v3 import discovery_pb2
from hypothesis import given
from hypothesis import strategies as st

from xdscore import ROUTE, Snapshot
from xdscore import builders as b
from xdscore.cache import LinearCache, SnapshotError
from xdscore.protocol import DeltaClient, DeltaServer, SotwClient, SotwServer
from xdscore.wire import (
    DeltaDiscoveryRequest,
    DeltaDiscoveryResponse,
    DiscoveryRequest,
    Reference,
    canonical_name,
    decode_delta_request,
    decode_request,
    make_resource,
)

from ..factories import NODE, nonce_source

ROUTE_TYPE = "envoy.config.route.v3.RouteConfiguration"
STORED = f"xdstp://test/{ROUTE_TYPE}/r?zone=z1&app=web"
ASKED = f"xdstp://test/{ROUTE_TYPE}/r?app=web&zone=z1"
"""What Envoy sends for a route configuration named :data:`STORED`: the canonical form."""


# -- the canonical form -------------------------------------------------------------------


def test_context_parameters_are_sorted() -> None:
    assert canonical_name(STORED) == ASKED
    assert canonical_name(ASKED) == ASKED
    assert canonical_name("xdstp://a/T/x?c=3&b=2&a=1") == "xdstp://a/T/x?a=1&b=2&c=3"


def test_sorted_as_encoded_key_value_strings_like_envoy() -> None:
    # Envoy sorts the encoded "key=value" strings, not the keys: "-" (0x2D) < "=" (0x3D).
    assert canonical_name("xdstp://a/T/x?a=1&a-b=2") == "xdstp://a/T/x?a-b=2&a=1"


def test_names_without_parameters_or_id() -> None:
    assert canonical_name("xdstp://a/T/x/y") == "xdstp://a/T/x/y"
    assert canonical_name("xdstp://a/T/x?") == "xdstp://a/T/x"
    assert canonical_name("xdstp://a/T/") == "xdstp://a/T"
    assert canonical_name("xdstp:///T/x") == "xdstp:///T/x"  # empty authority kept


def test_percent_encoding_is_normalised() -> None:
    # Decoded, then encoded again: upper-case escapes, unreserved escapes decoded, "~" and
    # non-ASCII encoded (as Envoy's PercentEncoding does), "%2F" in an id becomes a slash.
    assert canonical_name("xdstp://a/T/x?k=%7e%61") == "xdstp://a/T/x?k=%7Ea"
    assert canonical_name("xdstp://a/T/café") == "xdstp://a/T/caf%C3%A9"
    assert canonical_name("xdstp://a/T/foo%2Fbar/baz") == "xdstp://a/T/foo/bar/baz"
    assert canonical_name("xdstp://a/T/x?k=a%26b%3Dc") == "xdstp://a/T/x?k=a%26b%3Dc"
    assert canonical_name("xdstp://a%2fb/T/x") == "xdstp://a%2Fb/T/x"
    assert canonical_name("xdstp://a/T/x?k=100%") == "xdstp://a/T/x?k=100%25"  # malformed


def test_envoy_round_trip_vector() -> None:
    # Envoy's own test vector (xds_resource_test.cc, EscapedUrnWithManyQueryParams): every
    # reserved character of each component, already canonical, survives unchanged.
    urn = (
        "xdstp://f123%25%2F%3F%23o/envoy.config.listener.v3.Listener/b%25:%3F%23%5B%5Dar//"
        "baz?%25%23%5B%5D%26%3D=bar&%25%23%5B%5D%26%3Dab=cde%25%23%5B%5D%26%3Df&foo=%25%23%5B%5D%26%3D"
    )
    assert canonical_name(urn) == urn


def test_query_splitting_follows_envoy() -> None:
    # No "=": an empty value; a repeated key: its first value; a trailing "&" ends the list.
    assert canonical_name("xdstp://a/T/x?b=1&a&a=3&") == "xdstp://a/T/x?a=&b=1"


def test_fragment_is_data_not_a_directive() -> None:
    # URNs carry no directives (TP1); Envoy's URN decoder keeps "#" as data and encodes it.
    assert canonical_name("xdstp://a/T/x#entry=y") == "xdstp://a/T/x%23entry=y"
    assert canonical_name("xdstp://a/T/x?k=v#alt=z") == "xdstp://a/T/x?k=v%23alt%3Dz"


def test_glob_collections_keep_their_star() -> None:
    assert canonical_name("xdstp://a/T/ns/*?b=2&a=1") == "xdstp://a/T/ns/*?a=1&b=2"


def test_other_names_are_untouched() -> None:
    for name in ("route_0", "r?b=1&a=2", "XDSTP://a/T/x?b=1&a=2", "xdstp:a", "xdstp://a", ""):
        assert canonical_name(name) == name
    assert canonical_name("xdstp://a/") == "xdstp://a/"  # no resource type: left alone


_TEXT = st.text(
    alphabet=st.sampled_from(string.ascii_letters + string.digits + "%&=#[]?/~:-_. é"),
    max_size=8,
)
_PARAMS = st.dictionaries(_TEXT.filter(lambda key: "&" not in key and "=" not in key), _TEXT)


def _encode(text: str) -> str:
    return "".join(
        f"%{byte:02X}" if chr(byte) in "%&=#[]?" else chr(byte) for byte in text.encode()
    )


@given(_PARAMS, st.randoms())
def test_any_parameter_order_gives_one_name(params: dict[str, str], rnd: object) -> None:
    pairs = [f"{_encode(key)}={_encode(value)}" for key, value in params.items()]
    shuffled = list(pairs)
    rnd.shuffle(shuffled)  # type: ignore[attr-defined]
    one = canonical_name(f"xdstp://a/T/x?{'&'.join(pairs)}")
    other = canonical_name(f"xdstp://a/T/x?{'&'.join(shuffled)}")
    assert one == other
    assert canonical_name(one) == one


@given(st.text(max_size=40))
def test_canonical_form_is_idempotent(text: str) -> None:
    # (The resource type is kept as it is, as Envoy keeps it: the result may be non-ASCII.)
    name = canonical_name("xdstp://" + text)
    assert canonical_name(name) == name


# -- where names enter ----------------------------------------------------------------------


def test_resources_references_and_records_hold_canonical_names() -> None:
    resource = make_resource(b.route_configuration(STORED, [("/", "c")]))
    assert resource.name == ASKED
    assert Reference(ROUTE, STORED, "rds").name == ASKED
    listener = make_resource(b.http_listener("l", 10000, STORED))
    assert [ref.name for ref in listener.references] == [ASKED]
    assert DiscoveryRequest(resource_names=(STORED, "plain")).resource_names == (ASKED, "plain")
    delta = DeltaDiscoveryRequest(
        resource_names_subscribe=(STORED,),
        resource_names_unsubscribe=[STORED],
        initial_resource_versions={STORED: "v"},
    )
    assert delta.resource_names_subscribe == delta.resource_names_unsubscribe == (ASKED,)
    assert dict(delta.initial_resource_versions) == {ASKED: "v"}
    assert DeltaDiscoveryResponse(removed_resources=(STORED,)).removed_resources == (ASKED,)


def test_plain_names_keep_their_tuple() -> None:
    names = ("a", "b")
    assert DiscoveryRequest(resource_names=names).resource_names is names


def test_codec_decodes_requested_names_to_canonical_form() -> None:
    sotw = discovery_pb2.DiscoveryRequest(type_url=ROUTE, resource_names=[STORED])
    assert decode_request(sotw.SerializeToString()).resource_names == (ASKED,)
    delta = discovery_pb2.DeltaDiscoveryRequest(
        type_url=ROUTE,
        resource_names_subscribe=[STORED],
        resource_names_unsubscribe=[STORED],
        initial_resource_versions={STORED: "v"},
    )
    decoded = decode_delta_request(delta.SerializeToString())
    assert decoded.resource_names_subscribe == decoded.resource_names_unsubscribe == (ASKED,)
    assert dict(decoded.initial_resource_versions) == {ASKED: "v"}


def test_snapshot_sees_one_resource_and_a_consistent_reference() -> None:
    route = b.route_configuration(STORED, [("/", "c")])
    snapshot = Snapshot([route, b.http_listener("l", 10000, ASKED), b.eds_cluster("c")])
    assert list(snapshot.resources(ROUTE) or {}) == [ASKED]
    assert [str(i) for i in snapshot.inconsistencies() if i.missing_type_url == ROUTE] == []
    other_order = make_resource(b.route_configuration(ASKED, [("/", "d")]))
    with pytest.raises(SnapshotError, match="duplicate"):
        Snapshot([route, other_order])


def test_linear_cache_finds_and_deletes_by_any_order() -> None:
    cache = LinearCache(ROUTE)
    cache.set_resource(b.route_configuration(STORED, [("/", "c")]))
    assert cache.get(ASKED) is not None
    assert cache.get(STORED) is not None
    cache.delete_resource(STORED)
    assert cache.get(ASKED) is None


def test_client_machines_watch_in_canonical_form() -> None:
    sotw = SotwClient(node=NODE)
    assert sotw.watch(ROUTE, [STORED]).resource_names == (ASKED,)
    delta = DeltaClient(node=NODE)
    assert delta.subscribe(ROUTE, [STORED]).resource_names_subscribe == (ASKED,)
    assert delta.unsubscribe(ROUTE, [STORED]).resource_names_unsubscribe == (ASKED,)


# -- the machines -------------------------------------------------------------------------


def _snapshot() -> Snapshot:
    return Snapshot([b.route_configuration(STORED, [("/", "c")])])


def test_sotw_delivers_a_resource_asked_for_in_another_parameter_order() -> None:
    machine = SotwServer(nonce_source=nonce_source())
    wire = discovery_pb2.DiscoveryRequest(
        type_url=ROUTE, resource_names=[ASKED], node={"id": NODE.id}
    ).SerializeToString()
    machine.receive(decode_request(wire))
    (response,) = machine.poll(_snapshot())
    assert list(response.selection.resources) == [ASKED]
    # Asked in the stored (non-canonical) order, it is found all the same.
    machine = SotwServer(nonce_source=nonce_source())
    machine.receive(DiscoveryRequest(type_url=ROUTE, resource_names=(STORED,), node=NODE))
    (response,) = machine.poll(_snapshot())
    assert list(response.selection.resources) == [ASKED]


def test_delta_delivers_and_removes_by_canonical_name() -> None:
    machine = DeltaServer(nonce_source=nonce_source())
    wire = discovery_pb2.DeltaDiscoveryRequest(
        type_url=ROUTE, resource_names_subscribe=[ASKED], node={"id": NODE.id}
    ).SerializeToString()
    machine.receive(decode_delta_request(wire))
    (response,) = machine.poll(_snapshot())
    assert [r.name for r in response.resources] == [ASKED]
    assert response.removed == ()
    # The Delta entry names it in the form Envoy asked for.
    entry = discovery_pb2.DeltaDiscoveryResponse.FromString(response.resources[0].delta_entry)
    assert [r.name for r in entry.resources] == [ASKED]
    machine.receive(DeltaDiscoveryRequest(type_url=ROUTE, response_nonce=response.nonce))  # ACK
    # Gone from the view: removed under the name the client holds.
    (removal,) = machine.poll(Snapshot(types=[ROUTE]))
    assert removal.removed == (ASKED,)


def test_delta_reconnect_with_other_order_sends_nothing_new() -> None:
    snapshot = _snapshot()
    version = (snapshot.resources(ROUTE) or {})[ASKED].version
    machine = DeltaServer(nonce_source=nonce_source())
    machine.receive(
        DeltaDiscoveryRequest(
            type_url=ROUTE,
            resource_names_subscribe=(STORED,),
            initial_resource_versions={STORED: version},
            node=NODE,
        )
    )
    assert machine.poll(snapshot) == []
