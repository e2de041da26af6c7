"""Delta (incremental) subscription cases: wildcards, subscribe and unsubscribe, removals,
re-subscribing, reconnecting with ``initial_resource_versions``."""

from __future__ import annotations

import attrs

from ...wire._records import DeltaDiscoveryResponse
from ...wire._typeurls import CLUSTER, ENDPOINT, LISTENER, ROUTE
from ._case import CaseContext, case
from ._cases_sotw import _dropped_stays_out, _parent
from ._cases_stream import universe
from ._checks import check, missing_name, names, one_line
from ._session import DeltaSession
from ._trace import short_type
from ._world import cluster_name

__all__: list[str] = []

_WHICH = {CLUSTER: "clusters", LISTENER: "listeners", ENDPOINT: "endpoints", ROUTE: "routes"}


async def _gather(s: DeltaSession, type_url: str, ctx: CaseContext) -> list[DeltaDiscoveryResponse]:
    """Every response of ``type_url`` until the server is quiet (the first may take the
    response timeout), each acknowledged."""
    first = await s.response(type_url)
    await s.ack(first)
    found = [first]
    for response in await s.settle():
        if response.type_url == type_url:
            found.append(response)
    return found


def _sent(responses: list[DeltaDiscoveryResponse]) -> list[str]:
    return sorted({name for r in responses for name in names(r)})


# -- wildcards ---------------------------------------------------------------------------------


def _wildcard_cases(type_url: str) -> None:
    kind = short_type(type_url).lower()
    which = _WHICH[type_url]

    @case(
        f"delta/{kind}/legacy-wildcard",
        f"a first {kind.upper()} request subscribing to nothing gets every resource",
        clause=(
            "In Delta, a first request for a wildcard-capable type with nothing to subscribe "
            "or unsubscribe is the legacy wildcard (xds_protocol.rst, 'How the client "
            "specifies what resources to return')."
        ),
        invariants=[32],
    )
    async def legacy(ctx: CaseContext) -> None:
        await ctx.names(which, 1)
        served = await universe(ctx, type_url)
        async with ctx.delta() as s:
            await s.subscribe(type_url)
            got = _sent(await _gather(s, type_url, ctx))
            check(got == served, f"the legacy wildcard was answered with {got}; expected {served}")

    @case(
        f"delta/{kind}/explicit-wildcard",
        f"{kind.upper()} subscribing to '*' gets every resource",
        clause=(
            "Subscribing to '*' asks for every resource of the type (xds_protocol.rst, 'How "
            "the client specifies what resources to return')."
        ),
        invariants=[17],
    )
    async def explicit(ctx: CaseContext) -> None:
        await ctx.names(which, 1)
        served = await universe(ctx, type_url)
        async with ctx.delta() as s:
            await s.subscribe(type_url, ["*"])
            got = _sent(await _gather(s, type_url, ctx))
            check(got == served, f"'*' was answered with {got}; expected {served}")


_wildcard_cases(CLUSTER)
_wildcard_cases(LISTENER)


# -- names ----------------------------------------------------------------------------------------


def _named_cases(type_url: str) -> None:
    kind = short_type(type_url).lower()
    which = _WHICH[type_url]

    @case(
        f"delta/{kind}/subscribe",
        f"{kind.upper()}: each name subscribed is sent, and nothing else",
        clause=(
            "The server sends the resources subscribed to, as they are subscribed, and none "
            "that were not (xds_protocol.rst, 'Incremental xDS', 'Subscribing to Resources')."
        ),
        invariants=[15, 28],
    )
    async def subscribe(ctx: CaseContext) -> None:
        first, second, *_ = await ctx.names(which, 2)
        async with ctx.delta() as s:
            await s.subscribe(_parent(type_url))
            await s.subscribe(type_url, [first])
            answer = await s.response(type_url)
            check(names(answer) == [first], f"a subscription to {first} got the {one_line(answer)}")
            await s.ack(answer)
            await s.subscribe(type_url, [second])
            answer = await s.response(type_url)
            check(
                second in names(answer) and set(names(answer)) <= {first, second},
                f"a subscription to {second} got the {one_line(answer)}",
            )

    @case(
        f"delta/{kind}/unsubscribe",
        f"{kind.upper()}: an unsubscribed name is no longer sent",
        clause=(
            "After an unsubscribe the server stops sending the name; a pure unsubscribe needs "
            "no answer, and one for a name never subscribed is accepted silently "
            "(xds_protocol.rst, 'Unsubscribing from Resources')."
        ),
        invariants=[29],
    )
    async def unsubscribe(ctx: CaseContext) -> None:
        served = await ctx.names(which, 2)
        kept, dropped = served[0], served[-1]
        async with ctx.delta() as s:
            await s.subscribe(_parent(type_url))
            await s.subscribe(type_url, [kept, dropped])
            await _gather(s, type_url, ctx)
            await s.unsubscribe(type_url, [dropped])
            await s.unsubscribe(type_url, [missing_name(served)])
            await _dropped_stays_out(ctx, s, type_url, kept, dropped)


