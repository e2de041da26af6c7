"""A reconnect storm: N new streams at once while M established proxies keep being pushed to.

    python benchmarks/storm.py --clients 5000 --established 20 --clusters 100 \\
        --server-cmd "python benchmarks/xds_server.py --addr {addr} --clusters {clusters} \\
        --endpoints {endpoints}"

The M established clients connect and converge first. Then all N storm clients open their
streams at once (each its own channel and TCP connection, as after a control plane
restart); a client the server sheds with RESOURCE_EXHAUSTED comes back as Envoy does after
a failed stream (a jittered exponential back-off from 500 ms to 30 s), and not before the
hint the refusal carries. While the storm converges, the server pushes a change every
``--push-every`` seconds (one endpoint set, which every client holds) and the time each
established client takes to ACK it is recorded; ``--push-every 0`` pushes nothing.
The report (JSON) holds the storm's convergence time, how many refusals it took, the
established clients' push latencies (median, p99, max, and each push's with when into the
storm it was made), the server's CPU seconds and peak
RSS, and the load generator's own CPU (a saturated generator is not a slow server).
Clients are those of benchmarks/loadgen.py: the library's client machines and driver.

The storm's clients run in ``--workers`` load-generator processes of their own (children
of this one, all on the generator's core; one process holds one descriptor per client, and
a 20,000-client storm needs more than one process's limit); this process runs only the
established clients, so that the time they take to ACK a push is the server's, not that of
a generator's event loop busy with thousands of storm clients (until 3 December the first
share of the storm ran here, beside them). The children start their clients when told, and
report when theirs have converged (monotonic clock times, which every process on the
machine shares).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from loadgen import Fleet, ServerProcess, _own_cpu, _percentile

from xdscore.server import tune_collector


async def _established_latency(
    fleet: Fleet, server: ServerProcess, endpoints: int, timeout: float
) -> float:
    """Push one changed endpoint set; the time until every established client ACKed it."""
    fleet.arm_push(1)
    set_at = await server.push(f"{fleet.clusters} {endpoints} 1", timeout)
    async with asyncio.timeout(timeout):
        await fleet.all_updated.wait()
    return max(client.updated_at for client in fleet.clients) - set_at


class Child:
    """A load-generator process running part of the storm (``storm.py --child``)."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.report: dict[str, Any] | None = None

    @classmethod
    async def start(cls, target: str, clients: int, clusters: int, name: str) -> Child:
        process = await asyncio.create_subprocess_exec(
            sys.executable, __file__, "--child", target,
            "--clients", str(clients), "--clusters", str(clusters), "--name", name,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        )  # fmt: skip
        child = cls(process)
        assert await child._line() == "READY"
        return child

    async def _line(self) -> str:
        assert self.process.stdout is not None
        return (await self.process.stdout.readline()).decode().strip()

    def tell(self, word: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(f"{word}\n".encode())

    async def converged(self) -> dict[str, Any]:
        """The child's report once its clients have converged."""
        line = await self._line()
        if not line.startswith("CONVERGED "):
            raise RuntimeError(f"a storm child failed: {line!r}")
        self.report = json.loads(line.removeprefix("CONVERGED "))
        return self.report

    async def status(self) -> dict[str, Any]:
        """The child's report now, converged or not (after :meth:`converged` was cancelled)."""
        self.tell("status")
        while not (line := await self._line()).startswith("STATUS "):
            if not line:
                raise RuntimeError("a storm child ended")
        return json.loads(line.removeprefix("STATUS "))

    async def stop(self) -> None:
        if self.process.returncode is None:
            self.tell("quit")
            try:
                async with asyncio.timeout(10):
                    await self.process.wait()
            except TimeoutError:
                self.process.kill()
                await self.process.wait()


async def child(args: argparse.Namespace) -> None:
    """``--child TARGET``: run ``--clients`` storm clients when told ``go``; report
    ``CONVERGED {json}`` once all have converged; stop when told ``quit``."""
    os.sched_setaffinity(0, {1})
    tune_collector()
    fleet = Fleet(args.child, args.clients, args.clusters, delta=False, name=args.name)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    print("READY", flush=True)
    if (await reader.readline()).strip() != b"go":
        return
    own0 = _own_cpu()
    tasks = [asyncio.create_task(fleet.run_client(c)) for c in fleet.clients]

    def summary() -> str:
        return json.dumps(
            {
                "converged_at": time.monotonic(),
                "converged": fleet.converged,
                "refusals": sum(c.refusals for c in fleet.clients),
                "reconnects": sum(c.reconnects for c in fleet.clients),
                "cpu_s": round(_own_cpu() - own0, 3),
                "errors": [c.error for c in fleet.clients if c.error][:5],
            }
        )

    async def report_convergence() -> None:
        await fleet.all_converged.wait()
        print("CONVERGED " + summary(), flush=True)

    tasks.append(asyncio.create_task(report_convergence()))
    try:
        while (await reader.readline()).strip() == b"status":
            print("STATUS " + summary(), flush=True)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    os.sched_setaffinity(0, {1})
    tune_collector()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = ServerProcess(
        args.server_cmd.format(
            addr=f"127.0.0.1:{port}", clusters=args.clusters, endpoints=args.endpoints
        )
    )
    target = await server.start(args.timeout)
    established = Fleet(target, args.established, args.clusters, delta=False, name="established")
    share = args.clients // args.workers
    shares = [share] * (args.workers - 1) + [args.clients - share * (args.workers - 1)]
    children: list[Child] = []
    tasks: list[asyncio.Task[None]] = []
    report: dict[str, Any] = {
        "clients": args.clients,
        "established": args.established,
        "clusters": args.clusters,
        "endpoints": args.endpoints,
    }
    try:
        tasks += [asyncio.create_task(established.run_client(c)) for c in established.clients]
        async with asyncio.timeout(args.timeout):
            await established.all_converged.wait()
        children = [
            await Child.start(target, count, args.clusters, f"storm{n}")
            for n, count in enumerate(shares, 1)
        ]
        cpu0, own0 = server.cpu_seconds(), _own_cpu()
        started = time.monotonic()
        for each in children:
            each.tell("go")
        everyone = asyncio.Event()
        finished: list[float] = []

        async def all_converged() -> None:
            reports = await asyncio.gather(*(each.converged() for each in children))
            finished.extend(report["converged_at"] for report in reports)
            everyone.set()

        tasks.append(asyncio.create_task(all_converged()))
        latencies: list[float] = []
        pushed_at: list[float] = []
        while not everyone.is_set():
            if args.push_every <= 0:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(args.timeout):
                        await everyone.wait()
                break
            try:
                async with asyncio.timeout(args.push_every):
                    await everyone.wait()
            except TimeoutError:
                pushed_at.append(time.monotonic() - started)
                latencies.append(
                    await _established_latency(established, server, args.endpoints, args.timeout)
                )
            if time.monotonic() - started > args.timeout:
                break
        if everyone.is_set():
            reports = [each.report for each in children if each.report is not None]
            report["storm_convergence_s"] = round(max(finished) - started, 3)
        else:
            # Not all converged within --timeout: how many did, and what it cost.
            tasks[-1].cancel()
            reports = [await each.status() for each in children]
            report["storm_convergence_s"] = None
            report["timed_out_after_s"] = round(time.monotonic() - started, 3)
        report["converged_clients"] = sum(each["converged"] for each in reports)
        report["server_cpu_s"] = round(server.cpu_seconds() - cpu0, 3)
        report["loadgen_cpu_s"] = round(
            _own_cpu() - own0 + sum(each["cpu_s"] for each in reports), 3
        )
        report["workers"] = args.workers
        report["refusals"] = sum(each["refusals"] for each in reports)
        report["reconnects"] = sum(each["reconnects"] for each in reports)
        report["pushes_during_storm"] = len(latencies)
        if latencies:
            report["established_push_median_s"] = round(statistics.median(latencies), 3)
            report["established_push_p99_s"] = round(_percentile(latencies, 0.99), 3)
            report["established_push_max_s"] = round(max(latencies), 3)
            report["established_pushes"] = [
                {"at_s": round(at, 2), "latency_s": round(took, 3)}
                for at, took in zip(pushed_at, latencies, strict=True)
            ]
        report["server_peak_rss_mb"] = round(server.peak_rss_mb(), 1)
        report["errors"] = [e for each in reports for e in each["errors"]][:5]
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for each in children:
            await each.stop()
        await server.stop()
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server-cmd")
    parser.add_argument(
        "--workers", type=int, default=1, help="load-generator processes for the storm's clients"
    )
    parser.add_argument("--child", metavar="TARGET", help=argparse.SUPPRESS)
    parser.add_argument("--name", default="storm", help=argparse.SUPPRESS)
    parser.add_argument("--clients", type=int, default=5000)
    parser.add_argument("--established", type=int, default=20)
    parser.add_argument("--clusters", type=int, default=100)
    parser.add_argument("--endpoints", type=int, default=10)
    parser.add_argument("--push-every", type=float, default=0.5)
    parser.add_argument("--timeout", type=float, default=180.0)
    parser.add_argument("--json", help="write the report here too")
    args = parser.parse_args()
    if args.child:
        asyncio.run(child(args))
        return
    if not args.server_cmd:
        parser.error("--server-cmd is required")
    report = asyncio.run(run(args))
    text = json.dumps(report, indent=2)
    if args.json:
        Path(args.json).write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
