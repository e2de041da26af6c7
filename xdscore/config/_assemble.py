"""From the files of a directory as read to what it serves, or why it cannot be served.

Two policies:

* **whole** (:func:`load_directory`, and the first load of ``xdscore serve``): any problem
  refuses the directory;
* **file by file** (every reload of a watched directory): a file with a problem of its own
  is refused alone. It keeps the version last applied (its bytes in ``fallbacks``), or is
  left out if it never had one, and the rest is served. A problem of its own is one that
  the file's bytes decide: it does not read or parse, is over a size bound, holds an entry
  that is not a resource, or holds a resource the analysis finds wrong by itself
  (:data:`LOCAL_CODES`). Problems between files (a reference to a resource no file holds,
  a name two resources share, an alias two resources claim) and a directory over its total
  size still refuse the whole reload: no one file is to blame.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import attrs

from ..analysis import (
    DANGLING_REFERENCE,
    DUPLICATE_DOMAIN,
    FIELD_CONSTRAINT,
    NAME_MISMATCH,
    WRONG_TYPE,
    Diagnostic,
    analyze,
)
from ..cache._snapshot import Snapshot
from ..wire._messages import import_all_protos
from ..wire._resource import Resource
from ..wire._typeurls import all_types
from ._loader import (
    DEFAULT_MAX_CONFIG_BYTES,
    DEFAULT_MAX_FILE_BYTES,
    ConfigError,
    DirectoryData,
    FileData,
    FileResult,
    Problem,
    alias_problems,
    parse_file,
    read_files,
    resource_files,
)

__all__ = ["LOCAL_CODES", "Assembly", "Refusal", "assemble", "load_directory", "load_files"]

log = logging.getLogger("xdscore.config")

LOCAL_CODES = frozenset({WRONG_TYPE, NAME_MISMATCH, DUPLICATE_DOMAIN, FIELD_CONSTRAINT})
"""Analysis errors about one resource by itself: file by file, they refuse its file alone."""


@attrs.frozen
class Refusal:
    """One file refused alone, and what is served in its place."""

    path: Path
    problems: tuple[Problem, ...]
    kept: bool
    """Its last good version is served in its place (else nothing of it is)."""
    held: bool = False
    """It was refused because another process still holds it open for writing."""


@attrs.frozen
class Assembly:
    """What a directory serves: its resources, the files refused alone (file by file only),
    and the analysis's warnings."""

    resources: tuple[Resource, ...]
    refused: tuple[Refusal, ...] = ()
    warnings: tuple[str, ...] = ()

    def snapshot(self) -> Snapshot:
        """The resources as a snapshot, authoritative for every registered type."""
        return Snapshot(self.resources, types=[info.type_url for info in all_types()])


def assemble(contents: DirectoryData, fallbacks: Mapping[Path, bytes] | None = None) -> Assembly:
    """What the directory read as ``contents`` serves; :class:`ConfigError` when nothing
    of it can be. ``fallbacks`` (the bytes of each file as last applied) makes it file by
    file; without, any problem refuses the whole directory (see the module documentation).
    A directory that would serve no resources at all is refused either way."""
    import_all_protos()
    if contents.problems:
        raise ConfigError(list(contents.problems))
    results = [parse_file(file) for file in resource_files(contents)]
    if fallbacks is None:
        return _whole(contents.root, results)
    return _file_by_file(contents.root, results, fallbacks)


def _whole(root: Path, results: Sequence[FileResult]) -> Assembly:
    found = [entry for result in results for entry in result.resources]
    problems = [problem for result in results for problem in result.problems]
    problems += alias_problems(found)
    if not found and not problems:
        problems.append(_nothing(root))
    report = analyze(found, complete=True)
    errors = list(report.errors)
    if problems:
        # A reference may dangle only because its target sits in a file that did not parse:
        # those are reported once the directory reads cleanly.
        errors = [d for d in errors if d.code != DANGLING_REFERENCE]
    problems += [_problem(root, d) for d in errors]
    if problems:
        raise ConfigError(problems, errors)
    return Assembly(
        tuple(resource for _, resource in found),
        warnings=tuple(str(d) for d in report.warnings),
    )


def _file_by_file(
    root: Path, results: Sequence[FileResult], fallbacks: Mapping[Path, bytes]
) -> Assembly:
    refused = {result.path: result for result in results if result.problems}
    kept: dict[Path, FileResult] = {}
    while True:
        for path in refused.keys() - kept.keys():
            if path in fallbacks:
                kept[path] = parse_file(FileData(path, fallbacks[path]))
        usable = [kept[path] for path in refused if path in kept and not kept[path].problems]
        current = [result for result in results if result.path not in refused]
        found = [entry for result in (*current, *usable) for entry in result.resources]
        report = analyze(found, complete=True)
        owners = {where: result.path for result in current for where, _ in result.resources}
        local: dict[Path, list[Diagnostic]] = {}
        for diagnostic in report.errors:
            owner = owners.get(diagnostic.where or "")
            if diagnostic.code in LOCAL_CODES and owner is not None:
                local.setdefault(owner, []).append(diagnostic)
        if not local:
            break
        for path, diagnostics in local.items():  # refuse those files too, and look again
            result = next(result for result in current if result.path == path)
            problems = tuple(_problem(root, d) for d in diagnostics)
            refused[path] = attrs.evolve(result, problems=result.problems + problems)
    refusals = [
        Refusal(path, result.problems, kept=path in kept and not kept[path].problems,
                held=result.held)
        for path, result in sorted(refused.items())
    ]  # fmt: skip
    between = alias_problems(found) + [_problem(root, d) for d in report.errors]
    if not found and not between:
        between.append(_nothing(root))
    if between:
        refusing = [problem for refusal in refusals for problem in refusal.problems]
        raise ConfigError(refusing + between, report.errors)
    return Assembly(
        tuple(resource for _, resource in found),
        tuple(refusals),
        tuple(str(d) for d in report.warnings),
    )


def _nothing(root: Path) -> Problem:
    # Serving nothing would tell every client to delete every listener and cluster.
    return Problem(str(root), "holds no resources; refusing to serve nothing")


def _problem(directory: str | Path, diagnostic: Diagnostic) -> Problem:
    where = diagnostic.where or str(directory)
    return Problem(where, f"{diagnostic.code} {diagnostic.message}")


def load_files(contents: DirectoryData) -> Snapshot:
    """:func:`load_directory` of a directory already read by
    :func:`~xdscore.config._loader.read_files`."""
    assembly = assemble(contents)
    log_warnings(assembly.warnings)
    return assembly.snapshot()


def log_warnings(warnings: Iterable[str]) -> None:
    for warning in warnings:
        log.warning("%s", warning)


def load_directory(
    directory: str | Path,
    *,
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
    max_config_bytes: int = DEFAULT_MAX_CONFIG_BYTES,
) -> Snapshot:
    """A consistent snapshot of the directory; raises :class:`ConfigError` listing problems.

    The directory is refused when a file does not read or parse, exceeds a limit (see
    :func:`~xdscore.config.read_directory`), or when :func:`~xdscore.analysis.analyze`
    finds anything of ERROR severity (dangling references, duplicate names, ...); its
    warnings are logged on ``xdscore.config`` and do not refuse it. The snapshot is
    authoritative for every registered type: a directory without listeners serves an empty
    listener set. A directory with no resources at all is refused. This reads and parses
    on the calling thread: from async code, use
    :func:`~xdscore.config.load_directory_async`.
    """
    contents = read_files(
        directory, max_file_bytes=max_file_bytes, max_config_bytes=max_config_bytes
    )
    return load_files(contents)
