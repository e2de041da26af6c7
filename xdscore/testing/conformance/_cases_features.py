"""Optional features, checked where the server uses them: TTLs and heartbeats, and
``resource_errors``."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from ...protocol._features import RESOURCE_IN_SOTW, SUPPORTS_TTL
from ...wire._records import DeltaDiscoveryResponse, DiscoveryResponse, ResourceError
from ...wire._resource import Resource
from ...wire._typeurls import CLUSTER, ENDPOINT, LISTENER
from ._case import CaseContext, case
from ._checks import check, missing_name, names
from ._session import Session
from ._trace import short_type
from ._verdicts import CaseFailed, CaseSkipped
from ._world import World

__all__: list[str] = []

TTL_SECONDS = 2.0
"""The TTL the suite gives ``listener_0`` where the driver can."""

REFRESHES = 2
"""Refreshes in a row each case waits for."""

GRPC_AGENT = "gRPC C-core"
"""The user agent the resource-error cases present: gRPC reads ``resource_errors``
whenever they are present (gRFC A88), and advertises no feature for them."""

TTL_CLAUSE = (
    "A resource sent with a TTL is dropped by the client when the TTL lapses without news of "
    "it; while it is unchanged the server refreshes it in time, with a heartbeat (the held "
    "version, no body) or the resource again (xds_protocol.rst, 'TTL'; discovery.proto, "
    "Resource.ttl). Checked only where the server sends TTLs, to a client advertising "
    f"{SUPPORTS_TTL} (and {RESOURCE_IN_SOTW} over SotW)."
)


def _with_ttl(
    responses: Sequence[DiscoveryResponse | DeltaDiscoveryResponse],
) -> tuple[str, Resource] | None:
    for response in responses:
        for resource in response.resources:
            if resource.ttl is not None and not resource.name_only:
                return response.type_url, resource
    return None


async def _ttl_case(ctx: CaseContext, s: Session[Any, Any], why: str) -> None:
    """What both TTL cases check, once the session holds listeners and clusters."""
    found = _with_ttl(s.received)
    if found is None:
        raise CaseSkipped(
            "no resource came with a TTL, though the client advertised reading them "
            f"({SUPPORTS_TTL}, {RESOURCE_IN_SOTW}){why}"
        )
    type_url, held = found
    assert held.ttl is not None
    ttl = held.ttl
    last, version = _latest(s, held.name)
    ctx.note(f"{held.name} ({short_type(type_url)}) came with a TTL of {ttl:g} s")
    for _ in range(REFRESHES):
        while True:
            remaining = last + ttl - time.monotonic()
            answer = await s.maybe_response(type_url, within=max(remaining, 0.0))
            if answer is None:
                raise CaseFailed(
                    f"{held.name} came with a TTL of {ttl:g} s; nothing refreshed it within "
                    "the TTL, so a client drops it"
                )
            await s.ack(answer)
            entry = next((r for r in answer.resources if r.name == held.name), None)
            if entry is None:
                continue
            if entry.name_only:
                shown = _response_version(answer, entry)
                check(
                    shown == version,
                    f"the heartbeat for {held.name} carries version {shown!r}, not the held "
                    f"{version!r}: a client rejects it",
                )
            else:
                version = _response_version(answer, entry)
            last = s.arrivals[s.received.index(answer)]
            break


def _latest(s: Session[Any, Any], name: str) -> tuple[float, str]:
    """When ``name`` was last sent, and the version the client holds it at."""
    last, version = 0.0, ""
    for response, at in zip(s.received, s.arrivals, strict=True):
        for entry in response.resources:
            if entry.name == name:
                last = at
                if not entry.name_only:
                    version = _response_version(response, entry)
    return last, version


def _response_version(response: DiscoveryResponse | DeltaDiscoveryResponse, entry: Resource) -> str:
    """The version a client holds ``entry`` at: the response's over SotW, its own over Delta."""
    return response.version_info if isinstance(response, DiscoveryResponse) else entry.version


