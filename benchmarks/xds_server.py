"""xdscore's benchmark server: the standard workload behind the neutral stdin/stdout protocol.

    python benchmarks/xds_server.py --addr 127.0.0.1:0 --clusters 1000 --endpoints 10

Serves SotW and Delta ADS on one port. Protocol (one line each way):

* prints ``LISTENING addr=HOST:PORT`` once serving;
* on ``push [R [E [K]]]`` builds the next version (R clusters, E endpoints each; K, an
  extension, limits the change to the first K endpoint sets) and prints
  ``SNAPSHOT_SET version=N clusters=R endpoints=E mono=T`` once the cache holds it;
* on ``quit`` exits.

Workload: clusters ``c_00000``... (EDS over ADS, round robin, 1 s connect timeout); one
ClusterLoadAssignment per cluster with E endpoints on 127.x.y.z, one locality, weight 1,
port 8000 + version % 1000 (so a push changes every endpoint set and nothing else);
``listener_0`` (HTTP connection manager, RDS ``route_0``, router); ``route_0`` → ``c_00000``.
The clusters, listener and route sit in a snapshot cache, the endpoint sets in a linear
cache (a mux of the two); ``--one-snapshot`` puts everything in one snapshot cache instead,
the whole state rebuilt from new messages into a new snapshot on each push.

``--diag DIR`` (for finding what grows in a soak; slow): every ``--diag-every`` pushes, a
JSON report of what the process holds (see :class:`Diagnostics`).

``--workers K`` serves from K processes on one port (SO_REUSEPORT, as ``xdscore serve
--workers``; the kernel spreads connections over them): this one speaks the protocol and
passes each push to every worker, printing ``SNAPSHOT_SET`` once all hold the version
(``mono=`` the last of theirs). One process may hold only so many descriptors (20,000 on
the benchmark machine), which bounds the streams one process can serve; ``--max-streams``
sets each worker's ``ServerLimits.max_streams``.

``--loop`` picks the event loop as ``xdscore serve`` does: uvloop's where it is installed
(``auto``, the default; the project's development install has it), or ``asyncio``.
"""

from __future__ import annotations

import argparse
import collections
import gc
import json
import socket
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

from xdscore import LinearCache, MuxCache, Snapshot, SnapshotCache, XdsServer, same_for_all
from xdscore import builders as b
from xdscore._memos import usage as memo_usage
from xdscore.server import LOOPS, ServerLimits, loop_options, tune_collector
from xdscore.transport import GrpclibTransport, Http2Transport
from xdscore.wire._typeurls import ENDPOINT


def cluster_name(index: int) -> str:
    return f"c_{index:05d}"


def endpoints(index: int, count: int, version: int) -> list[tuple[str, int]]:
    port = 8000 + version % 1000
    base = index * count
    return [
        (f"127.{(n >> 16) & 255}.{(n >> 8) & 255}.{n & 255}", port)
        for n in (base + i + 1 for i in range(count))
    ]


class Workload:
    """Builds each version of the standard workload into a snapshot cache and a linear cache
    (``one_snapshot``: the whole state into a new snapshot of one snapshot cache each time,
    as an application that rebuilds its configuration on every change does)."""

    def __init__(
        self, clusters: int, endpoints_per_cluster: int, *, one_snapshot: bool = False
    ) -> None:
        self.clusters = clusters
        self.endpoints = endpoints_per_cluster
        self.version = 0
        self.snapshots = SnapshotCache(group=same_for_all)
        self.assignments = LinearCache(ENDPOINT)
        self.cache: Any = MuxCache({ENDPOINT: self.assignments}, default=self.snapshots)
        self._static: Snapshot | None = None
        self._static_clusters = -1
        self._one_snapshot = one_snapshot
        self._assignments: dict[str, Any] = {}
        if one_snapshot:
            self.cache = self.snapshots

    def push(self, clusters: int, endpoints_per_cluster: int, changed: int | None) -> None:
        self.version += 1
        if self._one_snapshot:
            self._rebuild(clusters, endpoints_per_cluster, changed)
            return
        if clusters != self._static_clusters:
            self._static = Snapshot(
                [b.eds_cluster(cluster_name(i)) for i in range(clusters)]
                + [
                    b.http_listener("listener_0", 10000, "route_0"),
                    b.route_configuration("route_0", [("/", cluster_name(0))]),
                ]
            )
            self._static_clusters = clusters
            self.snapshots.set_snapshot(None, self._static)
        changes = range(clusters if changed is None else min(changed, clusters))
        self.assignments.update(
            put=[
                b.load_assignment(
                    cluster_name(i), endpoints(i, endpoints_per_cluster, self.version)
                )
                for i in changes
            ],
            delete=[cluster_name(i) for i in range(clusters, self.clusters)],
        )
        self.clusters, self.endpoints = clusters, endpoints_per_cluster

    def _rebuild(self, clusters: int, endpoints_per_cluster: int, changed: int | None) -> None:
        """The whole state, every message built anew, into a new snapshot."""
        assignments = self._assignments
        for i in range(clusters if changed is None else min(changed, clusters)):
            assignments[cluster_name(i)] = b.load_assignment(
                cluster_name(i), endpoints(i, endpoints_per_cluster, self.version)
            )
        for i in range(clusters, self.clusters):
            assignments.pop(cluster_name(i), None)
        self.snapshots.set_snapshot(
            None,
            Snapshot(
                [b.eds_cluster(cluster_name(i)) for i in range(clusters)]
                + [
                    b.http_listener("listener_0", 10000, "route_0"),
                    b.route_configuration("route_0", [("/", cluster_name(0))]),
                ]
                + list(assignments.values())
            ),
        )
        self.clusters, self.endpoints = clusters, endpoints_per_cluster


