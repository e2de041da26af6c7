"""``resource_errors`` (xRFC TP3, docs/protocol.md invariant 41): the server machines report
names that do not exist and names the resource policy denies, only to clients that read
them, and the library's own client machines read them. Every exchange goes through the real
codec: ``SotwPair`` / ``DeltaPair`` decode each response with the protobuf runtime and check
it against what the server machine produced, errors included."""

from __future__ import annotations

from envoy.service.discovery.v3 import discovery_pb2

from xdscore import LISTENER, ROUTE, GrpcStatus, Snapshot, make_resource
from xdscore.builders import http_listener, route_configuration
from xdscore.protocol import ClientFeatures, DeltaResponse, ErrorDetail, ResourceError
from xdscore.server import StreamInfo
from xdscore.server._codecs import DELTA
from xdscore.server._status import SyncState, resource_statuses, stream_status
from xdscore.testing import DeltaPair, SotwPair

from ..factories import NODE
from ._delta import start, stream

ERRORS = ClientFeatures(resource_errors=True)
NOT_FOUND_TEXT = "the server has no resource of this name"
NOT_FOUND = ErrorDetail(code=GrpcStatus.NOT_FOUND, message=NOT_FOUND_TEXT)
DENIED = ErrorDetail(code=GrpcStatus.PERMISSION_DENIED, message="not for you")
R1 = make_resource(route_configuration("r1", [("/", "a")]))
R2 = make_resource(route_configuration("r2", [("/", "a")]))
L1 = make_resource(http_listener("l1", 10001, "r1"))
L2 = make_resource(http_listener("l2", 10002, "r2"))


def deny_l2_and_r2(type_url: str, name: str) -> str | None:
    return "not for you" if name in ("l2", "r2") else None


