"""Message types brought at run time: a FileDescriptorSet (``protoc --descriptor_set_out``,
``buf build -o``) registered in the default descriptor pool, so that resources holding
those types (an extension's ``typed_config``) can be read from YAML/JSON, checked (their
``validate.rules`` included) and served.

Registration is process-wide and cannot be undone, as for a generated ``_pb2`` module.
A file the pool already holds (by its name: Envoy's own files, which a set built with
``--include_imports`` repeats) is skipped, and the installed version is kept: a file of the
set that needs a newer version of it is refused with protobuf's reason.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, symbol_database
from google.protobuf.descriptor import Descriptor
from google.protobuf.message import DecodeError

__all__ = ["DescriptorSetError", "register_descriptor_set"]


class DescriptorSetError(ValueError):
    """A descriptor set that cannot be registered, and why."""


def register_descriptor_set(source: str | Path | bytes) -> list[str]:
    """Register every message type of a serialized FileDescriptorSet (a path to one, or its
    bytes); the full names of the message types it added, nested ones included.

    Imports the set does not hold (a set built without ``--include_imports``) must already
    be known: Envoy's, xDS's, ``validate`` and the well-known types are, once
    `import_all_protos` has run (this function runs it).
    """
    from ._messages import import_all_protos

    where = "the descriptor set" if isinstance(source, bytes) else str(source)
    if isinstance(source, bytes):
        data = source
    else:
        try:
            data = Path(source).read_bytes()
        except OSError as exc:
            raise DescriptorSetError(f"{where}: cannot be read: {exc.strerror}") from None
    files = descriptor_pb2.FileDescriptorSet()
    try:
        files.ParseFromString(data)
    except DecodeError as exc:
        raise DescriptorSetError(
            f"{where}: not a FileDescriptorSet ({exc}); write one with "
            "'protoc --include_imports --descriptor_set_out=FILE' or 'buf build -o FILE'"
        ) from None
    if not files.file:
        raise DescriptorSetError(f"{where}: holds no file")
    import_all_protos()
    pool = descriptor_pool.Default()
    added: list[str] = []
    for proto in _in_dependency_order(files.file):
        if _known_file(pool, proto.name):
            continue  # the installed version (a set built with --include_imports repeats them)
        missing = [name for name in proto.dependency if not _known_file(pool, name)]
        if missing:
            raise DescriptorSetError(
                f"{where}: {proto.name} imports {', '.join(missing)}, which neither the set "
                "nor the installed packages hold (build the set with --include_imports)"
            )
        try:
            pool.Add(proto)
        except (TypeError, ValueError) as exc:
            raise DescriptorSetError(f"{where}: {proto.name} cannot be added: {exc}") from None
        file = pool.FindFileByName(proto.name)
        for message in file.message_types_by_name.values():
            added.extend(_register(message))
    return added


def _in_dependency_order(
    protos: Iterable[descriptor_pb2.FileDescriptorProto],
) -> list[descriptor_pb2.FileDescriptorProto]:
    by_name = {proto.name: proto for proto in protos}
    ordered: list[descriptor_pb2.FileDescriptorProto] = []
    done: set[str] = set()

    def visit(name: str, trail: tuple[str, ...]) -> None:
        if name in done or name not in by_name or name in trail:
            return
        for dependency in by_name[name].dependency:
            visit(dependency, (*trail, name))
        done.add(name)
        ordered.append(by_name[name])

    for name in by_name:
        visit(name, ())
    return ordered


def _known_file(pool: descriptor_pool.DescriptorPool, name: str) -> bool:
    try:
        pool.FindFileByName(name)
    except KeyError:
        return False
    return True


def _register(descriptor: Descriptor) -> list[str]:
    """Make the message class of ``descriptor`` (and its nested types) and register it where
    `message_class` looks."""
    database = symbol_database.Default()
    names = [descriptor.full_name]
    cls = message_factory.GetMessageClass(descriptor)
    database.RegisterMessage(cls)
    for nested in descriptor.nested_types:
        if not nested.GetOptions().map_entry:
            names.extend(_register(nested))
    return names
