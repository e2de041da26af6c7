"""Sync status and metrics, in memory: real machines, real codec, no network and no sleeps.

Clients are joined to :meth:`XdsServer.run_stream` by :func:`~xdscore.testing.byte_stream_pair`
(each direction unbuffered, so a server write completes only when its client reads it). A
test either drives a client machine by hand, reading each response and sending its answer
itself, or runs it with a :class:`~xdscore.server.ClientDriver`. Every wait is on the
callbacks' signal, under a deadline.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.abc
import attrs
import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from xdscore import (
    CLUSTER,
    ENDPOINT,
    LISTENER,
    ROUTE,
    SECRET,
    GrpcStatus,
    RemoteProtocolError,
    Snapshot,
    SnapshotCache,
    XdsServer,
    same_for_all,
)
from xdscore._memos import usage
from xdscore.protocol import (
    DeltaClient,
    DeltaDiscoveryResponse,
    DiscoveryRequest,
    DiscoveryResponse,
    SotwClient,
)
from xdscore.server import ClientDriver, ServerLimits
from xdscore.server._metrics import Metrics
from xdscore.server._status import StreamStatus, SyncState, TypeStatus
from xdscore.testing import MemoryByteStream, byte_stream_pair
from xdscore.wire import (
    Resource,
    all_types,
    decode_delta_response,
    decode_response,
    encode_delta_request,
    encode_request,
    make_node,
)
from xdscore.wire._csds import StatusQuery

from .test_driver import DEADLINE, Recorder, config, until

pytestmark = pytest.mark.anyio

XDS_TYPES = (CLUSTER, ENDPOINT, LISTENER, ROUTE)
REASON = "cluster 'bad' refused: its port is out of range"


def reject_bad(type_url: str, resources: Sequence[Resource]) -> str | None:
    """A client ``validate`` hook refusing the cluster named ``bad``."""
    if type_url == CLUSTER and any(resource.name == "bad" for resource in resources):
        return REASON
    return None


@attrs.define
class Plane:
    """A server whose streams run in memory; the test holds the client ends."""

    server: XdsServer
    cache: SnapshotCache
    recorder: Recorder
    group: anyio.abc.TaskGroup
    refusals: list[RemoteProtocolError] = attrs.field(factory=list)

    def wake(self) -> anyio.Event:
        return self.recorder.changed

    def open(
        self, protocol: str = "sotw", type_url: str | None = None
    ) -> tuple[MemoryByteStream, MemoryByteStream]:
        """A new stream being served (ADS, or the service of ``type_url``): (client, server)."""
        client_end, server_end = byte_stream_pair()

        async def serve() -> None:
            try:
                await self.server.run_stream(
                    server_end,
                    protocol=protocol,  # type: ignore[arg-type]
                    type_url=type_url,
                )
            except RemoteProtocolError as exc:
                self.refusals.append(exc)
                self.recorder.signal()

        self.group.start_soon(serve)
        return client_end, server_end

    def client(self, machine: SotwClient | DeltaClient, *, follow: bool = True) -> ClientDriver:
        """A client driver on a new stream, running."""
        protocol = "delta" if isinstance(machine, DeltaClient) else "sotw"
        driver = ClientDriver(
            machine, self.open(protocol)[0], follow=follow, on_response=self.recorder.client_saw
        )
        self.group.start_soon(driver.run)
        return driver

    def stream(self, node_id: str) -> StreamStatus | None:
        found = [status for status in self.server.status() if status.node_id == node_id]
        assert len(found) <= 1, found
        return found[0] if found else None

    def type(self, node_id: str, type_url: str) -> TypeStatus | None:
        stream = self.stream(node_id)
        if stream is None:
            return None
        found = [t for t in stream.types if t.type_url == type_url]
        return found[0] if found else None

    def expect(self, node_id: str, type_url: str) -> TypeStatus:
        status = self.type(node_id, type_url)
        assert status is not None, (node_id, type_url)
        return status

    def expect_stream(self, node_id: str) -> StreamStatus:
        stream = self.stream(node_id)
        assert stream is not None, node_id
        return stream

    async def sent(self, node_id: str, type_url: str, version: str) -> TypeStatus:
        """The status once the server finished writing ``version`` of ``type_url``."""
        await self.until(
            lambda: (t := self.type(node_id, type_url)) is not None and t.sent_version == version
        )
        return self.expect(node_id, type_url)

    def sync(self, node_id: str, type_url: str) -> SyncState | None:
        status = self.type(node_id, type_url)
        return status.sync if status is not None else None

    def synced_at(self, node_id: str, snapshot: Snapshot, types: Iterable[str]) -> bool:
        """Each of ``types`` is SYNCED for ``node_id`` at ``snapshot``'s version."""
        for type_url in types:
            status = self.type(node_id, type_url)
            if status is None or status.sync is not SyncState.SYNCED:
                return False
            if status.acked_version != snapshot.version(type_url):
                return False
        return True

    async def until(self, condition: Callable[[], bool]) -> None:
        await until(condition, self.wake)

    def value(self, name: str, **labels: str) -> float:
        """A sample of the server's metrics (0 when the child does not exist yet)."""
        metrics = self.server.metrics
        assert metrics is not None
        value = metrics.registry.get_sample_value(name, labels)
        return 0.0 if value is None else value


