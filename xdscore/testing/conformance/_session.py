"""One xDS stream of a case: the library's client machine over a real gRPC call.

A session sends what its client machine (`SotwClient` or
`DeltaClient`, which behave like Envoy's) returns, and a
background task reads every response into a list the case takes them from, recording both
in the case's `Trace`. Cases wait with bounded
timeouts: `response` for a response that must come, `collect` for what arrives
in a quiet period. A response is acknowledged with `ack` (the machine's ACK, or its
NACK for a response it finds malformed, as Envoy would send) or rejected with `nack`
(the machine's own NACK: the last accepted version, ``error_detail`` set).

A server that ends the stream turns the next wait into a failure naming the status; one
that does not offer the method at all (UNIMPLEMENTED before any response) into a skip.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

import anyio

from ..._errors import GrpcStatus, RemoteProtocolError
from ...protocol._delta_client import DeltaClient
from ...protocol._follow import Follower
from ...protocol._sotw_client import SotwClient
from ...wire._client_codec import (
    decode_delta_response,
    decode_response,
    encode_delta_request,
    encode_request,
)
from ...wire._records import (
    DeltaDiscoveryRequest,
    DeltaDiscoveryResponse,
    DiscoveryRequest,
    DiscoveryResponse,
)
from ...wire._resource import Resource
from ...wire._typeurls import ENDPOINT, ROUTE
from ._channel import RawStream, StreamEnded
from ._trace import Trace, short_type
from ._verdicts import CaseFailed, CaseSkipped

__all__ = ["DeltaSession", "Rejector", "Session", "SotwSession"]

_Request = TypeVar("_Request", DiscoveryRequest, DeltaDiscoveryRequest)
_Response = TypeVar("_Response", DiscoveryResponse, DeltaDiscoveryResponse)

REJECTION = "rejected by the xdscore conformance suite"
"""The ``error_detail`` message of the suite's NACKs."""

FOLLOWED = frozenset({ENDPOINT, ROUTE})
"""The types a session follows, as Envoy does: the endpoints of the clusters it holds, the
route configurations of its listeners (the clusters and listeners are its own choice)."""

MAX_UNREAD = 1000
"""Responses a session holds unread before it stops reading and calls the server flooding."""

SETTLE_LIMIT = 200
"""Responses `Session.settle` takes before it calls the stream endless."""


class Rejector:
    """The client machine's ``validate`` hook: objects to every resource while armed."""

    def __init__(self) -> None:
        self.armed = False

    def __call__(self, type_url: str, resources: Sequence[Resource]) -> str | None:
        return REJECTION if self.armed else None


