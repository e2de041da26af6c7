"""Run the benchmarks: the side-by-side matrix, or the project's target scenarios.

    python benchmarks/run.py --matrix              # xdscore and go-control-plane, point by point
    python benchmarks/run.py --quick               # a few minutes' subset of the matrix
    python benchmarks/run.py --matrix --peer PATH --point sotw-n100-r1000
    python benchmarks/run.py --matrix --client grpcio   # one client mode only
    python benchmarks/run.py --matrix --python VENV/bin/python  # an installed xdscore's server
    python benchmarks/run.py                       # the target scenarios, a table on stdout
    python benchmarks/run.py --only sotw-n100      # one scenario
    python benchmarks/run.py --server-cmd "..."    # the scenarios against another server

Every run is one ``benchmarks/loadgen.py`` process (server pinned to CPU 0, load generator
to CPU 1) whose JSON report is kept in ``benchmarks/results/``.

The matrix (benchmarks/matrix.py) runs each point with both of the load generator's client
modes, its neutral grpc-core clients (``--client grpcio``, on which issue 32's targets are
judged) and the project's own (``--client h2``), against xdscore's benchmark server (run by
``--python``, by default this interpreter: its xdscore is the one measured, say one that
``pip install .`` installed in a venv), against the same install's pure build too
(``XDSCORE_PURE=1``) where it is compiled, and, when the peer binary is present
(go-control-plane's benchmark server, by default ``../shared/peers/gocp-bench-server``
beside the repository; ``--peer PATH``), against the peer, interleaved point by point with
the first server alternating. After every point it rewrites the block between the markers
in docs/benchmarks.md (``--doc``; ``--quick`` writes no page unless given one) and
``summary.json`` beside the reports. Nothing depends on the
peer: without it, the matrix measures xdscore alone and says so.

The scenarios check the targets the project set itself (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import shlex
import subprocess
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from matrix import (
    CLIENTS,
    ENDPOINTS,
    FULL,
    IDLE,
    MEMORY_CLUSTERS,
    OURS,
    OWN,
    PEER,
    PURE,
    QUICK,
    Figures,
    Outcome,
    Point,
    figures,
)
from matrix_doc import Context, cpu_model, replace_block, section

HERE = Path(__file__).parent
ROOT = HERE.parent
PEER_BINARY = ROOT.parent / "shared" / "peers" / "gocp-bench-server"
DOC = ROOT / "docs" / "benchmarks.md"
SERVER = (
    f"{sys.executable} {HERE / 'xds_server.py'} "
    "--addr {addr} --clusters {clusters} --endpoints {endpoints}"
)
SETTLE_S = 1.0
TIMEOUT_S = 600.0

SCENARIOS = {
    "sotw-n100": {"clients": 100, "protocol": "sotw", "targets": {"update": 0.4}},
    "sotw-n1000": {
        "clients": 1000,
        "protocol": "sotw",
        "targets": {"update": 3.0, "initial": 5.0, "cpu": 3.0, "rss": 600},
    },
    "delta-n1000-one-cla": {
        "clients": 1000,
        "protocol": "delta",
        "changed": 1,
        "targets": {"update": 0.5},
    },
}


def run_scenario(name: str, spec: dict[str, Any], server_cmd: str, pushes: int) -> dict[str, Any]:
    out = HERE / "results" / f"{name}.json"
    out.parent.mkdir(exist_ok=True)
    command = [
        sys.executable,
        str(HERE / "loadgen.py"),
        "--clients", str(spec["clients"]),
        "--clusters", "1000",
        "--endpoints", "10",
        "--pushes", str(pushes),
        "--settle", "2",
        "--json", str(out),
        "--server-cmd", server_cmd,
    ]  # fmt: skip
    if spec["protocol"] == "delta":
        command.append("--delta")
    if spec.get("changed"):
        command += ["--changed", str(spec["changed"])]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    return dict(json.loads(out.read_text()))


def verdict(value: float, target: float | None) -> str:
    if target is None:
        return f"{value}"
    return f"{value} ({'meets' if value <= target else 'misses'} ≤ {target})"


def table(results: dict[str, tuple[dict[str, Any], dict[str, Any]]]) -> str:
    lines = [
        "| scenario | N | initial s | update s (worst push) | median / p99 s "
        "| server CPU s / push | peak RSS MB | load-gen CPU s / push |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, (spec, report) in results.items():
        targets: dict[str, float] = spec["targets"]
        pushes = report["pushes"]
        worst = max(pushes, key=lambda p: p["update_convergence_s"])
        cpu = max(p["server_cpu_s"] for p in pushes)
        lines.append(
            f"| {name} | {report['clients']} "
            f"| {verdict(report['initial_convergence_s'], targets.get('initial'))} "
            f"| {verdict(worst['update_convergence_s'], targets.get('update'))} "
            f"| {worst['client_median_s']} / {worst['client_p99_s']} "
            f"| {verdict(cpu, targets.get('cpu'))} "
            f"| {verdict(report.get('server_peak_rss_mb', 0), targets.get('rss'))} "
            f"| {max(p['loadgen_cpu_s'] for p in pushes)} |"
        )
    return "\n".join(lines)


def run_scenarios(names: Sequence[str], server_cmd: str, pushes: int) -> None:
    results = {}
    for name in names:
        print(f"running {name} ...", file=sys.stderr, flush=True)
        results[name] = (SCENARIOS[name], run_scenario(name, SCENARIOS[name], server_cmd, pushes))
    python = f"{platform.python_implementation()} {platform.python_version()}"
    print(f"machine: {platform.machine()}, {python}")
    print(table(results))


def loadgen_command(
    point: Point, clients: int, pushes: int, server_cmd: str, out: str, client: str = OWN
) -> list[str]:
    """The loadgen invocation for one run, relative to the repository root."""
    command = [
        sys.executable, "benchmarks/loadgen.py",
        "--client", client,
        "--clients", str(clients),
        "--clusters", str(point.clusters),
        "--endpoints", str(ENDPOINTS),
        "--pushes", str(pushes),
        "--settle", str(SETTLE_S),
        "--timeout", str(TIMEOUT_S),
        "--json", out,
    ]  # fmt: skip
    if point.protocol == "delta":
        command.append("--delta")
    return [*command, "--server-cmd", server_cmd]


def shown(command: Sequence[str]) -> str:
    """A loadgen command as a shell line, its server command left to ``$SERVER``."""
    return f'{shlex.join(command[:-1])} "$SERVER"'


def file_tag(server: str) -> str:
    """The server's name in report file names (``NAME`` in the commands)."""
    return server.replace("-", "")


