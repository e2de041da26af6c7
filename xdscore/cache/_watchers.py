"""Level-triggered notification: a set of callbacks per key, called synchronously."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Hashable, Iterable
from typing import Any

from ._interface import Cancel, Notify

__all__ = ["Adoptions", "Updates", "Watchers"]

log = logging.getLogger("xdscore.cache")


class Watchers:
    """Callbacks grouped by key. Notifying never blocks and survives a failing callback."""

    __slots__ = ("_by_key", "_tokens")

    def __init__(self) -> None:
        self._by_key: dict[Hashable, dict[int, Notify]] = {}
        self._tokens = itertools.count()

    def add(self, key: Hashable, notify: Notify) -> Cancel:
        """Register ``notify`` under ``key``; the returned callable removes exactly it."""
        token = next(self._tokens)
        self._by_key.setdefault(key, {})[token] = notify

        def cancel() -> None:
            current = self._by_key.get(key)
            if current is not None and current.pop(token, None) is not None and not current:
                del self._by_key[key]

        return cancel

    def notify(self, key: Hashable) -> None:
        """Call every callback registered under ``key``."""
        for callback in list(self._by_key.get(key, {}).values()):
            _call(callback)

    def notify_all(self) -> None:
        """Call every callback under every key."""
        for group in list(self._by_key.values()):
            for callback in list(group.values()):
                _call(callback)

    def count(self, key: Hashable | None = None) -> int:
        """How many callbacks are registered (under ``key``, or in all)."""
        if key is not None:
            return len(self._by_key.get(key, {}))
        return sum(len(group) for group in self._by_key.values())


def _call(callback: Notify) -> None:
    try:
        callback()
    except Exception:
        log.exception("cache watcher callback failed; other watchers are still notified")


class Updates:
    """Callbacks told the type URL of every write that changed it (for metrics)."""

    __slots__ = ("_callbacks",)

    def __init__(self) -> None:
        self._callbacks: list[Callable[[str], None]] = []

    def add(self, callback: Callable[[str], None]) -> Cancel:
        """Register ``callback``; the returned callable removes it."""
        self._callbacks.append(callback)

        def cancel() -> None:
            if callback in self._callbacks:
                self._callbacks.remove(callback)

        return cancel

    def tell(self, type_urls: Iterable[str]) -> None:
        """Tell every callback about each of ``type_urls``; a failing one is logged."""
        if not self._callbacks:
            return
        for type_url in type_urls:
            for callback in list(self._callbacks):
                try:
                    callback(type_url)
                except Exception:
                    log.exception("cache update callback failed")


class Adoptions:
    """Callbacks told each snapshot a group is given (for revisions)."""

    __slots__ = ("_callbacks",)

    def __init__(self) -> None:
        self._callbacks: list[Callable[[Hashable, Any], None]] = []

    def add(self, callback: Callable[[Hashable, Any], None]) -> Cancel:
        """Register ``callback``; the returned callable removes it."""
        self._callbacks.append(callback)

        def cancel() -> None:
            if callback in self._callbacks:
                self._callbacks.remove(callback)

        return cancel

    def tell(self, key: Hashable, snapshot: Any) -> None:
        """Tell every callback; a failing one is logged."""
        for callback in list(self._callbacks):
            try:
                callback(key, snapshot)
            except Exception:
                log.exception("snapshot callback failed")
