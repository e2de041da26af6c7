"""Tenants on one ``xdscore serve``: scopes.yaml under mutual TLS and SPIFFE node binding.

Two tenants, ``team-a`` and ``team-b``, each have a cluster whose upstream TLS certificate
comes over SDS: a ``Secret`` holding a private key. ``scopes.yaml`` gives each tenant its
own cluster (and, by closure, its own secret), selecting nodes by ``cluster`` as
docs/scopes.md shows. Every client below holds a valid certificate from the server's CA;
each tries to read what is not its own:

* a tenant claiming the other tenant's cluster (SotW SDS, ADS, Delta ADS, unary Fetch);
* a tenant asking by name for the other tenant's secret from its own node;
* a certificate that no scope selects;
* CSDS, asked by a tenant (its own node only) and by the operator identity (every node).

A configuration that would let a certificate choose its scope (scopes selecting on a node
field the binding leaves free) is refused at start, before anything is served.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import textwrap
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import attrs
import grpc
import pytest
from envoy.service.discovery.v3 import discovery_pb2

from xdscore import CLUSTER, SECRET
from xdscore.testing import free_port, http_get
from xdscore.wire import (
    DeltaDiscoveryRequest,
    DiscoveryRequest,
    encode_delta_request,
    encode_request,
    make_node,
)
from xdscore.wire._csds import IdMatcher, decode_status_response, encode_status_query

from ..fault._clients import ADS, DELTA_ADS, Failure, RawCall
from ..fault.test_bad_clients import _grpc_settled  # noqa: F401  (autouse)
from ..tls_support import CertificateAuthority, Issued
from .test_config_server import Served

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]

SPIFFE_TEMPLATE = "spiffe://{trust_domain}/ns/{namespace}/sa/{account}"
NODE_TEMPLATE = "{account}.{namespace}"
SDS = "/envoy.service.secret.v3.SecretDiscoveryService/StreamSecrets"
FETCH_SECRETS = "/envoy.service.secret.v3.SecretDiscoveryService/FetchSecrets"
CSDS = "/envoy.service.status.v3.ClientStatusDiscoveryService/StreamClientStatus"
OPERATOR = "spiffe://example.org/ns/ops/sa/status"
DENIED = 'xdscore_refused_streams_total{reason="permission_denied"}'


UPSTREAM_TLS = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext"


def key_of(team: str) -> bytes:
    """What the private key of ``team``'s secret holds: found in a response, it leaked."""
    return f"{team} PRIVATE KEY".encode()


def tenant_resources(team: str) -> str:
    return textwrap.dedent(
        f"""\
        "@type": type.googleapis.com/envoy.config.cluster.v3.Cluster
        name: {team}/api
        type: STATIC
        connect_timeout: 1s
        load_assignment:
          cluster_name: {team}/api
          endpoints:
          - lb_endpoints:
            - endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: 9}}}}}}
        transport_socket:
          name: envoy.transport_sockets.tls
          typed_config:
            "@type": {UPSTREAM_TLS}
            common_tls_context:
              tls_certificate_sds_secret_configs:
              - name: {team}/client
                sds_config: {{ads: {{}}, resource_api_version: V3}}
        ---
        "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret
        name: {team}/client
        tls_certificate:
          certificate_chain: {{inline_string: "{team} CERTIFICATE"}}
          private_key: {{inline_string: "{team} PRIVATE KEY"}}
        """
    )


SCOPES_BY_CLUSTER = """\
scopes:
- name: team-a
  nodes: {cluster: team-a}
  egress: ["team-a/*"]
- name: team-b
  nodes: {cluster: team-b}
  egress: ["team-b/*"]
"""


def write_config(directory: Path, scopes: str = SCOPES_BY_CLUSTER) -> Path:
    for team in ("team-a", "team-b"):
        (directory / f"{team}.yaml").write_text(tenant_resources(team))
    (directory / "scopes.yaml").write_text(scopes)
    return directory


