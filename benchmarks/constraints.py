"""Cost of checking Envoy's field constraints (xdscore.wire._constraints, analysis XDS013).

    .venv/bin/python benchmarks/constraints.py [CLUSTERS]

Builds CLUSTERS (default 1,000) static clusters with one endpoint each, their load
assignments, and a route configuration and listener naming every cluster, then times
``violations`` over every message (the descriptor tables already built: the first call of
the process builds them and is timed apart), and ``analyze`` with and without it.
"""

from __future__ import annotations

import sys
import time

from xdscore import Snapshot
from xdscore import builders as b
from xdscore.analysis import analyze
from xdscore.wire import _constraints


def resources(count: int) -> list[object]:
    names = [f"c{i}" for i in range(count)]
    built: list[object] = []
    for name in names:
        built.append(b.eds_cluster(name))
        built.append(b.load_assignment(name, [("10.0.0.1", 8080)]))
    built.append(b.route_configuration("r", [(f"/{n}", n) for n in names]))
    built.append(b.http_listener("l", 10000, "r"))
    return built


def main() -> None:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    messages = resources(count)
    start = time.perf_counter()
    for message in messages[:4] + messages[-2:]:
        list(_constraints.violations(message))  # type: ignore[arg-type]
    cold = time.perf_counter() - start
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for message in messages:
            list(_constraints.violations(message))  # type: ignore[arg-type]
        best = min(best, time.perf_counter() - start)
    snapshot = Snapshot(messages)  # type: ignore[arg-type]
    start = time.perf_counter()
    analyze(snapshot)
    with_checks = time.perf_counter() - start
    print(f"{len(messages)} resources ({count} clusters): constraints {best * 1000:.1f} ms "
          f"({best / len(messages) * 1e6:.1f} us a resource), first-use tables "
          f"{cold * 1000:.1f} ms; analyze in all {with_checks * 1000:.1f} ms")  # fmt: skip


if __name__ == "__main__":
    main()
