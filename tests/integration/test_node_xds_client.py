"""xdscore against gRPC's Node.js xDS client (``@grpc/grpc-js-xds`` from npm).

The client is ``node/xds_client.js``, run with the packages ``make node`` installs into
``node/node_modules`` (``npm ci`` from the committed ``package-lock.json``), a bootstrap file
and an ``xds:///`` target. The control plane (xdscore on the grpclib transport) and the
backends (grpcio servers that answer with their own name) are those of the grpcio client's
tests, in this process, on loopback ports.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import attrs
import pytest
from envoy.config.route.v3 import route_components_pb2, route_pb2

from xdscore import CLUSTER, ENDPOINT, LISTENER, ROUTE, Snapshot
from xdscore import builders as b

from ..factories import wait_until
from ._client_process import ClientProcess, running, start
from .test_grpc_xds_client import (
    METHOD,
    ROUTE_NAME,
    TARGET,
    ControlPlane,
    Recorder,
    control_plane,
    eventually,
    grpc_backend,
    snapshot,
)

pytestmark = [pytest.mark.anyio, pytest.mark.grpc_client, pytest.mark.timeout(60)]

NODE_DIR = Path(__file__).with_name("node")
SCRIPT = NODE_DIR / "xds_client.js"
NODE_ID = "node-client"
XDS_TYPES = (LISTENER, ROUTE, CLUSTER, ENDPOINT)
SPLIT_RPCS = 2000
"""RPCs over which the 75/25 split is measured: one standard deviation of the share is
sqrt(0.75 * 0.25 / 2000) = 0.97 points, so ±5 points is 5.2 of them (binomially, a false
failure once in about 4 million runs; 1,000 RPCs would fail once in 4,400)."""
MOVES = (("cluster-a", "cluster-b"), ("cluster-b", "cluster-a"), ("cluster-a", "cluster-b"))
"""The route changes after the split, as (from, to): all traffic to ``to``, and ``from``
deleted in the same snapshot."""
BURST, PUSH_AFTER = 2.0, 0.5
"""Seconds of RPCs around each route change, and when in them the change is pushed."""
MOVE_WITHIN_MS = 1000.0
"""Bound on the time from a route change to the last RPC the old cluster answers."""


def weighted_snapshot(weights: dict[str, int], ports: dict[str, int]) -> Snapshot:
    """The listener ``TARGET`` whose one route splits traffic over ``weights`` (cluster ->
    weight); each cluster's endpoints are its backend's port in ``ports``."""
    split = route_components_pb2.WeightedCluster()
    for cluster, weight in weights.items():
        entry = split.clusters.add(name=cluster)
        entry.weight.value = weight
    host = route_components_pb2.VirtualHost(name="split", domains=["*"])
    route = host.routes.add()
    route.match.prefix = "/"
    route.route.weighted_clusters.CopyFrom(split)
    resources: list[object] = [
        b.api_listener(TARGET, ROUTE_NAME),
        route_pb2.RouteConfiguration(name=ROUTE_NAME, virtual_hosts=[host]),
    ]
    for cluster, port in ports.items():
        resources.append(b.eds_cluster(cluster, http2=True))
        resources.append(b.load_assignment(cluster, [("127.0.0.1", port)]))
    return Snapshot(resources)


def node_binary() -> str:
    """``node``, and the npm packages the client needs: missing ones fail the test."""
    node = shutil.which("node")
    assert node, "node is not on PATH: the Node.js xDS client tests need it"
    installed = NODE_DIR / "node_modules" / "@grpc" / "grpc-js-xds" / "package.json"
    assert installed.is_file(), f"{installed} is missing: run `make node` (npm ci in {NODE_DIR})"
    return node


Summary = dict[str, Any]
"""What the client reports for a series of RPCs (see ``node/xds_client.js``)."""


class NodeClient(ClientProcess):
    """The Node.js client process: one command line in, one JSON line out."""

    async def calls(self, count: int) -> Summary:
        await self.send(f"calls {count}")
        summary: Summary = json.loads(await self.read_line(timeout=30))
        return summary

    async def burst(self, seconds: float, during: Callable[[], None], after: float) -> Summary:
        """RPCs for ``seconds``; ``during()`` runs ``after`` seconds in, while they flow."""
        await self.send(f"burst {seconds}")
        assert await self.read_line(timeout=5) == "BURSTING"
        # Not a wait for a condition: the change must land while RPCs are in flight.
        await anyio.sleep(after)
        during()
        summary: Summary = json.loads(await self.read_line(timeout=seconds + 15))
        return summary


def write_bootstrap(path: Path, xds_port: int) -> None:
    server = {
        "server_uri": f"127.0.0.1:{xds_port}",
        "channel_creds": [{"type": "insecure"}],
        "server_features": ["xds_v3"],
    }
    node = {
        "id": NODE_ID,
        "cluster": "node-clients",
        "locality": {"zone": "z"},
        "metadata": {"runtime": "node"},
    }
    path.write_text(json.dumps({"xds_servers": [server], "node": node}))


@asynccontextmanager
async def node_client(xds_port: int, tmp_path: Path) -> AsyncIterator[NodeClient]:
    """The client, with a bootstrap file naming ``xds_port``."""
    bootstrap = tmp_path / "bootstrap.json"
    write_bootstrap(bootstrap, xds_port)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRPC_XDS_BOOTSTRAP")}
    env["GRPC_XDS_BOOTSTRAP"] = str(bootstrap)
    stderr_path = tmp_path / "node_client.stderr"
    process = await start(
        [node_binary(), str(SCRIPT), TARGET, METHOD], stderr=stderr_path, env=env, cwd=NODE_DIR
    )
    async with running(NodeClient(process, stderr_path)) as client:
        yield client


async def warm_up(client: NodeClient, replies: set[str], recorder: Recorder) -> None:
    """RPCs until a batch succeeds entirely and is answered by every one of ``replies``."""
    seen: list[Summary] = []

    async def ready() -> bool:
        seen.append(await client.calls(40))
        return seen[-1]["failed"] == 0 and set(seen[-1]["replies"]) == replies

    try:
        await wait_until(ready, timeout=15, interval=0.1, what=f"replies from {replies}")
    except TimeoutError:
        raise AssertionError(
            f"no batch answered by {replies}; last {seen[-1:]}\n"
            f"exchange:\n{recorder.transcript()}\nclient log:\n{client.log_tail()}"
        ) from None


@attrs.frozen
class Split:
    """A control plane serving the 75/25 split, and a client whose RPCs reach both sides."""

    cp: ControlPlane
    client: NodeClient
    ports: dict[str, int]
    """Each cluster's backend port."""