def spiffe_id(account: str, namespace: str) -> str:
    return f"spiffe://example.org/ns/{namespace}/sa/{account}"


@attrs.frozen
class Tenant:
    """A certificate and the node its SPIFFE ID allows (``edge.NAMESPACE`` in cluster
    ``NAMESPACE``)."""

    namespace: str
    certificate: Issued

    @property
    def node_id(self) -> str:
        return f"edge.{self.namespace}"


@attrs.define
class Plane:
    """``xdscore serve`` with mutual TLS, and how to reach it."""

    served: Served
    ca: CertificateAuthority
    port: int
    admin_port: int
    certs: Path
    config: Path

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def tenant(self, namespace: str) -> Tenant:
        return Tenant(namespace, self.ca.client(spiffe_id("edge", namespace)))

    def channel(self, certificate: Issued) -> grpc.aio.Channel:
        credentials = grpc.ssl_channel_credentials(
            root_certificates=self.ca.pem,
            private_key=certificate.key_pem,
            certificate_chain=certificate.cert_pem,
        )
        return grpc.aio.secure_channel(
            self.target, credentials, options=[("grpc.use_local_subchannel_pool", 1)]
        )

    async def denied(self) -> float:
        status, _headers, text = await http_get("127.0.0.1", self.admin_port, "/metrics")
        assert status == 200, text
        for line in text.splitlines():
            if line.startswith(DENIED + " "):
                return float(line.split()[-1])
        raise AssertionError(f"no {DENIED} in /metrics")


def serve_command(config: Path, certs: Path, port: int, admin: int, *flags: str) -> list[str]:
    return [
        sys.executable, "-m", "xdscore", "--log-level", "info", "serve", str(config),
        "--listen", f"127.0.0.1:{port}", "--admin", f"127.0.0.1:{admin}",
        "--tls-cert", str(certs / "server.crt"), "--tls-key", str(certs / "server.key"),
        "--client-ca", str(certs / "ca.crt"),
        "--node-from-spiffe", SPIFFE_TEMPLATE, NODE_TEMPLATE, *flags,
    ]  # fmt: skip


@asynccontextmanager
async def serving(command: list[str]) -> AsyncIterator[Served]:
    """Run ``command`` (an ``xdscore serve``) until the block ends."""
    process = await anyio.open_process(command)
    served = Served(process)
    reader = asyncio.create_task(served.read_log())
    try:
        assert process.stdout is not None
        banner = ""
        with anyio.fail_after(30):
            while "admin endpoint on" not in banner:
                chunk = await process.stdout.receive()
                banner += chunk.decode()
        yield served
    finally:
        process.terminate()
        with anyio.CancelScope(shield=True), anyio.move_on_after(10):
            await process.wait()
        if process.returncode is None:
            process.kill()
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reader
        await process.aclose()


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    """One event loop for the module: its tests share the control plane."""
    return "asyncio"


@pytest.fixture(scope="module")
def ca_and_certs(tmp_path_factory: pytest.TempPathFactory) -> tuple[CertificateAuthority, Path]:
    certs = tmp_path_factory.mktemp("certs")
    ca = CertificateAuthority()
    ca.write(certs)
    ca.server().write(certs, "server")
    return ca, certs


@pytest.fixture(scope="module")
async def plane(
    ca_and_certs: tuple[CertificateAuthority, Path], tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Plane]:
    """Scopes by cluster, the node id and the cluster both bound to the SPIFFE ID, and one
    operator identity."""
    ca, certs = ca_and_certs
    config = write_config(tmp_path_factory.mktemp("config"))
    port, admin = free_port(), free_port()
    flags = ("--bind-field", "cluster={namespace}", "--operator-id", OPERATOR)
    async with serving(serve_command(config, certs, port, admin, *flags)) as served:
        yield Plane(served, ca, port, admin, certs, config)
        assert not [line for line in served.lines if "Traceback" in line], served.lines


