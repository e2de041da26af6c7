"""Scopes against no scopes, side by side, in one process: bytes, wake-ups, CPU, convergence.

A mesh of CLUSTERS services in NAMESPACES namespaces (a cluster ``ns-i/svc-j`` with EDS
endpoints and a virtual host each, all in one route configuration behind one listener),
and PROXIES proxies spread over one scope per namespace; each scope's egress is its own
namespace plus the shared one (``ns-0``). Each proxy is a SotW ADS server machine driven
the way Envoy drives one (wildcard LDS and CDS, then the endpoints of its clusters and its
route configuration, ACKing every response); its responses are encoded as the transport
would send them (``encode_sotw_response``). There is no gRPC here: what is measured is the
control plane's own work (cache views, the machines, encoding), on this process's CPU.

Measured, scoped and unscoped (a plain SnapshotCache) in turn, on the same mesh:

* initial convergence: every proxy from nothing to holding and having ACKed everything;
* bytes delivered per proxy in that convergence;
* an endpoint change in one namespace (``ns-7``): which proxies are woken, and the CPU
  from the new snapshot to every woken proxy having ACKed what it was sent.

    python benchmarks/scopes.py --clusters 5000 --namespaces 50 --proxies 1000
"""

from __future__ import annotations

import argparse
import gc
import itertools
import json
import time
from collections.abc import Callable

from envoy.config.route.v3 import route_components_pb2, route_pb2

from xdscore import CLUSTER, LISTENER, Resource, builders, make_resource
from xdscore.cache import Cache, Scope, ScopedCache, Snapshot, SnapshotCache, same_for_all
from xdscore.protocol import SotwServer
from xdscore.wire import DiscoveryRequest, Node, all_types, encode_sotw_response, make_node

TYPES = [info.type_url for info in all_types()]


def mesh(clusters: int, namespaces: int) -> tuple[list[Resource], dict[str, Resource]]:
    """The resources, and the endpoints by cluster name (to change one)."""
    per = clusters // namespaces
    out: list[Resource] = []
    endpoints: dict[str, Resource] = {}
    config = route_pb2.RouteConfiguration(name="mesh")
    for ns in range(namespaces):
        for svc in range(per):
            name = f"ns-{ns}/svc-{svc}"
            out.append(make_resource(builders.eds_cluster(name)))
            cla = make_resource(builders.load_assignment(name, [("10.0.0.1", 8000 + svc)]))
            endpoints[name] = cla
            out.append(cla)
            host = route_components_pb2.VirtualHost(
                name=name, domains=[f"svc-{svc}.ns-{ns}", f"svc-{svc}.ns-{ns}.svc"]
            )
            route = host.routes.add()
            route.match.prefix = "/"
            route.route.cluster = name
            config.virtual_hosts.append(host)
    out.append(make_resource(config))
    out.append(make_resource(builders.http_listener("ingress", 15001, "mesh")))
    return out, endpoints


class Proxy:
    """One Envoy-like ADS stream, driven synchronously against a cache."""

    def __init__(self, cache: Cache, node: Node) -> None:
        self.cache = cache
        self.node = node
        counter = itertools.count()
        self.machine = SotwServer(nonce_source=lambda: str(next(counter)))
        self.bytes = 0
        self.responses = 0
        self.woken = 0
        self.watched: dict[str, tuple[str, ...]] = {}
        cache.watch(node, self._wake)

    def _wake(self) -> None:
        self.woken += 1

    def start(self) -> None:
        for type_url in (CLUSTER, LISTENER):
            self._request(DiscoveryRequest(type_url=type_url, node=self.node))

    def _request(self, request: DiscoveryRequest) -> None:
        self.machine.receive(request)

    def run(self) -> None:
        """Poll and ACK until nothing more is sent."""
        while True:
            view = self.cache.view(self.node)
            responses = self.machine.poll(view)
            if not responses:
                return
            for response in responses:
                wire = encode_sotw_response(
                    version_info=response.version_info,
                    nonce=response.nonce,
                    body=response.selection.sotw_body,
                )
                self.bytes += len(wire)
                self.responses += 1
                names = self.watched.get(response.type_url, ())
                self._request(
                    DiscoveryRequest(
                        type_url=response.type_url,
                        version_info=response.version_info,
                        response_nonce=response.nonce,
                        resource_names=names,
                        node=self.node,
                    )
                )
                self._follow(response.selection.resources.values(), response.type_url)

    def _follow(self, resources: object, type_url: str) -> None:
        wanted: dict[str, set[str]] = {}
        if type_url not in (CLUSTER, LISTENER):
            return
        for resource in resources:  # type: ignore[attr-defined]
            for ref in resource.references:
                wanted.setdefault(ref.type_url, set()).add(ref.name)
        for target, names in wanted.items():
            listed = tuple(sorted(names))
            if self.watched.get(target) != listed:
                self.watched[target] = listed
                self._request(
                    DiscoveryRequest(type_url=target, resource_names=listed, node=self.node)
                )


