"""``xdscore serve --workers N``: N server processes on one port, and the parent that
supervises them.

One Python process serves on one core. With ``--workers N`` the command becomes a
supervisor: it reserves the port (a socket bound with SO_REUSEPORT but never listening, so
that port 0 gives one port for all and the port stays reserved while a worker restarts),
then starts N workers, each ``xdscore serve`` again with the same arguments, its own event
loop, its own load and watch of the source, listening on that port with SO_REUSEPORT: the
kernel spreads new connections over the workers. Resource versions are content hashes, so
every worker gives a client the same versions.

The parent prints the ``serving`` line once, when every worker serves, and passes on the
workers' other lines tagged with their index. It forwards SIGTERM, SIGINT and SIGHUP to
every worker, restarts a worker that dies (after 0.5 s, doubling up to 30 s while it keeps
dying within 10 s of starting; logged), and exits once its workers have after SIGTERM or
SIGINT. A worker that fails before it ever served (a directory that does not load) makes
the parent stop the others and fail too. A worker whose parent dies stops by itself.

With ``--admin HOST:PORT`` worker ``i`` serves its own admin endpoint on ``PORT + i``
(port 0: each picks one); each endpoint shows that worker only.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
import time

import anyio
import anyio.abc
import attrs
from anyio.streams.buffered import BufferedByteReceiveStream

from ._common import EXIT_FAILED, EXIT_OK

__all__ = ["add_arguments", "is_worker", "supervise", "supervises", "watch_parent"]

log = logging.getLogger("xdscore")

FIRST_RESTART_DELAY = 0.5
MAX_RESTART_DELAY = 30.0
QUICK_EXIT = 10.0
"""A worker that exits within this many seconds of starting doubles the next delay."""
STOP_TIMEOUT = 10.0
"""Seconds the workers get to exit after SIGTERM or SIGINT before they are killed."""
_SERVING = "xdscore: serving "


def add_arguments(serve: argparse.ArgumentParser) -> None:
    """Register ``--workers`` (and the flag the supervisor gives its workers)."""
    serve.add_argument(
        "--workers",
        type=_count,
        default=1,
        metavar="N",
        help="serve from N processes on the one port (SO_REUSEPORT), each loading and "
        "watching the source itself; the parent restarts a worker that dies (default 1)",
    )
    serve.add_argument("--worker-index", type=int, default=None, help=argparse.SUPPRESS)


def _count(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {text!r}")
    return int(text)


def is_worker(args: argparse.Namespace) -> bool:
    """Whether this process is a worker started by a supervisor."""
    return getattr(args, "worker_index", None) is not None


def supervises(args: argparse.Namespace) -> bool:
    """Whether this process should supervise workers rather than serve itself."""
    return not is_worker(args) and getattr(args, "workers", 1) > 1


async def watch_parent(*, interval: float = 1.0) -> None:
    """In a worker: once the supervisor is gone, stop as on SIGTERM."""
    parent = os.getppid()
    while os.getppid() == parent:  # noqa: ASYNC110 (no event says that a parent died)
        await anyio.sleep(interval)
    log.warning("the supervisor (pid %d) is gone; stopping", parent)
    os.kill(os.getpid(), signal.SIGTERM)


def _reserve(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` with SO_REUSEPORT that never listens: it holds the
    port (and picks it, for port 0) without taking any connection."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


def _where(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _command(args: argparse.Namespace, index: int, port: int) -> list[str]:
    """The worker's command line: this one again, as worker ``index`` on ``port``."""
    host, _ = args.listen
    extra = ["--workers", "1", "--worker-index", str(index), "--listen", _where(host, port)]
    if args.admin is not None:
        admin_host, admin_port = args.admin
        extra += ["--admin", _where(admin_host, admin_port + index if admin_port else 0)]
    return [sys.executable, "-m", "xdscore", *args.argv, *extra]


@attrs.define(eq=False)
class _Worker:
    index: int
    command: list[str]
    process: anyio.abc.Process | None = None
    served: bool = False
    """Whether it ever printed its serving line."""
    serving: bool = False
    """Whether its current process printed it (and so handles signals)."""