_named_cases(ENDPOINT)
_named_cases(ROUTE)


@case(
    "delta/eds-rds/never-unasked",
    "no endpoints or routes are sent to a client that subscribed to none",
    clause=(
        "Resources of a type without a wildcard reach a client only by name: a client that "
        "subscribes to clusters and listeners alone gets no endpoints and no route "
        "configurations (xds_protocol.rst, 'Incremental xDS')."
    ),
    invariants=[19, 29],
)
async def delta_never_unasked(ctx: CaseContext) -> None:
    async with ctx.delta() as s:
        await s.subscribe(CLUSTER)
        await s.subscribe(LISTENER)
        await s.settle(first=ctx.settings.response_timeout)
        await s.expect_silence(
            [ENDPOINT, ROUTE], why="the client subscribed to no endpoints or routes"
        )
        if not ctx.can_change(lambda w: w.bumped()):
            ctx.partly("the driver cannot change the endpoints, so no change was pushed")
            return
        await ctx.change(lambda w: w.bumped(), "every endpoint set changes")
        await s.settle()
        await s.expect_silence(
            [ENDPOINT, ROUTE], why="the client subscribed to no endpoints or routes"
        )


@case(
    "delta/missing/removed",
    "a subscribed name that does not exist is answered with a removal",
    clause=(
        "The server answers a subscription to a name it does not have with that name in "
        "removed_resources, so the client need not wait out its timeout (xds_protocol.rst, "
        "'Knowing When a Requested Resource Does Not Exist')."
    ),
    invariants=[31],
)
async def delta_missing(ctx: CaseContext) -> None:
    endpoints = await ctx.names("endpoints", 1)
    missing = missing_name(endpoints)
    async with ctx.delta() as s:
        await s.subscribe(CLUSTER)
        await s.subscribe(ENDPOINT, [endpoints[0], missing])

        def removes(answer: DeltaDiscoveryResponse) -> bool:
            check(
                missing not in names(answer),
                f"{missing} does not exist, yet the {one_line(answer)} sends it",
            )
            return missing in answer.removed_resources

        await s.wait_for(ENDPOINT, removes, f"the removal of {missing}, which does not exist,")


@case(
    "delta/eds/missing-name-remembered",
    "a name subscribed before it exists is sent once it does",
    clause=(
        "The server remembers a subscribed name that does not exist and sends the resource "
        "when it appears (xds_protocol.rst, 'Knowing When a Requested Resource Does Not "
        "Exist')."
    ),
    invariants=[18],
)
async def delta_missing_remembered(ctx: CaseContext) -> None:
    grow = ctx.require_change(lambda w: w.evolve(clusters=w.clusters | {max(w.clusters) + 1}))
    assert ctx.world is not None
    newcomer = cluster_name(max(ctx.world.clusters) + 1)
    async with ctx.delta() as s:
        await s.subscribe(CLUSTER)
        await s.subscribe(ENDPOINT, [newcomer])
        await s.settle(first=ctx.settings.response_timeout)
        await ctx.change(grow, f"{newcomer} appears")
        await s.wait_for(
            ENDPOINT,
            lambda r: newcomer in names(r),
            f"an EDS response with {newcomer}, subscribed to before it existed,",
        )


RESUBSCRIBE_CLAUSE = (
    "The server answers every name in resource_names_subscribe, even one it believes the "
    "client already holds at the current version (discovery.proto, DeltaDiscoveryRequest; "
    "java-control-plane #339)."
)


@case(
    "delta/resubscribe/held-name",
    "subscribing again to a held name sends it again",
    clause=RESUBSCRIBE_CLAUSE,
    invariants=[28],
)
async def delta_resubscribe_held(ctx: CaseContext) -> None:
    endpoints = await ctx.names("endpoints", 1)
    async with ctx.delta() as s:
        await s.subscribe(CLUSTER)
        await s.subscribe(ENDPOINT, endpoints[:1])
        await _gather(s, ENDPOINT, ctx)
        await s.subscribe(ENDPOINT, endpoints[:1])
        await s.wait_for(
            ENDPOINT,
            lambda r: endpoints[0] in names(r),
            f"subscribed to again while held, {endpoints[0]}",
        )


@case(
    "delta/resubscribe/after-unsubscribe",
    "unsubscribing then subscribing again sends the resource again",
    clause=RESUBSCRIBE_CLAUSE,
    invariants=[28, 29],
)
async def delta_resubscribe_after(ctx: CaseContext) -> None:
    endpoints = await ctx.names("endpoints", 1)
    async with ctx.delta() as s:
        await s.subscribe(CLUSTER)
        await s.subscribe(ENDPOINT, endpoints[:1])
        await _gather(s, ENDPOINT, ctx)
        await s.unsubscribe(ENDPOINT, endpoints[:1])
        await s.subscribe(ENDPOINT, endpoints[:1])
        await s.wait_for(
            ENDPOINT,
            lambda r: endpoints[0] in names(r),
            f"after unsubscribing and subscribing again, {endpoints[0]}",
        )


