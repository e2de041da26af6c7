"""The load generator's neutral client (benchmarks/grpc_core_client.py), without a network.

Its sessions must behave as Envoy does (requests recorded from Envoy 1.40 with
benchmarks/h2_capture.py): clusters and listeners by wildcard, then endpoints and routes by
the names the held resources give, asked for before the response that named them is ACKed;
every response ACKed (SotW: its version and nonce; Delta: its nonce), the node on every
request, a resource that does not decode NACKed; and each client decodes for itself.
The fleet over real grpcio channels is in test_bench_client.py.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from envoy.config.core.v3 import base_pb2
from envoy.service.discovery.v3 import discovery_pb2
from google.protobuf import any_pb2

from xdscore import builders as b

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

from grpc_core_client import CDS, EDS, LDS, RDS, DeltaSession, SotwSession  # noqa: E402

NODE = base_pb2.Node(id="proxy-1", cluster="fleet")
Request = discovery_pb2.DiscoveryRequest
DeltaRequest = discovery_pb2.DeltaDiscoveryRequest


def _any(type_url: str, message: Any) -> any_pb2.Any:
    return any_pb2.Any(type_url=type_url, value=message.SerializeToString())


def sotw(type_url: str, version: str, nonce: str, *messages: Any) -> bytes:
    return discovery_pb2.DiscoveryResponse(
        version_info=version,
        type_url=type_url,
        nonce=nonce,
        resources=[_any(type_url, m) for m in messages],
    ).SerializeToString()


def delta(type_url: str, nonce: str, *messages: Any, removed: tuple[str, ...] = ()) -> bytes:
    entries = [
        discovery_pb2.Resource(
            name=m.cluster_name if type_url == EDS else m.name,
            version=f"v-{index}",
            resource=_any(type_url, m),
        )
        for index, m in enumerate(messages)
    ]
    return discovery_pb2.DeltaDiscoveryResponse(
        type_url=type_url, nonce=nonce, resources=entries, removed_resources=list(removed)
    ).SerializeToString()


def requests(data: list[bytes]) -> list[Request]:
    return [Request.FromString(d) for d in data]


def test_sotw_asks_for_clusters_and_listeners_by_wildcard_with_its_node() -> None:
    first = requests(SotwSession(NODE).start())
    assert [(r.type_url, list(r.resource_names), r.version_info) for r in first] == [
        (CDS, [], ""),
        (LDS, [], ""),
    ]
    assert all(r.node == NODE for r in first)


def test_sotw_subscribes_to_endpoints_before_acking_the_clusters_that_name_them() -> None:
    session = SotwSession(NODE)
    session.start()
    response, out = session.receive(sotw(CDS, "c1", "n1", b.eds_cluster("b"), b.eds_cluster("a")))
    assert response.version_info == "c1"
    eds, ack = requests(out)
    assert (eds.type_url, list(eds.resource_names), eds.response_nonce) == (EDS, ["a", "b"], "")
    assert (ack.type_url, ack.version_info, ack.response_nonce) == (CDS, "c1", "n1")
    assert list(ack.resource_names) == []
    assert all(r.node == NODE for r in (eds, ack))
    assert sorted(session.holds(CDS)) == ["a", "b"]
    # The same clusters again: an ACK only, no new subscription.
    _, out = session.receive(sotw(CDS, "c2", "n2", b.eds_cluster("b"), b.eds_cluster("a")))
    assert [(r.type_url, r.version_info, r.response_nonce) for r in requests(out)] == [
        (CDS, "c2", "n2")
    ]
    # Endpoints answered and ACKed by name.
    _, out = session.receive(sotw(EDS, "e1", "n3", b.load_assignment("a", [("127.0.0.1", 1)])))
    (ack,) = requests(out)
    assert (ack.type_url, ack.version_info, ack.response_nonce) == (EDS, "e1", "n3")
    assert list(ack.resource_names) == ["a", "b"]
    assert list(session.holds(EDS)) == ["a"]


def test_sotw_follows_a_listener_to_its_route_configuration() -> None:
    session = SotwSession(NODE)
    _, out = session.receive(
        sotw(
            LDS, "l1", "n1", b.http_listener("http", 10000, "routes"), b.api_listener("api", "grpc")
        )
    )
    rds, ack = requests(out)
    assert (rds.type_url, list(rds.resource_names)) == (RDS, ["grpc", "routes"])
    assert (ack.type_url, ack.version_info) == (LDS, "l1")
    _, out = session.receive(sotw(RDS, "r1", "n2", b.route_configuration("routes", [("/", "a")])))
    assert list(session.holds(RDS)) == ["routes"]


def test_sotw_nacks_what_does_not_decode_and_keeps_what_it_had() -> None:
    session = SotwSession(NODE)
    session.receive(sotw(CDS, "c1", "n1", b.eds_cluster("a")))
    broken = discovery_pb2.DiscoveryResponse(
        version_info="c2",
        type_url=CDS,
        nonce="n2",
        resources=[any_pb2.Any(type_url=CDS, value=b"\xff\xff")],
    ).SerializeToString()
    _, out = session.receive(broken)
    (nack,) = requests(out)
    assert (nack.version_info, nack.response_nonce) == ("c1", "n2")
    assert nack.error_detail.code == 3
    assert "cannot decode" in nack.error_detail.message
    assert list(session.holds(CDS)) == ["a"]
    # A resource of another type in the response is refused the same way.
    _, out = session.receive(
        discovery_pb2.DiscoveryResponse(
            version_info="c3", type_url=CDS, nonce="n3", resources=[_any(LDS, b.eds_cluster("x"))]
        ).SerializeToString()
    )
    assert requests(out)[0].error_detail.code == 3


def test_sotw_reconnects_with_the_versions_it_accepted_and_no_nonce() -> None:
    session = SotwSession(NODE)
    session.receive(sotw(CDS, "c1", "n1", b.eds_cluster("a")))
    session.receive(sotw(EDS, "e1", "n2", b.load_assignment("a", [("127.0.0.1", 1)])))
    again = requests(session.reconnect())
    assert [(r.type_url, r.version_info, r.response_nonce) for r in again] == [
        (CDS, "c1", ""),
        (LDS, "", ""),
        (EDS, "e1", ""),
    ]
    assert list(again[2].resource_names) == ["a"]


def test_each_client_decodes_for_itself() -> None:
    data = sotw(CDS, "c1", "n1", b.eds_cluster("a"))
    one, other = SotwSession(NODE), SotwSession(NODE)
    first, _ = one.receive(data)
    second, _ = other.receive(data)
    assert first is not second
    assert one.holds(CDS)["a"] == other.holds(CDS)["a"]
    assert one.holds(CDS)["a"] is not other.holds(CDS)["a"]


def test_delta_subscribes_by_difference_and_acks_by_nonce() -> None:
    session = DeltaSession(NODE)
    first = [DeltaRequest.FromString(d) for d in session.start()]
    assert [(r.type_url, list(r.resource_names_subscribe)) for r in first] == [
        (CDS, []),
        (LDS, []),
    ]
    _, out = session.receive(delta(CDS, "n1", b.eds_cluster("a"), b.eds_cluster("b")))
    sub, ack = (DeltaRequest.FromString(d) for d in out)
    assert (sub.type_url, list(sub.resource_names_subscribe)) == (EDS, ["a", "b"])
    assert (ack.type_url, ack.response_nonce) == (CDS, "n1")
    assert all(r.node == NODE for r in (sub, ack))
    # b removed, c added: one request subscribing to c and unsubscribing from b.
    _, out = session.receive(delta(CDS, "n2", b.eds_cluster("c"), removed=("b",)))
    sub, ack = (DeltaRequest.FromString(d) for d in out)
    assert list(sub.resource_names_subscribe) == ["c"]
    assert list(sub.resource_names_unsubscribe) == ["b"]
    assert sorted(session.holds(CDS)) == ["a", "c"]
    reconnect = [DeltaRequest.FromString(d) for d in session.reconnect()]
    assert [r.type_url for r in reconnect] == [CDS, LDS, EDS]
    assert dict(reconnect[0].initial_resource_versions) == {"a": "v-0", "c": "v-0"}
    assert sorted(reconnect[2].resource_names_subscribe) == ["a", "c"]


def test_the_neutral_client_loads_nothing_of_xdscore() -> None:
    code = (
        f"import sys; sys.path.insert(0, {str(BENCHMARKS)!r}); import grpc_core_client; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('xdscore', 'loadgen')))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert loaded.strip() == "[]"