@attrs.define(eq=False)
class _Supervisor:
    workers: list[_Worker]
    stopping: bool = False
    serving_line: str | None = None
    changed: anyio.Event = attrs.field(factory=anyio.Event)
    failure: int | None = None
    """The exit status of a worker that failed before it ever served."""

    def signal(self) -> None:
        self.changed.set()
        self.changed = anyio.Event()

    def told_to_stop(self) -> bool:
        return self.stopping

    def all_served(self) -> bool:
        return all(worker.served for worker in self.workers)

    def send(self, signum: int, *, starting_too: bool = False) -> None:
        """Send ``signum`` to the workers that serve (a starting one has no handler yet:
        a SIGHUP would kill it, and it loads the source afresh anyway)."""
        for worker in self.workers:
            process = worker.process
            if process is None or process.returncode is not None:
                continue
            if worker.serving or starting_too:
                with contextlib.suppress(ProcessLookupError):
                    process.send_signal(signal.Signals(signum))

    async def keep(self, worker: _Worker) -> None:
        """Run ``worker``, restarting it when it dies, until told to stop."""
        delay = FIRST_RESTART_DELAY
        while not self.stopping:
            started = time.monotonic()
            process = await anyio.open_process(
                worker.command,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=None,
                start_new_session=True,  # a terminal's Ctrl-C reaches the parent only
            )
            worker.process, worker.serving = process, False
            assert process.stdout is not None
            await self._pass_on(worker, BufferedByteReceiveStream(process.stdout))
            status = await process.wait()
            if self.told_to_stop():
                return
            if not worker.served:
                log.error(
                    "worker %d (pid %d) failed as it started: status %s",
                    worker.index,
                    process.pid,
                    status,
                )
                self.failure = status or EXIT_FAILED
                self.signal()
                return
            lived = time.monotonic() - started
            if lived >= QUICK_EXIT:
                delay = FIRST_RESTART_DELAY
            log.warning(
                "worker %d (pid %d) exited with status %s after %.1f s; restarting it in %.1f s",
                worker.index,
                process.pid,
                status,
                lived,
                delay,
            )
            await anyio.sleep(delay)
            delay = min(delay * 2, MAX_RESTART_DELAY)

    async def _pass_on(self, worker: _Worker, out: BufferedByteReceiveStream) -> None:
        """Read the worker's stdout: note its serving line, pass the rest on, tagged."""
        while True:
            try:
                raw = await out.receive_until(b"\n", 65536)
            except (anyio.EndOfStream, anyio.IncompleteRead, anyio.DelimiterNotFound):
                return
            line = raw.decode(errors="replace")
            if line.startswith(_SERVING):
                if worker.served:
                    log.info("worker %d (pid %s) serves again", worker.index, _pid(worker))
                worker.served = worker.serving = True
                if self.serving_line is None:
                    self.serving_line = line
                self.signal()
                continue
            text = line.removeprefix("xdscore: ")
            print(f"xdscore: worker {worker.index}: {text}", flush=True)

    async def stop(self, signum: int) -> None:
        """Forward ``signum`` and wait for the workers to exit; kill the slow ones."""
        self.stopping = True
        self.send(signum, starting_too=True)
        with anyio.move_on_after(STOP_TIMEOUT):
            for worker in self.workers:
                if worker.process is not None:
                    await worker.process.wait()
        for worker in self.workers:
            process = worker.process
            if process is not None and process.returncode is None:
                log.warning(
                    "worker %d (pid %d) did not stop; killing it", worker.index, process.pid
                )
                process.kill()
                await process.wait()


def _pid(worker: _Worker) -> str:
    return str(worker.process.pid) if worker.process is not None else "?"


async def supervise(args: argparse.Namespace) -> int:
    """Run ``args.workers`` workers on one port until SIGTERM or SIGINT; the exit status."""
    host, port = args.listen
    try:
        holder = _reserve(host, port)
    except OSError as exc:
        print(f"xdscore: cannot listen on {host}:{port}: {exc.strerror}", file=sys.stderr)
        return EXIT_FAILED
    with holder:
        bound = int(holder.getsockname()[1])
        supervisor = _Supervisor(
            [_Worker(i, _command(args, i, bound)) for i in range(args.workers)]
        )
        wanted = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
        with anyio.open_signal_receiver(*wanted) as signals:
            async with anyio.create_task_group() as group:
                for worker in supervisor.workers:
                    group.start_soon(supervisor.keep, worker)
                group.start_soon(_announce, supervisor, args.workers)
                async for signum in signals:
                    if signum == signal.SIGHUP:
                        log.info("received SIGHUP, passing it on to the workers")
                        supervisor.send(signum)
                        continue
                    log.info("received %s, stopping the workers", signal.Signals(signum).name)
                    await supervisor.stop(signum)
                    break
                group.cancel_scope.cancel()
    return EXIT_OK if supervisor.failure is None else supervisor.failure


async def _announce(supervisor: _Supervisor, count: int) -> None:
    """Print the serving line once every worker serves; on a start-up failure, stop."""
    while not supervisor.all_served() and supervisor.failure is None:
        await supervisor.changed.wait()
    if supervisor.failure is not None:
        os.kill(os.getpid(), signal.SIGTERM)  # the signal loop stops the others
        return
    assert supervisor.serving_line is not None
    print(supervisor.serving_line, flush=True)
    pids = ", ".join(_pid(worker) for worker in supervisor.workers)
    log.info("%d workers serving (pids %s)", count, pids)