# -- what a client gets ---------------------------------------------------------------------


@attrs.frozen
class Outcome:
    """What a call received (each message's bytes) and how it ended, if it did."""

    messages: list[bytes]
    failure: Failure | None
    delta: bool = False

    @property
    def received(self) -> bytes:
        return b"".join(self.messages)

    def holds(self, team: str) -> bool:
        return key_of(team) in self.received

    def resources(self) -> int:
        """How many resources the responses carried, all together."""
        kind = (
            discovery_pb2.DeltaDiscoveryResponse if self.delta else discovery_pb2.DiscoveryResponse
        )
        return sum(len(kind.FromString(message).resources) for message in self.messages)


async def gather(
    call: RawCall, done: Callable[[bytes], bool], seconds: float, *, delta: bool = False
) -> Outcome:
    """Read ``call`` until it ends, ``done`` says what arrived is enough, or ``seconds``
    pass; then read for 0.3 s more (a second response must not carry anything either)."""
    messages: list[bytes] = []
    failure: Failure | None = None
    with anyio.move_on_after(seconds):
        while failure is None and not done(b"".join(messages)):
            item = await call.next(seconds + 1)
            if isinstance(item, Failure):
                failure = item
            else:
                messages.append(item)
    if failure is None:
        with anyio.move_on_after(0.3):
            while True:
                item = await call.next(1)
                if isinstance(item, Failure):
                    failure = item
                    break
                messages.append(item)
    return Outcome(messages, failure, delta)


async def sotw(
    plane: Plane,
    tenant: Tenant,
    cluster: str,
    names: list[str],
    done: Callable[[bytes], bool],
    *,
    path: str = SDS,
) -> Outcome:
    """A SotW stream as ``tenant``'s node id in ``cluster`` asking for the secrets ``names``
    (on ADS, every cluster too)."""
    channel = plane.channel(tenant.certificate)
    call = RawCall(channel, path)
    node = make_node(id=tenant.node_id, cluster=cluster)
    try:
        if path == ADS:
            await call.send(encode_request(DiscoveryRequest(type_url=CLUSTER, node=node)))
            await call.send(encode_request(DiscoveryRequest(type_url=SECRET, resource_names=names)))
        else:
            await call.send(
                encode_request(DiscoveryRequest(type_url=SECRET, node=node, resource_names=names))
            )
        return await gather(call, done, 2.0)
    finally:
        await channel.close()


async def ads(
    plane: Plane, tenant: Tenant, cluster: str, names: list[str], done: Callable[[bytes], bool]
) -> Outcome:
    return await sotw(plane, tenant, cluster, names, done, path=ADS)


async def delta(
    plane: Plane, tenant: Tenant, cluster: str, names: list[str], done: Callable[[bytes], bool]
) -> Outcome:
    """A Delta ADS stream subscribing to every cluster and to the secrets ``names``."""
    channel = plane.channel(tenant.certificate)
    call = RawCall(channel, DELTA_ADS, delta=True)
    node = make_node(id=tenant.node_id, cluster=cluster)
    try:
        await call.send(encode_delta_request(DeltaDiscoveryRequest(type_url=CLUSTER, node=node)))
        await call.send(
            encode_delta_request(
                DeltaDiscoveryRequest(type_url=SECRET, resource_names_subscribe=tuple(names))
            )
        )
        return await gather(call, done, 2.0, delta=True)
    finally:
        await channel.close()


async def fetch(
    plane: Plane, tenant: Tenant, cluster: str, names: list[str], done: Callable[[bytes], bool]
) -> Outcome:
    """One unary ``FetchSecrets`` call."""
    channel = plane.channel(tenant.certificate)
    request = DiscoveryRequest(
        type_url=SECRET,
        node=make_node(id=tenant.node_id, cluster=cluster),
        resource_names=names,
    )
    try:
        answer = await channel.unary_unary(FETCH_SECRETS)(encode_request(request), timeout=10)
    except grpc.aio.AioRpcError as exc:
        return Outcome([], Failure(exc.code(), exc.details() or ""))
    finally:
        await channel.close()
    assert isinstance(answer, bytes)
    return Outcome([answer], None)


