"""High-churn endpoints: a LinearCache for EDS behind a MuxCache, served over Delta ADS.

Run it with ``.venv/bin/python examples/linear_eds.py``. Listeners, routes and clusters sit
in a SnapshotCache; endpoints sit in a LinearCache, where each ClusterLoadAssignment is set
on its own. An Envoy bootstrapped for Delta ADS routes ``/`` to cluster ``web`` and ``/api``
to cluster ``api``. The example then moves ``web`` between three backends ten times,
checking after each move that traffic follows, and counts what the server sent: only
endpoints responses, each carrying only the ``web`` assignment. It exits within a minute.
"""

from __future__ import annotations

import collections

import anyio

from xdscore import (
    ENDPOINT,
    Http2Transport,
    LinearCache,
    MuxCache,
    ServerCallbacks,
    Snapshot,
    SnapshotCache,
    StreamInfo,
    XdsServer,
    same_for_all,
)
from xdscore import builders as b
from xdscore.protocol import DeltaResponse, SotwResponse
from xdscore.testing import Envoy, HttpBackend, envoy_bootstrap, free_port, http_get


class CountResponses(ServerCallbacks):
    """Counts responses by type, and remembers which resources each one carried."""

    def __init__(self) -> None:
        self.by_type: collections.Counter[str] = collections.Counter()
        self.names: list[tuple[str, ...]] = []

    def on_response(self, stream: StreamInfo, response: SotwResponse | DeltaResponse) -> None:
        assert isinstance(response, DeltaResponse)  # this example serves Delta only
        self.by_type[response.type_url.rsplit(".", 1)[-1]] += 1
        self.names.append(tuple(resource.name for resource in response.resources))


async def wait_for_body(port: int, path: str, expected: str) -> None:
    while True:
        try:
            _status, _headers, body = await http_get("127.0.0.1", port, path)
            if body == expected:
                return
        except OSError:
            pass
        await anyio.sleep(0.02)


async def main() -> None:
    listener_port = free_port()
    snapshots = SnapshotCache(group=same_for_all)
    snapshots.set_snapshot(
        None,
        Snapshot(
            [
                b.http_listener("listener_0", listener_port, "route_0"),
                b.route_configuration("route_0", [("/api", "api"), ("/", "web")]),
                b.eds_cluster("web"),
                b.eds_cluster("api"),
            ]
        ),
    )
    endpoints = LinearCache(ENDPOINT)
    cache = MuxCache({ENDPOINT: endpoints}, default=snapshots)
    counter = CountResponses()
    server = XdsServer(cache, callbacks=counter)

    with (
        HttpBackend("web-0") as web0,
        HttpBackend("web-1") as web1,
        HttpBackend("web-2") as web2,
        HttpBackend("api") as api,
        anyio.fail_after(60),
    ):
        webs = [web0, web1, web2]
        endpoints.update(
            put=[
                b.load_assignment("web", [("127.0.0.1", web0.port)]),
                b.load_assignment("api", [("127.0.0.1", api.port)]),
            ]
        )
        async with Http2Transport(server) as transport:
            port = await transport.start()
            async with Envoy(envoy_bootstrap(xds_port=port, delta=True)):
                await wait_for_body(listener_port, "/", "web-0")
                await wait_for_body(listener_port, "/api", "api")
                print(f"converged; responses so far: {dict(counter.by_type)}")
                counter.by_type.clear()
                counter.names.clear()

                for move in range(1, 11):
                    target = webs[move % 3]
                    # One resource changes; nothing else is rebuilt or re-sent.
                    endpoints.set_resource(b.load_assignment("web", [("127.0.0.1", target.port)]))
                    await wait_for_body(listener_port, "/", target.body)
                print(f"10 endpoint moves; responses sent: {dict(counter.by_type)}")
                print(f"resources per response: {sorted(set(counter.names))}")
                assert set(counter.by_type) == {"ClusterLoadAssignment"}
                assert set(counter.names) == {("web",)}
                status, _headers, body = await http_get("127.0.0.1", listener_port, "/api")
                print(
                    f"/api still answers {status} {body!r}; linear cache generation "
                    f"{endpoints.generation}"
                )
    print("done")


if __name__ == "__main__":
    anyio.run(main)
