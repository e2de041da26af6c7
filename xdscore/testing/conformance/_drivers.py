"""Drivers: where the server under test listens, and how the suite changes what it serves.

Four drivers, each an async context manager (entering it starts what it needs):

* `PassiveDriver`: any ``HOST:PORT`` (TLS allowed); it changes nothing, so cases
  that need a change are skipped.
* `DirectoryDriver`: starts the server from a command line holding ``{dir}`` and
  ``{addr}``, on a directory of Envoy resources in the format ``xdscore serve`` reads,
  which the suite writes and edits; each change is confirmed by watching it arrive.
* `BenchmarkDriver`: starts a server that speaks the benchmark peers' stdin/stdout
  protocol (``LISTENING addr=…``; ``push R E`` answered by ``SNAPSHOT_SET …``), such as
  go-control-plane's peer binary. It can change the number of clusters and every
  endpoint set, nothing else.
* `HookDriver`: for embedders, a `ConfigHook` (an object with
  ``async apply(world)``) that puts a world into their server, for instance
  `SnapshotCacheHook` for an xdscore cache.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shlex
import signal
import ssl
import subprocess
import tempfile
from pathlib import Path
from types import TracebackType
from typing import IO, Protocol

import anyio
import anyio.abc
from anyio.streams.text import TextReceiveStream

from ...cache import Snapshot, SnapshotCache
from .._net import free_port
from ._channel import Channel
from ._inventory import wait_until_served
from ._world import World

__all__ = [
    "BenchmarkDriver",
    "ConfigHook",
    "DirectoryDriver",
    "Driver",
    "DriverError",
    "HookDriver",
    "PassiveDriver",
    "SnapshotCacheHook",
]

log = logging.getLogger("xdscore.conformance")


class DriverError(Exception):
    """The server under test could not be started, reached or changed."""


class Driver:
    """What every driver offers the runner (see the module docstring)."""

    name = "driver"
    host: str = "127.0.0.1"
    port: int = 0
    ssl_context: ssl.SSLContext | None = None
    server_name: str | None = None
    world: World | None = None
    """What the server serves now, if the driver put it there (``None``: unknown)."""
    baseline: World | None = None
    """What the driver starts with, and what the runner restores before a case."""
    apply_timeout: float = 15.0
    """Seconds a change may take to be seen by a client."""
    probe_window: float = 0.2
    """Seconds without a response after which the stream that watches a change arrive
    looks again."""
    node_id: str | None = None
    """The node id that stream presents (for a server that serves known nodes only; the
    command line sets it from ``--node-id``)."""

    def cannot(self, world: World) -> str | None:
        """Why the driver cannot make the server serve ``world`` (``None``: it can)."""
        return "the passive driver changes nothing on the server"

    async def apply(self, world: World) -> None:
        """Make the server serve ``world``; return once it does."""
        raise DriverError(self.cannot(world) or "this driver changes nothing")

    def channel(self) -> Channel:
        """A new HTTP/2 connection to the server."""
        return Channel(
            self.host, self.port, ssl_context=self.ssl_context, server_name=self.server_name
        )

    async def _confirm(self, world: World) -> None:
        channel = self.channel()
        try:
            await wait_until_served(
                channel,
                world,
                timeout=self.apply_timeout,
                quiet=self.probe_window,
                node_id=self.node_id,
            )
        except Exception as exc:
            raise DriverError(str(exc)) from exc
        finally:
            channel.close()
        self.world = world

    async def __aenter__(self) -> Driver:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        return None

    def describe(self) -> str:
        scheme = "TLS" if self.ssl_context is not None else "plaintext"
        return f"{self.name} driver, {self.host}:{self.port} ({scheme})"


class PassiveDriver(Driver):
    """A running server at ``host:port``, read only."""

    name = "passive"

    def __init__(
        self,
        host: str,
        port: int,
        *,
        ssl_context: ssl.SSLContext | None = None,
        server_name: str | None = None,
    ) -> None:
        self.host, self.port = host, port
        self.ssl_context = ssl_context
        self.server_name = server_name


class ConfigHook(Protocol):
    """An embedder's way to put a `World` into the server under test."""

    async def apply(self, world: World) -> None:
        """Serve ``world`` (``world.resources()`` or ``world.messages()`` hold it) to every
        node; the suite then waits until a client sees it."""
        ...


class SnapshotCacheHook:
    """A `ConfigHook` for an xdscore `SnapshotCache`: one snapshot
    of the world for ``key`` (``None``: the cache's group of every node)."""

    def __init__(self, cache: SnapshotCache, key: str | None = None) -> None:
        self.cache = cache
        self.key = key

    async def apply(self, world: World) -> None:
        self.cache.set_snapshot(self.key, Snapshot(world.resources()))


