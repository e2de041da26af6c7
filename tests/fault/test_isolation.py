"""One group's resources never reach another group's proxy, over mutual TLS on loopback.

The server is each transport in turn (``Http2Transport`` and ``GrpclibTransport``) with
``server_ssl_context`` (client certificates required), a ``SnapshotCache`` grouped by node
id whose two groups hold different clusters and secrets, ``SpiffeNodePolicy`` binding each
node id to its certificate's SPIFFE ID, and one operator identity (``SpiffeOperators``).
The clients are grpcio with certificates of their own, sending requests built by the
library's ``SotwClient`` and decoding what comes back with ``decode_response``. Each
check looks at the raw bytes too: the other group's secret must not appear in anything a
client was sent. CSDS tells each proxy about its own node, and the operator about all.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import attrs
import grpc
import pytest
from envoy.extensions.transport_sockets.tls.v3 import secret_pb2

from xdscore import (
    CLUSTER,
    ENDPOINT,
    SECRET,
    GrpclibTransport,
    Http2Transport,
    Snapshot,
    SnapshotCache,
    XdsServer,
    by_node_id,
)
from xdscore import builders as b
from xdscore.protocol import SotwClient
from xdscore.server import SpiffeNodePolicy, SpiffeOperators
from xdscore.transport import server_ssl_context
from xdscore.wire import DiscoveryRequest, decode_response, encode_request, make_node
from xdscore.wire._csds import IdMatcher, decode_status_response, encode_status_query

from ..tls_support import CertificateAuthority, Issued
from ._clients import ADS, Connection, Failure, RawCall
from .test_bad_clients import _grpc_settled, _no_errors_logged  # noqa: F401  (autouse)

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

TRUST_DOMAIN = "spiffe://example.org"
GROUPS = ("a", "b")
OPERATOR = f"{TRUST_DOMAIN}/ns/ops/sa/status"
CSDS = "/envoy.service.status.v3.ClientStatusDiscoveryService"


def spiffe_id(group: str) -> str:
    return f"{TRUST_DOMAIN}/ns/{group}/sa/proxy"


def node_id(group: str) -> str:
    """The node id ``SpiffeNodePolicy()`` allows the certificate of ``group``."""
    return f"proxy.{group}"


def secret_bytes(group: str) -> bytes:
    """What only ``group``'s secret holds: the marker searched for in raw responses."""
    return f"PRIVATE KEY OF GROUP {group.upper()}".encode()


def group_snapshot(group: str, generation: int = 0) -> Snapshot:
    """A cluster, its endpoints and a secret, all named after the group."""
    secret = secret_pb2.Secret(name=f"key-{group}")
    secret.tls_certificate.certificate_chain.inline_string = f"chain {group} {generation}"
    secret.tls_certificate.private_key.inline_bytes = secret_bytes(group)
    return Snapshot(
        [
            b.eds_cluster(f"cluster-{group}"),
            b.load_assignment(f"cluster-{group}", [("10.0.0.1", 8000 + generation)]),
            secret,
        ]
    )


@attrs.define
class Secured:
    """The server, its port, and the certificates its clients may present."""

    cache: SnapshotCache
    server: XdsServer
    port: int
    ca: CertificateAuthority
    certificates: dict[str, Issued]

    def denied(self) -> float | None:
        assert self.server.metrics is not None
        return self.server.metrics.registry.get_sample_value(
            "xdscore_refused_streams_total", {"reason": "permission_denied"}
        )

    @asynccontextmanager
    async def connect(self, group: str) -> AsyncIterator[Connection]:
        """A connection presenting ``group``'s certificate, closed on exit."""
        connection = TlsConnection(f"127.0.0.1:{self.port}", self.ca, self.certificates[group])
        try:
            yield connection
        finally:
            await connection.close()


class TlsConnection(Connection):
    """A :class:`Connection` over mutual TLS with a client certificate."""

    def __init__(self, target: str, ca: CertificateAuthority, client: Issued) -> None:
        credentials = grpc.ssl_channel_credentials(
            root_certificates=ca.pem,
            private_key=client.key_pem,
            certificate_chain=client.cert_pem,
        )
        options = [("grpc.use_local_subchannel_pool", 1)]
        self.channel = grpc.aio.secure_channel(target, credentials, options=options)
        self.calls: list[RawCall] = []