class Diagnostics:
    """``--diag DIR``: every ``every`` pushes, what the server process holds, as JSON.

    Each report has the RSS; what a full collection found in reference cycles (by type,
    and the bytes and strings those hold), which is what waits for the collector; the count
    of live objects by type and the containers that grew since the last report; the bytes
    each process-wide memo holds; and, when tracemalloc traces (``PYTHONTRACEMALLOC=N``),
    the allocation sites that grew most since the first report. For finding what grows in
    a soak. Each report runs full collections, so a server under ``--diag`` does not show
    the growth that waits for the collector (compare runs without it); tracemalloc slows it
    down several times.
    """

    def __init__(self, directory: str, every: int) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.every = every
        self._first: tracemalloc.Snapshot | None = None
        self._types: collections.Counter[str] | None = None
        self._sizes: dict[int, tuple[str, int]] = {}

    def after(self, version: int, server: XdsServer) -> None:
        if version % self.every:
            return
        # What a full collection frees now: garbage in reference cycles that waits for it.
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        gc.set_debug(0)
        cycles = collections.Counter(type(o).__qualname__ for o in gc.garbage)
        held = {id(o): o for o in gc.get_referents(*gc.garbage) if isinstance(o, bytes | str)}
        cyclic_bytes = sum(sys.getsizeof(o) for o in held.values())
        del held
        gc.garbage.clear()
        gc.collect()
        objects = gc.get_objects()
        types = collections.Counter(type(o).__qualname__ for o in objects)
        # A container that grows does not add to the counts: its length does.
        sizes = {
            id(o): (type(o).__qualname__, len(o))
            for o in objects
            if isinstance(o, (dict, list, set, collections.deque)) and len(o) >= 50
        }
        grew = sorted(
            (
                (size - self._sizes[key][1], name, size)
                for key, (name, size) in sizes.items()
                if key in self._sizes and size > self._sizes[key][1]
            ),
            reverse=True,
        )
        self._sizes = sizes
        del objects
        report: dict[str, Any] = {
            "version": version,
            "rss_kb": _rss_kb(),
            "streams": len(list(server.streams())),
            "objects": sum(types.values()),
            "cyclic_garbage": dict(cycles.most_common(25)),
            "cyclic_garbage_objects": sum(cycles.values()),
            "cyclic_garbage_bytes_held": cyclic_bytes,
            "types": dict(types.most_common(40)),
            "containers_grown": [f"{name}: +{more} to {size}" for more, name, size in grew[:20]],
            "memo_bytes": {memo.name: memo.bytes for memo in memo_usage()},
        }
        if self._types is not None:
            growth = types - self._types
            report["types_grown"] = dict(growth.most_common(30))
        else:
            self._types = types
        if tracemalloc.is_tracing():
            snapshot = tracemalloc.take_snapshot().filter_traces(
                [tracemalloc.Filter(False, tracemalloc.__file__)]
            )
            report["traced_kb"] = tracemalloc.get_traced_memory()[0] // 1024
            if self._first is None:
                self._first = snapshot
            else:
                report["grown"] = [
                    {
                        "kb": round(stat.size_diff / 1024, 1),
                        "count": stat.count_diff,
                        "where": stat.traceback.format()[-12:],
                    }
                    for stat in snapshot.compare_to(self._first, "traceback")[:25]
                ]
        path = self.directory / f"diag-{version:06d}.json"
        path.write_text(json.dumps(report, indent=1) + "\n")


def _rss_kb() -> int:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


