"""Cases on the stream as a whole: the node, nonces, what a response may hold, type URLs
the server does not know, and the per-type services."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from typing import Any

from ...protocol._sotw_client import SotwClientTypeState
from ...wire._reader import name_field
from ...wire._records import DeltaDiscoveryResponse, DiscoveryResponse
from ...wire._typeurls import CLUSTER, ENDPOINT, LISTENER, ROUTE, TYPE_URL_PREFIX, type_info
from ._case import CaseContext, case
from ._checks import check, missing_name, names, one_line
from ._session import DeltaSession, SotwSession
from ._trace import short_type
from ._verdicts import CaseFailed, CaseSkipped

UNKNOWN_TYPE = TYPE_URL_PREFIX + "xdscore.conformance.v1.NoSuchType"
"""A type URL no server serves."""


async def load_sotw(ctx: CaseContext, session: SotwSession) -> list[DiscoveryResponse]:
    """Watch listeners and clusters with the legacy wildcard and what they refer to, as
    Envoy does; acknowledge everything until the server is quiet with every type answered
    and every name asked for held (or for the response timeout at most)."""
    await session.watch(CLUSTER, None)
    await session.watch(LISTENER, None)
    return await _settle_loaded(ctx, session)


async def load_delta(ctx: CaseContext, session: DeltaSession) -> list[DeltaDiscoveryResponse]:
    """The same over Delta."""
    await session.subscribe(CLUSTER)
    await session.subscribe(LISTENER)
    return await _settle_loaded(ctx, session)


async def _settle_loaded(ctx: CaseContext, session: SotwSession | DeltaSession) -> list[Any]:
    """Settle, again while something asked for is missing: a quiet period can fall between
    two steps of a loaded server's answers."""
    deadline = time.monotonic() + ctx.settings.response_timeout
    taken: list[Any] = await session.settle(follow=True, first=ctx.settings.response_timeout)
    while _missing(session) and (remaining := deadline - time.monotonic()) > 0:
        taken += await session.settle(follow=True, first=remaining)
    return taken


def _missing(session: SotwSession | DeltaSession) -> bool:
    """Whether a type the client watches was never answered, or a name it asked for is
    not held."""
    client = session.client
    for type_url in client.type_urls():
        state = client.type_state(type_url)
        if state is None or not state.nonce:
            return True
        if isinstance(state, SotwClientTypeState):
            asked = set() if state.subscription.wildcard else set(state.subscription.names)
        else:
            asked = set() if state.wildcard else set(state.requested)
        if not asked <= set(client.holds(type_url)):
            return True
    return False


async def universe(ctx: CaseContext, type_url: str) -> list[str]:
    """Every name of ``type_url`` (LDS or CDS) the server owns to: the inventory's, and what
    the legacy and the explicit wildcard get over SotW and over Delta. A case checking one
    way of asking compares it with the others, so that no one of them is the only oracle."""
    found = set((await ctx.inventory()).names(type_url))
    within = ctx.settings.response_timeout
    for wildcard in (None, ["*"]):
        async with ctx.sotw() as s:
            await s.watch(type_url, wildcard)
            answer = await s.maybe_response(type_url, within=within)
            found.update(names(answer) if answer is not None else ())
        with contextlib.suppress(CaseSkipped):
            async with ctx.delta() as d:
                await d.subscribe(type_url, wildcard or ())
                if (delta := await d.maybe_response(type_url, within=within)) is not None:
                    found.update(names(delta))
                    for more in await d.settle():
                        found.update(names(more) if more.type_url == type_url else ())
    ctx.note(f"every {short_type(type_url)} name served: {sorted(found)}")
    return sorted(found)


# -- the node ----------------------------------------------------------------------------

NODE_CLAUSE = (
    "Only the first request of a stream is sure to carry the node; later requests may leave "
    "it out and the server identifies them by the stream (xds_protocol.rst, 'Basic Protocol "
    "Overview'; discovery.proto, DiscoveryRequest.node)."
)


