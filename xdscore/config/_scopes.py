"""``scopes.yaml``: the scopes of a config directory, read with the directory.

The file sits at the top of the directory; the resource loader skips it. Its form::

    scopes:
    - name: team-a
      nodes: {cluster: team-a}          # cluster, id (a glob), metadata: {key: value}
      egress: ["team-a/*", "shared/*"]  # globs over cluster names
      listeners: ["ingress-*"]          # optional: globs; every listener when absent

The first scope whose selector matches a node is its scope; a node no scope selects sees
everything. A directory without the file has no scopes.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from ..analysis import Report, analyze_scopes
from ..cache._scoped import NodeSelector, Scope, ScopedCache
from ..cache._snapshot import Snapshot
from ..wire._resource import Resource
from ..wire._typeurls import all_types
from ._loader import ConfigError, Problem

__all__ = ["SCOPES_FILE", "load_scopes", "parse_scopes", "reload_scopes", "with_scopes"]

SCOPES_FILE = "scopes.yaml"
"""The name of the scopes file, at the top of a config directory."""

log = logging.getLogger("xdscore.config")

_SCOPE_KEYS = frozenset({"name", "nodes", "egress", "listeners"})
_NODE_KEYS = frozenset({"cluster", "id", "metadata"})


def parse_scopes(data: bytes | str, where: str = SCOPES_FILE) -> list[Scope]:
    """The scopes a ``scopes.yaml`` holds; :class:`ConfigError` says what is wrong."""
    try:
        document = yaml.safe_load(data)
    except yaml.YAMLError as exc:
        raise ConfigError([Problem(where, f"cannot be read: {exc}")]) from None
    if document is None:
        return []
    if not isinstance(document, Mapping) or set(document) - {"scopes"}:
        raise ConfigError([Problem(where, "expected a mapping with one key, 'scopes'")])
    entries = document.get("scopes") or []
    if not isinstance(entries, list):
        raise ConfigError([Problem(where, "'scopes' must be a list")])
    problems: list[Problem] = []
    scopes: list[Scope] = []
    names: set[str] = set()
    for index, entry in enumerate(entries):
        place = f"{where} scopes[{index}]"
        try:
            scope = _scope(entry)
        except _Invalid as exc:
            problems.append(Problem(place, str(exc)))
            continue
        if scope.name in names:
            problems.append(Problem(place, f"a second scope named {scope.name!r}"))
            continue
        names.add(scope.name)
        scopes.append(scope)
    if problems:
        raise ConfigError(problems)
    return scopes


class _Invalid(Exception):
    """One scope is not usable."""


def _strings(value: Any, what: str) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise _Invalid(f"{what} must be a list of strings")
    return tuple(value)


def _scope(entry: Any) -> Scope:
    if not isinstance(entry, Mapping):
        raise _Invalid("a scope must be a mapping")
    unknown = set(entry) - _SCOPE_KEYS
    if unknown:
        raise _Invalid(f"unknown keys {sorted(unknown)}; a scope has {sorted(_SCOPE_KEYS)}")
    name = entry.get("name")
    if not isinstance(name, str) or not name:
        raise _Invalid("a scope needs a 'name'")
    nodes = entry.get("nodes") or {}
    if not isinstance(nodes, Mapping) or set(nodes) - _NODE_KEYS:
        raise _Invalid(f"'nodes' must be a mapping of {sorted(_NODE_KEYS)}")
    for key in ("cluster", "id"):
        if key in nodes and not isinstance(nodes[key], str):
            raise _Invalid(f"nodes.{key} must be a string")
    metadata = nodes.get("metadata") or {}
    if not isinstance(metadata, Mapping):
        raise _Invalid("nodes.metadata must be a mapping")
    selector = NodeSelector(
        cluster=nodes.get("cluster"),
        id=nodes.get("id"),
        metadata={str(k): str(v) for k, v in metadata.items()},
    )
    egress = _strings(entry.get("egress", []), "'egress'")
    listeners = _strings(entry["listeners"], "'listeners'") if "listeners" in entry else ("*",)
    return Scope(name=name, nodes=selector, egress=egress, listeners=listeners)


def load_scopes(directory: str | Path) -> list[Scope]:
    """The scopes of ``directory`` (none without a ``scopes.yaml``)."""
    path = Path(directory) / SCOPES_FILE
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise ConfigError([Problem(str(path), f"cannot be read: {exc}")]) from None
    return parse_scopes(data, str(path))


def reload_scopes(cache: ScopedCache, directory: str | Path) -> bool:
    """Read the directory's scopes again into ``cache``; a file that does not load is
    logged and the scopes being served stay. Whether the scopes were applied."""
    try:
        scopes = load_scopes(directory)
    except ConfigError as exc:
        log.error("refused %s; still serving the last good scopes\n%s", SCOPES_FILE, exc)
        return False
    if list(cache.scopes) != scopes:
        cache.set_scopes(scopes)
        log.info("applied %d scope(s) from %s", len(scopes), Path(directory) / SCOPES_FILE)
    return True


def with_scopes(
    report: Report, directory: str | Path, found: Iterable[tuple[str, Resource]]
) -> Report:
    """``report`` and the findings about the directory's scopes (XDS010 to XDS012);
    :class:`ConfigError` when its ``scopes.yaml`` does not load."""
    scopes = load_scopes(directory)
    if not scopes:
        return report
    snapshot = Snapshot(
        {(r.type_url, r.name): r for _, r in found}.values(),
        types=[info.type_url for info in all_types()],
    )
    where = str(Path(directory) / SCOPES_FILE)
    return Report((*report.diagnostics, *analyze_scopes(scopes, snapshot, where=where)))