class Session(Generic[_Request, _Response]):
    """What the SotW and Delta sessions share: the reader, the waits, the trace."""

    def __init__(
        self,
        label: str,
        raw: RawStream,
        trace: Trace,
        *,
        response_timeout: float,
        quiet: float,
        path: str,
    ) -> None:
        self.label = label
        self.trace = trace
        self.response_timeout = response_timeout
        self.quiet = quiet
        self.path = path
        self.received: list[_Response] = []
        """Every response received, in order."""
        self.arrivals: list[float] = []
        """When each of `received` arrived (``time.monotonic()``)."""
        self.sent: list[_Request] = []
        """Every request sent, in order."""
        self.ended: StreamEnded | None = None
        self._raw = raw
        self._unread: list[_Response] = []
        self._news = anyio.Event()
        self._malformed: str | None = None

    # -- subclass hooks -------------------------------------------------------------------

    def _decode(self, data: bytes) -> _Response:
        raise NotImplementedError

    def _encode(self, request: _Request) -> bytes:
        raise NotImplementedError

    # -- the reader -----------------------------------------------------------------------

    async def read_forever(self) -> None:
        """Read responses until the stream ends (run in the session's task group)."""
        try:
            while True:
                data = await self._raw.receive()
                if data is None:
                    self._end(StreamEnded(GrpcStatus.OK, "the server ended the stream"))
                    return
                try:
                    response = self._decode(data)
                except RemoteProtocolError as exc:
                    self._malformed = f"a response does not decode: {exc}"
                    self.trace.note(self.label, f"malformed response: {exc}")
                    self._wake()
                    continue
                self.trace.response(self.label, response)
                self.received.append(response)
                self.arrivals.append(time.monotonic())
                self._unread.append(response)
                self._wake()
                if len(self._unread) >= MAX_UNREAD:
                    self._malformed = (
                        f"{MAX_UNREAD} responses came that the client had not answered"
                    )
                    return
        except StreamEnded as exc:
            self._end(exc)

    def _end(self, ended: StreamEnded) -> None:
        self.ended = ended
        self.trace.note(self.label, f"stream ended: {ended}")
        self._wake()

    def _wake(self) -> None:
        self._news.set()
        self._news = anyio.Event()

    def check_alive(self, waiting_for: str) -> None:
        """Raise the failure (or skip) a malformed response or the stream's end calls for."""
        if self._malformed is not None:
            raise CaseFailed(f"the server misbehaved on the stream: {self._malformed}")
        ended = self.ended
        if ended is None:
            return
        if ended.status == GrpcStatus.UNIMPLEMENTED and not self.received:
            raise CaseSkipped(f"the server does not offer {self.path} ({ended})")
        raise CaseFailed(f"the server ended the stream ({ended}) while {waiting_for}")

    # -- sending --------------------------------------------------------------------------

    async def send(self, request: _Request) -> _Request:
        """Send ``request`` as it is; return it."""
        self.trace.request(self.label, request)
        self.sent.append(request)
        try:
            await self._raw.send(self._encode(request))
        except StreamEnded as exc:
            if self.ended is None:
                self._end(exc)
            self.check_alive("sending a request")
        return request

    async def send_all(self, requests: Sequence[_Request]) -> None:
        for request in requests:
            await self.send(request)

    # -- waiting --------------------------------------------------------------------------

    def _take(self, type_url: str | None) -> _Response | None:
        for index, response in enumerate(self._unread):
            if type_url is None or response.type_url == type_url:
                del self._unread[index]
                return response
        return None

    async def response(
        self, type_url: str | None = None, *, within: float | None = None
    ) -> _Response:
        """The next response (of ``type_url``) not yet taken; a failure if none comes within
        ``within`` seconds (default: the response timeout)."""
        limit = self.response_timeout if within is None else within
        what = f"a {short_type(type_url)} response" if type_url else "a response"
        deadline = time.monotonic() + limit
        while True:
            found = self._take(type_url)
            if found is not None:
                return found
            self.check_alive(f"waiting for {what}")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise CaseFailed(f"expected {what} within {limit:g} s; none came")
            with anyio.move_on_after(remaining):
                await self._news.wait()

    async def maybe_response(
        self, type_url: str | None = None, *, within: float | None = None
    ) -> _Response | None:
        """The next response (of ``type_url``) within ``within`` seconds (default: the quiet
        period), or ``None``."""
        limit = self.quiet if within is None else within
        deadline = time.monotonic() + limit
        while True:
            found = self._take(type_url)
            if found is not None:
                return found
            self.check_alive("waiting for a response")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            with anyio.move_on_after(remaining):
                await self._news.wait()

    async def collect(
        self, type_url: str | None = None, *, within: float | None = None
    ) -> list[_Response]:
        """Every response (of ``type_url``) not yet taken, and those arriving in the next
        ``within`` seconds (default: the quiet period)."""
        limit = self.quiet if within is None else within
        await anyio.sleep(limit)
        self.check_alive("waiting a quiet period")
        found = [r for r in self._unread if type_url is None or r.type_url == type_url]
        self._unread = [r for r in self._unread if r not in found]
        kind = short_type(type_url) + " " if type_url else ""
        self.trace.note(self.label, f"waited {limit:g} s: {len(found)} {kind}response(s)")
        return found

    async def expect_silence(
        self,
        type_urls: Sequence[str] | None = None,
        *,
        why: str,
        within: float | None = None,
        allowed: Callable[[_Response], bool] | None = None,
    ) -> list[_Response]:
        """Fail if a response (of one of ``type_urls``) is pending or arrives within the
        quiet period, unless ``allowed`` accepts it; ``why`` says what the silence shows.
        The responses allowed are acknowledged, as Envoy would, and returned."""
        found = await self.collect(within=within)
        for response in found:
            if (type_urls is None or response.type_url in type_urls) and (
                allowed is None or not allowed(response)
            ):
                raise CaseFailed(
                    f"{why}, yet the server sent a {short_type(response.type_url)} response "
                    f"(nonce {response.nonce!r})"
                )
        for response in found:
            await self.ack(response)
        return found

    async def pause(
        self, *, within: float | None = None, reject: Callable[[_Response], bool] | None = None
    ) -> list[_Response]:
        """Wait a quiet period, answering what arrives as the client would: an ACK, or a
        NACK for a response ``reject`` picks (one with resources); return what arrived."""
        found = await self.collect(within=within)
        for response in found:
            if reject is not None and reject(response) and response.resources:
                await self.nack(response)
            else:
                await self.ack(response)
        return found

    async def ack(self, response: _Response) -> _Request:
        raise NotImplementedError

    async def nack(self, response: _Response) -> _Request:
        raise NotImplementedError

    async def wait_for(
        self, type_url: str, wanted: Callable[[_Response], bool], what: str
    ) -> _Response:
        """Take (and acknowledge) responses of ``type_url`` until one that ``wanted``
        accepts; a failure saying ``what`` did not come within the response timeout."""
        deadline = time.monotonic() + self.response_timeout
        while True:
            remaining = deadline - time.monotonic()
            found = await self.maybe_response(type_url, within=max(remaining, 0.0))
            if found is None:
                raise CaseFailed(f"{what} did not come within {self.response_timeout:g} s")
            await self.ack(found)
            if wanted(found):
                return found

    def unread(self) -> list[_Response]:
        """The responses received and not yet taken."""
        return list(self._unread)


