"""Every resource set of ``tests/corpus`` served to a real Envoy, over SotW and over Delta:
Envoy accepts all of it (each type's ``update_success`` moved, no ``update_rejected``, every
listener active on its port), and traffic through it does what the set configures."""

from __future__ import annotations

import asyncio
import http.client
import json
import socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio.to_thread
import attrs
import pytest
from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.listener.v3 import listener_pb2

from xdscore import (
    CLUSTER,
    ENDPOINT,
    LISTENER,
    ROUTE,
    SECRET,
    SnapshotCache,
    XdsServer,
    same_for_all,
)
from xdscore.config import load_directory, read_directory
from xdscore.protocol import DeltaDiscoveryRequest, DiscoveryRequest
from xdscore.testing import Envoy, EnvoyError, HttpBackend, envoy_bootstrap, free_port
from xdscore.transport import Http2Transport

from ..corpus import SETS, placeholders, render
from ..tls_support import CertificateAuthority
from ._envoy_support import CallbackLog

pytestmark = [pytest.mark.anyio, pytest.mark.envoy, pytest.mark.timeout(60)]

Response = tuple[int, dict[str, str], str]


# -- peers ----------------------------------------------------------------------------------


def write_certificates(directory: Path) -> Path:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, as PEM files."""
    directory.mkdir()
    ca = CertificateAuthority("xdscore corpus CA")
    ca.write(directory)
    ca.server("127.0.0.1").write(directory, "server")
    ca.client("spiffe://corpus.test/front").write(directory, "client")
    return directory


class _Echo(asyncio.DatagramProtocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.DatagramTransport = transport  # type: ignore[assignment]

    def datagram_received(self, data: bytes, addr: tuple[str | Any, int]) -> None:
        self.transport.sendto(data, addr)


@asynccontextmanager
async def udp_echo(port: int) -> AsyncIterator[None]:
    transport, _ = await asyncio.get_running_loop().create_datagram_endpoint(
        _Echo, local_addr=("127.0.0.1", port)
    )
    try:
        yield
    finally:
        transport.close()


async def request(
    port: int,
    path: str = "/",
    *,
    method: str = "GET",
    headers: dict[str, str] | None = None,
    tls: ssl.SSLContext | None = None,
) -> Response:
    """One HTTP/1.1 request to 127.0.0.1; (status, lower-cased headers, body). Raises
    ``OSError`` (``ssl.SSLError`` included) when the connection fails."""

    def fetch() -> Response:
        if tls is None:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        else:
            connection = http.client.HTTPSConnection("127.0.0.1", port, timeout=5, context=tls)
        try:
            connection.request(method, path, headers=headers or {})
            response = connection.getresponse()
            body = response.read().decode(errors="replace")
            return response.status, {k.lower(): v for k, v in response.getheaders()}, body
        finally:
            connection.close()

    return await anyio.to_thread.run_sync(fetch)


def client_tls(certs: Path, *, client_cert: bool = False) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(certs / "ca.crt"))
    if client_cert:
        context.load_cert_chain(certs / "client.crt", certs / "client.key")
    return context


# -- one set, served ------------------------------------------------------------------------


@attrs.define
class Served:
    """A rendered set served to a running Envoy: its ports, backends and certificates."""

    envoy: Envoy
    ports: dict[str, int]
    backends: dict[str, HttpBackend]
    certs: Path

    async def stats(self) -> dict[str, int]:
        return await self.envoy.stats()

    async def until_ok(self, port_name: str, path: str = "/", *, body: str, **kw: Any) -> Response:
        """Wait until ``path`` answers 200 with ``body`` (Envoy may still be warming)."""
        seen: list[Response | OSError] = []

        async def ok() -> bool:
            try:
                result = await request(self.ports[port_name], path, **kw)
            except OSError as exc:
                seen.append(exc)
                return False
            seen.append(result)
            return result[0] == 200 and result[2] == body

        try:
            await self.envoy.wait_for(ok, timeout=10, what=f"{path} answering {body!r}")
        except EnvoyError as exc:
            raise AssertionError(f"{exc}\nlast answer: {seen[-1:]}") from None
        last = seen[-1]
        assert not isinstance(last, OSError)
        return last


def _values(name: str, certs: Path) -> Iterator[tuple[str, Any]]:
    for placeholder in sorted(placeholders(name)):
        yield placeholder, certs if placeholder == "CERTS" else free_port()


def expected_counters(directory: Path) -> set[str]:
    """The ``update_success`` counters each type served to Envoy must move."""
    found, problems = read_directory(directory)
    assert not problems
    counters: set[str] = set()
    for _, resource in found:
        if resource.type_url == LISTENER:
            counters.add("listener_manager.lds.update_success")
        elif resource.type_url == CLUSTER:
            counters.add("cluster_manager.cds.update_success")
            cluster = cluster_pb2.Cluster.FromString(resource.body)
            if cluster.type == cluster_pb2.Cluster.EDS:
                counters.add(f"cluster.{cluster.name}.update_success")
        elif resource.type_url == ROUTE:
            counters.add(f"rds.{resource.name}.update_success")  # under http.PREFIX.
        elif resource.type_url == SECRET:
            counters.add(f"sds.{resource.name}.update_success")
        else:
            assert resource.type_url == ENDPOINT, resource.type_url
    return counters


def listener_ports(directory: Path) -> dict[str, int]:
    """Each listener's name and port, as the set says."""
    found, _ = read_directory(directory)
    return {
        resource.name: listener_pb2.Listener.FromString(
            resource.body
        ).address.socket_address.port_value
        for _, resource in found
        if resource.type_url == LISTENER
    }


