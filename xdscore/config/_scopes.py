"""``scopes.yaml``: the scopes of a config directory, read with the directory.

The file sits at the top of the directory; the resource loader skips it. Its form::

    scopes:
    - name: team-a
      nodes: {cluster: team-a}          # cluster, id (a glob), metadata: {key: value}
      egress: ["team-a/*", "shared/*"]  # globs over cluster names
      listeners: ["ingress-*"]          # optional: globs; every listener when absent
    default: nothing                    # or everything, or the name of a scope above

The first scope whose selector matches a node is its scope. A node no scope selects gets
what ``default`` says: no resource (``nothing``, the default when the file lists scopes),
every resource (``everything``), or the named scope's view. A directory without the file,
or a file that lists no scope and gives no ``default``, has no scopes: every node sees
everything.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import attrs
import yaml

from ..analysis import Report, analyze_scopes
from ..cache._interface import Cache
from ..cache._scoped import NodeSelector, Scope, ScopedCache, Unselected
from ..cache._snapshot import Snapshot
from ..wire._resource import Resource
from ..wire._typeurls import all_types
from ._loader import ConfigError, Problem, yaml_problem

__all__ = [
    "SCOPES_FILE",
    "ScopesFile",
    "load_scopes",
    "parse_scopes",
    "reload_scopes",
    "with_scopes",
]

SCOPES_FILE = "scopes.yaml"
"""The name of the scopes file, at the top of a config directory."""

log = logging.getLogger("xdscore.config")

_FILE_KEYS = frozenset({"scopes", "default"})
_SCOPE_KEYS = frozenset({"name", "nodes", "egress", "listeners"})
_NODE_KEYS = frozenset({"cluster", "id", "metadata"})
_RESERVED = {choice.value: choice for choice in Unselected}
"""The words ``default`` takes besides a scope's name, which no scope may have."""


@attrs.frozen
class ScopesFile:
    """What a ``scopes.yaml`` says: its scopes, in order, and what a node that none of them
    selects gets (:class:`~xdscore.cache.Unselected`, or a scope's name)."""

    scopes: tuple[Scope, ...] = ()
    default: Unselected | str = Unselected.EVERYTHING

    def cache(self, source: Cache) -> ScopedCache:
        """A :class:`~xdscore.cache.ScopedCache` over ``source`` serving these scopes."""
        return ScopedCache(source, self.scopes, default=self.default)

    def apply(self, cache: ScopedCache) -> bool:
        """Serve these scopes from ``cache``; whether that changed anything."""
        if cache.scopes == self.scopes and cache.default == self.default:
            return False
        cache.set_scopes(self.scopes, default=self.default)
        return True

    def unbound(self, bound: Iterable[str]) -> list[tuple[str, list[str]]]:
        """Each scope that selects nodes by a field not in ``bound`` (``id``, ``cluster``,
        ``metadata.KEY``), with those fields: a client free to claim them could choose
        its scope."""
        fields = frozenset(bound)
        found = []
        for scope in self.scopes:
            free = sorted(scope.nodes.fields - fields)
            if free:
                found.append((scope.name, free))
        return found


def parse_scopes(data: bytes | str, where: str = SCOPES_FILE) -> ScopesFile:
    """What a ``scopes.yaml`` holds; :class:`ConfigError` says what is wrong."""
    try:
        document = yaml.safe_load(data)
    except yaml.YAMLError as exc:
        raise ConfigError([yaml_problem(where, exc)]) from None
    if document is None:
        return ScopesFile()
    if not isinstance(document, Mapping) or set(document) - _FILE_KEYS:
        raise ConfigError(
            [Problem(where, f"expected a mapping with the keys {sorted(_FILE_KEYS)}")]
        )
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
    default: Unselected | str = Unselected.NOTHING if scopes else Unselected.EVERYTHING
    if "default" in document:
        given = document["default"]
        if isinstance(given, str) and (given in _RESERVED or given in names):
            default = _RESERVED.get(given, given)
        else:
            choices = ", ".join(["nothing", "everything", *(repr(n) for n in sorted(names))])
            problems.append(Problem(f"{where} default", f"must be one of {choices}, not {given!r}"))
    if problems:
        raise ConfigError(problems)
    return ScopesFile(tuple(scopes), default)


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
    if name in _RESERVED:
        raise _Invalid(f"{name!r} is not a scope name: it is a value of 'default'")
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


def load_scopes(directory: str | Path) -> ScopesFile:
    """The scopes of ``directory`` (none without a ``scopes.yaml``)."""
    path = Path(directory) / SCOPES_FILE
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return ScopesFile()
    except OSError as exc:
        raise ConfigError([Problem(str(path), f"cannot be read: {exc.strerror}")]) from None
    return parse_scopes(data, str(path))


def reload_scopes(
    cache: ScopedCache,
    directory: str | Path,
    check: Callable[[ScopesFile], str | None] | None = None,
) -> bool:
    """Read the directory's scopes again into ``cache``; a file that does not load, or
    that ``check`` refuses (it returns why), is logged and the scopes being served stay.
    Whether the scopes were applied."""
    try:
        scopes = load_scopes(directory)
    except ConfigError as exc:
        log.error("refused %s; still serving the last good scopes\n%s", SCOPES_FILE, exc)
        return False
    refused = check(scopes) if check is not None else None
    if refused is not None:
        log.error("refused %s; still serving the last good scopes: %s", SCOPES_FILE, refused)
        return False
    if scopes.apply(cache):
        log.info("applied %d scope(s) from %s", len(scopes.scopes), Path(directory) / SCOPES_FILE)
    return True


def with_scopes(
    report: Report, directory: str | Path, found: Iterable[tuple[str, Resource]]
) -> Report:
    """``report`` and the findings about the directory's scopes (XDS010 to XDS012);
    :class:`ConfigError` when its ``scopes.yaml`` does not load."""
    scopes = load_scopes(directory).scopes
    if not scopes:
        return report
    snapshot = Snapshot(
        {(r.type_url, r.name): r for _, r in found}.values(),
        types=[info.type_url for info in all_types()],
    )
    where = str(Path(directory) / SCOPES_FILE)
    return Report((*report.diagnostics, *analyze_scopes(scopes, snapshot, where=where)))
