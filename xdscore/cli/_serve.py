"""``xdscore serve DIR``: serve a config directory over xDS, reloading on change."""

from __future__ import annotations

import argparse
import contextlib
import logging
import signal
import sys
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path

import anyio
from anyio.streams.memory import MemoryObjectSendStream

from ..cache import Snapshot, SnapshotCache, same_for_all
from ..config import (
    DEFAULT_MAX_CONFIG_BYTES,
    DEFAULT_MAX_FILE_BYTES,
    DEFAULT_RELOAD_TIMEOUT,
    ConfigError,
    load_scopes,
    reload_scopes,
    watch_directory,
)
from ..etcd import DEFAULT_PREFIX
from ..server import (
    LOOPS,
    Rebalancing,
    XdsServer,
    tune_collector,
)
from ..transport import AdminApp, CertificateFiles, GrpclibTransport, Http2Transport, serve_admin
from . import _descriptors, _identity, _workers
from ._common import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    address,
    directory_problem,
    fraction,
    non_negative,
)
from ._common import duration as _duration
from ._common import positive as _positive

__all__ = ["add_parser", "run"]

log = logging.getLogger("xdscore")

TRANSPORTS: dict[str, type[Http2Transport] | type[GrpclibTransport]] = {
    "http2": Http2Transport,
    "grpclib": GrpclibTransport,
}
"""The ``--transport`` choices."""


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``serve`` and its flags."""
    serve = commands.add_parser(
        "serve",
        help="serve the Envoy resources in a directory of YAML/JSON files over xDS",
        description="Serve the resources in DIR (ADS and the per-type services, "
        "State-of-the-World and Delta, and CSDS): to every client, or to each what its scope "
        "in DIR/scopes.yaml makes visible (docs/scopes.md), reloading when files change or "
        "on SIGHUP. An invalid or inconsistent change is refused and the last good snapshot "
        "keeps being served. With --etcd URL instead of DIR, serve what etcd holds under "
        "--prefix, following each revision (see docs/etcd.md).",
    )
    serve.add_argument(
        "directory", type=Path, metavar="DIR", nargs="?", default=None, help="or --etcd URL"
    )
    serve.add_argument(
        "--etcd",
        metavar="URL",
        help="serve the resources etcd holds under --prefix (http://HOST:PORT) instead of a "
        "directory; ready (and listening for xDS) once a revision has loaded",
    )
    serve.add_argument(
        "--prefix",
        default=DEFAULT_PREFIX,
        help=f"with --etcd, the key prefix the resources live under (default {DEFAULT_PREFIX})",
    )
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
        type=non_negative(int),
        metavar="MS",
        default=300,
        help="reload once the files have been quiet this long: a burst of edits becomes "
        "one snapshot (default 300)",
    )
    serve.add_argument(
        "--max-delay-ms",
        type=_positive(int),
        metavar="MS",
        default=3000,
        help="under constant edits, reload at least this often (default 3000)",
    )
    serve.add_argument(
        "--max-file-bytes",
        type=_positive(int),
        default=DEFAULT_MAX_FILE_BYTES,
        metavar="BYTES",
        help="refuse a config file larger than this, without reading it "
        f"(default {DEFAULT_MAX_FILE_BYTES}, 16 MiB)",
    )
    serve.add_argument(
        "--max-config-bytes",
        type=_positive(int),
        default=DEFAULT_MAX_CONFIG_BYTES,
        metavar="BYTES",
        help="refuse a directory whose config files hold more than this together "
        f"(default {DEFAULT_MAX_CONFIG_BYTES}, 64 MiB)",
    )
    serve.add_argument(
        "--reload-timeout",
        type=_positive(float),
        default=DEFAULT_RELOAD_TIMEOUT,
        metavar="SECONDS",
        help="abandon a load (at start-up, on a change or on SIGHUP) that takes longer "
        f"than this; the last good snapshot stays (default {DEFAULT_RELOAD_TIMEOUT:g})",
    )
    serve.add_argument(
        "--control-plane-id", default="xdscore", help="sent as control_plane.identifier"
    )
    serve.add_argument(
        "--max-stream-age",
        type=_duration,
        default=0.0,
        metavar="DURATION",
        help="end each stream (cleanly, status OK) after about this long, jittered by 10%%, "
        "so that proxies spread over replicas: 30m, 90s, 1h (default: never)",
    )
    serve.add_argument(
        "--max-stream-close-fraction",
        type=fraction,
        default=0.01,
        metavar="FRACTION",
        help="with --max-stream-age, end at most this fraction of the open streams a "
        "second, and at least one (default 0.01)",
    )
    _descriptors.add_argument(serve)
    _workers.add_arguments(serve)
    serve.add_argument(
        "--transport",
        choices=sorted(TRANSPORTS),
        default="http2",
        help="the gRPC server: xdscore's own HTTP/2 server (http2, the default) or "
        "grpclib's (grpclib)",
    )
    serve.add_argument(
        "--loop",
        choices=LOOPS,
        default="auto",
        help="the event loop: uvloop's where it is installed (auto, the default: pip install "
        "'xdscore[uvloop]'), uvloop, or asyncio's own",
    )
    _identity.add_arguments(serve)


async def run(args: argparse.Namespace) -> int:
    """Run ``serve`` until SIGINT or SIGTERM; the exit status."""
    if _workers.supervises(args):
        return await _workers.supervise(args)
    if (args.directory is None) == (args.etcd is None):
        print("xdscore: serve needs exactly one of DIR or --etcd URL", file=sys.stderr)
        return EXIT_USAGE
    refused = _descriptors.register(args)
    if refused is not None:
        print(f"xdscore serve: {refused}", file=sys.stderr)
        return EXIT_USAGE
    if args.etcd is not None:
        from ._serve_etcd import run_etcd

        return await run_etcd(args)
    directory: Path = args.directory
    missing = directory_problem(directory)
    if missing is not None:
        print(f"xdscore: cannot serve {directory}: {missing}", file=sys.stderr)
        return EXIT_USAGE
    try:
        security = _identity.security(args)
    except ValueError as exc:
        print(f"xdscore: cannot serve with these TLS settings: {exc}", file=sys.stderr)
        return EXIT_USAGE
    certificates = security.certificates
    # scopes.yaml: each proxy sees what its scope makes visible (docs/scopes.md). Read before
    # the first load (a file that does not load, or selects on a node field the binding
    # leaves free, is refused before any work), then again after each load, as a reload.
    check = _identity.binding_check(security.authorize)
    try:
        scopes = load_scopes(directory)
    except ConfigError as exc:
        print(f"xdscore: cannot serve {directory}: {exc}", file=sys.stderr)
        return EXIT_FAILED
    refused = check(scopes)
    if refused is not None:
        print(f"xdscore: cannot serve {directory}: {refused}", file=sys.stderr)
        return EXIT_USAGE
    cache = SnapshotCache(group=same_for_all)
    scoped = scopes.cache(cache)
    _identity.log_scopes(scopes, security.authorize)

    def scopes_again(_: object) -> None:
        reload_scopes(scoped, directory, check)

    server = XdsServer(
        scoped,
        control_plane_id=args.control_plane_id,
        authorize=security.authorize,
        operators=security.operators,
        rebalancing=Rebalancing(
            max_stream_age=args.max_stream_age, close_fraction=args.max_stream_close_fraction
        ),
    )
    hangups, requests = anyio.create_memory_object_stream[str](8)
    stop = anyio.Event()
    watch = partial(
        watch_directory,
        directory,
        cache,
        quiet_ms=args.debounce_ms,
        max_delay_ms=args.max_delay_ms,
        max_file_bytes=args.max_file_bytes,
        max_config_bytes=args.max_config_bytes,
        reload_timeout=args.reload_timeout,
        stop=stop,
        reload_requests=requests,
        on_applied=scopes_again,
    )
    async with (
        _signals() as signals,  # before the serving line: a signal right after it stops cleanly
        hangups,
        requests,
        anyio.create_task_group() as watching,
    ):
        try:
            # The first load (in a child process, like every later reload, with the same
            # limits and timeout) sets the snapshot; then the watcher follows the files.
            snapshot: Snapshot = await watching.start(watch)
        except ConfigError as exc:
            print(f"xdscore: cannot serve {directory}: {exc}", file=sys.stderr)
            watching.cancel_scope.cancel()
            return EXIT_FAILED
        scopes_again(snapshot)  # an edit made while the directory loaded
        tune_collector()  # the first snapshot is loaded: see docs/limits.md
        status = await _serve(args, server, certificates, snapshot, signals, hangups, stop)
        watching.cancel_scope.cancel()
    return status


async def _serve(
    args: argparse.Namespace,
    server: XdsServer,
    certificates: CertificateFiles | None,
    snapshot: Snapshot,
    signals: AsyncIterator[int],
    hangups: MemoryObjectSendStream[str],
    stop: anyio.Event,
) -> int:
    """Listen, and serve until SIGINT or SIGTERM (passing SIGHUP on as a reload request);
    the exit status."""
    host, port = args.listen
    async with TRANSPORTS[args.transport](server) as transport, anyio.create_task_group() as group:
        context = certificates.context if certificates is not None else None
        try:
            bound = await transport.start(
                host, port, ssl_context=context, reuse_port=_workers.is_worker(args)
            )
        except OSError as exc:
            print(f"xdscore: cannot listen on {host}:{port}: {exc.strerror}", file=sys.stderr)
            return EXIT_FAILED
        print(f"xdscore: serving {args.directory} on {host}:{bound}: {snapshot}", flush=True)
        if certificates is None:
            log.warning(
                "serving in plaintext: any client that can connect to %s:%d reads every "
                "resource, secrets included; use --tls-cert, --tls-key and --client-ca",
                host,
                bound,
            )
        if certificates is not None:
            group.start_soon(lambda: certificates.watch(stop=stop))
        if _workers.is_worker(args):
            group.start_soon(_workers.watch_parent)
        if args.admin is not None and not await _start_admin(group, server, args.admin):
            group.cancel_scope.cancel()
            return EXIT_FAILED
        async for signum in signals:
            if signum == signal.SIGHUP:
                try:
                    hangups.send_nowait("SIGHUP")
                except anyio.WouldBlock:
                    log.warning("SIGHUP: reloads already requested; this one is ignored")
                continue
            log.info("received %s, shutting down", signal.Signals(signum).name)
            break
        stop.set()
        group.cancel_scope.cancel()
    return EXIT_OK


@contextlib.asynccontextmanager
async def _signals() -> AsyncIterator[AsyncIterator[int]]:
    """SIGINT, SIGTERM and SIGHUP as they arrive, from now on."""
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM, signal.SIGHUP) as signals:
        yield signals


async def _start_admin(
    group: anyio.abc.TaskGroup, server: XdsServer, where: tuple[str, int]
) -> bool:
    """Start the admin endpoint in ``group``; False (and one line on stderr) if it cannot
    listen."""
    try:
        await group.start(_admin, server, where)
    except OSError as exc:
        host, port = where
        print(f"xdscore: cannot serve the admin endpoint on {host}:{port}: {exc}", file=sys.stderr)
        return False
    return True


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
