"""``Http2Transport`` against an independent HTTP/2 client, over a real loopback socket.

The client is the ``h2`` library's client-side state machine (``tests/unit/_h2_peer.py``),
which checks every frame the server sends, plus raw frames built by hand where ``h2``
refuses to send bad input. The tests assert what the server puts on the wire: its
SETTINGS, frame sizes, bytes sent against each flow-control window, status codes, resets
and GOAWAYs; and what it keeps: its calls per connection, bytes buffered, cut metrics.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import attrs
import h2.events
import pytest
from envoy.config.cluster.v3 import cluster_pb2
from envoy.service.discovery.v3 import discovery_pb2
from google.protobuf import duration_pb2
from h2.settings import SettingCodes

from xdscore import (
    CLUSTER,
    Http2Transport,
    Resource,
    ServerCallbacks,
    Snapshot,
    SnapshotCache,
    StreamInfo,
    StreamLimits,
    XdsServer,
    make_resource,
    same_for_all,
)
from xdscore.protocol._state import Phase
from xdscore.transport import ConnectionLimits
from xdscore.transport.h2.connection import REFUSAL_TEXT, REMEMBERED_STREAMS, Connection
from xdscore.transport.h2.state import StreamState

from ..factories import wait_until
from ._h2_peer import (
    ACK,
    CONTINUATION,
    DATA,
    END_HEADERS,
    END_STREAM,
    GOAWAY,
    HEADERS,
    PADDED,
    PING,
    PREFACE,
    RST_STREAM,
    SETTINGS,
    WINDOW_UPDATE,
    Frame,
    Peer,
    frame,
    grpc_headers,
    header_block,
    prefixed,
    settings_frame,
)

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]

ADS = "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources"
DELTA_ADS = "/envoy.service.discovery.v3.AggregatedDiscoveryService/DeltaAggregatedResources"
FETCH_CLUSTERS = "/envoy.service.cluster.v3.ClusterDiscoveryService/FetchClusters"

MiB = 1 << 20
STREAM_WINDOW = MiB
CONNECTION_WINDOW = 16 * MiB
# Error codes (RFC 9113 section 7).
NO_ERROR, PROTOCOL_ERROR, FLOW_CONTROL_ERROR, STREAM_CLOSED, FRAME_SIZE_ERROR = 0, 1, 3, 5, 6
REFUSED_STREAM, CANCEL, COMPRESSION_ERROR, ENHANCE_YOUR_CALM = 7, 8, 9, 11
# gRPC status codes.
OK, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED, UNIMPLEMENTED = "0", "4", "8", "12"


# -- the server ------------------------------------------------------------------------------


class Recorder(ServerCallbacks):
    def __init__(self) -> None:
        self.requests = 0
        self.closed: list[BaseException | None] = []

    def on_request(self, stream: StreamInfo, request: Any) -> None:
        self.requests += 1

    def on_stream_close(self, stream: StreamInfo, error: BaseException | None) -> None:
        self.closed.append(error)


class StalledServer(XdsServer):
    """A server whose streams do not start (so read nothing) until :attr:`go` is set: a
    handler busy elsewhere, as far as the transport can tell."""

    go: asyncio.Event

    async def run_stream(self, stream: Any, **kwargs: Any) -> None:
        await self.go.wait()
        await super().run_stream(stream, **kwargs)


@attrs.define
class Served:
    cache: SnapshotCache
    server: XdsServer
    transport: Http2Transport
    port: int
    recorder: Recorder

    def connection(self) -> Connection:
        """The server's side of the (only) client connection."""
        (connection,) = self.transport._connections
        return connection

    def cuts(self, reason: str) -> float | None:
        assert self.server.metrics is not None
        return self.server.metrics.registry.get_sample_value(
            "xdscore_connections_cut_total", {"reason": reason}
        )


def clusters(count: int, pad: int = 200) -> list[Resource]:
    """``count`` static clusters of about ``pad`` + 40 bytes each."""
    return [
        make_resource(
            cluster_pb2.Cluster(
                name=f"cluster-{index:05d}",
                type=cluster_pb2.Cluster.DiscoveryType.STATIC,
                connect_timeout=duration_pb2.Duration(seconds=1),
                alt_stat_name="x" * pad,
            )
        )
        for index in range(count)
    ]


@asynccontextmanager
async def serving(
    resources: list[Resource] | None = None,
    *,
    limits: StreamLimits | None = None,
    connection_limits: ConnectionLimits | None = None,
    stalled: bool = False,
) -> AsyncIterator[Served]:
    cache = SnapshotCache(group=same_for_all)
    cache.set_snapshot(None, Snapshot(clusters(3) if resources is None else resources))
    recorder = Recorder()
    server_type = StalledServer if stalled else XdsServer
    server = server_type(cache, callbacks=recorder, limits=limits)
    if isinstance(server, StalledServer):
        server.go = asyncio.Event()
    async with Http2Transport(server, connection_limits=connection_limits) as transport:
        port = await transport.start("127.0.0.1", 0)
        yield Served(cache, server, transport, port, recorder)


@asynccontextmanager
async def client(port: int, **kwargs: Any) -> AsyncIterator[Peer]:
    peer = await Peer.connect(port, **kwargs)
    try:
        yield peer
    finally:
        await peer.close()


def cds_request(node_id: str | None = "h2-test", **fields: Any) -> bytes:
    message = discovery_pb2.DiscoveryRequest(type_url=CLUSTER, **fields)
    if node_id is not None:
        message.node.id = node_id
    data: bytes = message.SerializeToString()
    return data


def sotw(data: bytes) -> discovery_pb2.DiscoveryResponse:
    return discovery_pb2.DiscoveryResponse.FromString(data)


def cluster_names(response: discovery_pb2.DiscoveryResponse) -> list[str]:
    return [cluster_pb2.Cluster.FromString(packed.value).name for packed in response.resources]


@asynccontextmanager
async def raw_client(port: int) -> AsyncIterator[Peer]:
    """A raw connection past its preface and SETTINGS, with the server's first frames read."""
    async with client(port, use_h2=False) as peer:
        await peer.send(PREFACE, settings_frame())
        await peer.until(lambda p: len(p.of(SETTINGS)) == 2, what="SETTINGS and its ACK")
        yield peer


def raw_headers(
    stream_id: int, path: str = ADS, *, flags: int = END_HEADERS, **extra: str
) -> bytes:
    return frame(HEADERS, flags, stream_id, header_block(grpc_headers(path, **extra)))


def has_status(stream_id: int) -> Any:
    return lambda peer: peer.status(stream_id) is not None


# -- 1. connection setup ---------------------------------------------------------------------


async def test_connection_setup_frames() -> None:
    """The server's SETTINGS come first (100 streams, a 1 MiB stream window), then the
    connection window is raised to 16 MiB, then the client's SETTINGS are acknowledged."""
    async with serving() as served, client(served.port, use_h2=False) as peer:
        await peer.send(PREFACE, settings_frame({SettingCodes.INITIAL_WINDOW_SIZE: 5000}))
        await peer.until(lambda p: len(p.frames) >= 3, what="three frames")
        first, second, third = peer.frames[:3]
        assert (first.kind, first.flags, first.stream_id) == (SETTINGS, 0, 0)
        assert first.settings == {
            SettingCodes.MAX_CONCURRENT_STREAMS: 100,
            SettingCodes.INITIAL_WINDOW_SIZE: STREAM_WINDOW,
            SettingCodes.MAX_HEADER_LIST_SIZE: 64 * 1024,
        }
        assert (second.kind, second.stream_id) == (WINDOW_UPDATE, 0)
        assert second.increment == CONNECTION_WINDOW - 65_535
        assert third == Frame(SETTINGS, ACK, 0, b"")
        assert served.connection().peer_window == 5000


async def test_the_server_speaks_once_the_client_has(monkeypatch: pytest.MonkeyPatch) -> None:
    """The server's SETTINGS wait for the client's preface (which a client sends without
    waiting for the server's) and go out in one write with the answer to it: a write, and a
    wake-up of the client, fewer per connection."""
    async with serving() as served, client(served.port, use_h2=False) as peer:
        await peer.settle(0.3)
        assert peer.frames == []
        transport = served.connection()._transport
        assert transport is not None
        writes: list[int] = []
        write = transport.write

        def counted(data: bytes | bytearray | memoryview) -> None:
            writes.append(len(data))
            write(data)

        monkeypatch.setattr(transport, "write", counted)
        await peer.send(PREFACE, settings_frame())
        await peer.until(lambda p: len(p.of(SETTINGS)) == 2, what="SETTINGS and its ACK")
        assert [f.kind for f in peer.frames] == [SETTINGS, WINDOW_UPDATE, SETTINGS]
        assert len(writes) == 1


