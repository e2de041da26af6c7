"""`xdscore serve DIR` against hostile or awkward files, as a subprocess on loopback.

Each test runs the server with a real gRPC client connected over ADS (every response
ACKed, the generation of a marker cluster noted) and asserts a figure: how fast a bad file
is refused, how much the server grew, how long a push or a new stream waited. The marker
cluster lives in ``marker.yaml``; a "valid edit" rewrites it with the next generation.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import anyio.abc
import attrs
import pytest
from envoy.service.discovery.v3 import discovery_pb2

from xdscore import CLUSTER
from xdscore.config import read_directory
from xdscore.testing import free_port

from ..factories import wait_until
from ._clients import ADS, MARKER, UNLIMITED, Connection, Failure, ack, channel, request
from ._clients import generation_of as _generation_of
from .test_bad_clients import _grpc_settled  # noqa: F401  (autouse)

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

APPLIED = "xdscore.config: applied"
REFUSED = "xdscore.config: refused"
CLUSTER_TYPE = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
MB = 1024 * 1024


# -- the server ----------------------------------------------------------------------------


@attrs.define
class Served:
    """The ``xdscore serve`` process and what it logged (its stderr), each line with the
    monotonic time it arrived."""

    process: anyio.abc.Process
    port: int
    lines: list[tuple[float, str]] = attrs.field(factory=list)
    _logged: asyncio.Event = attrs.field(factory=asyncio.Event)

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def read_log(self) -> None:
        assert self.process.stderr is not None
        buffered = b""
        async for chunk in self.process.stderr:
            buffered += chunk
            *complete, buffered = buffered.split(b"\n")
            now = time.monotonic()
            self.lines.extend((now, line.decode(errors="replace")) for line in complete)
            self._logged.set()

    def matching(self, text: str) -> list[tuple[float, str]]:
        return [(at, line) for at, line in self.lines if text in line]

    def count(self, text: str) -> int:
        return len(self.matching(text))

    async def logged(self, text: str, count: int = 1, timeout: float = 10) -> float:
        """Wait until ``count`` lines holding ``text`` were logged; when the last arrived."""
        with anyio.fail_after(timeout):
            while self.count(text) < count:
                self._logged.clear()
                await self._logged.wait()
        return self.matching(text)[count - 1][0]

    def after(self, text: str) -> str:
        """The log from the first line holding ``text`` on (a refusal lists its problems on
        the lines after it)."""
        index = next(i for i, (_, line) in enumerate(self.lines) if text in line)
        return "\n".join(line for _, line in self.lines[index:])

    def rss(self) -> int:
        """The server's resident set size, in bytes."""
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise AssertionError("no VmRSS")


@asynccontextmanager
async def serve(directory: Path, *flags: str) -> AsyncIterator[Served]:
    port = free_port()
    command = [
        sys.executable, "-m", "xdscore", "--log-level", "info", "serve", str(directory),
        "--listen", f"127.0.0.1:{port}", "--debounce-ms", "100", *flags,
    ]  # fmt: skip
    process = await anyio.open_process(command)
    served = Served(process, port)
    reader = asyncio.create_task(served.read_log())
    try:
        assert process.stdout is not None
        with anyio.fail_after(20):
            banner = (await process.stdout.receive()).decode()
        assert f"on 127.0.0.1:{port}" in banner, (banner, served.lines)
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
    # An abandoned load must not keep the process from ending on SIGTERM.
    assert process.returncode == 0, "\n".join(line for _, line in served.lines)


# -- files ---------------------------------------------------------------------------------


def cluster(name: str, alt: str = "") -> str:
    """One cluster as a one-line YAML flow mapping, a list entry."""
    return (
        f'- {{"@type": {CLUSTER_TYPE}, name: {name}, type: STATIC, connect_timeout: 1s'
        + (f", alt_stat_name: {alt}" if alt else "")
        + "}\n"
    )


def write_marker(directory: Path, generation: int) -> float:
    """A valid edit: the marker cluster at ``generation``; when it was written."""
    (directory / "marker.yaml").write_text(cluster(MARKER, f"g{generation}"))
    return time.monotonic()