@case(
    "sotw/node/first-request-only",
    "requests after the first without a node are served",
    clause=NODE_CLAUSE,
    invariants=[1],
)
async def sotw_node_first_only(ctx: CaseContext) -> None:
    endpoints = await ctx.names("endpoints", 1)
    async with ctx.sotw(node_once=True) as s:
        await s.watch(CLUSTER, None)
        await s.ack(await s.response(CLUSTER))
        await s.watch(ENDPOINT, endpoints)
        answer = await s.response(ENDPOINT)
        check(
            endpoints[0] in names(answer),
            f"a request without the node asked for {endpoints}; the answer was {one_line(answer)}",
        )
        await s.ack(answer)
        await s.pause()


@case(
    "delta/node/first-request-only",
    "requests after the first without a node are served",
    clause=NODE_CLAUSE,
    invariants=[1],
)
async def delta_node_first_only(ctx: CaseContext) -> None:
    endpoints = await ctx.names("endpoints", 1)
    async with ctx.delta(node_once=True) as s:
        await s.subscribe(CLUSTER)
        await s.ack(await s.response(CLUSTER))
        await s.subscribe(ENDPOINT, endpoints[:1])
        answer = await s.response(ENDPOINT)
        check(
            endpoints[0] in names(answer),
            f"a request without the node subscribed to {endpoints[0]}; the answer was "
            f"{one_line(answer)}",
        )
        await s.ack(answer)
        await s.pause()


# -- what a response holds -----------------------------------------------------------------

TYPE_CLAUSE = (
    "A response's type_url is the type of every resource it carries (discovery.proto, "
    "DiscoveryResponse.type_url; Envoy rejects a response whose resources are of another "
    "type)."
)


def _foreign(responses: Sequence[DiscoveryResponse | DeltaDiscoveryResponse]) -> None:
    for response in responses:
        for resource in response.resources:
            if resource.type_url != response.type_url:
                raise CaseFailed(
                    f"a {short_type(response.type_url)} response (nonce {response.nonce!r}) "
                    f"carries {resource.name!r} of type {resource.type_url}"
                )


@case(
    "sotw/response/type-consistent",
    "every resource is of the response's type",
    clause=TYPE_CLAUSE,
    invariants=[4],
)
async def sotw_type_consistent(ctx: CaseContext) -> None:
    async with ctx.sotw() as s:
        _foreign(await load_sotw(ctx, s))


@case(
    "delta/response/type-consistent",
    "every resource is of the response's type",
    clause=TYPE_CLAUSE,
    invariants=[4],
)
async def delta_type_consistent(ctx: CaseContext) -> None:
    async with ctx.delta() as s:
        _foreign(await load_delta(ctx, s))


DUPLICATE_CLAUSE = (
    "A response never names a resource twice (xds_protocol.rst, 'Duplicate Resource "
    "Names'); a Delta response never names one both in resources and in removed_resources "
    "(Envoy rejects both)."
)


def _duplicates(response: DiscoveryResponse | DeltaDiscoveryResponse) -> str | None:
    seen: set[str] = set()
    for resource in response.resources:
        if resource.name in seen:
            return f"names {resource.name!r} twice"
        seen.add(resource.name)
    if isinstance(response, DeltaDiscoveryResponse):
        removed: set[str] = set()
        for name in response.removed_resources:
            if name in seen:
                return f"both sends and removes {name!r}"
            if name in removed:
                return f"removes {name!r} twice"
            removed.add(name)
    return None


@case(
    "sotw/response/no-duplicate-names",
    "no resource twice in a response",
    clause=DUPLICATE_CLAUSE,
    invariants=[22],
)
async def sotw_no_duplicates(ctx: CaseContext) -> None:
    async with ctx.sotw() as s:
        for response in await load_sotw(ctx, s):
            problem = _duplicates(response)
            check(problem is None, f"the {one_line(response)} {problem}")


