"""What a loader process does with one load (see :mod:`._process`).

The forkserver imports this module, and with it every protobuf module of the Envoy API,
once; each load is a child forked from it, so it starts with all of that imported.
"""

from __future__ import annotations

import ctypes
import importlib
import os
import signal
import sys
import traceback
from collections.abc import Mapping
from multiprocessing.connection import Connection
from pathlib import Path

import attrs

from ..analysis import Diagnostic
from ..wire._descriptors import register_descriptor_set
from ..wire._messages import import_all_protos
from ..wire._resource import Resource
from ._assemble import Assembly, Refusal, assemble
from ._loader import ConfigError, DirectoryData, Problem

__all__ = ["Failed", "Job", "Loaded", "Refused", "ready", "run"]

import_all_protos()  # in the forkserver: every child is forked with them imported

_PR_SET_PDEATHSIG = 1


@attrs.frozen
class Job:
    """One load: the files as read, the fallbacks (file by file, see :mod:`._assemble`;
    ``None`` for the whole policy), and what the parent process has registered beyond the
    Envoy API, for the child to register too."""

    contents: DirectoryData
    fallbacks: Mapping[Path, bytes] | None
    modules: tuple[str, ...]
    """The protobuf modules (``*_pb2``) the parent has imported."""
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


def ready() -> None:
    """Nothing: a child forked once the forkserver has imported this module."""


def run(job: Job, reply: Connection) -> None:
    """Load ``job`` and send the outcome on ``reply`` (in the child process)."""
    _die_with_parent()
    try:
        _register(job)
        assembly = assemble(job.contents, job.fallbacks)
        outcome: Loaded | Refused | Failed = Loaded(
            tuple(
                (r.type_url, r.name, r.body, r.ttl, r.version, r.aliases)
                for r in assembly.resources
            ),
            assembly.refused,
            assembly.warnings,
        )
    except ConfigError as exc:
        outcome = Refused(tuple(exc.problems), exc.diagnostics)
    except BaseException:  # a bug: reported to the parent, which logs it
        outcome = Failed(traceback.format_exc())
    reply.send(outcome)
    reply.close()


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
    """Ask Linux to kill this process when its parent (the forkserver, which ends with the
    server) does: a load is never left running for a server that is gone."""
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    parent = os.getppid()
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # it died before the request took effect
        os._exit(1)