@pytest.fixture(params=[Http2Transport, GrpclibTransport], ids=["http2", "grpclib"])
async def secured(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[Secured]:
    ca = CertificateAuthority()
    files = ca.server().write(tmp_path, "server")
    context = server_ssl_context(files.cert, files.key, client_ca=ca.write(tmp_path))
    cache = SnapshotCache(group=by_node_id)
    for group in GROUPS:
        cache.set_snapshot(node_id(group), group_snapshot(group))
    server = XdsServer(
        cache,
        authorize=SpiffeNodePolicy(),
        operators=SpiffeOperators([f"{TRUST_DOMAIN}/ns/ops/sa/*"]),
    )
    transport = request.param(server)
    port = await transport.start("127.0.0.1", 0, ssl_context=context)
    certificates = {group: ca.client(spiffe_id(group)) for group in GROUPS}
    certificates["no-policy-match"] = ca.client(f"{TRUST_DOMAIN}/proxy")
    certificates["operator"] = ca.client(OPERATOR)
    try:
        yield Secured(cache, server, port, ca, certificates)
    finally:
        with anyio.fail_after(10):
            await transport.stop()


@attrs.define
class Proxy:
    """A SotW ADS client of one node, driven by the library's client machine: it ACKs
    every response and keeps the raw bytes of each."""

    call: RawCall
    client: SotwClient
    received: list[bytes] = attrs.field(factory=list)

    async def send(self, request: DiscoveryRequest) -> None:
        await self.call.send(encode_request(request))

    async def subscribe(self) -> None:
        """Every cluster, and both groups' endpoints and secrets by name."""
        await self.send(self.client.watch(CLUSTER, None))
        names = [f"cluster-{group}" for group in GROUPS]
        await self.send(self.client.watch(ENDPOINT, names))
        await self.send(self.client.watch(SECRET, [f"key-{group}" for group in GROUPS]))

    async def next(self, timeout: float = 5.0) -> bytes | Failure:
        """The next response (recorded and ACKed), or how the stream ended."""
        item = await self.call.next(timeout)
        if isinstance(item, Failure):
            return item
        self.received.append(item)
        await self.send(self.client.receive(decode_response(item)))
        return item

    async def until(self, wanted: dict[str, set[str]], timeout: float = 5.0) -> None:
        """Take responses until the client holds at least ``wanted`` (names by type)."""
        with anyio.fail_after(timeout):
            while not all(names <= set(self.client.holds(t)) for t, names in wanted.items()):
                item = await self.next(timeout)
                assert not isinstance(item, Failure), f"the stream ended: {item}"

    def names(self) -> dict[str, set[str]]:
        return {t: set(self.client.holds(t)) for t in (CLUSTER, ENDPOINT, SECRET)}


def own(group: str) -> dict[str, set[str]]:
    return {CLUSTER: {f"cluster-{group}"}, ENDPOINT: {f"cluster-{group}"}, SECRET: {f"key-{group}"}}


def proxy(connection: Connection, node: str) -> Proxy:
    return Proxy(connection.open(ADS), SotwClient(node=make_node(id=node)))


async def test_a_proxy_never_receives_another_groups_resources(secured: Secured) -> None:
    async with secured.connect("a") as conn_a, secured.connect("b") as conn_b:
        a, b_ = proxy(conn_a, node_id("a")), proxy(conn_b, node_id("b"))
        for client in (a, b_):
            await client.subscribe()
        await a.until(own("a"))
        await b_.until(own("b"))
        # Asked by name for B's endpoints and secret, A gets only its own.
        assert a.names() == own("a")
        assert b_.names() == own("b")
        assert a.client.holds(SECRET)["key-a"].body.endswith(secret_bytes("a"))

        # Changes to both groups: B's reach B; A is sent its own change and nothing of B's.
        secured.cache.set_snapshot(node_id("b"), group_snapshot("b", 1))
        secured.cache.set_snapshot(node_id("a"), group_snapshot("a", 1))
        for client, group in ((a, "a"), (b_, "b")):
            with anyio.fail_after(5):
                while b"chain " + group.encode() + b" 1" not in client.received[-1]:
                    item = await client.next()
                    assert not isinstance(item, Failure), item
            assert client.names() == own(group)
        assert not any(secret_bytes("b") in data for data in a.received), "A was sent B's secret"
        assert not any(secret_bytes("a") in data for data in b_.received), "B was sent A's secret"
        assert any(secret_bytes("a") in data for data in a.received)
    assert secured.denied() == 0


async def test_a_certificate_claiming_another_node_is_denied_before_anything_is_sent(
    secured: Secured,
) -> None:
    async with secured.connect("a") as conn:
        # A's certificate, B's node id: the first request is refused, nothing is sent.
        # (One request only: grpcio may report a write the refusal beat as its own INTERNAL.)
        impostor = proxy(conn, node_id("b"))
        await impostor.send(impostor.client.watch(SECRET, ["key-b"]))
        ended = await impostor.next()
        assert isinstance(ended, Failure), f"a response came before the refusal: {ended!r:.200}"
        assert ended.code == grpc.StatusCode.PERMISSION_DENIED, ended
        assert f"node id {node_id('b')!r} does not match the certificate" in ended.details
        assert f"{spiffe_id('a')} allows {node_id('a')!r}" in ended.details
        assert impostor.received == []
        assert secured.denied() == 1

        # On the same connection, the node the certificate names is served.
        honest = proxy(conn, node_id("a"))
        await honest.subscribe()
        await honest.until(own("a"))

    # A certificate whose SPIFFE ID the policy's template does not match claims nothing.
    async with secured.connect("no-policy-match") as conn:
        stranger = proxy(conn, "proxy")
        await stranger.send(stranger.client.watch(CLUSTER, None))
        ended = await stranger.next()
        assert isinstance(ended, Failure), f"a response came before the refusal: {ended!r:.200}"
        assert ended.code == grpc.StatusCode.PERMISSION_DENIED, ended
        assert "no SPIFFE ID of the form" in ended.details
        assert f"{TRUST_DOMAIN}/proxy" in ended.details
    assert secured.denied() == 2
    assert list(secured.server.streams()) == []


async def test_a_node_changing_mid_stream_is_invalid_argument(secured: Secured) -> None:
    async with secured.connect("a") as conn:
        switcher = proxy(conn, node_id("a"))
        await switcher.send(switcher.client.watch(CLUSTER, None))
        await switcher.until({CLUSTER: {"cluster-a"}})
        # Allowed as A, the stream now names B's node and asks for B's secret.
        as_b = DiscoveryRequest(
            type_url=SECRET, resource_names=("key-b",), node=make_node(id=node_id("b"))
        )
        await switcher.send(as_b)
        ended = await switcher.next()
        assert isinstance(ended, Failure), f"a response came after the switch: {ended!r:.200}"
        assert ended.code == grpc.StatusCode.INVALID_ARGUMENT, ended
        assert "node changed mid-stream" in ended.details
        assert f"id={node_id('a')!r}" in ended.details
        assert f"id={node_id('b')!r}" in ended.details
        assert not any(secret_bytes("b") in data for data in switcher.received)
    # Not an authorization refusal: the authorizer allowed the stream's node.
    assert secured.denied() == 0


async def client_status(
    connection: Connection, *, node_prefix: str = "", unary: bool = False
) -> list[str]:
    """The node ids CSDS reports on ``connection`` (its stream method, or the unary one)."""
    query = encode_status_query([IdMatcher("prefix", node_prefix)] if node_prefix else [])
    if unary:
        call = connection.channel.unary_unary(f"{CSDS}/FetchClientStatus")
        answer = await call(query, timeout=5)
    else:
        stream = connection.open(f"{CSDS}/StreamClientStatus")
        await stream.send(query)
        answer = await stream.next(timeout=5)
    assert isinstance(answer, bytes), answer
    return sorted(report.node.id for report in decode_status_response(answer))


async def test_csds_tells_a_proxy_about_its_own_node_and_an_operator_about_all(
    secured: Secured,
) -> None:
    async with secured.connect("a") as conn_a, secured.connect("b") as conn_b:
        a, b_ = proxy(conn_a, node_id("a")), proxy(conn_b, node_id("b"))
        for client in (a, b_):
            await client.subscribe()
        await a.until(own("a"))
        await b_.until(own("b"))
        for unary in (False, True):
            assert await client_status(conn_a, unary=unary) == [node_id("a")]
            assert await client_status(conn_b, unary=unary) == [node_id("b")]
            # Asked about the other node by name: nothing, not even that it exists.
            assert await client_status(conn_a, node_prefix=node_id("b"), unary=unary) == []
        for name, expected in (
            ("operator", [node_id("a"), node_id("b")]),
            ("no-policy-match", []),
        ):
            async with secured.connect(name) as connection:
                assert await client_status(connection) == expected, name
                assert await client_status(connection, unary=True) == expected, name