@asynccontextmanager
async def split_75_25(tmp_path: Path, *, ordered_ads: bool = True) -> AsyncIterator[Split]:
    with grpc_backend("backend-a") as port_a, grpc_backend("backend-b") as port_b:
        ports = {"cluster-a": port_a, "cluster-b": port_b}
        initial = weighted_snapshot({"cluster-a": 75, "cluster-b": 25}, ports)
        async with (
            control_plane(initial, ordered_ads=ordered_ads) as cp,
            node_client(cp.port, tmp_path) as client,
        ):
            await warm_up(client, {"backend-a", "backend-b"}, cp.recorder)
            await eventually(
                lambda: all(cp.recorder.acked_latest(t) for t in XDS_TYPES),
                "an ACK of every type",
                cp.recorder,
            )
            yield Split(cp, client, ports)


@attrs.frozen
class Move:
    """One route change under traffic: the RPCs around it, and when it was pushed."""

    away: str
    to: str
    pushed_at: float
    """Milliseconds since the epoch, as the client's times."""
    rpcs: Summary


async def route_moves(split: Split) -> list[Move]:
    """The changes of ``MOVES``, each pushed ``PUSH_AFTER`` s into ``BURST`` s of RPCs."""
    moves = []
    for away, to in MOVES:
        pushed: list[float] = []

        def push(to: str = to, pushed: list[float] = pushed) -> None:
            pushed.append(time.time() * 1000)
            split.cp.cache.set_snapshot(None, snapshot(to, {to: split.ports[to]}))

        rpcs = await split.client.burst(BURST, push, after=PUSH_AFTER)
        moves.append(Move(away, to, pushed[0], rpcs))
    return moves


def backend(cluster: str) -> str:
    return cluster.replace("cluster-", "backend-")


def share(summary: Summary, reply: str) -> float:
    count: int = summary["replies"].get(reply, {}).get("count", 0)
    calls: int = summary["calls"]
    return count / calls