@asynccontextmanager
async def plane(*, max_streams: int = 100) -> AsyncIterator[Plane]:
    cache = SnapshotCache(group=same_for_all)
    recorder = Recorder()
    server = XdsServer(
        cache, callbacks=recorder, server_limits=ServerLimits(max_streams=max_streams)
    )
    async with anyio.create_task_group() as group:
        yield Plane(server, cache, recorder, group)
        group.cancel_scope.cancel()


def check_synced(status: TypeStatus | None, version: str) -> None:
    assert status is not None
    assert status.sync is SyncState.SYNCED
    assert status.cache_version == version
    assert status.sent_version == version
    assert status.acked_version == version
    assert status.acked_at >= status.sent_at > 0


# -- STALE, SYNCED and NACKED, over SotW and Delta ----------------------------------------


@attrs.define
class ByHand:
    """A client machine whose every request and answer the test sends itself."""

    machine: SotwClient | DeltaClient
    end: MemoryByteStream

    async def ask(self, type_url: str) -> None:
        """Everything of ``type_url`` (the legacy wildcard)."""
        if isinstance(self.machine, SotwClient):
            await self.end.send(encode_request(self.machine.watch(type_url, None)))
        else:
            await self.end.send(encode_delta_request(self.machine.subscribe(type_url)))

    async def read(self) -> DiscoveryResponse | DeltaDiscoveryResponse:
        with anyio.fail_after(DEADLINE):
            data = await self.end.receive()
        assert data is not None
        if isinstance(self.machine, SotwClient):
            return decode_response(data)
        return decode_delta_response(data)

    async def answer(self, response: DiscoveryResponse | DeltaDiscoveryResponse) -> None:
        """Apply ``response`` and send its ACK (or NACK)."""
        if isinstance(self.machine, SotwClient):
            assert isinstance(response, DiscoveryResponse)
            await self.end.send(encode_request(self.machine.receive(response)))
        else:
            assert isinstance(response, DeltaDiscoveryResponse)
            await self.end.send(encode_delta_request(self.machine.receive(response)))


def machine_for(protocol: str, node_id: str, **options: Any) -> SotwClient | DeltaClient:
    node = make_node(id=node_id)
    return (
        SotwClient(node=node, **options)
        if protocol == "sotw"
        else DeltaClient(node=node, **options)
    )


async def want_everything(client: ClientDriver, type_url: str) -> None:
    if isinstance(client.machine, SotwClient):
        await client.watch(type_url, None)
    else:
        await client.subscribe(type_url)


