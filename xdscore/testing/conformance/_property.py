"""The property mode: generated request sequences against the live server, checked
against the protocol model, shrunk to a minimal failing sequence.

Hypothesis draws a sequence of client actions (watch or subscribe to names, the wildcard
or nothing; unsubscribe; reject the next response of a type; reconnect; have the
configuration change, where the driver can) over the names the server serves plus one
that does not exist. Each sequence runs on a fresh stream, driven by the library's client
machine. Every response is checked as it arrives, and once the server is quiet the client
must hold exactly what the model says:

* a nonce, unique on the stream; resources of the response's type; no name twice (and,
  over Delta, none both sent and removed) (invariants 4, 5, 22, 24);
* only types the client asked for, and only names its subscription wanted at some point
  since the previous response of the type, a wildcard wanting any (15, 16, 19);
* nothing the client rejected sent again until the configuration or the subscription
  changes (12);
* once quiet, for every type not left rejected: the client holds every resource its
  subscription wants that the server serves, with the content the server serves, and
  nothing else; over Delta, no name unsubscribed under the wildcard left unanswered
  (9, 17, 18, 20, 21, 28, 30, 31).

A failure is shrunk by Hypothesis to the shortest sequence that still fails; the result
shows that sequence and the trace of its last run.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import anyio
import anyio.from_thread
import anyio.to_thread
import attrs

from ...protocol._delta_client import DeltaClientTypeState
from ...protocol._subscription import WILDCARD
from ...wire._records import DeltaDiscoveryResponse, DiscoveryResponse
from ...wire._typeurls import CLUSTER, ENDPOINT, LISTENER, ROUTE, type_info
from ._case import Case, CaseContext
from ._checks import missing_name
from ._session import DeltaSession, SotwSession
from ._trace import Trace, short_type
from ._verdicts import CaseFailed, CaseSkipped
from ._world import World

__all__ = ["PROPERTY_CASES"]

TYPES = (CLUSTER, ENDPOINT, LISTENER, ROUTE)
STEP_WINDOW = 0.15
"""Seconds to take responses after each action before the next."""


@attrs.frozen
class Watch:
    """SotW: watch exactly ``names`` (``None``: the legacy wildcard)."""

    type_url: str
    names: tuple[str, ...] | None

    def __str__(self) -> str:
        shown = "legacy wildcard" if self.names is None else list(self.names)
        return f"watch {short_type(self.type_url)} {shown}"


@attrs.frozen
class Subscribe:
    """Delta: subscribe to ``names`` (none on a first LDS/CDS request: legacy wildcard)."""

    type_url: str
    names: tuple[str, ...]

    def __str__(self) -> str:
        return f"subscribe {short_type(self.type_url)} {list(self.names)}"


@attrs.frozen
class Unsubscribe:
    """Delta: unsubscribe from ``names``."""

    type_url: str
    names: tuple[str, ...]

    def __str__(self) -> str:
        return f"unsubscribe {short_type(self.type_url)} {list(self.names)}"


@attrs.frozen
class Reject:
    """NACK the next response of the type that carries resources."""

    type_url: str

    def __str__(self) -> str:
        return f"reject the next {short_type(self.type_url)} response"


@attrs.frozen
class Reconnect:
    """End the stream; the client machine opens a new one and resumes."""

    def __str__(self) -> str:
        return "reconnect"


@attrs.frozen
class Change:
    """Every endpoint set changes (where the driver can)."""

    def __str__(self) -> str:
        return "change every endpoint set"


Action = Watch | Subscribe | Unsubscribe | Reject | Reconnect | Change
Response = DiscoveryResponse | DeltaDiscoveryResponse


def _strategy(served: Mapping[str, list[str]], *, delta: bool, change: bool) -> Any:
    """Hypothesis's strategy for one sequence of actions."""
    from hypothesis import strategies as st

    def names(type_url: str, wildcard: bool) -> Any:
        pool = [*served[type_url], missing_name(served[type_url])]
        if wildcard and type_info(type_url).wildcard_capable:
            pool.append(WILDCARD)
        return st.lists(st.sampled_from(pool), unique=True, max_size=3).map(
            lambda found: tuple(sorted(found))
        )

    asks: Any
    if delta:
        asks = st.sampled_from(TYPES).flatmap(
            lambda t: st.one_of(
                st.builds(Subscribe, st.just(t), names(t, True)),
                st.builds(Unsubscribe, st.just(t), names(t, True)),
            )
        )
    else:
        asks = st.sampled_from(TYPES).flatmap(
            lambda t: st.builds(
                Watch,
                st.just(t),
                st.one_of(st.none(), names(t, True))
                if type_info(t).wildcard_capable
                else names(t, False),
            )
        )
    others = [st.builds(Reject, st.sampled_from(TYPES)), st.just(Reconnect())]
    if change:
        others.append(st.just(Change()))
    action = st.one_of(asks, asks, *others)
    return st.lists(action, min_size=1, max_size=8)