async def test_node_client_splits_traffic_75_25(tmp_path: Path) -> None:
    async with split_75_25(tmp_path) as running_split:
        recorder = running_split.cp.recorder
        split = await running_split.client.calls(SPLIT_RPCS)

    log = recorder.transcript()
    assert split["calls"] == SPLIT_RPCS, split
    assert split["failed"] == 0, split
    assert set(split["replies"]) == {"backend-a", "backend-b"}, split
    assert abs(share(split, "backend-a") - 0.75) <= 0.05, split
    assert abs(share(split, "backend-b") - 0.25) <= 0.05, split
    assert not recorder.nacks(), f"the client NACKed:\n{log}"

    # One SotW ADS stream; the node is the bootstrap's, plus what grpc-js-xds adds to it.
    assert len(recorder.streams) == 1, log
    (stream,) = recorder.streams
    assert stream.aggregated
    assert stream.protocol == "sotw"
    node = stream.node
    assert node is not None
    assert (node.id, node.cluster) == (NODE_ID, "node-clients")
    assert node.locality is not None
    assert node.locality.zone == "z"
    assert node.metadata == {"runtime": "node"}
    assert node.user_agent_name == "gRPC Node Pure JS"
    assert node.user_agent_version == "1.14.1"  # package-lock.json pins it
    assert node.client_features == ("envoy.lb.does_not_support_overprovisioning",)
    assert not node.supports("xds.config.resource-in-sotw")
    # The node only on the stream's first request, as grpcio does.
    assert [r.node is not None for _, r in recorder.requests].count(True) == 1, log
    assert recorder.requests[0][1].node is not None

    # Each type asked for by name, both clusters and their endpoints.
    first_names: dict[str, set[str]] = {}
    for _, request in recorder.requests:
        first_names.setdefault(request.type_url, set(request.resource_names))
    assert first_names[LISTENER] == {TARGET}, log
    assert first_names[ROUTE] == {ROUTE_NAME}, log
    for type_url in (CLUSTER, ENDPOINT):
        assert recorder.subscriptions(type_url)[-1].subscription.names == {
            "cluster-a",
            "cluster-b",
        }, log


async def test_node_client_follows_route_changes_without_failed_rpcs(tmp_path: Path) -> None:
    # Make-before-break keeps the cluster a change deletes until the client has ACKed the
    # route that no longer names it, so no RPC is picked for a cluster the client lost.
    async with split_75_25(tmp_path) as split:
        recorder = split.cp.recorder
        moves = await route_moves(split)
        after = await split.client.calls(200)

        def settled() -> bool:
            return all(
                recorder.subscriptions(t)[-1].subscription.names == {"cluster-b"}
                for t in (CLUSTER, ENDPOINT)
            ) and all(recorder.acked_latest(t) for t in XDS_TYPES)

        await eventually(settled, "CDS/EDS subscribed to cluster-b only, all ACKed", recorder)

    log = recorder.transcript()
    for move in moves:
        rpcs = move.rpcs
        assert rpcs["failed"] == 0, f"RPCs failed moving to {move.to}: {rpcs}\n{log}"
        assert set(rpcs["replies"]) == {"backend-a", "backend-b"}, rpcs
        old, new = rpcs["replies"][backend(move.away)], rpcs["replies"][backend(move.to)]
        # The old cluster answered before the change and stopped soon after it; the new one
        # answers after it.
        assert old["first"] < move.pushed_at < new["last"], rpcs
        moved_in = old["last"] - move.pushed_at
        assert moved_in < MOVE_WITHIN_MS, f"{move.away} answered {moved_in:.0f} ms after"
    assert after["failed"] == 0, after
    assert after["replies"].keys() == {"backend-b"}, after
    assert after["replies"]["backend-b"]["count"] == 200, after
    assert not recorder.nacks(), f"the client NACKed:\n{log}"
    assert len(recorder.streams) == 1, log


async def test_without_ordered_ads_the_same_route_changes_fail_rpcs(tmp_path: Path) -> None:
    """The control for the test above: without make-before-break the cluster a change deletes
    can leave the client before the route that names it, and RPCs picked for it fail."""
    async with split_75_25(tmp_path, ordered_ads=False) as split:
        moves = await route_moves(split)

    errors: Counter[str] = Counter()
    for move in moves:
        errors.update(move.rpcs["errors"])
    assert errors.total() > 0, [move.rpcs for move in moves]
    lost = {f"UNAVAILABLE Cluster resource {away} does not exist" for away, _ in MOVES}
    assert set(errors) <= lost, errors
