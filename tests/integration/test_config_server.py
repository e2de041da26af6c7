"""`xdscore serve DIR` as users run it: a subprocess, a real Envoy, live edits to the files."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import anyio.abc
import attrs
import pytest

from xdscore.testing import Envoy, HttpBackend, envoy_bootstrap, free_port, http_get

from ..factories import wait_until

pytestmark = [pytest.mark.anyio, pytest.mark.envoy, pytest.mark.timeout(90)]

DEMO = Path(__file__).parents[2] / "examples" / "demo-config"
DEMO_PORTS = {"LISTENER_PORT": 10000, "BACKEND_A_PORT": 8081, "BACKEND_B_PORT": 8082}
"""The ports written in examples/demo-config, which a copy replaces."""
APPLIED = "xdscore.config: applied"
REFUSED = "xdscore.config: refused"


def render(target: Path, ports: dict[str, int]) -> None:
    for source in sorted(DEMO.glob("*.yaml")):
        text = source.read_text()
        for name, port in ports.items():
            text = text.replace(f"port_value: {DEMO_PORTS[name]}}}", f"port_value: {port}}}")
        (target / source.name).write_text(text)


@attrs.define
class Served:
    """The ``xdscore serve`` process and the lines it logged so far (its stderr)."""

    process: anyio.abc.Process
    lines: list[str] = attrs.field(factory=list)
    _logged: asyncio.Event = attrs.field(factory=asyncio.Event)

    async def read_log(self) -> None:
        assert self.process.stderr is not None
        buffered = b""
        async for chunk in self.process.stderr:
            buffered += chunk
            *complete, buffered = buffered.split(b"\n")
            self.lines.extend(line.decode(errors="replace") for line in complete)
            self._logged.set()

    def count(self, text: str) -> int:
        return sum(text in line for line in self.lines)

    async def logged(self, text: str, count: int = 1, timeout: float = 20) -> None:
        """Wait until ``count`` lines holding ``text`` were logged."""
        with anyio.fail_after(timeout):
            while self.count(text) < count:
                self._logged.clear()
                await self._logged.wait()


@asynccontextmanager
async def serve(directory: Path, port: int) -> AsyncIterator[Served]:
    command = [
        sys.executable, "-m", "xdscore", "--log-level", "info", "serve", str(directory),
        "--listen", f"127.0.0.1:{port}", "--debounce-ms", "200",
    ]  # fmt: skip
    process = await anyio.open_process(command)
    served = Served(process)
    reader = asyncio.create_task(served.read_log())
    try:
        assert process.stdout is not None
        with anyio.fail_after(30):
            banner = (await process.stdout.receive()).decode()
        assert f"on 127.0.0.1:{port}" in banner, banner
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


async def body(port: int) -> str:
    try:
        return (await http_get("127.0.0.1", port))[2]
    except OSError:
        return ""


async def wait_for_body(port: int, expected: str, timeout: float = 20) -> None:
    async def answers() -> bool:
        return await body(port) == expected

    await wait_until(answers, timeout=timeout, interval=0.05, what=f"the body {expected!r}")


async def test_serve_applies_edits_and_refuses_bad_ones(tmp_path: Path) -> None:
    with HttpBackend("A") as backend_a, HttpBackend("B") as backend_b:
        listener, xds = free_port(), free_port()
        render(
            tmp_path,
            {"LISTENER_PORT": listener, "BACKEND_A_PORT": backend_a.port,
             "BACKEND_B_PORT": backend_b.port},
        )  # fmt: skip
        async with serve(tmp_path, xds) as served, Envoy(envoy_bootstrap(xds_port=xds)) as envoy:
            await wait_for_body(listener, "A")
            routes = tmp_path / "routes.yaml"

            # A burst of edits becomes one snapshot: Envoy sees one route update, at the end.
            before = (await envoy.stats())["http.ingress.rds.route_0.update_success"]
            original = routes.read_text()
            for _ in range(3):
                routes.write_text(original.replace("backend_a", "backend_b"))
                routes.write_text(original)
            routes.write_text(original.replace("backend_a", "backend_b"))
            await wait_for_body(listener, "B")

            # A dangling reference is refused; the last good snapshot keeps serving. (The
            # server handles the changes to the directory in order, so once it logged this
            # refusal it has applied whatever the burst made: one snapshot.)
            routes.write_text(original.replace("backend_a", "no_such_cluster"))
            await served.logged(REFUSED)
            assert served.count(APPLIED) == 1, served.lines
            after = (await envoy.stats())["http.ingress.rds.route_0.update_success"]
            assert after - before == 1
            assert await body(listener) == "B"
            # So is a file that does not parse.
            (tmp_path / "broken.yaml").write_text("@type: [unclosed\n")
            await served.logged(REFUSED, count=2)
            assert await body(listener) == "B"

            # Fixing both applies the new state.
            (tmp_path / "broken.yaml").unlink()
            routes.write_text(original)
            await wait_for_body(listener, "A")
            assert served.count(APPLIED) == 2, served.lines


async def test_serve_refuses_to_start_on_an_invalid_directory(tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text(
        '"@type": type.googleapis.com/envoy.config.route.v3.RouteConfiguration\n'
        "name: r\nvirtual_hosts: [{name: v, domains: ['*'], routes: "
        "[{match: {prefix: /}, route: {cluster: missing}}]}]\n"
    )
    command = [sys.executable, "-m", "xdscore", "serve", str(tmp_path), "--listen", "127.0.0.1:0"]
    result = await anyio.run_process(command, check=False)
    assert result.returncode == 1
    assert b"missing" in result.stderr
    assert b"cannot serve" in result.stderr


RELAXED_LDS = """\
resources:
- "@type": type.googleapis.com/envoy.config.listener.v3.Listener
  name: listener_0
  address: {socket_address: {address: 127.0.0.1, port_value: LISTENER}}
  filter_chains:
  - filters:
      name: envoy.filters.network.http_connection_manager
      typed_config:
        "@type": HCM
        stat_prefix: ingress_http
        codec_type: auto
        http_filters:
          name: envoy.filters.http.router
          typed_config:
            "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
        route_config:
          name: local_route
          virtual_hosts:
            name: local_service
            domains: "*"
            routes:
              match: {prefix: "/"}
              route: {cluster: example_proxy_cluster}
