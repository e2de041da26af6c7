"""Reading Envoy resources from a directory of YAML/JSON files into a snapshot.

Files ending in ``.yaml``, ``.yml`` or ``.json`` are read in name order (hidden files and
editor leftovers are skipped). Each YAML document, or the JSON file, holds resources in
Envoy's proto3 JSON mapping, each with its ``@type``, as:

* one resource: ``{"@type": "type.googleapis.com/envoy.config.cluster.v3.Cluster", ...}``;
* a list of resources;
* ``{"resources": [...]}``, the layout of Envoy's own file-based subscriptions.

A resource wrapped in an ``envoy.service.discovery.v3.Resource`` entry takes that entry's
``aliases`` (virtual hosts only, for VHDS) and ``ttl`` (clients that support TTLs drop the
resource when it lapses without a heartbeat).

Every problem in the directory is collected and reported together, each with its file and
document; what the problems refuse (the directory, or the file) is decided in
:mod:`._assemble`.

What a directory may cost is bounded before the expensive work starts: file sizes are
checked from ``stat`` before anything is read (and again while reading), and YAML aliases
are counted, and what they expand to measured, on the composed node graph before anything
is constructed or handed to protobuf's ``json_format`` (where an alias bomb would expand).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import yaml

from ..analysis import Diagnostic
from ..wire._messages import has_own_name, import_all_protos, make_resource, message_class
from ..wire._resource import Resource
from ..wire._typeurls import type_info
from . import _envoy_json
from ._envoy_json import FieldProblems, Located, LocatedList, parse_message

try:
    from yaml import CSafeLoader as _FastLoader
except ImportError:  # PyYAML built without libyaml: the pure-Python loader, same results
    from yaml import SafeLoader as _FastLoader  # type: ignore[assignment]

_LIBYAML = _FastLoader.__name__ == "CSafeLoader"

__all__ = [
    "DEFAULT_MAX_CONFIG_BYTES",
    "DEFAULT_MAX_FILE_BYTES",
    "MAX_YAML_ALIASES",
    "MAX_YAML_ALIAS_NODES",
    "ConfigError",
    "Problem",
    "read_directory",
    "yaml_problem",
]

SUFFIXES = (".yaml", ".yml", ".json")

DEFAULT_MAX_FILE_BYTES = 16 * 1024 * 1024
"""The largest config file read (16 MiB); a larger one is refused without being read."""
DEFAULT_MAX_CONFIG_BYTES = 64 * 1024 * 1024
"""The most bytes a directory's config files may hold together (64 MiB)."""
MAX_YAML_ALIASES = 100
"""The most YAML aliases (``*name``) one file may hold."""
MAX_YAML_ALIAS_NODES = 200_000
"""The most nodes the aliases of one YAML document may add to it once expanded."""

_BETTER_MESSAGE_BYTES = 256 * 1024
"""Up to this size, a file libyaml rejects is parsed again by the pure-Python parser, whose
messages name the offending character and quote the line."""

log = logging.getLogger("xdscore.config")


@attrs.frozen
class Problem:
    """One thing wrong with a config directory, and where."""

    where: str
    message: str
    line: int | None = None
    """The line (1-based) of the file the problem is at, when known."""
    field: str | None = None
    """The field path (snake_case) the problem is about, when there is one."""

    def __str__(self) -> str:
        return f"{self.where}: {self.message}"


def yaml_problem(where: str, error: yaml.YAMLError) -> Problem:
    """What the parser found wrong with the file ``where``, at its line and column (the
    parser's own rendering names no file and quotes the text: it is not repeated)."""
    if not isinstance(error, yaml.MarkedYAMLError) or error.problem_mark is None:
        return Problem(where, f"cannot be read: {error}")
    mark = error.problem_mark
    message = f"line {mark.line + 1}, column {mark.column + 1}: {error.problem}"
    context = error.context_mark
    if error.context and context is not None and context.line != mark.line:
        message += (
            f" ({error.context} that began at line {context.line + 1}, column {context.column + 1})"
        )
    elif error.context:
        message += f" ({error.context})"
    return Problem(where, f"cannot be read: {message}", mark.line + 1)


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


# -- reading the bytes ---------------------------------------------------------------------


@attrs.frozen
class FileData:
    """One config file as read: its bytes, or why they could not be read (``held``: another
    process still holds it open for writing, so what it holds is not read as its content)."""

    path: Path
    data: bytes | None
    error: str | None = None
    held: bool = False


