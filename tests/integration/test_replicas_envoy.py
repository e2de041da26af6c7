"""Three `xdscore serve` replicas behind one real Envoy: losing the one it uses loses nothing.

Envoy's xDS cluster lists all three replicas; it holds one Delta ADS stream to one of them.
Under continuous HTTP load through Envoy, that replica is killed with SIGKILL. Envoy
reconnects to another replica presenting what it holds; the replicas agree on every version
(content hashes), so nothing is sent again: Envoy's update counters do not move and not one
request through it fails.
"""

from __future__ import annotations

import contextlib
import json
import signal
import sys
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import attrs
import pytest

from xdscore.testing import Envoy, HttpBackend, envoy_bootstrap, free_port, http_get

from ..factories import wait_until
from ._envoy_support import traffic_running
from .test_config_server import render

pytestmark = [pytest.mark.anyio, pytest.mark.envoy, pytest.mark.timeout(120)]


@attrs.define
class Replica:
    """One ``xdscore serve`` process, its xDS port and its admin port."""

    process: anyio.abc.Process
    port: int
    admin: int

    async def status(self) -> dict[str, Any] | None:
        try:
            code, _, body = await http_get("127.0.0.1", self.admin, "/status")
        except OSError:
            return None
        return json.loads(body) if code == 200 else None

    async def proxies(self) -> int:
        status = await self.status()
        return len(status["proxies"]) if status is not None else 0


@asynccontextmanager
async def replicas(sources: Sequence[Sequence[str]]) -> AsyncIterator[list[Replica]]:
    """A replica serving each of ``sources`` (a directory, or ``--etcd URL``), each ready."""
    started: list[Replica] = []
    try:
        for source in sources:
            port, admin = free_port(), free_port()
            command = [
                sys.executable, "-m", "xdscore", "serve", *source,
                "--listen", f"127.0.0.1:{port}", "--admin", f"127.0.0.1:{admin}",
            ]  # fmt: skip
            process = await anyio.open_process(command, stderr=None)
            started.append(Replica(process, port, admin))
        for replica in started:

            async def ready(replica: Replica = replica) -> bool:
                status = await replica.status()
                return status is not None and bool(status["ready"])

            await wait_until(ready, timeout=30, interval=0.1, what="a replica ready")
        yield started
    finally:
        for replica in started:
            with contextlib.suppress(ProcessLookupError):
                replica.process.terminate()
        with anyio.CancelScope(shield=True), anyio.move_on_after(10):
            for replica in started:
                await replica.process.wait()
        for replica in started:
            if replica.process.returncode is None:
                replica.process.kill()
            await replica.process.aclose()


def bootstrap_for(replicas: Sequence[Replica]) -> dict[str, Any]:
    """Envoy's bootstrap with every replica as a host of its (round robin) xDS cluster."""
    bootstrap = envoy_bootstrap(xds_port=replicas[0].port, delta=True)
    cluster = bootstrap["static_resources"]["clusters"][0]
    hosts = cluster["load_assignment"]["endpoints"][0]
    template = hosts["lb_endpoints"][0]
    hosts["lb_endpoints"] = []
    for replica in replicas:
        entry = json.loads(json.dumps(template))
        entry["endpoint"]["address"]["socket_address"]["port_value"] = replica.port
        hosts["lb_endpoints"].append(entry)
    return bootstrap


def update_counters(stats: dict[str, int]) -> dict[str, int]:
    """Every xDS update counter Envoy keeps (successes, rejections, empty updates)."""
    endings = (".update_success", ".update_rejected", ".update_empty")
    return {name: value for name, value in stats.items() if name.endswith(endings)}


async def connected(replicas: Sequence[Replica]) -> Replica:
    """The one replica Envoy holds a stream to (waits until there is exactly one)."""
    found: list[Replica] = []

    async def one() -> bool:
        found[:] = [r for r in replicas if await r.proxies() == 1]
        return len(found) == 1

    await wait_until(one, timeout=20, interval=0.1, what="Envoy on one replica")
    return found[0]


async def serving_through(envoy: Envoy, listener: int) -> None:
    async def answers() -> bool:
        try:
            return (await http_get("127.0.0.1", listener))[2] == "A"
        except OSError:
            return False

    await wait_until(answers, timeout=30, interval=0.05, what="traffic through Envoy")


@pytest.mark.parametrize("identical", [True, False], ids=["same-content", "control-differs"])
async def test_losing_the_replica_envoy_uses_resends_nothing_and_fails_no_request(
    tmp_path: Path, identical: bool
) -> None:
    """The negative control gives each replica a different connect timeout for one
    cluster: then the move must show in Envoy's counters, or the test could not fail."""
    with HttpBackend("A") as backend_a, HttpBackend("B") as backend_b:
        listener = free_port()
        ports = {"LISTENER_PORT": listener, "BACKEND_A_PORT": backend_a.port,
                 "BACKEND_B_PORT": backend_b.port}  # fmt: skip
        directories = []
        for index in range(3):
            directory = tmp_path / f"replica-{index}"
            directory.mkdir()
            render(directory, ports)
            if not identical:
                clusters = directory / "clusters.yaml"
                text = clusters.read_text()
                head, _, tail = text.rpartition("connect_timeout: 1s")
                clusters.write_text(f"{head}connect_timeout: {index + 2}s{tail}")
            directories.append([str(directory)])
        async with replicas(directories) as three, Envoy(bootstrap_for(three)) as envoy:
            await serving_through(envoy, listener)
            first = await connected(three)
            before = update_counters(await envoy.stats())
            assert before, "Envoy reports no update counters"
            async with traffic_running(listener, workers=2) as traffic:
                await traffic.flowing(20)
                first.process.send_signal(signal.SIGKILL)
                await first.process.wait()
                rest = [r for r in three if r is not first]
                second = await connected(rest)

                async def acked_everything() -> bool:
                    status = await second.status()
                    assert status is not None
                    types = status["proxies"][0]["types"]
                    return bool(types) and all(t["sync"] == "SYNCED" for t in types)

                await wait_until(acked_everything, timeout=20, what="SYNCED on the new one")
                killed_at = time.monotonic()
                await traffic.flowing(20, since=killed_at)
            assert traffic.failures() == [], traffic.failures()[:5]
            after = update_counters(await envoy.stats())
            if identical:
                assert after == before  # nothing was sent again: Envoy updated nothing
            else:
                changed = {k for k in after if after[k] != before.get(k)}
                assert "cluster_manager.cds.update_success" in changed, changed
