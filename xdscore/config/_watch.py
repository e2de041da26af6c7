"""Keeping a cache in step with a config directory, reloading on change.

Every load runs in a worker thread of its own, so the event loop (and every stream on it)
never waits for YAML or protobuf. How reloads relate to each other:

* each reload has a number, in the order reloads start; a new one starts at once, whatever
  older ones are still doing in their threads (which from then on pause briefly at each
  checkpoint, so that the newer goes first);
* a reload first reads the files until two reads ``quiet_ms`` apart agree (a file caught
  half-written is read again), then loads the bytes it compared;
* the result of a reload is used only if no newer reload has finished before it; once one
  finishes (applied, refused, or unchanged), every older one still running is abandoned;
* a reload still running after ``reload_timeout`` seconds is abandoned and reported as a
  failure; at most :data:`MAX_RELOADS` run at once, and starting one more abandons the
  oldest;
* an abandoned reload's thread is told to stop and does at its next checkpoint (every 200
  YAML nodes, every resource, the waits between reads), its result unused.
"""

from __future__ import annotations

import logging
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
from ..wire._messages import import_all_protos
from ._loader import (
    DEFAULT_MAX_CONFIG_BYTES,
    DEFAULT_MAX_FILE_BYTES,
    SUFFIXES,
    ConfigError,
    Control,
    DirectoryData,
    Problem,
    Stopped,
    load_files,
    read_files,
)

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

log = logging.getLogger("xdscore.config")

_T = TypeVar("_T")


def _relevant(change: watchfiles.Change, path: str) -> bool:
    name = Path(path).name
    # "..data" is the symlink Kubernetes swaps to update a mounted ConfigMap at once.
    return name.startswith("..") or (not name.startswith(".") and name.endswith(SUFFIXES))


@attrs.frozen
class _Limits:
    max_file_bytes: int
    max_config_bytes: int


def _settled(
    directory: Path, limits: _Limits, quiet: float, control: Control, label: str
) -> DirectoryData:
    """The directory's files once two reads ``quiet`` seconds apart agree (in a thread)."""
    contents = read_files(
        directory,
        max_file_bytes=limits.max_file_bytes,
        max_config_bytes=limits.max_config_bytes,
    )
    for attempt in range(2, MAX_READS + 1):
        if contents.over_limit:
            return contents  # refused whatever a second read finds
        if control.stop.wait(quiet):
            raise Stopped
        again = read_files(
            directory,
            max_file_bytes=limits.max_file_bytes,
            max_config_bytes=limits.max_config_bytes,
        )
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


def _reload(
    directory: Path,
    limits: _Limits,
    quiet: float,
    control: Control,
    served: str | None,
    label: str,
) -> tuple[str, Snapshot | None]:
    """Read the directory until it is settled and load it (in a thread): its digest, and
    its snapshot, or None when its files are those of the snapshot being served."""
    contents = _settled(directory, limits, quiet, control, label)
    if served is not None and contents.digest == served:
        return contents.digest, None
    return contents.digest, load_files(contents, control)


def _timeout_error(directory: Path, timeout: float) -> ConfigError:
    return ConfigError(
        [
            Problem(
                str(directory),
                f"loading took longer than the reload timeout of {timeout:g} s "
                "(reload_timeout); abandoned",
            )
        ]
    )


async def load_directory_async(
    directory: str | Path,
    *,
    quiet_ms: int = 300,
    timeout: float = DEFAULT_RELOAD_TIMEOUT,
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
    max_config_bytes: int = DEFAULT_MAX_CONFIG_BYTES,
) -> Snapshot:
    """:func:`~xdscore.config.load_directory` in a worker thread, for a directory that may
    be being written: the event loop goes on meanwhile.

    The files are read until two reads ``quiet_ms`` apart agree (at most :data:`MAX_READS`
    reads), and what was read is loaded. Raises :class:`ConfigError` when the directory is
    refused, when its files kept changing, or when reading and loading took longer than
    ``timeout`` seconds (the thread is then abandoned and stops at its next checkpoint).
    Importing the protobuf modules, done once per process, is not counted in ``timeout``.
    """
    root = Path(directory)
    await anyio.to_thread.run_sync(import_all_protos)
    control = Control()
    limits = _Limits(max_file_bytes, max_config_bytes)
    try:
        with anyio.move_on_after(timeout):
            _, snapshot = await anyio.to_thread.run_sync(
                partial(_reload, root, limits, quiet_ms / 1000, control, None, "loading"),
                abandon_on_cancel=True,
            )
            assert snapshot is not None
            return snapshot
    finally:
        control.stop.set()
    raise _timeout_error(root, timeout)


@attrs.define(eq=False)
class _Running:
    control: Control
    scope: anyio.CancelScope
    why: str = ""


