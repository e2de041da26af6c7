"""Garbage-collector settings for a long-running control plane.

CPython collects its youngest generation every 700 net container allocations and, now and
then, walks every tracked object. A control plane allocates fast (each stream's requests,
state records and responses) and holds a large heap that lives for good (modules, the
cache's resources): with the defaults a reconnect storm of 5,000 streams spends about a
fifth of its CPU in the collector, mostly walking that heap again. Nearly everything a
stream allocates is freed by reference counting (the driver breaks the cycles it could
leave), so collecting less often costs little memory.
"""

from __future__ import annotations

import gc

__all__ = ["DEFAULT_YOUNG_THRESHOLD", "tune_collector"]

DEFAULT_YOUNG_THRESHOLD = 50_000
"""Net container allocations between two collections of the youngest generation."""


def tune_collector(young: int = DEFAULT_YOUNG_THRESHOLD) -> None:
    """Collect the youngest generation every ``young`` allocations (the older ones keep
    their ratios to it) and leave out of every later collection what is alive now.

    Call it once the process has loaded what it keeps (imports, the first snapshot): what
    is frozen is never collected, so freezing later would keep any garbage in reference
    cycles alive for good. It changes the whole process's collector: an application that
    embeds the server decides whether to call it (``xdscore serve`` does).
    """
    if young <= 0:
        raise ValueError(f"young must be positive, not {young}")
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(young, middle, old)