@asynccontextmanager
async def served(name: str, tmp_path: Path, delta: bool) -> AsyncIterator[Served]:
    certs = write_certificates(tmp_path / "certs")
    values = dict(_values(name, certs))
    directory = render(name, tmp_path / name, values)
    snapshot = load_directory(directory)  # the loader, and analyze: refused on any error
    counters = expected_counters(directory)
    listeners = listener_ports(directory)
    log = CallbackLog()
    cache = SnapshotCache(group=same_for_all)
    cache.set_snapshot(None, snapshot)
    async with AsyncExitStack() as stack:
        backends = {}
        for key, port in values.items():
            if key.startswith("BACKEND_") and key.endswith("_PORT"):
                label = key.removeprefix("BACKEND_").removesuffix("_PORT").lower()
                backends[label] = stack.enter_context(HttpBackend(label, port=port))
            elif key == "UDP_ECHO_PORT":
                await stack.enter_async_context(udp_echo(port))
        transport = await stack.enter_async_context(Http2Transport(XdsServer(cache, callbacks=log)))
        xds_port = await transport.start(port=free_port())
        envoy = await stack.enter_async_context(
            Envoy(envoy_bootstrap(xds_port=xds_port, delta=delta))
        )
        seen: dict[str, int] = {}

        async def accepted() -> bool:
            stats = await envoy.stats()
            seen.clear()
            seen.update(stats)
            rejected = {k: v for k, v in stats.items() if k.endswith("update_rejected") and v}
            assert not rejected, f"Envoy rejected {rejected}:\n{envoy.log[-3000:]}"
            moved = {
                counter
                for counter in counters
                if any(k.endswith(counter) and v >= 1 for k, v in stats.items())
            }
            return moved == counters and stats.get(
                "listener_manager.total_listeners_active"
            ) == len(listeners)

        await envoy.wait_for(accepted, timeout=15, what=f"Envoy accepting {sorted(counters)}")
        assert not log.nacks(), log.dump()
        kind = DeltaDiscoveryRequest if delta else DiscoveryRequest
        requests = log.select("request")
        assert requests
        assert all(isinstance(r, kind) for r in requests)
        statuses = json.loads(await envoy.admin("/listeners?format=json"))["listener_statuses"]
        active = {
            status["name"]: status["local_address"]["socket_address"]["port_value"]
            for status in statuses
        }
        assert active == listeners
        yield Served(envoy, {k: v for k, v in values.items() if k != "CERTS"}, backends, certs)


# -- what each set's traffic must do ----------------------------------------------------------