def heavy_clusters(count: int, prefix: str = "c") -> bytes:
    """``count`` clusters with a few nested fields each (about 500 bytes apiece)."""
    pad = "x" * 200
    return "".join(
        f'- {{"@type": {CLUSTER_TYPE}, name: {prefix}{i}, type: STATIC, connect_timeout: 1s, '
        f"lb_policy: ROUND_ROBIN, alt_stat_name: {pad}{i}, "
        "common_lb_config: {healthy_panic_threshold: {value: 50.0}}, "
        "circuit_breakers: {thresholds: [{max_connections: 1000, max_requests: 1000}]}}\n"
        for i in range(count)
    ).encode()


def alias_bomb(levels: int = 9, width: int = 9) -> str:
    """Billion laughs in a cluster's metadata (a ``Struct``, which ``json_format`` would
    expand in full): each level a list of ``width`` aliases of the level below."""
    lines = [
        f'"@type": {CLUSTER_TYPE}',
        "name: bomb",
        "type: STATIC",
        "connect_timeout: 1s",
        "metadata:",
        "  filter_metadata:",
        "    lol:",
        "      l0: &l0 [" + ", ".join(['"lol lol lol lol lol lol"'] * width) + "]",
    ]
    for level in range(1, levels + 1):
        anchor = f"&l{level} " if level < levels else ""
        aliases = ", ".join([f"*l{level - 1}"] * width)
        lines.append(f"      l{level}: {anchor}[{aliases}]")
    return "\n".join(lines) + "\n"


# -- the client ----------------------------------------------------------------------------


class Client:
    """An ADS client of every cluster: each response ACKed, and when each generation and
    how many clusters arrived."""

    def __init__(self, connection: Connection, node_id: str = "healthy") -> None:
        self.connection = connection
        self.node_id = node_id
        self.seen: list[tuple[float, int, int]] = []
        """(monotonic time, generation, clusters) of each response."""
        self.ended: Failure | None = None
        self._changed = asyncio.Event()

    @property
    def generation(self) -> int:
        return self.seen[-1][1] if self.seen else -1

    async def run(self) -> None:
        call = self.connection.open(ADS)
        await call.send(request(CLUSTER, node_id=self.node_id))
        while True:
            item = await call.next(timeout=3600)
            if isinstance(item, Failure):
                self.ended = item
                self._changed.set()
                return
            response = discovery_pb2.DiscoveryResponse.FromString(item)
            generation = _generation_of(response)
            self.seen.append((time.monotonic(), generation, len(response.resources)))
            self._changed.set()
            await call.send(ack(response))

    async def reached(self, generation: int, timeout: float = 5) -> float:
        """Wait until the client holds ``generation``; when it arrived."""
        with anyio.fail_after(timeout):
            while self.generation < generation:
                assert self.ended is None, f"the client's stream ended: {self.ended}"
                self._changed.clear()
                await self._changed.wait()
        return next(at for at, seen, _ in self.seen if seen >= generation)


@asynccontextmanager
async def client(served: Served) -> AsyncIterator[Client]:
    async with channel(served.target, options=UNLIMITED) as connection:
        watcher = Client(connection)
        task = asyncio.create_task(watcher.run())
        try:
            await watcher.reached(0)
            yield watcher
        finally:
            task.cancel()
            await asyncio.wait([task])


async def new_stream_latency(served: Served, node_id: str) -> float:
    """Seconds from opening a connection to the first response on a new ADS stream."""
    start = time.monotonic()
    async with channel(served.target, options=UNLIMITED) as connection:
        call = connection.open(ADS)
        await call.send(request(CLUSTER, node_id=node_id))
        response = await call.recv(timeout=10)
        latency = time.monotonic() - start
        assert _generation_of(response) >= 0
        call.cancel()
    return latency


@pytest.fixture
def config(tmp_path: Path) -> Path:
    write_marker(tmp_path, 0)
    return tmp_path


# -- the tests -----------------------------------------------------------------------------


async def test_an_alias_bomb_is_refused_at_once_and_wedges_nothing(config: Path) -> None:
    async with serve(config) as served, client(served) as watcher:
        before = served.rss()
        bomb = alias_bomb()
        assert 700 < len(bomb) < 1500
        assert bomb.count("*") == 81
        dropped = time.monotonic()
        (config / "bomb.yaml").write_text(bomb)
        refused = await served.logged(REFUSED, timeout=5) - dropped
        grown = served.rss() - before
        report = served.after(REFUSED)
        assert "bomb.yaml (document 1)" in report
        assert "the alias expansion limit is 200,000 nodes per document" in report
        assert refused < 2, f"refused after {refused:.2f} s"
        assert grown < 50 * MB, f"the server grew by {grown / MB:.1f} MB"
        assert watcher.generation == 0

        # The reloader is not wedged: the next valid edit is served within a second.
        (config / "bomb.yaml").unlink()
        edited = write_marker(config, 1)
        pushed = await watcher.reached(1, timeout=5) - edited
        assert pushed < 1, f"the push came {pushed:.2f} s after the edit"
        print(f"bomb refused in {refused:.3f} s, RSS +{grown / MB:.1f} MB, push {pushed:.3f} s")