class _Observer:
    """The model's view of one stream: what may arrive, what must not."""

    def __init__(self, delta: bool) -> None:
        self.delta = delta
        self.nonces: set[str] = set()
        self.window: dict[str, set[str]] = {}
        """Per type, every name wanted since its previous response (``*``: any)."""
        self.rejected: dict[str, set[tuple[str, str]]] = {}
        """Per type, what was rejected: (version, content key) or (name, version) pairs."""
        self.pending: set[str] = set()
        """Types whose next response with resources is to be rejected."""
        self.unsettled: set[str] = set()
        """Types left rejected: not compared once quiet."""

    def asked(self, type_url: str, names: Sequence[str], wanted: set[str]) -> None:
        """The client asked for ``names`` of ``type_url`` and now wants ``wanted``."""
        self.window.setdefault(type_url, set()).update(wanted)
        if not self.delta:
            self.rejected.pop(type_url, None)
        else:
            kept = self.rejected.get(type_url, set())
            self.rejected[type_url] = {p for p in kept if p[0] not in names}

    def changed(self) -> None:
        self.rejected.clear()

    def check(self, response: Response, subscribed: bool) -> None:
        kind = short_type(response.type_url)
        where = f"the {kind} response with nonce {response.nonce!r}"
        _require(bool(response.nonce), f"a {kind} response has no nonce")
        _require(response.nonce not in self.nonces, f"nonce {response.nonce!r} was sent twice")
        self.nonces.add(response.nonce)
        _require(subscribed, f"{where} is for a type the client never asked for")
        seen: set[str] = set()
        window = self.window.get(response.type_url, set())
        for resource in response.resources:
            _require(
                resource.type_url == response.type_url,
                f"{where} carries {resource.name!r} of type {resource.type_url}",
            )
            _require(resource.name not in seen, f"{where} names {resource.name!r} twice")
            seen.add(resource.name)
            _require(
                WILDCARD in window or resource.name in window,
                f"{where} sends {resource.name!r}, which the client did not ask for",
            )
        if isinstance(response, DeltaDiscoveryResponse):
            both = seen & set(response.removed_resources)
            _require(not both, f"{where} both sends and removes {sorted(both)}")
        again = self._rejected_again(response)
        _require(again is None, f"{where} sends again what the client rejected: {again}")

    def _rejected_again(self, response: Response) -> str | None:
        rejected = self.rejected.get(response.type_url, set())
        if isinstance(response, DiscoveryResponse):
            if (response.version_info, "") in rejected or ("", _content(response)) in rejected:
                return f"version {response.version_info!r}"
            return None
        pairs = {(r.name, r.version) for r in response.resources if not r.name_only}
        found = pairs & rejected
        return str(sorted(found)) if found else None

    def rejecting(self, response: Response) -> None:
        memory = self.rejected.setdefault(response.type_url, set())
        if isinstance(response, DiscoveryResponse):
            memory.update({(response.version_info, ""), ("", _content(response))})
        else:
            memory.update((r.name, r.version) for r in response.resources if not r.name_only)
        self.unsettled.add(response.type_url)


def _content(response: DiscoveryResponse) -> str:
    return repr(sorted((r.name, r.body) for r in response.resources))


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise CaseFailed(message)


