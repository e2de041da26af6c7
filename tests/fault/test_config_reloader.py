"""`xdscore serve DIR`'s reloader against files that are refused, still being written, or
too large, checked from outside: a real server process, what its clients are sent and what
its admin endpoint dumps, and what it logged.

* A refused file (here a YAML alias bomb left in the directory) does not hold back an edit
  to another file.
* A file rewritten in place by a writer that holds it open between two halves is never
  served half-written, whatever moment one looks.
* An oversized file's refusal names the flag that raises the limit.
* A load that runs past ``--reload-timeout`` is stopped, not left running, and its memory
  was never the server's.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest
from envoy.config.cluster.v3 import cluster_pb2
from envoy.service.discovery.v3 import discovery_pb2

from xdscore import CLUSTER
from xdscore.testing import free_port, http_get

from ._clients import ADS, UNLIMITED, Failure, ack, channel, request
from .test_bad_clients import _grpc_settled  # noqa: F401  (autouse)
from .test_config_faults import (
    APPLIED,
    MB,
    REFUSED,
    Served,
    alias_bomb,
    client,
    cluster,
    serve,
    write_marker,
)

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

State = frozenset[tuple[str, str]]
"""What a client holds: each cluster's name and ``alt_stat_name``."""


@pytest.fixture
def config(tmp_path: Path) -> Path:
    directory = tmp_path / "config"
    directory.mkdir()
    write_marker(directory, 0)
    return directory


