"""Cases on ACKs, NACKs and nonces: what the server does after each kind of answer."""

from __future__ import annotations

import attrs

from ...wire._records import (
    DeltaDiscoveryRequest,
    DeltaDiscoveryResponse,
    DiscoveryRequest,
    DiscoveryResponse,
)
from ...wire._typeurls import CLUSTER, ENDPOINT
from ._case import CaseContext, case
from ._cases_stream import load_delta, load_sotw
from ._checks import check, names
from ._verdicts import CaseSkipped

__all__: list[str] = []


def _content(response: DiscoveryResponse | DeltaDiscoveryResponse) -> frozenset[tuple[str, bytes]]:
    return frozenset((r.name, r.body) for r in response.resources)


# -- ACK -----------------------------------------------------------------------------------

ACK_CLAUSE = (
    "An ACK (the response's nonce and version, no error_detail) asks for nothing: while "
    "nothing changes the server sends nothing more (xds_protocol.rst, 'When to send an "
    "update': only when the resources changed)."
)


@case(
    "sotw/ack/silence",
    "after ACKs, nothing is sent while nothing changes",
    clause=ACK_CLAUSE,
    invariants=[9, 10],
)
async def sotw_ack_silence(ctx: CaseContext) -> None:
    async with ctx.sotw() as s:
        check(bool(await load_sotw(ctx, s)), "the server sent nothing for the legacy wildcard")
        await s.expect_silence(why="every response was ACKed and nothing changed")


@case(
    "delta/ack/silence",
    "after ACKs, nothing is sent while nothing changes",
    clause=ACK_CLAUSE,
    invariants=[9, 10, 24],
)
async def delta_ack_silence(ctx: CaseContext) -> None:
    async with ctx.delta() as s:
        check(bool(await load_delta(ctx, s)), "the server sent nothing for the legacy wildcard")
        await s.expect_silence(why="every response was ACKed and nothing changed")


# -- NACK ----------------------------------------------------------------------------------

NO_RESEND_CLAUSE = (
    "A NACK (error_detail set, the last accepted version) rejects the response; the server "
    "does not send the rejected content again, which would loop for ever (xds_protocol.rst, "
    "'ACK and NACK semantics summary' and 'When to send an update'; go-control-plane #962)."
)


@case(
    "sotw/nack/no-resend",
    "a NACKed version is not sent again",
    clause=NO_RESEND_CLAUSE,
    invariants=[11, 12],
)
async def sotw_nack_no_resend(ctx: CaseContext) -> None:
    async with ctx.sotw() as s:
        await s.watch(CLUSTER, None)
        rejected = await s.response(CLUSTER)
        if not rejected.resources:
            raise CaseSkipped("the server serves no clusters: nothing to NACK")
        await s.nack(rejected)
        await s.expect_silence(
            [CLUSTER],
            why=f"version {rejected.version_info!r} was NACKed and nothing changed",
            allowed=lambda r: (
                r.version_info != rejected.version_info and _content(r) != _content(rejected)
            ),
        )


@case(
    "delta/nack/no-resend",
    "NACKed resources are not sent again",
    clause=NO_RESEND_CLAUSE,
    invariants=[11, 12],
)
async def delta_nack_no_resend(ctx: CaseContext) -> None:
    async with ctx.delta() as s:
        await s.subscribe(CLUSTER)
        rejected = await s.response(CLUSTER)
        if not rejected.resources:
            raise CaseSkipped("the server serves no clusters: nothing to NACK")
        await s.nack(rejected)
        held = {(r.name, r.version) for r in rejected.resources}
        await s.expect_silence(
            [CLUSTER],
            why=f"the resources {sorted(held)} were NACKed and nothing changed",
            allowed=lambda r: not held & {(x.name, x.version) for x in r.resources},
        )


NEXT_CHANGE_CLAUSE = (
    "A NACK does not stop the type: the next change of its resources is sent as any change "
    "is (xds_protocol.rst, 'ACK and NACK semantics summary')."
)


@case(
    "sotw/nack/next-change-delivered",
    "after a NACK, the next change is sent",
    clause=NEXT_CHANGE_CLAUSE,
    invariants=[12],
)
async def sotw_nack_next_change(ctx: CaseContext) -> None:
    endpoints = await ctx.names("endpoints", 1)
    async with ctx.sotw() as s:
        await s.watch(CLUSTER, None)
        await s.ack(await s.response(CLUSTER))
        await s.watch(ENDPOINT, endpoints)
        rejected = await s.response(ENDPOINT)
        await s.nack(rejected)
        await s.pause(reject=lambda r: _content(r) == _content(rejected))
        await ctx.change(lambda w: w.bumped(), "new endpoints")
        answer = await s.wait_for(
            ENDPOINT,
            lambda r: _content(r) != _content(rejected),
            "after the NACK, an EDS response with the changed endpoints",
        )
        check(
            answer.version_info != rejected.version_info,
            f"the changed endpoints came with the NACKed version {answer.version_info!r}",
        )