@attrs.frozen
class DirectoryData:
    """A directory's config files as read once, and a hash of all of it.

    ``over_limit`` says the files together are over the size limit for a directory: it is
    refused whatever a second read would find, so a watcher need not wait to read it again.
    """

    root: Path
    files: tuple[FileData, ...]
    problems: tuple[Problem, ...]
    digest: str
    over_limit: bool

    def holding(self, held: Mapping[Path, str]) -> DirectoryData:
        """These files, those in ``held`` (with why) taken as still being written: their
        bytes are dropped, and the digest says so."""
        if not held:
            return self
        files = tuple(
            FileData(file.path, None, held[file.path], held=True) if file.path in held else file
            for file in self.files
        )
        return attrs.evolve(self, files=files, digest=_digest(self.root, files))


def read_files(
    directory: str | Path,
    *,
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
    max_config_bytes: int = DEFAULT_MAX_CONFIG_BYTES,
) -> DirectoryData:
    """The bytes of every config file, within the size limits (checked from ``stat`` first,
    then while reading, for a file that grows in between). A file over ``max_file_bytes``
    is not read (it is a :class:`FileData` with its refusal); files within it that hold
    more than ``max_config_bytes`` together refuse the whole directory."""
    root = Path(directory)
    try:
        paths = config_files(root)
    except ConfigError as exc:
        return DirectoryData(root, (), tuple(exc.problems), _digest(root, ()), False)
    sizes: dict[Path, int] = {}
    files: list[FileData] = []
    for path in paths:
        try:
            size = path.stat().st_size
        except OSError as exc:
            files.append(FileData(path, None, f"cannot be read: {exc}"))
            continue
        if size > max_file_bytes:
            files.append(FileData(path, None, _over_file_limit(size, max_file_bytes)))
        else:
            sizes[path] = size
    total = sum(sizes.values())
    if total > max_config_bytes:
        return _over_total(root, _over_directory_limit(total, max_config_bytes))
    read = 0
    for path in sizes:
        try:
            with path.open("rb") as stream:
                data = stream.read(max_file_bytes + 1)
        except OSError as exc:
            files.append(FileData(path, None, f"cannot be read: {exc}"))
            continue
        if len(data) > max_file_bytes:
            files.append(FileData(path, None, _over_file_limit(len(data), max_file_bytes)))
            continue
        read += len(data)
        if read > max_config_bytes:
            return _over_total(root, _over_directory_limit(read, max_config_bytes, grew=True))
        files.append(FileData(path, data))
    files.sort(key=lambda file: file.path)
    return DirectoryData(root, tuple(files), (), _digest(root, files), False)


def _over_total(root: Path, message: str) -> DirectoryData:
    return DirectoryData(root, (), (Problem(str(root), message),), _digest(root, ()), True)


def _digest(root: Path, files: Sequence[FileData]) -> str:
    """A hash of every file's path and bytes (or why it has none)."""
    digest = hashlib.sha256()
    for file in files:
        name = str(file.path.relative_to(root)).encode("utf-8", "surrogateescape")
        digest.update(len(name).to_bytes(8, "big") + name)
        body = file.data if file.data is not None else (file.error or "").encode()
        digest.update(b"D" if file.data is not None else b"E")
        digest.update(len(body).to_bytes(8, "big") + body)
    return digest.hexdigest()


def _over_file_limit(size: int, limit: int) -> str:
    return (
        f"refused: the file is {size:,} bytes, over the limit of {limit:,} bytes for one "
        "file (raise it with --max-file-bytes, or max_file_bytes=)"
    )


def _over_directory_limit(size: int, limit: int, *, grew: bool = False) -> str:
    held = f"more than {limit:,} bytes (they grew while being read)" if grew else f"{size:,} bytes"
    return (
        f"refused: the config files hold {held}, over the limit of {limit:,} bytes for a "
        "directory (raise it with --max-config-bytes, or max_config_bytes=)"
    )


# -- parsing -------------------------------------------------------------------------------


class _Loader(_FastLoader):
    """The safe loader (libyaml's when available), building mappings and lists that know
    the line of each item."""


def _construct_map(loader: _Loader, node: yaml.MappingNode) -> Iterator[Located]:
    """A mapping with the line of each key; a key tagged ``!ignore`` is dropped with its
    value (as Envoy does), and a key is its text (Envoy's YAML conversion)."""
    data = Located(node.start_mark.line + 1)
    yield data
    loader.flatten_mapping(node)
    for key_node, value_node in node.value:
        if key_node.tag == "!ignore":
            continue
        if isinstance(key_node, yaml.ScalarNode):
            key = key_node.value
        else:
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping", node.start_mark,
                "found a key that is not a scalar", key_node.start_mark,
            )  # fmt: skip
        data[key] = loader.construct_object(value_node)
        data.lines[key] = key_node.start_mark.line + 1


