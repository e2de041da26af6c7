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
"""

from __future__ import annotations

import argparse
import sys
import time

import anyio
import anyio.to_thread

from xdscore import LinearCache, MuxCache, Snapshot, SnapshotCache, XdsServer, same_for_all
from xdscore import builders as b
from xdscore.transport import GrpclibTransport
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
    """Builds each version of the standard workload into a snapshot cache and a linear cache."""

    def __init__(self, clusters: int, endpoints_per_cluster: int) -> None:
        self.clusters = clusters
        self.endpoints = endpoints_per_cluster
        self.version = 0
        self.snapshots = SnapshotCache(group=same_for_all)
        self.assignments = LinearCache(ENDPOINT)
        self.cache = MuxCache({ENDPOINT: self.assignments}, default=self.snapshots)
        self._static: Snapshot | None = None
        self._static_clusters = -1

    def push(self, clusters: int, endpoints_per_cluster: int, changed: int | None) -> None:
        self.version += 1
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


async def serve(
    host: str, port: int, clusters: int, endpoints_per_cluster: int, metrics: bool
) -> None:
    workload = Workload(clusters, endpoints_per_cluster)
    workload.push(clusters, endpoints_per_cluster, None)
    server = XdsServer(
        workload.cache, control_plane_id="xdscore-bench", metrics=None if metrics else False
    )
    async with GrpclibTransport(server) as transport:
        bound = await transport.start(host, port)
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
                print(
                    f"SNAPSHOT_SET version={workload.version} clusters={r} endpoints={e} "
                    f"mono={time.monotonic():.6f}",
                    flush=True,
                )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--addr", default="127.0.0.1:0")
    parser.add_argument("--clusters", type=int, default=1000)
    parser.add_argument("--endpoints", type=int, default=10)
    parser.add_argument(
        "--no-metrics", action="store_true", help="record no Prometheus metrics (cost check)"
    )
    args = parser.parse_args()
    host, _, port = args.addr.rpartition(":")
    anyio.run(serve, host, int(port), args.clusters, args.endpoints, not args.no_metrics)


if __name__ == "__main__":
    main()