Check = Callable[[Served], Awaitable[None]]
CHECKS: dict[str, Check] = {}


def check(name: str) -> Callable[[Check], Check]:
    def register(function: Check) -> Check:
        CHECKS[name] = function
        return function

    return register


@check("http-filter-chain")
async def _filters(s: Served) -> None:
    _, headers, _ = await s.until_ok("LISTENER_PORT", body="a")
    assert headers["x-corpus-lua"] == "seen"  # lua
    assert headers["x-corpus-mutation"] == "on"  # header_mutation
    assert s.backends["authz"].requests >= 1  # ext_authz asked its service
    # fault: the abort the header asks for.
    faulted = await request(
        s.ports["LISTENER_PORT"], headers={"x-envoy-fault-abort-request": "418"}
    )
    assert faulted[0] == 418
    # cors: a preflight from the allowed origin is answered by Envoy.
    preflight = await request(
        s.ports["LISTENER_PORT"],
        method="OPTIONS",
        headers={"origin": "https://app.example", "access-control-request-method": "GET"},
    )
    assert preflight[0] == 200
    assert preflight[1]["access-control-allow-origin"] == "https://app.example"
    # local rate limit on /limited: one token, then 429.
    assert (await request(s.ports["LISTENER_PORT"], "/limited"))[0] == 200
    assert (await request(s.ports["LISTENER_PORT"], "/limited"))[0] == 429
    stats = await s.stats()
    assert stats["http.filters.ext_authz.ok"] >= 2


@check("weighted-clusters")
async def _weighted(s: Served) -> None:
    async def answering() -> bool:
        try:
            return (await request(s.ports["LISTENER_PORT"]))[0] == 200
        except OSError:
            return False

    await s.envoy.wait_for(answering, timeout=10, what="a 200 through the weighted route")
    bodies = [(await request(s.ports["LISTENER_PORT"]))[2] for _ in range(40)]
    # 50/50: fewer than 5 of 40 on one side has a chance of about 2e-7.
    assert bodies.count("blue") >= 5, bodies
    assert bodies.count("green") >= 5, bodies
    assert bodies.count("blue") + bodies.count("green") == 40, bodies
    stats = await s.stats()
    assert stats["cluster.green.health_check.success"] >= 1  # its active health check


@check("header-regex-match")
async def _matching(s: Served) -> None:
    await s.until_ok("LISTENER_PORT", "/items/42", body="first")
    port = s.ports["LISTENER_PORT"]
    assert (await request(port, "/items/4x2"))[::2] == (404, "no-match")
    assert (await request(port, "/x", headers={"x-variant": "b"}))[::2] == (200, "second")
    assert (await request(port, "/search?engine=secondary"))[::2] == (200, "second")
    assert (await request(port, "/x", headers={"user-agent": "corpus-client/1.2"}))[::2] == (
        200,
        "first",
    )
    assert (await request(port, "/", headers={"host": "api.corpus.test"}))[::2] == (
        200,
        "api-host",
    )


@check("retries")
async def _retries(s: Served) -> None:
    await s.until_ok("LISTENER_PORT", body="alive")
    results = [await request(s.ports["LISTENER_PORT"]) for _ in range(8)]
    assert [r[::2] for r in results] == [(200, "alive")] * 8
    stats = await s.stats()
    assert stats["cluster.flaky.upstream_rq_retry"] >= 1
    assert stats["cluster.flaky.upstream_cx_connect_fail"] >= 1


@check("mirror")
async def _mirror(s: Served) -> None:
    await s.until_ok("LISTENER_PORT", body="primary")
    for _ in range(4):
        assert (await request(s.ports["LISTENER_PORT"]))[2] == "primary"
    await s.envoy.wait_for(lambda: s.backends["shadow"].requests >= 5, what="5 mirrored")
    assert s.backends["primary"].requests == s.backends["shadow"].requests
    assert s.backends["never"].requests == 0