async def test_ping_is_answered_with_its_bytes() -> None:
    async with serving() as served, raw_client(served.port) as peer:
        await peer.send(frame(PING, 0, 0, b"xdscore!"))
        await peer.until(lambda p: p.of(PING), what="the PING ACK")
        assert peer.of(PING) == [Frame(PING, ACK, 0, b"xdscore!")]
        # An unsolicited PING ACK is not answered.
        await peer.send(frame(PING, ACK, 0, b"12345678"))
        await peer.settle(0.1)
        assert len(peer.of(PING)) == 1


@pytest.mark.parametrize(
    "opening",
    [
        b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
        PREFACE[:-3] + b"XYZ",
        PREFACE + frame(PING, 0, 0, bytes(8)),
        PREFACE + frame(HEADERS, END_HEADERS, 1, header_block(grpc_headers(ADS))),
    ],
    ids=["http1", "bad-preface", "ping-first", "headers-first"],
)
async def test_bad_opening_is_cut(opening: bytes) -> None:
    """Not the preface, or a first frame that is not SETTINGS: GOAWAY PROTOCOL_ERROR, then
    the socket closes; nothing else is answered."""
    async with serving() as served, client(served.port, use_h2=False) as peer:
        await peer.send(opening)
        await peer.closed()
        assert [f.kind for f in peer.frames] == [SETTINGS, WINDOW_UPDATE, GOAWAY]
        assert peer.goaway is not None
        assert peer.goaway.error_code == PROTOCOL_ERROR
        assert peer.goaway.last_stream_id == 0
        assert not served.transport._connections


# -- 2. xDS calls end to end -----------------------------------------------------------------


async def test_sotw_ads_end_to_end() -> None:
    """A CDS request on ADS gets the three clusters in one DiscoveryResponse; the ACK of
    it leaves the stream ACKED on the server, and its connection settled (its reads are no
    longer bounded per loop turn: see ``Intake``)."""
    async with serving() as served, client(served.port) as peer:
        stream = await peer.open(ADS)
        await peer.send_message(stream, cds_request())
        await peer.until(lambda p: p.data(stream), what="a response")
        assert served.connection().unsettled
        (response,) = map(sotw, peer.responses(stream))
        assert response.type_url == CLUSTER
        assert cluster_names(response) == ["cluster-00000", "cluster-00001", "cluster-00002"]
        headers = peer.header_lists[stream][0]
        assert headers[":status"] == "200"
        assert headers["content-type"] == "application/grpc"
        ack = cds_request(None, version_info=response.version_info, response_nonce=response.nonce)
        await peer.send_message(stream, ack)
        (active,) = served.server.streams()
        await wait_until(
            lambda: active.machine.type_states()[CLUSTER].phase is Phase.ACKED, what="the ACK"
        )
        assert served.recorder.requests == 2
        assert not peer.ended(stream)
        await wait_until(lambda: not served.connection().unsettled, what="settled")


async def test_delta_ads_end_to_end() -> None:
    async with serving() as served, client(served.port) as peer:
        stream = await peer.open(DELTA_ADS)
        request = discovery_pb2.DeltaDiscoveryRequest(type_url=CLUSTER)
        request.node.id = "h2-delta"
        await peer.send_message(stream, request.SerializeToString())
        await peer.until(lambda p: p.data(stream), what="a response")
        (data,) = peer.responses(stream)
        response = discovery_pb2.DeltaDiscoveryResponse.FromString(data)
        assert sorted(r.name for r in response.resources) == [
            "cluster-00000",
            "cluster-00001",
            "cluster-00002",
        ]
        ack = discovery_pb2.DeltaDiscoveryRequest(type_url=CLUSTER, response_nonce=response.nonce)
        await peer.send_message(stream, ack.SerializeToString())
        (active,) = served.server.streams()
        await wait_until(
            lambda: active.machine.type_states()[CLUSTER].phase is Phase.ACKED, what="the ACK"
        )


@pytest.mark.parametrize("max_frame", [16_384, 20_000])
async def test_large_response_is_split_at_the_clients_frame_size(max_frame: int) -> None:
    """A 50 KB response goes out in DATA frames no larger than the client's
    SETTINGS_MAX_FRAME_SIZE, all but the last exactly that large."""
    settings = {SettingCodes.MAX_FRAME_SIZE: max_frame} if max_frame != 16_384 else None
    async with serving(clusters(200)) as served, client(served.port, settings=settings) as peer:
        await peer.until(lambda p: len(p.of(SETTINGS)) == 2 + bool(settings), what="ACKs")
        stream = await peer.open(ADS)
        await peer.send_message(stream, cds_request())
        await peer.until(lambda p: len(p.data(stream)) > 5 and _complete(p, stream))
        sizes = [len(f.payload) for f in peer.of(DATA, stream)]
        assert sum(sizes) > 45_000
        assert max(sizes) == max_frame
        assert all(size == max_frame for size in sizes[:-1]), sizes
        (response,) = map(sotw, peer.responses(stream))
        assert len(response.resources) == 200


def _complete(peer: Peer, stream: int) -> bool:
    body = peer.data(stream)
    return len(body) >= 5 and len(body) == 5 + int.from_bytes(body[1:5], "big")


async def _granted(peer: Peer, stream: int, total: int) -> None:
    """Wait for exactly ``total`` bytes on ``stream``; then check that nothing more comes."""
    await peer.until(lambda p: len(p.data(stream)) >= total, what=f"{total} bytes")
    await peer.settle(0.15)
    assert len(peer.data(stream)) == total


@asynccontextmanager
async def large_responses(
    window: int, count: int = 1
) -> AsyncIterator[tuple[Served, Peer, list[int]]]:
    """``count`` ADS streams, each asking for a 50 KB CDS response, from a client whose
    SETTINGS_INITIAL_WINDOW_SIZE is ``window`` (acknowledged before the streams open)."""
    settings = {SettingCodes.INITIAL_WINDOW_SIZE: window}
    async with serving(clusters(200)) as served, client(served.port, settings=settings) as peer:
        await peer.until(lambda p: len(p.of(SETTINGS)) == 3, what="ACKs")
        streams = [await peer.open(ADS) for _ in range(count)]
        for stream in streams:
            await peer.send_message(stream, cds_request(f"node-{stream}"))
        yield served, peer, streams


async def test_stream_window_is_never_exceeded() -> None:
    """A client with a 1000-byte stream window gets exactly 1000 bytes of a 50 KB response,
    then exactly what each WINDOW_UPDATE grants, then the rest."""
    async with large_responses(1000) as (_, peer, [stream]):
        await _granted(peer, stream, 1000)
        peer.h2.increment_flow_control_window(5000, stream_id=stream)
        peer.h2.increment_flow_control_window(5000)
        await peer.flush()
        await _granted(peer, stream, 6000)
        peer.h2.increment_flow_control_window(100_000, stream_id=stream)
        peer.h2.increment_flow_control_window(100_000)
        await peer.flush()
        await peer.until(lambda p: _complete(p, stream), what="the whole response")
        (response,) = map(sotw, peer.responses(stream))
        assert len(response.resources) == 200


async def test_connection_window_is_never_exceeded() -> None:
    """Two streams with large stream windows share the connection's 65,535 bytes: the
    server sends exactly that much in all until the connection WINDOW_UPDATE."""
    async with large_responses(MiB, 2) as (_, peer, streams):

        def sent() -> int:
            return sum(len(peer.data(stream)) for stream in streams)

        await peer.until(lambda p: sent() >= 65_535, what="the connection window")
        await peer.settle(0.15)
        assert sent() == 65_535
        peer.h2.increment_flow_control_window(10_000)
        await peer.flush()
        await peer.until(lambda p: sent() >= 75_535, what="the increment")
        await peer.settle(0.15)
        assert sent() == 75_535
        peer.h2.increment_flow_control_window(1_000_000)
        await peer.flush()
        await peer.until(lambda p: all(_complete(p, s) for s in streams), what="both responses")


