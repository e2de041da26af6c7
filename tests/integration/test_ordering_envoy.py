"""Make-before-break ordering against a real Envoy under continuous HTTP load.

Over SotW ADS and Delta ADS: listener ``listener_0`` -> route ``route_0`` -> cluster
``c_0`` -> a live backend. The test keeps several loopback connections busy with
back-to-back GETs through Envoy (every response's status recorded) while the control plane
changes the configuration, waiting for Envoy to converge after each change:

* moves: the route moves to a brand-new cluster ``c_1``, ``c_2``, ... (each with its own
  live backend), and the previous cluster and its endpoints are deleted, in the same
  snapshot change;
* flaps: a new cluster ``x`` joins; the route moves to ``x`` and, the moment the server has
  sent that route, moves back to ``c_0`` with ``x`` deleted, so the deletion races a route
  response still in flight.

With ordering (the default) not one request may fail: the route must not name a cluster
Envoy does not have warm, and a cluster must not go while a route Envoy holds, or is being
sent, names it; the control-plane exchange (recorded through ``ServerCallbacks``) must show
that order. Each scenario has a negative control with ``XdsServer(ordered_ads=False)`` that
must see 503s, which proves the load is sensitive enough to catch a mistake.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping
from contextlib import ExitStack
from typing import Any

import anyio
import attrs
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream

from xdscore import (
    CLUSTER,
    ENDPOINT,
    ROUTE,
    Http2Transport,
    Resource,
    ResponseAcked,
    ResponseNacked,
    ServerCallbacks,
    Snapshot,
    SnapshotCache,
    StreamInfo,
    XdsServer,
    same_for_all,
)
from xdscore import builders as b
from xdscore.protocol import DeltaDiscoveryRequest, DeltaResponse, DiscoveryRequest, SotwResponse
from xdscore.server import Pacing
from xdscore.testing import Envoy, HttpBackend, envoy_bootstrap, free_port
from xdscore.wire import type_info

from ..factories import short, wait_until

pytestmark = [pytest.mark.anyio, pytest.mark.envoy, pytest.mark.timeout(90)]

MOVES = 8
"""How many times the route moves to a new cluster."""
FLAPS = 8
"""How many times the route flaps to a new cluster and straight back."""
CONNECTIONS = 4
"""Concurrent keep-alive connections sending GETs back to back."""
MAX_REQUESTS = 400_000
"""A bound on the load, whatever happens."""
MAX_LOAD_SECONDS = 50.0
MIN_REQUESTS = 200
"""The load must reach at least this many requests for a pass to mean anything ..."""
MIN_DURING_CHANGE = 5
"""... and at least this many while each change is under way."""
SETTLED = 20
"""Requests the load makes on a settled state, before, between and after the changes."""
CONVERGE = 20.0
"""Seconds Envoy gets to converge after a change (it usually takes well under one)."""
SCENARIO_TIMEOUT = 75.0


# -- what the control plane saw -----------------------------------------------------------


@attrs.frozen
class Sent:
    """One response: when, its type and nonce, the resources it carried, what it removed."""

    at: float
    type_url: str
    nonce: str
    resources: dict[str, Resource]
    removed: frozenset[str]

    def route_targets(self) -> set[str]:
        """The clusters the route configurations in this response send traffic to."""
        return {
            ref.name
            for resource in self.resources.values()
            for ref in resource.references
            if ref.type_url == CLUSTER
        }


class Recorder(ServerCallbacks):
    """A timestamped log of requests, responses, ACKs and NACKs (ADS: one stream at a time)."""

    def __init__(self) -> None:
        self.lines: list[tuple[float, str]] = []
        self.sent: list[Sent] = []
        self.acked: dict[tuple[str, str], float] = {}
        """(type URL, nonce) -> when the ACK arrived."""
        self.nacks: list[ResponseNacked] = []
        self._hooks: list[tuple[str, Callable[[], None]]] = []
        self.hooks_run = 0

    def _log(self, text: str) -> None:
        self.lines.append((time.monotonic(), text))

    def on_request(
        self, stream: StreamInfo, request: DiscoveryRequest | DeltaDiscoveryRequest
    ) -> None:
        if isinstance(request, DiscoveryRequest):
            names = list(request.resource_names)
            detail = f"names={names} n={request.response_nonce!r}"
        else:
            detail = (
                f"+{list(request.resource_names_subscribe)} "
                f"-{list(request.resource_names_unsubscribe)} n={request.response_nonce!r}"
            )
        error = " ERROR" if request.error_detail is not None else ""
        self._log(f"<- {short(request.type_url)} {detail}{error}")

    def on_response(self, stream: StreamInfo, response: Any) -> None:
        now = time.monotonic()
        if isinstance(response, SotwResponse):
            resources = dict(response.selection.resources)
            removed: frozenset[str] = frozenset()
            if type_info(response.type_url).sotw_full_state:
                before = self._holding(response.type_url)
                removed = frozenset(set(before) - set(resources))
            detail = f"{sorted(resources)}"
        else:
            assert isinstance(response, DeltaResponse)
            resources = {r.name: r for r in response.resources}
            removed = frozenset(response.removed)
            detail = f"{sorted(resources)} removed={sorted(removed)}"
        sent = Sent(now, response.type_url, response.nonce, resources, removed)
        self.sent.append(sent)
        self._log(f"-> {short(response.type_url)} {detail} n={response.nonce!r}")
        for hook in [hook for hook in self._hooks if hook[0] in sent.route_targets()]:
            self._hooks.remove(hook)
            self.hooks_run += 1
            hook[1]()

    def on_ack(self, stream: StreamInfo, event: ResponseAcked) -> None:
        self.acked[(event.type_url, event.nonce)] = time.monotonic()
        self._log(f"   ACK {short(event.type_url)} n={event.nonce!r}")

    def _holding(self, type_url: str) -> dict[str, Resource]:
        """SotW full state: what the last ACKed response of ``type_url`` carried."""
        for sent in reversed(self.sent):
            if sent.type_url == type_url and (type_url, sent.nonce) in self.acked:
                return sent.resources
        return {}

    def ack_time(self, sent: Sent) -> float | None:
        return self.acked.get((sent.type_url, sent.nonce))

    def when_route_sent(self, cluster: str, action: Callable[[], None]) -> None:
        """Run ``action`` right after the first route response naming ``cluster`` is sent
        (before the client can possibly have answered it)."""
        self._hooks.append((cluster, action))

    def violations(self) -> list[str]:
        """Where the exchange broke make-before-break.

        A route response naming cluster X must come after the client surely holds X and
        its endpoints (ACKed, and not removed since); a response removing a cluster (or its
        endpoints) must come after the client ACKed a route that no longer names it, with no
        route response naming it in flight.
        """
        found: list[str] = []
        for item in self.sent:
            if item.type_url == ROUTE:
                for cluster in sorted(item.route_targets()):
                    for type_url in (CLUSTER, ENDPOINT):
                        if not self._surely_held(type_url, cluster, item.at):
                            found.append(
                                f"{item.at:.4f} route to {cluster} sent before the client "
                                f"surely held its {short(type_url)}"
                            )
            elif item.type_url in (CLUSTER, ENDPOINT):
                routes = [r for r in self.sent if r.type_url == ROUTE and r.at <= item.at]
                if not routes:
                    continue
                last = routes[-1]
                acked = self.ack_time(last)
                for name in sorted(item.removed):
                    if name in last.route_targets() or acked is None or acked > item.at:
                        found.append(
                            f"{item.at:.4f} {short(item.type_url)} removed {name} while the "
                            f"route naming it was held or in flight"
                        )
        return found

    def _surely_held(self, type_url: str, name: str, when: float) -> bool:
        """The client ACKed a response of ``type_url`` carrying ``name`` by ``when``, and no
        response sent since (up to ``when``) took it away."""
        carried_at: float | None = None
        for item in self.sent:
            if item.at > when or item.type_url != type_url:
                continue
            acked = self.ack_time(item)
            if name in item.resources and acked is not None and acked <= when:
                carried_at = item.at
            elif name in item.removed:
                carried_at = None
        return carried_at is not None

    def on_nack(self, stream: StreamInfo, event: ResponseNacked) -> None:
        self.nacks.append(event)
        self._log(f"   NACK {short(event.type_url)} n={event.nonce!r} {event.error.message}")


# -- the load -----------------------------------------------------------------------------


_CONNECTION_ERRORS = (
    OSError,
    TimeoutError,
    anyio.EndOfStream,
    anyio.IncompleteRead,
    anyio.BrokenResourceError,
    anyio.DelimiterNotFound,
    ValueError,  # a malformed response head
)


@attrs.define
class Result:
    at: float
    status: int | None
    """``None``: the connection failed (refused, reset, closed, timed out)."""
    detail: str


@attrs.define
class Load:
    """GET / through Envoy on ``CONNECTIONS`` keep-alive connections, back to back."""

    port: int
    results: list[Result] = attrs.field(factory=list)
    stopping: bool = False

    async def run_one_connection(self) -> None:
        stream: anyio.abc.SocketStream | None = None
        reader: BufferedByteReceiveStream | None = None
        deadline = time.monotonic() + MAX_LOAD_SECONDS
        while (
            not self.stopping and len(self.results) < MAX_REQUESTS and time.monotonic() < deadline
        ):
            try:
                with anyio.fail_after(5):
                    if stream is None or reader is None:
                        stream = await anyio.connect_tcp("127.0.0.1", self.port)
                        reader = BufferedByteReceiveStream(stream)
                    await stream.send(b"GET / HTTP/1.1\r\nhost: ordering.test\r\n\r\n")
                    head = await reader.receive_until(b"\r\n\r\n", 65536)
                    status, length, close = _parse_head(head)
                    body = await reader.receive_exactly(length) if length else b""
                self.results.append(Result(time.monotonic(), status, body.decode(errors="replace")))
                if close:
                    await stream.aclose()
                    stream = reader = None
            except _CONNECTION_ERRORS as exc:
                self.results.append(Result(time.monotonic(), None, repr(exc)))
                if stream is not None:
                    await stream.aclose()
                stream = reader = None
                # Not a wait for a condition: a pause before reconnecting, so that a
                # listener refusing connections is not hammered in a tight loop.
                await anyio.sleep(0.01)
        if stream is not None:
            await stream.aclose()

    # reading

    def statuses(self) -> Counter[int | None]:
        return Counter(result.status for result in self.results)

    def failures(self) -> list[Result]:
        return [r for r in self.results if r.status is None or not 200 <= r.status < 300]

    def count_between(self, start: float, end: float) -> int:
        return sum(1 for r in self.results if start <= r.at <= end)

    async def flowing(self, count: int, *, since: float | None = None) -> None:
        """Wait until ``count`` more requests completed (after ``since``, default now)."""
        start = time.monotonic() if since is None else since
        await wait_until(
            lambda: self.count_between(start, float("inf")) >= count,
            timeout=10,
            interval=0.005,
            what=f"{count} requests through Envoy",
        )

    def bodies(self) -> set[str]:
        return {r.detail for r in self.results if r.status == 200}


def _parse_head(head: bytes) -> tuple[int, int, bool]:
    """(status, content-length, connection: close) of an HTTP/1.1 response head."""
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    length, close = 0, False
    for line in lines[1:]:
        key, _, value = line.partition(":")
        key, value = key.strip().lower(), value.strip().lower()
        if key == "content-length":
            length = int(value)
        elif key == "connection" and value == "close":
            close = True
    return status, length, close


@contextlib.asynccontextmanager
async def load_running(port: int) -> AsyncIterator[Load]:
    """Run the load while the block runs; stop it (and wait for it) when the block ends.

    Plain asyncio tasks rather than a task group, so a failure in the block reaches the
    test as itself."""
    load = Load(port)
    tasks = [asyncio.create_task(load.run_one_connection()) for _ in range(CONNECTIONS)]
    try:
        yield load
    finally:
        load.stopping = True
        with anyio.CancelScope(shield=True), anyio.move_on_after(10):
            await asyncio.gather(*tasks, return_exceptions=True)
        for task in tasks:
            task.cancel()


# -- the scenario -------------------------------------------------------------------------


def world(listener_port: int, route_to: str, clusters: Mapping[str, int]) -> Snapshot:
    """listener_0 -> route_0 -> ``route_to``; each of ``clusters`` (name -> backend port)
    with its endpoints; nothing else."""
    resources: list[object] = [
        b.http_listener("listener_0", listener_port, "route_0"),
        b.route_configuration("route_0", [("/", route_to)]),
    ]
    for name, port in clusters.items():
        resources.append(b.eds_cluster(name))
        resources.append(b.load_assignment(name, [("127.0.0.1", port)]))
    return Snapshot(resources)


@contextlib.contextmanager
def backends(count: int) -> Iterator[list[HttpBackend]]:
    """``count`` live backends; backend i answers with the body ``c_i``."""
    with ExitStack() as stack:
        yield [stack.enter_context(HttpBackend(f"c_{i}")) for i in range(count)]


async def converged(envoy: Envoy, route_to: str, clusters: Iterable[str]) -> bool:
    """Envoy has exactly ``clusters`` (all active, none warming) and routes / to ``route_to``."""
    dump = await envoy.config_dump()
    active: list[str] = []
    warming: list[str] = []
    routes: list[str] = []
    for config in dump["configs"]:
        kind = config["@type"].rsplit(".", 1)[-1]
        if kind == "ClustersConfigDump":
            active = [c["cluster"]["name"] for c in config.get("dynamic_active_clusters", [])]
            warming = [c["cluster"]["name"] for c in config.get("dynamic_warming_clusters", [])]
        elif kind == "RoutesConfigDump":
            for item in config.get("dynamic_route_configs", []):
                for host in item["route_config"].get("virtual_hosts", []):
                    routes.extend(r["route"]["cluster"] for r in host.get("routes", []))
    return sorted(active) == sorted(clusters) and not warming and routes == [route_to]


async def _answers(port: int, body: str) -> bool:
    """One GET / through Envoy answers 200 with ``body``."""
    try:
        with anyio.fail_after(3):
            stream = await anyio.connect_tcp("127.0.0.1", port)
            async with stream:
                reader = BufferedByteReceiveStream(stream)
                await stream.send(b"GET / HTTP/1.1\r\nhost: ordering.test\r\n\r\n")
                status, length, _ = _parse_head(await reader.receive_until(b"\r\n\r\n", 65536))
                return status == 200 and (await reader.receive_exactly(length)).decode() == body
    except _CONNECTION_ERRORS:
        return False


@attrs.define
class Outcome:
    load: Load
    recorder: Recorder
    changes: list[tuple[float, str]] = attrs.field(factory=list)
    """When each change began (monotonic time), and what it was."""
    during: list[int] = attrs.field(factory=list)
    """How many requests completed while each change was under way (until Envoy converged)."""
    seconds: float = 0.0

    def report(self, limit: int = 12) -> str:
        """The failures with the control-plane exchange around the first one."""
        failures = self.load.failures()
        lines = [
            f"{len(self.load.results)} requests, statuses {dict(self.load.statuses())}, "
            f"{len(failures)} failed, in {self.seconds:.1f}s; during each change: {self.during}"
        ]
        for failure in failures[:limit]:
            lines.append(f"  {failure.at:.4f} {failure.status} {failure.detail[:80]!r}")
        violations = self.recorder.violations()
        if violations:
            lines += ["make-before-break violations:", *(f"  {v}" for v in violations[:limit])]
        if failures:
            first = failures[0].at
            changes = [f"  {at:.4f} {what}" for at, what in self.changes]
            window = [
                f"  {at:.4f} {text}" for at, text in self.recorder.lines if -0.5 < at - first < 0.2
            ]
            lines += ["changes:", *changes, "exchange around the first failure:", *window]
        return "\n".join(lines)


@attrs.define
class Rig:
    """A control plane, an Envoy on it, live backends and the load, for one scenario."""

    cache: SnapshotCache
    envoy: Envoy
    listener_port: int
    ports: list[int]
    outcome: Outcome

    def serve(self, route_to: str, clusters: Iterable[str]) -> None:
        """Route to ``route_to``; serve ``clusters`` (``c_i`` uses backend i)."""
        by_name = {name: self.ports[int(name.removeprefix("c_"))] for name in clusters}
        self.cache.set_snapshot(None, world(self.listener_port, route_to, by_name))

    async def change(self, what: str, route_to: str, clusters: Iterable[str]) -> None:
        """Make a change (see :meth:`serve`) and wait until Envoy has exactly that."""
        clusters = list(clusters)
        began = time.monotonic()
        self.serve(route_to, clusters)
        await self.converge(route_to, clusters, what)
        self.outcome.changes.append((began, what))
        self.outcome.during.append(self.outcome.load.count_between(began, time.monotonic()))

    async def converge(self, route_to: str, clusters: list[str], what: str) -> None:
        await self.envoy.wait_for(
            functools.partial(converged, self.envoy, route_to, clusters),
            timeout=CONVERGE,
            interval=0.05,
            what=f"Envoy to converge after {what}",
        )


@contextlib.asynccontextmanager
async def rig(*, delta: bool, ordered: bool, clusters: int) -> AsyncIterator[Rig]:
    """Envoy converged on route -> c_0, then the load running until the block ends."""
    recorder = Recorder()
    with backends(clusters) as live, anyio.fail_after(SCENARIO_TIMEOUT):
        listener_port = free_port()
        cache = SnapshotCache(group=same_for_all)
        cache.set_snapshot(None, world(listener_port, "c_0", {"c_0": live[0].port}))
        # No debounce: every flap must reach Envoy, so that only ordering tells the runs apart.
        server = XdsServer(
            cache, callbacks=recorder, ordered_ads=ordered, pacing=Pacing(quiet=0, max_delay=0)
        )
        async with Http2Transport(server) as transport:
            xds_port = await transport.start()
            async with Envoy(envoy_bootstrap(xds_port=xds_port, delta=delta)) as envoy:
                await envoy.wait_for(
                    functools.partial(converged, envoy, "c_0", ["c_0"]),
                    timeout=CONVERGE,
                    what="Envoy on c_0",
                )
                await envoy.wait_for(
                    functools.partial(_answers, listener_port, "c_0"),
                    timeout=CONVERGE,
                    what="traffic through Envoy",
                )
                start = time.monotonic()
                async with load_running(listener_port) as load:
                    outcome = Outcome(load, recorder)
                    await load.flowing(SETTLED)  # the load is flowing before the first change
                    yield Rig(cache, envoy, listener_port, [p.port for p in live], outcome)
                    await load.flowing(SETTLED)  # and still flowing after the last one
                outcome.seconds = time.monotonic() - start


async def move_route_repeatedly(*, delta: bool, ordered: bool) -> Outcome:
    """MOVES times: the route moves to a new cluster, and the previous one (with its
    endpoints) is deleted, in one snapshot change; Envoy converges before the next."""
    async with rig(delta=delta, ordered=ordered, clusters=MOVES + 1) as r:
        for i in range(1, MOVES + 1):
            await r.change(f"move to c_{i}", f"c_{i}", [f"c_{i}"])
            await r.outcome.load.flowing(SETTLED)  # some load on the settled state
    return r.outcome


async def flap_route(*, delta: bool, ordered: bool) -> Outcome:
    """FLAPS times, with c_0 always there: a new cluster x joins; then the route moves to x
    and, the moment the server has sent that route (before Envoy can have answered it), the
    route moves back to c_0 and x is deleted. The deletion races the route in flight."""
    async with rig(delta=delta, ordered=ordered, clusters=FLAPS + 1) as r:
        for i in range(1, FLAPS + 1):
            x = f"c_{i}"
            await r.change(f"add {x}", "c_0", ["c_0", x])
            r.outcome.recorder.when_route_sent(x, functools.partial(r.serve, "c_0", ["c_0"]))
            began = time.monotonic()
            r.serve(x, ["c_0", x])
            await r.converge("c_0", ["c_0"], f"flap to {x} and back")
            r.outcome.changes.append((began, f"flap to {x} and back, deleting it"))
            r.outcome.during.append(r.outcome.load.count_between(began, time.monotonic()))
            await r.outcome.load.flowing(SETTLED)
    return r.outcome


PROTOCOLS = pytest.mark.parametrize("delta", [False, True], ids=["sotw_ads", "delta_ads"])


def assert_no_request_failed(outcome: Outcome, changes: int, *, min_during: int) -> None:
    load = outcome.load
    report = outcome.report()
    assert len(load.results) >= MIN_REQUESTS, report
    assert len(outcome.during) == changes, report
    assert min(outcome.during) >= min_during, report
    assert load.failures() == [], report
    assert set(load.statuses()) == {200}, report
    assert outcome.recorder.nacks == [], report
    # And the exchange shows why: routes only to clusters held warm, removals only of
    # clusters no route (held or in flight) names.
    assert outcome.recorder.violations() == [], report


def assert_requests_failed(outcome: Outcome) -> None:
    load = outcome.load
    report = outcome.report()
    assert len(load.results) >= MIN_REQUESTS, report
    assert load.statuses()[503] >= 1, report
    assert outcome.recorder.nacks == [], report
    # The exchange check the ordered tests rely on sees the broken order too.
    assert outcome.recorder.violations(), report


@PROTOCOLS
async def test_route_moves_to_new_clusters_under_load_without_a_failed_request(
    delta: bool,
) -> None:
    outcome = await move_route_repeatedly(delta=delta, ordered=True)
    assert_no_request_failed(outcome, MOVES, min_during=MIN_DURING_CHANGE)
    # The load really followed the route from cluster to cluster.
    bodies = outcome.load.bodies()
    assert bodies >= {f"c_{i}" for i in range(1, MOVES + 1)}, outcome.report()


@PROTOCOLS
async def test_negative_control_without_ordering_the_same_moves_fail_requests(
    delta: bool,
) -> None:
    """``ordered_ads=False``: the identical scenario must produce 503s."""
    assert_requests_failed(await move_route_repeatedly(delta=delta, ordered=False))


@PROTOCOLS
async def test_route_flapping_to_a_cluster_deleted_in_flight_fails_no_request(
    delta: bool,
) -> None:
    """The deletion of x must wait for the route back to c_0 to be ACKed, although the
    server last saw a route to c_0 ACKed: a route to x is in flight."""
    outcome = await flap_route(delta=delta, ordered=True)
    assert outcome.recorder.hooks_run == FLAPS, "a route to the new cluster was never sent"
    # A flap settles within a few round trips, so few requests complete during one; what
    # makes the test bite is the negative control below (and, before in-flight responses
    # counted for ordering, the ordered server failed it too).
    assert_no_request_failed(outcome, 2 * FLAPS, min_during=0)


@PROTOCOLS
async def test_negative_control_without_ordering_the_same_flaps_fail_requests(
    delta: bool,
) -> None:
    assert_requests_failed(await flap_route(delta=delta, ordered=False))
