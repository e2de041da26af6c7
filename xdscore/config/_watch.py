"""Keeping a cache in step with a config directory, reloading on change.

A watcher first loads the directory as a whole (any problem refuses it), then reloads it on
every change. A reload:

1. starts once the changes have been quiet for ``quiet_ms`` (at most ``max_delay_ms`` after
   the first), and no changed file is still held open by a writer (:mod:`._writers`; for
   at most ``max_delay_ms`` too);
2. reads the files in a thread until two reads ``quiet_ms`` apart agree, a file still held
   open for writing being taken as not yet there (its bytes unused);
3. stops there if the files are those it last applied;
4. loads them in a child process (:mod:`._process`), file by file (:mod:`._assemble`): a
   file with a problem of its own is refused alone and keeps its last good version;
5. applies the result, unless a newer reload finished first.

How reloads relate to each other:

* each has a number, in the order they start; a new one starts at once, whatever older ones
  are still doing;
* the result of a reload is used only if no newer reload has finished before it; once one
  finishes (applied, refused, or unchanged), every older one still running is abandoned;
* a reload still running after ``reload_timeout`` seconds is abandoned and reported as a
  failure; at most :data:`MAX_RELOADS` run at once, and starting one more abandons the
  oldest;
* abandoning a reload kills its load's process at once (or stops its reading thread at its
  next wait between reads); nothing of it is waited for.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Hashable
from functools import partial
from pathlib import Path
from typing import TypeVar

import anyio
import anyio.abc
import anyio.to_thread
import attrs
import watchfiles

from ..cache._snapshot import Snapshot
from ..cache._snapshot_cache import SnapshotCache
from ._assemble import Assembly, log_warnings
from ._loader import (
    DEFAULT_MAX_CONFIG_BYTES,
    DEFAULT_MAX_FILE_BYTES,
    SUFFIXES,
    ConfigError,
    DirectoryData,
    Problem,
    read_files,
)
from ._process import LoaderFailed, load_in_process, warm_loader
from ._writers import WriteTracker

__all__ = [
    "DEFAULT_RELOAD_TIMEOUT",
    "MAX_READS",
    "MAX_RELOADS",
    "load_directory_async",
    "watch_directory",
]

DEFAULT_RELOAD_TIMEOUT = 60.0
"""Seconds a load may take before it is abandoned."""
MAX_READS = 5
"""Reads of a directory whose files keep changing before a reload gives up."""
MAX_RELOADS = 2
"""Reloads running at once; starting one more abandons the oldest."""
HELD = (
    "still open for writing by another process (written, and not closed since): it is read "
    "once its writer closes it"
)
"""The problem of a file another process is still writing."""

log = logging.getLogger("xdscore.config")

_T = TypeVar("_T")


def _relevant(change: watchfiles.Change | str, path: str) -> bool:
    name = Path(path).name
    # "..data" is the symlink Kubernetes swaps to update a mounted ConfigMap at once.
    return name.startswith("..") or (not name.startswith(".") and name.endswith(SUFFIXES))


class _Stopped(Exception):
    """A reload's reading thread was told to stop (its reload was abandoned)."""


@attrs.frozen
class _Limits:
    max_file_bytes: int
    max_config_bytes: int


def _read(directory: Path, limits: _Limits, writers: WriteTracker | None) -> DirectoryData:
    """The directory's files, those another process still holds open for writing marked."""
    contents = read_files(
        directory,
        max_file_bytes=limits.max_file_bytes,
        max_config_bytes=limits.max_config_bytes,
    )
    if writers is None:
        return contents
    held = writers.held(file.path for file in contents.files if file.data is not None)
    return contents.holding(dict.fromkeys(held, HELD))


def _settled(
    directory: Path,
    limits: _Limits,
    quiet: float,
    stop: threading.Event,
    label: str,
    writers: WriteTracker | None,
) -> DirectoryData:
    """The directory's files once two reads ``quiet`` seconds apart agree (in a thread)."""
    contents = _read(directory, limits, writers)
    for attempt in range(2, MAX_READS + 1):
        if contents.over_limit:
            return contents  # refused whatever a second read finds
        if stop.wait(quiet):
            raise _Stopped
        again = _read(directory, limits, writers)
        if again.digest == contents.digest:
            return again
        contents = again
        if attempt < MAX_READS:
            log.info(
                "%s: %s changed while being read (read %d of at most %d); reading again in %d ms",
                label,
                directory,
                attempt,
                MAX_READS,
                round(quiet * 1000),
            )
    if contents.over_limit:
        return contents
    raise ConfigError(
        [
            Problem(
                str(directory),
                f"the files kept changing: {MAX_READS} reads {round(quiet * 1000)} ms apart "
                "all differed, so none was loaded",
            )
        ]
    )