async def test_initial_window_change_mid_stream() -> None:
    """SETTINGS_INITIAL_WINDOW_SIZE raised from 1000 to 4000 once the stream's 1000 bytes
    are out lets exactly 3000 more through; lowered to 2000, the window is 2000 - 4000 =
    -2000, so a 2500-byte WINDOW_UPDATE lets only 500 through."""
    async with large_responses(1000) as (served, peer, [stream]):
        await _granted(peer, stream, 1000)
        peer.h2.update_settings({SettingCodes.INITIAL_WINDOW_SIZE: 4000})
        await peer.flush()
        await _granted(peer, stream, 4000)
        peer.h2.update_settings({SettingCodes.INITIAL_WINDOW_SIZE: 2000})
        await peer.flush()
        await peer.until(lambda p: len(p.of(SETTINGS)) == 5, what="the second ACK")
        assert served.connection().calls[stream].send_window == -2000
        peer.h2.increment_flow_control_window(2500, stream_id=stream)
        await peer.flush()
        await _granted(peer, stream, 4500)


# -- 3. gRPC semantics ------------------------------------------------------------------------


async def test_unknown_method_is_trailers_only_unimplemented() -> None:
    async with serving() as served, client(served.port) as peer:
        stream = await peer.open("/no.such.Service/Method")
        await peer.until(has_status(stream))
        (block,) = peer.header_lists[stream]
        assert block == {
            ":status": "200",
            "content-type": "application/grpc",
            "grpc-status": UNIMPLEMENTED,
            "grpc-message": "method /no.such.Service/Method not implemented",
        }
        (headers,) = peer.of(HEADERS, stream)
        assert headers.flags & END_STREAM
        assert not peer.of(DATA, stream)
        assert not served.connection().calls


async def test_long_status_message_is_continued() -> None:
    """A 50,000-character unknown path (h2 sends its header block in CONTINUATION frames):
    the trailers-only answer naming it is a HEADERS frame and CONTINUATION frames of at
    most 16,384 bytes, which h2 reassembles."""
    path = "/no.such.Service/" + "m" * 50_000
    async with serving() as served, client(served.port) as peer:
        stream = await peer.open(path)
        await peer.until(has_status(stream))
        assert peer.status(stream) == (UNIMPLEMENTED, f"method {path} not implemented")
        frames = [f for f in peer.frames if f.stream_id == stream]
        kinds = [f.kind for f in frames]
        assert kinds[0] == HEADERS
        assert kinds[1:] == [CONTINUATION] * (len(frames) - 1)
        assert len(frames) >= 3
        assert max(len(f.payload) for f in frames) == 16_384
        assert frames[0].flags == END_STREAM
        assert frames[-1].flags == END_HEADERS
        assert any(
            isinstance(e, h2.events.TrailersReceived | h2.events.ResponseReceived)
            for e in peer.events
        )
        assert not served.connection().calls


@pytest.mark.parametrize(
    ("method", "content_type", "status"),
    [("GET", "application/grpc", "405"), ("POST", "text/plain", "415")],
)
async def test_not_grpc_is_refused_with_http_status(
    method: str, content_type: str, status: str
) -> None:
    """A request that is not gRPC gets a plain HTTP answer: the status, and a line of text
    saying what the server takes, whose DATA waits for the client's window like any
    response's (the stream stays open, and counts, until it is sent)."""
    async with serving() as served, client(served.port, settings={4: 0}) as peer:
        stream = peer.h2.get_next_available_stream_id()
        fields = grpc_headers(ADS, method=method, content_type=content_type)
        peer.h2.send_headers(stream, fields, end_stream=True)
        await peer.flush()
        await peer.until(lambda p: p.header_lists.get(stream), what="the headers")
        ((headers,),) = [peer.header_lists[stream]]
        assert headers[":status"] == status
        assert headers["content-type"] == "text/plain; charset=utf-8"
        await peer.settle(0.1)
        assert not peer.ended(stream)  # a window of 0: the body waits
        assert list(served.connection().calls) == [stream]
        peer.h2.increment_flow_control_window(1000, stream_id=stream)
        await peer.flush()
        await peer.until(lambda p: p.ended(stream), what="the body")
        body = peer.data(stream)
        assert body == REFUSAL_TEXT
        assert int(headers["content-length"]) == len(body)
        assert peer.of(DATA, stream)[-1].flags & END_STREAM
        assert not served.connection().calls
        assert served.connection().stream_state(stream) is StreamState.CLOSED


async def test_oversized_request_is_refused_from_its_prefix() -> None:
    """A prefix declaring 5000 bytes past a 1000-byte limit: RESOURCE_EXHAUSTED before any
    of the body is sent, then RST_STREAM NO_ERROR (the client may stop sending)."""
    limits = StreamLimits(max_request_bytes=1000)
    async with serving(limits=limits) as served, client(served.port) as peer:
        stream = await peer.open(ADS)
        peer.h2.send_data(stream, b"\x00" + (5000).to_bytes(4, "big"))
        await peer.flush()
        await peer.until(lambda p: p.of(RST_STREAM, stream), what="the reset")
        assert peer.status(stream) == (
            RESOURCE_EXHAUSTED,
            "a request of 5000 bytes exceeds the limit of 1000",
        )
        (reset,) = peer.of(RST_STREAM, stream)
        assert reset.error_code == NO_ERROR
        assert not served.connection().calls


@pytest.mark.parametrize("over", [0, 1], ids=["at-the-limit", "one-byte-over"])
async def test_request_at_the_limit(over: int) -> None:
    """The prefix check and the driver's agree: a request of exactly the limit is served,
    one a byte over it refused."""
    request = cds_request()
    limits = StreamLimits(max_request_bytes=len(request) - over)
    async with serving(limits=limits) as served, client(served.port) as peer:
        stream = await peer.open(ADS)
        await peer.send_message(stream, request)
        if over:
            await peer.until(has_status(stream))
            limit = len(request) - 1
            message = f"a request of {len(request)} bytes exceeds the limit of {limit}"
            assert peer.status(stream) == (RESOURCE_EXHAUSTED, message)
        else:
            await peer.until(lambda p: _complete(p, stream), what="the response")
            assert len(sotw(peer.responses(stream)[0]).resources) == 3


@pytest.mark.parametrize(
    "sent",
    [b"\x00\x00\x00", prefixed(bytes(100))[:5], prefixed(bytes(100))[:15]],
    ids=["in-the-prefix", "after-the-prefix", "in-the-body"],
)
async def test_stream_ended_inside_a_message(sent: bytes) -> None:
    async with serving() as served, client(served.port) as peer:
        stream = await peer.open(ADS)
        peer.h2.send_data(stream, sent, end_stream=True)
        await peer.flush()
        await peer.until(has_status(stream))
        assert peer.status(stream) == ("3", "the stream ended inside a message")
        await wait_until(lambda: not served.connection().calls, what="the call released")


async def test_compressed_message_is_unimplemented() -> None:
    async with serving() as served, client(served.port) as peer:
        stream = await peer.open(ADS)
        peer.h2.send_data(stream, prefixed(cds_request(), compressed=True))
        await peer.flush()
        await peer.until(has_status(stream))
        assert peer.status(stream) == (UNIMPLEMENTED, "compressed messages are not supported")


async def test_fetch_half_closed_without_a_message_is_invalid() -> None:
    async with serving() as served, client(served.port) as peer:
        stream = await peer.open(FETCH_CLUSTERS, end_stream=True)
        await peer.until(has_status(stream))
        assert peer.status(stream) == ("3", "the call carried no request")
        assert not served.connection().calls


async def test_half_close_without_a_message_ends_the_call_cleanly() -> None:
    """An ADS stream whose client ends its side before any request: there is nothing the
    server will ever send on it, so it ends with grpc-status 0 (as go-control-plane's
    does); it does not hold a stream slot until the client resets it."""
    async with serving() as served, client(served.port) as peer:
        stream = await peer.open(ADS, end_stream=True)
        await peer.until(has_status(stream), timeout=1.0)
        assert peer.status(stream) == (OK, "")
        assert not peer.of(RST_STREAM, stream)
        await wait_until(lambda: not served.connection().calls, what="the call released")
        assert served.recorder.closed == [None]