class _Run:
    """One sequence of actions on the live server."""

    def __init__(self, ctx: CaseContext, delta: bool) -> None:
        self.ctx = ctx
        self.delta = delta
        self.stack = contextlib.AsyncExitStack()
        self.session: SotwSession | DeltaSession | None = None
        self.observer = _Observer(delta)

    async def _open(self, resume: SotwSession | DeltaSession | None) -> None:
        ctx = self.ctx
        if self.delta:
            self.session = await self.stack.enter_async_context(
                ctx.delta(resume=resume if isinstance(resume, DeltaSession) else None)
            )
        else:
            self.session = await self.stack.enter_async_context(
                ctx.sotw(resume=resume if isinstance(resume, SotwSession) else None)
            )
        self.observer = _Observer(self.delta)

    async def run(self, actions: Sequence[Action]) -> None:
        try:
            await self._open(None)
            for action in actions:
                self.ctx.note(f"action: {action}")
                await self._do(action)
                await self._pump(STEP_WINDOW)
            await self._pump(self.ctx.quiet)
            await self._converged()
        finally:
            await self.stack.aclose()

    async def _do(self, action: Action) -> None:
        s = self.session
        assert s is not None
        if isinstance(action, Watch):
            assert isinstance(s, SotwSession)
            if action.names is not None or type_info(action.type_url).wildcard_capable:
                await s.watch(action.type_url, action.names)
                wanted = _wanted_now(s, action.type_url)
                self.observer.asked(action.type_url, action.names or (), wanted)
        elif isinstance(action, Subscribe):
            assert isinstance(s, DeltaSession)
            await s.subscribe(action.type_url, action.names)
            wanted = _wanted_now(s, action.type_url)
            self.observer.asked(action.type_url, action.names, wanted)
        elif isinstance(action, Unsubscribe):
            assert isinstance(s, DeltaSession)
            if s.client.type_state(action.type_url) is not None:
                await s.unsubscribe(action.type_url, action.names)
        elif isinstance(action, Reject):
            self.observer.pending.add(action.type_url)
        elif isinstance(action, Reconnect):
            await self.stack.aclose()
            self.stack = contextlib.AsyncExitStack()
            await self._open(s)
            resumed: Any = self.session  # one protocol's session, its requests its own
            for request in resumed.client.reconnect():
                self.observer.window[request.type_url] = _wanted_now(resumed, request.type_url)
                await resumed.send(request)
        elif isinstance(action, Change):
            await self.ctx.change(World.bumped, "every endpoint set changes")
            self.observer.changed()

    async def _pump(self, window: float) -> None:
        s: Any = self.session  # one protocol's session: its responses answered in kind
        assert s is not None
        while (response := await s.maybe_response(within=window)) is not None:
            subscribed = s.client.type_state(response.type_url) is not None
            self.observer.check(response, subscribed)
            pending = self.observer.pending
            if response.type_url in pending and any(not r.name_only for r in response.resources):
                pending.discard(response.type_url)
                self.observer.rejecting(response)
                await s.nack(response)
            else:
                if not self.delta:
                    self.observer.unsettled.discard(response.type_url)
                await s.ack(response)
            self.observer.window[response.type_url] = _wanted_now(s, response.type_url)

    async def _converged(self) -> None:
        s = self.session
        assert s is not None
        inventory = await self.ctx.inventory()
        for type_url in s.client.type_urls():
            if type_url in self.observer.unsettled:
                continue
            served = inventory.resources.get(type_url, {})
            held = s.client.holds(type_url)
            state = s.client.type_state(type_url)
            kind = short_type(type_url)
            wanted: Callable[[str], bool]
            if isinstance(state, DeltaClientTypeState):
                _require(
                    not state.ambiguous,
                    f"{sorted(state.ambiguous)} unsubscribed under the wildcard, never answered",
                )
                wanted = (lambda _: True) if state.wildcard else state.requested.__contains__
            else:
                assert state is not None
                wanted = state.subscription.wants
            expected = sorted(name for name in served if wanted(name))
            _require(
                sorted(held) == expected,
                f"once quiet, the client holds {kind} {sorted(held)}; it wants and the server "
                f"serves {expected}",
            )
            stale = [name for name in expected if held[name].body != served[name].body]
            _require(not stale, f"once quiet, the client holds {kind} {stale} at old content")