def _timeout_error(directory: Path, timeout: float) -> ConfigError:
    return ConfigError(
        [
            Problem(
                str(directory),
                f"loading took longer than the reload timeout of {timeout:g} s (raise it "
                "with --reload-timeout, or reload_timeout=); abandoned",
            )
        ]
    )


def _failure(directory: Path, exc: LoaderFailed) -> ConfigError:
    return ConfigError([Problem(str(directory), str(exc).splitlines()[0])])


async def load_directory_async(
    directory: str | Path,
    *,
    quiet_ms: int = 300,
    timeout: float = DEFAULT_RELOAD_TIMEOUT,
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
    max_config_bytes: int = DEFAULT_MAX_CONFIG_BYTES,
) -> Snapshot:
    """:func:`~xdscore.config.load_directory` off the event loop, for a directory that may
    be being written: the files are read in a worker thread until two reads ``quiet_ms``
    apart agree (at most :data:`MAX_READS` reads), and what was read is loaded in a child
    process.

    Raises :class:`ConfigError` when the directory is refused, when its files kept
    changing, or when reading and loading took longer than ``timeout`` seconds (the child
    process is then killed). Starting the loader processes, once per process, is not
    counted in ``timeout``.
    """
    root = Path(directory)
    await warm_loader()
    stop = threading.Event()
    limits = _Limits(max_file_bytes, max_config_bytes)
    try:
        with anyio.move_on_after(timeout):
            contents = await anyio.to_thread.run_sync(
                partial(_settled, root, limits, quiet_ms / 1000, stop, "loading", None),
                abandon_on_cancel=True,
            )
            try:
                assembly = await load_in_process(contents, None)
            except LoaderFailed as exc:
                log.error("loading %s failed: %s", root, exc)
                raise _failure(root, exc) from None
            log_warnings(assembly.warnings)
            return await anyio.to_thread.run_sync(assembly.snapshot)
    finally:
        stop.set()
    raise _timeout_error(root, timeout)


@attrs.define(eq=False)
class _Running:
    scope: anyio.CancelScope
    stop: threading.Event = attrs.field(factory=threading.Event)
    why: str = ""


@attrs.frozen
class _Loaded:
    label: str
    contents: DirectoryData
    assembly: Assembly
    snapshot: Snapshot


class _Unchanged:
    """The files are those of the snapshot this watcher last applied."""


_UNCHANGED = _Unchanged()


def _label(number: int) -> str:
    return f"reload #{number}" if number else "the first load"


def _good(loaded: _Loaded, previous: dict[Path, bytes]) -> dict[Path, bytes]:
    """The bytes each file has as served once ``loaded`` is: its own, or for a file refused
    alone, those it had (a file that never had good bytes has none)."""
    refusals = {refusal.path: refusal for refusal in loaded.assembly.refused}
    good: dict[Path, bytes] = {}
    for file in loaded.contents.files:
        refusal = refusals.get(file.path)
        if refusal is None and file.data is not None:
            good[file.path] = file.data
        elif refusal is not None and refusal.kept:
            good[file.path] = previous[file.path]
    return good


def _same(one: Snapshot, other: Snapshot) -> bool:
    """Whether the two snapshots serve the same resources (names, versions, aliases, TTLs)."""
    return one.type_urls == other.type_urls and all(
        one.resources(type_url) == other.resources(type_url) for type_url in one.type_urls
    )


