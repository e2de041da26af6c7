"""A client moving to a replica that lags its store is not told to undo what it holds.

Two servers stand for two replicas of one store: replica A already applied revision 2
(clusters a, b, c), replica B still serves revision 1 (clusters a, b). A client converges on
A, loses its stream and reconnects to B, presenting A's versions. With a catch-up source,
B waits until its own watch delivers revision 2 and then sends nothing over Delta; without
one (the negative control), B removes cluster c at once.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import anyio
import anyio.abc
import attrs
import pytest

from xdscore import (
    CLUSTER,
    ENDPOINT,
    ServerCallbacks,
    Snapshot,
    SnapshotCache,
    StreamInfo,
    XdsServer,
    same_for_all,
)
from xdscore import builders as b
from xdscore.protocol import (
    DeltaClient,
    DeltaDiscoveryRequest,
    DeltaResponse,
    DiscoveryRequest,
    SotwClient,
    SotwResponse,
)
from xdscore.server import ClientDriver
from xdscore.server._catch_up import presents_unknown
from xdscore.testing import byte_stream_pair
from xdscore.wire import make_node

pytestmark = pytest.mark.anyio
DEADLINE = 5.0
NODE = make_node(id="mover")


def revision(*clusters: str) -> Snapshot:
    return Snapshot(
        [
            *(b.eds_cluster(name) for name in clusters),
            *(b.load_assignment(name, [("10.0.0.1", 80)]) for name in clusters),
        ]
    )


REVISION_1 = revision("a", "b")
REVISION_2 = revision("a", "b", "c")
REVISION_3 = revision("a", "b", "c", "d")


@attrs.define
class Sent(ServerCallbacks):
    """Every response a server wrote, with a signal for each."""

    responses: list[object] = attrs.field(factory=list)
    changed: anyio.Event = attrs.field(factory=anyio.Event)

    def on_response(self, stream: StreamInfo, response: object) -> None:
        self.responses.append(response)
        self.poke()

    def on_event(self, stream: StreamInfo, event: object) -> None:
        self.poke()

    def poke(self, *_: object) -> None:
        self.changed.set()
        self.changed = anyio.Event()


@attrs.define
class LaggingReplica:
    """A catch-up source whose watch delivers the store's newest revision when asked."""

    cache: SnapshotCache
    store_has: Snapshot
    deliver: bool = True
    calls: int = 0
    delivered: anyio.Event = attrs.field(factory=anyio.Event)

    async def caught_up(self, timeout: float) -> bool:
        self.calls += 1
        if not self.deliver:
            await anyio.sleep(timeout)
            return False
        if not self.delivered.is_set():
            await anyio.sleep(0.05)  # the watch event arrives a little later
            self.cache.set_snapshot(None, self.store_has)
            self.delivered.set()
        return True


async def until(condition: Callable[[], bool], sent: Sent) -> None:
    with anyio.fail_after(DEADLINE):
        while not condition():
            await sent.changed.wait()


@asynccontextmanager
async def replica(
    snapshot: Snapshot, protocol: str, group: anyio.abc.TaskGroup, **options: object
) -> AsyncIterator[tuple[XdsServer, Sent, Callable[[], ClientDriver]]]:
    cache = SnapshotCache(group=same_for_all)
    cache.set_snapshot(None, snapshot)
    sent = Sent()
    catch_up = options.pop("catch_up", None)
    if callable(catch_up):
        options["catch_up"] = catch_up(cache)
    server = XdsServer(cache, callbacks=sent, **options)  # type: ignore[arg-type]

    def connect(machine: SotwClient | DeltaClient) -> ClientDriver:
        client_end, server_end = byte_stream_pair(0)
        group.start_soon(lambda: server.run_stream(server_end, protocol=protocol))  # type: ignore[arg-type]
        return ClientDriver(machine, client_end, on_response=sent.poke)

    yield server, sent, connect  # type: ignore[misc]


def delta_removed(responses: list[object]) -> set[str]:
    return {name for r in responses if isinstance(r, DeltaResponse) for name in r.removed}