WAYS = {"sds": sotw, "ads": ads, "delta": delta, "fetch": fetch}
BOTH = ["team-a/client", "team-b/client"]


def never(_: bytes) -> bool:
    return False


def raced_its_own_write(outcome: Outcome) -> bool:
    """grpcio's client wrote its second request as the server was refusing the stream, and
    reports its own failed write (INTERNAL "Internal error from Core") in place of the status
    the server sent: the attempt says nothing of the server and is made again."""
    failure = outcome.failure
    return (
        failure is not None
        and failure.code == grpc.StatusCode.INTERNAL
        and failure.details == "Internal error from Core"
    )


# -- the tests --------------------------------------------------------------------------------


@pytest.mark.parametrize("way", list(WAYS))
async def test_a_tenant_reads_its_own_secret_and_not_the_others(plane: Plane, way: str) -> None:
    tenant = plane.tenant("team-a")
    outcome = await WAYS[way](plane, tenant, "team-a", BOTH, lambda got: key_of("team-a") in got)
    assert outcome.failure is None, outcome.failure
    assert outcome.holds("team-a"), outcome
    assert not outcome.holds("team-b"), f"{way}: team-a read team-b's key"


@pytest.mark.parametrize("way", list(WAYS))
async def test_a_tenant_claiming_the_other_tenants_cluster_is_denied(
    plane: Plane, way: str
) -> None:
    tenant = plane.tenant("team-a")
    for _ in range(3):
        before = await plane.denied()
        outcome = await WAYS[way](plane, tenant, "team-b", BOTH, never)
        if not raced_its_own_write(outcome):
            break
    assert not outcome.holds("team-b"), f"{way}: team-a, claiming cluster team-b, read its key"
    assert not outcome.holds("team-a")
    assert outcome.failure is not None
    assert outcome.failure.code == grpc.StatusCode.PERMISSION_DENIED, outcome.failure
    assert "node cluster 'team-b' does not match the certificate" in outcome.failure.details
    # Streams and fetches alike are counted as refusals.
    assert await plane.denied() == before + 1


@pytest.mark.parametrize("way", list(WAYS))
async def test_a_certificate_no_scope_selects_gets_nothing(plane: Plane, way: str) -> None:
    stranger = plane.tenant("stranger")
    outcome = await WAYS[way](plane, stranger, "stranger", BOTH, never)
    assert not outcome.holds("team-a"), f"{way}: an unselected node read team-a's key"
    assert not outcome.holds("team-b"), f"{way}: an unselected node read team-b's key"
    assert b"team-a/api" not in outcome.received, f"{way}: an unselected node saw a cluster"
    # It is answered (the view serves it, empty), with no resource.
    assert outcome.failure is None, outcome.failure
    assert outcome.resources() == 0


async def client_status(plane: Plane, certificate: Issued, node_prefix: str = "") -> list[str]:
    """The node ids CSDS reports to the holder of ``certificate``."""
    channel = plane.channel(certificate)
    call = RawCall(channel, CSDS)
    matchers = [IdMatcher("prefix", node_prefix)] if node_prefix else []
    try:
        await call.send(encode_status_query(matchers))
        answer = await call.next(timeout=10)
    finally:
        await channel.close()
    assert isinstance(answer, bytes), answer
    return sorted(report.node.id for report in decode_status_response(answer))