@check("tcp-proxy")
async def _tcp(s: Served) -> None:
    await s.until_ok("LISTENER_PORT", body="tcp")
    for _ in range(3):
        assert (await request(s.ports["LISTENER_PORT"]))[::2] == (200, "tcp")
    stats = await s.stats()
    assert stats["tcp.corpus_tcp.downstream_cx_total"] >= 4
    assert (
        stats["cluster.tcp_one.upstream_cx_total"] + stats["cluster.tcp_two.upstream_cx_total"] >= 4
    )


@check("udp-proxy")
async def _udp(s: Served) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(0.2)
        received: list[bytes] = []

        def exchange() -> bool:
            sock.sendto(b"corpus datagram", ("127.0.0.1", s.ports["UDP_LISTENER_PORT"]))
            try:
                received.append(sock.recv(100))
            except TimeoutError:
                return False
            return True

        await s.envoy.wait_for(lambda: anyio.to_thread.run_sync(exchange), what="the echo")
    assert received == [b"corpus datagram"]
    stats = await s.stats()
    assert stats["udp.corpus_udp.downstream_sess_total"] >= 1


@check("tls-files")
async def _tls_files(s: Served) -> None:
    _, headers, _ = await s.until_ok("HTTPS_PORT", body="secure", tls=client_tls(s.certs))
    assert headers["strict-transport-security"] == "max-age=60"
    with pytest.raises(OSError):  # no filter chain for plain text: the connection is closed
        await request(s.ports["HTTPS_PORT"])
    stats = await s.stats()
    assert stats[f"listener.127.0.0.1_{s.ports['HTTPS_PORT']}.ssl.handshake"] >= 1


@check("tls-sds")
async def _tls_sds(s: Served) -> None:
    await s.until_ok("FRONT_PORT", body="mtls")  # plain -> upstream mTLS -> downstream mTLS
    await s.until_ok("INNER_PORT", body="mtls", tls=client_tls(s.certs, client_cert=True))
    with pytest.raises(OSError):  # the inner listener requires a client certificate
        await request(s.ports["INNER_PORT"], tls=client_tls(s.certs))
    stats = await s.stats()
    assert stats["cluster.inner_tls.ssl.handshake"] >= 1


@check("tracing")
async def _tracing(s: Served) -> None:
    await s.until_ok("ZIPKIN_LISTENER_PORT", body="traced")
    await s.until_ok("OTEL_LISTENER_PORT", body="traced")
    stats = await s.stats()
    assert stats["http.traced_zipkin.tracing.random_sampling"] >= 1
    assert stats["http.traced_otel.tracing.random_sampling"] >= 1


@check("ratelimit-service")
async def _ratelimit(s: Served) -> None:
    await s.until_ok("LISTENER_PORT", body="limited", headers={"x-tenant": "t1"})
    stats = await s.stats()
    assert stats["cluster.limited_backend.ratelimit.error"] >= 1  # asked, and allowed


@check("routing-actions")
async def _actions(s: Served) -> None:
    _, headers, _ = await s.until_ok("LISTENER_PORT", body="actions")
    assert headers["x-route-config"] == "action_routes"
    port = s.ports["LISTENER_PORT"]
    status, headers, _ = await request(port, "/old/page")
    assert (status, headers["location"]) == (301, f"http://127.0.0.1:{port}/new/page")
    status, headers, _ = await request(port, "/secure")
    assert (status, headers["location"]) == (301, "https://127.0.0.1:8443/secure")
    assert (await request(port, "/hello"))[::2] == (200, "hello from the route")
    assert (await request(port, "/api/v1/things"))[::2] == (200, "actions")
    assert (await request(port, "/users/bob/profile"))[::2] == (200, "actions")


@check("relaxed-yaml")
async def _relaxed(s: Served) -> None:
    await s.until_ok("LISTENER_PORT", body="relaxed")


def test_every_set_has_a_traffic_check() -> None:
    assert sorted(CHECKS) == sorted(SETS)


@pytest.mark.parametrize("delta", [False, True], ids=["sotw", "delta"])
@pytest.mark.parametrize("name", SETS)
async def test_envoy_accepts_the_set(name: str, delta: bool, tmp_path: Path) -> None:
    async with served(name, tmp_path, delta) as s:
        await CHECKS[name](s)
