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
    return not name.startswith(".") and name.endswith(SUFFIXES)


async def watch_directory(
    directory: str | Path,
    cache: SnapshotCache,
    *,
    key: Hashable = None,
    debounce_ms: int = 300,
    on_applied: Callable[[Snapshot], None] | None = None,
    on_refused: Callable[[ConfigError], None] | None = None,
) -> None:
    """Reload ``directory`` into ``cache`` under ``key`` whenever its files change.

    A burst of edits within ``debounce_ms`` becomes one reload. A directory that fails to
    load is refused (``on_refused`` is told why) and the last good snapshot keeps being
    served. Runs until cancelled.
    """
    async for _changes in watchfiles.awatch(
        directory, watch_filter=_relevant, debounce=debounce_ms, step=50, recursive=True
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
