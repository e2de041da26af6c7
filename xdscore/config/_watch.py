"""Keeping a cache in step with a config directory, reloading on change."""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable
from pathlib import Path

import anyio
import watchfiles

from ..cache._snapshot import Snapshot
from ..cache._snapshot_cache import SnapshotCache
from ._loader import SUFFIXES, ConfigError, load_directory

__all__ = ["watch_directory"]

log = logging.getLogger("xdscore.config")


def _relevant(change: watchfiles.Change, path: str) -> bool:
    name = Path(path).name
    # "..data" is the symlink Kubernetes swaps to update a mounted ConfigMap at once.
    return name.startswith("..") or (not name.startswith(".") and name.endswith(SUFFIXES))


async def watch_directory(
    directory: str | Path,
    cache: SnapshotCache,
    *,
    key: Hashable = None,
    quiet_ms: int = 300,
    max_delay_ms: int = 3000,
    on_applied: Callable[[Snapshot], None] | None = None,
    on_refused: Callable[[ConfigError], None] | None = None,
    stop: anyio.Event | None = None,
) -> None:
    """Reload ``directory`` into ``cache`` under ``key`` whenever its files change.

    Changes are gathered until the directory has been quiet for ``quiet_ms`` (or, under
    constant edits, for at most ``max_delay_ms``), then loaded once: a burst of edits
    becomes one snapshot. A directory that fails to load is refused (``on_refused`` is told
    why) and the last good snapshot keeps being served. Runs until cancelled, or until
    ``stop`` is set (which ends the file watcher at once rather than at its next poll).
    """
    async for _changes in watchfiles.awatch(
        directory,
        stop_event=stop,
        watch_filter=_relevant,
        step=quiet_ms,
        debounce=max(max_delay_ms, quiet_ms),
        recursive=True,
    ):
        try:
            snapshot = await anyio.to_thread.run_sync(load_directory, directory)
        except ConfigError as exc:
            log.error(
                "refused the change to %s; still serving the last good snapshot\n%s", directory, exc
            )
            if on_refused is not None:
                on_refused(exc)
            continue
        cache.set_snapshot(key, snapshot)
        log.info("applied %s from %s", snapshot, directory)
        if on_applied is not None:
            on_applied(snapshot)
