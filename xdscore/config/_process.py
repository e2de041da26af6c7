"""Loading a directory's files in a process of its own, which can be killed.

Parsing YAML, building protobuf messages and checking them is the costly, input-driven part
of a load, and some of it runs in C (libyaml, protobuf) where no Python-level check can
stop it. So it runs in a child process: abandoning a load (past its deadline, or overtaken
by a newer one) kills the child with SIGKILL, which stops it wherever it is and gives its
memory back to the system at once; nothing of it lingers in the server, and it never
competes with the event loop for the GIL.

The children are forked from a fork server (:mod:`._child`), started on the first load,
which imports the loader and the Envoy protobuf modules once: a load starts in a few
milliseconds. The server talks to it over a socket pair: for each load it passes two pipes
(the job in, the outcome out) and gets the child's pid back. The files travel to the child
as bytes (the server read them), the resources come back encoded, with their versions.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Mapping
from pathlib import Path

import anyio
import anyio.to_thread
import attrs

from ..wire._descriptors import register_descriptor_set
from ..wire._messages import import_all_protos
from . import _child
from ._assemble import Assembly
from ._loader import DirectoryData

__all__ = ["LoaderFailed", "load_in_process", "register_descriptors", "warm_loader"]

_descriptor_sets: list[bytes] = []

_STARTER = (
    "import json, sys; sys.path[:] = json.loads(sys.argv[1]); "
    "from xdscore.config._child import serve; serve(int(sys.argv[2]))"
)


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


@attrs.define(eq=False)
class _ForkServer:
    """The running fork server: its process and the server's end of its socket."""

    process: subprocess.Popen[bytes]
    channel: socket.socket

    @classmethod
    def start(cls) -> _ForkServer:
        ours, theirs = socket.socketpair()
        with theirs:
            process = subprocess.Popen(
                [sys.executable, "-c", _STARTER, json.dumps(sys.path), str(theirs.fileno())],
                pass_fds=[theirs.fileno()],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,  # the server's stdout is its users' (the banner)
            )
        if ours.recv(1) != _child.READY:
            ours.close()
            raise LoaderFailed(f"the loader's fork server ended at start ({process.wait()})")
        return cls(process, ours)

    def fork(self, job_fd: int, reply_fd: int) -> int:
        """A child to read the job from ``job_fd`` and answer on ``reply_fd``; its pid."""
        socket.send_fds(self.channel, [b"F"], [job_fd, reply_fd])
        answer = b""
        while len(answer) < _child.PID_BYTES:
            more = self.channel.recv(_child.PID_BYTES - len(answer))
            if not more:
                raise ConnectionError("the loader's fork server ended")
            answer += more
        return int.from_bytes(answer, "big")


_lock = threading.Lock()
_servers: list[_ForkServer] = []
"""The fork server, once started (one per process)."""


def _fork(job_fd: int, reply_fd: int) -> int:
    """A loader child, from the fork server (started, or started again, as needed)."""
    with _lock:
        for attempt in (1, 2):
            if not _servers:
                _servers.append(_ForkServer.start())
            try:
                return _servers[0].fork(job_fd, reply_fd)
            except OSError:
                ended = _servers.pop()  # it ended: start another, once
                ended.channel.close()
                ended.process.poll()
                if attempt == 2:
                    raise
    raise AssertionError("unreachable")


async def warm_loader() -> None:
    """Start the fork server, and wait until it has imported what a load needs (about a
    second, once per process), so that no load's deadline counts it. Imports the Envoy
    protobuf modules here too, meanwhile: what the server later decodes on the event loop
    (a config dump, a status) then never waits for them."""

    def start() -> None:
        with _lock:
            if not _servers:
                _servers.append(_ForkServer.start())

    async with anyio.create_task_group() as group:
        group.start_soon(anyio.to_thread.run_sync, import_all_protos)
        await anyio.to_thread.run_sync(start)


async def load_in_process(
    contents: DirectoryData, fallbacks: Mapping[Path, bytes] | None
) -> Assembly:
    """:func:`~._assemble.assemble` of ``contents`` in a child process; cancelling the
    caller kills the child. Raises :class:`~._loader.ConfigError` as ``assemble`` does,
    and :class:`LoaderFailed` when the child fails otherwise."""
    call = _Call(_child.Job(contents, fallbacks, _protobuf_modules(), tuple(_descriptor_sets)))
    try:
        await anyio.to_thread.run_sync(call.start)
        return await anyio.to_thread.run_sync(call.outcome, abandon_on_cancel=True)
    finally:
        call.kill()


@attrs.define(eq=False)
class _Call:
    """One load in a child: the job, then the child's pid and the outcome."""

    job: _child.Job | None
    pid: int | None = None
    reply: int | None = None
    answered: threading.Event = attrs.field(factory=threading.Event)

    def start(self) -> None:
        job_in, job_out = os.pipe()
        reply_in, reply_out = os.pipe()
        try:
            self.pid = _fork(job_in, reply_out)
        except BaseException:
            for fd in (job_out, reply_in):
                os.close(fd)
            raise
        finally:
            os.close(job_in)
            os.close(reply_out)
        self.reply = reply_in
        job, self.job = self.job, None
        try:
            with open(job_out, "wb") as stream:  # the child reads it all before it starts
                pickle.dump(job, stream, protocol=pickle.HIGHEST_PROTOCOL)
        except BrokenPipeError:
            pass  # the child ended before reading it: its outcome says so

    def outcome(self) -> Assembly:
        """The child's answer (in a thread, which a killed child's end of the pipe
        releases)."""
        assert self.reply is not None
        with open(self.reply, "rb") as stream:
            data = stream.read()
        self.answered.set()
        outcome = pickle.loads(data) if data else None
        if isinstance(outcome, _child.Loaded):
            return outcome.assembly()
        if isinstance(outcome, _child.Refused):
            raise outcome.error()
        if isinstance(outcome, _child.Failed):
            raise LoaderFailed(f"the loader process failed:\n{outcome.traceback}")
        raise LoaderFailed(
            "the loader process ended without an answer (killed from outside, or out of memory)"
        )

    def kill(self) -> None:
        """Kill the child unless it has answered (and so has ended, or is ending)."""
        if self.pid is not None and not self.answered.is_set():
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)


def _protobuf_modules() -> tuple[str, ...]:
    """The protobuf modules imported here, for a child to import too (those the fork
    server imported already cost it nothing)."""
    return tuple(name for name in list(sys.modules) if name.endswith("_pb2"))
