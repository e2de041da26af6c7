"""``xdscore apply DIR --etcd URL --wait``: two replicas of one etcd prefix, three real Envoys.

One Envoy takes SotW ADS from the first replica; the second replica serves one over Delta
and one over SotW; the replicas register themselves under the prefix, and the waits find
them there. A good change returns 0 once all three hold it (their config dumps say so); a
change all must reject (a listener on a port the test holds bound) exits 1 naming each
Envoy, its replica, the listener, the etcd key and mod revision it came from and Envoy's
message. ``status``, ``dump`` and ``diff --etcd`` find each Envoy on its replica (``diff``
names the rejected listener's key; with no replica registered yet, ``status`` says so and
exits 1). With one replica killed (its registration outlives it until its lease lapses),
the wait, ``status``, ``dump`` and ``diff`` name it and exit 1.
"""

from __future__ import annotations

import json
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from xdscore import LISTENER
from xdscore.etcd._layout import resource_key
from xdscore.testing import Envoy, HttpBackend, envoy_bootstrap, free_port

from ..etcd_support import EtcdServer, running_etcd
from .test_config_server import render
from .test_observability_envoy import body, eventually, write_extra_listeners, xdscore
from .test_replicas_envoy import replicas
from .test_revisions_envoy import listener_ports

pytestmark = [pytest.mark.anyio, pytest.mark.envoy, pytest.mark.timeout(150)]

PREFIX = "/mesh"


async def apply(directory: Path, url: str, *wait: str) -> tuple[int, str]:
    """``xdscore apply DIR --etcd URL --prefix /mesh [WAIT FLAGS]``: (status, output)."""
    command = [sys.executable, "-m", "xdscore", "apply", str(directory), "--etcd", url,
               "--prefix", PREFIX, *wait]  # fmt: skip
    result = await anyio.run_process(command, check=False)
    return result.returncode, result.stdout.decode() + result.stderr.decode()


@pytest.fixture
async def etcd(tmp_path: Path) -> AsyncIterator[EtcdServer]:
    async with running_etcd(tmp_path / "etcd") as server:
        yield server