@attrs.define(eq=False)
class _Reloads:
    """The loads of one watched directory; the newest result that finished wins."""

    directory: Path
    cache: SnapshotCache
    key: Hashable
    limits: _Limits
    quiet: float
    timeout: float
    on_applied: Callable[[Snapshot], None] | None
    on_refused: Callable[[ConfigError], None] | None
    writers: WriteTracker | None
    group: anyio.abc.TaskGroup | None = None
    """Where reloads run, once the first load is done."""
    started: int = -1
    """The number of the newest load started: 0 is the first load, then reloads."""
    finished: int = -1
    """The number of the newest load that finished."""
    served: str | None = None
    """The digest of the files this watcher last applied."""
    good: dict[Path, bytes] | None = None
    """The bytes each file had when last applied (``None`` until a load applied: until
    then, a reload loads the directory as a whole)."""
    running: dict[int, _Running] = attrs.field(factory=dict)

    async def first(self) -> Snapshot | ConfigError:
        """The first load, as a whole: the snapshot it serves, or why it was refused (not
        logged: the caller reports it)."""
        self.started = 0
        running = _Running(anyio.CancelScope())
        self.running[0] = running
        log.info("loading %s", self.directory)
        outcome = await self._attempt(0, running, force=True)
        if isinstance(outcome, _Loaded):
            return self._apply(outcome)
        if isinstance(outcome, ConfigError):
            return outcome
        return _timeout_error(self.directory, self.timeout)  # (forced: never unchanged)

    def start(self, reason: str, *, force: bool = False) -> None:
        """Start a reload now; ``force`` loads even files identical to those of the
        snapshot being served."""
        self.started += 1
        number = self.started
        while len(self.running) >= MAX_RELOADS:
            oldest = min(self.running)
            self._abandon(oldest, f"more than {MAX_RELOADS} reloads at once (#{number} started)")
        log.info("reload #%d of %s started: %s", number, self.directory, reason)
        running = _Running(anyio.CancelScope())
        self.running[number] = running
        assert self.group is not None, "reloads start after the first load"
        self.group.start_soon(self._reload, number, running, force)

    def _abandon(self, number: int, why: str) -> None:
        running = self.running.pop(number)
        running.why = why
        running.stop.set()
        running.scope.cancel()

    async def _reload(self, number: int, running: _Running, force: bool) -> None:
        label = f"reload #{number}"
        outcome = await self._attempt(number, running, force)
        if running.scope.cancelled_caught or running.why:
            return
        if outcome is None:  # past the reload timeout
            if number < self.finished:
                log.info("%s abandoned at the reload timeout; a newer reload finished", label)
            else:
                self.refused(label, _timeout_error(self.directory, self.timeout))
            return
        if number < self.finished:
            log.info("%s discarded: reload #%d finished first", label, self.finished)
            return
        self.finished = number
        for older in [n for n in self.running if n < number]:
            self._abandon(older, f"{label} finished first")
        if isinstance(outcome, ConfigError):
            self.refused(label, outcome)
        elif isinstance(outcome, _Loaded):
            self._apply(outcome)
        else:
            log.info(
                "%s: %s unchanged since the snapshot being served; nothing to do",
                label,
                self.directory,
            )

    async def _attempt(
        self, number: int, running: _Running, force: bool
    ) -> _Loaded | _Unchanged | ConfigError | None:
        """Load ``number`` within the reload timeout: what it loaded, or why not; ``None``
        past the timeout (or when abandoned: see ``running``)."""
        label = _label(number)
        try:
            with running.scope, anyio.move_on_after(self.timeout):
                try:
                    return await self._load(running, force, label)
                except ConfigError as exc:
                    return exc
                except _Stopped:
                    return None  # told to stop: ``running.why`` is logged below
                except Exception as exc:  # a bug must not stop the watcher
                    log.exception("%s of %s failed", label, self.directory)
                    return ConfigError([Problem(str(self.directory), f"unexpected error: {exc!r}")])
        finally:
            running.stop.set()
            self.running.pop(number, None)
            if running.why:
                log.info("%s abandoned, its result unused: %s", label, running.why)
        return None

    async def _load(self, running: _Running, force: bool, label: str) -> _Loaded | _Unchanged:
        """The directory read and loaded, unless its files are those last applied."""
        contents = await anyio.to_thread.run_sync(
            partial(
                _settled, self.directory, self.limits, self.quiet, running.stop, label,
                self.writers,
            ),
            abandon_on_cancel=True,
        )  # fmt: skip
        if not force and contents.digest == self.served:
            return _UNCHANGED
        fallbacks = None
        if self.good is not None:
            good = self.good
            fallbacks = {
                file.path: good[file.path]
                for file in contents.files
                if file.path in good and file.data != good[file.path]
            }
        try:
            assembly = await load_in_process(contents, fallbacks)
        except LoaderFailed as exc:
            log.error("%s of %s failed: %s", label, self.directory, exc)
            raise _failure(self.directory, exc) from None
        snapshot = await anyio.to_thread.run_sync(assembly.snapshot)
        return _Loaded(label, contents, assembly, snapshot)

    def _apply(self, loaded: _Loaded) -> Snapshot:
        """Serve what ``loaded`` holds (and report the files it refused); what is served."""
        label, assembly, snapshot = loaded.label, loaded.assembly, loaded.snapshot
        refused = [refusal for refusal in assembly.refused if not refusal.held]
        if refused:
            error = ConfigError([problem for refusal in refused for problem in refusal.problems])
            log.error(
                "refused %d file(s) of %s (%s): each keeps its last good version (one that "
                "never had one is left out), and the rest is applied\n%s",
                len(refused),
                self.directory,
                label,
                error,
            )
            if self.on_refused is not None:
                _call(self.on_refused, error)
        for refusal in assembly.refused:
            if refusal.held:
                log.warning(
                    "%s: %s is %s; %s meanwhile",
                    label,
                    refusal.path,
                    HELD,
                    "its last good version is served" if refusal.kept else "it is left out",
                )
        log_warnings(assembly.warnings)
        self.good = _good(loaded, self.good or {})
        self.served = loaded.contents.digest
        current = self.cache.snapshot(self.key)
        if current is not None and _same(current, snapshot):
            # Only files without resources (scopes.yaml), or files refused alone, changed.
            log.info("%s: %s serves the same resources as before", label, self.directory)
            snapshot = current
        else:
            self.cache.set_snapshot(self.key, snapshot)
            if label == _label(0):
                log.info("loaded %s from %s", snapshot, self.directory)
            else:
                log.info("applied %s from %s (%s)", snapshot, self.directory, label)
        if label != _label(0) and self.on_applied is not None:
            _call(self.on_applied, snapshot)
        return snapshot

    def refused(self, label: str, error: ConfigError) -> None:
        log.error(
            "refused the change to %s (%s); still serving the last good snapshot\n%s",
            self.directory,
            label,
            error,
        )
        if self.on_refused is not None:
            _call(self.on_refused, error)