@pytest.mark.parametrize("protocol", ["sotw", "delta"])
async def test_a_client_that_delays_its_ack_is_stale_until_it_acks(protocol: str) -> None:
    async with plane() as p:
        first, second = config(80), config(80, ("a", "c"))
        p.cache.set_snapshot(None, first)
        client = ByHand(machine_for(protocol, "slow"), p.open(protocol)[0])
        await client.ask(CLUSTER)
        response = await client.read()

        sent = await p.sent("slow", CLUSTER, first.version(CLUSTER))
        assert sent.sync is SyncState.STALE
        assert sent.cache_version == first.version(CLUSTER)
        assert (sent.acked_version, sent.acks, sent.nacks, sent.nack) == ("", 0, 0, None)
        assert not p.expect_stream("slow").synced

        # The cache moves on while the response is unanswered: still STALE, further behind.
        p.cache.set_snapshot(None, second)
        behind = p.expect("slow", CLUSTER)
        assert behind.sync is SyncState.STALE
        assert behind.cache_version == second.version(CLUSTER)
        assert behind.sent_version == first.version(CLUSTER)

        # The ACK of the first version comes at last; the second is sent and awaits its own.
        await client.answer(response)
        response = await client.read()
        resent = await p.sent("slow", CLUSTER, second.version(CLUSTER))
        assert resent.sync is SyncState.STALE
        assert resent.acked_version == first.version(CLUSTER)
        assert resent.acks == 1
        assert resent.sent_nonce != sent.sent_nonce
        if isinstance(response, DeltaDiscoveryResponse):  # only what changed
            assert [r.name for r in response.resources] == ["c"]
            assert list(response.removed_resources) == ["b"]
        else:  # the whole state
            assert sorted(r.name for r in response.resources) == ["a", "c"]

        await client.answer(response)
        await p.until(lambda: p.sync("slow", CLUSTER) is SyncState.SYNCED)
        synced = p.expect("slow", CLUSTER)
        check_synced(synced, second.version(CLUSTER))
        assert synced.acks == 2
        assert p.expect_stream("slow").synced
        # The change made while the first response was unanswered converged with this ACK.
        assert p.value("xdscore_proxy_convergence_seconds_count", type="cds") == 1


@pytest.mark.parametrize("protocol", ["sotw", "delta"])
async def test_a_nack_is_recorded_and_the_next_good_snapshot_syncs(protocol: str) -> None:
    async with plane() as p:
        bad, good = config(80, ("a", "bad")), config(81, ("a", "b"))
        p.cache.set_snapshot(None, bad)
        client = p.client(machine_for(protocol, "picky", validate=reject_bad))
        await want_everything(client, CLUSTER)
        await p.until(lambda: p.sync("picky", CLUSTER) is SyncState.NACKED)

        nacked = p.expect("picky", CLUSTER)
        assert nacked.nack is not None
        assert nacked.nack.message == REASON
        assert nacked.nack.version == bad.version(CLUSTER) == nacked.sent_version
        assert nacked.nack.nonce == nacked.sent_nonce != ""
        assert nacked.nack.code == GrpcStatus.INTERNAL.value
        assert nacked.cache_version == bad.version(CLUSTER)
        assert nacked.acked_version == ""
        assert (nacked.acks, nacked.nacks) == (0, 1)
        assert not p.expect_stream("picky").synced

        p.cache.set_snapshot(None, good)
        await p.until(lambda: p.synced_at("picky", good, (CLUSTER, ENDPOINT)))
        fixed = p.expect("picky", CLUSTER)
        check_synced(fixed, good.version(CLUSTER))
        assert fixed.acked_version != bad.version(CLUSTER)
        assert (fixed.acks, fixed.nacks) == (1, 1)
        assert set(client.machine.holds(CLUSTER)) == {"a", "b"}


# -- NOT SENT and IGNORED -----------------------------------------------------------------


async def test_a_type_asked_for_while_the_writer_is_busy_is_not_sent_until_its_turn() -> None:
    async with plane() as p:
        snapshot = config(80)
        p.cache.set_snapshot(None, snapshot)
        machine = SotwClient(node=make_node(id="busy"))
        end, server_end = p.open()
        await end.send(encode_request(machine.watch(CLUSTER, None)))
        with anyio.fail_after(DEADLINE):
            await server_end.writing.wait()  # the cluster response, which nobody reads yet
        await end.send(encode_request(machine.watch(LISTENER, None)))
        await p.until(lambda: p.type("busy", LISTENER) is not None)

        listeners = p.expect("busy", LISTENER)
        assert listeners.sync is SyncState.NOT_SENT
        assert listeners.cache_version == snapshot.version(LISTENER)
        assert listeners.sent_version == listeners.sent_nonce == listeners.acked_version == ""
        assert p.sync("busy", CLUSTER) is SyncState.STALE

        # The client reads from now on, follows what it holds, and everything converges.
        driver = ClientDriver(machine, end, on_response=p.recorder.client_saw)
        p.group.start_soon(driver.run)
        await p.until(lambda: p.synced_at("busy", snapshot, XDS_TYPES))
        for type_url in XDS_TYPES:
            check_synced(p.type("busy", type_url), snapshot.version(type_url))