@attrs.define(eq=False)
class _Reloads:
    """The reloads of one watched directory, each in a thread of its own; the newest result
    that finished wins."""

    directory: Path
    cache: SnapshotCache
    key: Hashable
    limits: _Limits
    quiet: float
    timeout: float
    on_applied: Callable[[Snapshot], None] | None
    on_refused: Callable[[ConfigError], None] | None
    group: anyio.abc.TaskGroup
    limiter: anyio.CapacityLimiter = attrs.field(
        factory=lambda: anyio.CapacityLimiter(MAX_RELOADS + 1)
    )
    started: int = 0
    finished: int = 0
    """The number of the newest reload that finished."""
    served: str | None = None
    """The digest of the files this watcher last applied."""
    running: dict[int, _Running] = attrs.field(factory=dict)

    def start(self, reason: str, *, force: bool = False) -> None:
        """Start a reload now, in a thread of its own; ``force`` loads even files
        identical to those of the snapshot being served."""
        self.started += 1
        number = self.started
        while len(self.running) >= MAX_RELOADS:
            oldest = min(self.running)
            self._abandon(oldest, f"more than {MAX_RELOADS} reloads at once (#{number} started)")
        for older in self.running.values():
            older.control.behind.set()  # the newest reload goes first
        log.info("reload #%d of %s started: %s", number, self.directory, reason)
        running = _Running(Control(), anyio.CancelScope())
        self.running[number] = running
        self.group.start_soon(self._run, number, running, force)

    def _abandon(self, number: int, why: str) -> None:
        running = self.running.pop(number)
        running.why = why
        running.control.stop.set()
        running.scope.cancel()

    async def _run(self, number: int, running: _Running, force: bool) -> None:
        label = f"reload #{number}"
        served = None if force else self.served
        outcome: tuple[str, Snapshot | None] | ConfigError
        try:
            with running.scope, anyio.move_on_after(self.timeout) as timed:
                try:
                    outcome = await anyio.to_thread.run_sync(
                        partial(
                            _reload, self.directory, self.limits, self.quiet,
                            running.control, served, label,
                        ),
                        abandon_on_cancel=True,
                        limiter=self.limiter,
                    )  # fmt: skip
                except ConfigError as exc:
                    outcome = exc
                except Stopped:
                    return  # told to stop: ``running.why`` is logged below
                except Exception as exc:  # a bug must not stop the watcher
                    log.exception("%s of %s failed", label, self.directory)
                    outcome = ConfigError(
                        [Problem(str(self.directory), f"unexpected error: {exc!r}")]
                    )
        finally:
            running.control.stop.set()
            self.running.pop(number, None)
            if running.why:
                log.info("%s abandoned, its result unused: %s", label, running.why)
        if running.scope.cancelled_caught:
            return
        if timed.cancelled_caught:
            outcome = _timeout_error(self.directory, self.timeout)
            if number < self.finished:
                log.info("%s abandoned at the reload timeout; a newer reload finished", label)
                return
            self._refused(label, outcome)
            return
        if number < self.finished:
            log.info("%s discarded: reload #%d finished first", label, self.finished)
            return
        self.finished = number
        for older in [n for n in self.running if n < number]:
            self._abandon(older, f"reload #{number} finished first")
        if isinstance(outcome, ConfigError):
            self._refused(label, outcome)
            return
        digest, snapshot = outcome
        if snapshot is None or digest == self.served:
            log.info(
                "%s: %s unchanged since the snapshot being served; nothing to do",
                label,
                self.directory,
            )
            return
        self.cache.set_snapshot(self.key, snapshot)
        self.served = digest
        log.info("applied %s from %s (%s)", snapshot, self.directory, label)
        if self.on_applied is not None:
            _call(self.on_applied, snapshot)

    def _refused(self, label: str, error: ConfigError) -> None:
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
) -> None:
    """Reload ``directory`` into ``cache`` under ``key`` whenever its files change.

    Changes are gathered until the directory has been quiet for ``quiet_ms`` (or, under
    constant edits, for at most ``max_delay_ms``); then the files are read until two reads
    ``quiet_ms`` apart agree, and loaded once, in a worker thread: a burst of edits becomes
    one snapshot, and a file caught half-written is read again. A directory that fails to
    load (refused, over a size limit, still changing after :data:`MAX_READS` reads, or not
    loaded within ``reload_timeout`` seconds) is logged at ERROR, ``on_refused`` is told
    why, and the last good snapshot keeps being served. Reloads never wait for each other:
    see the module documentation for how their results are ordered. Each string received
    on ``reload_requests`` (a reason, such as ``"SIGHUP"``) starts a reload at once, even
    of unchanged files. Runs until cancelled, or until ``stop`` is set (which ends the file
    watcher at once rather than at its next poll).
    """
    root = Path(directory)
    async with anyio.create_task_group() as group:
        reloads = _Reloads(
            directory=root,
            cache=cache,
            key=key,
            limits=_Limits(max_file_bytes, max_config_bytes),
            quiet=quiet_ms / 1000,
            timeout=reload_timeout,
            on_applied=on_applied,
            on_refused=on_refused,
            group=group,
        )
        if reload_requests is not None:
            group.start_soon(_requested, reload_requests, reloads)
        send, receive = anyio.create_memory_object_stream[set[_Change]](16)
        group.start_soon(_watch_files, root, stop, max(max_delay_ms, quiet_ms), send)
        async with receive:
            await _group_changes(
                receive, quiet_ms / 1000, max(max_delay_ms, quiet_ms) / 1000, root, reloads
            )
        group.cancel_scope.cancel()


_Change = tuple[watchfiles.Change, str]
WATCH_STEP_MS = 50
"""How often the file watcher's thread looks for changes and at the stop event: the longest
a shutdown waits for it. The quiet window is kept here, not by the watcher, so that it does
not lengthen the shutdown."""


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
            await send.send(changes)


async def _group_changes(
    receive: anyio.abc.ObjectReceiveStream[set[_Change]],
    quiet: float,
    max_delay: float,
    root: Path,
    reloads: _Reloads,
) -> None:
    """Start a reload once no new change has come for ``quiet`` seconds, or at the latest
    ``max_delay`` seconds after the first change of a group. A change already in the group
    (the same file modified again) does not extend the wait. Returns when the watcher ends."""
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
            if more is None:
                break
            if more - pending:
                pending |= more
                quiet_until = anyio.current_time() + quiet
        log.debug("changes in %s: %s", root, sorted(path for _, path in pending))
        reloads.start(f"{len(pending)} file change(s)")


async def _requested(requests: anyio.abc.ObjectReceiveStream[str], reloads: _Reloads) -> None:
    async for reason in requests:
        reloads.start(reason, force=True)