def measure(
    label: str,
    cache_of: Callable[[SnapshotCache], Cache],
    resources: list[Resource],
    endpoints: dict[str, Resource],
    *,
    namespaces: int,
    proxies: int,
    changed_ns: int,
) -> dict[str, object]:
    source = SnapshotCache(group=same_for_all)
    source.set_snapshot(None, Snapshot(resources, types=TYPES))
    cache = cache_of(source)
    fleet = [
        Proxy(cache, make_node(id=f"proxy-{i}", cluster=f"ns-{i % namespaces}"))
        for i in range(proxies)
    ]
    gc.collect()
    cpu, wall = time.process_time(), time.perf_counter()
    for proxy in fleet:
        proxy.start()
    for proxy in fleet:
        proxy.run()
    initial_cpu, initial_wall = time.process_time() - cpu, time.perf_counter() - wall
    initial_bytes = [p.bytes for p in fleet]
    for proxy in fleet:
        proxy.woken = proxy.responses = proxy.bytes = 0
    # One endpoint of one namespace moves: a new snapshot, every other resource the same.
    name = f"ns-{changed_ns}/svc-0"
    moved = make_resource(builders.load_assignment(name, [("10.0.0.2", 9000)]))
    changed = [moved if r is endpoints[name] else r for r in resources]
    gc.collect()
    cpu, wall = time.process_time(), time.perf_counter()
    source.set_snapshot(None, Snapshot(changed, types=TYPES))
    woken = [p for p in fleet if p.woken]
    for proxy in woken:
        proxy.run()
    change_cpu, change_wall = time.process_time() - cpu, time.perf_counter() - wall
    sent = sum(1 for p in fleet if p.responses)
    return {
        "mode": label,
        "initial_convergence_s": round(initial_wall, 3),
        "initial_cpu_s": round(initial_cpu, 3),
        "bytes_per_proxy": round(sum(initial_bytes) / len(fleet)),
        "change_woken_proxies": len(woken),
        "change_proxies_sent_something": sent,
        "change_cpu_s": round(change_cpu, 4),
        "change_wall_s": round(change_wall, 4),
        "change_bytes": sum(p.bytes for p in fleet),
        "scope_views_computed": getattr(cache, "computations", None),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clusters", type=int, default=5000)
    parser.add_argument("--namespaces", type=int, default=50)
    parser.add_argument("--proxies", type=int, default=1000)
    parser.add_argument("--changed-namespace", type=int, default=7)
    args = parser.parse_args()
    resources, endpoints = mesh(args.clusters, args.namespaces)
    scopes = [
        Scope(name=f"ns-{ns}", nodes={"cluster": f"ns-{ns}"}, egress=(f"ns-{ns}/*", "ns-0/*"))  # type: ignore[arg-type]
        for ns in range(args.namespaces)
    ]
    common = {
        "namespaces": args.namespaces,
        "proxies": args.proxies,
        "changed_ns": args.changed_namespace,
    }
    results = [
        measure("unscoped", lambda source: source, resources, endpoints, **common),  # type: ignore[arg-type]
        measure(
            "scoped",
            lambda source: ScopedCache(source, scopes),
            resources,
            endpoints,
            **common,  # type: ignore[arg-type]
        ),
    ]
    unscoped, scoped = results
    ratios = {
        "bytes_fewer_x": round(unscoped["bytes_per_proxy"] / scoped["bytes_per_proxy"], 1),  # type: ignore[operator]
        "change_cpu_fraction": round(scoped["change_cpu_s"] / unscoped["change_cpu_s"], 4),  # type: ignore[operator]
        "initial_faster_x": round(
            unscoped["initial_convergence_s"] / scoped["initial_convergence_s"],  # type: ignore[operator]
            1,
        ),
    }
    print(json.dumps({"args": vars(args), "results": results, "ratios": ratios}, indent=2))


if __name__ == "__main__":
    main()