async def test_streams_are_served_while_a_large_file_loads(config: Path) -> None:
    big = heavy_clusters(20_000)
    assert 8 * MB < len(big) < 16 * MB  # allowed: under the default limit per file
    async with serve(config) as served, client(served) as watcher:
        (config / "big.yaml").write_bytes(big)
        await served.logged("reload #1 of")
        await anyio.sleep(0.3)  # past the second read: the load is parsing in its thread

        latencies = [await new_stream_latency(served, f"probe-{i}") for i in range(8)]
        # The big load was in its thread all along, neither applied nor refused yet.
        assert served.count(APPLIED) == 0, served.lines
        assert served.count(REFUSED) == 0, served.lines
        assert max(latencies) < 1, f"new streams waited {latencies}"

        # A newer reload does not wait for the big one: take the big file out again and
        # edit the marker; the push lands while the big load is still running.
        (config / "big.yaml").unlink()
        edited = write_marker(config, 1)
        pushed = await watcher.reached(1, timeout=5) - edited
        assert pushed < 1, f"the push came {pushed:.2f} s after the edit"
        await served.logged("reload #1 abandoned, its result unused", timeout=5)
        assert all(clusters == 1 for _, _, clusters in watcher.seen), watcher.seen
        assert served.count(REFUSED) == 0, served.lines
        print(
            f"new streams during a 10 MB load: max {max(latencies):.3f} s, "
            f"push during it {pushed:.3f} s"
        )


async def test_files_over_the_size_limits_are_refused_unread(config: Path) -> None:
    limits = ("--max-file-bytes", "1000000", "--max-config-bytes", "1500000")
    async with serve(config, *limits) as served, client(served) as watcher:
        written = time.monotonic()
        (config / "huge.yaml").write_bytes(b"# " + b"x" * 1_200_000 + b"\n")
        refused = await served.logged(REFUSED, timeout=5) - written
        report = served.after(REFUSED)
        assert "huge.yaml: refused: the file is 1,200,003 bytes" in report
        assert "over the limit of 1,000,000 bytes for one file" in report
        assert "(raise it with --max-file-bytes, or max_file_bytes=)" in report
        assert refused < 1, f"refused after {refused:.2f} s"

        # Two files each within the limit, together over the directory's.
        (config / "huge.yaml").unlink()
        written = time.monotonic()
        (config / "half.yaml").write_bytes(b"# " + b"x" * 800_000 + b"\n")
        (config / "other.yaml").write_bytes(b"# " + b"x" * 800_000 + b"\n")
        refused_total = await served.logged(REFUSED, count=2, timeout=5) - written
        last = served.lines[-1][1]
        assert "over the limit of 1,500,000 bytes for a directory" in last
        assert "(raise it with --max-config-bytes, or max_config_bytes=)" in last
        assert refused_total < 1, f"refused after {refused_total:.2f} s"
        assert watcher.generation == 0
        assert served.count(APPLIED) == 0
        print(f"over-limit file refused in {refused:.3f} s, directory in {refused_total:.3f} s")


async def test_a_file_written_in_pieces_is_only_applied_whole(config: Path) -> None:
    # Ten pieces, 100 ms apart, under a 300 ms quiet window: the file watcher reports the
    # file before the writer is done (a rewrite of a file it already reported does not
    # extend its wait), and every prefix ending at a piece is a valid directory.
    pieces = ["".join(cluster(f"c{10 * i + j}") for j in range(10)) for i in range(10)]
    async with serve(config, "--debounce-ms", "300") as served, client(served) as watcher:
        path = config / "clusters.yaml"
        for piece in pieces:
            with path.open("a") as stream:
                stream.write(piece)
            await anyio.sleep(0.1)
        await served.logged(APPLIED, timeout=10)
        await wait_until(lambda: watcher.seen[-1][2] == 101, what="the whole file, served")
        # Whatever further reloads the later pieces cause, give them time to finish.
        with anyio.move_on_after(1.5):
            await served.logged("unchanged since the snapshot being served", timeout=2)
        applied = [line for _, line in served.matching(APPLIED)]
        retries = served.count("changed while being read")
        assert len(applied) == 1, applied
        assert "<Snapshot cds=101>" in applied[0], applied
        assert {clusters for _, _, clusters in watcher.seen} == {1, 101}, watcher.seen
        assert retries >= 1, "the partial file was never caught: the test did not test"
        assert served.count(REFUSED) == 0, served.lines
        print(f"written in 10 pieces: {retries} read(s) again, 1 snapshot applied")


