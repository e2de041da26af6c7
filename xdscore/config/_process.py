"""Loading a directory's files in a process of its own, which can be killed.

Parsing YAML, building protobuf messages and checking them is the costly, input-driven part
of a load, and some of it runs in C (libyaml, protobuf) where no Python-level check can
stop it. So it runs in a child process: abandoning a load (past its deadline, or overtaken
by a newer one) kills the child with SIGKILL, which stops it wherever it is and gives its
memory back to the system at once; nothing of it lingers in the server, and it never
competes with the event loop for the GIL.

The children are forked from a forkserver (multiprocessing's ``forkserver`` start method),
started on the first load, which imports the loader and the Envoy protobuf modules once:
a load starts in a few milliseconds. The files travel to the child as bytes (they were read
by the server), the resources come back encoded, with their versions.
"""

from __future__ import annotations

import multiprocessing
import sys
import threading
from collections.abc import Mapping
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from pathlib import Path

import anyio
import anyio.to_thread

from ..wire._descriptors import register_descriptor_set
from . import _child
from ._assemble import Assembly
from ._loader import DirectoryData

__all__ = ["LoaderFailed", "load_in_process", "register_descriptors", "warm_loader"]

_CONTEXT = multiprocessing.get_context("forkserver")
_warming = threading.Lock()
_warm: list[bool] = []
"""Holds True once the forkserver has imported what a load needs."""
_descriptor_sets: list[bytes] = []


class LoaderFailed(Exception):
    """The loader process failed other than by refusing the directory (a bug, or it was
    killed from outside); the message says how."""


def register_descriptors(source: str | Path | bytes) -> list[str]:
    """Register the message types of a serialized FileDescriptorSet (a path to one, or its
    bytes) in this process, and in every loader process started from now on; the full
    names of the message types it added. Raises
    :class:`~xdscore.config.DescriptorSetError`."""
    added = register_descriptor_set(source)
    _descriptor_sets.append(source if isinstance(source, bytes) else Path(source).read_bytes())
    return added


async def load_in_process(
    contents: DirectoryData, fallbacks: Mapping[Path, bytes] | None
) -> Assembly:
    """:func:`~._assemble.assemble` of ``contents`` in a child process; cancelling the
    caller kills the child. Raises :class:`~._loader.ConfigError` as ``assemble`` does, and
    :class:`LoaderFailed` when the child fails otherwise."""
    job = _child.Job(contents, fallbacks, _protobuf_modules(), tuple(_descriptor_sets))
    receiver, sender = _CONTEXT.Pipe(duplex=False)
    process = _CONTEXT.Process(
        target=_child.run, args=(job, sender), name="xdscore-config-load", daemon=True
    )
    try:
        await anyio.to_thread.run_sync(_start, process, sender)
        return await anyio.to_thread.run_sync(_outcome, receiver, process, abandon_on_cancel=True)
    finally:
        if process.pid is not None and process.exitcode is None:
            process.kill()


async def warm_loader() -> None:
    """Start the forkserver, and wait until it has imported what a load needs (about a
    second, once per process), so that no load's deadline counts it."""
    await anyio.to_thread.run_sync(_warm_up)


def _warm_up() -> None:
    with _warming:
        if _warm:
            return
        # Process-wide, and read only by the forkserver's first start.
        _CONTEXT.set_forkserver_preload([_child.__name__])
        process = _CONTEXT.Process(target=_child.ready, name="xdscore-config-warm", daemon=True)
        process.start()  # forked once the forkserver has imported the preload
        process.join()
        _warm.append(True)


def _start(process: BaseProcess, sender: Connection) -> None:
    try:
        _warm_up()
        process.start()
    finally:
        sender.close()


def _outcome(receiver: Connection, process: BaseProcess) -> Assembly:
    """The child's answer (in a thread, which a killed child's end of the pipe releases)."""
    try:
        outcome = receiver.recv()
    except EOFError:
        outcome = None
    finally:
        receiver.close()
        process.join()
    if isinstance(outcome, _child.Loaded):
        return outcome.assembly()
    if isinstance(outcome, _child.Refused):
        raise outcome.error()
    if isinstance(outcome, _child.Failed):
        raise LoaderFailed(f"the loader process failed:\n{outcome.traceback}")
    code = process.exitcode
    how = f"was killed by signal {-code}" if code is not None and code < 0 else f"exited ({code})"
    raise LoaderFailed(f"the loader process {how} without an answer")


def _protobuf_modules() -> tuple[str, ...]:
    """The protobuf modules imported here, for a child to import too (those the
    forkserver imported already cost it nothing)."""
    return tuple(name for name in list(sys.modules) if name.endswith("_pb2"))
