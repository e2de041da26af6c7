"""Rebalancing against a real Envoy: its ADS stream is ended for its age several times
while HTTP traffic flows through it; not one request fails, and Envoy logs no warning."""

from __future__ import annotations

import time

import pytest

from xdscore import Http2Transport, SnapshotCache, XdsServer, same_for_all
from xdscore.server import Rebalancing
from xdscore.testing import Envoy, HttpBackend, envoy_bootstrap, free_port

from ._envoy_support import Recorder, make_snapshot, traffic_running, wait_traffic

pytestmark = [pytest.mark.anyio, pytest.mark.envoy, pytest.mark.timeout(60)]

RECYCLES = 4


@pytest.mark.parametrize("delta", [False, True], ids=["sotw", "delta"])
async def test_traffic_flows_while_envoys_stream_is_recycled(delta: bool) -> None:
    recorder = Recorder()
    policy = Rebalancing(max_stream_age=1.0)
    with HttpBackend("hello") as backend:
        listener_port = free_port()
        cache = SnapshotCache(group=same_for_all)
        cache.set_snapshot(None, make_snapshot(listener_port, {"b": backend.port}, "b"))
        server = XdsServer(cache, callbacks=recorder, rebalancing=policy)
        async with Http2Transport(server) as transport:
            xds_port = await transport.start()
            async with Envoy(envoy_bootstrap(xds_port=xds_port, delta=delta)) as envoy:
                await wait_traffic(envoy, listener_port, "hello")
                started = time.monotonic()
                async with traffic_running(listener_port, workers=2) as traffic:
                    await envoy.wait_for(
                        lambda: len(recorder.opened()) > RECYCLES,
                        timeout=RECYCLES * 1.1 + 10,
                        what=f"{RECYCLES} streams recycled and Envoy back each time",
                    )
                    await traffic.flowing(20, since=time.monotonic())
                lasted = time.monotonic() - started
                stats = await envoy.stats()
                log = envoy.log
    assert server.metrics is not None
    recycled = server.metrics.registry.get_sample_value("xdscore_rebalanced_streams_total")
    assert recycled >= RECYCLES
    # Envoy reconnected each time: one stream open per recycle, plus the current one.
    assert len(recorder.opened()) >= RECYCLES + 1
    assert traffic.failures() == [], traffic.failures()[:5]
    assert len(traffic.results) > 50
    # Envoy counted no rejected update, and logged no warning about the stream.
    rejected = {k: v for k, v in stats.items() if k.endswith("update_rejected") and v}
    assert rejected == {}
    assert "gRPC config stream to xds_cluster closed" not in log
    print(
        f"{'delta' if delta else 'sotw'}: {recycled:.0f} recycles in {lasted:.1f} s, "
        f"{len(traffic.results)} requests, 0 failed"
    )
