"""Feeding caches from what etcd holds under a prefix, one whole revision at a time.

How an [`EtcdSource`][xdscore.etcd.EtcdSource] follows etcd:

* **Load.** One range read of the prefix gives every key at one revision R. The state is
  checked ([`evaluate`][xdscore.etcd.evaluate]: the layout, then
  [`xdscore.analysis.analyze`][xdscore.analysis.analyze] as for a config directory) and applied to
  the caches, or refused. A prefix that holds nothing yet is not a state: the source waits for one.
* **Watch.** Then it watches the prefix from R + 1: etcd sends every later event once, in
  revision order, so there is no gap and no duplicate. etcd never splits a revision across
  watch responses (fragmenting is off), and the events of one response are grouped by
  their ``mod_revision``: a transaction is one revision, applied whole or refused whole.
* **Refusal.** A revision that fails the checks is logged with its reasons and reported;
  the caches keep the last good state. The source still follows etcd: the next revision is
  judged on the whole state it describes, so fixing the problem applies it.
* **etcd down.** A failed read or watch is retried with a jittered exponential backoff
  (100 ms doubling to 5 s); the caches keep serving the last good state meanwhile. The
  watch resumes from the last revision seen + 1.
* **Compaction.** A watch refused because its start revision was compacted re-reads the
  prefix at the current revision, then watches again from there. So does a watch whose
  etcd is at a revision older than the one seen (its data was lost or replaced).

The work of checking a revision runs in a worker thread; applying it to the caches runs on
the event loop, in one step, so no stream ever reads half of a revision.
"""

from __future__ import annotations

import functools
import logging
import random
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from typing import Any

import anyio
import anyio.abc
import anyio.to_thread
import attrs
from prometheus_client import CollectorRegistry, Counter, Gauge

from ..cache._linear import LinearCache
from ..cache._snapshot import Snapshot
from ..cache._snapshot_cache import SnapshotCache
from ..wire._typeurls import type_info
from ._check import Evaluation, evaluate
from ._client import EtcdClient, EtcdError, aetcd, client_errors, describe
from ._layout import DEFAULT_PREFIX, normalize_prefix, parse_key, range_end, range_start
from ._writer import read_state_with_mods

__all__ = ["EtcdSource", "Outcome"]

log = logging.getLogger("xdscore.etcd")

MIN_BACKOFF = 0.1
"""Seconds before the first retry after etcd failed."""
MAX_BACKOFF = 5.0
"""The longest wait between two retries."""

Target = SnapshotCache | LinearCache


@attrs.frozen
class Outcome:
    """What became of one revision: applied to the caches, or refused with ``problems``.

    ``relisted`` says the state came from a range read (at start, after a compaction or a
    reset) rather than from the watch; ``resources`` counts the resources it holds.
    """

    revision: int
    applied: bool
    resources: int
    problems: tuple[str, ...] = ()
    relisted: bool = False

    def __str__(self) -> str:
        if self.applied:
            return f"revision {self.revision}: applied, {self.resources} resource(s)"
        return f"revision {self.revision}: refused, {len(self.problems)} problem(s)"


class _Metrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.revision = Gauge(
            "xdscore_etcd_revision",
            "The etcd revision whose state the caches hold (0 before the first).",
            registry=registry,
        )
        self.revisions = Counter(
            "xdscore_etcd_revisions",
            "Revisions of the prefix judged, by outcome (applied, refused).",
            ["outcome"],
            registry=registry,
        )
        self.relists = Counter(
            "xdscore_etcd_relists",
            "Range reads of the whole prefix, by reason (start, compacted, reset).",
            ["reason"],
            registry=registry,
        )
        self.connected = Gauge(
            "xdscore_etcd_connected", "1 while the watch on etcd is established.", registry=registry
        )
        self.failures = Counter(
            "xdscore_etcd_failures", "Reads and watches of etcd that failed.", registry=registry
        )
        for outcome in ("applied", "refused"):
            self.revisions.labels(outcome)
        for reason in ("start", "compacted", "reset"):
            self.relists.labels(reason)


@attrs.define
class _Answer:
    """One read of the newest revision, shared by every caller that waits for it."""

    done: anyio.Event = attrs.field(factory=anyio.Event)
    value: int | None = None


