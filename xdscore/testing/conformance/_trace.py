"""What a case sent and received, one line a message, for the evidence of a failure.

Every request a case's streams send and every response they receive is recorded as it
goes (``→`` out, ``←`` in), with the time since the case began and the stream's label,
plus notes (``··``): a configuration change, a quiet period, how a stream ended. Cases
are short, so a case's trace is the minimal exchange that shows what went wrong; the
property mode's trace is that of the shrunk example.
"""

from __future__ import annotations

import time

import attrs

from ...wire._records import (
    DeltaDiscoveryRequest,
    DeltaDiscoveryResponse,
    DiscoveryRequest,
    DiscoveryResponse,
    ResourceError,
)
from ...wire._resource import Resource
from ...wire._typeurls import type_info

__all__ = ["Trace", "TraceLine", "short_type"]

MAX_NAMES = 8
"""Names shown per list before the rest is counted."""


def short_type(type_url: str) -> str:
    """``CDS``, ``EDS``, ... for the registered types; the message name for others."""
    return type_info(type_url).short_name.upper() if type_url else "(no type)"


@attrs.frozen
class TraceLine:
    """One recorded message or note."""

    at: float
    stream: str
    arrow: str
    text: str

    def __str__(self) -> str:
        return f"{self.at:7.3f}s {self.arrow} [{self.stream}] {self.text}"


class Trace:
    """The lines of one case, in the order things happened."""

    def __init__(self) -> None:
        self._start = time.monotonic()
        self.lines: list[TraceLine] = []

    def _add(self, stream: str, arrow: str, text: str) -> None:
        self.lines.append(TraceLine(time.monotonic() - self._start, stream, arrow, text))

    def note(self, stream: str, text: str) -> None:
        self._add(stream, "··", text)

    def request(self, stream: str, request: DiscoveryRequest | DeltaDiscoveryRequest) -> None:
        self._add(stream, "→", describe_request(request))

    def response(self, stream: str, response: DiscoveryResponse | DeltaDiscoveryResponse) -> None:
        self._add(stream, "←", describe_response(response))

    def render(self, limit: int = 60) -> str:
        """The lines as text, the last ``limit`` of them."""
        lines = [str(line) for line in self.lines[-limit:]]
        if len(self.lines) > limit:
            lines.insert(0, f"   ... {len(self.lines) - limit} earlier line(s) left out")
        return "\n".join(lines)


def _names(names: tuple[str, ...] | list[str]) -> str:
    shown = ", ".join(names[:MAX_NAMES])
    if len(names) > MAX_NAMES:
        shown += f", ... {len(names) - MAX_NAMES} more"
    return f"[{shown}]"


def _short(version: str) -> str:
    return version if len(version) <= 12 else version[:10] + "…"


def _resource(resource: Resource, *, delta: bool) -> str:
    text = resource.name
    if delta:
        text += f"@{_short(resource.version)}"
    if resource.ttl is not None:
        text += f" ttl={resource.ttl:g}s"
    if resource.name_only:
        text += " (no body)"
    return text


def _errors(errors: tuple[ResourceError, ...]) -> str:
    if not errors:
        return ""
    return " errors=" + _names([f"{e.name}: {e.code} {e.message[:40]}" for e in errors])


def describe_request(request: DiscoveryRequest | DeltaDiscoveryRequest) -> str:
    """One line for a request."""
    kind = short_type(request.type_url)
    if isinstance(request, DiscoveryRequest):
        text = (
            f"{kind} version={request.version_info!r} nonce={request.response_nonce!r} "
            f"names={_names(list(request.resource_names))}"
        )
    else:
        text = f"{kind} nonce={request.response_nonce!r}"
        if request.resource_names_subscribe:
            text += f" subscribe={_names(list(request.resource_names_subscribe))}"
        if request.resource_names_unsubscribe:
            text += f" unsubscribe={_names(list(request.resource_names_unsubscribe))}"
        if request.initial_resource_versions:
            held = [f"{n}@{_short(v)}" for n, v in request.initial_resource_versions.items()]
            text += f" initial_resource_versions={_names(held)}"
    if request.node is not None:
        text += " +node"
    if request.error_detail is not None:
        text += f" NACK({request.error_detail.code}: {request.error_detail.message[:60]})"
    return text


def describe_response(response: DiscoveryResponse | DeltaDiscoveryResponse) -> str:
    """One line for a response."""
    kind = short_type(response.type_url)
    if isinstance(response, DiscoveryResponse):
        resources = [_resource(r, delta=False) for r in response.resources]
        text = (
            f"{kind} version={response.version_info!r} nonce={response.nonce!r} "
            f"resources={_names(resources)}"
        )
    else:
        resources = [_resource(r, delta=True) for r in response.resources]
        text = f"{kind} nonce={response.nonce!r} resources={_names(resources)}"
        if response.removed_resources:
            text += f" removed={_names(list(response.removed_resources))}"
    strays = sorted({r.type_url for r in response.resources} - {response.type_url})
    if strays:
        text += " (resource types: " + ", ".join(strays) + ")"
    return text + _errors(response.resource_errors)