@case(
    "delta/response/no-duplicate-names",
    "no name twice, none both sent and removed",
    clause=DUPLICATE_CLAUSE,
    invariants=[22],
)
async def delta_no_duplicates(ctx: CaseContext) -> None:
    inventory = await ctx.inventory()
    async with ctx.delta() as s:
        responses = await load_delta(ctx, s)
        await s.subscribe(ENDPOINT, [missing_name(inventory.endpoints)])
        responses += await s.settle(first=ctx.settings.response_timeout)
        for response in responses:
            problem = _duplicates(response)
            check(problem is None, f"the {one_line(response)} {problem}")


@case(
    "delta/response/names-match",
    "each resource's name is the name of the resource it carries",
    clause=(
        "A Delta response names each resource beside its body; both name the same resource, "
        "since a client keeps it by the one and uses the other (discovery.proto, "
        "Resource.name)."
    ),
    invariants=[4],
)
async def delta_names_match(ctx: CaseContext) -> None:
    async with ctx.delta() as s:
        for response in await load_delta(ctx, s):
            for resource in response.resources:
                if resource.name_only or resource.type_url != response.type_url:
                    continue
                inside = name_field(resource.body)
                check(
                    inside == resource.name,
                    f"the {short_type(response.type_url)} response with nonce "
                    f"{response.nonce!r} sends {resource.name!r} carrying a resource named "
                    f"{inside!r}",
                )


# -- nonces ------------------------------------------------------------------------------

NONCE_CLAUSE = (
    "Every response carries a nonce, and no two responses on a stream carry the same one: "
    "the nonce is what pairs a client's ACK or NACK with the response it answers "
    "(xds_protocol.rst, 'ACK/NACK and resource type instance version'; discovery.proto, "
    "response nonce)."
)


def _nonces(responses: Sequence[DiscoveryResponse | DeltaDiscoveryResponse]) -> None:
    seen: dict[str, str] = {}
    for response in responses:
        check(bool(response.nonce), f"a {short_type(response.type_url)} response has no nonce")
        first = seen.get(response.nonce)
        check(
            first is None,
            f"nonce {response.nonce!r} was sent twice: on a {first} response and on a "
            f"{short_type(response.type_url)} response",
        )
        seen[response.nonce] = short_type(response.type_url)


@case(
    "sotw/nonce/unique",
    "every response has a nonce of its own",
    clause=NONCE_CLAUSE,
    invariants=[5],
)
async def sotw_nonces(ctx: CaseContext) -> None:
    endpoints = await ctx.names("endpoints", 1)
    async with ctx.sotw() as s:
        await load_sotw(ctx, s)
        await s.watch(ENDPOINT, [*endpoints, missing_name(endpoints)])
        await s.settle(first=ctx.settings.response_timeout)
        _nonces(s.received)


@case(
    "delta/nonce/unique",
    "every response has a nonce of its own",
    clause=NONCE_CLAUSE,
    invariants=[24],
)
async def delta_nonces(ctx: CaseContext) -> None:
    async with ctx.delta() as s:
        await load_delta(ctx, s)
        await s.subscribe(ENDPOINT, [missing_name((await ctx.inventory()).endpoints)])
        await s.settle(first=ctx.settings.response_timeout)
        _nonces(s.received)


# -- unknown types ---------------------------------------------------------------------------

UNKNOWN_CLAUSE = (
    "Each type on a stream is a sub-stream of its own: a request for a type the server does "
    "not know leaves the stream and the other types served (discovery.proto, "
    "DeltaDiscoveryRequest: each type_url is a separate world; xds_protocol.rst, "
    "'Aggregated Discovery Service')."
)


def _unknown_answers(responses: Sequence[DiscoveryResponse | DeltaDiscoveryResponse]) -> None:
    for response in responses:
        if response.type_url == UNKNOWN_TYPE:
            strays = [r.name for r in response.resources if r.type_url != UNKNOWN_TYPE]
            check(not strays, f"a response for the unknown type carries other resources: {strays}")