def _construct_seq(loader: _Loader, node: yaml.SequenceNode) -> Iterator[LocatedList]:
    data = LocatedList(node.start_mark.line + 1)
    yield data
    for item in node.value:
        data.append(loader.construct_object(item))
        data.lines.append(item.start_mark.line + 1)


_Loader.add_constructor("tag:yaml.org,2002:map", _construct_map)
_Loader.add_constructor("tag:yaml.org,2002:seq", _construct_seq)


class _YamlLoader(_Loader):
    """:class:`_Loader` for YAML files: plain scalars typed as Envoy's YAML conversion
    (yaml-cpp) types them (see :mod:`._envoy_json`)."""

    def resolve(self, kind: Any, value: Any, implicit: Any) -> Any:
        if kind is yaml.ScalarNode and implicit[0] and value != "<<":
            return _envoy_json.classify_plain(value)
        return super().resolve(kind, value, implicit)  # type: ignore[no-untyped-call]


_YamlLoader.add_constructor(_envoy_json.BOOL_TAG, _envoy_json.construct_bool)
_YamlLoader.add_constructor(_envoy_json.INT_TAG, _envoy_json.construct_int)


class _Bounds(Exception):
    """A document exceeds one of the YAML alias bounds."""

    def __init__(self, where: str, message: str) -> None:
        super().__init__(message)
        self.where = where
        self.message = message