async def test_a_client_whose_group_has_no_snapshot_yet_is_ignored_until_one_is_set() -> None:
    async with plane() as p:
        client = p.client(SotwClient(node=make_node(id="early")))
        await client.watch(CLUSTER, None)
        await p.until(lambda: p.type("early", CLUSTER) is not None)

        # With no snapshot the server has nothing of any type for the client: IGNORED, and
        # no version; nothing was written.
        waiting = p.expect("early", CLUSTER)
        assert waiting.sync is SyncState.IGNORED
        assert (waiting.cache_version, waiting.sent_version, waiting.acked_version) == ("", "", "")
        assert p.recorder.responses == []

        snapshot = config(80)
        p.cache.set_snapshot(None, snapshot)
        await p.until(lambda: p.synced_at("early", snapshot, (CLUSTER, ENDPOINT)))
        check_synced(p.type("early", CLUSTER), snapshot.version(CLUSTER))


async def test_a_type_the_snapshot_has_nothing_of_is_ignored() -> None:
    async with plane() as p:
        snapshot = config(80)  # no secrets
        p.cache.set_snapshot(None, snapshot)
        client = p.client(SotwClient(node=make_node(id="tls")))
        await client.watch(CLUSTER, None)
        await client.watch(LISTENER, None)
        await client.watch(SECRET, ["cert"])
        await p.until(
            lambda: p.synced_at("tls", snapshot, XDS_TYPES) and p.type("tls", SECRET) is not None
        )

        secrets = p.expect("tls", SECRET)
        assert secrets.sync is SyncState.IGNORED
        assert (secrets.cache_version, secrets.sent_version, secrets.acked_version) == ("", "", "")
        assert secrets.subscription.names == frozenset({"cert"})
        assert p.expect_stream("tls").synced  # IGNORED does not hold a proxy back
        # CSDS reports nothing of a type the server has nothing of.
        (report,) = p.server.client_status.reports(StatusQuery())
        assert {r.type_url for r in report.resources} == set(XDS_TYPES)


# -- metrics ------------------------------------------------------------------------------


async def test_one_endpoint_change_converges_every_proxy_once() -> None:
    clients = 3
    async with plane() as p:
        first, second = config(80), config(81)  # only the endpoints differ
        assert all(first.version(t) == second.version(t) for t in (CLUSTER, LISTENER, ROUTE))
        p.cache.set_snapshot(None, first)
        nodes = [f"proxy-{index}" for index in range(clients)]
        for node_id in nodes:
            client = p.client(SotwClient(node=make_node(id=node_id)))
            await client.watch(CLUSTER, None)
            await client.watch(LISTENER, None)
        await p.until(lambda: all(p.synced_at(n, first, XDS_TYPES) for n in nodes))
        assert p.value("xdscore_streams", protocol="sotw", mode="ads") == clients
        assert p.value("xdscore_pushes_in_flight") == 0

        names = (
            "xdscore_proxy_convergence_seconds_count",
            "xdscore_push_seconds_count",
            "xdscore_responses_total",
            "xdscore_acks_total",
            "xdscore_cache_updates_total",
        )
        labels = {CLUSTER: "cds", ENDPOINT: "eds", LISTENER: "lds", ROUTE: "rds"}
        before = {(n, t): p.value(n, type=labels[t]) for n in names for t in XDS_TYPES}
        bytes_before = p.value("xdscore_response_bytes_total", type="eds")

        p.cache.set_snapshot(None, second)
        await p.until(lambda: all(p.synced_at(n, second, XDS_TYPES) for n in nodes))

        def grew(name: str, type_url: str) -> float:
            return p.value(name, type=labels[type_url]) - before[name, type_url]

        assert grew("xdscore_proxy_convergence_seconds_count", ENDPOINT) == clients
        assert grew("xdscore_push_seconds_count", ENDPOINT) == clients
        assert grew("xdscore_responses_total", ENDPOINT) == clients
        assert grew("xdscore_acks_total", ENDPOINT) == clients
        assert grew("xdscore_cache_updates_total", ENDPOINT) == 1
        for type_url in (CLUSTER, LISTENER, ROUTE):  # nothing else changed or was sent
            for name in names:
                assert grew(name, type_url) == 0, (name, type_url)
        assert p.value("xdscore_response_bytes_total", type="eds") > bytes_before
        assert p.value("xdscore_pushes_in_flight") == 0
        assert p.value("xdscore_streams", protocol="sotw", mode="ads") == clients
        assert p.value("xdscore_nacks_total", type="eds") == 0


