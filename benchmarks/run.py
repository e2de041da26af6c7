"""Run the standard benchmark matrix against xdscore's benchmark server; print a table.

    python benchmarks/run.py                       # every scenario, results in benchmarks/results
    python benchmarks/run.py --only sotw-n100      # one scenario
    python benchmarks/run.py --server-cmd "..."    # the same matrix against another server

Each scenario runs benchmarks/loadgen.py in its own process (server pinned to CPU 0, load
generator to CPU 1) and keeps its JSON report. Targets are the ones the project set itself
(docs/benchmarks.md); the table says where each result stands.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent
SERVER = (
    f"{sys.executable} {HERE / 'xds_server.py'} "
    "--addr {addr} --clusters {clusters} --endpoints {endpoints}"
)

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


def run_scenario(name: str, spec: dict[str, object], server_cmd: str, pushes: int) -> dict:
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


def table(results: dict[str, tuple[dict[str, object], dict]]) -> str:
    lines = [
        "| scenario | N | initial s | update s (worst push) | median / p99 s "
        "| server CPU s / push | peak RSS MB | load-gen CPU s / push |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, (spec, report) in results.items():
        targets: dict[str, float] = spec["targets"]  # type: ignore[assignment]
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", choices=sorted(SCENARIOS))
    parser.add_argument("--server-cmd", default=SERVER)
    parser.add_argument("--pushes", type=int, default=3)
    args = parser.parse_args()
    names = args.only or list(SCENARIOS)
    results = {}
    for name in names:
        print(f"running {name} ...", file=sys.stderr, flush=True)
        results[name] = (
            SCENARIOS[name],
            run_scenario(name, SCENARIOS[name], args.server_cmd, args.pushes),
        )
    python = f"{platform.python_implementation()} {platform.python_version()}"
    print(f"machine: {platform.machine()}, {python}")
    print(table(results))


if __name__ == "__main__":
    main()