def _call(callback: Callable[[_T], None], argument: _T) -> None:
    """A user's callback; its exception is logged, and the watcher goes on."""
    try:
        callback(argument)
    except Exception:
        log.exception("the callback %r raised", callback)


async def watch_directory(
    directory: str | Path,
    cache: SnapshotCache,
    *,
    key: Hashable = None,
    quiet_ms: int = 300,
    max_delay_ms: int = 3000,
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
    max_config_bytes: int = DEFAULT_MAX_CONFIG_BYTES,
    reload_timeout: float = DEFAULT_RELOAD_TIMEOUT,
    on_applied: Callable[[Snapshot], None] | None = None,
    on_refused: Callable[[ConfigError], None] | None = None,
    stop: anyio.Event | None = None,
    reload_requests: anyio.abc.ObjectReceiveStream[str] | None = None,
    task_status: anyio.abc.TaskStatus[Snapshot] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Load ``directory`` into ``cache`` under ``key``, then reload it whenever its files
    change.

    The first load takes the directory as a whole: any problem refuses it, and until a load
    applies, reloads do the same. Started with ``TaskGroup.start``, the watcher reports the
    snapshot it loaded (and set, unless the cache already served the same resources under
    ``key``), or raises :class:`ConfigError` from ``start``; started otherwise, a refused
    first load is logged (and ``on_refused`` told) and the watcher goes on. ``on_applied``
    is called after each reload that loads the directory (not after the first load), with
    the snapshot then served: the one before when only files that hold no resources
    (``scopes.yaml``) or files refused alone changed.

    Changes are gathered until the directory has been quiet for ``quiet_ms`` (or, under
    constant edits, for at most ``max_delay_ms``) and, where Linux reports writes, until no
    changed file is still held open by a writer (for at most ``max_delay_ms`` too); then the
    files are read until two reads ``quiet_ms`` apart agree, and loaded once, in a child
    process: a burst of edits becomes one snapshot, and a file caught half-written is read
    again. A file with a problem of its own (it does not parse, is over a bound, or holds an
    invalid resource) is refused alone: it keeps the version last applied (or is left out
    if it never had one), and the rest is applied; the refusal is logged at ERROR and
    ``on_refused`` is told. A file still held open for writing when it is read is set
    aside the same way until its writer closes it, logged at WARNING (``on_refused`` is not
    told). A reload that fails as a whole
    (problems between files, over the directory's size, still changing after
    :data:`MAX_READS` reads, or not loaded within ``reload_timeout`` seconds) is logged at
    ERROR, ``on_refused`` is told why, and the last good snapshot keeps being served.
    Reloads never wait for each other: see the module documentation for how their results
    are ordered. Each string received on ``reload_requests`` (a reason, such as
    ``"SIGHUP"``) starts a reload at once, even of unchanged files. Runs until cancelled, or
    until ``stop`` is set (which ends the file watcher at once rather than at its next poll).
    """
    root = Path(directory)
    writers = WriteTracker.open(root)  # before the first read: every write from now on counts
    reloads = _Reloads(
        directory=root,
        cache=cache,
        key=key,
        limits=_Limits(max_file_bytes, max_config_bytes),
        quiet=quiet_ms / 1000,
        timeout=reload_timeout,
        on_applied=on_applied,
        on_refused=on_refused,
        writers=writers,
    )
    try:
        await warm_loader()
        first = await reloads.first()
        if isinstance(first, Snapshot):
            task_status.started(first)
        elif task_status is not anyio.TASK_STATUS_IGNORED:
            raise first
        else:
            reloads.refused(_label(0), first)
        max_delay = max(max_delay_ms, quiet_ms)
        async with anyio.create_task_group() as group:
            reloads.group = group
            if reload_requests is not None:
                group.start_soon(_requested, reload_requests, reloads)
            send, receive = anyio.create_memory_object_stream[set[_Change]](16)
            group.start_soon(_watch_files, root, stop, max_delay, send.clone())
            if writers is not None:
                group.start_soon(_watch_closes, writers, send.clone())
            send.close()
            async with receive:
                await _group_changes(
                    receive, quiet_ms / 1000, max_delay / 1000, root, reloads, writers
                )
            group.cancel_scope.cancel()
    finally:
        if writers is not None:
            writers.close()


_CLOSED = "closed"
"""The change a writer's close of a file it wrote is reported as."""
_Change = tuple[watchfiles.Change | str, str]
WATCH_STEP_MS = 50
"""How often the file watcher's thread looks for changes and at the stop event (the
longest a shutdown waits for it), and how often the closes writers made are looked for.
The quiet window is kept here, not by the watcher, so that it does not lengthen the
shutdown."""


async def _watch_files(
    root: Path,
    stop: anyio.Event | None,
    max_delay_ms: int,
    send: anyio.abc.ObjectSendStream[set[_Change]],
) -> None:
    """Pass each batch of relevant changes the watcher reports on to ``send``."""
    async with send:
        async for changes in watchfiles.awatch(
            root,
            stop_event=stop,
            watch_filter=_relevant,
            step=WATCH_STEP_MS,
            debounce=max_delay_ms,
            recursive=True,
        ):
            await send.send(set(changes))


async def _watch_closes(
    writers: WriteTracker, send: anyio.abc.ObjectSendStream[set[_Change]]
) -> None:
    """Pass on each close of a file its writer had written (the file watcher reports the
    writes, not the close that ends them)."""
    async with send:
        while True:
            await anyio.sleep(WATCH_STEP_MS / 1000)
            closed: set[_Change] = {
                (_CLOSED, str(path)) for path in writers.closed() if _relevant(_CLOSED, str(path))
            }
            if closed:
                await send.send(closed)


async def _group_changes(
    receive: anyio.abc.ObjectReceiveStream[set[_Change]],
    quiet: float,
    max_delay: float,
    root: Path,
    reloads: _Reloads,
    writers: WriteTracker | None,
) -> None:
    """Start a reload once no new change has come for ``quiet`` seconds and no changed file
    is held open by its writer, or at the latest ``max_delay`` seconds after the first
    change of a group. A change already in the group (the same file modified again) does
    not extend the wait; a writer's close does. Returns when the file watcher ends."""
    async for first in receive:
        pending = set(first)
        now = anyio.current_time()
        # The watcher reported the batch once it had been quiet for WATCH_STEP_MS already.
        latest, quiet_until = now + max_delay, now + max(0.0, quiet - WATCH_STEP_MS / 1000)
        while True:
            more: set[_Change] | None = None
            with anyio.move_on_after(min(latest, quiet_until) - anyio.current_time()):
                try:
                    more = await receive.receive()
                except anyio.EndOfStream:
                    return  # stopped: no reload for a process that is going away
            if more is not None:
                if more - pending:
                    pending |= more
                    quiet_until = anyio.current_time() + quiet
                continue
            if anyio.current_time() >= latest or not _held(writers, pending):
                break
            quiet_until = latest  # until a writer closes (a change), or the latest
        log.debug("changes in %s: %s", root, sorted(path for _, path in pending))
        reloads.start(f"{len(pending)} file change(s)")


def _held(writers: WriteTracker | None, changes: set[_Change]) -> bool:
    """Whether a changed file is still held open by a writer that wrote it."""
    if writers is None:
        return False
    return bool(writers.held(Path(path) for _, path in changes if Path(path).is_file()))


async def _requested(requests: anyio.abc.ObjectReceiveStream[str], reloads: _Reloads) -> None:
    async for reason in requests:
        reloads.start(reason, force=True)
