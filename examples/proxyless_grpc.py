"""Proxyless gRPC: grpcio's own xDS client configured by xdscore, then re-routed.

The program of docs/tutorial-proxyless-grpc.md (tests/unit/test_docs_snippets.py runs the
page's copy and checks that this file holds the same program). It starts a control plane on
a free loopback port, hands grpcio the bootstrap ``xdscore bootstrap grpc`` prints, calls
``xds:///echo.example`` (backend A), changes the route, and calls again (backend B):

    python examples/proxyless_grpc.py
"""

import os
import subprocess
import sys
import time
from concurrent import futures

import anyio.from_thread

from xdscore import Http2Transport, Snapshot, SnapshotCache, XdsServer, same_for_all
from xdscore import builders as b

TARGET = "echo.example"  # the client dials xds:///echo.example


def resources(backends: dict[str, int], route_to: str) -> Snapshot:
    found: list[object] = [
        b.api_listener(TARGET, "echo-routes"),  # the listener a gRPC client asks for
        b.route_configuration("echo-routes", [("/", route_to)]),
    ]
    for cluster, port in backends.items():
        found += [
            b.eds_cluster(cluster, http2=True),
            b.load_assignment(cluster, [("127.0.0.1", port)]),
        ]
    return Snapshot(found)


async def start() -> tuple[SnapshotCache, Http2Transport, int]:
    """The control plane, made and started on its event loop (the portal's thread)."""
    cache = SnapshotCache(group=same_for_all)
    transport = Http2Transport(XdsServer(cache))
    return cache, transport, await transport.start("127.0.0.1", 0)


with anyio.from_thread.start_blocking_portal() as portal:  # an event loop in a thread
    cache, transport, xds_port = portal.call(start)

    # What the client reads: the bootstrap `xdscore bootstrap grpc` prints, handed over in
    # GRPC_XDS_BOOTSTRAP_CONFIG (or saved to a file named by GRPC_XDS_BOOTSTRAP).
    command = [sys.executable, "-m", "xdscore", "bootstrap", "grpc"]
    command += ["--server", f"127.0.0.1:{xds_port}", "--node", "echo-client-1"]
    os.environ["GRPC_XDS_BOOTSTRAP_CONFIG"] = subprocess.run(
        command, capture_output=True, text=True, check=True
    ).stdout
    import grpc  # after the bootstrap is set

    def backend(name: str) -> tuple[grpc.Server, int]:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        say = grpc.unary_unary_rpc_method_handler(lambda request, context: name.encode())
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler("demo.Echo", {"Say": say}),)
        )
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        return server, port

    (server_a, port_a), (server_b, port_b) = backend("backend A"), backend("backend B")
    backends = {"echo-a": port_a, "echo-b": port_b}
    portal.call(cache.set_snapshot, None, resources(backends, route_to="echo-a"))

    with grpc.insecure_channel(f"xds:///{TARGET}") as channel:
        say = channel.unary_unary("/demo.Echo/Say")  # bytes in, bytes out
        print("reply:", say(b"hi", timeout=10, wait_for_ready=True).decode())

        portal.call(cache.set_snapshot, None, resources(backends, route_to="echo-b"))
        deadline = time.monotonic() + 10
        while say(b"hi", timeout=10) != b"backend B" and time.monotonic() < deadline:
            time.sleep(0.05)  # the client applies the new route within a fraction of a second
        print("after the change:", say(b"hi", timeout=10).decode())

    server_a.stop(None)
    server_b.stop(None)
    portal.call(transport.stop)