@case(
    "sotw/unknown-type/others-served",
    "a request for an unknown type disturbs nothing",
    clause=UNKNOWN_CLAUSE,
    invariants=[3],
)
async def sotw_unknown_type(ctx: CaseContext) -> None:
    endpoints = await ctx.names("endpoints", 1)
    async with ctx.sotw() as s:
        await s.send(s.client.watch(UNKNOWN_TYPE, ["anything"]))
        await s.watch(CLUSTER, None)
        await s.ack(await s.response(CLUSTER))
        await s.watch(ENDPOINT, endpoints)
        await s.ack(await s.response(ENDPOINT))
        await s.pause()
        _unknown_answers(s.received)


@case(
    "delta/unknown-type/others-served",
    "a request for an unknown type disturbs nothing",
    clause=UNKNOWN_CLAUSE,
    invariants=[3],
)
async def delta_unknown_type(ctx: CaseContext) -> None:
    endpoints = await ctx.names("endpoints", 1)
    async with ctx.delta() as s:
        await s.subscribe(UNKNOWN_TYPE, ["anything"])
        await s.subscribe(CLUSTER)
        await s.ack(await s.response(CLUSTER))
        await s.subscribe(ENDPOINT, endpoints[:1])
        await s.ack(await s.response(ENDPOINT))
        await s.pause()
        _unknown_answers(s.received)


# -- per-type services ---------------------------------------------------------------------

PER_TYPE_CLAUSE = (
    "A per-type service (ClusterDiscoveryService, EndpointDiscoveryService, ...) serves "
    "its one type as a stream of its own, with the same rules as ADS (discovery.proto; "
    "xds_protocol.rst, 'Variants of the xDS Transport Protocol')."
)

_SERVICE_TYPES = (CLUSTER, ENDPOINT, LISTENER, ROUTE)


def _service_path(type_url: str, delta: bool) -> str:
    info = type_info(type_url)
    method = info.delta_method if delta else info.sotw_method
    assert info.service is not None
    assert method is not None
    return f"/{info.service}/{method}"


async def _names_for(ctx: CaseContext, type_url: str) -> list[str] | None:
    """What a stream of ``type_url`` asks for: the wildcard (None) or one served name."""
    if type_info(type_url).wildcard_capable:
        return None
    inventory = await ctx.inventory()
    return inventory.names(type_url)[:1] or None


@case(
    "sotw/per-type/served",
    "each per-type service the server offers answers, takes the ACK, then is quiet",
    clause=PER_TYPE_CLAUSE,
    invariants=[2, 9],
)
async def sotw_per_type(ctx: CaseContext) -> None:
    offered = []
    for type_url in _SERVICE_TYPES:
        listed = await _names_for(ctx, type_url)
        if listed is None and not type_info(type_url).wildcard_capable:
            continue
        try:
            async with ctx.sotw(path=_service_path(type_url, False)) as s:
                await s.watch(type_url, listed)
                answer = await s.response(type_url)
                await s.ack(answer)
                await s.expect_silence(why=f"the {short_type(type_url)} response was ACKed")
                offered.append(short_type(type_url))
        except CaseSkipped:
            continue
    if not offered:
        raise CaseSkipped("the server offers none of the SotW per-type services")
    ctx.note(f"per-type services checked: {', '.join(offered)}")


@case(
    "delta/per-type/served",
    "each per-type Delta service the server offers answers, takes the ACK, then is quiet",
    clause=PER_TYPE_CLAUSE,
    invariants=[2, 9],
)
async def delta_per_type(ctx: CaseContext) -> None:
    offered = []
    for type_url in _SERVICE_TYPES:
        listed = await _names_for(ctx, type_url)
        if listed is None and not type_info(type_url).wildcard_capable:
            continue
        try:
            async with ctx.delta(path=_service_path(type_url, True)) as s:
                await s.subscribe(type_url, listed or ())
                answer = await s.response(type_url)
                await s.ack(answer)
                await s.expect_silence(why=f"the {short_type(type_url)} response was ACKed")
                offered.append(short_type(type_url))
        except CaseSkipped:
            continue
    if not offered:
        raise CaseSkipped("the server offers none of the Delta per-type services")
    ctx.note(f"per-type services checked: {', '.join(offered)}")


__all__ = ["UNKNOWN_TYPE", "load_delta", "load_sotw", "universe"]
