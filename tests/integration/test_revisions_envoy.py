"""Revisions against real Envoys: has a change reached every proxy?

``xdscore serve`` runs on a copy of the demo config with its admin endpoint; two real
Envoys take it, one over SotW ADS and one over Delta ADS. A good change: ``xdscore wait``
returns 0 once both hold it (their config dumps say so). A change Envoy must reject (a
listener on a port the test holds bound): ``xdscore wait`` exits 1 naming both Envoys, the
listener, the file and document it came from, and Envoy's message; the server's NACK line
names them too. The fix: 0 again. Then a proxy that stops answering: pending, then gone.
"""

from __future__ import annotations

import json
import signal
import socket
from pathlib import Path
from typing import Any

import anyio
import pytest

from xdscore.testing import Envoy, HttpBackend, envoy_bootstrap, free_port, http_get

from .test_observability_envoy import (
    BODY,
    body,
    eventually,
    render,
    serve,
    write_extra_listeners,
    write_listener,
    xdscore,
)

pytestmark = [pytest.mark.anyio, pytest.mark.envoy, pytest.mark.timeout(120)]

NODES = ("edge-sotw", "edge-delta")


async def admin_json(admin: int, path: str) -> Any:
    status, _, text = await http_get("127.0.0.1", admin, path)
    assert status == 200, text
    return json.loads(text)


async def listener_ports(envoy: Envoy) -> dict[str, int]:
    """The port of each dynamic listener Envoy has active, from its config dump."""
    host, port = envoy.admin_address.rsplit(":", 1)
    status, _, text = await http_get(host, int(port), "/config_dump?resource=dynamic_listeners")
    assert status == 200, text
    ports = {}
    for entry in json.loads(text).get("configs", ()):
        listener = (entry.get("active_state") or {}).get("listener")
        if listener is not None:
            ports[listener["name"]] = listener["address"]["socket_address"]["port_value"]
    return ports


async def test_wait_returns_when_every_envoy_holds_a_change_and_names_a_rejection(
    tmp_path: Path,
) -> None:
    config = tmp_path / "config"
    config.mkdir()
    log = tmp_path / "server.log"
    with HttpBackend(BODY) as backend, socket.create_server(("127.0.0.1", 0)) as held:
        first, second, good = free_port(), free_port(), free_port()
        blocked = int(held.getsockname()[1])
        xds, admin = free_port(), free_port()
        write_listener(config, first)
        render(config, "routes.yaml")
        render(config, "clusters.yaml")
        render(config, "endpoints.yaml", BACKEND_A_PORT=backend.port, BACKEND_B_PORT=backend.port)
        sotw = envoy_bootstrap(xds_port=xds, node_id=NODES[0])
        delta = envoy_bootstrap(xds_port=xds, node_id=NODES[1], delta=True)
        async with serve(config, xds, admin, log), Envoy(sotw) as one, Envoy(delta) as two:
            envoys = (one, two)
            wait = ("wait", "--admin", f"127.0.0.1:{admin}", "--directory", str(config))
            await eventually(lambda: body(first), lambda b: b == BODY, "traffic through Envoy")
            code, out, err = await eventually(
                lambda: xdscore(*wait, "--timeout", "20s"), lambda r: r[0] == 0, "both hold it"
            )
            page = await admin_json(admin, "/status")
            assert {p["node"] for p in page["proxies"]} == set(NODES)
            assert {p["revision"] for p in page["proxies"]} == {page["revision"]["id"]}

            # (1) A good change: wait returns once both Envoys hold it.
            write_listener(config, second)
            code, out, err = await xdscore(*wait, "--timeout", "20s")
            assert code == 0, out + err
            head = out.splitlines()[0]
            assert "every proxy holds it (2 changed by it)" in head, out
            assert "reload #1 of" in head, out
            for envoy in envoys:
                assert (await listener_ports(envoy))["listener_0"] == second
            revision = (await admin_json(admin, "/status"))["revision"]
            assert revision["converged"], revision
            assert revision["changed"] == 2, revision
            assert revision["convergence_seconds"]["max"] < 20, revision

            # (2) A change Envoy must reject: both NACK, wait says who, what, from where.
            write_extra_listeners(config, listener_good=good, listener_blocked=blocked)
            code, out, err = await xdscore(*wait, "--timeout", "20s")
            assert code == 1, out + err
            assert "NOT EVERY PROXY HOLDS IT" in out.splitlines()[0], out
            for node in NODES:
                (line,) = [x for x in out.splitlines() if x.startswith(f"NACKED   {node} ")]
                assert "rejected lds listener_blocked from extra.yaml (document 2)" in line, out
                assert f"cannot bind '127.0.0.1:{blocked}'" in line, out
                assert "(replica " in line, out
            logged = await eventually(
                lambda: _read(log), lambda t: "rejected=listener_blocked" in t, "the NACK line"
            )
            (nack_line,) = [
                x for x in logged.splitlines() if f"NACK node={NODES[0]}" in x and "rejected=" in x
            ]
            assert "rejected=listener_blocked (extra.yaml (document 2))" in nack_line

            # (3) The fix: both hold it again.
            write_extra_listeners(config, listener_good=good)
            code, out, err = await xdscore(*wait, "--timeout", "20s")
            assert code == 0, out + err
            for envoy in envoys:
                ports = await listener_ports(envoy)
                assert ports.get("listener_good") == good
                assert "listener_blocked" not in ports


async def test_wait_names_an_envoy_that_does_not_answer(tmp_path: Path) -> None:
    """An Envoy stopped (SIGSTOP) keeps its stream open and answers nothing: pending, and
    wait gives up after its timeout with exit 1, naming it; resumed, it catches up."""
    config = tmp_path / "config"
    config.mkdir()
    log = tmp_path / "server.log"
    with HttpBackend(BODY) as backend:
        first, second = free_port(), free_port()
        xds, admin = free_port(), free_port()
        write_listener(config, first)
        render(config, "routes.yaml")
        render(config, "clusters.yaml")
        render(config, "endpoints.yaml", BACKEND_A_PORT=backend.port, BACKEND_B_PORT=backend.port)
        bootstrap = envoy_bootstrap(xds_port=xds, node_id=NODES[0])
        async with serve(config, xds, admin, log), Envoy(bootstrap) as envoy:
            wait = ("wait", "--admin", f"127.0.0.1:{admin}", "--directory", str(config))
            await eventually(lambda: body(first), lambda b: b == BODY, "traffic through Envoy")
            await eventually(lambda: xdscore(*wait), lambda r: r[0] == 0, "Envoy holds it")
            envoy.send_signal(signal.SIGSTOP)
            try:
                write_listener(config, second)
                code, out, err = await xdscore(*wait, "--timeout", "2s")
                assert code == 1, out + err
                (line,) = [x for x in out.splitlines() if x.startswith("PENDING")]
                assert f"PENDING  {NODES[0]} (replica " in line, out
                assert "has not answered (lds STALE)" in line, out
            finally:
                envoy.send_signal(signal.SIGCONT)
            code, out, err = await xdscore(*wait, "--timeout", "20s")
            assert code == 0, out + err


async def _read(path: Path) -> str:
    return await anyio.Path(path).read_text()
