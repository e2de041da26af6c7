"""A neutral xDS load generator: N Envoy-like clients over real gRPC on loopback.

Each client has its own channel (its own TCP connection), opens one ADS stream (SotW or
Delta), asks for clusters and listeners (wildcard), then for the endpoints of the clusters
it got and the route configurations its listener names, and ACKs everything, as Envoy does.
It talks only the standard protocol, so any xDS server can be measured:

    python benchmarks/loadgen.py --target 127.0.0.1:18000 --clients 100 --clusters 1000
    python benchmarks/loadgen.py --clients 100 --clusters 1000 --server-cmd \\
        "python benchmarks/xds_server.py --addr {addr} --clusters {clusters} \\
         --endpoints {endpoints}"

With ``--server-cmd`` the server is started here, pinned to CPU 0 (this process to CPU 1),
and driven over its stdin/stdout (see benchmarks/xds_server.py): pushes are timed from the
``mono=`` the server prints when its cache holds the new version to the moment each client
ACKs it. The report (JSON on stdout, or ``--json FILE``) holds initial convergence, update
convergence (total, per-client median and p99), responses and bytes received, the server's
CPU seconds and peak RSS from /proc, and this process's own CPU use, so that a saturated
load generator is not mistaken for a slow server.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shlex
import socket
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import grpc
from envoy.service.discovery.v3 import discovery_pb2

from xdscore.wire._reader import name_field
from xdscore.wire._references import references

ADS = "/envoy.service.discovery.v3.AggregatedDiscoveryService/"
CDS = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
EDS = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
LDS = "type.googleapis.com/envoy.config.listener.v3.Listener"
RDS = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"
UNLIMITED = [
    ("grpc.max_receive_message_length", -1),
    ("grpc.max_send_message_length", -1),
    ("grpc.use_local_subchannel_pool", 1),
]


@dataclass
class Client:
    """One simulated proxy: what it holds, and when it took each update."""

    index: int
    delta: bool
    node: bytes
    names: dict[str, list[str]] = field(default_factory=dict)
    held: dict[str, set[str]] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)
    nonces: dict[str, str] = field(default_factory=dict)
    responses: int = 0
    bytes: int = 0
    converged_at: float = 0.0
    updated_at: float = 0.0
    eds_since_push: int = 0
    eds_version_at_push: str = ""
    error: str = ""

    def converged(self, clusters: int) -> bool:
        held = self.held
        return (
            len(held.get(CDS, ())) == clusters
            and len(held.get(EDS, ())) == clusters
            and len(held.get(LDS, ())) >= 1
            and len(held.get(RDS, ())) >= 1
        )


class Fleet:
    """N clients against one target; tracks convergence and per-push update times."""

    def __init__(self, target: str, clients: int, clusters: int, delta: bool) -> None:
        self.target = target
        self.clusters = clusters
        self.delta = delta
        self.clients = [
            Client(index=i, delta=delta, node=_node(f"loadgen-{i}")) for i in range(clients)
        ]
        self.all_converged = asyncio.Event()
        self.all_updated = asyncio.Event()
        self.pushing = False
        self.expected_changes = clusters
        self._converged = 0
        self._updated = 0
        self._name_cache: dict[tuple[str, str, int], set[str]] = {}

    async def run_client(self, client: Client) -> None:
        channel = grpc.aio.insecure_channel(self.target, options=UNLIMITED)
        method = "DeltaAggregatedResources" if self.delta else "StreamAggregatedResources"
        call = channel.stream_stream(ADS + method)()
        try:
            if self.delta:
                await self._delta(client, call)
            else:
                await self._sotw(client, call)
        except (grpc.aio.AioRpcError, asyncio.CancelledError) as exc:
            client.error = str(exc)[:200]
        finally:
            call.cancel()
            await channel.close()

    async def _sotw(self, client: Client, call: Any) -> None:
        async def request(type_url: str, names: list[str]) -> None:
            client.names[type_url] = names
            message = discovery_pb2.DiscoveryRequest(
                type_url=type_url,
                version_info=client.versions.get(type_url, ""),
                resource_names=names,
                response_nonce=client.nonces.get(type_url, ""),
            )
            message.node.ParseFromString(client.node)
            await call.write(message.SerializeToString())

        await request(CDS, [])
        await request(LDS, [])
        while True:
            data = await call.read()
            if data is grpc.aio.EOF:
                return
            response = discovery_pb2.DiscoveryResponse.FromString(data)
            type_url = response.type_url
            client.responses += 1
            client.bytes += len(data)
            client.versions[type_url] = response.version_info
            client.nonces[type_url] = response.nonce
            if type_url in (CDS, LDS):
                client.held[type_url] = set(self._names(response))
            elif len(client.held.get(type_url, ())) < len(client.names.get(type_url, ())):
                # Names matter only until the client holds everything it asked for.
                client.held.setdefault(type_url, set()).update(self._names(response))
            await request(type_url, client.names.get(type_url, []))
            if type_url == CDS:
                wanted = sorted(client.held[CDS])
                if wanted != client.names.get(EDS):
                    await request(EDS, wanted)
            elif type_url == LDS:
                routes = sorted(_route_names(response.resources))
                if routes != client.names.get(RDS):
                    await request(RDS, routes)
            elif (
                type_url == EDS
                and self.pushing
                and not client.updated_at
                and response.version_info != client.eds_version_at_push
            ):
                self._mark_updated(client)
            self._check_converged(client)

    async def _delta(self, client: Client, call: Any) -> None:
        async def subscribe(type_url: str, names: list[str]) -> None:
            message = discovery_pb2.DeltaDiscoveryRequest(
                type_url=type_url, resource_names_subscribe=names
            )
            if not client.names:
                message.node.ParseFromString(client.node)
            client.names.setdefault(type_url, []).extend(names)
            await call.write(message.SerializeToString())

        await subscribe(CDS, [])
        await subscribe(LDS, [])
        while True:
            data = await call.read()
            if data is grpc.aio.EOF:
                return
            response = discovery_pb2.DeltaDiscoveryResponse.FromString(data)
            type_url = response.type_url
            client.responses += 1
            client.bytes += len(data)
            held = client.held.setdefault(type_url, set())
            held.update(r.name for r in response.resources)
            held.difference_update(response.removed_resources)
            ack = discovery_pb2.DeltaDiscoveryRequest(
                type_url=type_url, response_nonce=response.nonce
            )
            await call.write(ack.SerializeToString())
            if type_url == CDS:
                new = sorted(held - set(client.names.get(EDS, ())))
                if new:
                    await subscribe(EDS, new)
            elif type_url == LDS:
                routes = _route_names(r.resource for r in response.resources)
                new = sorted(routes - set(client.names.get(RDS, ())))
                if new:
                    await subscribe(RDS, new)
            elif type_url == EDS and self.pushing and not client.updated_at:
                client.eds_since_push += len(response.resources)
                if client.eds_since_push >= self.expected_changes:
                    self._mark_updated(client)
            self._check_converged(client)

    def _names(self, response: Any) -> set[str]:
        """Resource names of a SotW response, read once per distinct response body.

        Every client of one server gets byte-identical responses for the same content, so
        the fleet reads names once, like one proxy would, instead of once per client.
        """
        key = (response.type_url, response.version_info, len(response.resources))
        names = self._name_cache.get(key)
        if names is None:
            names = self._name_cache[key] = {name_field(r.value) for r in response.resources}
        return names

    def _check_converged(self, client: Client) -> None:
        if not client.converged_at and client.converged(self.clusters):
            client.converged_at = time.monotonic()
            self._converged += 1
            if self._converged == len(self.clients):
                self.all_converged.set()

    def _mark_updated(self, client: Client) -> None:
        client.updated_at = time.monotonic()
        self._updated += 1
        if self._updated == len(self.clients):
            self.all_updated.set()

    def arm_push(self, expected_changes: int) -> None:
        self.all_updated = asyncio.Event()
        self._updated = 0
        self.expected_changes = expected_changes
        for client in self.clients:
            client.updated_at = 0.0
            client.eds_since_push = 0
            client.eds_version_at_push = client.versions.get(EDS, "")
        self.pushing = True


def _node(node_id: str) -> bytes:
    from envoy.config.core.v3 import base_pb2

    node = base_pb2.Node(id=node_id, cluster="loadgen", user_agent_name="xdscore-loadgen")
    return bytes(node.SerializeToString())


def _route_names(resources: Any) -> set[str]:
    names = set()
    for item in resources:
        for ref in references(LDS, item.value):
            if ref.type_url == RDS:
                names.add(ref.name)
    return names


class ServerProcess:
    """The server under test, spawned from ``--server-cmd`` and driven over stdin/stdout."""

    def __init__(self, command: str) -> None:
        self.command = command
        self.process: asyncio.subprocess.Process | None = None
        self.addr = ""

    async def start(self, timeout: float) -> str:
        self.process = await asyncio.create_subprocess_exec(
            *shlex.split(self.command),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        os.sched_setaffinity(self.process.pid, {0})
        line = await self._expect("LISTENING", timeout)
        self.addr = line.split("addr=", 1)[1].strip()
        return self.addr

    async def _expect(self, word: str, timeout: float) -> str:
        assert self.process is not None
        assert self.process.stdout is not None
        async with asyncio.timeout(timeout):
            while True:
                raw = await self.process.stdout.readline()
                if not raw:
                    raise RuntimeError(f"server exited before printing {word}")
                line = raw.decode().strip()
                if line.startswith(word):
                    return line

    async def push(self, args: str, timeout: float) -> float:
        assert self.process is not None
        assert self.process.stdin is not None
        self.process.stdin.write(f"push {args}\n".encode())
        await self.process.stdin.drain()
        line = await self._expect("SNAPSHOT_SET", timeout)
        return float(line.split("mono=", 1)[1].split()[0])

    def cpu_seconds(self) -> float:
        assert self.process is not None
        with open(f"/proc/{self.process.pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        ticks = os.sysconf("SC_CLK_TCK")
        return (int(fields[11]) + int(fields[12])) / ticks

    def peak_rss_mb(self) -> float:
        assert self.process is not None
        with open(f"/proc/{self.process.pid}/status") as handle:
            for line in handle:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
        return 0.0

    async def stop(self) -> None:
        if self.process is None or self.process.returncode is not None:
            return
        assert self.process.stdin is not None
        try:
            self.process.stdin.write(b"quit\n")
            await self.process.stdin.drain()
            await asyncio.wait_for(self.process.wait(), 10)
        except (TimeoutError, BrokenPipeError, ConnectionResetError):
            self.process.kill()
            await self.process.wait()


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def _own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def run(args: argparse.Namespace) -> dict[str, Any]:
    server: ServerProcess | None = None
    target = args.target
    os.sched_setaffinity(0, {1})
    if args.server_cmd:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        command = args.server_cmd.format(
            addr=f"127.0.0.1:{port}", clusters=args.clusters, endpoints=args.endpoints
        )
        server = ServerProcess(command)
        target = await server.start(args.timeout)
    report: dict[str, Any] = {
        "clients": args.clients,
        "clusters": args.clusters,
        "endpoints": args.endpoints,
        "protocol": "delta" if args.delta else "sotw",
        "target": target,
    }
    fleet = Fleet(target, args.clients, args.clusters, args.delta)
    tasks = []
    try:
        cpu0 = server.cpu_seconds() if server else 0.0
        own0 = _own_cpu()
        started = time.monotonic()
        tasks = [asyncio.create_task(fleet.run_client(client)) for client in fleet.clients]
        async with asyncio.timeout(args.timeout):
            await fleet.all_converged.wait()
        report["initial_convergence_s"] = round(time.monotonic() - started, 3)
        if server:
            report["initial_server_cpu_s"] = round(server.cpu_seconds() - cpu0, 3)
        report["initial_loadgen_cpu_s"] = round(_own_cpu() - own0, 3)
        pushes = []
        for _ in range(args.pushes):
            if server is None:
                break
            await asyncio.sleep(args.settle)
            fleet.arm_push(args.changed or args.clusters)
            cpu0, own0 = server.cpu_seconds(), _own_cpu()
            responses0 = sum(c.responses for c in fleet.clients)
            bytes0 = sum(c.bytes for c in fleet.clients)
            push_args = f"{args.clusters} {args.endpoints}"
            if args.changed:
                push_args += f" {args.changed}"
            set_at = await server.push(push_args, args.timeout)
            async with asyncio.timeout(args.timeout):
                await fleet.all_updated.wait()
            await asyncio.sleep(0.2)
            latencies = [c.updated_at - set_at for c in fleet.clients]
            pushes.append(
                {
                    "update_convergence_s": round(max(latencies), 3),
                    "client_median_s": round(statistics.median(latencies), 3),
                    "client_p99_s": round(_percentile(latencies, 0.99), 3),
                    "server_cpu_s": round(server.cpu_seconds() - cpu0, 3),
                    "loadgen_cpu_s": round(_own_cpu() - own0, 3),
                    "responses": sum(c.responses for c in fleet.clients) - responses0,
                    "mbytes": round((sum(c.bytes for c in fleet.clients) - bytes0) / 1e6, 1),
                }
            )
        report["pushes"] = pushes
        if server:
            report["server_peak_rss_mb"] = round(server.peak_rss_mb(), 1)
        report["errors"] = [c.error for c in fleet.clients if c.error][:5]
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if server:
            await server.stop()
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", help="HOST:PORT of a running server")
    parser.add_argument("--server-cmd", help="command with {addr} {clusters} {endpoints}")
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--clusters", type=int, default=1000)
    parser.add_argument("--endpoints", type=int, default=10)
    parser.add_argument("--delta", action="store_true", help="Delta ADS instead of SotW")
    parser.add_argument("--pushes", type=int, default=3)
    parser.add_argument("--changed", type=int, default=0, help="endpoint sets per push")
    parser.add_argument("--settle", type=float, default=1.0, help="seconds between pushes")
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--json", help="write the report here instead of stdout")
    args = parser.parse_args()
    if not args.target and not args.server_cmd:
        parser.error("give --target or --server-cmd")
    report = asyncio.run(run(args))
    text = json.dumps(report, indent=2)
    if args.json:
        with open(args.json, "w") as handle:
            handle.write(text + "\n")
    print(text)
    if report.get("errors"):
        sys.exit(1)


if __name__ == "__main__":
    main()
