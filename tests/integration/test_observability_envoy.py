"""Observability against a real Envoy: a NACK seen by every window onto the control plane.

``xdscore serve`` runs as a subprocess with its admin endpoint on the demo config (a
listener, its routes, two EDS clusters, here both reaching one local backend); a real Envoy
takes it over ADS (State of the World). The test then points the listener at a port it
holds bound itself, so that Envoy rejects it, and checks that the rejection shows in
``/status``, ``xdscore status``, CSDS asked with grpcio, the Prometheus metrics, the server's
log and ``xdscore diff``; then it fixes the listener and checks that everything says SYNCED
again and ``xdscore diff`` finds nothing.
"""

from __future__ import annotations

import json
import signal
import socket
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import anyio
import anyio.abc
import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families

from xdscore import LISTENER
from xdscore.testing import Envoy, HttpBackend, envoy_bootstrap, free_port, http_get
from xdscore.wire._csds import ClientReport, IdMatcher, decode_status_response, encode_status_query

pytestmark = [pytest.mark.anyio, pytest.mark.envoy, pytest.mark.timeout(90)]

T = TypeVar("T")

NODE = "observed-proxy"
BODY = "observed backend"
FETCH = "/envoy.service.status.v3.ClientStatusDiscoveryService/FetchClientStatus"

DEMO = Path(__file__).parents[2] / "examples" / "demo-config"
DEMO_PORTS = {"LISTENER_PORT": 10000, "BACKEND_A_PORT": 8081, "BACKEND_B_PORT": 8082}
"""The ports written in examples/demo-config, which a copy replaces."""


def render(directory: Path, name: str, **ports: int) -> None:
    """Write the demo config's ``name`` into ``directory`` with these ports."""
    text = (DEMO / name).read_text()
    for placeholder, port in ports.items():
        text = text.replace(f"port_value: {DEMO_PORTS[placeholder]}}}", f"port_value: {port}}}")
    (directory / name).write_text(text)


def write_listener(directory: Path, port: int) -> None:
    render(directory, "listeners.yaml", LISTENER_PORT=port)


@asynccontextmanager
async def serve(
    directory: Path, xds: int, admin: int, log: Path
) -> AsyncIterator[anyio.abc.Process]:
    """``xdscore serve`` with an admin endpoint, once it has printed both its lines."""
    command = [
        sys.executable, "-m", "xdscore", "serve", str(directory),
        "--listen", f"127.0.0.1:{xds}", "--admin", f"127.0.0.1:{admin}", "--debounce-ms", "100",
    ]  # fmt: skip
    with log.open("wb") as stderr:
        process = await anyio.open_process(command, stderr=stderr)
    try:
        assert process.stdout is not None
        seen = ""
        with anyio.fail_after(30):
            while "serving" not in seen or "admin endpoint" not in seen:
                try:
                    seen += (await process.stdout.receive()).decode()
                except anyio.EndOfStream:
                    logged = await anyio.Path(log).read_text()
                    pytest.fail(f"xdscore serve exited:\n{seen}\n{logged}")
        assert f"on 127.0.0.1:{xds}" in seen, seen
        assert f"http://127.0.0.1:{admin}/" in seen, seen
        yield process
    finally:
        if process.returncode is None:
            process.kill()
        with anyio.CancelScope(shield=True):
            await process.wait()
            await process.aclose()


async def eventually(
    probe: Callable[[], Awaitable[T]], accept: Callable[[T], bool], what: str, timeout: float = 20
) -> T:
    """Poll ``probe`` until ``accept`` takes its value; fail with the last value seen."""
    last: list[T] = []
    try:
        with anyio.fail_after(timeout):
            while True:
                last[:] = [await probe()]
                if accept(last[0]):
                    return last[0]
                await anyio.sleep(0.1)
    except TimeoutError:
        pytest.fail(f"timed out after {timeout}s waiting for {what}; last seen:\n{last}")


async def body(port: int) -> str:
    try:
        status, _, text = await http_get("127.0.0.1", port)
    except OSError:
        return ""
    return text if status == 200 else ""


async def proxy_types(admin: int) -> dict[str, dict[str, Any]]:
    """This node's types in the admin endpoint's ``/status``, by short name."""
    status, _, text = await http_get("127.0.0.1", admin, "/status")
    assert status == 200, text
    for proxy in json.loads(text)["proxies"]:
        if proxy["node"] == NODE:
            return {t["type"]: t for t in proxy["types"]}
    return {}


def all_synced(types: dict[str, dict[str, Any]]) -> bool:
    return set(types) >= {"lds", "rds", "cds", "eds"} and all(
        t["sync"] == "SYNCED" for t in types.values()
    )


