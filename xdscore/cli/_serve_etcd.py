"""``xdscore serve --etcd URL``: serve what etcd holds under a prefix.

The admin endpoint starts at once (``/healthz`` 200, ``/readyz`` 503); the xDS transport
does not listen until the first revision has been applied, so before that a proxy's
connection is refused and it retries (no stream is ever served an empty state). From then
on the process is ready and stays so while etcd is down: the last good revision keeps
being served.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys

import anyio

from ..cache import SnapshotCache, same_for_all
from ..etcd import EtcdSource
from ..server import Rebalancing, XdsServer, tune_collector
from ..transport import CertificateFiles
from . import _identity, _workers
from ._common import EXIT_FAILED, EXIT_OK, EXIT_USAGE, connect_etcd
from ._serve import TRANSPORTS, _start_admin

__all__ = ["run_etcd"]

log = logging.getLogger("xdscore")


async def run_etcd(args: argparse.Namespace) -> int:
    """Run ``serve --etcd`` until SIGINT or SIGTERM; the exit status."""
    try:
        security = _identity.security(args)
    except ValueError as exc:
        print(f"xdscore: cannot serve with these TLS settings: {exc}", file=sys.stderr)
        return EXIT_USAGE
    client = connect_etcd(args.etcd, "cannot serve from etcd")
    if isinstance(client, int):
        return client
    cache = SnapshotCache(group=same_for_all)
    source = EtcdSource(client, cache, prefix=args.prefix)
    server = XdsServer(
        cache,
        control_plane_id=args.control_plane_id,
        authorize=security.authorize,
        operators=security.operators,
        # The flags that serve's other options add, when present.
        rebalancing=Rebalancing(
            max_stream_age=getattr(args, "max_stream_age", 0.0),
            close_fraction=getattr(args, "max_stream_close_fraction", 0.01),
        ),
        catch_up=source,
    )
    tune_collector()  # the first snapshot is loaded: see docs/limits.md
    if server.metrics is not None:
        source.record_metrics(server.metrics.registry)
    try:
        return await _serve(args, server, source, security.certificates)
    finally:
        with anyio.CancelScope(shield=True):
            await client.close()


async def _serve(
    args: argparse.Namespace,
    server: XdsServer,
    source: EtcdSource,
    certificates: CertificateFiles | None,
) -> int:
    host, port = args.listen
    where = f"{source.prefix} at {args.etcd}"
    transport_kind = TRANSPORTS[getattr(args, "transport", "http2")]
    async with transport_kind(server) as transport, anyio.create_task_group() as group:
        stop = anyio.Event()
        group.start_soon(_until_signalled, group.cancel_scope, stop)
        if _workers.is_worker(args):
            group.start_soon(_workers.watch_parent)
        if args.admin is not None and not await _start_admin(group, server, args.admin):
            group.cancel_scope.cancel()
            return EXIT_FAILED
        group.start_soon(source.run)
        if certificates is not None:
            group.start_soon(lambda: certificates.watch(stop=stop))
        print(f"xdscore: waiting for a revision of {where}", flush=True)
        outcome = await source.wait_loaded()
        context = certificates.context if certificates is not None else None
        try:
            bound = await transport.start(
                host, port, ssl_context=context, reuse_port=_workers.is_worker(args)
            )
        except OSError as exc:
            print(f"xdscore: cannot listen on {host}:{port}: {exc.strerror}", file=sys.stderr)
            group.cancel_scope.cancel()
            return EXIT_FAILED
        print(
            f"xdscore: serving {where} on {host}:{bound}: revision {outcome.revision}, "
            f"{outcome.resources} resource(s)",
            flush=True,
        )
        if certificates is None:
            log.warning(
                "serving in plaintext: any client that can connect to %s:%d reads every "
                "resource, secrets included; use --tls-cert, --tls-key and --client-ca",
                host,
                bound,
            )
        await anyio.sleep_forever()
    return EXIT_OK


async def _until_signalled(scope: anyio.CancelScope, stop: anyio.Event) -> None:
    wanted = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    with anyio.open_signal_receiver(*wanted) as signals:
        async for signum in signals:
            if signum == signal.SIGHUP:
                log.info("SIGHUP: nothing to reload, etcd is watched")
                continue
            log.info("received %s, shutting down", signal.Signals(signum).name)
            break
    stop.set()
    scope.cancel()
