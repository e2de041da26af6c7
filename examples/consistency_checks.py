"""Checking a snapshot before serving it: inconsistencies, check_consistency and analyze.

Run it with ``.venv/bin/python examples/consistency_checks.py``; it needs no server and no
Envoy, and asserts what it prints.
"""

from __future__ import annotations

from xdscore import CLUSTER, ENDPOINT, Snapshot, SnapshotCache, SnapshotError, same_for_all
from xdscore import builders as b
from xdscore.analysis import Severity, analyze

listener = b.http_listener("listener_0", 10000, "route_0")
route = b.route_configuration("route_0", [("/", "backend"), ("/old", "retired")])
cluster = b.eds_cluster("backend")

# 1. Snapshot.inconsistencies(): references to a missing resource of a type the snapshot
#    holds. The route names cluster "retired", and the snapshot holds clusters: reported.
#    The cluster's endpoints are not: the snapshot holds no endpoints type at all, so another
#    cache (a MuxCache with a LinearCache for EDS, say) may serve them.
snapshot = Snapshot([listener, route, cluster])
problems = snapshot.inconsistencies()
for problem in problems:
    print("inconsistency:", problem)
assert [(p.missing_type_url, p.missing_name) for p in problems] == [(CLUSTER, "retired")]

# 2. types= makes the snapshot authoritative for a type it holds nothing of: now it says
#    "there are no endpoints", and the cluster's reference to its endpoints dangles too.
strict = Snapshot([listener, route, cluster], types=[ENDPOINT])
assert strict.resources(ENDPOINT) == {}
assert {p.missing_name for p in strict.inconsistencies()} == {"retired", "backend"}

# 3. A cache with check_consistency=True refuses such a snapshot and keeps the previous one.
cache = SnapshotCache(group=same_for_all, check_consistency=True)
good = Snapshot([listener, b.route_configuration("route_0", [("/", "backend")]), cluster])
cache.set_snapshot(None, good)
try:
    cache.set_snapshot(None, snapshot)
except SnapshotError as exc:
    print("refused:", exc)
assert cache.snapshot(None) is good

# 4. analyze() runs every check of xdscore.analysis (docs/analysis.md), with stable codes.
report = analyze(snapshot)
print(report.to_text())
assert report.has_errors
assert report.codes() == ["XDS001"]
assert not report.at_least(Severity.WARNING).warnings
print("done")