async def xdscore(*args: str) -> tuple[int, str, str]:
    """Run the command line; (exit status, stdout, stderr)."""
    result = await anyio.run_process([sys.executable, "-m", "xdscore", *args], check=False)
    return result.returncode, result.stdout.decode(), result.stderr.decode()


async def csds_over_grpcio(xds: int) -> list[ClientReport]:
    """FetchClientStatus for this node, asked with grpcio (raw bytes both ways)."""
    async with grpc.aio.insecure_channel(f"127.0.0.1:{xds}") as channel:
        fetch = channel.unary_unary(FETCH)
        data = await fetch(encode_status_query([IdMatcher("exact", NODE)]), timeout=5)
    return decode_status_response(data)


async def lds_nacks(admin: int) -> float:
    status, _, text = await http_get("127.0.0.1", admin, "/metrics")
    assert status == 200, text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "xdscore_nacks_total" and sample.labels.get("type") == "lds":
                return float(sample.value)
    return 0.0


async def test_a_rejected_listener_is_seen_everywhere_then_synced(tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.mkdir()
    log = tmp_path / "server.log"
    with HttpBackend(BODY) as backend, socket.create_server(("127.0.0.1", 0)) as held:
        first, blocked, fixed = free_port(), int(held.getsockname()[1]), free_port()
        xds, admin = free_port(), free_port()
        write_listener(config, first)
        render(config, "routes.yaml")
        render(config, "clusters.yaml")
        # Both of the demo's clusters reach the one backend.
        render(config, "endpoints.yaml", BACKEND_A_PORT=backend.port, BACKEND_B_PORT=backend.port)
        bootstrap = envoy_bootstrap(xds_port=xds, node_id=NODE)
        async with serve(config, xds, admin, log) as server, Envoy(bootstrap) as envoy:
            server_args = ("--server", f"127.0.0.1:{xds}")
            diff_args = ("diff", *server_args, "--envoy-admin", envoy.admin_address)
            diff_args += ("--admin", f"127.0.0.1:{admin}")  # to name each resource's source

            # (1) Envoy converges and serves traffic through the listener.
            await eventually(lambda: body(first), lambda b: b == BODY, "traffic through Envoy")
            synced = await eventually(lambda: proxy_types(admin), all_synced, "SYNCED")
            first_lds = synced["lds"]["acked"]["version"]

            # (2) The listener moves to a port the test holds: Envoy cannot bind it.
            write_listener(config, blocked)
            types = await eventually(
                lambda: proxy_types(admin),
                lambda t: "lds" in t and t["lds"]["sync"] == "NACKED",
                "the LDS NACK in /status",
            )
            nack = types["lds"]["last_nack"]
            assert f"cannot bind '127.0.0.1:{blocked}'" in nack["message"], nack
            assert "Address already in use" in nack["message"], nack
            assert nack["version"] == types["lds"]["cache_version"] != first_lds

            _, out, _ = await eventually(
                lambda: xdscore("status", *server_args, "--format", "json"),
                lambda r: r[0] == 0 and '"NACKED"' in r[1],
                "xdscore status to say NACKED",
            )
            (proxy,) = [p for p in json.loads(out) if p["node"] == NODE]
            assert proxy["types"][LISTENER]["state"] == "NACKED"
            assert "Address already in use" in proxy["types"][LISTENER]["error"]

            reports = await eventually(
                lambda: csds_over_grpcio(xds),
                lambda r: any(x.client_status == "NACKED" for c in r for x in c.resources),
                "CSDS over grpcio to report the NACK",
            )
            (client,) = reports
            assert client.node.id == NODE
            (listener,) = [r for r in client.resources if r.type_url == LISTENER]
            assert (listener.name, listener.config_status, listener.client_status) == (
                "listener_0",
                "ERROR",
                "NACKED",
            )
            assert "Address already in use" in listener.error
            assert listener.error_version == nack["version"]

            assert await eventually(lambda: lds_nacks(admin), lambda n: n >= 1, "the NACK metric")

            line = await eventually(
                lambda: anyio.Path(log).read_text(),
                lambda text: f"NACK node={NODE} type=lds" in text,
                "the NACK in the server's log",
            )
            (logged,) = [x for x in line.splitlines() if f"NACK node={NODE} type=lds" in x]
            assert "Address already in use" in logged

            _, out, err = await eventually(
                lambda: xdscore(*diff_args), lambda r: r[0] == 1, "xdscore diff to differ"
            )
            assert not err, err
            assert "NOT IN SYNC" in out.splitlines()[0], out
            (row,) = [x for x in out.splitlines() if x.split()[1:3] == ["lds", "listener_0"]]
            assert row.startswith("ERROR"), out
            assert out.splitlines()[out.splitlines().index(row) + 1] == (
                "    source: listeners.yaml (document 1)"
            ), out
            assert f"Envoy's error: cannot bind '127.0.0.1:{blocked}'" in out, out
            assert f"address.socket_address.port_value: {first} != {blocked}" in out, out

            # (3) Fixed: every type SYNCED at what the cache holds, and diff finds nothing.
            write_listener(config, fixed)
            types = await eventually(
                lambda: proxy_types(admin),
                lambda t: all_synced(t) and t["lds"]["acked"]["version"] != first_lds,
                "SYNCED after the fix",
            )
            for entry in types.values():
                assert entry["cache_version"] == entry["acked"]["version"], entry
            assert types["lds"]["acked"]["version"] not in (first_lds, nack["version"])
            await eventually(lambda: body(fixed), lambda b: b == BODY, "traffic on the new port")
            _, out, _ = await eventually(
                lambda: xdscore(*diff_args), lambda r: r[0] == 0, "xdscore diff in sync"
            )
            assert out.splitlines()[0] == f"node {NODE} (State of the World): in sync: 6 matching"

            server.send_signal(signal.SIGTERM)
            with anyio.fail_after(10):
                assert await server.wait() == 0


def write_extra_listeners(directory: Path, **ports: int) -> None:
    """``extra.yaml``: one more listener per keyword, named by it, on that port."""
    template = (DEMO / "listeners.yaml").read_text()
    documents = [
        template.replace("name: listener_0", f"name: {name}").replace(
            "port_value: 10000}", f"port_value: {port}}}"
        )
        for name, port in ports.items()
    ]
    (directory / "extra.yaml").write_text("---\n".join(documents))


@pytest.mark.parametrize("delta", [False, True], ids=["sotw", "delta"])
async def test_diff_is_clean_after_a_rejected_listener_is_removed(
    tmp_path: Path, delta: bool
) -> None:
    """The incident of issue 33: a change adds two listeners, one of them on a port Envoy
    cannot bind; Envoy applies the other and NACKs. The operator removes the bad one; Envoy
    ACKs, and as nothing it holds changes, its dump keeps the labels of the rejected
    response. The content is the control plane's: ``diff`` is clean and says that only the
    labels differ."""
    config = tmp_path / "config"
    config.mkdir()
    log = tmp_path / "server.log"
    with HttpBackend(BODY) as backend, socket.create_server(("127.0.0.1", 0)) as held:
        first, good, blocked = free_port(), free_port(), int(held.getsockname()[1])
        xds, admin = free_port(), free_port()
        write_listener(config, first)
        render(config, "routes.yaml")
        render(config, "clusters.yaml")
        render(config, "endpoints.yaml", BACKEND_A_PORT=backend.port, BACKEND_B_PORT=backend.port)
        bootstrap = envoy_bootstrap(xds_port=xds, node_id=NODE, delta=delta)
        async with serve(config, xds, admin, log), Envoy(bootstrap) as envoy:
            diff_args = ("diff", "--server", f"127.0.0.1:{xds}", "--envoy-admin")
            diff_args += (envoy.admin_address,)
            await eventually(lambda: body(first), lambda b: b == BODY, "traffic through Envoy")
            await eventually(lambda: proxy_types(admin), all_synced, "SYNCED")

            write_extra_listeners(config, listener_good=good, listener_blocked=blocked)
            await eventually(
                lambda: proxy_types(admin),
                lambda t: "lds" in t and t["lds"]["sync"] == "NACKED",
                "the LDS NACK in /status",
            )
            await eventually(lambda: body(good), lambda b: b == BODY, "the good listener")
            write_extra_listeners(config, listener_good=good)
            await eventually(
                lambda: proxy_types(admin),
                lambda t: all_synced(t) and t["lds"]["acks"] >= 2,
                "SYNCED after the fix",
            )
            code, out, err = await eventually(
                lambda: xdscore(*diff_args), lambda r: r[0] != 2, "xdscore diff"
            )
            assert not err, err
            protocol = "Delta" if delta else "State of the World"
            head, *rows = out.splitlines()
            assert head.startswith(f"node {NODE} ({protocol}): in sync: 7 matching"), out
            assert code == 0, out
            if delta:
                # Envoy applied the good listener of the response it rejected; the control
                # plane still reports that NACK for it, and diff says Envoy holds it.
                (row,) = [x for x in rows if x.split()[1:3] == ["lds", "listener_good"]]
                assert row.startswith("MATCH"), out
                assert "(ERROR/NACKED)" in row, out
                assert "yet Envoy holds it as intended" in out, out
            else:
                # Envoy applied the good listener from the rejected response, then had
                # nothing to change: its LDS label is the rejected response's.
                assert "(2 under other version labels, the same content)" in head, out
                for name in ("listener_0", "listener_good"):
                    (row,) = [x for x in rows if x.split()[1:3] == ["lds", name]]
                    note = rows[rows.index(row) + 1]
                    assert "the same content under other version labels: LDS version" in note
