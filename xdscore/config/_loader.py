"""Reading Envoy resources from a directory of YAML/JSON files into a snapshot.

Files ending in ``.yaml``, ``.yml`` or ``.json`` are read in name order (hidden files and
editor leftovers are skipped). Each YAML document, or the JSON file, holds resources in
Envoy's proto3 JSON mapping, each with its ``@type``, as:

* one resource: ``{"@type": "type.googleapis.com/envoy.config.cluster.v3.Cluster", ...}``;
* a list of resources;
* ``{"resources": [...]}``, the layout of Envoy's own file-based subscriptions.

Every problem in the directory is collected and reported together, each with its file and
document, and a directory with any problem yields no snapshot at all.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import yaml
from google.protobuf import json_format

from ..analysis import DANGLING_REFERENCE, Diagnostic, analyze
from ..cache._snapshot import Snapshot
from ..wire._messages import import_all_protos, make_resource, message_class
from ..wire._resource import Resource
from ..wire._typeurls import all_types, type_info

__all__ = ["ConfigError", "Problem", "load_directory", "read_directory"]

SUFFIXES = (".yaml", ".yml", ".json")

log = logging.getLogger("xdscore.config")


@attrs.frozen
class Problem:
    """One thing wrong with a config directory, and where."""

    where: str
    message: str

    def __str__(self) -> str:
        return f"{self.where}: {self.message}"


class ConfigError(ValueError):
    """The directory cannot be served; ``problems`` lists every reason.

    ``diagnostics`` holds the ERROR diagnostics of :func:`~xdscore.analysis.analyze` among
    them (each is also one of ``problems``, with its location).
    """

    def __init__(self, problems: list[Problem], diagnostics: Sequence[Diagnostic] = ()) -> None:
        self.problems = problems
        self.diagnostics = tuple(diagnostics)
        listing = "\n".join(f"  - {problem}" for problem in problems)
        super().__init__(f"{len(problems)} problem(s) in the config directory:\n{listing}")


def config_files(directory: Path) -> list[Path]:
    """The files :func:`read_directory` reads, in the order it reads them."""
    if not directory.is_dir():
        raise ConfigError([Problem(str(directory), "not a directory")])
    return sorted(
        path
        for path in directory.rglob("*")
        if path.is_file()
        and path.suffix in SUFFIXES
        and not any(part.startswith(".") for part in path.relative_to(directory).parts)
    )


def _documents(path: Path) -> Iterator[tuple[str, Any]]:
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        yield str(path), yaml.safe_load(text) if text.strip() else None
        return
    for index, document in enumerate(yaml.safe_load_all(text)):
        yield f"{path} (document {index + 1})", document


def _entries(where: str, document: Any) -> Iterator[tuple[str, Any]]:
    if document is None:
        return
    if isinstance(document, Mapping) and "@type" not in document and "resources" in document:
        document = document["resources"]
    if isinstance(document, list):
        for index, item in enumerate(document):
            yield f"{where} [{index}]", item
    else:
        yield where, document


class _EntryError(Exception):
    """One entry of a document is not a usable resource."""


def _resource(entry: Any) -> Resource:
    if not isinstance(entry, Mapping):
        raise _EntryError(f"expected a resource mapping with '@type', got {type(entry).__name__}")
    type_url = entry.get("@type")
    if not isinstance(type_url, str) or not type_url:
        raise _EntryError("resource has no '@type'")
    try:
        cls = message_class(type_url)
    except KeyError as exc:
        raise _EntryError(str(exc.args[0])) from None
    body = {key: value for key, value in entry.items() if key != "@type"}
    try:
        message = json_format.ParseDict(body, cls())
    except json_format.ParseError as exc:
        raise _EntryError(f"invalid {type_info(type_url).short_name} resource: {exc}") from None
    try:
        return make_resource(message)
    except (TypeError, ValueError) as exc:
        raise _EntryError(str(exc)) from None


def read_directory(directory: str | Path) -> tuple[list[tuple[str, Resource]], list[Problem]]:
    """Every resource the directory holds (with where it was found), and every problem."""
    root = Path(directory)
    import_all_protos()
    resources: list[tuple[str, Resource]] = []
    problems: list[Problem] = []
    try:
        files = config_files(root)
    except ConfigError as exc:
        return [], exc.problems
    for path in files:
        try:
            documents = list(_documents(path))
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
            problems.append(Problem(str(path), f"cannot be read: {exc}"))
            continue
        for where, document in documents:
            for entry_where, entry in _entries(where, document):
                try:
                    resources.append((entry_where, _resource(entry)))
                except _EntryError as exc:
                    problems.append(Problem(entry_where, str(exc)))
    return resources, problems


def load_directory(directory: str | Path) -> Snapshot:
    """A consistent snapshot of the directory; raises :class:`ConfigError` listing problems.

    The directory is refused when a file does not read or parse, or when
    :func:`~xdscore.analysis.analyze` finds anything of ERROR severity (dangling references,
    duplicate names, ...); its warnings are logged on ``xdscore.config`` and do not refuse it.
    The snapshot is authoritative for every registered type: a directory without listeners
    serves an empty listener set. A directory with no resources at all is refused.
    """
    found, problems = read_directory(directory)
    if not found and not problems:
        # Serving nothing would tell every client to delete every listener and cluster.
        problems.append(Problem(str(directory), "holds no resources; refusing to serve nothing"))
    report = analyze(found, complete=True)
    errors = list(report.errors)
    if problems:
        # A reference may dangle only because its target sits in a file that did not parse:
        # those are reported once the directory reads cleanly.
        errors = [d for d in errors if d.code != DANGLING_REFERENCE]
    problems += [_problem(directory, d) for d in errors]
    if problems:
        raise ConfigError(problems, errors)
    for diagnostic in report.warnings:
        log.warning("%s", diagnostic)
    return Snapshot(
        (resource for _, resource in found), types=[info.type_url for info in all_types()]
    )


def _problem(directory: str | Path, diagnostic: Diagnostic) -> Problem:
    where = diagnostic.where or str(directory)
    return Problem(where, f"{diagnostic.code} {diagnostic.message}")
