"""`xdscore serve DIR` as users run it: a subprocess, a real Envoy, live edits to the files."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import anyio.abc
import pytest

from xdscore.testing import Envoy, HttpBackend, envoy_bootstrap, free_port, http_get

pytestmark = [pytest.mark.anyio, pytest.mark.envoy, pytest.mark.timeout(90)]

DEMO = Path(__file__).parents[2] / "examples" / "demo-config"


def render(target: Path, ports: dict[str, int]) -> None:
    for source in sorted(DEMO.glob("*.yaml")):
        text = source.read_text()
        for name, port in ports.items():
            text = text.replace("{{" + name + "}}", str(port))
        (target / source.name).write_text(text)


@asynccontextmanager
async def serve(directory: Path, port: int) -> AsyncIterator[anyio.abc.Process]:
    command = [
        sys.executable, "-m", "xdscore", "serve", str(directory),
        "--listen", f"127.0.0.1:{port}", "--debounce-ms", "200",
    ]  # fmt: skip
    process = await anyio.open_process(command)
    try:
        assert process.stdout is not None
        with anyio.fail_after(30):
            banner = (await process.stdout.receive()).decode()
        assert f"on 127.0.0.1:{port}" in banner, banner
        yield process
    finally:
        process.terminate()
        with anyio.CancelScope(shield=True), anyio.move_on_after(10):
            await process.wait()
        if process.returncode is None:
            process.kill()
        await process.aclose()


async def body(port: int) -> str:
    try:
        return (await http_get("127.0.0.1", port))[2]
    except OSError:
        return ""


async def wait_for_body(port: int, expected: str, timeout: float = 20) -> None:
    with anyio.fail_after(timeout):
        while True:
            if await body(port) == expected:
                return
            await anyio.sleep(0.05)


async def test_serve_applies_edits_and_refuses_bad_ones(tmp_path: Path) -> None:
    with HttpBackend("A") as backend_a, HttpBackend("B") as backend_b:
        listener, xds = free_port(), free_port()
        render(
            tmp_path,
            {"LISTENER_PORT": listener, "BACKEND_A_PORT": backend_a.port,
             "BACKEND_B_PORT": backend_b.port},
        )  # fmt: skip
        async with serve(tmp_path, xds), Envoy(envoy_bootstrap(xds_port=xds)) as envoy:
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
            await anyio.sleep(1)
            after = (await envoy.stats())["http.ingress.rds.route_0.update_success"]
            assert after - before == 1

            # A dangling reference is refused; the last good snapshot keeps serving.
            routes.write_text(original.replace("backend_a", "no_such_cluster"))
            await anyio.sleep(1.5)
            assert await body(listener) == "B"
            # So is a file that does not parse.
            (tmp_path / "broken.yaml").write_text("@type: [unclosed\n")
            await anyio.sleep(1.5)
            assert await body(listener) == "B"

            # Fixing both applies the new state.
            (tmp_path / "broken.yaml").unlink()
            routes.write_text(original)
            await wait_for_body(listener, "A")


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
