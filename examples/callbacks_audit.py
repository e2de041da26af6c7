"""Server callbacks: an audit log, refusing unknown nodes, a NACK, and per-stream status.

Run it with ``.venv/bin/python examples/callbacks_audit.py``. Two Envoys connect: ``edge-1``
is on the allow list and gets its configuration; ``intruder`` is refused with
PERMISSION_DENIED by a callback, keeps retrying, and never gets anything. The example then
sets a route configuration Envoy rejects (the same domain twice), shows the NACK and that
the rejected version is not sent again, fixes it, and prints what the server knows about
each stream. It exits within a minute.
"""

from __future__ import annotations

import time

import anyio

from xdscore import (
    ROUTE,
    GrpcStatus,
    Http2Transport,
    RemoteProtocolError,
    ResponseAcked,
    ResponseNacked,
    ServerCallbacks,
    Snapshot,
    SnapshotCache,
    StreamInfo,
    XdsServer,
    by_node_id,
)
from xdscore import builders as b
from xdscore.protocol import DeltaDiscoveryRequest, DeltaResponse, DiscoveryRequest, SotwResponse
from xdscore.testing import Envoy, HttpBackend, envoy_bootstrap, free_port, http_get

ALLOWED = {"edge-1"}


def short(type_url: str) -> str:
    return type_url.rsplit(".", 1)[-1]


class Audit(ServerCallbacks):
    """Logs every stream, ACK, NACK and response; refuses nodes not on the allow list."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.refused = 0
        self.nacks: list[ResponseNacked] = []
        self.refusal = anyio.Event()
        self.nacked = anyio.Event()
        self.route_acked = anyio.Event()
        self.responses: list[tuple[str, str, str]] = []  # (node id, type URL, version)

    def log(self, stream: StreamInfo, text: str) -> None:
        node = stream.node.id if stream.node is not None else "?"
        print(f"[{time.monotonic() - self.started:6.2f}s] stream {stream.id} ({node}): {text}")

    def on_stream_open(self, stream: StreamInfo) -> None:
        self.log(stream, f"opened by {stream.peer} ({stream.protocol})")

    def on_stream_close(self, stream: StreamInfo, error: BaseException | None) -> None:
        self.log(stream, f"closed ({error!r})" if error else "closed")

    def on_request(
        self, stream: StreamInfo, request: DiscoveryRequest | DeltaDiscoveryRequest
    ) -> None:
        # On the first request stream.node is not set yet: the node is in the request.
        if stream.node is None and request.node is not None and request.node.id not in ALLOWED:
            self.refused += 1
            self.refusal.set()
            self.log(stream, f"refusing node {request.node.id!r}")
            raise RemoteProtocolError(
                f"node {request.node.id!r} is not allowed", GrpcStatus.PERMISSION_DENIED
            )

    def on_ack(self, stream: StreamInfo, event: ResponseAcked) -> None:
        self.log(stream, f"ACK {short(event.type_url)} {event.version_info}")
        if event.type_url == ROUTE:
            self.route_acked.set()

    def on_nack(self, stream: StreamInfo, event: ResponseNacked) -> None:
        self.nacks.append(event)
        self.nacked.set()
        self.log(stream, f"NACK {short(event.type_url)} {event.rejected}: {event.error.message}")

    def on_response(self, stream: StreamInfo, response: SotwResponse | DeltaResponse) -> None:
        assert isinstance(response, SotwResponse)
        assert stream.node is not None
        self.responses.append((stream.node.id, response.type_url, response.version_info))


def snapshot(listener_port: int, backend_port: int, domains: tuple[str, ...]) -> Snapshot:
    return Snapshot(
        [
            b.http_listener("listener_0", listener_port, "route_0"),
            b.route_configuration("route_0", [("/", "backend")], domains=domains),
            b.eds_cluster("backend"),
            b.load_assignment("backend", [("127.0.0.1", backend_port)]),
        ]
    )


async def main() -> None:
    audit = Audit()
    cache = SnapshotCache(group=by_node_id)
    server = XdsServer(cache, callbacks=audit, control_plane_id="audit-example")
    listener_port = free_port()
    with HttpBackend("ok") as backend, anyio.fail_after(60):
        cache.set_snapshot("edge-1", snapshot(listener_port, backend.port, ("*",)))
        async with Http2Transport(server) as transport:
            port = await transport.start()
            intruder = envoy_bootstrap(xds_port=port, node_id="intruder")
            # Without a control plane answering, Envoy would wait 15 s before going live.
            intruder["dynamic_resources"]["cds_config"]["initial_fetch_timeout"] = "1s"
            async with (
                Envoy(envoy_bootstrap(xds_port=port, node_id="edge-1")),
                Envoy(intruder) as intruder_envoy,
            ):
                status, _headers, body = await http_get("127.0.0.1", listener_port)
                print(f"-- edge-1 serves traffic: {status} {body!r}")
                await audit.refusal.wait()
                dump = await intruder_envoy.config_dump("dynamic_active_clusters")
                print(f"-- the intruder's Envoy holds {len(dump.get('configs', []))} clusters")

                bad = snapshot(listener_port, backend.port, ("example.com", "example.com"))
                cache.set_snapshot("edge-1", bad)
                await audit.nacked.wait()
                rejected = audit.nacks[-1].rejected
                await anyio.sleep(1)
                sent = [r for r in audit.responses if r[1] == ROUTE and r[2] == rejected]
                print(f"-- the rejected version was sent {len(sent)} time(s) in all")
                assert len(sent) == 1

                audit.route_acked = anyio.Event()
                cache.set_snapshot("edge-1", snapshot(listener_port, backend.port, ("*", "a")))
                await audit.route_acked.wait()

                print("-- streams being served:")
                for stream in server.streams():
                    info = stream.info
                    node = info.node.id if info.node is not None else "?"
                    print(f"   stream {info.id} node={node} peer={info.peer} {info.protocol}")
                    for type_url, state in stream.machine.type_states().items():
                        error = state.last_error.message[:50] if state.last_error else None
                        print(
                            f"     {short(type_url):22} held={state.held_version} "
                            f"rejected={state.rejected_version} acks={state.acks} "
                            f"nacks={state.nacks} last_error={error!r}"
                        )
    print(f"done; the intruder was refused {audit.refused} time(s)")


if __name__ == "__main__":
    anyio.run(main)