class SotwSession(Session[DiscoveryRequest, DiscoveryResponse]):
    """A State-of-the-World stream driven by a `SotwClient`."""

    def __init__(
        self,
        label: str,
        raw: RawStream,
        trace: Trace,
        client: SotwClient,
        rejector: Rejector,
        *,
        response_timeout: float,
        quiet: float,
        path: str,
    ) -> None:
        super().__init__(
            label, raw, trace, response_timeout=response_timeout, quiet=quiet, path=path
        )
        self.client = client
        self.rejector = rejector
        self._follower = Follower()

    def _decode(self, data: bytes) -> DiscoveryResponse:
        return decode_response(data)

    def _encode(self, request: DiscoveryRequest) -> bytes:
        return encode_request(request)

    async def watch(self, type_url: str, names: Sequence[str] | None) -> DiscoveryRequest:
        """Watch exactly ``names`` of ``type_url`` (``None``: the legacy wildcard)."""
        return await self.send(self.client.watch(type_url, names))

    async def ack(self, response: DiscoveryResponse) -> DiscoveryRequest:
        """Apply ``response`` and send the machine's answer (an ACK, or a NACK for a response
        the machine rejects as Envoy would)."""
        _asked_for(self.client.type_state(response.type_url) is not None, response)
        return await self.send(self.client.receive(response))

    def rejection(self, response: DiscoveryResponse) -> DiscoveryRequest:
        """Apply ``response`` as rejected (it must carry resources); the NACK to send: the
        last accepted version, ``error_detail`` set."""
        return _rejected(self.rejector, lambda: self.client.receive(response))

    async def nack(self, response: DiscoveryResponse) -> DiscoveryRequest:
        """Reject ``response`` and send the NACK (see `rejection`)."""
        return await self.send(self.rejection(response))

    async def settle(
        self, *, follow: bool = False, within: float | None = None, first: float | None = None
    ) -> list[DiscoveryResponse]:
        """Acknowledge every response until none comes for ``within`` seconds (default: the
        quiet period; ``first`` for the first one); with ``follow``, also watch what the
        resources held refer to, as Envoy does (before the ACK)."""
        taken: list[DiscoveryResponse] = []
        while (
            response := await self.maybe_response(
                within=within if taken or first is None else first
            )
        ) is not None:
            taken.append(response)
            _guard(taken, self.quiet)
            _asked_for(self.client.type_state(response.type_url) is not None, response)
            acknowledgement = self.client.receive(response)
            if follow:
                changed = self._follower.update(
                    response.type_url, self.client.holds(response.type_url)
                )
                for type_url, names in changed.items():
                    state = self.client.type_state(type_url)
                    if type_url not in FOLLOWED or (
                        state is not None and state.subscription.wildcard
                    ):
                        continue
                    await self.watch(type_url, sorted(names))
            await self.send(acknowledgement)
        return taken