class Matrix:
    """One run of the matrix: the servers, the client modes, where reports go, the page."""

    def __init__(
        self, servers: dict[str, str], clients: Sequence[str], results: Path, doc: Path | None
    ) -> None:
        self.servers = servers
        self.clients = clients
        self.results = results
        self.doc = doc
        self.rows: dict[str, list[tuple[Point, dict[str, Outcome]]]] = {c: [] for c in clients}
        self.idle_rss_mb: dict[str, float] = {}
        results.mkdir(parents=True, exist_ok=True)

    def run(
        self, point: Point, server: str, client: str = OWN, suffix: str = ""
    ) -> dict[str, Any] | str:
        """One loadgen run against ``server``: its report, or why there is none."""
        out = self.results / f"{file_tag(server)}-{client}-{point.name}{suffix}.json"
        out.unlink(missing_ok=True)
        command = loadgen_command(
            point,
            point.clients,
            point.pushes,
            self.servers[server],
            str(out.relative_to(ROOT)),
            client,
        )
        print(f"{server} {client} {point.name}{suffix} ...", file=sys.stderr, flush=True)
        done = subprocess.run(
            command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
        if not out.exists():
            lines = done.stderr.strip().splitlines() or [f"exit status {done.returncode}"]
            return f"failed: {lines[-1][:160]}"
        report: dict[str, Any] = json.loads(out.read_text())
        if report.get("errors"):
            return f"failed: {len(report['errors'])}+ client errors, first: {report['errors'][0]}"
        return report

    def measure_idle(self) -> None:
        """Each server's RSS serving the R = 100 workload to no stream."""
        for server in self.servers:
            report = self.run(IDLE, server)
            if isinstance(report, dict):
                self.idle_rss_mb[server] = report["initial_server_rss_mb"]

    def measure(self, point: Point, index: int, runs: int) -> None:
        """Every run of one point, per client mode the servers interleaved, the first
        alternating by point."""
        order = list(self.servers)
        if index % 2:
            order.reverse()
        for client in self.clients:
            reports: dict[str, list[dict[str, Any]]] = {server: [] for server in self.servers}
            failures: dict[str, str] = {}
            for run in range(runs):
                for server in order:
                    suffix = f"-{run + 1}" if runs > 1 else ""
                    report = self.run(point, server, client, suffix)
                    if isinstance(report, str):
                        failures[server] = report
                    else:
                        reports[server].append(report)
            outcomes: dict[str, Outcome] = {}
            for server in self.servers:
                if server in failures:
                    outcomes[server] = failures[server]
                else:
                    outcomes[server] = figures(reports[server], self.idle_rss_mb.get(server))
            self.rows[client].append((point, outcomes))

    def write(self, context: Context, planned: int) -> str:
        """The block for the page, written into it and into summary.json; returned."""
        block = section(context, self.rows, self.idle_rss_mb, planned)
        if self.doc is not None:
            self.doc.write_text(replace_block(self.doc.read_text(), block))
        summary = {
            "context": dataclasses.asdict(context),
            "idle_rss_mb": self.idle_rss_mb,
            "points": [
                {
                    "point": dataclasses.asdict(point),
                    "client": client,
                    "figures": {
                        server: dataclasses.asdict(o) if isinstance(o, Figures) else o
                        for server, o in outcomes.items()
                    },
                }
                for client, rows in self.rows.items()
                for point, outcomes in rows
            ],
        }
        (self.results / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        return block


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()


def _commit() -> str:
    dirty = _git("status", "--porcelain", "--untracked-files=no")
    return _git("rev-parse", "--short", "HEAD") + (" (with uncommitted changes)" if dirty else "")


def _machine() -> str:
    cpu = cpu_model(Path("/proc/cpuinfo").read_text())
    python = f"{platform.python_implementation()} {platform.python_version()}"
    return f"{cpu}, {os.cpu_count()} cores, {python}, Linux {platform.release()}"


def loaded_build(python: str) -> str:
    """What ``xdscore --version`` says of the xdscore that ``python`` runs the benchmark
    server with (asked from benchmarks/, as the server imports it: an installed xdscore,
    not the clone's, unless the clone is what is installed)."""
    probe = "from xdscore._build import describe, loaded_build; print(describe(loaded_build()))"
    done = subprocess.run(
        [python, "-c", probe], cwd=HERE, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def _build(python: str, build: str) -> str:
    """Which builds of xdscore the benchmark servers ran."""
    where = (
        "this interpreter's xdscore"
        if python == sys.executable
        else "the xdscore installed in the venv of `--python` (`$VENV`)"
    )
    line = f"xdscore ran {where}: {build}."
    if build.startswith("compiled"):
        line += f" {PURE} is the same install on its sources (`XDSCORE_PURE=1`)."
    return line


def _anonymous(text: str, python: str) -> str:
    """``text`` without this machine's paths: the clone is ``.``, its peers ``..``."""
    if python != sys.executable:
        text = text.replace(python, "$VENV/bin/python")
    text = text.replace(sys.executable, "python")
    return text.replace(f"{ROOT}/", "").replace(f"{ROOT.parent}/", "../")


def _invocation() -> str:
    pythonpath = os.environ.get("PYTHONPATH")
    prefix = ""
    if pythonpath:
        prefix = (
            "PYTHONPATH=$PWD "
            if Path(pythonpath).resolve() == ROOT
            else f"PYTHONPATH={pythonpath} "
        )
    return prefix + shlex.join([sys.executable, "benchmarks/run.py", *sys.argv[1:]])


def run_matrix(
    points: Sequence[Point],
    planned: int,
    peer: Path,
    doc: Path | None,
    results: Path,
    runs: int,
    clients: Sequence[str] = CLIENTS,
    python: str = sys.executable,
) -> str:
    """Measure every point (after the no-stream RSS, if a point needs it); the page's block.

    ``planned`` is the size of the whole matrix, so that a part of it says it is a part;
    ``python`` runs xdscore's server (its xdscore is the one measured).
    """
    build = loaded_build(python)
    servers = {OURS: SERVER.replace(str(HERE), "benchmarks").replace(sys.executable, python)}
    if build.startswith("compiled"):
        servers[PURE] = f"env XDSCORE_PURE=1 {servers[OURS]}"
    if peer.is_file() and os.access(peer, os.X_OK):
        servers[PEER] = f"{peer} -addr {{addr}} -clusters {{clusters}} -endpoints {{endpoints}}"
        peer_note = (
            "Both servers were measured by the same load generator in the same run, "
            "interleaved point by point (the first server alternates); the peer is "
            f"go-control-plane's benchmark server, `{peer}`."
        )
    else:
        peer_note = f"No peer binary at `{peer}`: xdscore alone, no ratios."
    peer_note = _anonymous(f"{peer_note} {_build(python, build)}", python)
    started = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    commit, machine, load_start = _commit(), _machine(), os.getloadavg()[0]
    matrix = Matrix(servers, clients, results, doc)
    reports = results.relative_to(ROOT)
    commands = [_invocation()]
    commands += [f"# {name}: SERVER={shlex.quote(cmd)}" for name, cmd in servers.items()]
    commands = [_anonymous(command, python) for command in commands]
    if runs > 1:
        commands.append(f"# each point {runs} times per server, the reports named NAME-...-1 on")

    def note(point: Point, client: str = "CLIENT") -> None:
        out = str(reports / f"NAME-{client}-{point.name}.json")
        command = loadgen_command(point, point.clients, point.pushes, "", out, client)
        line = shown(command).replace("--client CLIENT", '--client "$CLIENT"')
        commands.append(_anonymous(line, python))

    if any(point.clusters == MEMORY_CLUSTERS for point in points):
        note(IDLE, OWN)
        matrix.measure_idle()
    block = ""
    for index, point in enumerate(points):
        note(point)
        matrix.measure(point, index, runs)
        context = Context(
            date=started,
            commit=commit,
            machine=machine,
            peer=peer_note,
            load=f"load average {load_start:.2f} at the start, "
            f"{os.getloadavg()[0]:.2f} after the last point",
            commands=commands,
        )
        block = matrix.write(context, planned)
    return block


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--matrix", action="store_true", help="the side-by-side matrix")
    parser.add_argument("--quick", action="store_true", help="the matrix's small subset")
    parser.add_argument("--only", action="append", choices=sorted(SCENARIOS), help="a scenario")
    parser.add_argument("--peer", type=Path, default=PEER_BINARY, help="the peer server binary")
    parser.add_argument("--point", action="append", help="only these matrix points (by name)")
    parser.add_argument("--runs", type=int, default=1, help="loadgen runs per point and server")
    parser.add_argument(
        "--client",
        action="append",
        choices=CLIENTS,
        help="only these client modes (default: every one, grpcio first)",
    )
    parser.add_argument(
        "--doc", type=Path, help=f"the page to rewrite (default {DOC} for --matrix)"
    )
    parser.add_argument(
        "--python",
        default=sys.executable,
        help="the matrix: the interpreter that runs xdscore's server, and so the xdscore "
        "measured (e.g. a venv made by `pip install .`; default: this one)",
    )
    parser.add_argument("--server-cmd", default=SERVER, help="server for the scenarios")
    parser.add_argument("--pushes", type=int, default=3, help="pushes per scenario")
    args = parser.parse_args()
    if args.only and (args.matrix or args.quick):
        parser.error("--only names a scenario, not a matrix point (--point)")
    if not (args.matrix or args.quick):
        run_scenarios(args.only or list(SCENARIOS), args.server_cmd, args.pushes)
        return
    points: tuple[Point, ...] = QUICK if args.quick else FULL
    planned = len(points)
    if args.point:
        known = {point.name: point for point in points}
        unknown = sorted(set(args.point) - set(known))
        if unknown:
            parser.error(f"unknown points {unknown}; known: {sorted(known)}")
        points = tuple(known[name] for name in args.point)
    doc = args.doc or (None if args.quick else DOC)
    results = HERE / "results" / ("matrix-quick" if args.quick else "matrix")
    clients = tuple(c for c in CLIENTS if c in (args.client or CLIENTS))
    python = str(Path(args.python).absolute())
    block = run_matrix(
        points, planned, args.peer.resolve(), doc, results, args.runs, clients, python
    )
    print(block)


if __name__ == "__main__":
    main()