async def serve(
    host: str,
    port: int,
    clusters: int,
    endpoints_per_cluster: int,
    metrics: bool,
    diag: Diagnostics | None = None,
    transport_name: str = "http2",
    tune_gc: bool = True,
    max_streams: int | None = None,
    reuse_port: bool = False,
    track_revisions: bool = True,
    one_snapshot: bool = False,
) -> None:
    workload = Workload(clusters, endpoints_per_cluster, one_snapshot=one_snapshot)
    workload.push(clusters, endpoints_per_cluster, None)
    limits = ServerLimits() if max_streams is None else ServerLimits(max_streams=max_streams)
    server = XdsServer(
        workload.cache,
        control_plane_id="xdscore-bench",
        metrics=None if metrics else False,
        server_limits=limits,
        track_revisions=track_revisions,
    )
    if tune_gc:
        tune_collector()
    kind = Http2Transport if transport_name == "http2" else GrpclibTransport
    async with kind(server) as transport:
        bound = await transport.start(host, port, reuse_port=reuse_port)
        print(f"LISTENING addr={host}:{bound}", flush=True)
        while line := await anyio.to_thread.run_sync(sys.stdin.readline):
            words = line.split()
            if not words:
                continue
            if words[0] == "quit":
                break
            if words[0] == "push":
                numbers = [int(word) for word in words[1:]]
                r = numbers[0] if numbers else workload.clusters
                e = numbers[1] if len(numbers) > 1 else workload.endpoints
                k = numbers[2] if len(numbers) > 2 else None
                workload.push(r, e, k)
                if diag is not None:
                    diag.after(workload.version, server)
                print(
                    f"SNAPSHOT_SET version={workload.version} clusters={r} endpoints={e} "
                    f"mono={time.monotonic():.6f}",
                    flush=True,
                )


def supervise(host: str, port: int, workers: int, worker_args: list[str]) -> None:
    """``--workers``: start the workers on one port, then relay the protocol to them."""
    reserved = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    reserved.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    reserved.bind((host, port))  # never listens: it only holds the port for the workers
    port = reserved.getsockname()[1]
    command = [sys.executable, __file__, "--addr", f"{host}:{port}", "--reuse-port", *worker_args]
    children = [
        subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        for _ in range(workers)
    ]

    def expect(child: subprocess.Popen[str], word: str) -> str:
        assert child.stdout is not None
        while line := child.stdout.readline():
            if line.startswith(word):
                return line
        raise SystemExit(f"a worker exited before printing {word}")

    def tell(line: str) -> None:
        for child in children:
            assert child.stdin is not None
            child.stdin.write(line)
            child.stdin.flush()

    try:
        for child in children:
            expect(child, "LISTENING")
        print(f"LISTENING addr={host}:{port}", flush=True)
        while line := sys.stdin.readline():
            words = line.split()
            if words and words[0] == "quit":
                break
            if words and words[0] == "push":
                tell(line)
                answers = [expect(child, "SNAPSHOT_SET") for child in children]
                last = max(answers, key=lambda answer: float(answer.rsplit("mono=", 1)[1]))
                print(last.strip(), flush=True)
        tell("quit\n")
        for child in children:
            child.wait(10)
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
        reserved.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--addr", default="127.0.0.1:0")
    parser.add_argument("--clusters", type=int, default=1000)
    parser.add_argument("--endpoints", type=int, default=10)
    parser.add_argument(
        "--no-metrics", action="store_true", help="record no Prometheus metrics (cost check)"
    )
    parser.add_argument(
        "--diag",
        metavar="DIR",
        help="write what the process holds into DIR (slow; see Diagnostics)",
    )
    parser.add_argument(
        "--transport",
        choices=("http2", "grpclib"),
        default="http2",
        help="xdscore's own HTTP/2 server (the default) or grpclib's",
    )
    parser.add_argument(
        "--default-gc",
        action="store_true",
        help="keep CPython's collector settings (xdscore serve tunes them: tune_collector)",
    )
    parser.add_argument(
        "--loop",
        choices=LOOPS,
        default="auto",
        help="the event loop, as xdscore serve takes it: uvloop's where installed (auto)",
    )
    parser.add_argument("--diag-every", type=int, default=100, help="pushes between --diag reports")
    parser.add_argument("--workers", type=int, default=1, help="server processes on one port")
    parser.add_argument("--max-streams", type=int, help="each process's ServerLimits.max_streams")
    parser.add_argument("--reuse-port", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "--no-revisions",
        action="store_true",
        help="XdsServer(track_revisions=False): what revision tracking costs, by difference",
    )
    parser.add_argument(
        "--one-snapshot",
        action="store_true",
        help="one snapshot cache, the whole state rebuilt into a new snapshot on each push "
        "(instead of a static snapshot and a linear cache of endpoint sets)",
    )
    args = parser.parse_args()
    host, _, port = args.addr.rpartition(":")
    if args.workers > 1:
        if args.diag:
            parser.error("--diag is for one process")
        passed = ["--clusters", str(args.clusters), "--endpoints", str(args.endpoints)]
        passed += ["--transport", args.transport, "--loop", args.loop]
        passed += ["--no-metrics"] * args.no_metrics + ["--default-gc"] * args.default_gc
        passed += ["--no-revisions"] * args.no_revisions
        passed += ["--one-snapshot"] * args.one_snapshot
        if args.max_streams is not None:
            passed += ["--max-streams", str(args.max_streams)]
        supervise(host, int(port), args.workers, passed)
        return
    diag = Diagnostics(args.diag, args.diag_every) if args.diag else None
    anyio.run(
        serve,
        host,
        int(port),
        args.clusters,
        args.endpoints,
        not args.no_metrics,
        diag,
        args.transport,
        not args.default_gc,
        args.max_streams,
        args.reuse_port,
        not args.no_revisions,
        args.one_snapshot,
        backend_options=loop_options(args.loop),
    )


if __name__ == "__main__":
    main()