def delta_resources(responses: list[object]) -> int:
    return sum(len(r.resources) for r in responses if isinstance(r, DeltaResponse))


async def asked_for(server: XdsServer, sent: Sent, *types: str) -> None:
    """Wait until the server's one stream has taken a first request of each of ``types``."""
    await until(
        lambda: any(set(types) <= set(s.machine.type_states()) for s in server.streams()), sent
    )


async def move_delta(
    then: Callable[[DeltaClient, XdsServer, Sent], Awaitable[None]], **b_options: object
) -> tuple[DeltaClient, Sent, XdsServer]:
    """Converge on replica A (revision 2), move to replica B (revision 1), then ``then``."""
    machine = DeltaClient(node=NODE)
    async with anyio.create_task_group() as group:
        async with replica(REVISION_2, "delta", group) as (_, sent_a, connect_a):
            client = connect_a(machine)  # type: ignore[arg-type]
            group.start_soon(client.run)
            await client.subscribe(CLUSTER)
            await until(lambda: set(machine.holds(ENDPOINT)) == {"a", "b", "c"}, sent_a)
        async with replica(REVISION_1, "delta", group, **b_options) as (server_b, sent_b, con):
            moved = con(machine)  # type: ignore[arg-type]
            group.start_soon(moved.run)
            for request in machine.reconnect():
                await moved.send(request)
            await then(machine, server_b, sent_b)
            group.cancel_scope.cancel()
    return machine, sent_b, server_b


async def test_delta_a_client_from_a_replica_ahead_is_sent_nothing_once_caught_up() -> None:
    def lagging(cache: SnapshotCache) -> LaggingReplica:
        return LaggingReplica(cache, REVISION_2)

    async def then(machine: DeltaClient, server: XdsServer, sent: Sent) -> None:
        assert isinstance(server.catch_up, LaggingReplica)
        with anyio.fail_after(DEADLINE):
            await server.catch_up.delivered.wait()
        await asked_for(server, sent, CLUSTER, ENDPOINT)
        # A later change on B is what B sends next: anything undone before would come first.
        server.cache.set_snapshot(None, REVISION_3)  # type: ignore[attr-defined]
        await until(lambda: "d" in machine.holds(ENDPOINT), sent)

    machine, sent, server = await move_delta(then, catch_up=lagging)
    assert delta_removed(sent.responses) == set()
    assert delta_resources(sent.responses) == 2  # d's cluster and endpoints, nothing re-sent
    assert set(machine.holds(CLUSTER)) == {"a", "b", "c", "d"}
    assert isinstance(server.catch_up, LaggingReplica)
    assert server.catch_up.calls == 1  # CDS waited; EDS found the caught-up view


async def removed_c(machine: DeltaClient, server: XdsServer, sent: Sent) -> None:
    await until(lambda: "c" not in machine.holds(CLUSTER), sent)


async def test_delta_without_catch_up_the_lagging_replica_removes_what_it_lacks() -> None:
    _, sent, _ = await move_delta(removed_c)
    assert "c" in delta_removed(sent.responses)


async def test_delta_a_store_that_does_not_answer_bounds_the_wait() -> None:
    def silent(cache: SnapshotCache) -> LaggingReplica:
        return LaggingReplica(cache, REVISION_2, deliver=False)

    started = anyio.current_time()
    _, sent, server = await move_delta(removed_c, catch_up=silent, catch_up_timeout=0.2)
    elapsed = anyio.current_time() - started
    assert "c" in delta_removed(sent.responses)  # answered from what it had
    assert isinstance(server.catch_up, LaggingReplica)
    assert server.catch_up.calls == 2  # CDS and EDS each waited once, bounded
    assert elapsed < 0.2 * 2 + 1.0