def process_tree_cpu(pid: int) -> float:
    """CPU seconds used by ``pid`` and every live descendant of it (each process's own
    user and system time, read from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    total, todo = 0.0, [pid]
    while todo:
        current = todo.pop()
        try:
            fields = Path(f"/proc/{current}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        todo.extend(children.get(current, []))
    return total


# -- a refused file ------------------------------------------------------------------------


async def test_a_refused_file_does_not_hold_back_an_edit_to_another(config: Path) -> None:
    async with serve(config) as served, client(served) as watcher:
        # Ten strings, then eight levels of ten aliases: 10^9 strings once expanded.
        bomb = alias_bomb(levels=8, width=10)
        assert len(bomb) < 1000
        assert bomb.count("*") == 80
        (config / "bomb.yaml").write_text(bomb)
        await served.logged(REFUSED, timeout=5)
        assert "bomb.yaml (document 1)" in served.after(REFUSED)

        # The bomb stays in the directory; an edit to another file is served all the same.
        edited = write_marker(config, 1)
        pushed = await watcher.reached(1, timeout=5) - edited
        assert pushed < 2, f"the edit was served {pushed:.2f} s after it was written"
        assert served.count(REFUSED) == 2, served.lines  # the bomb, refused again
        assert watcher.seen[-1][2] == 1, watcher.seen  # and nothing of it served

        # A file that was good and turns bad keeps its last good version while the rest
        # moves on; once fixed, its new version is served.
        (config / "bomb.yaml").unlink()
        (config / "other.yaml").write_text(cluster("other", "o1"))
        await watcher.reached(1, timeout=5)
        await served.logged(APPLIED, count=2, timeout=5)
        (config / "other.yaml").write_text(bomb)
        await served.logged(REFUSED, count=3, timeout=5)
        edited = write_marker(config, 2)
        pushed = await watcher.reached(2, timeout=5) - edited
        assert pushed < 2, f"the edit was served {pushed:.2f} s after it was written"
        assert watcher.seen[-1][2] == 2, "other.yaml's last good cluster was dropped"
        print(f"with a bomb in the directory, an edit was served {pushed:.3f} s after it")


# -- a file still being written ------------------------------------------------------------


def clusters_text(generation: str, count: int = 40) -> str:
    return "".join(cluster(f"c{i}", f"{generation}{i}") for i in range(count))


def state_of(generation: str, count: int = 40) -> State:
    return frozenset({(f"c{i}", f"{generation}{i}") for i in range(count)})


class States:
    """Every cluster set an ADS client was sent, as it was sent (every response ACKed)."""

    def __init__(self) -> None:
        self.seen: list[State] = []
        self.changed = asyncio.Event()

    async def run(self, target: str) -> None:
        async with channel(target, options=UNLIMITED) as connection:
            call = connection.open(ADS)
            await call.send(request(CLUSTER, node_id="watcher"))
            while True:
                item = await call.next(timeout=3600)
                if isinstance(item, Failure):
                    return
                response = discovery_pb2.DiscoveryResponse.FromString(item)
                clusters = [cluster_pb2.Cluster.FromString(a.value) for a in response.resources]
                self.seen.append(
                    frozenset((c.name, c.alt_stat_name) for c in clusters if c.name != "generation")
                )
                self.changed.set()
                await call.send(ack(response))

    async def reached(self, state: State, timeout: float = 10) -> None:
        with anyio.fail_after(timeout):
            while not self.seen or self.seen[-1] != state:
                self.changed.clear()
                await self.changed.wait()


async def dumped(admin: int) -> State:
    """The clusters the admin endpoint says a node would be sent now."""
    status, _, body = await http_get("127.0.0.1", admin, "/config_dump?node=poller&type=cds")
    assert status == 200, body
    (dump,) = json.loads(body)["types"]
    return frozenset(
        (entry["name"], entry["resource"].get("alt_stat_name", ""))
        for entry in dump["resources"]
        if entry["name"] != "generation"
    )


@asynccontextmanager
async def watched(served: Served) -> AsyncIterator[States]:
    states = States()
    task = asyncio.create_task(states.run(served.target))
    try:
        yield states
    finally:
        task.cancel()
        await asyncio.wait([task])


async def test_a_file_held_open_between_two_halves_is_never_served_half(config: Path) -> None:
    path = config / "clusters.yaml"
    path.write_text(clusters_text("a"))
    admin = free_port()
    old, new = state_of("a"), state_of("b")
    text = clusters_text("b")
    middle = len(clusters_text("b", 20))
    halves = text[:middle], text[middle:]
    async with serve(config, "--admin", f"127.0.0.1:{admin}") as served:
        async with watched(served) as states:
            await states.reached(old)
            polled: list[tuple[float, State]] = []
            done = anyio.Event()

            async def poll() -> None:
                while not done.is_set():
                    polled.append((time.monotonic(), await dumped(admin)))
                    await anyio.sleep(0.01)

            async with anyio.create_task_group() as group:
                group.start_soon(poll)
                # In place: truncated, one half, a pause of a second with the file held
                # open, the other half, closed.
                opened = time.monotonic()
                with path.open("w") as stream:
                    stream.write(halves[0])
                    stream.flush()
                    await anyio.sleep(1.0)
                    stream.write(halves[1])
                closed = time.monotonic()
                await states.reached(new, timeout=10)
                served_after = time.monotonic() - closed
                await anyio.sleep(0.3)
                done.set()
        observed = set(states.seen) | {state for _, state in polled}
        partial = observed - {old, new}
        assert not partial, f"served half-written: {sorted(len(s) for s in partial)} clusters"
        during = [at for at, _ in polled if opened <= at <= closed]
        assert len(during) >= 10, f"polled only {len(during)} times while the file was written"
        assert served.count(REFUSED) == 0, served.lines
        print(
            f"{len(polled)} polls and {len(states.seen)} pushes saw only whole states; "
            f"served {served_after:.2f} s after the writer closed the file"
        )


# -- an oversized file ---------------------------------------------------------------------


async def test_an_oversized_file_is_refused_naming_the_flag(config: Path) -> None:
    async with serve(config) as served, client(served) as watcher:
        written = time.monotonic()
        with (config / "huge.yaml").open("wb") as stream:
            stream.truncate(54 * MB)  # sparse: refused from its size, never read
        refused = await served.logged(REFUSED, timeout=5) - written
        report = served.after(REFUSED)
        assert "huge.yaml: refused: the file is 56,623,104 bytes" in report, report
        assert "--max-file-bytes" in report, report
        assert refused < 2, f"refused after {refused:.2f} s"

        # The rest of the directory is not held back by it.
        edited = write_marker(config, 1)
        assert await watcher.reached(1, timeout=5) - edited < 2


# -- a load past its deadline --------------------------------------------------------------


def one_huge_resource(values: int) -> str:
    """One cluster whose metadata holds ``values`` numbers: a long parse of one resource."""
    numbers = ", ".join(["0"] * values)
    return (
        '"@type": type.googleapis.com/envoy.config.cluster.v3.Cluster\n'
        "name: huge\ntype: STATIC\nconnect_timeout: 1s\n"
        f"metadata: {{filter_metadata: {{x: {{values: [{numbers}]}}}}}}\n"
    )


async def test_a_load_past_its_deadline_is_stopped_not_left_running(config: Path) -> None:
    async with serve(config, "--reload-timeout", "3") as served, client(served) as watcher:
        peak = memory(served, "VmHWM")
        (config / "huge.yaml").write_text(one_huge_resource(1_500_000))  # 4.5 MB
        await served.logged("took longer than the reload timeout of 3 s", timeout=15)
        # Three seconds of parsing did not happen in the server: its peak memory barely
        # moved (the load ran in a process of its own, killed at the deadline).
        grown = memory(served, "VmHWM") - peak
        assert grown < 60 * MB, f"the server's peak memory grew by {grown / MB:.0f} MB"
        # Whatever was loading is stopped: the server and its children use no more CPU
        # than serving one idle client costs.
        await anyio.sleep(0.3)
        before = process_tree_cpu(served.process.pid)
        await anyio.sleep(2)
        used = process_tree_cpu(served.process.pid) - before
        assert used < 0.5, f"{used:.2f} s of CPU in 2 s after the load was abandoned"

        # The next edit is served at once.
        (config / "huge.yaml").unlink()
        edited = write_marker(config, 1)
        pushed = await watcher.reached(1, timeout=5) - edited
        assert pushed < 2, f"the edit was served {pushed:.2f} s after it was written"
        print(
            f"abandoned load: server peak +{grown / MB:.0f} MB, {used:.2f} s of CPU in the 2 s "
            f"after; next edit {pushed:.3f} s"
        )


def memory(served: Served, field: str) -> int:
    """A memory figure of the server process (``VmRSS``, ``VmHWM``), in bytes."""
    for line in Path(f"/proc/{served.process.pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no {field}")
