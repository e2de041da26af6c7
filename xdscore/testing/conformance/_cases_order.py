"""Make-before-break on ADS: what a client holds never points at what it lacks; and a
cluster that changes is answered with its endpoints."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence

import attrs

from ...wire._records import DeltaDiscoveryResponse, DiscoveryResponse
from ...wire._resource import Resource
from ...wire._typeurls import CLUSTER, ENDPOINT, ROUTE, type_info
from ._case import CaseContext, case
from ._cases_stream import load_delta, load_sotw
from ._checks import check
from ._session import DeltaSession, SotwSession
from ._trace import short_type
from ._verdicts import CaseFailed
from ._world import World

__all__: list[str] = []

Response = DiscoveryResponse | DeltaDiscoveryResponse


@attrs.define
class _Held:
    """What a client holds of clusters, endpoints and routes, response after response."""

    clusters: dict[str, Resource] = attrs.Factory(dict)
    endpoints: set[str] = attrs.Factory(set)
    routes: dict[str, Resource] = attrs.Factory(dict)

    def apply(self, response: Response) -> None:
        kind = response.type_url
        full = {r.name: r for r in response.resources if r.type_url == kind and not r.name_only}
        removed = response.removed_resources if isinstance(response, DeltaDiscoveryResponse) else ()
        if response.type_url == CLUSTER:
            if isinstance(response, DiscoveryResponse) and type_info(CLUSTER).sotw_full_state:
                self.clusters = dict(full)
            else:
                self.clusters.update(full)
            for name in removed:
                self.clusters.pop(name, None)
        elif response.type_url == ENDPOINT:
            self.endpoints.update(full)
            self.endpoints.difference_update(removed)
        elif response.type_url == ROUTE:
            self.routes.update(full)
            for name in removed:
                self.routes.pop(name, None)

    def dangling(self) -> str | None:
        """A route naming a cluster the client lacks, or one whose endpoints it lacks."""
        for route in self.routes.values():
            for ref in route.references:
                if ref.type_url != CLUSTER:
                    continue
                cluster = self.clusters.get(ref.name)
                if cluster is None:
                    return f"{route.name} names {ref.name}, which the client does not hold"
                for needed in cluster.references:
                    if needed.type_url == ENDPOINT and needed.name not in self.endpoints:
                        return (
                            f"{route.name} names {ref.name}, whose endpoints the client "
                            "has not been sent"
                        )
        return None

    def targets(self) -> set[str]:
        return {
            ref.name
            for route in self.routes.values()
            for ref in route.references
            if ref.type_url == CLUSTER
        }


def _accepted(s: SotwSession | DeltaSession) -> list[Response]:
    """The responses the client applied: those it did not NACK (the suite's client rejects
    a response as a whole)."""
    rejected = {r.response_nonce for r in s.sent if r.error_detail is not None}
    return [r for r in s.received if r.nonce not in rejected]


def _first_break(responses: Sequence[Response], start: int) -> str | None:
    """The first response from ``start`` on after which the client holds a route naming
    a cluster it lacks (or lacks the endpoints of), said in words."""
    held = _Held()
    for index, response in enumerate(responses):
        held.apply(response)
        if index < start:
            continue
        problem = held.dangling()
        if problem is not None:
            return (
                f"after the {short_type(response.type_url)} response with nonce "
                f"{response.nonce!r} (response {index + 1} on the stream), {problem}"
            )
    return None


MBB_CLAUSE = (
    "On ADS the server orders a change so that nothing breaks: clusters, then their "
    "endpoints, then listeners, then routes; a removal only once nothing held refers to it. "
    "So a route never names a cluster the client does not hold, warm with its endpoints "
    "(xds_protocol.rst, 'Eventual consistency considerations', 'Aggregated Discovery "
    "Service')."
)


def _add(world: World) -> World:
    newcomer = max(world.clusters) + 1
    return world.evolve(clusters=world.clusters | {newcomer}, route_to=newcomer)


def _remove(world: World) -> World:
    keep = min(world.clusters)
    return world.evolve(clusters=world.clusters - {world.route_to}, route_to=keep)


def _routed_to(s: SotwSession | DeltaSession) -> set[str]:
    """The clusters the routes the client holds name."""
    held = _Held()
    for response in _accepted(s):
        held.apply(response)
    return held.targets()


async def _settle(s: SotwSession | DeltaSession, ctx: CaseContext, target: str) -> None:
    """Take what the server sends, as Envoy would, until it is quiet with the routes naming
    ``target`` only, or for the response timeout at most (a server may pause between the
    steps of an ordered change, each waiting for an ACK)."""
    deadline = time.monotonic() + ctx.settings.response_timeout
    await s.settle(follow=True, first=ctx.settings.response_timeout)
    while _routed_to(s) != {target} and (remaining := deadline - time.monotonic()) > 0:
        await s.settle(follow=True, first=remaining)


def _mbb_cases(protocol: str) -> None:
    def open_session(
        ctx: CaseContext,
    ) -> contextlib.AbstractAsyncContextManager[SotwSession | DeltaSession]:
        return ctx.sotw() if protocol == "sotw" else ctx.delta()

    async def load(ctx: CaseContext, s: SotwSession | DeltaSession) -> None:
        if isinstance(s, SotwSession):
            await load_sotw(ctx, s)
        else:
            await load_delta(ctx, s)

    def route_moved(s: SotwSession | DeltaSession, start: int, target: str) -> None:
        targets = _routed_to(s)
        check(
            targets == {target},
            f"after the change the routes name {sorted(targets)}; expected {target} "
            f"(responses from {start + 1} on)",
        )

    @case(
        f"{protocol}/ads/make-before-break-add",
        "a route moved to a new cluster arrives after the cluster and its endpoints",
        clause=MBB_CLAUSE,
        invariants=[34, 36],
    )
    async def add(ctx: CaseContext) -> None:
        change = ctx.require_change(_add)
        async with open_session(ctx) as s:
            await load(ctx, s)
            start = len(_accepted(s))
            world = await ctx.change(change, "a new cluster, and the routes moved to it")
            await _settle(s, ctx, world.route_cluster)
            problem = _first_break(_accepted(s), start)
            if problem is not None:
                raise CaseFailed(problem)
            route_moved(s, start, world.route_cluster)

    @case(
        f"{protocol}/ads/make-before-break-remove",
        "a cluster is removed only after no route names it",
        clause=MBB_CLAUSE,
        invariants=[34],
    )
    async def remove(ctx: CaseContext) -> None:
        ctx.require_change(_add)
        async with open_session(ctx) as s:
            await load(ctx, s)
            added = await ctx.change(_add, "a new cluster, and the routes moved to it")
            await _settle(s, ctx, added.route_cluster)
            start = len(_accepted(s))
            world = await ctx.change(
                _remove, f"the routes move back and {added.route_cluster} goes"
            )
            await _settle(s, ctx, world.route_cluster)
            problem = _first_break(_accepted(s), start)
            if problem is not None:
                raise CaseFailed(problem)
            route_moved(s, start, world.route_cluster)

    del add, remove


_mbb_cases("sotw")
_mbb_cases("delta")


@case(
    "sotw/ads/endpoints-after-cluster-change",
    "endpoints asked for after a cluster changed are sent, though unchanged",
    clause=(
        "A changed cluster warms until endpoints arrive: Envoy asks for them again after the "
        "cluster response, and the server answers that request even if the endpoints did not "
        "change (xds_protocol.rst, 'Resource warming'; Envoy #13009)."
    ),
    invariants=[35],
)
async def sotw_endpoints_after_cluster(ctx: CaseContext) -> None:
    change: Callable[[World], World] = ctx.require_change(
        lambda w: w.evolve(revision=w.revision + 1)
    )
    async with ctx.sotw() as s:
        await load_sotw(ctx, s)
        await ctx.change(change, "every cluster changes, no endpoint does")
        clusters = await s.response(CLUSTER)
        state = s.client.type_state(ENDPOINT)
        watched = sorted(state.subscription.names) if state is not None else []
        check(bool(watched), "the client watches no endpoints")
        await s.watch(ENDPOINT, watched)
        await s.ack(clusters)
        answer = await s.wait_for(
            ENDPOINT, lambda _: True, "after the cluster change, an answer to the EDS request"
        )
        check(
            set(watched) <= {r.name for r in answer.resources},
            f"asked for {watched} after the cluster change, the answer held "
            f"{[r.name for r in answer.resources]}",
        )