async def test_a_reload_past_its_timeout_is_abandoned_and_the_next_applies(
    config: Path,
) -> None:
    async with serve(config, "--reload-timeout", "0.5") as served, client(served) as watcher:
        written = time.monotonic()
        (config / "slow.yaml").write_bytes(heavy_clusters(4_000))
        timed_out = await served.logged(REFUSED, timeout=10) - written
        report = served.after(REFUSED)
        assert "loading took longer than the reload timeout of 0.5 s" in report, report
        assert 0.5 < timed_out < 2, f"the timeout was reported after {timed_out:.2f} s"

        (config / "slow.yaml").unlink()
        edited = write_marker(config, 1)
        pushed = await watcher.reached(1, timeout=5) - edited
        assert pushed < 1, f"the push came {pushed:.2f} s after the edit"
        assert served.count(APPLIED) == 1
        print(f"timeout reported after {timed_out:.3f} s, next edit pushed in {pushed:.3f} s")


# -- the bounds in process -----------------------------------------------------------------


def merge_bomb(levels: int = 9, width: int = 9) -> str:
    """Billion laughs through merge keys, which PyYAML flattens before constructing."""
    lines = [
        f'"@type": {CLUSTER_TYPE}',
        "name: merges",
        "metadata: {filter_metadata: {lol: {",
        "  m0: &m0 {" + ", ".join(f"k{i}: v" for i in range(width)) + "},",
    ]
    for level in range(1, levels + 1):
        merged = ", ".join([f"*m{level - 1}"] * width)
        lines.append(f"  m{level}: &m{level} {{<<: [{merged}]}},")
    return "\n".join(lines) + "\n  }}}\n"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(alias_bomb(), "the alias expansion limit is 200,000 nodes", id="lists"),
        pytest.param(merge_bomb(), "the alias expansion limit is 200,000 nodes", id="merges"),
        pytest.param(
            "a: &a [1, 2]\n" + "".join(f"b{i}: *a\n" for i in range(101)),
            "more than 100 YAML aliases in the file (the alias limit is 100 per file)",
            id="count",
        ),
        pytest.param(
            "- &loop [*loop]\n", "a YAML alias names a node that contains it", id="recursive"
        ),
    ],
)
async def test_each_alias_bound_is_refused_before_anything_expands(
    tmp_path: Path, text: str, expected: str
) -> None:
    (tmp_path / "file.yaml").write_text("--- {}\n---\n" + text)
    start = time.monotonic()
    _, problems = read_directory(tmp_path)
    elapsed = time.monotonic() - start
    assert [problem.where for problem in problems] == [f"{tmp_path / 'file.yaml'} (document 2)"]
    assert expected in problems[0].message
    assert elapsed < 2, f"took {elapsed:.2f} s"


async def test_a_document_without_aliases_is_not_limited_by_its_size(tmp_path: Path) -> None:
    # 250,000 nodes as written, past the alias expansion bound, and fine; so are a hundred
    # merge keys of one anchor, in a file that has one.
    values = ", ".join(["0"] * 250_000)
    (tmp_path / "many.yaml").write_text(
        f'"@type": {CLUSTER_TYPE}\nname: many\n'
        f"metadata: {{filter_metadata: {{x: {{values: [{values}]}}}}}}\n"
    )
    (tmp_path / "anchors.yaml").write_text(
        f'- &base {{"@type": {CLUSTER_TYPE}, name: b0, type: STATIC, connect_timeout: 1s}}\n'
        + "".join(f"- {{<<: *base, name: b{i}}}\n" for i in range(1, 100))
    )
    found, problems = read_directory(tmp_path)
    assert problems == []
    assert len(found) == 101