class _Relist(Exception):
    """The watch cannot go on from the revision seen: read the prefix again."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class EtcdSource:
    """Keeps caches in step with the resources etcd holds under ``prefix``.

    ``cache`` is a [`SnapshotCache`][xdscore.SnapshotCache] (each revision becomes one snapshot for
    group ``key``, authoritative for every registered type), a
    [`LinearCache`][xdscore.LinearCache] (it gets the resources of its type), or several of
    them. ``complete`` says the prefix is the only source of every type, as a config
    directory is: a reference to a resource it lacks refuses the revision. Pass ``False``
    when other sources serve some types; then only references to the types present under
    the prefix are checked.

    Run [`run`][xdscore.etcd.EtcdSource.run] in a task; [`loaded`][xdscore.etcd.EtcdSource.loaded]
    and [`revision`][xdscore.etcd.EtcdSource.revision] say what is served,
    [`wait_loaded`][xdscore.etcd.EtcdSource.wait_loaded] and
    [`wait_for`][xdscore.etcd.EtcdSource.wait_for] wait for it, ``on_outcome`` is called with every
    [`Outcome`][xdscore.etcd.Outcome], and with ``registry`` the source records ``xdscore_etcd_*``
    metrics there. See the module documentation for what happens when etcd is down or compacts, and
    ``docs/etcd.md``.
    """

    def __init__(
        self,
        client: EtcdClient,
        cache: Target | Iterable[Target],
        *,
        prefix: str = DEFAULT_PREFIX,
        key: Hashable = None,
        complete: bool = True,
        on_outcome: Callable[[Outcome], None] | None = None,
        registry: CollectorRegistry | None = None,
        min_backoff: float = MIN_BACKOFF,
        max_backoff: float = MAX_BACKOFF,
    ) -> None:
        self.client = client
        self.prefix = normalize_prefix(prefix)
        self.targets: tuple[Target, ...] = (
            (cache,) if isinstance(cache, SnapshotCache | LinearCache) else tuple(cache)
        )
        if not self.targets:
            raise ValueError("an etcd source needs at least one cache to feed")
        for target in self.targets:
            if not isinstance(target, SnapshotCache | LinearCache):
                raise TypeError(f"cannot feed a {type(target).__qualname__}")
        self.key = key
        self.complete = complete
        self.on_outcome = on_outcome
        self.min_backoff = min_backoff
        self.max_backoff = max_backoff
        self.revision = 0
        """The revision whose state the caches hold; 0 until one is applied."""
        self.seen_revision = 0
        """The newest revision read from etcd, applied or not."""
        self.connected = False
        """Whether the last read or watch of etcd succeeded."""
        self.last: Outcome | None = None
        """The newest outcome."""
        self.relists = 0
        """Range reads of the whole prefix so far (the first included)."""
        self._kvs: dict[bytes, bytes] = {}
        self._mods: dict[bytes, int] = {}
        """Each key's mod revision (the provenance of its resource)."""
        self._changed = anyio.Event()
        self._progress = anyio.Event()
        self._delay = min_backoff
        self._metrics = _Metrics(registry) if registry is not None else None
        self._asking: _Answer | None = None

    def record_metrics(self, registry: CollectorRegistry) -> None:
        """Record the ``xdscore_etcd_*`` metrics in ``registry`` from now on."""
        self._metrics = _Metrics(registry)
        self._metrics.revision.set(self.revision)
        self._metrics.connected.set(1 if self.connected else 0)

    @property
    def loaded(self) -> bool:
        """Whether a revision has been applied (readiness: there is something to serve)."""
        return self.revision > 0

    def changed(self) -> anyio.Event:
        """An event set at the next outcome (take a new one after it fires)."""
        return self._changed

    async def wait_loaded(self) -> Outcome:
        """Wait until a revision has been applied; its outcome."""
        while not self.loaded:
            await self._changed.wait()
        assert self.last is not None
        return self.last

    async def wait_for(self, revision: int) -> Outcome:
        """Wait for the outcome of ``revision`` or of a later one (a revision that wrote
        under the prefix, as every apply does), and return it."""
        while self.last is None or self.last.revision < revision:
            await self._changed.wait()
        return self.last

    async def caught_up(self, timeout: float) -> bool:
        """Wait, at most ``timeout`` seconds, until the source has judged every revision that
        wrote under the prefix before this call (the [`CatchUp`][xdscore.server.CatchUp]
        protocol: give the source to ``XdsServer(catch_up=...)``). False when etcd could not
        be asked in time or the watch did not get there.

        The newest revision is the highest ``mod_revision`` under the prefix (every apply
        writes the marker, so an apply that only deletes counts), read as one key: etcd
        sorts, the reply holds a single key whatever the prefix holds. Callers that arrive
        while a read is on its way share it (a fleet reconnecting at once costs one read).
        """
        with anyio.move_on_after(timeout):
            target = await self._newest_revision()
            if target is None:
                return False
            while self.seen_revision < target:
                await self._progress.wait()
            return True
        return False

    async def _newest_revision(self) -> int | None:
        """The highest ``mod_revision`` under the prefix now; ``None`` if etcd cannot say."""
        pending = self._asking
        if pending is None:
            pending = self._asking = _Answer()
            try:
                pending.value = await self._ask_newest()
            finally:
                self._asking = None
                pending.done.set()
        else:
            await pending.done.wait()
        return pending.value

    async def _ask_newest(self) -> int | None:
        rpc = aetcd().rpc
        request = rpc.RangeRequest(
            key=range_start(self.prefix),
            range_end=range_end(self.prefix),
            limit=1,
            sort_order=rpc.RangeRequest.DESCEND,
            sort_target=rpc.RangeRequest.MOD,
            keys_only=True,
        )
        try:
            await self.client.connect()
            found = await self.client.kvstub.Range(request, metadata=self.client.metadata)
        except client_errors() as exc:
            log.warning(
                "etcd under %s: cannot ask for its revision: %s", self.prefix, describe(exc)
            )
            return None
        return max((int(kv.mod_revision) for kv in found.kvs), default=0)

    # -- following etcd --------------------------------------------------------------

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Follow etcd until cancelled (``task_status`` is reported at once: use
        [`wait_loaded`][xdscore.etcd.EtcdSource.wait_loaded] for readiness)."""
        task_status.started()
        failures: tuple[type[BaseException], ...] = (EtcdError, *client_errors())
        reason: str | None = "start"
        while True:
            try:
                if reason is not None:
                    await self._relist(reason)
                    reason = None
                await self._watch()
            except _Relist as relist:
                reason = relist.reason
            except failures as exc:
                await self._failed(exc)

    async def _failed(self, exc: BaseException) -> None:
        self._set_connected(False)
        if self._metrics is not None:
            self._metrics.failures.inc()
        delay = self._delay * random.uniform(0.8, 1.2)
        self._delay = min(self._delay * 2, self.max_backoff)
        serving = f"still serving revision {self.revision}" if self.loaded else "nothing served yet"
        log.warning(
            "etcd under %s: %s; retrying in %.1f s (%s)",
            self.prefix,
            describe(exc),
            delay,
            serving,
        )
        await anyio.sleep(delay)

    def _set_connected(self, connected: bool) -> None:
        if connected:
            self._delay = self.min_backoff
            if not self.connected:
                log.info(
                    "etcd under %s: connected (revision %d seen)", self.prefix, self.seen_revision
                )
        self.connected = connected
        if self._metrics is not None:
            self._metrics.connected.set(1 if connected else 0)

    async def _relist(self, reason: str) -> None:
        revision, kvs, mods = await read_state_with_mods(self.client, self.prefix)
        self._set_connected(True)
        self.relists += 1
        if self._metrics is not None:
            self._metrics.relists.labels(reason).inc()
        log.info(
            "read %d key(s) under %s at revision %d (%s)", len(kvs), self.prefix, revision, reason
        )
        self._kvs, self._mods = kvs, mods
        self._saw(revision)
        if not kvs and not self.loaded:
            log.info(
                "nothing under %s at revision %d yet; waiting for a revision", self.prefix, revision
            )
            return
        await self._judge(revision, relisted=True)

    async def _watch(self) -> None:
        rpc = aetcd().rpc
        await self.client.connect()
        create = rpc.WatchCreateRequest(
            key=range_start(self.prefix),
            range_end=range_end(self.prefix),
            start_revision=self.seen_revision + 1,
        )
        stub = rpc.WatchStub(self.client.channel)
        call = stub.Watch(
            _requests(rpc.WatchRequest(create_request=create)), metadata=self.client.metadata
        )
        try:
            async for response in call:
                if response.compact_revision:
                    log.warning(
                        "etcd compacted its history up to revision %d, past revision %d the "
                        "watch of %s needed; reading the prefix again",
                        response.compact_revision,
                        self.seen_revision + 1,
                        self.prefix,
                    )
                    raise _Relist("compacted")
                if response.canceled:
                    raise EtcdError(
                        f"etcd cancelled the watch: {response.cancel_reason or 'no reason'}"
                    )
                if response.created:
                    if response.header.revision < self.seen_revision:
                        log.warning(
                            "etcd is at revision %d, before revision %d already seen: its data "
                            "was replaced; reading %s again",
                            response.header.revision,
                            self.seen_revision,
                            self.prefix,
                        )
                        raise _Relist("reset")
                    self._set_connected(True)
                    log.debug("watching %s from revision %d", self.prefix, self.seen_revision + 1)
                for revision, events in _by_revision(response.events):
                    await self._advance(revision, events)
        finally:
            call.cancel()
        raise EtcdError("etcd ended the watch")

    async def _advance(self, revision: int, events: Sequence[Any]) -> None:
        if revision <= self.seen_revision:
            return  # already seen (cannot happen on one watch; kept as a guard)
        relevant = False
        for event in events:
            key = bytes(event.kv.key)
            if event.type == event.DELETE:
                self._kvs.pop(key, None)
                self._mods.pop(key, None)
            else:
                self._kvs[key] = bytes(event.kv.value)
                self._mods[key] = int(event.kv.mod_revision)
            relevant = relevant or not self._reserved(key)
        self._saw(revision)
        if relevant:
            await self._judge(revision)

    def _saw(self, revision: int) -> None:
        self.seen_revision = revision
        progress, self._progress = self._progress, anyio.Event()
        progress.set()

    def _reserved(self, key: bytes) -> bool:
        try:
            return parse_key(self.prefix, key) is None
        except ValueError:
            return False

    # -- judging and applying one revision --------------------------------------------

    async def _judge(self, revision: int, *, relisted: bool = False) -> None:
        kvs = dict(self._kvs)
        mods = {key.decode(errors="replace"): mod for key, mod in self._mods.items()}
        wants_snapshot = any(isinstance(target, SnapshotCache) for target in self.targets)
        try:
            evaluation, snapshot = await anyio.to_thread.run_sync(
                functools.partial(
                    _evaluate, self.prefix, kvs, self.complete, wants_snapshot, mods, revision
                )
            )
        except Exception as exc:  # a bug must not stop the source
            log.exception("checking revision %d under %s failed", revision, self.prefix)
            evaluation, snapshot = Evaluation((), (f"unexpected error: {exc!r}",)), None
        problems = evaluation.problems
        if not evaluation.resources and not problems:
            problems = (f"{self.prefix}: holds no resources; refusing to serve nothing",)
        if problems:
            outcome = Outcome(revision, False, len(evaluation.resources), problems, relisted)
            serving = (
                f"still serving revision {self.revision}" if self.loaded else "nothing served yet"
            )
            listing = "\n".join(f"  - {problem}" for problem in problems)
            log.error(
                "refused revision %d under %s (%d problem(s)); %s\n%s",
                revision,
                self.prefix,
                len(problems),
                serving,
                listing,
            )
        else:
            for warning in evaluation.warnings:
                log.warning("revision %d: %s", revision, warning)
            self._apply(revision, evaluation, snapshot)
            outcome = Outcome(revision, True, len(evaluation.resources), (), relisted)
            log.info(
                "applied revision %d under %s: %s",
                revision,
                self.prefix,
                snapshot if snapshot is not None else f"{len(evaluation.resources)} resource(s)",
            )
        self._report(outcome)

    def _apply(self, revision: int, evaluation: Evaluation, snapshot: Snapshot | None) -> None:
        """Every cache at once, with no await in between: no stream reads half of it."""
        taken: set[str] = set()
        for target in self.targets:
            if isinstance(target, SnapshotCache):
                assert snapshot is not None
                target.set_snapshot(self.key, snapshot)
                taken.update(resource.type_url for resource in evaluation.resources)
            else:
                target.set_resources(
                    [r for r in evaluation.resources if r.type_url == target.type_url]
                )
                taken.add(target.type_url)
        untaken = sorted({r.type_url for r in evaluation.resources} - taken)
        if untaken:
            names = ", ".join(type_info(url).short_name for url in untaken)
            log.warning("revision %d: no cache takes the resources of type %s", revision, names)
        self.revision = revision
        if self._metrics is not None:
            self._metrics.revision.set(revision)

    def _report(self, outcome: Outcome) -> None:
        self.last = outcome
        if self._metrics is not None:
            self._metrics.revisions.labels("applied" if outcome.applied else "refused").inc()
        if self.on_outcome is not None:
            try:
                self.on_outcome(outcome)
            except Exception:
                log.exception("the callback %r raised", self.on_outcome)
        changed, self._changed = self._changed, anyio.Event()
        changed.set()


def _evaluate(
    prefix: str,
    kvs: dict[bytes, bytes],
    complete: bool,
    wants_snapshot: bool,
    mods: dict[str, int],
    revision: int,
) -> tuple[Evaluation, Snapshot | None]:
    """In a worker thread: the checked state, and its snapshot if it is good and wanted
    (each resource's provenance its key and mod revision, labelled with ``revision``)."""
    evaluation = evaluate(prefix, kvs, complete=complete)
    if evaluation.problems or not wants_snapshot:
        return evaluation, None
    return evaluation, evaluation.snapshot(mods=mods, revision=revision, prefix=prefix)


def _by_revision(events: Sequence[Any]) -> Iterator[tuple[int, list[Any]]]:
    """The events of one watch response, grouped by the revision that made them."""
    group: list[Any] = []
    for event in events:
        if group and event.kv.mod_revision != group[0].kv.mod_revision:
            yield group[0].kv.mod_revision, group
            group = []
        group.append(event)
    if group:
        yield group[0].kv.mod_revision, group


async def _requests(create: Any) -> Any:
    """The watch's request stream: the one create request, then nothing until cancelled."""
    yield create
    await anyio.sleep_forever()
