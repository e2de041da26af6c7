"""``xdscore wait``: has a revision reached every proxy? (and ``apply --wait``, which waits
for the revision it wrote).

It asks every replica's admin endpoint at once (``GET /revision?id=ID``) where the
revision stands, every `POLL_SECONDS`, until on every replica each connected proxy holds it
or rejected it, or the timeout passes. A replica that has not adopted the revision yet (404)
is asked again: it may still be loading it. The waiting itself is pure bookkeeping over the
answers (`verdict`), tested without processes.

Exit status: 0 when every proxy on every replica holds the revision; 1 when a proxy
rejected it, did not answer in time, or a replica never adopted it or could not be asked;
2 for a bad command line.
"""

from __future__ import annotations

import argparse
import http.client
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import attrs

from ..config import DEFAULT_RELOAD_TIMEOUT, ConfigError, load_directory_async
from ..etcd import DEFAULT_PREFIX, EtcdError
from ..etcd._client import EtcdClient
from ..etcd._replicas import read_replicas
from ._common import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    address,
    connect_etcd,
    directory_problem,
    duration,
)

__all__ = [
    "POLL_SECONDS",
    "Answer",
    "Verdict",
    "add_parser",
    "add_wait_flags",
    "registered_admins",
    "render",
    "run",
    "verdict",
    "wait_for",
]

POLL_SECONDS = 0.1
"""How often each replica is asked."""
_SHOWN = 20
"""Proxies named per state; the counts are always given."""


@attrs.frozen
class Answer:
    """One replica's last answer: its ``/revision`` document, or why there is none."""

    admin: str
    document: dict[str, Any] | None = None
    problem: str = ""
    """Why there is no document (unreachable, no such revision yet, ...)."""


@attrs.frozen
class Verdict:
    """Where the revision stands over every replica asked."""

    revision: str
    done: bool
    """Waiting longer changes nothing: every replica answered and none has a proxy pending."""
    converged: bool
    """Every proxy on every replica holds it."""
    lines: tuple[str, ...]


def verdict(revision: str, answers: Sequence[Answer]) -> Verdict:
    """Judge the replicas' answers about ``revision`` (pure)."""
    done = converged = True
    lines: list[str] = []
    held = changed = 0
    label = ""
    for answer in answers:
        document = answer.document
        if document is None:
            done = converged = False
            lines.append(f"REPLICA  {answer.admin}: {answer.problem}")
            continue
        label = label or document.get("label", "")
        replica = document.get("replica", "?")
        held += document.get("acked", 0)
        changed += document.get("changed", 0)
        if document.get("pending"):
            done = False
        if not document.get("converged"):
            converged = False
        for state in ("nacked", "pending"):
            proxies = [p for p in document.get("proxies", ()) if p["state"] == state]
            for proxy in proxies[:_SHOWN]:
                lines.append(_proxy_line(state, proxy, replica))
            if len(proxies) > _SHOWN:
                lines.append(
                    f"{state.upper():<8} ... and {len(proxies) - _SHOWN} more on {replica}"
                )
        left = document.get("left", [])
        if left:
            more = document.get("left_count", len(left)) - len(left)
            names = ", ".join(left) + (f" and {more} more" if more > 0 else "")
            lines.append(f"LEFT     {names} (replica {replica}): disconnected before holding it")
    head = f"revision {revision}" + (f" ({label})" if label else "")
    if converged:
        summary = f"{head}: every proxy holds it ({changed} changed by it)"
    elif done:
        summary = f"{head}: NOT EVERY PROXY HOLDS IT"
    else:
        summary = f"{head}: not every proxy holds it yet"
    return Verdict(revision, done, converged, (summary, *lines))


def _proxy_line(state: str, proxy: dict[str, Any], replica: str) -> str:
    where = f"{proxy['node']} (replica {replica})"
    nack = proxy.get("nack")
    if state == "nacked" and nack is not None:
        rejected = [
            f"{r['type']} {r['name']}" + (f" from {r['source']}" if r.get("source") else "")
            for r in nack.get("resources", ())
        ]
        what = ", ".join(rejected) or f"a {nack['type']} response"
        return f"NACKED   {where}: rejected {what}: {nack['message']}"
    unsynced = ", ".join(proxy.get("unsynced", ())) or "not settled"
    return f"PENDING  {where}: has not answered ({unsynced})"