async def test_sotw_a_wildcard_version_from_a_replica_ahead_is_not_rolled_back() -> None:
    def lagging(cache: SnapshotCache) -> LaggingReplica:
        return LaggingReplica(cache, REVISION_2)

    machine = SotwClient(node=NODE)
    async with anyio.create_task_group() as group:
        async with replica(REVISION_2, "sotw", group) as (_, sent_a, connect_a):
            client = connect_a(machine)  # type: ignore[arg-type]
            group.start_soon(client.run)
            await client.watch(CLUSTER, None)
            await until(lambda: set(machine.holds(ENDPOINT)) == {"a", "b", "c"}, sent_a)
        async with replica(REVISION_1, "sotw", group, catch_up=lagging) as (_, sent_b, con):
            moved = con(machine)  # type: ignore[arg-type]
            group.start_soon(moved.run)
            for request in machine.reconnect():
                await moved.send(request)
            await until(lambda: any(isinstance(r, SotwResponse) for r in sent_b.responses), sent_b)
            await until(lambda: set(machine.holds(ENDPOINT)) == {"a", "b", "c"}, sent_b)
            group.cancel_scope.cancel()
    assert set(machine.holds(CLUSTER)) == {"a", "b", "c"}
    clusters_sent = [
        r for r in sent_b.responses if isinstance(r, SotwResponse) and r.type_url == CLUSTER
    ]
    assert clusters_sent == []  # CDS resumed at the version the client presented


def test_which_first_requests_wait() -> None:
    held = {name: r.version for name, r in (REVISION_2.resources(CLUSTER) or {}).items()}
    older = {name: r.version for name, r in (REVISION_1.resources(CLUSTER) or {}).items()}
    delta = DeltaDiscoveryRequest(type_url=CLUSTER, initial_resource_versions=held)
    assert presents_unknown(delta, REVISION_1)  # a name the view lacks
    assert not presents_unknown(delta, REVISION_2)
    assert not presents_unknown(
        DeltaDiscoveryRequest(type_url=CLUSTER, initial_resource_versions=older), REVISION_2
    )  # a subset at the same versions is known
    assert not presents_unknown(DeltaDiscoveryRequest(type_url=CLUSTER), REVISION_1)
    version_2 = REVISION_2.version(CLUSTER)
    assert presents_unknown(DiscoveryRequest(type_url=CLUSTER, version_info=version_2), REVISION_1)
    assert not presents_unknown(
        DiscoveryRequest(type_url=CLUSTER, version_info=version_2), REVISION_2
    )
    assert not presents_unknown(  # a request with a nonce is on a stream already answered
        DiscoveryRequest(type_url=CLUSTER, version_info=version_2, response_nonce="x-1.1"),
        REVISION_1,
    )
    assert not presents_unknown(DiscoveryRequest(type_url=CLUSTER), REVISION_1)


@pytest.mark.parametrize("protocol", ["sotw", "delta"])
async def test_replicas_of_one_content_send_identical_versions_and_distinct_nonces(
    protocol: str,
) -> None:
    seen: list[dict[str, tuple[str, set[str]]]] = []
    async with anyio.create_task_group() as group:
        for _ in range(2):
            machine = SotwClient(node=NODE) if protocol == "sotw" else DeltaClient(node=NODE)
            async with replica(revision("a", "b", "c"), protocol, group) as (_, sent, connect):
                client = connect(machine)  # type: ignore[arg-type]
                group.start_soon(client.run)
                if isinstance(machine, SotwClient):
                    await client.watch(CLUSTER, None)
                else:
                    await client.subscribe(CLUSTER)
                await until(lambda: len(machine.holds(ENDPOINT)) == 3, sent)  # noqa: B023
                by_type: dict[str, tuple[str, set[str]]] = {}
                for response in sent.responses:
                    assert isinstance(response, SotwResponse | DeltaResponse)
                    version = (
                        response.version_info
                        if isinstance(response, SotwResponse)
                        else response.system_version_info
                    )
                    by_type.setdefault(response.type_url, (version, set()))[1].add(response.nonce)
                seen.append(by_type)
        group.cancel_scope.cancel()
    first, second = seen
    assert set(first) == set(second) == {CLUSTER, ENDPOINT}
    for type_url in first:
        assert first[type_url][0] == second[type_url][0] != ""
        assert not first[type_url][1] & second[type_url][1]