async def test_message_in_many_data_frames_and_headers_in_continuations() -> None:
    """A request header block in 10-byte pieces (HEADERS then CONTINUATIONs) and a
    request in one-byte DATA frames: answered as if sent whole."""
    async with serving() as served, client(served.port) as peer:
        stream = peer.h2.get_next_available_stream_id()
        peer.h2.send_headers(stream, grpc_headers(ADS))
        (headers,) = _frames_of(peer.h2.data_to_send())
        assert (headers.kind, headers.flags) == (HEADERS, END_HEADERS)
        block = headers.payload
        pieces = [block[at : at + 10] for at in range(0, len(block), 10)]
        assert len(pieces) > 5
        out = [frame(HEADERS, 0, stream, pieces[0])]
        out += [frame(CONTINUATION, 0, stream, piece) for piece in pieces[1:-1]]
        out.append(frame(CONTINUATION, END_HEADERS, stream, pieces[-1]))
        message = prefixed(cds_request())
        for byte in message:
            peer.h2.send_data(stream, bytes([byte]))
        await peer.send(*out, peer.h2.data_to_send())
        await peer.until(lambda p: _complete(p, stream), what="the response")
        (response,) = map(sotw, peer.responses(stream))
        assert len(response.resources) == 3
        assert served.recorder.requests == 1


async def test_padded_headers_and_data() -> None:
    """HEADERS padded by 40 bytes, the request in DATA frames padded by 100 and 0 bytes;
    the padding counts against the window, and is credited back."""
    async with serving() as served, client(served.port) as peer:
        stream = peer.h2.get_next_available_stream_id()
        peer.h2.send_headers(stream, grpc_headers(ADS))
        (headers,) = _frames_of(peer.h2.data_to_send())
        padded = bytes([40]) + headers.payload + bytes(40)
        message = prefixed(cds_request())
        peer.h2.send_data(stream, message[:10], pad_length=100)
        peer.h2.send_data(stream, message[10:], pad_length=0)
        await peer.send(frame(HEADERS, END_HEADERS | PADDED, stream, padded))
        await peer.send(peer.h2.data_to_send())
        await peer.until(lambda p: _complete(p, stream), what="the response")
        assert len(sotw(peer.responses(stream)[0]).resources) == 3
        call = served.connection().calls[stream]
        # Every byte the client was charged, padding too, is either its window again or
        # owed to it (credited once it is worth a frame: see the test below).
        assert call._uncredited >= len(prefixed(cds_request())) + 100 + 1
        assert call.recv_window + call._uncredited == STREAM_WINDOW


async def send_within_window(peer: Peer, stream: int, body: bytes, sent: int) -> int:
    """Send as much of ``body`` from ``sent`` on as the windows allow; where it got to."""
    room = min(peer.h2.local_flow_control_window(stream), len(body) - sent)
    step = peer.h2.max_outbound_frame_size
    while room > 0:
        piece = body[sent : sent + min(room, step)]
        peer.h2.send_data(stream, piece)
        sent += len(piece)
        room -= len(piece)
    await peer.flush()
    return sent


async def test_small_requests_are_credited_once_worth_a_frame() -> None:
    """Requests read from the stream are not credited back one WINDOW_UPDATE each (that
    was half the writes of a stream's initial sync): the credit waits until half the
    stream window is owed, and a client that keeps within its window never waits."""
    async with serving() as served, client(served.port) as peer:
        stream = await peer.open(ADS)
        await peer.send_message(stream, cds_request())
        await peer.until(lambda p: _complete(p, stream), what="the response")
        for _ in range(5):
            await peer.send_message(stream, cds_request(node_id=None))
        await wait_until(lambda: served.recorder.requests == 6, what="six requests")
        await peer.settle(0.1)
        assert not [f for f in peer.of(WINDOW_UPDATE) if f.stream_id == stream]
        call = served.connection().calls[stream]
        assert call.recv_window + call._uncredited == STREAM_WINDOW
        sent = len(prefixed(cds_request())) + 5 * len(prefixed(cds_request(node_id=None)))
        assert call._uncredited == sent


async def test_a_request_longer_than_the_window_arrives() -> None:
    """A 3 MiB request on a stream whose window is 1 MiB: what is buffered of it is
    credited while the handler waits for the rest, so all of it arrives."""
    big = cds_request(version_info="v" * (3 * MiB))
    limits = StreamLimits(max_request_bytes=4 * MiB)
    async with serving(limits=limits) as served, client(served.port) as peer:
        stream = await peer.open(ADS)
        body = prefixed(big)
        sent = 0
        with anyio.fail_after(10):
            while sent < len(body):
                sent = await send_within_window(peer, stream, body, sent)
                await peer.settle(0.02)
            await wait_until(lambda: served.recorder.requests == 1, what="the request")
        assert [f.stream_id for f in peer.of(WINDOW_UPDATE) if f.stream_id == stream]


def _frames_of(data: bytes) -> list[Frame]:
    out = []
    while data:
        size = int.from_bytes(data[:3], "big")
        stream_id = int.from_bytes(data[5:9], "big")
        out.append(Frame(data[3], data[4], stream_id, data[9 : 9 + size]))
        data = data[9 + size :]
    return out


async def test_fetch_clusters() -> None:
    """The unary FetchClusters: headers, one DiscoveryResponse, trailers with status 0."""
    async with serving() as served, client(served.port) as peer:
        stream = await peer.open(FETCH_CLUSTERS)
        await peer.send_message(stream, cds_request(resource_names=["cluster-00001"]), end=True)
        await peer.until(lambda p: p.ended(stream))
        (response,) = map(sotw, peer.responses(stream))
        assert cluster_names(response) == ["cluster-00001"]
        assert peer.status(stream) == (OK, "")
        kinds = [f.kind for f in peer.frames if f.stream_id == stream]
        assert kinds == [HEADERS, DATA, HEADERS]
        assert not served.connection().calls


async def test_grpc_timeout_on_a_call_that_cannot_answer() -> None:
    """A Fetch whose request never comes, with grpc-timeout 150m: DEADLINE_EXCEEDED after
    150 ms. (No Fetch waits once its request is in, unless a replica is catching up.)"""
    async with serving() as served, client(served.port) as peer:
        started = time.monotonic()
        stream = await peer.open(FETCH_CLUSTERS, grpc_timeout="150m")
        await peer.until(has_status(stream))
        elapsed = time.monotonic() - started
        assert peer.status(stream) == (DEADLINE_EXCEEDED, "the call's deadline passed")
        assert 0.15 <= elapsed < 1.0, elapsed
        assert not served.connection().calls


# -- 4. limits -----------------------------------------------------------------------------------


async def test_stream_past_the_concurrency_limit_is_refused() -> None:
    """The 101st open stream gets RST_STREAM REFUSED_STREAM; once one of the 100 is reset,
    a new one is accepted."""
    async with serving() as served, raw_client(served.port) as peer:
        await peer.send(*(raw_headers(stream) for stream in range(1, 202, 2)))
        await peer.until(lambda p: p.of(RST_STREAM), what="a refusal")
        (refusal,) = peer.of(RST_STREAM)
        assert (refusal.stream_id, refusal.error_code) == (201, REFUSED_STREAM)
        connection = served.connection()
        assert len(connection.calls) == 100
        await peer.send(frame(RST_STREAM, 0, 1, CANCEL.to_bytes(4, "big")), raw_headers(203))
        await wait_until(lambda: 203 in connection.calls, what="stream 203 taken")
        assert 1 not in connection.calls
        await peer.settle(0.1)
        assert len(peer.of(RST_STREAM)) == 1
        assert len(connection.calls) == 100


async def test_a_hundred_streams_on_one_connection() -> None:
    """100 ADS streams opened by h2 (its header blocks index into the server's HPACK table
    from the second on): each gets its response; resetting them all ends every handler."""
    async with serving() as served, client(served.port) as peer:
        await peer.until(lambda p: len(p.of(SETTINGS)) == 2, what="SETTINGS and its ACK")
        peer.h2.increment_flow_control_window(MiB)  # 100 responses need more than 65,535
        streams = [await peer.open(ADS) for _ in range(100)]
        for stream in streams:
            await peer.send_message(stream, cds_request(f"node-{stream}"))
        await peer.until(lambda p: all(_complete(p, s) for s in streams), what="100 responses")
        assert all(len(sotw(peer.responses(s)[0]).resources) == 3 for s in streams)
        assert len(served.connection().calls) == 100
        for stream in streams:
            peer.h2.reset_stream(stream, CANCEL)
        await peer.flush()
        await wait_until(lambda: not list(served.server.streams()), what="every stream ended")
        assert not served.connection().calls
        assert served.recorder.closed == [None] * 100