async def _give_ttl(ctx: CaseContext) -> str:
    """Give ``listener_0`` a TTL where the driver can; otherwise say why it cannot."""
    give: Callable[[World], World] = lambda w: w.evolve(ttl=TTL_SECONDS)  # noqa: E731
    reason = ctx.cannot(give)
    if reason is None:
        await ctx.change(give, "listener_0 gets a TTL")
        return ""
    return f"; the driver could not give one: {reason}"


@case(
    "sotw/ttl/refreshed-in-time",
    "a resource with a TTL is refreshed before the TTL lapses",
    clause=TTL_CLAUSE,
    invariants=[38],
)
async def sotw_ttl(ctx: CaseContext) -> None:
    why = await _give_ttl(ctx)
    async with ctx.sotw(node=ctx.node(features=[SUPPORTS_TTL, RESOURCE_IN_SOTW])) as s:
        await s.watch(LISTENER, None)
        await s.settle(first=ctx.settings.response_timeout, within=0.1)
        await _ttl_case(ctx, s, why)


@case(
    "delta/ttl/refreshed-in-time",
    "a resource with a TTL is refreshed before the TTL lapses",
    clause=TTL_CLAUSE,
    invariants=[38],
)
async def delta_ttl(ctx: CaseContext) -> None:
    why = await _give_ttl(ctx)
    async with ctx.delta(node=ctx.node(features=[SUPPORTS_TTL])) as s:
        await s.subscribe(LISTENER)
        await s.settle(first=ctx.settings.response_timeout, within=0.1)
        await _ttl_case(ctx, s, why)


ERRORS_CLAUSE = (
    "resource_errors say why a name the client asked for is not sent (NOT_FOUND for one "
    "that does not exist): each names a resource asked for by name, and none a resource "
    "the same response sends (xRFC TP3; gRFC A88). Checked only where the server sends them, "
    f"to a client presenting itself as {GRPC_AGENT!r}."
)


def _check_errors(
    responses: Sequence[DiscoveryResponse | DeltaDiscoveryResponse], asked: set[str], missing: str
) -> None:
    errors: list[tuple[ResourceError, DiscoveryResponse | DeltaDiscoveryResponse]] = [
        (e, r) for r in responses for e in r.resource_errors
    ]
    if not errors:
        raise CaseSkipped(f"the server sent no resource_errors for {missing}, which does not exist")
    for error, response in errors:
        check(error.name in asked, f"an error names {error.name!r}, which was not asked for")
        check(
            error.name not in names(response),
            f"the response with nonce {response.nonce!r} sends {error.name!r} and reports an "
            f"error for it ({error.code}: {error.message})",
        )
        if error.name == missing:
            check(
                error.code == 5,
                f"{missing} does not exist, yet its error code is {error.code}, not NOT_FOUND (5)",
            )


@case(
    "sotw/resource-errors/named-missing-only",
    "resource_errors name only missing resources asked for",
    clause=ERRORS_CLAUSE,
    invariants=[41],
)
async def sotw_errors(ctx: CaseContext) -> None:
    endpoints = await ctx.names("endpoints", 1)
    missing = missing_name(endpoints)
    async with ctx.sotw(node=ctx.node(user_agent=GRPC_AGENT)) as s:
        await s.watch(CLUSTER, None)
        await s.ack(await s.response(CLUSTER))
        await s.watch(ENDPOINT, [*endpoints, missing])
        await s.settle(first=ctx.settings.response_timeout)
        _check_errors(
            [r for r in s.received if r.type_url == ENDPOINT], {*endpoints, missing}, missing
        )


@case(
    "delta/resource-errors/named-missing-only",
    "resource_errors name only missing resources subscribed to",
    clause=ERRORS_CLAUSE,
    invariants=[41],
)
async def delta_errors(ctx: CaseContext) -> None:
    endpoints = await ctx.names("endpoints", 1)
    missing = missing_name(endpoints)
    async with ctx.delta(node=ctx.node(user_agent=GRPC_AGENT)) as s:
        await s.subscribe(CLUSTER)
        await s.ack(await s.response(CLUSTER))
        await s.subscribe(ENDPOINT, [*endpoints, missing])
        await s.settle(first=ctx.settings.response_timeout)
        _check_errors(
            [r for r in s.received if r.type_url == ENDPOINT], {*endpoints, missing}, missing
        )
