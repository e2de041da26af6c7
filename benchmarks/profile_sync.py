"""Profile a server through one initial sync: where its CPU goes while N clients connect.

    python benchmarks/profile_sync.py --clients 1000 --clusters 100 --client grpcio \\
        --profiler py-spy --out sync.txt          # folded stacks (py-spy record -f raw)
    python benchmarks/profile_sync.py --clients 1000 --clusters 100 --client grpcio \\
        --profiler perf --out sync.data           # perf record, DWARF call graphs
    python benchmarks/profile_sync.py --clients 1000 --clusters 100 --client grpcio \\
        --profiler perf --pushes 4 --out push.data # the same over four pushes instead

Starts the server as the load generator does (``--server-cmd``, by default xdscore's
benchmark server; pinned to CPU 0, this process to CPU 1), attaches the profiler to it once
it listens (so the workload's build is not in the profile), runs the fleet until every
client holds the whole configuration, and stops the profiler. Prints the server's CPU
seconds over the sync, the profiler's cost included: compare runs profiled alike, and take
unprofiled figures from benchmarks/loadgen.py. py-spy samples without stopping the server
(``--nonblocking``), or with ``--native`` the compiled modules' C functions too (pausing
the server for each sample, which slows it but leaves its CPU per sample); perf sees the
C functions (a compiled build's whole path) and the interpreter, not Python frames.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from loadgen import LOADGEN_CPUS, Fleet, ServerProcess, pin_threads

HERE = Path(__file__).parent
SERVER = (
    f"{sys.executable} {HERE / 'xds_server.py'} "
    "--addr {addr} --clusters {clusters} --endpoints {endpoints}"
)


def profiler_command(kind: str, pid: int, out: str, native: bool, rate: int) -> list[str]:
    if kind == "perf":
        # DWARF unwinding: the compiled modules' C is built without frame pointers.
        call_graph = ["--call-graph", "dwarf,32768"]
        return ["perf", "record", "-F", str(rate), *call_graph, "-p", str(pid), "-o", out]
    command = ["py-spy", "record", "-p", str(pid), "-r", str(rate), "-f", "raw", "-o", out]
    # (py-spy pauses the process to unwind C frames: --native cannot be non-blocking)
    return command + (["--native"] if native else ["--nonblocking"])


async def profile(args: argparse.Namespace) -> None:
    pin_threads(LOADGEN_CPUS)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = ServerProcess(
        args.server_cmd.format(
            addr=f"127.0.0.1:{port}", clusters=args.clusters, endpoints=args.endpoints
        )
    )
    target = await server.start(60)
    assert server.process is not None
    fleet = Fleet(target, args.clients, args.clusters, args.delta, client=args.client)
    tasks: list[asyncio.Task[None]] = []
    profiler: asyncio.subprocess.Process | None = None
    try:
        if not args.pushes:
            profiler = await attach(args, server.process.pid)
        cpu0, started = server.cpu_seconds(), time.monotonic()
        tasks = [asyncio.create_task(fleet.run_client(c)) for c in fleet.clients]
        async with asyncio.timeout(args.timeout):
            await fleet.all_converged.wait()
        what = "converged"
        if args.pushes:
            profiler = await attach(args, server.process.pid)
            cpu0, started = server.cpu_seconds(), time.monotonic()
            for _ in range(args.pushes):
                fleet.arm_push(args.clusters)
                await server.push(f"{args.clusters} {args.endpoints}", args.timeout)
                async with asyncio.timeout(args.timeout):
                    await fleet.all_updated.wait()
            what = f"took {args.pushes} pushes"
        wall, cpu = time.monotonic() - started, server.cpu_seconds() - cpu0
        assert profiler is not None
        profiler.send_signal(signal.SIGINT)
        await profiler.communicate()
        rounds = max(1, args.pushes)
        print(
            f"{args.clients} {args.client} clients, R = {args.clusters}: {what} in "
            f"{wall:.2f} s, server CPU {cpu:.3f} s "
            f"({cpu / max(1, args.clients) / rounds * 1e3:.3f} ms a stream "
            f"{'a push' if args.pushes else ''}, profiled by {args.profiler}); "
            f"profile in {args.out}"
        )
    finally:
        if profiler is not None and profiler.returncode is None:
            profiler.kill()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await server.stop()


async def attach(args: argparse.Namespace, pid: int) -> asyncio.subprocess.Process:
    """Start the profiler on the server and give it time to attach."""
    command = profiler_command(args.profiler, pid, args.out, args.native, args.rate)
    spy = Path(sys.executable).parent / "py-spy"
    if args.profiler == "py-spy" and spy.exists():
        command[0] = str(spy)
    profiler = await asyncio.create_subprocess_exec(*command, stderr=asyncio.subprocess.PIPE)
    await asyncio.sleep(args.attach_wait)
    if profiler.returncode is not None:
        assert profiler.stderr is not None
        error = (await profiler.stderr.read()).decode().strip()
        raise SystemExit(f"{command[0]} exited: {error}")
    return profiler


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server-cmd", default=SERVER)
    parser.add_argument("--clients", type=int, default=1000)
    parser.add_argument("--clusters", type=int, default=100)
    parser.add_argument("--endpoints", type=int, default=10)
    parser.add_argument("--delta", action="store_true")
    parser.add_argument(
        "--pushes", type=int, default=0, help="profile this many pushes after the sync instead"
    )
    parser.add_argument("--client", choices=("h2", "grpcio"), default="grpcio")
    parser.add_argument("--profiler", choices=("py-spy", "perf"), default="py-spy")
    parser.add_argument("--native", action="store_true", help="py-spy: C frames too")
    parser.add_argument("--rate", type=int, default=1000, help="samples a second")
    parser.add_argument("--attach-wait", type=float, default=1.0)
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    if os.geteuid() != 0 and args.profiler == "perf":
        print("perf may need perf_event_paranoid <= 1 to attach", file=sys.stderr)
    asyncio.run(profile(args))


if __name__ == "__main__":
    main()