async def test_client_reset_ends_the_handler() -> None:
    async with serving() as served, client(served.port) as peer:
        stream = await peer.open(ADS)
        await peer.send_message(stream, cds_request())
        await peer.until(lambda p: p.data(stream), what="a response")
        assert len(served.connection().calls) == 1
        assert len(list(served.server.streams())) == 1
        peer.h2.reset_stream(stream, CANCEL)
        await peer.flush()
        await wait_until(lambda: not list(served.server.streams()), what="the stream ended")
        assert not served.connection().calls
        assert served.recorder.closed == [None]
        assert served.server.metrics is not None
        gauge = served.server.metrics.registry.get_sample_value(
            "xdscore_streams", {"protocol": "sotw", "mode": "ads"}
        )
        assert gauge == 0


@pytest.mark.parametrize("leaving", ["rst-stream", "tcp-abort"])
async def test_client_leaving_during_a_blocked_write_ends_the_handler(leaving: str) -> None:
    """The server waits for window in the middle of a 50 KB response when the client resets
    the stream or drops the connection: the handler ends, the call is released, and
    nothing more is sent on the stream."""
    async with large_responses(1000) as (served, peer, [stream]):
        await _granted(peer, stream, 1000)
        connection = served.connection()
        assert list(connection.calls) == [stream]
        if leaving == "rst-stream":
            peer.h2.reset_stream(stream, CANCEL)
            await peer.flush()
        else:
            peer.abort()
        await wait_until(lambda: not list(served.server.streams()), what="the stream ended")
        assert not connection.calls
        assert served.recorder.closed == [None]
        if leaving == "rst-stream":
            await peer.settle(0.1)
            assert len(peer.data(stream)) == 1000
            assert not peer.of(HEADERS, stream)[1:], "trailers after the client's reset"
            assert served.transport._connections == {connection}
        else:
            await wait_until(lambda: not served.transport._connections, what="connection gone")


TIGHT = ConnectionLimits(
    resets_per_second=0.01,
    resets_burst=5,
    pings_per_second=0.01,
    pings_burst=5,
    settings_per_second=0.01,
    settings_burst=5,
)


