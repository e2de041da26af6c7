"""Which event loop a server process runs on: uvloop's where it is installed.

The library runs on any asyncio loop; a process that serves many proxies does better on
uvloop's (``pip install 'xdscore[uvloop]'``): its loop, transports and handles are C, and
they are a fair share of what a stream costs. On the benchmark machine a 1,000-stream
initial sync took 13 % less server CPU on it (docs/benchmarks.md). ``xdscore serve`` and
the benchmark server take ``--loop auto`` (uvloop if it imports), ``uvloop`` or ``asyncio``.
"""

from __future__ import annotations

import importlib.util
from typing import Any, Literal

__all__ = ["LOOPS", "LoopChoice", "loop_options"]

LoopChoice = Literal["auto", "asyncio", "uvloop"]
LOOPS: tuple[LoopChoice, ...] = ("auto", "asyncio", "uvloop")


def loop_options(choice: LoopChoice) -> dict[str, Any]:
    """``anyio.run``'s ``backend_options`` for ``choice``; ``uvloop`` without uvloop
    installed is a ``RuntimeError`` that says how to install it."""
    installed = importlib.util.find_spec("uvloop") is not None
    if choice == "uvloop" and not installed:
        raise RuntimeError("uvloop is not installed: pip install 'xdscore[uvloop]'")
    return {"use_uvloop": choice == "uvloop" or (choice == "auto" and installed)}
