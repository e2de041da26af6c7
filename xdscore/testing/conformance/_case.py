"""Cases, their registry, and what a case is given to run: a `CaseContext`.

A `Case` is named after the clause it checks (``sotw/nack/no-resend``), carries
that clause in the suite's words with where the spec says it, and the numbers of the
invariants of ``docs/protocol.md`` it checks. Its body is an async function of a
`CaseContext`, through which it opens streams (`CaseContext.sotw`,
`CaseContext.delta`), reads what the server serves (`CaseContext.inventory`)
and changes it (`CaseContext.change`, a skip when the driver cannot). It passes by
returning, fails by raising `CaseFailed` with the evidence, and is skipped by
raising `CaseSkipped`.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from typing import Any, TypeVar

import anyio
import attrs

from ...protocol._delta_client import DeltaClient
from ...protocol._sotw_client import SotwClient
from ...wire._node import make_node
from ...wire._records import Node
from ._channel import ADS_DELTA, ADS_SOTW, Channel, RawStream
from ._drivers import Driver, DriverError
from ._inventory import USER_AGENT, Inventory, discover, probe_node
from ._session import DeltaSession, Rejector, SotwSession
from ._trace import Trace
from ._verdicts import CaseFailed, CaseSkipped
from ._world import World

__all__ = ["CASES", "Case", "CaseContext", "Settings", "case"]

_S = TypeVar("_S", SotwSession, DeltaSession)


@attrs.frozen
class Settings:
    """The suite's clocks: ``quiet``, how long silence must last to count as silence;
    ``response_timeout``, how long a response that must come may take; ``case_timeout``,
    how long one case may take in all. ``node_id`` and ``node_cluster``: what every stream
    presents, for a server that serves only known nodes (default: a new id a stream).
    ``property_examples``: sequences the property mode tries (and ``property_seed``, its
    random seed; ``None``: the same sequences every run)."""

    quiet: float = 0.5
    response_timeout: float = 5.0
    case_timeout: float = 30.0
    node_id: str | None = None
    node_cluster: str = ""
    property_examples: int = 15
    property_seed: int | None = None


@attrs.frozen
class Case:
    """One check of one clause (see the module docstring)."""

    id: str
    title: str
    clause: str
    invariants: tuple[int, ...]
    run: Callable[[CaseContext], Awaitable[None]] = attrs.field(repr=False, eq=False)
    per_example: bool = False
    """The case runs many examples: its timeout is the per-case one for each."""

    @property
    def protocol(self) -> str:
        return self.id.split("/", 1)[0]


CASES: list[Case] = []
"""Every case, in the order they run."""


def case(
    id: str, title: str, *, clause: str, invariants: Sequence[int]
) -> Callable[[Callable[[CaseContext], Awaitable[None]]], Callable[[CaseContext], Awaitable[None]]]:
    """Register the decorated function as a case."""

    def register(
        function: Callable[[CaseContext], Awaitable[None]],
    ) -> Callable[[CaseContext], Awaitable[None]]:
        if any(known.id == id for known in CASES):
            raise ValueError(f"two cases are named {id!r}")
        CASES.append(Case(id, title, clause, tuple(invariants), function))
        return function

    return register


@contextlib.contextmanager
def single_errors() -> Iterator[None]:
    """Let a failure, a skip or an error raised inside a task group out as itself."""
    try:
        yield
    except BaseExceptionGroup as group:
        leaves = list(_leaves(group))
        if len(leaves) == 1 and isinstance(leaves[0], Exception):
            raise leaves[0] from None
        raise


def _leaves(error: BaseException) -> Iterator[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        for inner in error.exceptions:
            yield from _leaves(inner)
    else:
        yield error


class Suite:
    """What a run shares between cases: the driver, the connection, the settings, the
    inventory of the current world."""

    def __init__(self, driver: Driver, settings: Settings) -> None:
        self.driver = driver
        self.settings = settings
        self._channel: Channel | None = None
        self._inventory: Inventory | None = None
        self._labels = itertools.count(1)

    def channel(self) -> Channel:
        if self._channel is None:
            self._channel = self.driver.channel()
        return self._channel

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()
            self._channel = None

    def forget(self) -> None:
        """The configuration changed: discover it again when asked."""
        self._inventory = None

    async def inventory(self) -> Inventory:
        if self._inventory is None:
            settings = self.settings
            self._inventory = await discover(
                self.channel(),
                probe_node(settings.node_id, settings.node_cluster),
                quiet=min(settings.quiet, 0.3),
                response_timeout=settings.response_timeout,
            )
        return self._inventory


class CaseContext:
    """What a case runs with (see the module docstring)."""

    def __init__(self, suite: Suite, case: Case, trace: Trace) -> None:
        self._suite = suite
        self.case = case
        self.trace = trace
        self.settings = suite.settings
        self.partial: str | None = None
        """Set by `partly`."""
        self._streams = itertools.count(1)

    @property
    def quiet(self) -> float:
        return self.settings.quiet

    @property
    def world(self) -> World | None:
        """What the driver last made the server serve (``None``: unknown, passive)."""
        return self._suite.driver.world

    async def inventory(self) -> Inventory:
        """What a client like Envoy is served now (discovered once per configuration)."""
        return await self._suite.inventory()

    async def names(self, which: str, at_least: int) -> list[str]:
        """At least ``at_least`` served names of ``which`` (``clusters``, ``endpoints``,
        ``listeners``, ``routes``); a skip saying so when the server serves fewer."""
        inventory = await self.inventory()
        found: list[str] = getattr(inventory, which)
        if len(found) < at_least:
            raise CaseSkipped(
                f"the case needs {at_least} {which}; the server serves {len(found)} "
                f"({inventory.describe()})"
            )
        return found

    def node(self, *, user_agent: str = USER_AGENT, features: Sequence[str] = ()) -> Node:
        """A node for a new stream: its own id unless the settings fix one."""
        settings = self.settings
        return make_node(
            id=settings.node_id or f"xdscore-conformance/{self.case.id}/{next(self._streams)}",
            cluster=settings.node_cluster,
            user_agent_name=user_agent,
            client_features=tuple(features),
        )

    def note(self, text: str) -> None:
        self.trace.note("case", text)

    def cannot(self, make: Callable[[World], World]) -> str | None:
        """Why the driver cannot make the server serve ``make(current world)`` (``None``:
        it can)."""
        driver = self._suite.driver
        current = driver.world
        return driver.cannot(make(current if current is not None else World()))

    def can_change(self, make: Callable[[World], World]) -> bool:
        """Whether the driver can make the server serve ``make(current world)``."""
        return self.cannot(make) is None

    def require_change(self, make: Callable[[World], World]) -> Callable[[World], World]:
        """``make``, once it is known that the driver can apply it; a skip saying why not."""
        reason = self.cannot(make)
        if reason is not None:
            raise CaseSkipped(f"the case needs a change of the configuration: {reason}")
        return make

    def partly(self, reason: str) -> None:
        """Say that the case checked only part of its clause, and why (shown with the result)."""
        self.partial = reason
        self.note(f"checked in part: {reason}")

    async def change(self, make: Callable[[World], World], why: str) -> World:
        """Have the server serve ``make(current world)``; a skip if the driver cannot."""
        driver = self._suite.driver
        current = driver.world
        if current is None:
            raise CaseSkipped(
                f"the case needs the configuration changed ({why}): {driver.cannot(World())}"
            )
        target = make(current)
        reason = driver.cannot(target)
        if reason is not None:
            raise CaseSkipped(f"the case needs the configuration changed ({why}): {reason}")
        self.note(f"configuration change ({why}): {target.describe()}")
        self._suite.forget()
        try:
            await driver.apply(target)
        except DriverError as exc:
            raise CaseFailed(f"the driver could not apply the change ({why}): {exc}") from exc
        self.note("the change is served")
        return target

    @contextlib.asynccontextmanager
    async def sotw(
        self,
        *,
        node: Node | None = None,
        path: str = ADS_SOTW,
        resume: SotwSession | None = None,
        node_once: bool = False,
    ) -> AsyncIterator[SotwSession]:
        """A State-of-the-World stream (ADS unless ``path``); ``resume`` carries over that
        session's client machine (for a reconnect)."""
        if resume is not None:
            client, rejector = resume.client, resume.rejector
        else:
            rejector = Rejector()
            client = SotwClient(
                node=node or self.node(), validate=rejector, node_on_first_request_only=node_once
            )
        label = f"sotw#{next(self._streams)}"
        async with self._stream(
            path,
            lambda raw: SotwSession(label, raw, self.trace, client, rejector, **self._clocks(path)),
        ) as session:
            yield session

    @contextlib.asynccontextmanager
    async def delta(
        self,
        *,
        node: Node | None = None,
        path: str = ADS_DELTA,
        resume: DeltaSession | None = None,
        node_once: bool = False,
    ) -> AsyncIterator[DeltaSession]:
        """A Delta stream (ADS unless ``path``); ``resume`` carries over that session's client
        machine (for a reconnect)."""
        if resume is not None:
            client, rejector = resume.client, resume.rejector
        else:
            rejector = Rejector()
            client = DeltaClient(
                node=node or self.node(), validate=rejector, node_on_first_request_only=node_once
            )
        label = f"delta#{next(self._streams)}"
        async with self._stream(
            path,
            lambda raw: DeltaSession(
                label, raw, self.trace, client, rejector, **self._clocks(path)
            ),
        ) as session:
            yield session

    def _clocks(self, path: str) -> dict[str, Any]:
        settings = self.settings
        return {
            "response_timeout": settings.response_timeout,
            "quiet": settings.quiet,
            "path": path,
        }

    @contextlib.asynccontextmanager
    async def _stream(self, path: str, make: Callable[[RawStream], _S]) -> AsyncIterator[_S]:
        """A call to ``path`` on the suite's connection, its session reading in a task of
        its own until the block ends."""
        with single_errors():
            async with (
                self._suite.channel().stream(path) as raw,
                anyio.create_task_group() as group,
            ):
                session = make(raw)
                self.trace.note(session.label, f"stream opened: {path}")
                group.start_soon(session.read_forever)
                try:
                    yield session
                finally:
                    group.cancel_scope.cancel()
