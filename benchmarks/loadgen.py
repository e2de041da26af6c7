"""A neutral xDS load generator: N Envoy-like clients over real gRPC on loopback.

Each client has its own connection, opens one ADS stream (SotW or Delta), asks for clusters
and listeners (wildcard), then for the endpoints of the clusters it got and the route
configurations its listener names, and ACKs everything, as Envoy does. It talks only the
standard protocol, so any xDS server can be measured. ``--client`` picks the clients:

* ``h2`` (the default, the project's own generator): xdscore's Envoy-like client machines
  run by its client driver (``xdscore.server.ClientDriver``) over the lean HTTP/2 client of
  benchmarks/h2client.py; responses with identical content are decoded once for the whole
  fleet, as one proxy would decode them, so the generator's own CPU stays low;
* ``grpcio`` (grpc-core): benchmarks/grpc_core_client.py, each client its own grpcio
  channel (grpc-core's HTTP/2 stack, its own TCP connection), every response decoded by the
  client itself with the protobuf runtime into typed resources, nothing of xdscore on its
  path. It costs the generator several times more CPU per client than ``h2``: its figures
  of server CPU hold, its convergence times are partly the generator's (the report says how
  busy it was).

    python benchmarks/loadgen.py --target 127.0.0.1:18000 --clients 100 --clusters 1000
    python benchmarks/loadgen.py --clients 100 --clusters 1000 --client grpcio --server-cmd \\
        "python benchmarks/xds_server.py --addr {addr} --clusters {clusters} \\
         --endpoints {endpoints}"

With ``--server-cmd`` the server is started here, pinned to CPU 0 (every thread of this
process to CPU 1, grpc-core's included), and driven over its stdin/stdout (see
benchmarks/xds_server.py): pushes are timed from the
``mono=`` the server prints when its cache holds the new version to the moment each client
ACKs it. The report (JSON on stdout, or ``--json FILE``) holds initial convergence, update
convergence (total, per-client median and p99), responses and bytes received, the server's
CPU seconds, its RSS once every client holds the full config and its peak RSS from /proc,
and this process's own CPU use, so that a saturated load generator is not mistaken for a
slow server (``loadgen_cpu_to_ack_s``: from the push command to the last client's ACK).
``command_to_set_s`` is the time from the push command to the server's ``mono=``: a server
that answers its open streams before it reports the version set spends part of the push
there. ``--clients 0 --pushes 0`` measures a server with no streams the same way.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import json
import os
import random
import re
import resource
import shlex
import socket
import statistics
import sys
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from envoy.config.core.v3 import base_pb2
from envoy.service.discovery.v3 import discovery_pb2
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from xdscore import CLUSTER as CDS
from xdscore import ENDPOINT as EDS
from xdscore import LISTENER as LDS
from xdscore import ROUTE as RDS
from xdscore.protocol import (
    DeltaClient,
    DeltaDiscoveryResponse,
    DiscoveryResponse,
    Node,
    Resource,
    SotwClient,
)
from xdscore.server import LOOPS, ClientDriver, loop_options, tune_collector
from xdscore.wire import decode_response, make_node
from xdscore.wire._reader import field_offset

sys.path.insert(0, str(Path(__file__).parent))
from grpc_core_client import DeltaSession, SotwSession, open_call
from h2client import CallEnded, H2Call

ADS = "/envoy.service.discovery.v3.AggregatedDiscoveryService/"
UNLIMITED = [
    ("grpc.max_receive_message_length", -1),
    ("grpc.max_send_message_length", -1),
    ("grpc.use_local_subchannel_pool", 1),
]
_RETRY = re.compile(r"retry after ([0-9.]+) s")
_MEMO = 64
"""Distinct SotW response contents remembered by the shared decoder."""
_DELTA_MEMO = 500_000
"""Distinct Delta resources remembered by the shared decoder."""


_RESOURCE_EXHAUSTED = 8
_UNAVAILABLE = 14


def _status_of(error: grpc.aio.AioRpcError | CallEnded) -> tuple[int, str]:
    """The gRPC status code and message a call ended with, from either client."""
    if isinstance(error, CallEnded):
        return error.status, error.message
    return error.code().value[0], error.details() or ""


def _envelopes() -> tuple[Any, Any]:
    """Message types reading a discovery response's envelope, its resources left as the
    bytes of each entry: a response is parsed without decoding any resource."""
    file = descriptor_pb2.FileDescriptorProto(name="loadgen_envelopes.proto", package="loadgen")
    proto = descriptor_pb2.FieldDescriptorProto
    for name, fields in (
        ("SotwEnvelope", [("version_info", 1), ("type_url", 4), ("nonce", 5)]),
        ("DeltaEnvelope", [("system_version_info", 1), ("type_url", 4), ("nonce", 5)]),
    ):
        message = file.message_type.add(name=name)
        for field_name, number in fields:
            message.field.add(
                name=field_name, number=number, type=proto.TYPE_STRING, label=proto.LABEL_OPTIONAL
            )
        message.field.add(
            name="resources", number=2, type=proto.TYPE_BYTES, label=proto.LABEL_REPEATED
        )
        if name == "DeltaEnvelope":
            message.field.add(
                name="removed_resources",
                number=6,
                type=proto.TYPE_STRING,
                label=proto.LABEL_REPEATED,
            )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return (
        message_factory.GetMessageClass(pool.FindMessageTypeByName("loadgen.SotwEnvelope")),
        message_factory.GetMessageClass(pool.FindMessageTypeByName("loadgen.DeltaEnvelope")),
    )


_SOTW_ENVELOPE, _DELTA_ENVELOPE = _envelopes()


class SharedDecoder:
    """Decodes responses for the whole fleet: content seen by one client is decoded once.

    Every client of one server gets the same resources for the same content, so SotW
    responses are keyed by (type URL, version, resource count), Delta responses by their
    exact entries (their bytes, compared), and Delta resources by (type URL, name, version);
    per client only the envelope is parsed (nonce, version, no resource decoded).
    """

    def __init__(self) -> None:
        self._sotw: OrderedDict[tuple[str, str, int], tuple[Resource, ...]] = OrderedDict()
        self._delta_responses: OrderedDict[tuple[str, int], tuple[bytes, tuple[Resource, ...]]]
        self._delta_responses = OrderedDict()
        self._delta: dict[tuple[str, str, str], Resource] = {}

    def sotw(self, data: bytes) -> DiscoveryResponse:
        message = _SOTW_ENVELOPE.FromString(data)
        key = (message.type_url, message.version_info, len(message.resources))
        resources = self._sotw.get(key)
        if resources is None:
            resources = decode_response(data).resources
            self._sotw[key] = resources
            if len(self._sotw) > _MEMO:
                self._sotw.popitem(last=False)
        return DiscoveryResponse(
            type_url=message.type_url,
            version_info=message.version_info,
            nonce=message.nonce,
            resources=resources,
        )

    def delta(self, data: bytes) -> DeltaDiscoveryResponse:
        # The entries (field 2, after the version) are compared as one slice, found without
        # parsing them: an equal slice seen before holds the same resources. (Comparing
        # costs a third of hashing them.)
        start, end = field_offset(data, 2), field_offset(data, 3)
        if start is None or end is None:
            entries, rest = None, data
        else:
            entries, rest = data[start:end], data[:start] + data[end:]
        envelope = _DELTA_ENVELOPE.FromString(rest)
        if envelope.resources:  # entries after other fields: no slice holds them all
            entries = None
        type_url = envelope.type_url
        resources = None
        seen = self._delta_responses.get((type_url, len(entries))) if entries else None
        if seen is not None and seen[0] == entries:
            resources = seen[1]
        if resources is None:
            resources = self._delta_resources(data, type_url)
            if entries:
                self._delta_responses[(type_url, len(entries))] = (entries, resources)
                if len(self._delta_responses) > _MEMO:
                    self._delta_responses.popitem(last=False)
        return DeltaDiscoveryResponse(
            type_url=type_url,
            system_version_info=envelope.system_version_info,
            nonce=envelope.nonce,
            resources=resources,
            removed_resources=tuple(envelope.removed_resources),
        )

    def _delta_resources(self, data: bytes, type_url: str) -> tuple[Resource, ...]:
        message = discovery_pb2.DeltaDiscoveryResponse.FromString(data)
        memo = self._delta
        if len(memo) > _DELTA_MEMO:
            memo.clear()
        resources = []
        for item in message.resources:
            key = (type_url, item.name, item.version)
            found = memo.get(key)
            if found is None:
                found = memo[key] = Resource(
                    type_url=item.resource.type_url or type_url,
                    name=item.name,
                    body=item.resource.value,
                    version=item.version,
                    aliases=tuple(item.aliases),
                )
            resources.append(found)
        return tuple(resources)


ENVOY_BACKOFF_BASE_S = 0.5
ENVOY_BACKOFF_MAX_S = 30.0


def envoy_backoff(failures: int) -> float:
    """Envoy's wait before retrying its xDS stream after ``failures`` failed attempts in a
    row: uniform in [0, base x 2^(failures - 1)), that bound capped at 30 s (its gRPC
    stream's jittered exponential back-off, base 500 ms)."""
    bound = min(ENVOY_BACKOFF_MAX_S, ENVOY_BACKOFF_BASE_S * 2 ** max(0, failures - 1))
    return random.uniform(0.0, bound)


@dataclass
class Client:
    """One simulated proxy: its machine or session, and when it took each update."""

    index: int
    node: Node
    stream: H2Call | None = None
    driver: ClientDriver | None = None
    session: SotwSession | DeltaSession | None = None
    """The ``grpcio`` client's protocol state (``h2``: the driver's machine)."""
    received_bytes: int = 0
    """Bytes of messages the ``grpcio`` client received (``h2``: the stream counts them)."""
    responses: int = 0
    resources: int = 0
    converged_at: float = 0.0
    updated_at: float = 0.0
    eds_since_push: int = 0
    eds_version_at_push: str = ""
    error: str = ""
    refusals: int = 0
    refused_in_a_row: int = 0
    """Refusals since the client last received a response (Envoy's back-off resets then)."""
    reconnects: int = 0
    versions: dict[str, str] = field(default_factory=dict)

    @property
    def bytes(self) -> int:
        return self.stream.received_bytes if self.stream is not None else self.received_bytes

    def holds(self, type_url: str) -> Mapping[str, Any]:
        if self.session is not None:
            return self.session.holds(type_url)
        assert self.driver is not None
        return self.driver.machine.holds(type_url)

    def converged(self, clusters: int) -> bool:
        return (
            len(self.holds(CDS)) == clusters
            and len(self.holds(EDS)) == clusters
            and len(self.holds(LDS)) >= 1
            and len(self.holds(RDS)) >= 1
        )


class Fleet:
    """N clients against one target; tracks convergence and per-push update times."""

    def __init__(
        self,
        target: str,
        clients: int,
        clusters: int,
        delta: bool,
        name: str = "loadgen",
        client: str = "h2",
    ) -> None:
        self.target = target
        self.client_kind = client
        self.clusters = clusters
        self.delta = delta
        self.clients = [
            Client(index=i, node=make_node(id=f"{name}-{i}", cluster=name)) for i in range(clients)
        ]
        self.all_converged = asyncio.Event()
        self.all_updated = asyncio.Event()
        self.pushing = False
        self.expected_changes = clusters
        self.converged = 0
        """Clients that have converged so far."""
        self._updated = 0
        self._decoder = SharedDecoder()
        if not self.clients:
            self.all_converged.set()

    async def run_client(self, client: Client, *, resume: bool = False) -> None:
        """Run one client until its stream ends; with ``resume``, the machine it already has
        reconnects presenting what it holds, as Envoy does after losing its server."""
        while True:
            attempt_responses = client.responses
            try:
                if self.client_kind == "grpcio":
                    await self._run_grpc_core(client, resume)
                else:
                    await self._run_h2(client, resume)
            except OSError:  # (the lean client's connect)
                await self._back_off(client)
            except (grpc.aio.AioRpcError, CallEnded) as exc:
                status, details = _status_of(exc)
                if status == _UNAVAILABLE and attempt_responses == client.responses:
                    # The connection failed before any answer (a storm of connects overflows
                    # the server's accept queue, and the kernel resets what it dropped):
                    # reconnect after a jittered backoff, as grpcio's channels do by themselves.
                    await self._back_off(client)
                    continue
                hint = _RETRY.search(details)
                if status != _RESOURCE_EXHAUSTED or hint is None:
                    client.error = str(exc)[:200]
                    return
                # Shed by admission control: come back as Envoy does after a failed stream (a
                # jittered exponential back-off), but not before the server's hint.
                client.refusals += 1
                client.refused_in_a_row += 1
                backoff = envoy_backoff(client.refused_in_a_row)
                await asyncio.sleep(max(float(hint.group(1)), backoff))
            except asyncio.CancelledError as exc:
                client.error = str(exc)[:200]
                return
            else:
                return

    async def _run_h2(self, client: Client, resume: bool) -> None:
        """One stream of the project's client: xdscore's machine over the lean HTTP/2 client."""
        method = "DeltaAggregatedResources" if self.delta else "StreamAggregatedResources"
        host, _, port = self.target.rpartition(":")
        call = await H2Call.open(host, int(port), ADS + method)
        client.stream = call
        try:
            machine: DeltaClient | SotwClient
            if resume and client.driver is not None:
                machine = client.driver.machine
            else:
                machine = (
                    DeltaClient(node=client.node) if self.delta else SotwClient(node=client.node)
                )
            driver = ClientDriver(
                machine,
                call,
                on_response=lambda response, _: self._observe(client, response),
                decode=self._decoder.delta if self.delta else self._decoder.sotw,
            )
            client.driver = driver
            if resume:
                for request in machine.reconnect():
                    await driver.send(request)
            elif self.delta:
                await driver.subscribe(CDS)
                await driver.subscribe(LDS)
            else:
                await driver.watch(CDS, None)
                await driver.watch(LDS, None)
            await driver.run()
        finally:
            call.close()

    async def _run_grpc_core(self, client: Client, resume: bool) -> None:
        """One stream of the neutral client: its own grpcio channel, its own decoding."""
        channel, call = open_call(self.target, self.delta)
        try:
            session = client.session
            if session is None or not resume:
                node = base_pb2.Node(id=client.node.id, cluster=client.node.cluster)
                session = DeltaSession(node) if self.delta else SotwSession(node)
                client.session = session
            for request in session.reconnect() if resume else session.start():
                await call.write(request)
            while (data := await call.read()) is not grpc.aio.EOF:
                client.received_bytes += len(data)
                response, requests = session.receive(data)
                for request in requests:
                    await call.write(request)
                self._observe(client, response)
        finally:
            call.cancel()
            await channel.close()

    @staticmethod
    async def _back_off(client: Client) -> None:
        """Before reconnecting a client whose connection failed: 0.1 s, doubling to 1 s,
        jittered by 20 %."""
        client.reconnects += 1
        backoff = min(1.0, 0.05 * 2 ** min(client.reconnects, 5))
        await asyncio.sleep(backoff * random.uniform(0.8, 1.2))

    def _observe(self, client: Client, response: Any) -> None:
        client.responses += 1
        client.refused_in_a_row = 0
        client.resources += len(response.resources)
        type_url = response.type_url
        if self.delta:
            if type_url == EDS and self.pushing and not client.updated_at:
                client.eds_since_push += len(response.resources)
                if client.eds_since_push >= self.expected_changes:
                    self._mark_updated(client)
        else:
            client.versions[type_url] = response.version_info
            if (
                type_url == EDS
                and self.pushing
                and not client.updated_at
                and response.version_info != client.eds_version_at_push
            ):
                self._mark_updated(client)
        if not client.converged_at and client.converged(self.clusters):
            client.converged_at = time.monotonic()
            self.converged += 1
            if self.converged == len(self.clients):
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


class ServerProcess:
    """The server under test, spawned from ``--server-cmd`` and driven over stdin/stdout."""

    def __init__(self, command: str) -> None:
        self.command = command
        self.process: asyncio.subprocess.Process | None = None
        self.addr = ""

    async def start(self, timeout: float) -> str:
        # Pinned from its first instruction: the child inherits the forking thread's CPU set,
        # so every thread it starts (a Go runtime's, started before it could be pinned from
        # outside) is on CPU 0 too, and a runtime sizing itself by that set sees one core.
        # (asyncio's thread that waits for the child starts in this call, so on CPU 0; it
        # only waits.)
        own = os.sched_getaffinity(0)
        os.sched_setaffinity(0, {0})
        try:
            self.process = await asyncio.create_subprocess_exec(
                *shlex.split(self.command),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
            )
        finally:
            os.sched_setaffinity(0, own)
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

    def _pids(self) -> list[int]:
        """The server's process and its live descendants (``xds_server.py --workers``)."""
        assert self.process is not None
        pids, at = [self.process.pid], 0
        while at < len(pids):
            pid = pids[at]
            at += 1
            with contextlib.suppress(OSError):
                for task in os.listdir(f"/proc/{pid}/task"):
                    with open(f"/proc/{pid}/task/{task}/children") as handle:
                        pids += [int(child) for child in handle.read().split()]
        return pids

    def cpu_seconds(self) -> float:
        """CPU seconds of the server's processes (summed), to the nanosecond where Linux
        says so: a push of 0.06 CPU-seconds read in 10 ms ticks is read to within 17 %."""
        return sum(process_cpu_seconds(pid) for pid in self._pids())

    def system_seconds(self) -> float:
        """The part of ``cpu_seconds`` spent in the kernel for the server (system time, in
        10 ms ticks): reads, writes, polls and the loopback delivery of what it writes."""
        return sum(process_system_seconds(pid) for pid in self._pids())

    def peak_rss_mb(self) -> float:
        """Each server process's peak RSS, summed."""
        return self._status_mb("VmHWM:")

    def rss_mb(self) -> float:
        return self._status_mb("VmRSS:")

    def _status_mb(self, field: str) -> float:
        total = 0
        for pid in self._pids():
            with contextlib.suppress(OSError), open(f"/proc/{pid}/status") as handle:
                for line in handle:
                    if line.startswith(field):
                        total += int(line.split()[1])
        return total / 1024

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


LOADGEN_CPUS = {1}
"""Where the load generator runs (the server it starts runs on CPU 0)."""
_M_TRIM_THRESHOLD, _M_TOP_PAD = -1, -2
"""glibc's ``mallopt`` parameters."""


def keep_freed_memory(amount: int = 512 << 20) -> bool:
    """Have glibc's allocator keep up to ``amount`` bytes it was given back instead of
    returning them to the system at once (whether it could be told).

    A push hands the generator a message of tens of KB a client; each is freed once read,
    and by default glibc gives the top of its heap back past 128 KB free, so the next
    messages fault fresh pages in: 14 % of the generator's CPU in a Delta push at 1,000
    clients, R = 100. Kept, the pages are reused."""
    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False  # (not glibc)
    return bool(mallopt(_M_TRIM_THRESHOLD, amount)) and bool(mallopt(_M_TOP_PAD, 64 << 20))


def process_cpu_seconds(pid: int) -> float:
    """The CPU seconds of process ``pid``: the sum of its threads' ``schedstat`` (ns), or
    its ``stat`` (10 ms ticks, and the time of threads that ended) if that is more."""
    ticks = 0
    with contextlib.suppress(OSError), open(f"/proc/{pid}/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
        ticks = int(fields[11]) + int(fields[12])
    exact = 0
    with contextlib.suppress(OSError):
        for thread in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError), open(f"/proc/{pid}/task/{thread}/schedstat") as f:
                exact += int(f.read().split()[0])
    return max(ticks / os.sysconf("SC_CLK_TCK"), exact / 1e9)


def process_system_seconds(pid: int) -> float:
    """The system CPU seconds of process ``pid`` (its ``stat``, in clock ticks)."""
    with contextlib.suppress(OSError), open(f"/proc/{pid}/stat") as handle:
        return int(handle.read().rsplit(")", 1)[1].split()[12]) / os.sysconf("SC_CLK_TCK")
    return 0.0


def pin_threads(cpus: set[int]) -> int:
    """Pin every thread of this process to ``cpus``; how many there are. (grpc-core starts
    threads of its own as its first channels open, each on its creator's CPUs, and asyncio
    one that waits for the server, on the server's CPU: pinned again once all are there.)"""
    tasks = os.listdir("/proc/self/task")
    for task in tasks:
        with contextlib.suppress(OSError):  # (a thread that ended meanwhile)
            os.sched_setaffinity(int(task), cpus)
    return len(tasks)


def _own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def run(args: argparse.Namespace) -> dict[str, Any]:
    server: ServerProcess | None = None
    target = args.target
    pin_threads(LOADGEN_CPUS)
    tune_collector()  # the generator's own collector, as the servers tune theirs
    keep_freed_memory()
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
        "client": args.client,
    }
    fleet = Fleet(target, args.clients, args.clusters, args.delta, client=args.client)
    tasks = []
    try:
        cpu0 = server.cpu_seconds() if server else 0.0
        sys0 = server.system_seconds() if server else 0.0
        own0 = _own_cpu()
        started = time.monotonic()
        tasks = [asyncio.create_task(fleet.run_client(client)) for client in fleet.clients]
        async with asyncio.timeout(args.timeout):
            await fleet.all_converged.wait()
        report["initial_convergence_s"] = round(time.monotonic() - started, 3)
        report["loadgen_threads"] = pin_threads(LOADGEN_CPUS)
        if server:
            report["initial_server_cpu_s"] = round(server.cpu_seconds() - cpu0, 3)
            report["initial_server_sys_s"] = round(server.system_seconds() - sys0, 3)
        report["initial_loadgen_cpu_s"] = round(_own_cpu() - own0, 3)
        if server:
            report["initial_server_rss_mb"] = round(server.rss_mb(), 1)
        pushes = []
        for _ in range(args.pushes):
            if server is None:
                break
            await asyncio.sleep(args.settle)
            fleet.arm_push(args.changed or args.clusters)
            cpu0, own0, commanded = server.cpu_seconds(), _own_cpu(), time.monotonic()
            sys0 = server.system_seconds()
            responses0 = sum(c.responses for c in fleet.clients)
            bytes0 = sum(c.bytes for c in fleet.clients)
            push_args = f"{args.clusters} {args.endpoints}"
            if args.changed:
                push_args += f" {args.changed}"
            set_at = await server.push(push_args, args.timeout)
            async with asyncio.timeout(args.timeout):
                await fleet.all_updated.wait()
            own_at_ack = _own_cpu()
            await asyncio.sleep(0.2)
            latencies = [c.updated_at - set_at for c in fleet.clients]
            pushes.append(
                {
                    "update_convergence_s": round(max(latencies), 3),
                    "command_to_set_s": round(set_at - commanded, 3),
                    "client_median_s": round(statistics.median(latencies), 3),
                    "client_p99_s": round(_percentile(latencies, 0.99), 3),
                    "server_cpu_s": round(server.cpu_seconds() - cpu0, 3),
                    "server_sys_s": round(server.system_seconds() - sys0, 3),
                    "loadgen_cpu_s": round(_own_cpu() - own0, 3),
                    "loadgen_cpu_to_ack_s": round(own_at_ack - own0, 3),
                    "responses": sum(c.responses for c in fleet.clients) - responses0,
                    "mbytes": round((sum(c.bytes for c in fleet.clients) - bytes0) / 1e6, 1),
                    "server_rss_mb": round(server.rss_mb(), 1),
                }
            )
        report["pushes"] = pushes
        if server:
            report["server_peak_rss_mb"] = round(server.peak_rss_mb(), 1)
        report["errors"] = [c.error for c in fleet.clients if c.error][:5]
        report["reconnects"] = sum(c.reconnects for c in fleet.clients)
        report["refusals"] = sum(c.refusals for c in fleet.clients)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if server:
            await server.stop()
    return report


