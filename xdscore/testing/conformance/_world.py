"""The configuration the suite asks a server to serve, and its forms for each driver.

A `World` is small on purpose, shaped like the workload of the benchmark servers
(so that go-control-plane's peer binary can serve it): clusters ``c_00000``, ``c_00001``,
... fetching their endpoints over ADS; one ``ClusterLoadAssignment`` per cluster with
``endpoints`` endpoints whose port changes with ``epoch``; ``listener_0`` and
``listener_1`` taking ``route_0`` and ``route_1`` over RDS, both route configurations
sending everything to the cluster ``route_to``. ``revision`` changes every cluster (its
connect timeout); ``ttl`` gives ``listener_0`` a TTL. Cases change a world (another
epoch, a cluster added or removed, the routes moved) and a driver makes the server serve
it, or says why it cannot.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import attrs
from google.protobuf import json_format
from google.protobuf.message import Message

from ... import builders
from ...wire._messages import make_resource
from ...wire._resource import Resource

__all__ = ["LISTENER_NAME", "ROUTE_NAME", "World", "cluster_name"]

LISTENER_NAME = "listener_0"
ROUTE_NAME = "route_0"
PAIRS = ((LISTENER_NAME, ROUTE_NAME), ("listener_1", "route_1"))
"""Each listener and the route configuration it takes."""
WRAPPER = "type.googleapis.com/envoy.service.discovery.v3.Resource"
BASE_PORT = 20000


def cluster_name(index: int) -> str:
    """The name of cluster ``index``, as the benchmark servers name it."""
    return f"c_{index:05d}"


@attrs.frozen
class World:
    """One consistent configuration (see the module docstring)."""

    clusters: frozenset[int] = attrs.field(default=frozenset({0, 1, 2}), converter=frozenset)
    endpoints: int = 1
    epoch: int = 0
    route_to: int = 0
    revision: int = 0
    ttl: float | None = None

    def __attrs_post_init__(self) -> None:
        if self.route_to not in self.clusters:
            raise ValueError(f"the routes name cluster {self.route_to}, which the world lacks")

    @property
    def cluster_names(self) -> list[str]:
        return [cluster_name(i) for i in sorted(self.clusters)]

    @property
    def listener_names(self) -> list[str]:
        return [listener for listener, _ in PAIRS]

    @property
    def route_cluster(self) -> str:
        return cluster_name(self.route_to)

    @property
    def connect_timeout(self) -> float:
        """Every cluster's connect timeout in this revision."""
        return 1.0 + self.revision / 10

    @property
    def port(self) -> int:
        """Every endpoint's port in this epoch."""
        return BASE_PORT + self.epoch % 10000

    def bumped(self) -> World:
        """The next epoch: every endpoint set changes, nothing else."""
        return attrs.evolve(self, epoch=self.epoch + 1)

    def evolve(self, **changes: Any) -> World:
        return attrs.evolve(self, **changes)

    def shape(self) -> World:
        """This world at epoch 0: what a reset back to the baseline compares."""
        return attrs.evolve(self, epoch=0)

    def describe(self) -> str:
        text = (
            f"clusters {', '.join(self.cluster_names)}; {self.endpoints} endpoint(s) each on "
            f"port {self.port}; routes -> {self.route_cluster}"
        )
        if self.revision:
            text += f"; cluster revision {self.revision}"
        return text + (f"; listener_0 ttl {self.ttl:g}s" if self.ttl is not None else "")

    def messages(self) -> list[Message]:
        """The resources as protobuf messages (clusters, assignments, listener, route)."""
        found: list[Message] = [
            builders.eds_cluster(name, connect_timeout=self.connect_timeout)
            for name in self.cluster_names
        ]
        found += [
            builders.load_assignment(name, self._endpoints(i))
            for i, name in zip(sorted(self.clusters), self.cluster_names, strict=True)
        ]
        for port, (listener, route) in enumerate(PAIRS, 10000):
            found.append(builders.http_listener(listener, port, route))
            found.append(builders.route_configuration(route, [("/", self.route_cluster)]))
        return found

    def resources(self) -> list[Resource]:
        """The resources as `Resource` values, TTL included, for a cache."""
        return [
            make_resource(m, ttl=self.ttl if _name_of(m) == LISTENER_NAME else None)
            for m in self.messages()
        ]

    def _endpoints(self, index: int) -> list[tuple[str, int]]:
        return [(f"127.0.{index % 250}.{n + 1}", self.port) for n in range(self.endpoints)]

    def documents(self) -> dict[str, list[dict[str, Any]]]:
        """The directory form (the format ``xdscore serve`` reads), by file name."""
        files: dict[str, list[dict[str, Any]]] = {}
        for message in self.messages():
            document = _document(message)
            if self.ttl is not None and _name_of(message) == LISTENER_NAME:
                document = {"@type": WRAPPER, "ttl": f"{self.ttl:g}s", "resource": document}
            kind = type(message).DESCRIPTOR.name
            files.setdefault(f"{kind.lower()}s.json", []).append(document)
        return files

    def write(self, directory: Path) -> None:
        """Write the directory form into ``directory``: each file replaced atomically, files
        of types the world no longer has removed."""
        documents = self.documents()
        for name, content in documents.items():
            _replace(directory / name, json.dumps(content, indent=1))
        for stale in _json_files(directory):
            if stale.name not in documents:
                stale.unlink()


def _name_of(message: Message) -> str:
    name = getattr(message, "name", "") or getattr(message, "cluster_name", "")
    return str(name)


def _document(message: Message) -> dict[str, Any]:
    document: dict[str, Any] = {"@type": "type.googleapis.com/" + message.DESCRIPTOR.full_name}
    document.update(json_format.MessageToDict(message, preserving_proto_field_name=True))
    return document


def _replace(path: Path, text: str) -> None:
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(text)
    os.replace(temporary, path)


def _json_files(directory: Path) -> Iterable[Path]:
    return sorted(p for p in directory.iterdir() if p.suffix == ".json")