class Views:
    """The view a pair reads, replaceable between steps."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot

    def __call__(self) -> Snapshot:
        return self.snapshot


# -- SotW ------------------------------------------------------------------------------------


def test_inv41_sotw_reports_missing_names_only_to_clients_that_read_errors() -> None:
    for features, expected in [(ERRORS, {"missing": NOT_FOUND}), (ClientFeatures(), {})]:
        pair = SotwPair(Views(Snapshot([R1])), node=NODE, features=features)
        pair.send(pair.client.watch(ROUTE, ["r1", "missing"]))
        pair.settle()
        assert set(pair.client.holds(ROUTE)) == {"r1"}
        assert dict(pair.client.errors(ROUTE)) == expected
        (sent,) = pair.sent
        assert [(e.name, e.code) for e in sent.resource_errors] == [
            (name, detail.code) for name, detail in expected.items()
        ]


def test_inv41_sotw_error_clears_when_the_resource_appears() -> None:
    views = Views(Snapshot([R1]))
    pair = SotwPair(views, node=NODE, features=ERRORS)
    pair.send(pair.client.watch(ROUTE, ["r1", "r2"]))
    pair.settle()
    assert dict(pair.client.errors(ROUTE)) == {"r2": NOT_FOUND}
    views.snapshot = Snapshot([R1, R2])
    pair.settle()
    assert set(pair.client.holds(ROUTE)) == {"r1", "r2"}
    assert dict(pair.client.errors(ROUTE)) == {}
    assert pair.sent[-1].resource_errors == ()


def test_inv41_sotw_denied_resources_are_withheld_and_named_ones_reported() -> None:
    pair = SotwPair(
        Views(Snapshot([L1, L2, R1, R2])), node=NODE, features=ERRORS, deny=deny_l2_and_r2
    )
    pair.send(pair.client.watch(LISTENER, None))
    pair.send(pair.client.watch(ROUTE, ["r1", "r2"]))
    pair.settle()
    # Wildcard listeners: l2 withheld, and not reported (the client did not name it).
    assert set(pair.client.holds(LISTENER)) == {"l1"}
    assert dict(pair.client.errors(LISTENER)) == {}
    # Named routes: r2 withheld and reported, whether or not it exists.
    assert set(pair.client.holds(ROUTE)) == {"r1"}
    assert dict(pair.client.errors(ROUTE)) == {"r2": DENIED}
    routes = [r for r in pair.sent if r.type_url == ROUTE]
    assert routes[-1].resource_errors == (
        ResourceError(name="r2", code=GrpcStatus.PERMISSION_DENIED, message="not for you"),
    )
    # Without the feature the denial is the same, only silent.
    quiet = SotwPair(Views(Snapshot([R1, R2])), node=NODE, deny=deny_l2_and_r2)
    quiet.send(quiet.client.watch(ROUTE, ["r1", "r2"]))
    quiet.settle()
    assert set(quiet.client.holds(ROUTE)) == {"r1"}
    assert dict(quiet.client.errors(ROUTE)) == {}


def test_inv41_sotw_nothing_for_a_type_the_view_is_not_authoritative_for() -> None:
    pair = SotwPair(Views(Snapshot([L1])), node=NODE, features=ERRORS)
    pair.send(pair.client.watch(ROUTE, ["r1"]))
    pair.settle()
    assert pair.sent == []  # the view serves no routes: it cannot say r1 does not exist


# -- Delta -----------------------------------------------------------------------------------


def test_inv41_delta_removal_of_a_missing_name_carries_its_error() -> None:
    for features, expected in [(ERRORS, {"missing": NOT_FOUND}), (ClientFeatures(), {})]:
        views = Views(Snapshot([R1]))
        pair = DeltaPair(views, node=NODE, features=features)
        pair.send(pair.client.subscribe(ROUTE, ["r1", "missing"]))
        pair.settle()
        (sent,) = pair.sent
        assert sent.removed_resources == ("missing",)
        assert {e.name: e.code for e in sent.resource_errors} == {
            name: detail.code for name, detail in expected.items()
        }
        assert dict(pair.client.errors(ROUTE)) == expected
        # The resource appears: sent, and the client's error is gone.
        views.snapshot = Snapshot([R1, make_resource(route_configuration("missing", []))])
        pair.settle()
        assert set(pair.client.holds(ROUTE)) == {"r1", "missing"}
        assert dict(pair.client.errors(ROUTE)) == {}


def test_inv41_delta_denied_names_are_removed_and_reported_even_when_held() -> None:
    views = Views(Snapshot([R1, R2]))
    pair = DeltaPair(views, node=NODE, features=ERRORS, deny=deny_l2_and_r2)
    pair.send(pair.client.subscribe(ROUTE, ["r1", "r2"]))
    pair.settle()
    assert set(pair.client.holds(ROUTE)) == {"r1"}
    assert dict(pair.client.errors(ROUTE)) == {"r2": DENIED}
    # A reconnecting client that holds both (from a server without the policy): r2 removed.
    machine = stream()
    machine.use_features(ERRORS)
    machine.use_authorization(deny_l2_and_r2)
    start(machine, ROUTE, ["r1", "r2"], initial={"r1": R1.version, "r2": R2.version})
    (response,) = machine.poll(views())
    assert response.resources == ()
    assert response.removed == ("r2",)
    assert response.errors == (
        ResourceError(name="r2", code=GrpcStatus.PERMISSION_DENIED, message="not for you"),
    )


def test_inv41_delta_unsubscribed_and_wildcard_names_get_no_error() -> None:
    pair = DeltaPair(Views(Snapshot([L1, L2])), node=NODE, features=ERRORS, deny=deny_l2_and_r2)
    pair.send(pair.client.subscribe(LISTENER))
    pair.settle()
    assert set(pair.client.holds(LISTENER)) == {"l1"}
    assert all(r.resource_errors == () for r in pair.sent)
    views = Views(Snapshot([R1]))
    routes = DeltaPair(views, node=NODE, features=ERRORS)
    routes.send(routes.client.subscribe(ROUTE, ["r1"]))
    routes.settle()
    views.snapshot = Snapshot([])
    routes.send(routes.client.unsubscribe(ROUTE, ["r1"]))
    routes.settle()
    assert all(r.resource_errors == () for r in routes.sent)


def test_inv41_delta_errors_on_the_wire() -> None:
    response = DeltaResponse(
        type_url=ROUTE,
        nonce="n",
        system_version_info="v",
        resources=(),
        removed=("x",),
        errors=(ResourceError(name="x", code=GrpcStatus.NOT_FOUND, message="gone"),),
    )
    message = discovery_pb2.DeltaDiscoveryResponse.FromString(b"".join(DELTA.encode(response, "")))
    (error,) = message.resource_errors
    assert error.resource_name.name == "x"
    assert (error.error_detail.code, error.error_detail.message) == (GrpcStatus.NOT_FOUND, "gone")
    assert list(message.removed_resources) == ["x"]


def test_inv41_status_compares_with_what_the_policy_lets_the_client_have() -> None:
    view = Snapshot([L1, L2])
    pair = SotwPair(Views(view), node=NODE, deny=deny_l2_and_r2)
    pair.send(pair.client.watch(LISTENER, None))
    pair.settle()
    info = StreamInfo(id=1, protocol="sotw", type_url=None, node=NODE)
    status = stream_status(info, pair.server, {}, view)
    (listeners,) = status.types
    assert listeners.sync is SyncState.SYNCED
    assert [r.name for r in resource_statuses(LISTENER, pair.server, view)] == ["l1"]
