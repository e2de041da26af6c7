"""Resource TTLs and heartbeats against a real Envoy (1.40), over SotW and Delta ADS.

Envoy 1.40 advertises no client features; xdscore assumes TTLs and wrapped SotW entries for
it (``ASSUMED_FEATURES``). What Envoy does with a TTL, as its xDS clients are written: over
Delta, each ``Resource.ttl`` starts a timer that a heartbeat (same version, no body) or any
new copy restarts; over SotW the TTL travels in the ``envoy.service.discovery.v3.Resource``
wrapper and only resources Envoy applies restart it (so xdscore's SotW heartbeat repeats the
held listeners, bodies included). When a timer fires Envoy removes the resource, as if the
server had removed it: a listener stops accepting connections.

Each test serves two listeners with a 2 s TTL (over SotW only ``drop`` has one: a SotW
heartbeat of listeners is all or nothing), keeps traffic through both working for three
TTLs on heartbeats alone, then stops the heartbeats of ``drop`` and checks that Envoy drops
that listener when its TTL lapses, not before, while ``keep`` goes on serving. A last test
shows why SotW heartbeats carry bodies: encoded body-less, they delete every listener.
"""

from __future__ import annotations

import datetime
import time

import anyio
import attrs
import pytest
from envoy.service.discovery.v3 import discovery_pb2

from xdscore import (
    CLUSTER,
    LISTENER,
    Http2Transport,
    Snapshot,
    SnapshotCache,
    XdsServer,
    make_resource,
    same_for_all,
)
from xdscore import builders as b
from xdscore.protocol import ClientFeatures, SotwResponse
from xdscore.server import _codecs, _server
from xdscore.testing import Envoy, HttpBackend, envoy_bootstrap, free_port

from ._envoy_support import CallbackLog, get

pytestmark = [pytest.mark.anyio, pytest.mark.envoy, pytest.mark.timeout(90)]

TTL = 2.0
LOOPBACK = "127.0.0.1"


def ttl_snapshot(backend_port: int, keep_port: int, drop_port: int, *, keep_ttl: bool) -> Snapshot:
    """Listeners ``keep`` and ``drop`` (``drop`` with a TTL; ``keep`` too if ``keep_ttl``),
    each with its own route to cluster ``a``."""
    return Snapshot(
        [
            make_resource(b.eds_cluster("a")),
            make_resource(b.load_assignment("a", [(LOOPBACK, backend_port)])),
            make_resource(
                b.http_listener("keep", keep_port, "route_keep"), ttl=TTL if keep_ttl else None
            ),
            make_resource(b.http_listener("drop", drop_port, "route_drop"), ttl=TTL),
            make_resource(b.route_configuration("route_keep", [("/", "a")])),
            make_resource(b.route_configuration("route_drop", [("/", "a")])),
        ]
    )


async def serves(port: int) -> bool:
    result = await get(port, timeout=1.0)
    return result is not None and result[0] == 200 and result[2] == "hello"


async def active_listeners(envoy: Envoy) -> set[str]:
    """Names of the dynamic listeners Envoy has active (config_dump, ``active_state``)."""
    dump = await envoy.config_dump("dynamic_listeners")
    return {item["name"] for item in dump.get("configs", []) if "active_state" in item}


def heartbeats(server: XdsServer) -> float:
    assert server.metrics is not None
    value = server.metrics.registry.get_sample_value("xdscore_heartbeats_total", {"type": "lds"})
    return value or 0.0


