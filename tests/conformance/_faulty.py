"""A deliberately broken xDS server: the library's server behind a stream that misbehaves.

:class:`FaultyServer` is an :class:`~xdscore.XdsServer` whose streams pass through a
:class:`FaultStream`. The stream decodes every request and response with the protobuf
classes (nothing of the library's codec) and hands them to one :class:`Fault`, which may
rewrite, drop or add messages, in either direction, before they go on. Each fault in
``tests/conformance/_faults.py`` is one misbehaviour a real control plane has had (or could
have), written so that the conformance case named after it catches it.

:class:`Log` is what the stream tells each fault about its stream so far: the requests per
type, the responses sent, nonces, subscriptions.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

import anyio
import anyio.abc
from envoy.service.discovery.v3 import discovery_pb2

from xdscore import XdsServer
from xdscore.server import ByteStream
from xdscore.wire import Resource

Message = Any
Served = Callable[[str], Mapping[str, Resource]]
"""The resources of a type the server serves now, by name."""


class Log:
    """What happened on one stream, kept by :class:`FaultStream` for its fault."""

    def __init__(self, protocol: str, type_url: str | None, served: Served) -> None:
        self.protocol = protocol
        self.per_type = type_url is not None
        self.served = served
        self.requests: dict[str, list[Message]] = {}
        """Every request received, per type (as the fault passed them on)."""
        self.responses: dict[str, list[Message]] = {}
        """Every response sent, per type."""
        self.nonces: dict[str, str] = {}
        """The latest nonce sent per type."""
        self.subscribed: dict[str, set[str]] = {}
        """Delta: every name subscribed per type (unsubscribes taken out)."""
        self.unsubscribed: dict[str, set[str]] = {}
        """Delta: every name ever unsubscribed per type."""
        self.acked: set[str] = set()
        """Nonces the client acknowledged."""

    @property
    def delta(self) -> bool:
        return self.protocol == "delta"

    def last_request(self, type_url: str) -> Message | None:
        found = self.requests.get(type_url)
        return found[-1] if found else None

    def last_response(self, type_url: str) -> Message | None:
        found = self.responses.get(type_url)
        return found[-1] if found else None

    def names(self, request: Message) -> list[str]:
        """The names a request subscribes to (SotW: all of them)."""
        return list(request.resource_names_subscribe if self.delta else request.resource_names)

    def is_ack(self, request: Message) -> bool:
        nonce = request.response_nonce
        return bool(nonce) and not request.HasField("error_detail")

    def is_nack(self, request: Message) -> bool:
        return request.HasField("error_detail")

    def record_request(self, request: Message) -> None:
        type_url = request.type_url
        self.requests.setdefault(type_url, []).append(request)
        if self.is_ack(request):
            self.acked.add(request.response_nonce)
        if self.delta:
            subscribed = self.subscribed.setdefault(type_url, set())
            subscribed.update(request.resource_names_subscribe)
            subscribed.difference_update(request.resource_names_unsubscribe)
            self.unsubscribed.setdefault(type_url, set()).update(request.resource_names_unsubscribe)

    def record_response(self, response: Message) -> None:
        self.responses.setdefault(response.type_url, []).append(response)
        self.nonces[response.type_url] = response.nonce


class Fault:
    """One misbehaviour. A new instance serves each stream; ``applies`` says which."""

    protocols: tuple[str, ...] = ("sotw", "delta")
    per_type_streams = False
    """Whether it applies on the per-type services (otherwise on ADS only)."""

    def __init__(self, log: Log, stream: FaultStream) -> None:
        self.log = log
        self.stream = stream

    @classmethod
    def applies(cls, protocol: str, type_url: str | None) -> bool:
        return protocol in cls.protocols and (type_url is not None) == cls.per_type_streams

    async def request(self, request: Message) -> list[Message]:
        """The requests to pass to the server for one from the client."""
        return [request]

    async def response(self, response: Message) -> list[Message]:
        """The responses to send for one from the server."""
        return [response]


class FaultStream(ByteStream):
    """A server stream whose messages go through a :class:`Fault` (see the module). Every
    write goes through :meth:`send` (the defaults of :class:`~xdscore.server.ByteStream`
    join a response's parts and never write from the reading task)."""

    def __init__(
        self,
        inner: Any,
        protocol: str,
        type_url: str | None,
        fault: type[Fault],
        served: Served,
        group: anyio.abc.TaskGroup,
    ) -> None:
        self._inner = inner
        self.group = group
        """For faults that act later (a timer)."""
        self.log = Log(protocol, type_url, served)
        self.fault = fault(self.log, self)
        self._pending: deque[bytes] = deque()
        self._lock = anyio.Lock()
        self._counter = 0

    async def closed(self) -> None:
        await self._inner.closed()

    def synced(self) -> None:
        self._inner.synced()

    async def end(self, message: str) -> None:
        await self._inner.end(message)

    def _request_class(self) -> Any:
        return (
            discovery_pb2.DeltaDiscoveryRequest
            if self.log.delta
            else discovery_pb2.DiscoveryRequest
        )

    def _response_class(self) -> Any:
        return (
            discovery_pb2.DeltaDiscoveryResponse
            if self.log.delta
            else discovery_pb2.DiscoveryResponse
        )

    async def receive(self) -> bytes | None:
        while not self._pending:
            data = await self._inner.receive()
            if data is None:
                return None
            request = self._request_class().FromString(data)
            for passed in await self.fault.request(request):
                self.log.record_request(passed)
                self._pending.append(passed.SerializeToString())
        return self._pending.popleft()

    async def send(self, data: bytes) -> None:
        response = self._response_class().FromString(data)
        for out in await self.fault.response(response):
            await self.write(out)

    async def write(self, response: Message) -> None:
        """Send ``response`` to the client (recorded in the log)."""
        async with self._lock:
            self.log.record_response(response)
            await self._inner.send(response.SerializeToString())

    def fresh_nonce(self) -> str:
        self._counter += 1
        return f"fault-{self._counter}"

    def inject(self, request: Message) -> None:
        """Pass ``request`` to the server as if the client had sent it."""
        self.log.record_request(request)
        self._pending.append(request.SerializeToString())


class FaultyServer(XdsServer):
    """An :class:`~xdscore.XdsServer` whose streams misbehave as ``fault`` says."""

    def __init__(self, cache: Any, fault: type[Fault] | None, served: Served, **options: Any):
        super().__init__(cache, **options)
        self.fault = fault
        self.served = served

    async def run_stream(
        self, stream: Any, *, protocol: Any, type_url: str | None = None, **kw: Any
    ) -> None:
        fault = self.fault
        if fault is None or not fault.applies(protocol, type_url):
            await super().run_stream(stream, protocol=protocol, type_url=type_url, **kw)
            return
        try:
            async with anyio.create_task_group() as group:
                wrapped = FaultStream(stream, protocol, type_url, fault, self.served, group)
                try:
                    await super().run_stream(wrapped, protocol=protocol, type_url=type_url, **kw)
                finally:
                    group.cancel_scope.cancel()
        except BaseExceptionGroup as errors:
            # The transport maps a protocol error to a status: hand it the error itself.
            if len(errors.exceptions) == 1:
                raise errors.exceptions[0] from None
            raise
