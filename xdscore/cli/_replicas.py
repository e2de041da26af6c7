"""Asking every replica: what ``status``, ``dump`` and ``diff`` share.

They ask one control plane (``--server``), several (``--server`` repeated), or every replica
registered under an etcd prefix (``--etcd URL --prefix P``; ``serve --etcd`` registers
each). The replicas are asked over CSDS at once; each answer keeps the replica it came from
(its registered id, or the address given), and each replica that could not be asked is
named, never skipped. Grouping the answers (`Answers`) is pure.
"""

from __future__ import annotations

import argparse
import ssl
import sys
from collections.abc import Iterable, Sequence

import anyio
import attrs

from .._errors import ProtocolError, StreamClosed
from ..etcd import DEFAULT_PREFIX, EtcdError
from ..etcd._replicas import read_replicas
from ..wire._csds import (
    ClientReport,
    IdMatcher,
    ResourceReport,
    decode_status_response,
    encode_status_query,
)
from ._common import EXIT_FAILED, address, connect_etcd

__all__ = [
    "Answers",
    "Replica",
    "add_server_flags",
    "ask_replicas",
    "fetch_reports",
    "find_replicas",
    "many",
]

_CSDS = "/envoy.service.status.v3.ClientStatusDiscoveryService/StreamClientStatus"


@attrs.frozen
class Replica:
    """One control plane to ask: what the output calls it (its registered id, or the
    address given), its xDS address (``HOST:PORT``), and its admin endpoint ("" when not
    known)."""

    label: str
    xds: str
    admin: str = ""

    def describe(self) -> str:
        """``replica ID at HOST:PORT``, or the address alone when that is its label."""
        return self.xds if self.label == self.xds else f"replica {self.label} at {self.xds}"


@attrs.frozen
class Answers:
    """What every replica asked answered, in the order asked."""

    answered: tuple[tuple[Replica, tuple[ClientReport, ...]], ...] = ()
    unanswered: tuple[str, ...] = ()
    """One line per replica that could not be asked: which, and why."""

    def rows(self) -> list[tuple[str, ClientReport]]:
        """Every client with the label of the replica that reported it (a proxy connected
        to two replicas comes once for each)."""
        return [(replica.label, client) for replica, found in self.answered for client in found]

    def of_node(self, node: str) -> list[tuple[Replica, list[ResourceReport]]]:
        """Per replica with a client of node id ``node``: that client's resources (several
        clients of that id on one replica merged, as one CSDS answer gives them)."""
        out = []
        for replica, found in self.answered:
            clients = [client for client in found if client.node.id == node]
            if clients:
                out.append((replica, [r for client in clients for r in client.resources]))
        return out

    def without(self) -> str:
        """Which replicas lack a node asked for: ``no replica``, or, when some could not be
        asked, ``none of the N replica(s) that answered``."""
        if not self.unanswered:
            return "no replica"
        return f"none of the {len(self.answered)} replica(s) that answered"

    def say_unanswered(self) -> None:
        """Name on stderr each replica that could not be asked."""
        for line in self.unanswered:
            print(f"xdscore: cannot ask {line}", file=sys.stderr)


def add_server_flags(parser: argparse.ArgumentParser, what: str) -> None:
    """``--server`` (repeatable) or ``--etcd``, one of them required, and ``--prefix``;
    ``what`` says what each answer is shown with (``each proxy``, ...)."""
    servers = parser.add_mutually_exclusive_group(required=True)
    servers.add_argument(
        "--server",
        type=address,
        action="append",
        metavar="HOST:PORT",
        help="the control plane's xDS address; repeat it to ask several replicas, "
        f"{what} labelled with the address it came from",
    )
    servers.add_argument(
        "--etcd",
        metavar="URL",
        help="ask every replica registered under --prefix in this etcd (serve --etcd "
        f"registers each), {what} labelled with its replica; a replica that cannot be "
        "asked is named and the exit status is 1",
    )
    parser.add_argument(
        "--prefix",
        default=DEFAULT_PREFIX,
        help=f"with --etcd, the prefix the replicas serve (default {DEFAULT_PREFIX})",
    )


def many(args: argparse.Namespace) -> bool:
    """Whether the command asks replicas (``--etcd``, or ``--server`` more than once),
    rather than one control plane."""
    return args.etcd is not None or len(args.server) > 1


def _joined(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


async def find_replicas(args: argparse.Namespace) -> list[Replica] | int:
    """The replicas the flags of `add_server_flags` name, or, after saying why there are
    none (etcd cannot be asked, nothing registered), the exit status."""
    if args.etcd is None:
        return [Replica(_joined(*server), _joined(*server)) for server in args.server]
    client = connect_etcd(args.etcd, "cannot find the replicas")
    if isinstance(client, int):
        return client
    try:
        entries = await read_replicas(client, args.prefix)
    except EtcdError as exc:
        print(f"xdscore: {exc}", file=sys.stderr)
        return EXIT_FAILED
    finally:
        await client.close()
    if not entries:
        print(
            f"xdscore: no replica is registered under {args.prefix} in {args.etcd} "
            "(each xdscore serve --etcd registers itself once it listens)",
            file=sys.stderr,
        )
        return EXIT_FAILED
    return [Replica(entry.replica, entry.xds, entry.admin) for entry in entries]


async def fetch_reports(
    host: str,
    port: int,
    matchers: Iterable[IdMatcher],
    ssl_context: ssl.SSLContext | None = None,
) -> list[ClientReport]:
    """Ask the CSDS server at ``host:port`` about the clients ``matchers`` select (over TLS
    with ``ssl_context``)."""
    from ..transport.grpclib.client import open_channel

    async with (
        open_channel(host, port, ssl_context=ssl_context) as channel,
        channel.stream(_CSDS) as stream,
    ):
        await stream.send(encode_status_query(matchers))
        data = await stream.receive()
    if data is None:
        raise StreamClosed("the server closed the stream without answering")
    return decode_status_response(data)


async def _ask(
    replica: Replica,
    matchers: Sequence[IdMatcher],
    context: ssl.SSLContext | None,
    timeout: float,
) -> tuple[ClientReport, ...] | str:
    """``replica``'s clients, or why it could not be asked."""
    try:
        host, port = address(replica.xds)
    except argparse.ArgumentTypeError as exc:
        return f"{replica.describe()}: {exc}"
    try:
        with anyio.fail_after(timeout):
            return tuple(await fetch_reports(host, port, matchers, context))
    except TimeoutError:
        return f"{replica.describe()}: no answer in {timeout:g}s"
    except (ProtocolError, StreamClosed, OSError) as exc:
        return f"{replica.describe()}: {str(exc) or type(exc).__name__}"


async def ask_replicas(
    replicas: Sequence[Replica],
    matchers: Sequence[IdMatcher],
    context: ssl.SSLContext | None,
    *,
    timeout: float = 10.0,
) -> Answers:
    """Ask every replica at once about the clients ``matchers`` select."""
    results: list[tuple[ClientReport, ...] | str] = [""] * len(replicas)

    async def ask(index: int) -> None:
        results[index] = await _ask(replicas[index], matchers, context, timeout)

    async with anyio.create_task_group() as group:
        for index in range(len(replicas)):
            group.start_soon(ask, index)
    return Answers(
        answered=tuple(
            (replica, found)
            for replica, found in zip(replicas, results, strict=True)
            if not isinstance(found, str)
        ),
        unanswered=tuple(found for found in results if isinstance(found, str)),
    )