def render(outcome: Verdict, answers: Sequence[Answer], fmt: str) -> str:
    """The text (or JSON) printed for the outcome."""
    if fmt == "json":
        return json.dumps(
            {
                "revision": outcome.revision,
                "converged": outcome.converged,
                "done": outcome.done,
                "replicas": [
                    {"admin": a.admin, "problem": a.problem, "status": a.document} for a in answers
                ],
            },
            indent=1,
        )
    return "\n".join(outcome.lines)


def _get(host: str, port: int, path: str, timeout: float) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


async def _ask(admin: tuple[str, int], revision: str, timeout: float) -> Answer:
    host, port = admin
    name = f"{host}:{port}"
    path = f"/revision?id={revision}" if revision else "/revision"
    try:
        status, body = await anyio.to_thread.run_sync(_get, host, port, path, timeout)
    except (OSError, http.client.HTTPException) as exc:
        return Answer(name, problem=f"cannot be asked: {str(exc) or type(exc).__name__}")
    if status == 404:
        what = f"revision {revision}" if revision else "any revision"
        return Answer(name, problem=f"has not adopted {what}")
    if status != 200:
        first = body.decode(errors="replace").strip().splitlines()[:1]
        return Answer(name, problem=f"HTTP {status} {' '.join(first)}".rstrip())
    try:
        document = json.loads(body)
    except ValueError as exc:
        return Answer(name, problem=f"answered with something other than JSON: {exc}")
    return Answer(name, document)


async def _ask_all(
    admins: Sequence[tuple[str, int]], revision: str, timeout: float
) -> list[Answer]:
    """Every replica asked at once; the answers in the order of ``admins``."""
    answers: list[Answer | None] = [None] * len(admins)

    async def ask(index: int) -> None:
        answers[index] = await _ask(admins[index], revision, timeout)

    async with anyio.create_task_group() as group:
        for index in range(len(admins)):
            group.start_soon(ask, index)
    return [answer for answer in answers if answer is not None]


async def wait_for(
    admins: Sequence[tuple[str, int]],
    revision: str,
    timeout: float,
    unasked: Sequence[Answer] = (),
) -> tuple[Verdict, list[Answer]]:
    """Ask every replica until the revision is done everywhere or ``timeout`` passes;
    ``revision`` "" takes each replica's newest (then the first one's id for the rest).
    ``unasked``: replicas that cannot be asked at all (they fail the wait)."""
    deadline = time.monotonic() + timeout
    while True:
        left = max(0.5, deadline - time.monotonic())
        asked = await _ask_all(admins, revision, min(left, 5.0))
        if not revision:
            revision = next((a.document["id"] for a in asked if a.document), "")
        answers = [*asked, *unasked]
        outcome = verdict(revision or "(none)", answers)
        # Those that cannot be asked at all fail the wait, and are not waited for.
        if verdict(revision, asked).done or time.monotonic() >= deadline:
            return outcome, answers
        await anyio.sleep(POLL_SECONDS)


async def registered_admins(
    client: EtcdClient, prefix: str
) -> tuple[list[tuple[str, int]], list[Answer]]:
    """The admin endpoints of the replicas registered under ``prefix`` (see
    `xdscore.etcd._replicas`), and those registered without one."""
    admins, unasked = [], []
    for entry in await read_replicas(client, prefix):
        if not entry.admin:
            unasked.append(Answer(f"replica {entry.replica} ({entry.xds})", problem=_NO_ADMIN))
            continue
        try:
            admins.append(address(entry.admin))
        except argparse.ArgumentTypeError:
            unasked.append(Answer(entry.admin, problem="registered an address that does not parse"))
    return admins, unasked


_NO_ADMIN = "serves no admin endpoint (serve --admin): it cannot be asked"


