"""State-of-the-World subscription cases: wildcards, names, empty lists, unsubscribing,
full state, names that do not exist yet, reconnecting."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...wire._records import DiscoveryResponse
from ...wire._typeurls import CLUSTER, ENDPOINT, LISTENER, ROUTE
from ._case import CaseContext, case
from ._cases_stream import universe
from ._checks import check, names, one_line
from ._session import Session
from ._trace import short_type
from ._world import World, cluster_name

__all__: list[str] = []

_WHICH = {CLUSTER: "clusters", LISTENER: "listeners", ENDPOINT: "endpoints", ROUTE: "routes"}


def _exactly(response: DiscoveryResponse, expected: list[str], asked: str) -> None:
    got = sorted(names(response))
    check(
        got == sorted(expected),
        f"{asked} was answered with {got}; expected exactly {sorted(expected)}",
    )


# -- wildcard-capable types: LDS and CDS ----------------------------------------------------


def _wildcard_cases(type_url: str) -> None:
    kind = short_type(type_url).lower()
    which = _WHICH[type_url]

    @case(
        f"sotw/{kind}/legacy-wildcard",
        f"a first {kind.upper()} request naming nothing gets every resource",
        clause=(
            f"For {kind.upper()}, a client that has never named a resource of the type asks "
            "for all of them: the legacy wildcard (xds_protocol.rst, 'How the client "
            "specifies what resources to return')."
        ),
        invariants=[17],
    )
    async def legacy(ctx: CaseContext) -> None:
        await ctx.names(which, 1)
        served = await universe(ctx, type_url)
        async with ctx.sotw() as s:
            await s.watch(type_url, None)
            _exactly(await s.response(type_url), served, "a request naming nothing")

    @case(
        f"sotw/{kind}/explicit-wildcard",
        f"{kind.upper()} '*' gets every resource",
        clause=(
            "A client asks for every resource of a wildcard-capable type by naming '*' "
            "(xds_protocol.rst, 'How the client specifies what resources to return')."
        ),
        invariants=[17],
    )
    async def explicit(ctx: CaseContext) -> None:
        await ctx.names(which, 1)
        served = await universe(ctx, type_url)
        async with ctx.sotw() as s:
            await s.watch(type_url, ["*"])
            _exactly(await s.response(type_url), served, "a request for '*'")

    @case(
        f"sotw/{kind}/named",
        f"{kind.upper()} by name gets only that resource",
        clause=(
            "A request naming resources asks for exactly those; a full-state response holds "
            "all of them and nothing else (xds_protocol.rst, 'How the client specifies what "
            "resources to return', 'Grouping Resources into Responses')."
        ),
        invariants=[15, 21],
    )
    async def named(ctx: CaseContext) -> None:
        served = await ctx.names(which, 2)
        async with ctx.sotw() as s:
            await s.watch(type_url, served[:1])
            _exactly(await s.response(type_url), served[:1], f"a request for {served[:1]}")

    @case(
        f"sotw/{kind}/wildcard-and-names",
        f"{kind.upper()} '*' plus a name gets everything; dropping '*' leaves the name",
        clause=(
            "'*' and names together ask for everything (their union); a later request "
            "without '*' asks for the names alone (xds_protocol.rst, 'How the client "
            "specifies what resources to return')."
        ),
        invariants=[15, 17],
    )
    async def both(ctx: CaseContext) -> None:
        await ctx.names(which, 2)
        served = await universe(ctx, type_url)
        async with ctx.sotw() as s:
            await s.watch(type_url, ["*", served[0]])
            union = await s.response(type_url)
            _exactly(union, served, f"a request for ['*', {served[0]!r}]")
            await s.ack(union)
            await s.watch(type_url, served[:1])
            _exactly(await s.response(type_url), served[:1], f"then a request for {served[:1]}")

    @case(
        f"sotw/{kind}/empty-after-names",
        f"{kind.upper()}: an empty list after names asks for nothing",
        clause=(
            "The legacy wildcard ends once the client names a resource: a later empty list "
            "unsubscribes from everything rather than asking for all (xds_protocol.rst, "
            "'How the client specifies what resources to return')."
        ),
        invariants=[16, 17],
    )
    async def empty(ctx: CaseContext) -> None:
        served = await ctx.names(which, 1)
        async with ctx.sotw() as s:
            await s.watch(type_url, None)
            await s.ack(await s.response(type_url))
            await s.watch(type_url, served[:1])
            named = await s.response(type_url)
            _exactly(named, served[:1], f"a request for {served[:1]}")
            await s.ack(named)
            await s.watch(type_url, [])
            await s.expect_silence(
                [type_url],
                why="the client had named a resource, then sent an empty list",
                allowed=lambda r: not r.resources,
            )

    @case(
        f"sotw/{kind}/unsubscribe",
        f"{kind.upper()}: a name left out of the list is left out of the full state",
        clause=(
            "resource_names is the whole set wanted, and an LDS or CDS response the whole "
            "state of it: after a name is left out, the next response holds the others alone "
            "(xds_protocol.rst, 'Unsubscribing From Resources', 'Grouping Resources into "
            "Responses')."
        ),
        invariants=[15, 21],
    )
    async def unsubscribe(ctx: CaseContext) -> None:
        served = await ctx.names(which, 2)
        pair = served[:2]
        async with ctx.sotw() as s:
            await s.watch(type_url, pair)
            named = await s.response(type_url)
            _exactly(named, pair, f"a request for {pair}")
            await s.ack(named)
            await s.watch(type_url, pair[:1])
            answer = await s.wait_for(
                type_url, lambda _: True, f"after {pair[1]} was left out, a {kind.upper()} response"
            )
            _exactly(answer, pair[:1], f"then a request for {pair[:1]}")


_wildcard_cases(CLUSTER)
_wildcard_cases(LISTENER)


# -- named types: EDS and RDS ------------------------------------------------------------------


def _named_cases(type_url: str) -> None:
    kind = short_type(type_url).lower()
    which = _WHICH[type_url]

    @case(
        f"sotw/{kind}/named-only",
        f"{kind.upper()} by name gets that resource and no other",
        clause=(
            f"{kind.upper()} is not a wildcard type: the server sends the resources the "
            "request names and no other (xds_protocol.rst, 'How the client specifies what "
            "resources to return')."
        ),
        invariants=[15, 19],
    )
    async def named_only(ctx: CaseContext) -> None:
        served = await ctx.names(which, 2)
        async with ctx.sotw() as s:
            await s.watch(_parent(type_url), None)
            await s.watch(type_url, served[:1])
            _exactly(await s.response(type_url), served[:1], f"a request for {served[:1]}")

    @case(
        f"sotw/{kind}/empty-list",
        f"{kind.upper()}: an empty list asks for nothing, first or later",
        clause=(
            f"For a type without a wildcard such as {kind.upper()}, an empty resource_names "
            "means no resource at all, on a first request and after names "
            "(xds_protocol.rst, 'How the client specifies what resources to return'; istiod "
            "reads it so, go-control-plane by default as a wildcard)."
        ),
        invariants=[16],
    )
    async def empty(ctx: CaseContext) -> None:
        served = await ctx.names(which, 1)
        async with ctx.sotw() as s:
            await s.watch(_parent(type_url), None)
            await s.watch(type_url, [])
            await s.expect_silence(
                [type_url],
                why=f"the first {kind.upper()} request named nothing",
                allowed=lambda r: not r.resources,
            )
            await s.watch(type_url, served)
            answer = await s.response(type_url)
            check(bool(names(answer)), f"a request for {served} was answered with nothing")
            await s.ack(answer)
            await s.watch(type_url, [])
            await s.expect_silence(
                [type_url],
                why=f"the client went from {served} to an empty list",
                allowed=lambda r: not r.resources,
            )

    @case(
        f"sotw/{kind}/unsubscribe",
        f"{kind.upper()}: a name left out of the list is no longer sent",
        clause=(
            "resource_names is the whole set wanted: a name left out is unsubscribed, and "
            "the server stops sending it (xds_protocol.rst, 'Unsubscribing From Resources')."
        ),
        invariants=[15],
    )
    async def unsubscribe(ctx: CaseContext) -> None:
        served = await ctx.names(which, 2)
        kept, dropped = served[0], served[-1]
        async with ctx.sotw() as s:
            await s.watch(_parent(type_url), None)
            await s.watch(type_url, served)
            await s.ack(await s.response(type_url))
            await s.watch(type_url, served[:-1])
            await _dropped_stays_out(ctx, s, type_url, kept, dropped)


def _change_for(type_url: str) -> Callable[[World], World]:
    """A change of every resource of ``type_url`` (endpoints: a new epoch; routes: another
    target cluster)."""
    if type_url == ENDPOINT:
        return World.bumped
    return lambda w: w.evolve(route_to=sorted(w.clusters - {w.route_to})[0])


def _parent(type_url: str) -> str:
    """The type whose resources name those of ``type_url``, which Envoy asks for first."""
    return CLUSTER if type_url == ENDPOINT else LISTENER


_named_cases(ENDPOINT)
_named_cases(ROUTE)


# -- what is never sent -------------------------------------------------------------------------


@case(
    "sotw/eds-rds/never-unasked",
    "no endpoints or routes are sent to a client that asked for none",
    clause=(
        "Resources of a type without a wildcard reach a client only by name: a client that "
        "asks for clusters and listeners alone gets no endpoints and no route configurations "
        "(xds_protocol.rst, 'How the client specifies what resources to return')."
    ),
    invariants=[16, 19],
)
async def sotw_never_unasked(ctx: CaseContext) -> None:
    async with ctx.sotw() as s:
        await s.watch(CLUSTER, None)
        await s.watch(LISTENER, None)
        await s.settle(first=ctx.settings.response_timeout)
        await s.expect_silence([ENDPOINT, ROUTE], why="the client asked for no endpoints or routes")
        if not ctx.can_change(lambda w: w.bumped()):
            ctx.partly("the driver cannot change the endpoints, so no change was pushed")
            return
        await ctx.change(lambda w: w.bumped(), "every endpoint set changes")
        await s.settle()
        await s.expect_silence([ENDPOINT, ROUTE], why="the client asked for no endpoints or routes")


# -- changes of subscriptions and of the configuration -------------------------------------------


@case(
    "sotw/eds/readded-name-resent",
    "a name dropped, then asked for again, is sent again though unchanged",
    clause=(
        "When the client changes the names it asks for, the server sends the newly named "
        "resources, even those it sent before that did not change since (xds_protocol.rst, "
        "'How the client specifies what resources to return')."
    ),
    invariants=[20],
)
async def sotw_readded_name(ctx: CaseContext) -> None:
    first, second, *_ = await ctx.names("endpoints", 2)
    async with ctx.sotw() as s:
        await s.watch(CLUSTER, None)
        await s.ack(await s.response(CLUSTER))
        await s.watch(ENDPOINT, [first, second])
        await s.ack(await s.response(ENDPOINT))
        await s.watch(ENDPOINT, [first])
        await s.pause()
        await s.watch(ENDPOINT, [first, second])
        await s.wait_for(
            ENDPOINT,
            lambda r: second in names(r),
            f"{second}, dropped and asked for again,",
        )


@case(
    "sotw/eds/missing-name-remembered",
    "a name asked for before it exists is sent once it does",
    clause=(
        "The server remembers a requested name that does not exist and sends the resource "
        "when it appears (xds_protocol.rst, 'Knowing When a Requested Resource Does Not "
        "Exist')."
    ),
    invariants=[18],
)
async def sotw_missing_remembered(ctx: CaseContext) -> None:
    endpoints = await ctx.names("endpoints", 1)
    grow = ctx.require_change(lambda w: w.evolve(clusters=w.clusters | {max(w.clusters) + 1}))
    assert ctx.world is not None
    newcomer = cluster_name(max(ctx.world.clusters) + 1)
    async with ctx.sotw() as s:
        await s.watch(CLUSTER, None)
        await s.ack(await s.response(CLUSTER))
        await s.watch(ENDPOINT, [*endpoints, newcomer])
        await s.settle(first=ctx.settings.response_timeout)
        await ctx.change(grow, f"{newcomer} appears")
        await s.wait_for(
            ENDPOINT,
            lambda r: newcomer in names(r),
            f"an EDS response with {newcomer}, asked for before it existed,",
        )


@case(
    "sotw/cds/deletion-is-omission",
    "a deleted cluster is left out of the next full state",
    clause=(
        "LDS and CDS responses are the full state: each carries every resource wanted, and "
        "one left out is deleted (xds_protocol.rst, 'Grouping Resources into Responses', "
        "'Deleting Resources')."
    ),
    invariants=[21],
)
async def sotw_deletion(ctx: CaseContext) -> None:
    await ctx.names("clusters", 2)
    shrink = ctx.require_change(
        lambda w: w.evolve(clusters=w.clusters - {max(w.clusters - {w.route_to})})
    )
    async with ctx.sotw() as s:
        await s.watch(CLUSTER, None)
        await s.ack(await s.response(CLUSTER))
        await s.pause()
        world = await ctx.change(shrink, "a cluster is deleted")
        answer = await s.wait_for(CLUSTER, lambda _: True, "after the deletion, a CDS response")
        _exactly(answer, world.cluster_names, "the first CDS response after the deletion")


@case(
    "sotw/reconnect/new-names-answered",
    "a reconnecting client asking for more than before is answered",
    clause=(
        "On a new stream the client presents the last version it accepted; the server may "
        "skip the response only when the client cannot be asking for anything new: a "
        "request naming more than that version held is answered (xds_protocol.rst, 'ACK/NACK "
        "and resource type instance version')."
    ),
    invariants=[7, 8],
)
async def sotw_reconnect(ctx: CaseContext) -> None:
    first, second, *_ = await ctx.names("endpoints", 2)
    async with ctx.sotw() as before:
        await before.watch(CLUSTER, None)
        await before.ack(await before.response(CLUSTER))
        await before.watch(ENDPOINT, [first])
        await before.ack(await before.response(ENDPOINT))
    client = before.client
    client.reconnect()
    async with ctx.sotw(resume=before) as after:
        await after.watch(ENDPOINT, [first, second])
        answer = await after.response(ENDPOINT)
        check(
            second in names(answer),
            f"the new stream asked for {[first, second]} presenting the version of {[first]}; "
            f"the answer was the {one_line(answer)}",
        )


async def _dropped_stays_out(
    ctx: CaseContext, s: Session[Any, Any], type_url: str, kept: str, dropped: str
) -> None:
    """The end of an unsubscribe case, SotW or Delta: ``dropped`` is in no response, the
    next change included (which still carries ``kept``)."""
    kind = short_type(type_url).lower()
    for response in await s.collect(type_url):
        check(
            dropped not in names(response),
            f"{dropped} was unsubscribed, yet the {one_line(response)} carries it",
        )
        await s.ack(response)
    change = _change_for(type_url)
    if not ctx.can_change(change):
        ctx.partly("the driver cannot change the resources, so no later change was checked")
        return
    await ctx.change(change, f"every {kind.upper()} resource changes")
    answer = await s.wait_for(
        type_url, lambda _: True, f"after the change, a {kind.upper()} response"
    )
    check(
        dropped not in names(answer) and kept in names(answer),
        f"after the change, the {one_line(answer)}; expected {kept} and not {dropped}",
    )
