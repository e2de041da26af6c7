"""``xdscore serve --workers 2``: two processes on one port, both given streams, the same
versions from both, and a killed worker restarted with its clients back on a worker."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import anyio.abc
import attrs
import pytest

from xdscore.testing import http_get

from ..factories import wait_until
from ..fault._clients import Connection, ReconnectingClient, eventually, stop_clients

pytestmark = pytest.mark.anyio

CLIENTS = 40
_REPO = Path(__file__).resolve().parents[2]
_ADMIN = re.compile(r"worker (\d+): admin endpoint on http://127\.0\.0\.1:(\d+)/")
_SERVING = re.compile(r"^xdscore: serving .* on 127\.0\.0\.1:(\d+): ")


def write_config(directory: Path) -> None:
    clusters = [
        {
            "@type": "type.googleapis.com/envoy.config.cluster.v3.Cluster",
            "name": f"c{i}",
            "type": "STATIC",
            "connect_timeout": "1s",
            "load_assignment": {
                "cluster_name": f"c{i}",
                "endpoints": [
                    {
                        "lb_endpoints": [
                            {
                                "endpoint": {
                                    "address": {
                                        "socket_address": {
                                            "address": "127.0.0.1",
                                            "port_value": 8000 + i,
                                        }
                                    }
                                }
                            }
                        ]
                    }
                ],
            },
        }
        for i in range(5)
    ]
    (directory / "clusters.json").write_text(json.dumps(clusters))


@attrs.define
class Workers:
    """The supervisor's process and what it printed."""

    process: anyio.abc.Process
    lines: list[str] = attrs.field(factory=list)
    port: int = 0
    admin: dict[int, int] = attrs.field(factory=dict)
    """Each worker's admin port (the latest, after a restart)."""
    changed: asyncio.Event = attrs.field(factory=asyncio.Event)

    async def read(self) -> None:
        assert self.process.stdout is not None
        buffer = b""
        async for chunk in self.process.stdout:
            buffer += chunk
            *done, buffer = buffer.split(b"\n")
            for raw in done:
                line = raw.decode()
                self.lines.append(line)
                if found := _ADMIN.search(line):
                    self.admin[int(found[1])] = int(found[2])
                if found := _SERVING.search(line):
                    self.port = int(found[1])
                self.changed.set()

    async def until(self, condition: object, timeout: float = 30.0) -> None:
        with anyio.fail_after(timeout):
            while not condition():  # type: ignore[operator]
                self.changed.clear()
                await self.changed.wait()

    def pids(self) -> list[int]:
        """The workers' process ids (the supervisor's children)."""
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == self.process.pid:
                found.append(int(entry.name))
        return found

    async def status(self, index: int) -> dict[str, object]:
        code, _, body = await http_get("127.0.0.1", self.admin[index], "/status", timeout=5)
        assert code == 200, body
        return json.loads(body)  # type: ignore[no-any-return]


@asynccontextmanager
async def workers(directory: Path, count: int) -> AsyncIterator[Workers]:
    command = [
        sys.executable, "-m", "xdscore", "serve", str(directory),
        "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--workers", str(count),
    ]  # fmt: skip
    process = await anyio.open_process(command, cwd=_REPO, stderr=subprocess.STDOUT)
    running = Workers(process)
    reader = asyncio.create_task(running.read())
    try:
        await running.until(lambda: running.port and len(running.admin) == count)
        yield running
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
        with anyio.fail_after(20):
            status = await process.wait()
        await reader
        assert status == 0, "\n".join(running.lines)
        assert not running.pids(), "a worker outlived the supervisor"


async def served(plane: Workers, index: int) -> int:
    proxies = (await plane.status(index))["proxies"]
    assert isinstance(proxies, list)
    return len(proxies)


async def test_two_workers_share_the_port_and_a_dead_one_comes_back(tmp_path: Path) -> None:
    write_config(tmp_path)
    started = time.monotonic()
    async with workers(tmp_path, 2) as plane:
        serving = [line for line in plane.lines if line.startswith("xdscore: serving ")]
        assert len(serving) == 1, plane.lines  # the port is printed once
        assert len(plane.pids()) == 2
        target = f"127.0.0.1:{plane.port}"
        connections = [Connection(target) for _ in range(CLIENTS)]
        clients = [ReconnectingClient(c, f"proxy-{i}") for i, c in enumerate(connections)]
        tasks = [asyncio.create_task(client.run()) for client in clients]
        try:
            await eventually(lambda: all(client.version for client in clients), timeout=20)
            # Both workers have streams; every client holds the same version.
            counts = [await served(plane, 0), await served(plane, 1)]
            assert sum(counts) == CLIENTS, counts
            assert min(counts) > 0, counts
            assert len({client.version for client in clients}) == 1
            dumps = []
            for index in (0, 1):
                code, _, body = await http_get(
                    "127.0.0.1", plane.admin[index], "/config_dump?node=x&type=cds", timeout=5
                )
                assert code == 200, body
                dumps.append(json.loads(body))
            assert dumps[0] == dumps[1], "the two workers serve different versions"
            # Kill worker 0: it is restarted, and its clients come back on a worker.
            before = dict(plane.admin)
            os.kill(_pid_of(plane, 0), signal.SIGKILL)
            await plane.until(lambda: plane.admin[0] != before[0], timeout=30)
            assert any("exited with status -9" in line for line in plane.lines), plane.lines
            assert len(plane.pids()) == 2
            for client in clients:
                assert client.version  # never lost what it held
            # The killed worker's clients saw their streams end (some more than once: a
            # reconnect may race the dead listener's queue).
            await eventually(lambda: sum(len(c.ends) for c in clients) >= counts[0], 10)

            async def everyone_back() -> bool:
                return await served(plane, 0) + await served(plane, 1) == CLIENTS

            await wait_until(everyone_back, timeout=20, interval=0.2, what="every client back")
        finally:
            await stop_clients(tasks, connections)
    print(f"workers: {counts} streams, restart and reconnect in {time.monotonic() - started:.1f} s")


def _pid_of(plane: Workers, index: int) -> int:
    """The pid of worker ``index`` (its command line names its index)."""
    for pid in plane.pids():
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        if argv[argv.index(b"--worker-index") + 1] == str(index).encode():
            return pid
    raise AssertionError(f"no worker {index}")