class DeltaSession(Session[DeltaDiscoveryRequest, DeltaDiscoveryResponse]):
    """A Delta stream driven by a `DeltaClient`."""

    def __init__(
        self,
        label: str,
        raw: RawStream,
        trace: Trace,
        client: DeltaClient,
        rejector: Rejector,
        *,
        response_timeout: float,
        quiet: float,
        path: str,
    ) -> None:
        super().__init__(
            label, raw, trace, response_timeout=response_timeout, quiet=quiet, path=path
        )
        self.client = client
        self.rejector = rejector
        self._follower = Follower()

    def _decode(self, data: bytes) -> DeltaDiscoveryResponse:
        return decode_delta_response(data)

    def _encode(self, request: DeltaDiscoveryRequest) -> bytes:
        return encode_delta_request(request)

    async def subscribe(self, type_url: str, names: Sequence[str] = ()) -> DeltaDiscoveryRequest:
        """Subscribe to ``names`` (none on the first request of LDS/CDS: the legacy wildcard)."""
        return await self.send(self.client.subscribe(type_url, names))

    async def unsubscribe(self, type_url: str, names: Sequence[str]) -> DeltaDiscoveryRequest:
        return await self.send(self.client.unsubscribe(type_url, names))

    async def ack(self, response: DeltaDiscoveryResponse) -> DeltaDiscoveryRequest:
        """Apply ``response`` and send the machine's ACK (or its NACK for a response Envoy
        would reject)."""
        _asked_for(self.client.type_state(response.type_url) is not None, response)
        return await self.send(self.client.receive(response))

    def rejection(self, response: DeltaDiscoveryResponse) -> DeltaDiscoveryRequest:
        """Apply ``response`` as rejected (it must carry resources with bodies); the NACK."""
        return _rejected(self.rejector, lambda: self.client.receive(response))

    async def nack(self, response: DeltaDiscoveryResponse) -> DeltaDiscoveryRequest:
        """Reject ``response`` and send the NACK."""
        return await self.send(self.rejection(response))

    async def settle(
        self, *, follow: bool = False, within: float | None = None, first: float | None = None
    ) -> list[DeltaDiscoveryResponse]:
        """Acknowledge every response until none comes for ``within`` seconds (default: the
        quiet period; ``first`` for the first one); with ``follow``, also subscribe to what
        the resources held refer to (before the ACK)."""
        taken: list[DeltaDiscoveryResponse] = []
        while (
            response := await self.maybe_response(
                within=within if taken or first is None else first
            )
        ) is not None:
            taken.append(response)
            _guard(taken, self.quiet)
            _asked_for(self.client.type_state(response.type_url) is not None, response)
            acknowledgement = self.client.receive(response)
            if follow:
                changed = self._follower.update(
                    response.type_url, self.client.holds(response.type_url)
                )
                for type_url, names in changed.items():
                    state = self.client.type_state(type_url)
                    if type_url not in FOLLOWED or (state is not None and state.wildcard):
                        continue
                    wanted = set(state.requested) if state is not None else set()
                    if added := sorted(names - wanted):
                        await self.subscribe(type_url, added)
                    if gone := sorted(wanted - names):
                        await self.unsubscribe(type_url, gone)
            await self.send(acknowledgement)
        return taken


def _asked_for(asked: bool, response: DiscoveryResponse | DeltaDiscoveryResponse) -> None:
    if not asked:
        raise CaseFailed(
            f"the server sent a {short_type(response.type_url)} response (nonce "
            f"{response.nonce!r}), a type the client never asked for"
        )


def _guard(taken: Sequence[DiscoveryResponse | DeltaDiscoveryResponse], quiet: float) -> None:
    if len(taken) > SETTLE_LIMIT:
        raise CaseFailed(
            f"the server kept sending: {len(taken)} responses, each acknowledged, without a "
            f"quiet period of {quiet:g} s"
        )


_Made = TypeVar("_Made", DiscoveryRequest, DeltaDiscoveryRequest)


def _rejected(rejector: Rejector, receive: Callable[[], _Made]) -> _Made:
    rejector.armed = True
    try:
        request = receive()
    finally:
        rejector.armed = False
    if request.error_detail is None:
        raise CaseFailed("internal: the suite tried to NACK a response with nothing to reject")
    return request