def _runner(uvloop: bool) -> asyncio.Runner:
    """An asyncio runner on uvloop's event loop, or asyncio's own."""
    if not uvloop:
        return asyncio.Runner()
    import uvloop as _uvloop

    return asyncio.Runner(loop_factory=_uvloop.new_event_loop)


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
    parser.add_argument(
        "--client",
        choices=("h2", "grpcio"),
        default="h2",
        help="the clients: xdscore's machines over benchmarks/h2client.py (h2, the default) "
        "or the neutral client of benchmarks/grpc_core_client.py (grpcio: grpc-core, one "
        "channel and one protobuf decoding per client)",
    )
    parser.add_argument(
        "--loop",
        choices=LOOPS,
        default="auto",
        help="the generator's event loop (auto: uvloop where installed, with --client h2; "
        "grpcio's clients run on asyncio's)",
    )
    parser.add_argument("--json", help="write the report here instead of stdout")
    args = parser.parse_args()
    if not args.target and not args.server_cmd:
        parser.error("give --target or --server-cmd")
    uvloop = loop_options(args.loop)["use_uvloop"] and args.client == "h2"
    with _runner(uvloop) as runner:
        report = runner.run(run(args))
    report["loop"] = "uvloop" if uvloop else "asyncio"
    text = json.dumps(report, indent=2)
    if args.json:
        with open(args.json, "w") as handle:
            handle.write(text + "\n")
    print(text)
    if report.get("errors"):
        sys.exit(1)


if __name__ == "__main__":
    main()