@pytest.mark.parametrize("delta", [False, True], ids=["sotw", "delta"])
async def test_heartbeats_keep_a_ttl_resource_and_stopping_them_lets_it_lapse(
    delta: bool,
) -> None:
    log = CallbackLog()
    with HttpBackend("hello") as backend:
        keep_port, drop_port = free_port(), free_port()
        cache = SnapshotCache(group=same_for_all)
        cache.set_snapshot(None, ttl_snapshot(backend.port, keep_port, drop_port, keep_ttl=delta))
        server = XdsServer(cache, callbacks=log)
        transport = Http2Transport(server)
        await transport.start(port=0)
        try:
            assert transport.port is not None
            async with Envoy(envoy_bootstrap(xds_port=transport.port, delta=delta)) as envoy:

                async def both_serve() -> bool:
                    return await serves(keep_port) and await serves(drop_port)

                await envoy.wait_for(both_serve, timeout=20, interval=0.1)
                assert await active_listeners(envoy) == {"keep", "drop"}
                # What Envoy 1.40 advertises: nothing. What the stream uses: the defaults.
                first = log.select("request")[0]
                assert first.node.user_agent_name == "envoy"
                assert first.node.client_features == ()
                assert log.opened()[0].features == ClientFeatures(ttl=True, resource_in_sotw=True)

                # Three TTLs on heartbeats alone: nothing changes in the cache, and every
                # request through both listeners succeeds.
                beats_before = heartbeats(server)
                failures: list[tuple[int, float]] = []
                started = time.monotonic()
                requests = 0
                while time.monotonic() - started < 3 * TTL:
                    for port in (keep_port, drop_port):
                        requests += 1
                        if not await serves(port):
                            failures.append((port, time.monotonic() - started))
                    await anyio.sleep(0.1)
                beats = heartbeats(server) - beats_before
                assert failures == [], f"{len(failures)} of {requests} failed: {failures[:5]}"
                assert requests >= 30
                # One every third of the TTL: about nine in three TTLs.
                assert 5 <= beats <= 14, beats
                assert await active_listeners(envoy) == {"keep", "drop"}

                # No more heartbeats for "drop": Envoy lets it lapse within its TTL (after
                # the last heartbeat), and only then.
                server.stop_heartbeats(LISTENER, "drop")
                stopped = time.monotonic()

                async def drop_gone() -> bool:
                    return "drop" not in await active_listeners(envoy)

                await envoy.wait_for(drop_gone, timeout=TTL + 3, interval=0.05)
                gone_after = time.monotonic() - stopped
                assert TTL * 0.3 < gone_after < TTL + 1.5, gone_after
                assert await get(drop_port, timeout=1.0) is None  # nothing listens there

                # "keep" still serves, over two more TTLs.
                started = time.monotonic()
                while time.monotonic() - started < 2 * TTL:
                    assert await serves(keep_port)
                    await anyio.sleep(0.2)
                assert await active_listeners(envoy) == {"keep"}
                assert log.nacks() == [], log.dump()
                # The cache never changed: one listener and one cluster response were all
                # the server sent but heartbeats; what Envoy dropped, it dropped by its TTL.
                sent = log.select("response", LISTENER)
                assert len([r for r in sent if not r.heartbeat]) == 1, log.dump()
                assert len(log.select("response", CLUSTER)) == 1, log.dump()
        finally:
            with anyio.CancelScope(shield=True):
                await transport.stop()


def body_less(response: SotwResponse, control_plane: str) -> tuple[bytes, ...]:
    """A SotW response encoded as xds_protocol.rst describes a heartbeat for heartbeats:
    each resource wrapped with its name, the held version and its TTL, and no body."""
    if not response.heartbeat:
        return _codecs.SOTW.encode(response, control_plane)
    message = discovery_pb2.DiscoveryResponse(
        version_info=response.version_info, nonce=response.nonce, type_url=response.type_url
    )
    for resource in response.selection.resources.values():
        wrapper = discovery_pb2.Resource(name=resource.name, version=response.version_info)
        if resource.ttl is not None:
            wrapper.ttl.FromTimedelta(datetime.timedelta(seconds=resource.ttl))
        message.resources.add().Pack(wrapper)
    data: bytes = message.SerializeToString()
    return (data,)


async def test_body_less_sotw_heartbeats_would_delete_every_listener(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Why xdscore's SotW heartbeats repeat the bodies: with body-less ones (the shape the
    protocol text gives), Envoy 1.40 leaves the heartbeats out of the listeners it applies and
    so applies an empty listener set at the first heartbeat, the listener without a TTL
    included."""
    monkeypatch.setattr(_server, "SOTW", attrs.evolve(_codecs.SOTW, encode=body_less))
    with HttpBackend("hello") as backend:
        keep_port, drop_port = free_port(), free_port()
        cache = SnapshotCache(group=same_for_all)
        cache.set_snapshot(None, ttl_snapshot(backend.port, keep_port, drop_port, keep_ttl=False))
        server = XdsServer(cache)
        transport = Http2Transport(server)
        await transport.start(port=0)
        try:
            assert transport.port is not None
            async with Envoy(envoy_bootstrap(xds_port=transport.port)) as envoy:

                async def both_active() -> bool:
                    return await active_listeners(envoy) == {"keep", "drop"}

                await envoy.wait_for(both_active, timeout=20, interval=0.05)
                started = time.monotonic()

                async def none_active() -> bool:
                    return await active_listeners(envoy) == set()

                await envoy.wait_for(none_active, timeout=TTL, interval=0.05)
                assert heartbeats(server) >= 1
                # Gone at the first heartbeat (a third of the TTL), not when the TTL lapsed.
                assert time.monotonic() - started < TTL * 0.6
        finally:
            with anyio.CancelScope(shield=True):
                await transport.stop()