def _children(node: yaml.Node) -> Iterator[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return iter(node.value)
    if isinstance(node, yaml.MappingNode):
        return (item for pair in node.value for item in pair)
    return iter(())


def _check_aliases(root: yaml.Node, where: str, aliases: int) -> int:
    """The file's alias count once ``root`` (a composed document) is added to ``aliases``.

    Walks the node graph once, each node once, computing the size each node expands to
    (an alias counts as the size of what it names, each time it appears): the expansion is
    measured without being done. Raises :class:`_Bounds` past either bound, or on a
    recursive alias.
    """
    sizes: dict[int, int] = {}  # expanded size of each node done, by id
    active: set[int] = set()  # the nodes on the path from the root
    added = 0  # what aliases add: for each, the size of what it names, less itself
    stack: list[list[Any]] = [[root, _children(root), 1]]
    active.add(id(root))
    while stack:
        frame = stack[-1]
        child = next(frame[1], None)
        if child is None:
            stack.pop()
            active.discard(id(frame[0]))
            sizes[id(frame[0])] = frame[2]
            if stack:
                stack[-1][2] += frame[2]
            continue
        key = id(child)
        if key in sizes:
            # A node met again is an alias: composing shares the anchored node.
            aliases += 1
            if aliases > MAX_YAML_ALIASES:
                raise _Bounds(
                    where,
                    f"refused: more than {MAX_YAML_ALIASES} YAML aliases in the file "
                    f"(the alias limit is {MAX_YAML_ALIASES} per file)",
                )
            frame[2] += sizes[key]
            added += sizes[key] - 1
            if added > MAX_YAML_ALIAS_NODES:
                raise _Bounds(
                    where,
                    f"refused: its YAML aliases expand it by more than {MAX_YAML_ALIAS_NODES:,} "
                    f"nodes (the alias expansion limit is {MAX_YAML_ALIAS_NODES:,} nodes per "
                    "document)",
                )
            continue
        if key in active:
            raise _Bounds(
                where, "refused: a YAML alias names a node that contains it (a recursive alias)"
            )
        active.add(key)
        stack.append([child, _children(child), 1])
    return aliases


def _documents(path: Path, data: bytes) -> list[tuple[str, Any]]:
    """The documents of one file, each checked against the alias bounds before it is
    constructed. Raises ``yaml.YAMLError`` (or :class:`_Bounds`) for the whole file."""
    text = data.decode("utf-8")
    is_json = path.suffix == ".json"
    if is_json and not text.strip():
        return []
    # Aliases need anchors: a file without '&' has none, and nothing to check.
    check = b"&" in data
    loader = _Loader(text) if is_json else _YamlLoader(text)
    documents: list[tuple[str, Any]] = []
    aliases = 0
    try:
        for index, node in enumerate(_nodes(loader, is_json), start=1):
            where = str(path) if is_json else f"{path} (document {index})"
            if check:
                aliases = _check_aliases(node, where, aliases)
            documents.append((where, loader.construct_document(node)))
    except yaml.YAMLError as exc:
        raise _better_error(text, is_json) or exc from None
    finally:
        loader.dispose()
    return documents


def _nodes(loader: _Loader, is_json: bool) -> Iterator[yaml.Node]:
    """Each document's composed node graph, one at a time (a JSON file holds one)."""
    if is_json:
        node = loader.get_single_node()
        if node is not None:
            yield node
        return
    while loader.check_node():
        node = loader.get_node()
        if node is not None:
            yield node


def _better_error(text: str, is_json: bool) -> yaml.YAMLError | None:
    """The pure-Python parser's message for a small file libyaml rejected, if it has one."""
    if not _LIBYAML or len(text) > _BETTER_MESSAGE_BYTES:
        return None
    try:
        # Composing only: linear in the text, aliases included (nothing is expanded).
        if is_json:
            yaml.compose(text, Loader=yaml.SafeLoader)
        else:
            for _ in yaml.compose_all(text, Loader=yaml.SafeLoader):
                pass
    except yaml.YAMLError as exc:
        return exc
    except RecursionError:
        return None
    return None


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

    def __init__(self, message: str, problems: Sequence[_envoy_json.FieldProblem] = ()) -> None:
        super().__init__(message)
        self.problems = problems


def _entry_problems(where: str, exc: _EntryError) -> list[Problem]:
    if not exc.problems:
        return [Problem(where, str(exc))]
    return [
        Problem(where, f"{exc}: {problem}", problem.line, problem.path or None)
        for problem in exc.problems
    ]


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
    body = Located.without(entry, "@type")
    try:
        message = parse_message(cls, body, getattr(entry, "line", None))
    except FieldProblems as exc:
        raise _EntryError(
            f"invalid {type_info(type_url).short_name} resource", exc.problems
        ) from None
    if type_url == WRAPPED:
        return _wrapped(message)
    if not has_own_name(type_url):
        raise _EntryError(
            f"{type_info(type_url).short_name} resources have no name of their own: wrap it "
            f"in an {WRAPPED.removeprefix('type.googleapis.com/')} entry and give its 'name'"
        )
    try:
        return make_resource(message)
    except (TypeError, ValueError) as exc:
        raise _EntryError(str(exc)) from None


WRAPPED = "type.googleapis.com/envoy.service.discovery.v3.Resource"
"""An entry of this ``@type`` wraps one resource (its ``resource``) to give it ``aliases``
and a ``ttl``, or a ``name`` when the resource has no name field of its own (``LbEndpoint``,
for LEDS)."""


def _wrapped(wrapper: Any) -> Resource:
    """The resource an ``envoy.service.discovery.v3.Resource`` entry wraps, with its aliases
    and TTL (and its name, for a type without a name field)."""
    where = "envoy.service.discovery.v3.Resource"
    if not wrapper.HasField("resource") or not wrapper.resource.type_url:
        raise _EntryError(f"{where} without its 'resource' (with its '@type')")
    unsupported = [
        field
        for field in ("version", "cache_control", "metadata")
        if (getattr(wrapper, field) if field == "version" else wrapper.HasField(field))
    ]
    if unsupported:
        raise _EntryError(
            f"{where}: {', '.join(repr(f) for f in unsupported)} cannot be given here "
            "(versions are computed from the content; only 'name', 'aliases', 'ttl' and "
            "'resource' are read)"
        )
    ttl = None
    if wrapper.HasField("ttl"):
        ttl = wrapper.ttl.seconds + wrapper.ttl.nanos / 1e9
        if ttl <= 0:
            raise _EntryError(f"{where}: 'ttl' must be positive, not {ttl:g} s")
    type_url = wrapper.resource.type_url
    inner = message_class(type_url)()
    inner.ParseFromString(wrapper.resource.value)
    named = not has_own_name(type_url)
    if named and not wrapper.name:
        raise _EntryError(
            f"{where}: {type_info(type_url).short_name} resources have no name of their own; "
            "give the wrapper's 'name'"
        )
    try:
        resource = make_resource(
            inner, name=wrapper.name if named else None, aliases=tuple(wrapper.aliases), ttl=ttl
        )
    except (TypeError, ValueError) as exc:
        raise _EntryError(str(exc)) from None
    if not named and wrapper.name and wrapper.name != resource.name:
        raise _EntryError(
            f"{where}: 'name' {wrapper.name!r} is not the name of its resource "
            f"({resource.name!r}); leave it out or make them equal"
        )
    if resource.aliases and not type_info(type_url).aliased:
        raise _EntryError(
            f"{where}: aliases are only for virtual hosts (VHDS), not for "
            f"{type_info(type_url).short_name} resources"
        )
    for alias in resource.aliases:
        if not alias:
            raise _EntryError(f"{where}: an empty alias")
    if len(set(resource.aliases)) != len(resource.aliases):
        raise _EntryError(f"{where}: an alias is given twice")
    return resource


def alias_problems(resources: Sequence[tuple[str, Resource]]) -> list[Problem]:
    """An alias must name one resource: not two, and not another resource by its name."""
    problems: list[Problem] = []
    names = {(r.type_url, r.name) for _, r in resources}
    claimed: dict[tuple[str, str], str] = {}
    for where, resource in resources:
        for alias in resource.aliases:
            key = (resource.type_url, alias)
            if key in names and alias != resource.name:
                problems.append(
                    Problem(
                        where, f"alias {alias!r} of {resource.name!r} is another resource's name"
                    )
                )
            elif key in claimed:
                problems.append(
                    Problem(
                        where, f"alias {alias!r} of {resource.name!r} is also one of {claimed[key]}"
                    )
                )
            else:
                claimed[key] = f"{resource.name!r} ({where})"
    return problems


@attrs.frozen
class FileResult:
    """What one config file holds: its resources, each with where it was found, and its
    problems (a file with any is refused, whatever else it holds)."""

    path: Path
    resources: tuple[tuple[str, Resource], ...]
    problems: tuple[Problem, ...]
    held: bool = False
    """The file is still being written (see :attr:`FileData.held`)."""


def parse_file(file: FileData) -> FileResult:
    """The resources and problems of one file as read by :func:`read_files`."""
    if file.data is None:
        problem = Problem(str(file.path), file.error or "cannot be read")
        return FileResult(file.path, (), (problem,), held=file.held)
    try:
        documents = _documents(file.path, file.data)
    except yaml.YAMLError as exc:
        return _unreadable(file.path, yaml_problem(str(file.path), exc))
    except UnicodeDecodeError as exc:
        reason = f"cannot be read: not UTF-8 (byte {exc.start}: {exc.reason})"
        return _unreadable(file.path, Problem(str(file.path), reason))
    except RecursionError:
        return _unreadable(file.path, Problem(str(file.path), "cannot be read: nested too deeply"))
    except _Bounds as exc:
        return _unreadable(file.path, Problem(exc.where, exc.message))
    resources: list[tuple[str, Resource]] = []
    problems: list[Problem] = []
    for where, document in documents:
        for entry_where, entry in _entries(where, document):
            try:
                resources.append((entry_where, _resource(entry)))
            except _EntryError as exc:
                problems.extend(_entry_problems(entry_where, exc))
            except RecursionError:
                problems.append(Problem(entry_where, "nested too deeply"))
    return FileResult(file.path, tuple(resources), tuple(problems))


def _unreadable(path: Path, problem: Problem) -> FileResult:
    return FileResult(path, (), (problem,))


def resource_files(contents: DirectoryData) -> list[FileData]:
    """The files of ``contents`` that hold resources (all but the scopes file)."""
    scopes = contents.root / "scopes.yaml"  # not resources: the scopes (config/_scopes.py)
    return [file for file in contents.files if file.path != scopes]


def parse_files(contents: DirectoryData) -> tuple[list[tuple[str, Resource]], list[Problem]]:
    """The resources and problems of a directory read by :func:`read_files`."""
    import_all_protos()
    resources: list[tuple[str, Resource]] = []
    problems = list(contents.problems)
    for file in resource_files(contents):
        result = parse_file(file)
        resources += result.resources
        problems += result.problems
    problems += alias_problems(resources)
    return resources, problems


def read_directory(
    directory: str | Path,
    *,
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
    max_config_bytes: int = DEFAULT_MAX_CONFIG_BYTES,
) -> tuple[list[tuple[str, Resource]], list[Problem]]:
    """Every resource the directory holds (with where it was found), and every problem.

    A file over ``max_file_bytes``, or files together over ``max_config_bytes``, are refused
    from their sizes before anything is read; a YAML file with more than
    :data:`MAX_YAML_ALIASES` aliases, or a document its aliases would expand by more than
    :data:`MAX_YAML_ALIAS_NODES` nodes, is refused before it is constructed. Each refusal is
    one problem naming the file, the document and the limit.
    """
    contents = read_files(
        directory, max_file_bytes=max_file_bytes, max_config_bytes=max_config_bytes
    )
    return parse_files(contents)