""".replace(
    "HCM",
    "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3."
    "HttpConnectionManager",
)
RELAXED_CDS = """\
!ignore defaults: &timeout 0.25s
"@type": type.googleapis.com/envoy.config.cluster.v3.Cluster
name: example_proxy_cluster
type: strict_dns
lb_policy: round_robin
connect_timeout: *timeout
respect_dns_ttl: "yes"
load_assignment:
  cluster_name: example_proxy_cluster
  endpoints:
    lb_endpoints:
      endpoint: {address: {socket_address: {address: 127.0.0.1, port_value: BACKEND}}}
"""


@pytest.mark.parametrize("delta", [False, True], ids=["sotw", "delta"])
async def test_envoy_accepts_what_the_relaxed_yaml_forms_serve(tmp_path: Path, delta: bool) -> None:
    # Lower-case enums, single mappings for repeated fields, !ignore anchors, a quoted bool:
    # Envoy's own YAML loading reads them, so does serve, and Envoy accepts the result.
    with HttpBackend("relaxed") as backend:
        listener, xds = free_port(), free_port()
        (tmp_path / "lds.yaml").write_text(RELAXED_LDS.replace("LISTENER", str(listener)))
        (tmp_path / "cds.yaml").write_text(RELAXED_CDS.replace("BACKEND", str(backend.port)))
        bootstrap = envoy_bootstrap(xds_port=xds, delta=delta)
        async with serve(tmp_path, xds), Envoy(bootstrap) as envoy:
            await wait_for_body(listener, "relaxed")
            stats = await envoy.stats()
            assert stats["listener_manager.lds.update_success"] >= 1
            assert stats["cluster_manager.cds.update_success"] >= 1
            assert not {k: v for k, v in stats.items() if k.endswith("update_rejected") and v}
