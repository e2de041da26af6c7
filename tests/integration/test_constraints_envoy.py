"""Proof that the field constraints analyze checks (XDS013) are Envoy's: each planted
violation, pushed to a real Envoy through the API (which does not run the analysis), is
NACKed, while the valid cluster before it was accepted."""

from __future__ import annotations

import pytest

from xdscore import Snapshot, SnapshotCache, XdsServer, same_for_all
from xdscore.analysis import FIELD_CONSTRAINT, analyze
from xdscore.testing import Envoy, envoy_bootstrap
from xdscore.transport import Http2Transport

from ..unit.test_constraints import FAMILIES, GOOD_CLUSTER, cluster_with

pytestmark = [pytest.mark.anyio, pytest.mark.envoy, pytest.mark.timeout(120)]


async def test_envoy_nacks_every_planted_violation() -> None:
    cache = SnapshotCache(group=same_for_all)
    good = cluster_with("connect_timeout", GOOD_CLUSTER["connect_timeout"])
    cache.set_snapshot(None, Snapshot([good]))
    async with Http2Transport(XdsServer(cache)) as transport:
        port = await transport.start()
        async with Envoy(envoy_bootstrap(xds_port=port)) as envoy:

            async def counter(name: str) -> int:
                return (await envoy.stats()).get(f"cluster_manager.cds.{name}", 0)

            async def accepted() -> bool:
                return await counter("update_success") >= 1

            await envoy.wait_for(accepted, what="the valid cluster accepted")
            for family, path, value, rule in FAMILIES:
                bad = Snapshot([cluster_with(path, value)])
                assert FIELD_CONSTRAINT in analyze(bad).codes(), family
                before = await counter("update_rejected")
                cache.set_snapshot(None, bad)

                async def rejected(before: int = before) -> bool:
                    return await counter("update_rejected") > before

                await envoy.wait_for(rejected, what=f"the NACK of {family} ({rule})")
