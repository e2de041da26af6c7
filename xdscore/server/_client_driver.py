"""The client side's driver: a client machine run over a byte stream, as Envoy runs its own.

The load generator runs it over grpcio streams, the tests over
:func:`xdscore.testing.byte_stream_pair`, the CLI against live servers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from mypy_extensions import mypyc_attr

from ..protocol._delta_client import DeltaClient
from ..protocol._follow import Follower
from ..protocol._sotw_client import SotwClient
from ..wire import _client_codec
from ..wire._records import (
    DeltaDiscoveryRequest,
    DeltaDiscoveryResponse,
    DiscoveryRequest,
    DiscoveryResponse,
)
from ._codecs import checked
from ._stream import ByteStream

__all__ = ["ClientDriver", "OnResponse"]


OnResponse = Callable[[Any, Any], None]
"""Called with each decoded response and the ACK or NACK the client sent for it."""


@mypyc_attr(allow_interpreted_subclasses=True)
class ClientDriver:
    """Runs a client machine over a byte stream, as Envoy runs its xDS client.

    Call :meth:`watch` (SotW) or :meth:`subscribe` / :meth:`unsubscribe` (Delta) to say
    what the client wants, and :meth:`run` to process responses until the stream ends.
    With ``follow``, the client also subscribes by name to what its resources refer to,
    as Envoy subscribes to a cluster's endpoints and a listener's routes, and gRPC to a
    route's clusters; types it watches with a wildcard are left alone. ``on_response`` sees
    each response after the machine applied it. ``decode`` replaces the codec's response
    decoder (a load generator shares one decoded response between its clients).
    """

    def __init__(
        self,
        machine: SotwClient | DeltaClient,
        stream: ByteStream,
        *,
        follow: bool = True,
        on_response: OnResponse | None = None,
        decode: Callable[[bytes], DiscoveryResponse | DeltaDiscoveryResponse] | None = None,
        max_response_bytes: int = 1 << 30,
    ) -> None:
        self.machine: SotwClient | DeltaClient = machine
        self._stream = stream
        self._delta = isinstance(machine, DeltaClient)
        self._follower = Follower() if follow else None
        self._on_response = on_response
        if decode is None:
            decode = (
                _client_codec.decode_delta_response
                if self._delta
                else _client_codec.decode_response
            )
        self._decode = decode
        self._limit = max_response_bytes

    async def send(self, request: DiscoveryRequest | DeltaDiscoveryRequest) -> None:
        """Encode and write one request the machine produced."""
        if isinstance(request, DeltaDiscoveryRequest):
            data = _client_codec.encode_delta_request(request)
        else:
            data = _client_codec.encode_request(request)
        await self._stream.send(data)

    async def watch(self, type_url: str, names: Sequence[str] | None) -> None:
        """SotW: watch exactly ``names`` of ``type_url`` (``None``: legacy wildcard)."""
        assert isinstance(self.machine, SotwClient)
        await self.send(self.machine.watch(type_url, names))

    async def subscribe(self, type_url: str, names: Sequence[str] = ()) -> None:
        """Delta: subscribe to ``names`` (none on a first request: legacy wildcard)."""
        assert isinstance(self.machine, DeltaClient)
        await self.send(self.machine.subscribe(type_url, names))

    async def unsubscribe(self, type_url: str, names: Sequence[str]) -> None:
        """Delta: unsubscribe from ``names``."""
        assert isinstance(self.machine, DeltaClient)
        await self.send(self.machine.unsubscribe(type_url, names))

    async def run(self) -> None:
        """Apply responses until the server ends the stream; raises :class:`ProtocolError`."""
        while True:
            data = await self._stream.receive()
            if data is None:
                return
            response = self._decode(checked(data, self._limit, "response"))
            answer = self._apply(response)
            await self.send(answer)
            if self._on_response is not None:
                self._on_response(response, answer)
            if self._follower is not None:
                await self._follow(response.type_url)

    def _apply(
        self, response: DiscoveryResponse | DeltaDiscoveryResponse
    ) -> DiscoveryRequest | DeltaDiscoveryRequest:
        machine = self.machine
        if isinstance(machine, SotwClient):
            assert isinstance(response, DiscoveryResponse)
            return machine.receive(response)
        assert isinstance(response, DeltaDiscoveryResponse)
        return machine.receive(response)

    async def _follow(self, type_url: str) -> None:
        assert self._follower is not None
        if not self._follower.refers(type_url):
            return
        changed = self._follower.update(type_url, self.machine.holds(type_url))
        for target, names in changed.items():
            await self._want(target, names)

    async def _want(self, type_url: str, names: frozenset[str]) -> None:
        machine = self.machine
        if isinstance(machine, SotwClient):
            state = machine.type_state(type_url)
            if state is None and not names:
                return  # an empty first request would mean the wildcard
            if state is not None and state.subscription.wildcard:
                return
            await self.send(machine.watch(type_url, sorted(names)))
            return
        delta = machine.type_state(type_url)
        if delta is not None and delta.wildcard:
            return
        current = set(delta.requested) if delta is not None else set()
        if names - current:
            await self.send(machine.subscribe(type_url, sorted(names - current)))
        if current - names:
            await self.send(machine.unsubscribe(type_url, sorted(current - names)))
