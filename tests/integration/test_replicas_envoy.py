"""Three `xdscore serve --etcd` replicas of one etcd prefix, behind one real Envoy.

* Losing the replica Envoy uses loses nothing: Envoy's xDS cluster lists all three; it holds
  one Delta ADS stream to one of them. Under continuous HTTP load through Envoy, that replica
  is killed with SIGKILL; Envoy reconnects to another presenting what it holds; the replicas
  agree on every version (content hashes), so nothing is sent again (Envoy's update counters
  do not move) and not one request through Envoy fails.
* Every replica follows every apply: within 1 s, with identical versions; each refuses a
  revision with a dangling reference and keeps the one before; etcd stopped and restarted,
  and a compaction past a cut-off replica's watch revision, leave them serving the last good
  revision and then catching up.
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

from xdscore import Resource, make_resource
from xdscore.builders import eds_cluster, http_listener, load_assignment, route_configuration
from xdscore.etcd import apply_state, connect
from xdscore.testing import Envoy, HttpBackend, envoy_bootstrap, free_port, http_get
from xdscore.wire import type_info

from ..etcd_support import Cut, EtcdServer, running_etcd
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
    """A replica serving each of ``sources`` (``--etcd URL --prefix P``), each ready."""
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


async def apply_cli(directory: Path, url: str, prefix: str) -> str:
    """``xdscore apply DIR --etcd URL --prefix P``, as a user runs it; what it printed."""
    command = [sys.executable, "-m", "xdscore", "apply", str(directory), "--etcd", url,
               "--prefix", prefix]  # fmt: skip
    result = await anyio.run_process(command, check=False)
    output = result.stdout.decode() + result.stderr.decode()
    assert result.returncode == 0, output
    return output


@pytest.fixture
async def etcd(tmp_path: Path) -> AsyncIterator[EtcdServer]:
    async with running_etcd(tmp_path / "etcd") as server:
        yield server


@pytest.mark.parametrize("identical", [True, False], ids=["same-content", "control-differs"])
async def test_losing_the_replica_envoy_uses_resends_nothing_and_fails_no_request(
    tmp_path: Path, etcd: EtcdServer, identical: bool
) -> None:
    """All three replicas serve one prefix, written by ``xdscore apply``. The negative
    control gives each replica a prefix of its own, with a different connect timeout for
    one cluster: then the move must show in Envoy's counters, or the test could not fail."""
    with HttpBackend("A") as backend_a, HttpBackend("B") as backend_b:
        listener = free_port()
        ports = {"LISTENER_PORT": listener, "BACKEND_A_PORT": backend_a.port,
                 "BACKEND_B_PORT": backend_b.port}  # fmt: skip
        sources = []
        for index in range(1 if identical else 3):
            directory = tmp_path / f"config-{index}"
            directory.mkdir()
            render(directory, ports)
            if not identical:
                clusters = directory / "clusters.yaml"
                text = clusters.read_text()
                head, _, tail = text.rpartition("connect_timeout: 1s")
                clusters.write_text(f"{head}connect_timeout: {index + 2}s{tail}")
            await apply_cli(directory, etcd.url, f"/mesh-{index}")
            sources.append(["--etcd", etcd.url, "--prefix", f"/mesh-{index}"])
        if identical:
            sources *= 3
        async with replicas(sources) as three, Envoy(bootstrap_for(three)) as envoy:
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


def state(cluster_timeout: float = 1.0, routes_to: str = "a") -> list[Resource]:
    return [
        make_resource(http_listener("l", 10000, "r")),
        make_resource(route_configuration("r", [("/", routes_to)])),
        make_resource(eds_cluster("a", connect_timeout=cluster_timeout)),
        make_resource(load_assignment("a", [("10.0.0.1", 80)])),
    ]


async def dumps(replicas: Sequence[Replica]) -> list[dict[str, str]]:
    """What each replica would send node ``envoy`` now: version by type and name."""
    found = []
    for replica in replicas:
        code, _, body = await http_get("127.0.0.1", replica.admin, "/config_dump?node=envoy")
        assert code == 200, body
        found.append(
            {
                f"{t['type']}/{r['name']}": r["version"]
                for t in json.loads(body)["types"]
                for r in t["resources"]
            }
        )
    return found


def versions_of(resources: Sequence[Resource]) -> dict[str, str]:
    return {f"{type_info(r.type_url).short_name}/{r.name}": r.version for r in resources}


async def all_serve(
    replicas: Sequence[Replica], expected: Sequence[Resource], timeout: float
) -> None:
    wanted = versions_of(expected)

    async def serving() -> bool:
        return all(dump == wanted for dump in await dumps(replicas))

    await wait_until(serving, timeout=timeout, interval=0.02, what="every replica on the apply")


async def refused(replica: Replica) -> float:
    code, _, body = await http_get("127.0.0.1", replica.admin, "/metrics")
    assert code == 200
    for line in body.splitlines():
        if line.startswith('xdscore_etcd_revisions_total{outcome="refused"}'):
            return float(line.split()[-1])
    return 0.0


async def test_every_replica_follows_refuses_and_outlives_etcd(
    tmp_path: Path, etcd: EtcdServer
) -> None:
    relay = Cut(etcd.client_port)
    async with anyio.create_task_group() as group:
        await group.start(relay.run)
        cut_off = f"http://127.0.0.1:{relay.port}"
        client = connect(etcd.url)
        try:
            first = state()
            await apply_state(client, first, prefix="/mesh")
            sources = [
                ["--etcd", url, "--prefix", "/mesh"] for url in (etcd.url, etcd.url, cut_off)
            ]
            async with replicas(sources) as three:
                await all_serve(three, first, timeout=10)

                # An apply reaches every replica, with identical versions, within 1 s.
                second = state(2.0)
                await apply_state(client, second, prefix="/mesh")
                applied = time.monotonic()
                await all_serve(three, second, timeout=5)
                reached = time.monotonic() - applied
                print(f"an apply reached all three replicas in {reached:.3f} s")
                assert reached < 1.0

                # A dangling reference: every replica refuses it and keeps the one before.
                await apply_state(client, state(2.0, "nowhere"), prefix="/mesh", check=False)

                async def all_refused() -> bool:
                    return all([await refused(r) == 1 for r in three])

                await wait_until(all_refused, timeout=5, what="every replica refusing")
                assert await dumps(three) == [versions_of(second)] * 3

                # etcd stopped: every replica keeps serving, and catches up once it is back.
                await etcd.stop()
                assert await dumps(three) == [versions_of(second)] * 3
                for replica in three:
                    assert (await http_get("127.0.0.1", replica.admin, "/readyz"))[0] == 200
                await etcd.restart()
                third = state(3.0)
                await apply_state(client, third, prefix="/mesh")
                await all_serve(three, third, timeout=15)

                # A compaction past the watch revision of a replica cut off from etcd.
                await relay.cut()
                await apply_state(client, state(4.0), prefix="/mesh")
                fifth = state(5.0)
                last = await apply_state(client, fifth, prefix="/mesh")
                await all_serve(three[:2], fifth, timeout=5)
                assert (await dumps(three[2:])) == [versions_of(third)]  # still the last it had
                await etcd.compact(last.revision)
                relay.restore()
                await all_serve(three, fifth, timeout=15)
        finally:
            await client.close()
            group.cancel_scope.cancel()