def add_wait_flags(parser: argparse.ArgumentParser, *, required: bool) -> None:
    """``--admin`` (repeated) and ``--timeout``: which replicas to ask, for how long."""
    parser.add_argument(
        "--admin",
        type=address,
        action="append",
        required=required,
        metavar="HOST:PORT",
        help="the admin endpoint of a replica (`serve --admin`); repeat it for every replica"
        + ("" if required else " (default: every replica registered under the prefix)"),
    )
    parser.add_argument(
        "--timeout",
        type=duration,
        default=60.0,
        metavar="DURATION",
        help="how long to wait for every proxy to answer (default 60s)",
    )


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``wait`` and its flags."""
    wait = commands.add_parser(
        "wait",
        help="wait until every connected proxy holds a revision (or rejected it)",
        description="Ask each replica's admin endpoint where a revision stands (default: "
        "the newest each adopted) until every proxy connected to it holds it or rejected "
        "it, or the timeout passes. Prints, per proxy that rejected it or did not answer, "
        "its node, its replica, what it rejected and where that came from, and its message. "
        "Exits 0 when every proxy holds it, 1 otherwise.",
    )
    add_wait_flags(wait, required=False)
    wait.add_argument(
        "--etcd",
        metavar="URL",
        help="ask every replica registered under --prefix in this etcd (serve --etcd "
        "registers each); with --admin, those too",
    )
    wait.add_argument(
        "--prefix",
        default=DEFAULT_PREFIX,
        help=f"the key prefix the replicas serve (default {DEFAULT_PREFIX})",
    )
    which = wait.add_mutually_exclusive_group()
    which.add_argument(
        "--revision",
        default="",
        metavar="ID",
        help="the revision id (/status lists them; default: the newest)",
    )
    which.add_argument(
        "--directory",
        type=Path,
        metavar="DIR",
        help="the revision of what DIR holds now, loaded and checked as serve does (after "
        "an edit, the replicas may not have reloaded yet: the newest could be the one before)",
    )
    wait.add_argument("--format", choices=("text", "json"), default="text")


async def run(args: argparse.Namespace) -> int:
    """Run ``wait``; the exit status."""
    revision = args.revision
    if args.directory is not None:
        directory: Path = args.directory
        missing = directory_problem(directory)
        if missing is not None:
            print(f"xdscore: cannot wait for {directory}: {missing}", file=sys.stderr)
            return EXIT_USAGE
        try:
            snapshot = await load_directory_async(directory, timeout=DEFAULT_RELOAD_TIMEOUT)
        except ConfigError as exc:
            print(f"xdscore: cannot wait for {directory}: {exc}", file=sys.stderr)
            return EXIT_FAILED
        revision = snapshot.revision
    admins: list[tuple[str, int]] = list(args.admin or ())
    unasked: list[Answer] = []
    if args.etcd is not None:
        found = await _registered(args.etcd, args.prefix)
        if isinstance(found, int):
            return found
        admins += [admin for admin in found[0] if admin not in admins]
        unasked = found[1]
    if not admins and not unasked:
        where = f"registered under {args.prefix}" if args.etcd else "given"
        print(f"xdscore: no replica to ask: none {where} (give --admin or --etcd)", file=sys.stderr)
        return EXIT_USAGE if args.etcd is None else EXIT_FAILED
    outcome, answers = await wait_for(admins, revision, args.timeout, unasked)
    print(render(outcome, answers, args.format))
    if not outcome.done and not any(a.problem for a in answers):
        print(f"(gave up after {args.timeout:g} s)", file=sys.stderr)
    return EXIT_OK if outcome.converged else EXIT_FAILED


async def _registered(url: str, prefix: str) -> tuple[list[tuple[str, int]], list[Answer]] | int:
    """The registered replicas' admin endpoints, or the exit status when etcd cannot say."""
    client = connect_etcd(url, "cannot find the replicas")
    if isinstance(client, int):
        return client
    try:
        return await registered_admins(client, prefix)
    except EtcdError as exc:
        print(f"xdscore: {exc}", file=sys.stderr)
        return EXIT_FAILED
    finally:
        with anyio.CancelScope(shield=True):
            await client.close()