def _wanted_now(s: SotwSession | DeltaSession, type_url: str) -> set[str]:
    state = s.client.type_state(type_url)
    if state is None:
        return set()
    if isinstance(state, DeltaClientTypeState):
        names = set(state.requested)
        return names | {WILDCARD} if state.wildcard else names
    subscription = state.subscription
    return set(subscription.names) | ({WILDCARD} if subscription.wildcard else set())


async def _search(ctx: CaseContext, *, delta: bool, examples: int, seed: int | None) -> None:
    try:
        import hypothesis
    except ImportError:
        raise CaseSkipped("the property mode needs hypothesis (pip install hypothesis)") from None
    inventory = await ctx.inventory()
    served = {t: inventory.names(t) for t in TYPES}
    if not any(served.values()):
        raise CaseSkipped(
            f"the server serves nothing to generate requests for ({inventory.describe()})"
        )
    strategy = _strategy(served, delta=delta, change=ctx.can_change(World.bumped))
    original = ctx.trace
    failures: list[tuple[CaseFailed, Trace, Sequence[Action]]] = []
    count = 0

    async def example(actions: Sequence[Action]) -> None:
        ctx.trace = Trace()
        try:
            await _Run(ctx, delta).run(actions)
        except CaseFailed as exc:
            failures.append((exc, ctx.trace, actions))
            raise

    def search() -> None:
        nonlocal count

        @hypothesis.settings(
            max_examples=examples,
            deadline=None,
            database=None,
            derandomize=seed is None,
            suppress_health_check=list(hypothesis.HealthCheck),
            phases=[hypothesis.Phase.generate, hypothesis.Phase.shrink],
            report_multiple_bugs=False,
        )
        @hypothesis.given(strategy)
        def holds(actions: Sequence[Action]) -> None:
            nonlocal count
            hypothesis.assume(not cancelled.is_set())  # the case ran out of time
            count += 1
            anyio.from_thread.run(example, actions)

        if seed is not None:
            hypothesis.seed(seed)(holds)()
        else:
            holds()

    cancelled = threading.Event()
    try:
        await anyio.to_thread.run_sync(search, abandon_on_cancel=True)
    except anyio.get_cancelled_exc_class():
        cancelled.set()
        raise
    except CaseFailed:
        error, trace, actions = failures[-1]
        original.lines[:] = trace.lines
        steps = "; ".join(str(a) for a in actions)
        raise CaseFailed(
            f"{error} (the shortest sequence found, after {count} runs: {steps})"
        ) from None
    finally:
        ctx.trace = original
    ctx.note(f"{count} generated sequences held")


async def _sotw(ctx: CaseContext) -> None:
    settings = ctx.settings
    await _search(
        ctx, delta=False, examples=settings.property_examples, seed=settings.property_seed
    )


async def _delta(ctx: CaseContext) -> None:
    settings = ctx.settings
    await _search(ctx, delta=True, examples=settings.property_examples, seed=settings.property_seed)


PROPERTY_CLAUSE = (
    "Any sequence of requests a client may send is answered as the protocol model says "
    "(see the module docstring of xdscore.testing.conformance._property)."
)

PROPERTY_CASES = [
    Case(
        "property/sotw",
        "generated SotW request sequences hold the protocol model",
        PROPERTY_CLAUSE,
        (4, 5, 9, 12, 15, 16, 17, 18, 19, 20, 21, 22),
        _sotw,
        per_example=True,
    ),
    Case(
        "property/delta",
        "generated Delta request sequences hold the protocol model",
        PROPERTY_CLAUSE,
        (4, 9, 12, 18, 22, 24, 27, 28, 29, 30, 31),
        _delta,
        per_example=True,
    ),
]
"""The property mode's two cases, run with ``--property``."""