class HookDriver(Driver):
    """A server at ``host:port`` whose configuration ``hook`` sets; it starts with
    ``initial`` applied."""

    name = "hook"

    def __init__(
        self,
        host: str,
        port: int,
        hook: ConfigHook,
        *,
        initial: World | None = None,
        ssl_context: ssl.SSLContext | None = None,
        server_name: str | None = None,
        apply_timeout: float = 15.0,
    ) -> None:
        self.host, self.port = host, port
        self.hook = hook
        self.baseline = initial or World()
        self.ssl_context = ssl_context
        self.server_name = server_name
        self.apply_timeout = apply_timeout

    def cannot(self, world: World) -> str | None:
        return None

    async def apply(self, world: World) -> None:
        await self.hook.apply(world)
        await self._confirm(world)

    async def __aenter__(self) -> HookDriver:
        assert self.baseline is not None
        await self.apply(self.baseline)
        return self


class _Process:
    """A server process the suite started: its output goes to a log file."""

    def __init__(self, process: anyio.abc.Process, log_path: Path) -> None:
        self.process = process
        self.log_path = log_path

    def tail(self, lines: int = 15) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def exited(self) -> str | None:
        code = self.process.returncode
        if code is None:
            return None
        return f"the server exited with status {code}:\n{self.tail()}"

    async def stop(self) -> None:
        if self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(signal.SIGTERM)
            with anyio.move_on_after(5):
                await self.process.wait()
            if self.process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    self.process.kill()
                await self.process.wait()


async def _start(
    command: list[str], log_file: IO[bytes], *, stdin: int | None = None, stdout: int | None = None
) -> anyio.abc.Process:
    try:
        return await anyio.open_process(
            command,
            stdin=stdin if stdin is not None else subprocess.DEVNULL,
            stdout=stdout if stdout is not None else log_file,
            stderr=log_file,
            start_new_session=True,
        )
    except OSError as exc:
        raise DriverError(f"cannot start {command[0]!r}: {exc}") from exc


class DirectoryDriver(Driver):
    """Starts ``command`` (a string holding ``{dir}`` and ``{addr}``; ``{host}`` and
    ``{port}`` too) on a directory of resources the suite writes (``directory``, or a new
    temporary one), listening where ``{addr}`` says (a free loopback port)."""

    name = "directory"

    def __init__(
        self,
        command: str,
        *,
        directory: Path | None = None,
        initial: World | None = None,
        host: str = "127.0.0.1",
        apply_timeout: float = 15.0,
        start_timeout: float = 30.0,
    ) -> None:
        if "{dir}" not in command or ("{addr}" not in command and "{port}" not in command):
            raise DriverError("the server command must hold {dir} and {addr} (or {port})")
        self.command = command
        self.host = host
        self.baseline = initial or World()
        self.apply_timeout = apply_timeout
        self.start_timeout = start_timeout
        self._given = directory
        self._stack = contextlib.AsyncExitStack()
        self._process: _Process | None = None
        self.directory: Path | None = None

    def cannot(self, world: World) -> str | None:
        return None

    async def apply(self, world: World) -> None:
        assert self.directory is not None
        world.write(self.directory)
        try:
            await self._confirm(world)
        except DriverError as exc:
            raise DriverError(self._why(str(exc))) from exc

    def _why(self, problem: str) -> str:
        if self._process is not None and (exited := self._process.exited()):
            return exited
        tail = self._process.tail() if self._process is not None else ""
        return problem + (f"\nthe server's last output:\n{tail}" if tail else "")

    async def __aenter__(self) -> DirectoryDriver:
        stack = self._stack
        try:
            if self._given is None:
                scratch = stack.enter_context(tempfile.TemporaryDirectory(prefix="xds-conf-"))
                self.directory = Path(scratch) / "config"
                self.directory.mkdir()
                log_path = Path(scratch) / "server.log"
            else:
                self.directory = self._given
                self.directory.mkdir(parents=True, exist_ok=True)
                log_path = self.directory.parent / f".{self.directory.name}-server.log"
            assert self.baseline is not None
            self.baseline.write(self.directory)
            self.port = free_port(self.host)
            command = _fill(
                self.command,
                dir=str(self.directory),
                addr=f"{self.host}:{self.port}",
                host=self.host,
                port=str(self.port),
            )
            log_file = stack.enter_context(log_path.open("wb"))
            process = await _start(command, log_file)
            self._process = _Process(process, log_path)
            stack.push_async_callback(self._process.stop)
            with anyio.fail_after(self.start_timeout):
                await self._wait_started()
        except BaseException:
            await stack.aclose()
            raise
        return self

    async def _wait_started(self) -> None:
        assert self.baseline is not None
        problem = "it never answered"
        while True:
            if self._process is not None and (exited := self._process.exited()):
                raise DriverError(exited)
            try:
                await self._confirm(self.baseline)
            except DriverError as exc:
                problem = str(exc)
                log.debug("server not ready yet: %s", problem)
            except anyio.get_cancelled_exc_class():
                raise DriverError(self._why(problem)) from None
            else:
                return
            await anyio.sleep(0.2)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._stack.aclose()