@case(
    "delta/nack/next-change-delivered",
    "after a NACK, the next change is sent",
    clause=NEXT_CHANGE_CLAUSE,
    invariants=[12],
)
async def delta_nack_next_change(ctx: CaseContext) -> None:
    endpoints = await ctx.names("endpoints", 1)
    async with ctx.delta() as s:
        await s.subscribe(CLUSTER)
        await s.ack(await s.response(CLUSTER))
        await s.subscribe(ENDPOINT, endpoints)
        rejected = await s.response(ENDPOINT)
        await s.nack(rejected)
        versions = {(r.name, r.version) for r in rejected.resources}
        await s.pause(reject=lambda r: bool({(x.name, x.version) for x in r.resources} & versions))
        await ctx.change(lambda w: w.bumped(), "new endpoints")
        versions = {(r.name, r.version) for r in rejected.resources}
        await s.wait_for(
            ENDPOINT,
            lambda r: any((x.name, x.version) not in versions for x in r.resources),
            "after the NACK, an EDS response with the changed endpoints",
        )


WITH_CHANGE_CLAUSE = (
    "One request may both NACK a response and change the subscription; the server applies "
    "both (discovery.proto: a request is an ACK or NACK and a subscription update at once)."
)


@case(
    "sotw/nack/with-subscription-change",
    "a NACK that also asks for a new name gets it",
    clause=WITH_CHANGE_CLAUSE,
    invariants=[13],
)
async def sotw_nack_with_change(ctx: CaseContext) -> None:
    first, second, *_ = await ctx.names("endpoints", 2)
    async with ctx.sotw() as s:
        await s.watch(CLUSTER, None)
        await s.ack(await s.response(CLUSTER))
        await s.watch(ENDPOINT, [first])
        rejected = await s.response(ENDPOINT)
        nack = s.rejection(rejected)
        both: DiscoveryRequest = s.client.watch(ENDPOINT, [first, second])
        await s.send(attrs.evolve(both, error_detail=nack.error_detail))
        await s.wait_for(
            ENDPOINT, lambda r: second in names(r), f"{second}, asked for by the NACK,"
        )


@case(
    "delta/nack/with-subscription-change",
    "a NACK that also subscribes to a name gets it",
    clause=WITH_CHANGE_CLAUSE,
    invariants=[13],
)
async def delta_nack_with_change(ctx: CaseContext) -> None:
    first, second, *_ = await ctx.names("endpoints", 2)
    async with ctx.delta() as s:
        await s.subscribe(CLUSTER)
        await s.ack(await s.response(CLUSTER))
        await s.subscribe(ENDPOINT, [first])
        rejected = await s.response(ENDPOINT)
        nack = s.rejection(rejected)
        more: DeltaDiscoveryRequest = s.client.subscribe(ENDPOINT, [second])
        await s.send(
            attrs.evolve(more, response_nonce=nack.response_nonce, error_detail=nack.error_detail)
        )
        await s.wait_for(
            ENDPOINT, lambda r: second in names(r), f"{second}, subscribed to by the NACK,"
        )


# -- stale nonces ----------------------------------------------------------------------------


@case(
    "sotw/nonce/stale-ignored",
    "a request echoing an older nonce is not answered",
    clause=(
        "Once the server has sent a newer response of a type, a request carrying an older "
        "nonce of that type is stale and the server does not answer it (xds_protocol.rst, "
        "'Resource updates' and 'When to send an update')."
    ),
    invariants=[6],
)
async def sotw_stale_nonce(ctx: CaseContext) -> None:
    endpoints = await ctx.names("endpoints", 2)
    async with ctx.sotw() as s:
        await s.watch(CLUSTER, None)
        await s.ack(await s.response(CLUSTER))
        await s.watch(ENDPOINT, endpoints[:1])
        older = await s.response(ENDPOINT)
        await s.ack(older)
        await s.watch(ENDPOINT, endpoints)
        newer = await s.response(ENDPOINT)
        await s.ack(newer)
        await s.pause()
        await s.send(
            DiscoveryRequest(
                type_url=ENDPOINT,
                version_info=older.version_info,
                resource_names=tuple(endpoints[:1]),
                response_nonce=older.nonce,
                node=s.client.node,
            )
        )
        await s.expect_silence(
            [ENDPOINT], why=f"the request echoed nonce {older.nonce!r}, older than {newer.nonce!r}"
        )


@case(
    "delta/nonce/stale-subscription-honoured",
    "a subscription carrying an older nonce is still applied",
    clause=(
        "In Delta the nonce only pairs an ACK or NACK with its response: a request carrying "
        "an older nonce still changes the subscription (xds_protocol.rst, 'Incremental xDS': "
        "the nonce is not for rejecting stale requests)."
    ),
    invariants=[26],
)
async def delta_stale_nonce(ctx: CaseContext) -> None:
    first, second, third, *_ = await ctx.names("endpoints", 3)
    async with ctx.delta() as s:
        await s.subscribe(CLUSTER)
        await s.ack(await s.response(CLUSTER))
        await s.subscribe(ENDPOINT, [first])
        older = await s.response(ENDPOINT)
        await s.ack(older)
        await s.subscribe(ENDPOINT, [second])
        await s.ack(await s.response(ENDPOINT))
        await s.pause()
        request = s.client.subscribe(ENDPOINT, [third])
        await s.send(attrs.evolve(request, response_nonce=older.nonce))
        await s.wait_for(
            ENDPOINT,
            lambda r: third in names(r),
            f"{third}, subscribed to by a request echoing the older nonce {older.nonce!r},",
        )
