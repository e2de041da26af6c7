"""The loader's fork server, and what each child forked from it does with one load (see
:mod:`._process`).

The fork server is a process of its own that imports this module, and with it every
protobuf module of the Envoy API, once. It then waits on its control socket: for each
request (two pipes: the job comes in on one, the outcome goes out on the other) it forks a
child, answers with the child's pid, and waits for the next. It ends when the server's end
of the socket closes; each child asks Linux to kill it when the fork server ends.
"""

from __future__ import annotations

import ctypes
import gc
import importlib
import os
import pickle
import signal
import socket
import sys
import traceback
from collections.abc import Mapping
from pathlib import Path

import attrs

from ..analysis import Diagnostic
from ..wire._descriptors import register_descriptor_set
from ..wire._messages import import_all_protos
from ..wire._resource import Resource
from ._assemble import Assembly, Refusal, assemble
from ._loader import ConfigError, DirectoryData, Problem

__all__ = ["READY", "Failed", "Job", "Loaded", "Refused", "serve"]

READY = b"R"
"""What the fork server sends once it has imported everything."""
PID_BYTES = 8
_PR_SET_PDEATHSIG = 1


@attrs.frozen
class Job:
    """One load: the files as read, the fallbacks (file by file, see :mod:`._assemble`;
    ``None`` for the whole policy), and what the server has registered beyond the Envoy
    API, for the child to register too."""

    contents: DirectoryData
    fallbacks: Mapping[Path, bytes] | None
    modules: tuple[str, ...]
    """The protobuf modules (``*_pb2``) the server has imported."""
    descriptor_sets: tuple[bytes, ...]
    """The descriptor sets registered through :func:`xdscore.config.register_descriptors`."""


ResourceFields = tuple[str, str, bytes, float | None, str, tuple[str, ...]]
"""A resource as sent back: type URL, name, body, TTL, version, aliases."""


@attrs.frozen
class Loaded:
    resources: tuple[ResourceFields, ...]
    refused: tuple[Refusal, ...]
    warnings: tuple[str, ...]

    def assembly(self) -> Assembly:
        resources = tuple(
            Resource(type_url=url, name=name, body=body, ttl=ttl, version=version, aliases=aliases)
            for url, name, body, ttl, version, aliases in self.resources
        )
        return Assembly(resources, self.refused, self.warnings)


@attrs.frozen
class Refused:
    problems: tuple[Problem, ...]
    diagnostics: tuple[Diagnostic, ...]

    def error(self) -> ConfigError:
        return ConfigError(list(self.problems), self.diagnostics)


@attrs.frozen
class Failed:
    """The load raised something other than :class:`ConfigError` (a bug): its traceback."""

    traceback: str


def serve(control: int) -> None:
    """The fork server's loop, on the socket ``control`` (inherited from the server)."""
    # Children are reaped as they end (so their CPU time counts as this process's
    # children's, as the system's tools show it).
    signal.signal(signal.SIGCHLD, _reap)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the server's to act on
    import_all_protos()
    gc.freeze()  # what every child inherits is never scanned: its pages stay shared
    with socket.socket(fileno=control) as channel:
        channel.sendall(READY)
        while True:
            try:
                message, fds, _, _ = socket.recv_fds(channel, 1, 2)
            except OSError:
                return
            if not message:
                return  # the server is gone
            pid = os.fork()
            if pid == 0:
                channel.close()
                _child(*fds)
            for fd in fds:
                os.close(fd)
            channel.sendall(pid.to_bytes(PID_BYTES, "big"))


def _reap(*_: object) -> None:
    while True:
        try:
            pid, _status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _child(job_fd: int, reply_fd: int) -> None:
    """Load the job read from ``job_fd``, write the outcome to ``reply_fd``, and exit."""
    _die_with_parent()
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    outcome: Loaded | Refused | Failed
    try:
        with open(job_fd, "rb") as stream:
            job: Job = pickle.load(stream)
        _register(job)
        assembly = assemble(job.contents, job.fallbacks)
        outcome = Loaded(
            tuple(
                (r.type_url, r.name, r.body, r.ttl, r.version, r.aliases)
                for r in assembly.resources
            ),
            assembly.refused,
            assembly.warnings,
        )
    except ConfigError as exc:
        outcome = Refused(tuple(exc.problems), exc.diagnostics)
    except BaseException:  # a bug: reported to the server, which logs it
        outcome = Failed(traceback.format_exc())
    try:
        with open(reply_fd, "wb") as stream:
            pickle.dump(outcome, stream, protocol=pickle.HIGHEST_PROTOCOL)
    finally:
        os._exit(0)  # nothing of the fork server's state is the child's to clean up


def _register(job: Job) -> None:
    for name in job.modules:
        if name not in sys.modules:
            try:
                importlib.import_module(name)
            except Exception:  # not importable by name (made at run time, say)
                continue
    for data in job.descriptor_sets:
        register_descriptor_set(data)


def _die_with_parent() -> None:
    """Ask Linux to kill this process when its parent (the fork server, which ends with the
    server) does: a load is never left running for a server that is gone."""
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    parent = os.getppid()
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # it ended before the request took effect
        os._exit(1)