@case(
    "delta/wildcard/unsubscribe-answered",
    "under the wildcard, unsubscribing a name is answered",
    clause=(
        "A client subscribed to '*' that unsubscribes a name it also named is answered: the "
        "resource again if the wildcard still covers it, or its removal (xds_protocol.rst, "
        "'Unsubscribing from Resources')."
    ),
    invariants=[30],
)
async def delta_wildcard_unsubscribe(ctx: CaseContext) -> None:
    clusters = await ctx.names("clusters", 1)
    async with ctx.delta() as s:
        await s.subscribe(CLUSTER, ["*"])
        await _gather(s, CLUSTER, ctx)
        await s.subscribe(CLUSTER, clusters[:1])
        await s.settle()
        await s.unsubscribe(CLUSTER, clusters[:1])
        answer = await s.response(CLUSTER)
        check(
            clusters[0] in names(answer) or clusters[0] in answer.removed_resources,
            f"{clusters[0]} was unsubscribed under '*'; the answer was the {one_line(answer)}",
        )


@case(
    "delta/cds/removal-on-delete",
    "a deleted cluster is sent as a removal",
    clause=(
        "When a resource the client holds is deleted, the server names it in "
        "removed_resources (xds_protocol.rst, 'Incremental xDS', 'Deleting Resources')."
    ),
    invariants=[21, 27],
)
async def delta_removal(ctx: CaseContext) -> None:
    await ctx.names("clusters", 2)
    shrink = ctx.require_change(
        lambda w: w.evolve(clusters=w.clusters - {max(w.clusters - {w.route_to})})
    )
    async with ctx.delta() as s:
        await s.subscribe(CLUSTER)
        await _gather(s, CLUSTER, ctx)
        before = ctx.world
        world = await ctx.change(shrink, "a cluster is deleted")
        assert before is not None
        (gone,) = set(before.cluster_names) - set(world.cluster_names)

        def removes(answer: DeltaDiscoveryResponse) -> bool:
            check(gone not in names(answer), f"{gone} was deleted, yet the {one_line(answer)}")
            return gone in answer.removed_resources

        await s.wait_for(CLUSTER, removes, f"the removal of the deleted {gone}")


# -- reconnecting ---------------------------------------------------------------------------------


@case(
    "delta/reconnect/nothing-current-resent",
    "a reconnect listing current versions is sent none of them again",
    clause=(
        "A reconnecting client lists what it holds in initial_resource_versions; the server "
        "sends only what differs, nothing the client holds at the current version "
        "(discovery.proto, DeltaDiscoveryRequest.initial_resource_versions; xds_protocol.rst, "
        "'Incremental xDS'; java-control-plane #463)."
    ),
    invariants=[27, 9],
)
async def delta_reconnect_current(ctx: CaseContext) -> None:
    await ctx.names("endpoints", 1)
    async with ctx.delta() as before:
        await before.subscribe(CLUSTER)
        await before.subscribe(LISTENER)
        await before.settle(follow=True, first=ctx.settings.response_timeout)
    held = {
        (type_url, name, r.version)
        for type_url in before.client.type_urls()
        for name, r in before.client.holds(type_url).items()
    }
    async with ctx.delta(resume=before) as after:
        await after.send_all(after.client.reconnect())
        await after.expect_silence(
            why="the new stream listed every resource it holds at the current version",
            allowed=lambda r: not {(r.type_url, x.name, x.version) for x in r.resources} & held,
        )


@case(
    "delta/reconnect/stale-updated",
    "a reconnect listing an old version, or a deleted name, is updated",
    clause=(
        "On a reconnect the server sends what the client holds at another version and "
        "removes what it holds that no longer exists (discovery.proto, "
        "DeltaDiscoveryRequest.initial_resource_versions; istio #41494)."
    ),
    invariants=[27],
)
async def delta_reconnect_stale(ctx: CaseContext) -> None:
    clusters = await ctx.names("clusters", 1)
    gone = missing_name(clusters, "xdscore-conformance-deleted")
    async with ctx.delta() as before:
        await before.subscribe(CLUSTER)
        await _gather(before, CLUSTER, ctx)
    (request,) = before.client.reconnect()
    versions = dict(request.initial_resource_versions)
    versions[clusters[0]] = "xdscore-conformance-old-version"
    versions[gone] = "xdscore-conformance-old-version"
    async with ctx.delta(resume=before) as after:
        await after.send(attrs.evolve(request, initial_resource_versions=versions))
        seen: list[DeltaDiscoveryResponse] = []

        def both(answer: DeltaDiscoveryResponse) -> bool:
            seen.append(answer)
            updated = any(clusters[0] in names(r) for r in seen)
            removed = any(gone in r.removed_resources for r in seen)
            return updated and removed

        await after.wait_for(
            CLUSTER,
            both,
            f"{clusters[0]} (listed at an old version) sent again and {gone} (listed, deleted) "
            "removed",
        )
