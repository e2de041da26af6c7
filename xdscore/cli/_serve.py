"""``xdscore serve DIR``: serve a config directory over xDS, reloading on change."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from pathlib import Path

import anyio

from ..cache import SnapshotCache, same_for_all
from ..config import ConfigError, load_directory, watch_directory
from ..server import XdsServer
from ..transport import AdminApp, GrpclibTransport, serve_admin
from ._common import EXIT_FAILED, EXIT_OK, address

__all__ = ["add_parser", "run"]

log = logging.getLogger("xdscore")


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``serve`` and its flags."""
    serve = commands.add_parser(
        "serve",
        help="serve the Envoy resources in a directory of YAML/JSON files over xDS",
        description="Serve every resource in DIR to every client (ADS and the per-type "
        "services, State-of-the-World and Delta, and CSDS), reloading when files change or "
        "on SIGHUP. An invalid or inconsistent change is refused and the last good snapshot "
        "keeps being served.",
    )
    serve.add_argument("directory", type=Path, metavar="DIR")
    serve.add_argument(
        "--listen",
        type=address,
        default=("127.0.0.1", 18000),
        metavar="HOST:PORT",
        help="address to serve xDS on (default 127.0.0.1:18000; port 0 picks a free one)",
    )
    serve.add_argument(
        "--admin",
        type=address,
        default=None,
        metavar="HOST:PORT",
        help="serve the admin HTTP endpoint (/metrics, /status, /config_dump, /healthz, "
        "/readyz) here; port 0 picks a free one",
    )
    serve.add_argument(
        "--debounce-ms",
        type=int,
        default=300,
        help="reload once the files have been quiet this long: a burst of edits becomes "
        "one snapshot (default 300)",
    )
    serve.add_argument(
        "--max-delay-ms",
        type=int,
        default=3000,
        help="under constant edits, reload at least this often (default 3000)",
    )
    serve.add_argument(
        "--control-plane-id", default="xdscore", help="sent as control_plane.identifier"
    )


async def run(args: argparse.Namespace) -> int:
    """Run ``serve`` until SIGINT or SIGTERM; the exit status."""
    directory: Path = args.directory
    try:
        snapshot = load_directory(directory)
    except ConfigError as exc:
        print(f"xdscore: cannot serve {directory}: {exc}", file=sys.stderr)
        return EXIT_FAILED
    cache = SnapshotCache(group=same_for_all)
    cache.set_snapshot(None, snapshot)
    server = XdsServer(cache, control_plane_id=args.control_plane_id)
    host, port = args.listen
    async with GrpclibTransport(server) as transport, anyio.create_task_group() as group:
        try:
            bound = await transport.start(host, port)
        except OSError as exc:
            print(f"xdscore: cannot listen on {host}:{port}: {exc.strerror}", file=sys.stderr)
            return EXIT_FAILED
        print(f"xdscore: serving {directory} on {host}:{bound}: {snapshot}", flush=True)
        if args.admin is not None:
            await group.start(_admin, server, args.admin)
        group.start_soon(
            lambda: watch_directory(
                directory, cache, quiet_ms=args.debounce_ms, max_delay_ms=args.max_delay_ms
            )
        )
        wanted = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
        with anyio.open_signal_receiver(*wanted) as signals:
            async for signum in signals:
                if signum == signal.SIGHUP:
                    _reload(directory, cache)
                    continue
                log.info("received %s, shutting down", signal.Signals(signum).name)
                break
        group.cancel_scope.cancel()
    return EXIT_OK


async def _admin(
    server: XdsServer,
    where: tuple[str, int],
    *,
    task_status: anyio.abc.TaskStatus[int] = anyio.TASK_STATUS_IGNORED,
) -> None:
    host, port = where
    async with serve_admin(AdminApp(server), host, port) as bound:
        print(f"xdscore: admin endpoint on http://{host}:{bound}/", flush=True)
        task_status.started(bound)
        await anyio.sleep_forever()


def _reload(directory: Path, cache: SnapshotCache) -> None:
    """Reload now (SIGHUP): apply the directory if it loads, else keep the last good one."""
    try:
        snapshot = load_directory(directory)
    except ConfigError as exc:
        log.error("SIGHUP: refused %s; still serving the last good snapshot\n%s", directory, exc)
        return
    cache.set_snapshot(None, snapshot)
    log.info("SIGHUP: applied %s from %s", snapshot, directory)