@pytest.mark.parametrize("reason", ["rapid_reset", "ping_flood", "settings_flood"])
async def test_flood_past_the_limits_is_cut(reason: str, caplog: pytest.LogCaptureFixture) -> None:
    """20 frames against a burst of 5: GOAWAY ENHANCE_YOUR_CALM naming the reason, the
    socket closed, one cut counted and one WARNING naming the peer; at most the burst's
    frames answered."""
    caplog.set_level(logging.WARNING, logger="xdscore.transport")
    async with serving(connection_limits=TIGHT) as served, raw_client(served.port) as peer:
        if reason == "rapid_reset":
            pairs = [
                raw_headers(stream) + frame(RST_STREAM, 0, stream, CANCEL.to_bytes(4, "big"))
                for stream in range(1, 41, 2)
            ]
            await peer.send(*pairs)
        elif reason == "ping_flood":
            await peer.send(*(frame(PING, 0, 0, n.to_bytes(8, "big")) for n in range(20)))
        else:
            await peer.send(*(settings_frame({SettingCodes.ENABLE_PUSH: 0}) for _ in range(20)))
        await peer.closed()
        goaway = peer.goaway
        assert goaway is not None
        assert goaway.error_code == ENHANCE_YOUR_CALM
        assert goaway.payload[8:] == reason.encode()
        if reason == "rapid_reset":
            assert goaway.last_stream_id == 11  # the sixth stream's reset cut it
        answers = len(peer.of(PING)) if reason == "ping_flood" else len(peer.of(SETTINGS)) - 2
        assert answers <= 5
        assert served.cuts(reason) == 1
        assert not served.transport._connections
        (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert f"cut the connection from 127.0.0.1:{peer.local_port} ({reason})" in warning


async def test_data_past_the_stream_window_resets_the_stream() -> None:
    """A handler that does not read: 1 MiB (the stream window) is taken; one byte more
    resets the stream with FLOW_CONTROL_ERROR, and the connection carries on."""
    async with serving(stalled=True) as served, raw_client(served.port) as peer:
        chunks = [frame(DATA, 0, 1, bytes(16_384)) for _ in range(STREAM_WINDOW // 16_384)]
        await peer.send(raw_headers(1), *chunks)
        await wait_until(lambda: 1 in served.connection().calls, what="the call")
        call = served.connection().calls[1]
        await wait_until(lambda: len(call._buffer) == STREAM_WINDOW, what="1 MiB buffered")
        assert call.recv_window == 0
        assert not peer.of(RST_STREAM)
        await peer.send(frame(DATA, 0, 1, b"!"), frame(PING, 0, 0, b"stillok?"))
        await peer.until(lambda p: p.of(RST_STREAM) and p.of(PING), what="reset and PING")
        (reset,) = peer.of(RST_STREAM)
        assert (reset.stream_id, reset.error_code) == (1, FLOW_CONTROL_ERROR)
        assert peer.of(PING) == [Frame(PING, ACK, 0, b"stillok?")]
        assert peer.goaway is None
        assert not served.connection().calls


async def test_data_after_end_stream_resets_and_releases_the_stream() -> None:
    """DATA on a stream the client already half-closed is a stream error STREAM_CLOSED:
    the server resets it and, having reset it, keeps nothing of it (no call, no handler,
    no stream slot) and sends nothing more on it."""
    async with serving() as served, raw_client(served.port) as peer:
        await peer.send(raw_headers(1), frame(DATA, END_STREAM, 1, prefixed(cds_request())))
        await peer.until(lambda p: _complete(p, 1), what="the response")
        await peer.send(frame(DATA, 0, 1, b"more"))
        await peer.until(lambda p: p.of(RST_STREAM), what="the reset")
        (reset,) = peer.of(RST_STREAM)
        assert (reset.stream_id, reset.error_code) == (1, STREAM_CLOSED)
        await wait_until(
            lambda: not served.connection().calls and not list(served.server.streams()),
            timeout=1,
            what="released",
        )
        served.cache.set_snapshot(None, Snapshot(clusters(4)))
        await peer.settle(0.2)
        assert peer.frames[-1] == reset, "frames sent on a stream after resetting it"


async def test_streams_reset_by_the_server_count_as_rapid_resets() -> None:
    """The "made you reset" variant: HEADERS then a zero stream WINDOW_UPDATE, which the
    server answers by resetting the stream (its handler started and cancelled). Past the
    reset burst the connection is cut, as for the client's own resets."""
    async with serving(connection_limits=TIGHT) as served, raw_client(served.port) as peer:
        pairs = [raw_headers(s) + frame(WINDOW_UPDATE, 0, s, bytes(4)) for s in range(1, 41, 2)]
        await peer.send(*pairs)
        await peer.settle(0.3)
        assert peer.goaway is not None, f"{len(peer.of(RST_STREAM))} resets, no cut"
        assert peer.goaway.error_code == ENHANCE_YOUR_CALM
        assert peer.goaway.payload[8:] == b"rapid_reset"
        assert served.cuts("rapid_reset") == 1


def _u32(value: int) -> bytes:
    return value.to_bytes(4, "big")


OPEN = raw_headers(1)
"""Stream 1 opened on ADS (its handler waits for a request)."""
CONNECTION_ERRORS = {
    "frame-over-16384": (OPEN + frame(DATA, 0, 1, bytes(16_385)), FRAME_SIZE_ERROR, 1),
    "zero-connection-window-update": (frame(WINDOW_UPDATE, 0, 0, _u32(0)), PROTOCOL_ERROR, 0),
    "connection-window-past-2^31-1": (
        frame(WINDOW_UPDATE, 0, 0, _u32(2**31 - 65_535)),  # the client's window is 65,535
        FLOW_CONTROL_ERROR,
        0,
    ),
    "short-window-update": (frame(WINDOW_UPDATE, 0, 0, b"\x00\x01"), FRAME_SIZE_ERROR, 0),
    "initial-window-past-2^31-1": (settings_frame({4: 2**31}), FLOW_CONTROL_ERROR, 0),
    "max-frame-size-too-small": (settings_frame({5: 16_383}), PROTOCOL_ERROR, 0),
    "enable-push-2": (settings_frame({2: 2}), PROTOCOL_ERROR, 0),
    "settings-on-a-stream": (frame(SETTINGS, 0, 1, b""), PROTOCOL_ERROR, 0),
    "settings-of-7-bytes": (frame(SETTINGS, 0, 0, bytes(7)), FRAME_SIZE_ERROR, 0),
    "settings-ack-with-a-body": (frame(SETTINGS, ACK, 0, bytes(6)), FRAME_SIZE_ERROR, 0),
    "ping-of-7-bytes": (frame(PING, 0, 0, bytes(7)), FRAME_SIZE_ERROR, 0),
    "ping-on-a-stream": (frame(PING, 0, 1, bytes(8)), PROTOCOL_ERROR, 0),
    "data-on-stream-0": (frame(DATA, 0, 0, b"x"), PROTOCOL_ERROR, 0),
    "data-on-an-idle-stream": (frame(DATA, 0, 5, b"x"), PROTOCOL_ERROR, 0),
    "headers-on-an-even-stream": (raw_headers(2), PROTOCOL_ERROR, 0),
    "rst-on-an-idle-stream": (frame(RST_STREAM, 0, 7, _u32(CANCEL)), PROTOCOL_ERROR, 0),
    "window-update-on-an-idle-stream": (frame(WINDOW_UPDATE, 0, 3, _u32(1)), PROTOCOL_ERROR, 0),
    "priority-on-stream-0": (frame(2, 0, 0, bytes(5)), PROTOCOL_ERROR, 0),
    # A stream error on an idle stream cannot be a reset (6.4): the connection ends.
    "idle-stream-depending-on-itself": (frame(2, 0, 3, _u32(3) + b"\x10"), PROTOCOL_ERROR, 0),
    "headers-on-a-lower-stream-id": (raw_headers(5) + raw_headers(3), PROTOCOL_ERROR, 5),
    "push-promise": (OPEN + frame(5, END_HEADERS, 1, _u32(2)), PROTOCOL_ERROR, 1),
    "goaway-on-a-stream": (frame(GOAWAY, 0, 1, bytes(8)), PROTOCOL_ERROR, 0),
    "continuation-without-headers": (
        frame(CONTINUATION, END_HEADERS, 1, b""),
        PROTOCOL_ERROR,
        0,
    ),
    "header-block-interrupted": (
        raw_headers(1, flags=0) + frame(PING, 0, 0, bytes(8)),
        PROTOCOL_ERROR,
        0,
    ),
    "header-block-past-64-KiB": (
        frame(HEADERS, 0, 1, bytes(16_384))
        + b"".join(frame(CONTINUATION, 0, 1, bytes(16_384)) for _ in range(4)),
        ENHANCE_YOUR_CALM,
        0,
    ),
    "padding-past-the-frame": (frame(DATA, PADDED, 1, bytes([9]) + bytes(3)), PROTOCOL_ERROR, 0),
    "bad-hpack": (frame(HEADERS, END_HEADERS, 1, b"\xff\xff\xff\xff"), COMPRESSION_ERROR, 0),
}


@pytest.mark.parametrize(
    ("sent", "code", "last_stream"), CONNECTION_ERRORS.values(), ids=CONNECTION_ERRORS.keys()
)
async def test_connection_error_is_cut(sent: bytes, code: int, last_stream: int) -> None:
    """After the handshake, a frame the protocol makes a connection error: GOAWAY with its
    code, naming the last stream the server took, then the socket closes and the
    connection's calls are gone."""
    async with serving() as served, raw_client(served.port) as peer:
        await peer.send(sent)
        await peer.closed()
        assert peer.goaway is not None
        assert (peer.goaway.error_code, peer.goaway.last_stream_id) == (code, last_stream)
        assert peer.frames[-1] == peer.goaway
        assert not served.transport._connections
        assert not list(served.server.streams())


async def test_frames_the_server_may_ignore() -> None:
    """PRIORITY, frames of an unknown type, and trailers ending the client's side of a call:
    none of them ends anything; the connection still answers, the call still serves."""
    async with serving() as served, raw_client(served.port) as peer:
        await peer.send(
            frame(2, 0, 1, bytes(5)),  # PRIORITY on an idle stream
            frame(0x20, 0xFF, 0, b"extension"),
            frame(0x20, 0, 3, b"on a stream"),
            frame(PING, 0, 0, b"answered"),
        )
        await peer.until(lambda p: p.of(PING), what="the PING ACK")
        assert peer.of(PING) == [Frame(PING, ACK, 0, b"answered")]
        assert peer.goaway is None
        await peer.send(
            raw_headers(5),
            frame(DATA, 0, 5, prefixed(cds_request())),
            frame(HEADERS, END_HEADERS | END_STREAM, 5, header_block([("x-trailer", "1")])),
        )
        await peer.until(lambda p: _complete(p, 5), what="the response")
        assert served.connection().stream_state(5) is StreamState.HALF_CLOSED_REMOTE


async def test_zero_window_update_on_a_stream_is_a_protocol_error() -> None:
    """RFC 9113 section 6.9: a zero increment on a stream is a stream error of type
    PROTOCOL_ERROR (FLOW_CONTROL_ERROR is for a window past 2^31-1)."""
    async with serving() as served, raw_client(served.port) as peer:
        await peer.send(raw_headers(1), frame(WINDOW_UPDATE, 0, 1, bytes(4)))
        await peer.until(lambda p: p.of(RST_STREAM), what="the reset")
        (reset,) = peer.of(RST_STREAM)
        assert (reset.stream_id, reset.error_code) == (1, PROTOCOL_ERROR)


async def test_settings_raising_a_stream_window_past_the_maximum_is_cut() -> None:
    """RFC 9113 section 6.9.2: a change of SETTINGS_INITIAL_WINDOW_SIZE that takes any
    stream's window past 2^31-1 is a connection error FLOW_CONTROL_ERROR."""
    async with serving() as served, raw_client(served.port) as peer:
        await peer.send(OPEN, frame(WINDOW_UPDATE, 0, 1, _u32(2**31 - 1 - 65_535)))
        calls = served.connection().calls
        await wait_until(lambda: 1 in calls and calls[1].send_window == 2**31 - 1)
        await peer.send(settings_frame({SettingCodes.INITIAL_WINDOW_SIZE: 65_536}))
        await peer.settle(0.2)
        assert peer.goaway is not None, "not cut"
        assert peer.goaway.error_code == FLOW_CONTROL_ERROR


def _stale_request(size: int) -> bytes:
    """A CDS request with a stale nonce (the server ignores it), padded to ``size`` bytes
    with an unknown field (number 1000) that the server's decoder skips."""
    head = cds_request(None, response_nonce="stale")
    tag = bytes([0xC2, 0x3E])  # field 1000, length-delimited
    room = size - len(head) - len(tag) - 3
    length = bytes([0x80 | (room & 0x7F), 0x80 | ((room >> 7) & 0x7F), room >> 14])
    return head + tag + length + bytes(room)


async def test_twenty_megabytes_on_one_stream_never_buffer_more_than_its_window() -> None:
    """A client that obeys flow control sends 20 MB of requests on one stream: while the
    handler does not read, exactly the 1 MiB stream window is buffered and the client can
    send nothing more; once it reads, every request arrives and the server never holds
    more than the window."""
    count, size = 200, 101_000
    async with serving(stalled=True) as served, client(served.port) as peer:
        stream = await peer.open(ADS)
        stale = prefixed(_stale_request(size))
        body = prefixed(cds_request()) + stale * (count - 1)
        assert len(body) > 20_000_000
        sent = 0
        peak = 0

        async def push() -> None:
            nonlocal sent
            sent = await send_within_window(peer, stream, body, sent)

        await peer.until(lambda p: len(p.of(SETTINGS)) == 2, what="SETTINGS and its ACK")
        await push()
        calls = served.connection().calls
        await wait_until(lambda: stream in calls, what="the call")
        call = calls[stream]
        await wait_until(lambda: len(call._buffer) == STREAM_WINDOW, what="1 MiB buffered")
        await peer.settle(0.1)
        await push()  # the window is used up: nothing more goes
        await peer.settle(0.1)
        assert sent == STREAM_WINDOW
        assert len(call._buffer) == STREAM_WINDOW
        assert isinstance(served.server, StalledServer)
        served.server.go.set()
        started, samples = time.monotonic(), 0
        with anyio.fail_after(20):
            while sent < len(body) or served.recorder.requests < count:
                await push()
                peak = max(peak, len(call._buffer))
                await peer.settle(0.005)
                peak = max(peak, len(call._buffer))
                samples += 2
        print(
            f"{len(body):,} bytes on one stream in {time.monotonic() - started:.2f} s: at most "
            f"{peak:,} buffered by the server ({samples} samples)"
        )
        assert served.recorder.requests == count
        assert peak <= STREAM_WINDOW, peak
        assert call.recv_window >= 0


# -- 5. stopping -----------------------------------------------------------------------------------


async def two_answered_streams(peer: Peer) -> list[int]:
    """Two ADS streams, each answered its CDS request."""
    streams = [await peer.open(ADS), await peer.open(ADS)]
    for stream in streams:
        await peer.send_message(stream, cds_request(f"node-{stream}"))
    await peer.until(lambda p: all(p.data(s) for s in streams), what="two responses")
    return streams


async def test_stop_sends_trailers_then_closes() -> None:
    """Stopping the transport: each open stream gets trailers with grpc-status 0, then the
    socket closes. No GOAWAY follows once every call has ended (some clients fail a call
    whose trailers arrive in the same read as a GOAWAY), and no RST_STREAM follows the
    trailers of a client that is not inside a message."""
    async with serving() as served, client(served.port) as peer:
        streams = await two_answered_streams(peer)
        stopping = asyncio.create_task(served.transport.stop())
        await peer.closed()
        await stopping
        for stream in streams:
            assert peer.status(stream) == (OK, "")
        trailers = [f for f in peer.frames if f.kind == HEADERS and f.flags & END_STREAM]
        assert len(trailers) == 2
        assert not [f for f in peer.frames if f.kind in (GOAWAY, RST_STREAM)]
        assert peer.goaway is None


async def test_stop_closes_a_connection_once_its_client_closed_the_ended_streams() -> None:
    """After the trailers, the socket stays open until the client has closed its side of
    every stream the stop ended (gRPC's client answers trailers with RST_STREAM NO_ERROR and
    publishes the status only then: closing at once raced it into UNAVAILABLE "Socket
    closed"), and closes as soon as it has, well inside the grace."""
    async with serving() as served, client(served.port) as peer:
        streams = await two_answered_streams(peer)
        stopping = asyncio.create_task(served.transport.stop())
        await peer.until(lambda p: all(p.status(s) for s in streams), what="the trailers")
        first, second = streams
        peer.h2.reset_stream(first)
        await peer.flush()
        await peer.settle(0.2)
        assert not peer.eof, "closed before the client closed its side of every stream"
        assert not stopping.done()
        peer.h2.reset_stream(second)
        await peer.flush()
        started = time.monotonic()
        await peer.closed(timeout=0.5)
        await stopping
        assert time.monotonic() - started < 0.3
        assert [peer.status(s) for s in streams] == [(OK, ""), (OK, "")]
        assert peer.goaway is None


async def test_stop_closes_after_the_grace_if_the_client_keeps_its_side_open() -> None:
    """A client that never closes its side of an ended stream holds the stop for the grace
    (1 s) at most."""
    async with serving() as served, client(served.port) as peer:
        stream = await peer.open(ADS)
        await peer.send_message(stream, cds_request())
        await peer.until(lambda p: p.data(stream), what="a response")
        started = time.monotonic()
        with anyio.fail_after(3):
            await served.transport.stop()
        assert 0.9 < time.monotonic() - started < 2
        await peer.closed(timeout=1)
        assert peer.status(stream) == (OK, "")


async def test_stop_inside_a_message_resets_the_stream() -> None:
    """Stopping while a 50 KB response waits for a 1000-byte window: the client holds 1000
    bytes of a message, so the stream cannot end with OK (the client would see a truncated
    message and success); it is reset (CANCEL), then the socket closes."""
    async with large_responses(1000) as (served, peer, [stream]):
        await _granted(peer, stream, 1000)
        stopping = asyncio.create_task(served.transport.stop())
        await peer.closed()
        await stopping
        assert peer.status(stream) is None, "a truncated message ended with a status"
        (reset,) = peer.of(RST_STREAM, stream)
        assert reset.error_code == CANCEL
        assert peer.goaway is None


# -- 5. stream states and request checks (RFC 9113 sections 5.1, 5.3.1, 8) --------------------


def _resets(peer: Peer) -> list[tuple[int, int]]:
    return [(f.stream_id, f.error_code) for f in peer.of(RST_STREAM)]


async def _open_and_answered(peer: Peer, stream: int) -> None:
    """An ADS call on ``stream`` whose request got its response (the stream stays open)."""
    await peer.send(raw_headers(stream), frame(DATA, 0, stream, prefixed(cds_request())))
    await peer.until(lambda p: _complete(p, stream), what="the response")


@pytest.mark.parametrize(
    ("sent", "code"),
    [
        # HEADERS on a stream the client already ended (5.1: half-closed (remote)).
        (frame(HEADERS, END_HEADERS | END_STREAM, 1, header_block([("x-t", "1")])), STREAM_CLOSED),
        # DATA likewise.
        (frame(DATA, 0, 1, b"x"), STREAM_CLOSED),
    ],
    ids=["headers", "data"],
)
async def test_frames_after_the_client_ended_its_side_reset_the_stream(
    sent: bytes, code: int
) -> None:
    async with serving(stalled=True) as served, raw_client(served.port) as peer:
        await peer.send(raw_headers(1, flags=END_HEADERS | END_STREAM), sent)
        await peer.until(lambda p: p.of(RST_STREAM), what="the reset")
        assert _resets(peer) == [(1, code)]
        assert served.connection().stream_state(1) is StreamState.RESET_SENT
        assert peer.goaway is None


async def test_frames_after_the_client_reset_the_stream() -> None:
    """After its own RST_STREAM, a client's DATA or HEADERS on the stream is a stream error
    STREAM_CLOSED (5.1), answered once; a PRIORITY is fine; the connection goes on."""
    async with serving() as served, raw_client(served.port) as peer:
        await _open_and_answered(peer, 1)
        await peer.send(frame(RST_STREAM, 0, 1, _u32(CANCEL)), frame(2, 0, 1, bytes(5)))
        await wait_until(lambda: not served.connection().calls, what="the call ended")
        assert served.connection().stream_state(1) is StreamState.RESET_RECEIVED
        await peer.send(frame(DATA, 0, 1, b"late"))
        await peer.until(lambda p: p.of(RST_STREAM), what="the reset")
        assert _resets(peer) == [(1, STREAM_CLOSED)]
        await peer.send(frame(DATA, 0, 1, b"later"))  # after the server's reset: ignored
        await _open_and_answered(peer, 3)
        assert _resets(peer) == [(1, STREAM_CLOSED)]
        assert peer.goaway is None


@pytest.mark.parametrize("late", ["data", "headers"])
async def test_frames_on_a_stream_closed_both_ways_end_the_connection(late: str) -> None:
    """A stream the client ended and the server answered (UNIMPLEMENTED, trailers-only) is
    closed: DATA or HEADERS on it is a connection error STREAM_CLOSED (5.1), naming the
    last stream the server took."""
    sent = {
        "data": frame(DATA, END_STREAM, 1, b"x"),
        "headers": raw_headers(1, "/no.such/Method", flags=END_HEADERS | END_STREAM),
    }[late]
    async with serving() as served, raw_client(served.port) as peer:
        await peer.send(raw_headers(1, "/no.such/Method", flags=END_HEADERS | END_STREAM))
        await peer.until(has_status(1), what="UNIMPLEMENTED")
        assert served.connection().stream_state(1) is StreamState.CLOSED
        await peer.send(sent)
        await peer.closed()
        assert peer.goaway is not None
        assert (peer.goaway.error_code, peer.goaway.last_stream_id) == (STREAM_CLOSED, 1)


async def test_a_stream_the_server_ended_takes_the_rest_of_the_request() -> None:
    """Half-closed (local): the server ended the stream (UNIMPLEMENTED) while the client is
    still sending. Its DATA is taken (credited to the connection, no reset) until its
    END_STREAM closes the stream; DATA after that is a connection error STREAM_CLOSED."""
    async with serving() as served, raw_client(served.port) as peer:
        await peer.send(raw_headers(1, "/no.such/Method"))
        await peer.until(has_status(1), what="UNIMPLEMENTED")
        connection = served.connection()
        assert connection.stream_state(1) is StreamState.HALF_CLOSED_LOCAL
        await peer.send(frame(DATA, 0, 1, b"rest"), frame(DATA, END_STREAM, 1, b"end"))
        await wait_until(lambda: connection.stream_state(1) is StreamState.CLOSED, what="closed")
        assert not peer.of(RST_STREAM)
        await peer.send(frame(DATA, 0, 1, b"after"))
        await peer.closed()
        assert peer.goaway is not None
        assert peer.goaway.error_code == STREAM_CLOSED


async def test_a_second_headers_without_end_stream_is_malformed() -> None:
    """RFC 9113 section 8.1: a HEADERS frame without END_STREAM after the request's makes
    the request malformed: a stream error PROTOCOL_ERROR (it was a connection error), and
    so are trailers that hold a pseudo-header; the connection goes on."""
    async with serving() as served, raw_client(served.port) as peer:
        await _open_and_answered(peer, 1)
        await _open_and_answered(peer, 3)
        await peer.send(
            frame(HEADERS, END_HEADERS, 1, header_block([("x-t", "1")])),
            frame(HEADERS, END_HEADERS | END_STREAM, 3, header_block([(":path", "/")])),
        )
        await peer.until(lambda p: len(p.of(RST_STREAM)) == 2, what="two resets")
        assert _resets(peer) == [(1, PROTOCOL_ERROR), (3, PROTOCOL_ERROR)]
        await _open_and_answered(peer, 5)
        assert not served.connection().calls.keys() - {5}


async def test_a_stream_that_depends_on_itself_is_reset() -> None:
    """RFC 9113 section 5.3.1: HEADERS whose priority names its own stream, and a PRIORITY
    frame on an open stream naming that stream, are stream errors PROTOCOL_ERROR; a
    PRIORITY frame of 4 bytes on an open stream is a stream error FRAME_SIZE_ERROR (6.3)."""
    priority_flag = 0x20
    async with serving() as served, raw_client(served.port) as peer:
        block = header_block(grpc_headers(ADS))
        await peer.send(
            frame(HEADERS, END_HEADERS | priority_flag, 1, _u32(1) + b"\x10" + block),
            raw_headers(3),
            frame(2, 0, 3, _u32(3) + b"\x10"),
            raw_headers(5),
            frame(2, 0, 5, _u32(0)),
        )
        await peer.until(lambda p: len(p.of(RST_STREAM)) == 3, what="three resets")
        assert _resets(peer) == [(1, PROTOCOL_ERROR), (3, PROTOCOL_ERROR), (5, FRAME_SIZE_ERROR)]
        await _open_and_answered(peer, 7)
        assert peer.goaway is None
        assert served.recorder.requests == 1  # only stream 7's handler read a request


async def test_a_malformed_request_is_reset_before_any_handler_sees_it() -> None:
    """RFC 9113 section 8.1.1: a malformed request (here an uppercase field name) is a
    stream error PROTOCOL_ERROR; the server keeps nothing of it but its state, starts no
    handler, and counts it as a rapid reset (the client made the server reset it)."""
    async with serving() as served, raw_client(served.port) as peer:
        fields = [*grpc_headers(ADS), ("X-Upper", "1")]
        await peer.send(frame(HEADERS, END_HEADERS, 1, header_block(fields)))
        await peer.until(lambda p: p.of(RST_STREAM), what="the reset")
        assert _resets(peer) == [(1, PROTOCOL_ERROR)]
        connection = served.connection()
        assert not connection.calls
        assert connection.stream_state(1) is StreamState.RESET_SENT
        assert connection.resets is not None
        assert connection.resets.count == 1
        await peer.send(frame(DATA, END_STREAM, 1, b"in flight"))  # ignored: reset by us
        await _open_and_answered(peer, 3)
        assert _resets(peer) == [(1, PROTOCOL_ERROR)]


@pytest.mark.parametrize(
    ("declared", "frames", "code"),
    [
        ("5", [frame(DATA, END_STREAM, 1, b"too long")], PROTOCOL_ERROR),
        ("5", [frame(DATA, 0, 1, b"abc"), frame(DATA, END_STREAM, 1, b"")], PROTOCOL_ERROR),
        (
            "5",
            [frame(HEADERS, END_HEADERS | END_STREAM, 1, header_block([("x-t", "1")]))],
            PROTOCOL_ERROR,
        ),
        ("zero", [], PROTOCOL_ERROR),
    ],
    ids=["more-than-declared", "fewer-than-declared", "trailers-before-the-body", "not-a-number"],
)
async def test_content_length_must_match_the_data(
    declared: str, frames: list[bytes], code: int
) -> None:
    """RFC 9113 section 8.1.1: a request whose DATA does not add up to its content-length
    (or whose content-length is not a number) is malformed: stream error PROTOCOL_ERROR."""
    async with serving() as served, raw_client(served.port) as peer:
        await peer.send(raw_headers(1, content_length=declared), *frames)
        await peer.until(lambda p: p.of(RST_STREAM), what="the reset")
        assert _resets(peer) == [(1, code)]
        await _open_and_answered(peer, 3)


async def test_a_request_whose_data_adds_up_to_its_content_length_is_served() -> None:
    message = prefixed(cds_request())
    async with serving() as served, raw_client(served.port) as peer:
        await peer.send(
            raw_headers(1, content_length=str(len(message))),
            frame(DATA, 0, 1, message[:10]),
            frame(DATA, END_STREAM, 1, message[10:]),
        )
        await peer.until(lambda p: _complete(p, 1), what="the response")
        assert not peer.of(RST_STREAM)


async def test_a_refused_stream_is_remembered() -> None:
    """The 101st stream is refused (REFUSED_STREAM): what the client sent on it before it
    knew (DATA, trailers) is ignored, not taken for frames on an idle or unknown stream."""
    async with serving(stalled=True) as served, raw_client(served.port) as peer:
        await peer.send(*(raw_headers(stream) for stream in range(1, 202, 2)))
        await peer.until(lambda p: p.of(RST_STREAM), what="the refusal")
        connection = served.connection()
        assert connection.stream_state(201) is StreamState.RESET_SENT
        await peer.send(
            frame(DATA, 0, 201, b"request"),
            frame(HEADERS, END_HEADERS | END_STREAM, 201, header_block([("x-t", "1")])),
            frame(WINDOW_UPDATE, 0, 201, _u32(1)),
            frame(PING, 0, 0, b"stillok?"),
        )
        await peer.until(lambda p: p.of(PING), what="the PING ACK")
        assert _resets(peer) == [(201, REFUSED_STREAM)]
        assert peer.goaway is None


async def test_closed_streams_are_remembered_within_a_bound() -> None:
    """A connection remembers REMEMBERED_STREAMS closed streams; the oldest is forgotten
    first, and a frame on a forgotten stream is ignored (a HEADERS on it would reopen a
    stream below the last id: a connection error)."""
    count = REMEMBERED_STREAMS + 2
    async with serving() as served, raw_client(served.port) as peer:
        await peer.send(
            *(
                raw_headers(stream, "/no.such/Method", flags=END_HEADERS | END_STREAM)
                for stream in range(1, 2 * count, 2)
            )
        )
        await peer.until(lambda p: p.status(2 * count - 1) is not None, what="the answers")
        connection = served.connection()
        states = [connection.stream_state(stream) for stream in range(1, 2 * count, 2)]
        assert states == [StreamState.FORGOTTEN] * 2 + [StreamState.CLOSED] * REMEMBERED_STREAMS
        await peer.send(frame(DATA, 0, 1, b"x"), frame(WINDOW_UPDATE, 0, 1, _u32(1)))
        await peer.send(frame(PING, 0, 0, b"stillok?"))
        await peer.until(lambda p: p.of(PING), what="the PING ACK")
        assert peer.goaway is None
        await peer.send(raw_headers(1))
        await peer.closed()
        assert peer.goaway is not None
        assert peer.goaway.error_code == PROTOCOL_ERROR