@asynccontextmanager
async def connected(plane: Plane, tenant: Tenant) -> AsyncIterator[None]:
    """An ADS stream of ``tenant``'s own node, open (and answered) for the block."""
    channel = plane.channel(tenant.certificate)
    call = RawCall(channel, ADS)
    node = make_node(id=tenant.node_id, cluster=tenant.namespace)
    try:
        await call.send(encode_request(DiscoveryRequest(type_url=CLUSTER, node=node)))
        response = await call.recv(timeout=10)
        assert isinstance(response, discovery_pb2.DiscoveryResponse)
        yield
    finally:
        await channel.close()


async def test_csds_tells_a_tenant_about_its_own_node_and_the_operator_about_all(
    plane: Plane,
) -> None:
    team_a, team_b = plane.tenant("team-a"), plane.tenant("team-b")
    async with connected(plane, team_a), connected(plane, team_b):
        assert await client_status(plane, team_a.certificate) == ["edge.team-a"]
        assert await client_status(plane, team_b.certificate) == ["edge.team-b"]
        # Asking by another tenant's node id gets nothing, not even that it exists.
        assert await client_status(plane, team_a.certificate, "edge.team-b") == []
        assert await client_status(plane, plane.tenant("stranger").certificate) == []
        operator = plane.ca.client(OPERATOR)
        assert await client_status(plane, operator) == ["edge.team-a", "edge.team-b"]
        # The same through the command line, as an operator and as a tenant.
        assert await status_command(plane, operator) == ["edge.team-a", "edge.team-b"]
        assert await status_command(plane, team_a.certificate) == ["edge.team-a"]


async def status_command(plane: Plane, certificate: Issued) -> list[str]:
    """The node ids ``xdscore status`` lists, run with ``certificate``."""
    directory = plane.certs / f"status-{certificate.serial}"
    directory.mkdir()
    files = certificate.write(directory, "client")
    command = [
        sys.executable, "-m", "xdscore", "status", "--server", plane.target, "--format", "json",
        "--tls-ca", str(plane.certs / "ca.crt"),
        "--tls-cert", str(files.cert), "--tls-key", str(files.key),
    ]  # fmt: skip
    done = await anyio.run_process(command, check=False)
    assert done.returncode == 0, done.stderr
    return sorted(proxy["node"] for proxy in json.loads(done.stdout))


async def test_a_scopes_edit_selecting_an_unbound_field_is_refused(plane: Plane) -> None:
    """Edited while serving, scopes.yaml is checked as at start: refused, logged, and the
    scopes being served stay."""
    scopes = plane.config / "scopes.yaml"
    by_tier = SCOPES_BY_CLUSTER.replace("{cluster: team-b}", "{metadata: {tier: b}}")
    scopes.write_text(by_tier)
    try:
        await plane.served.logged("refused scopes.yaml; still serving the last good scopes")
        [line] = [line for line in plane.served.lines if "refused scopes.yaml" in line]
        assert "scope 'team-b' selects nodes by metadata.tier" in line
        # team-b's node is still in team-b's scope (by cluster), and sees its own key.
        tenant = plane.tenant("team-b")
        outcome = await sotw(plane, tenant, "team-b", BOTH, lambda got: key_of("team-b") in got)
        assert outcome.holds("team-b")
        assert not outcome.holds("team-a")
    finally:
        scopes.write_text(SCOPES_BY_CLUSTER)


async def test_scopes_selecting_a_field_the_binding_leaves_free_are_refused(
    ca_and_certs: tuple[CertificateAuthority, Path], tmp_path: Path
) -> None:
    """Only the node id bound, and scopes chosen by cluster: any tenant could claim any
    cluster, so serve refuses to start."""
    _ca, certs = ca_and_certs
    config = write_config(tmp_path)
    command = serve_command(config, certs, free_port(), free_port())
    with anyio.fail_after(30):
        result = await anyio.run_process(command, check=False)
    error = result.stderr.decode()
    assert result.returncode == 2, (result.returncode, error)
    assert not result.stdout, result.stdout
    assert "scope 'team-a' selects nodes by cluster" in error, error
    assert "--node-from-spiffe binds only the node id" in error, error