async def test_stream_gauges_follow_streams_opening_and_closing() -> None:
    async with plane() as p:
        snapshot = config(80)
        p.cache.set_snapshot(None, snapshot)
        sotw = [p.open("sotw")[0] for _ in range(2)]
        delta = p.open("delta")[0]
        cds = p.open("sotw", CLUSTER)[0]
        for index, end in enumerate([*sotw, cds]):
            request = SotwClient(node=make_node(id=f"s{index}")).watch(CLUSTER, None)
            await end.send(encode_request(request))
        await delta.send(
            encode_delta_request(DeltaClient(node=make_node(id="d")).subscribe(CLUSTER))
        )
        await p.until(lambda: len(p.server.status()) == 4)
        assert p.value("xdscore_streams", protocol="sotw", mode="ads") == 2
        assert p.value("xdscore_streams", protocol="delta", mode="ads") == 1
        assert p.value("xdscore_streams", protocol="sotw", mode="per_type") == 1
        assert p.value("xdscore_streams", protocol="delta", mode="per_type") == 0

        sotw[0].close()  # a half-close leaves the stream open...
        sotw[1].reset()  # ...a client going away ends it
        cds.reset()
        await p.until(lambda: len(p.server.status()) == 2)
        assert p.value("xdscore_streams", protocol="sotw", mode="ads") == 1
        assert p.value("xdscore_streams", protocol="delta", mode="ads") == 1
        assert p.value("xdscore_streams", protocol="sotw", mode="per_type") == 0
        assert {s.node_id for s in p.server.status()} == {"s0", "d"}


async def test_a_stale_nonce_is_counted() -> None:
    async with plane() as p:
        first, second = config(80), config(80, ("a", "c"))
        p.cache.set_snapshot(None, first)
        client = ByHand(machine_for("sotw", "laggard"), p.open()[0])
        await client.ask(CLUSTER)
        old = await client.read()
        assert isinstance(old, DiscoveryResponse)
        await client.answer(old)
        await p.until(lambda: p.sync("laggard", CLUSTER) is SyncState.SYNCED)
        assert p.value("xdscore_stale_nonces_total", type="cds") == 0

        p.cache.set_snapshot(None, second)
        new = await client.read()
        await p.sent("laggard", CLUSTER, second.version(CLUSTER))
        # A request written before the client saw the newest response echoes the old nonce.
        late = DiscoveryRequest(
            type_url=CLUSTER, version_info=old.version_info, response_nonce=old.nonce
        )
        await client.end.send(encode_request(late))
        await p.until(lambda: p.value("xdscore_stale_nonces_total", type="cds") == 1)
        assert p.sync("laggard", CLUSTER) is SyncState.STALE  # it was not taken as an ACK
        assert p.value("xdscore_acks_total", type="cds") == 1

        await client.answer(new)
        await p.until(lambda: p.synced_at("laggard", second, (CLUSTER,)))
        assert p.value("xdscore_stale_nonces_total", type="cds") == 1


async def test_refused_streams_are_counted_by_reason() -> None:
    async with plane(max_streams=1) as p:
        p.cache.set_snapshot(None, config(80))
        client = p.client(SotwClient(node=make_node(id="only")))
        await client.watch(CLUSTER, None)
        await p.until(lambda: p.sync("only", CLUSTER) is SyncState.SYNCED)

        p.open()
        await p.until(lambda: len(p.refusals) == 1)
        assert p.refusals[0].status is GrpcStatus.RESOURCE_EXHAUSTED
        assert p.value("xdscore_refused_streams_total", reason="max_streams") == 1
        assert p.value("xdscore_refused_streams_total", reason="closing") == 0

        p.server.close()
        await p.until(lambda: not p.server.status())
        with pytest.raises(RemoteProtocolError) as refused:
            await p.server.run_stream(byte_stream_pair()[1], protocol="sotw")
        assert refused.value.status is GrpcStatus.UNAVAILABLE
        assert p.value("xdscore_refused_streams_total", reason="closing") == 1
        assert p.value("xdscore_refused_streams_total", reason="max_streams") == 1
        assert p.value("xdscore_streams", protocol="sotw", mode="ads") == 0