class BenchmarkDriver(Driver):
    """Starts ``command`` (holding ``{addr}``, ``{clusters}`` and ``{endpoints}``), a server
    speaking the benchmark protocol of the peers (see ``benchmarks/xds_server.py``)."""

    name = "benchmark"

    def __init__(
        self,
        command: str,
        *,
        initial: World | None = None,
        host: str = "127.0.0.1",
        start_timeout: float = 30.0,
        apply_timeout: float = 15.0,
    ) -> None:
        self.command = command
        self.host = host
        self.baseline = initial or World()
        self.start_timeout = start_timeout
        self.apply_timeout = apply_timeout
        self._stack = contextlib.AsyncExitStack()
        self._process: _Process | None = None
        self._lines: AsyncLines | None = None

    def cannot(self, world: World) -> str | None:
        if world.clusters != frozenset(range(len(world.clusters))):
            return "the benchmark protocol names clusters c_00000 up to R-1 only"
        if world.route_to != 0:
            return "the benchmark protocol cannot move route_0 (it always routes to c_00000)"
        if world.ttl is not None:
            return "the benchmark protocol cannot give a resource a TTL"
        if world.revision:
            return "the benchmark protocol cannot change a cluster (only endpoint sets)"
        return None

    async def apply(self, world: World) -> None:
        reason = self.cannot(world)
        if reason is not None:
            raise DriverError(reason)
        assert self._process is not None
        assert self._lines is not None
        stdin = self._process.process.stdin
        assert stdin is not None
        await stdin.send(f"push {len(world.clusters)} {world.endpoints}\n".encode())
        with anyio.move_on_after(self.apply_timeout):
            while (line := await self._lines.next()) is not None:
                if line.startswith("SNAPSHOT_SET"):
                    self.world = world
                    return
        raise DriverError(
            self._process.exited() or f"no SNAPSHOT_SET within {self.apply_timeout:g} s"
        )

    async def __aenter__(self) -> BenchmarkDriver:
        stack = self._stack
        assert self.baseline is not None
        if self.cannot(self.baseline) is not None:
            raise DriverError(f"the initial world cannot be served: {self.cannot(self.baseline)}")
        try:
            scratch = stack.enter_context(tempfile.TemporaryDirectory(prefix="xds-conf-"))
            log_path = Path(scratch) / "server.log"
            command = _fill(
                self.command,
                addr=f"{self.host}:0",
                clusters=str(len(self.baseline.clusters)),
                endpoints=str(self.baseline.endpoints),
            )
            log_file = stack.enter_context(log_path.open("wb"))
            process = await _start(command, log_file, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
            self._process = _Process(process, log_path)
            stack.push_async_callback(self._quit)
            assert process.stdout is not None
            self._lines = AsyncLines(process.stdout)
            await self._listening()
        except BaseException:
            await stack.aclose()
            raise
        self.world = self.baseline
        return self

    async def _listening(self) -> None:
        """Read the server's output up to its ``LISTENING addr=HOST:PORT`` line."""
        assert self._process is not None
        assert self._lines is not None
        with anyio.move_on_after(self.start_timeout):
            while (line := await self._lines.next()) is not None:
                if line.startswith("LISTENING addr="):
                    host, _, port = line.split("=", 1)[1].split()[0].rpartition(":")
                    self.host, self.port = host.strip("[]") or self.host, int(port)
                    return
        raise DriverError(self._process.exited() or "the server never printed LISTENING")

    async def _quit(self) -> None:
        assert self._process is not None
        stdin = self._process.process.stdin
        if stdin is not None:
            with contextlib.suppress(Exception):
                await stdin.send(b"quit\n")
            with anyio.move_on_after(2):
                await self._process.process.wait()
        await self._process.stop()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._stack.aclose()


class AsyncLines:
    """A byte stream's lines, one at a time."""

    def __init__(self, stream: anyio.abc.ByteReceiveStream) -> None:
        self._text = TextReceiveStream(stream)
        self._buffer = ""

    async def next(self) -> str | None:
        while "\n" not in self._buffer:
            try:
                self._buffer += await self._text.receive()
            except (anyio.EndOfStream, anyio.ClosedResourceError):
                return None
        line, self._buffer = self._buffer.split("\n", 1)
        return line.strip()


def _fill(template: str, **values: str) -> list[str]:
    """``template`` split as a shell would, each ``{key}`` replaced (also inside words)."""
    words = shlex.split(template)
    filled = []
    for word in words:
        for key, value in values.items():
            word = word.replace("{" + key + "}", value)
        filled.append(os.path.expanduser(word))
    return filled