async def test_apply_wait_over_two_replicas(tmp_path: Path, etcd: EtcdServer) -> None:
    config = tmp_path / "config"
    config.mkdir()
    with HttpBackend("A") as backend, socket.create_server(("127.0.0.1", 0)) as held:
        first, second, good = free_port(), free_port(), free_port()
        blocked = int(held.getsockname()[1])
        ports = {"LISTENER_PORT": first, "BACKEND_A_PORT": backend.port,
                 "BACKEND_B_PORT": backend.port}  # fmt: skip
        render(config, ports)
        code, out = await apply(config, etcd.url)
        assert code == 0, out
        source = ["--etcd", etcd.url, "--prefix", PREFIX]
        code, out, err = await xdscore("status", *source)
        assert (code, out) == (1, ""), out + err
        assert f"xdscore: no replica is registered under {PREFIX} in {etcd.url}" in err, err
        async with replicas([source, source]) as two:
            sotw = envoy_bootstrap(xds_port=two[0].port, node_id="edge-sotw")
            delta = envoy_bootstrap(xds_port=two[1].port, node_id="edge-delta", delta=True)
            third = envoy_bootstrap(xds_port=two[1].port, node_id="edge-third")
            async with Envoy(sotw) as one, Envoy(delta) as other, Envoy(third) as more:
                envoys = (one, other, more)
                wait = ("--wait", "--timeout", "20s")  # the replicas registered in etcd
                await eventually(lambda: body(first), lambda b: b == "A", "traffic")
                await eventually(two[0].proxies, lambda n: n == 1, "one Envoy on the first")
                await eventually(two[1].proxies, lambda n: n == 2, "two on the second")

                # (1) A good change: 0 once every Envoy holds it.
                render(config, ports | {"LISTENER_PORT": second})
                code, out = await apply(config, etcd.url, *wait)
                assert code == 0, out
                assert "every proxy holds it (3 changed by it)" in out, out
                assert "etcd revision" in out, out
                for envoy in envoys:
                    assert (await listener_ports(envoy))["listener_0"] == second
                code, out, err = await xdscore(
                    "wait", "--etcd", etcd.url, "--prefix", PREFIX, "--timeout", "5s"
                )
                assert code == 0, out + err
                assert out.count("every proxy holds it") == 1, out

                # (2) A change all reject: 1, naming each, with the key it came from.
                write_extra_listeners(config, listener_good=good, listener_blocked=blocked)
                code, out = await apply(config, etcd.url, *wait)
                assert code == 1, out
                assert "NOT EVERY PROXY HOLDS IT" in out, out
                key = resource_key(PREFIX, LISTENER, "listener_blocked").decode()
                for node in ("edge-sotw", "edge-delta", "edge-third"):
                    (line,) = [x for x in out.splitlines() if x.startswith(f"NACKED   {node} ")]
                    assert f"rejected lds listener_blocked from {key} (mod revision " in line
                    assert f"cannot bind '127.0.0.1:{blocked}'" in line, line
                replicas_named = {line.split("(replica ")[1].split(")")[0] for line in
                                  out.splitlines() if line.startswith("NACKED")}  # fmt: skip
                assert len(replicas_named) == 2, out

                # One view: status --etcd asks both, each proxy with its replica.
                ids = []
                for replica in two:
                    page = await replica.status()
                    assert page is not None
                    ids.append(page["replica"])
                status = ("status", "--etcd", etcd.url, "--prefix", PREFIX, "--format", "json")
                code, out, err = await xdscore(*status)
                assert code == 0, out + err
                seen = {(p["node"], p["replica"]) for p in json.loads(out)["proxies"]}
                assert seen == {
                    ("edge-sotw", ids[0]),
                    ("edge-delta", ids[1]),
                    ("edge-third", ids[1]),
                }
                # dump and diff --etcd find the replica each Envoy is on; diff names the
                # rejected listener's etcd key as its source.
                across = ("--etcd", etcd.url, "--prefix", PREFIX)
                code, out, err = await xdscore("dump", *across, "--node", "edge-delta")
                assert code == 0, out + err
                assert [r["replica"] for r in json.loads(out)["replicas"]] == [ids[1]], out
                diff = ("diff", *across, "--envoy-admin")
                code, out, err = await xdscore(*diff, other.admin_address)
                assert code == 1, out + err
                assert out.startswith(f"replica {ids[1]}: node edge-delta (Delta): NOT IN"), out
                rows = out.splitlines()
                (row,) = [i for i, x in enumerate(rows) if x.startswith("ERROR    lds  listener_b")]
                assert rows[row + 1].startswith(f"    source: {key} (mod revision "), out

                # (3) A replica killed: its registration outlives it (until its lease
                # lapses), and the wait names it and fails; the fix lands on the other.
                two[1].process.kill()
                await two[1].process.wait()
                code, out, err = await xdscore(*status)
                assert code == 1, out + err
                assert [p["node"] for p in json.loads(out)["proxies"]] == ["edge-sotw"], out
                dead = f"xdscore: cannot ask replica {ids[1]} at 127.0.0.1:{two[1].port}"
                assert dead in err, err
                write_extra_listeners(config, listener_good=good)
                code, out = await apply(config, etcd.url, "--wait", "--timeout", "3s")
                assert code == 1, out
                assert f"REPLICA  127.0.0.1:{two[1].admin}: cannot be asked" in out, out
                ports_now = await listener_ports(one)
                assert ports_now.get("listener_good") == good
                assert "listener_blocked" not in ports_now
                # dump and diff --etcd name the dead replica too, and exit 1 for it even
                # where what they could ask is in order.
                code, out, err = await xdscore("dump", *across, "--node", "edge-sotw")
                assert code == 1, out + err
                assert [r["replica"] for r in json.loads(out)["replicas"]] == [ids[0]], out
                assert err.startswith(dead), err
                code, out, err = await eventually(
                    lambda: xdscore(*diff, one.admin_address),
                    lambda r: ": in sync:" in r[1].partition("\n")[0],
                    "diff --etcd in sync with the live replica",
                )
                assert code == 1, out + err
                assert out.startswith(f"replica {ids[0]}: node edge-sotw (State of the World)")
                assert err.startswith(dead), err