async def test_the_exposition_parses_and_every_label_is_bounded() -> None:
    async with plane() as p:
        p.cache.set_snapshot(None, config(80, ("a", "bad")))
        nodes = ["node-secret-1", "node-secret-2", "node-secret-3"]
        sotw = p.client(SotwClient(node=make_node(id=nodes[0]), validate=reject_bad))
        await sotw.watch(CLUSTER, None)
        await sotw.watch(LISTENER, None)
        delta = p.client(DeltaClient(node=make_node(id=nodes[1])))
        await delta.subscribe(CLUSTER)
        raw, _ = p.open()
        await raw.send(encode_request(SotwClient(node=make_node(id=nodes[2])).watch(SECRET, ["x"])))
        await p.until(
            lambda: (
                p.sync(nodes[0], CLUSTER) is SyncState.NACKED
                and p.sync(nodes[1], CLUSTER) is SyncState.SYNCED
                and p.type(nodes[2], SECRET) is not None
            )
        )
        fixed = config(81)
        p.cache.set_snapshot(None, fixed)
        await p.until(
            lambda: (
                p.synced_at(nodes[0], fixed, XDS_TYPES)
                and p.synced_at(nodes[1], fixed, (CLUSTER, ENDPOINT))
            )
        )

        metrics = p.server.metrics
        assert metrics is not None
        text = generate_latest(metrics.registry).decode()
        families = {family.name: family for family in text_string_to_metric_families(text)}

    assert set(families) >= {
        "xdscore_push_seconds",
        "xdscore_proxy_convergence_seconds",
        "xdscore_nacks",
        "xdscore_acks",
        "xdscore_pushes_in_flight",
        "xdscore_streams",
        "xdscore_cache_updates",
        "xdscore_responses",
        "xdscore_response_bytes",
        "xdscore_stale_nonces",
        "xdscore_refused_streams",
        "xdscore_memo_bytes",
        "xdscore_memo_entries",
    }
    # protocol, mode, reason and memo take only the values a fresh registry already lists;
    # type is a registered type's short name or "other". Nothing else is a label.
    fresh = text_string_to_metric_families(generate_latest(Metrics().registry).decode())
    allowed: dict[str, set[str]] = {"type": {info.short_name for info in all_types()} | {"other"}}
    for family in fresh:
        for sample in family.samples:
            for label, value in sample.labels.items():
                if label != "le":
                    allowed.setdefault(label, set()).add(value)
    assert set(allowed) == {"type", "protocol", "mode", "reason", "memo"}
    assert allowed["memo"] == {memo.name for memo in usage()}
    assert allowed["protocol"] == {"sotw", "delta"}
    assert allowed["mode"] == {"ads", "per_type"}
    assert {"closing", "max_streams"} <= allowed["reason"]
    samples = [sample for family in families.values() for sample in family.samples]
    pushed = {s.labels["type"] for s in samples if s.name == "xdscore_push_seconds_count"}
    converged = {
        s.labels["type"] for s in samples if s.name == "xdscore_proxy_convergence_seconds_count"
    }
    assert pushed == {"cds", "eds", "lds", "rds"}
    assert converged >= {"cds", "eds"}
    for sample in samples:
        assert sample.name.startswith("xdscore_"), sample
        for label, value in sample.labels.items():
            assert not any(node in value for node in nodes), sample
            if label == "le":
                assert sample.name.endswith("_bucket"), sample
                continue
            assert label in allowed, sample
            assert value in allowed[label], sample
    held = {s.labels["memo"]: s.value for s in families["xdscore_memo_bytes"].samples}
    assert held["requests.sotw"] > 0  # the fleet's requests, remembered...
    limits = {s.labels["memo"]: s.value for s in families["xdscore_memo_limit_bytes"].samples}
    assert all(held[name] <= limits[name] for name in limits if limits[name])  # ...in bounds
    nacks = [s for s in families["xdscore_nacks"].samples if s.name == "xdscore_nacks_total"]
    assert [(s.labels, s.value) for s in nacks if s.value] == [({"type": "cds"}, 1.0)]
    # Every registered type's series exists from the start, at zero.
    assert {s.labels["type"] for s in nacks} >= {"cds", "eds", "lds", "rds", "sds"}
