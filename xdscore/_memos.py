"""Every process-wide memo of xdscore, declared in one place and bounded in bytes.

A fleet of proxies repeats itself: the same request bytes, the same subscriptions, the same
answers after the same change. The runtime keeps such work once, in the memos below. Each
is declared here, with what it is keyed by, what it holds, how long an entry lives and the
invariant it relies on; the modules that use one import it from here. Every memo is bounded
in bytes counted from what its entries really hold (`footprint`, taken once when an
entry is kept), and `usage` reports them all (``xdscore_memo_bytes{memo=...}``,
``xdscore_memo_entries``; ``docs/limits.md`` lists them).

Four kinds:

* `Memo` holds its entries, oldest out first, within ``max_bytes``; an entry larger
  than ``max_entry_bytes`` is computed for its caller and not kept.
* `SharedWork` keeps answers by the identity of the objects they were computed from,
  held weakly: an entry goes when any of them goes, so it lives only while something that
  needs it is alive.
* `Budget` is charged by owners that keep memos of their own (each view's
  selections) and credited as their entries go.
* `Interned` finds the one object for a value among those alive; it holds none of
  them (only its table), so each lives as long as the streams that hold it.

A memo is read and written from the event loop's thread only (no lock).
"""

from __future__ import annotations

import sys
import weakref
from collections.abc import Callable, Hashable, Iterable, Mapping
from types import MappingProxyType
from typing import Any, Final, Generic, TypeVar, cast

from mypy_extensions import mypyc_attr

__all__ = [
    "CANONICAL_NAMES",
    "CLIENT_DELTA_RESPONSES",
    "CLIENT_LISTINGS",
    "CLIENT_NAME_FIELDS",
    "CLIENT_SOTW_RESPONSES",
    "COLLECTIONS",
    "DELTA_ACCEPTED",
    "DELTA_ANSWERS",
    "DELTA_ENTRIES",
    "DELTA_REQUESTS",
    "HEADER_BLOCKS",
    "NAME_LISTS",
    "NODES",
    "SELECTIONS",
    "SOTW_REQUESTS",
    "SUBSCRIPTIONS",
    "SUBSCRIPTION_LISTS",
    "Budget",
    "Interned",
    "Memo",
    "MemoUsage",
    "SharedWork",
    "encoded_size",
    "footprint",
    "usage",
]

_K = TypeVar("_K", bound=Hashable)
_V = TypeVar("_V")

KIB: Final = 1024
MIB: Final = 1024 * 1024


class MemoUsage:
    """What one memo holds now: ``bytes`` of ``limit``, in ``entries``."""

    __slots__ = ("bytes", "entries", "limit", "name")

    def __init__(self, name: str, used: int, entries: int, limit: int) -> None:
        self.name = name
        self.bytes = used
        self.entries = entries
        self.limit = limit

    def __repr__(self) -> str:
        return f"MemoUsage({self.name}: {self.bytes} of {self.limit} bytes, {self.entries})"


@mypyc_attr(allow_interpreted_subclasses=True)
class Memo(Generic[_K, _V]):
    """A map that holds its entries within ``max_bytes``, the oldest going first.

    ``put`` is given each entry's size (see `footprint`); an entry larger than
    ``max_entry_bytes`` is not kept. A hit does not reorder: the entries a fleet shares are
    put again when they are next missed, which costs one computation.
    """

    def __init__(self, name: str, *, max_bytes: int, max_entry_bytes: int, doc: str) -> None:
        self.name = name
        self.max_bytes = max_bytes
        self.max_entry_bytes = min(max_entry_bytes, max_bytes)
        self.doc = doc
        self.bytes = 0
        self._values: dict[_K, _V] = {}
        self._sizes: dict[_K, int] = {}

    def get(self, key: _K) -> _V | None:
        return self._values.get(key)

    def put(self, key: _K, value: _V, size: int) -> _V:
        """Keep ``value`` for ``key`` (``size`` bytes) if it fits; returns ``value``."""
        if size > self.max_entry_bytes:
            return value
        self.pop(key)
        values, sizes = self._values, self._sizes
        while self.bytes + size > self.max_bytes:
            oldest = next(iter(values))
            del values[oldest]
            self.bytes -= sizes.pop(oldest)
        values[key] = value
        sizes[key] = size
        self.bytes += size
        return value

    def pop(self, key: _K) -> None:
        """Forget ``key`` (nothing if it is not kept)."""
        if key in self._values:
            del self._values[key]
            self.bytes -= self._sizes.pop(key)

    def clear(self) -> None:
        self._values.clear()
        self._sizes.clear()
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._values)

    def __contains__(self, key: _K) -> bool:
        return key in self._values

    def usage(self) -> MemoUsage:
        return MemoUsage(self.name, self.bytes, len(self._values), self.max_bytes)


class _Entry(Generic[_V]):
    """One answer of a `SharedWork`, with the weak references that keep its key."""

    __slots__ = ("refs", "size", "value")

    def __init__(self, refs: tuple[object, ...], value: _V, size: int) -> None:
        self.refs = refs
        self.value = value
        self.size = size


@mypyc_attr(allow_interpreted_subclasses=True)
class SharedWork(Generic[_V]):
    """Answers kept by the identity of the objects they were computed from.

    An entry refers to its key's objects weakly where they allow it and goes when one of
    them goes (so an identity is never reused while its entry exists, and an entry keeps no
    earlier generation of a cache alive); an object that takes no weak reference is held.
    At most ``limit`` entries and ``max_bytes`` are kept, the oldest going first.
    """

    def __init__(self, name: str, *, limit: int, max_bytes: int, doc: str) -> None:
        self.name = name
        self.limit = limit
        self.max_bytes = max_bytes
        self.doc = doc
        self.bytes = 0
        self.hits = 0
        self.misses = 0
        self._entries: dict[Hashable, _Entry[_V]] = {}

    def get(self, objects: tuple[object, ...], extra: Hashable) -> _V | None:
        """The answer computed from these very ``objects`` and an equal ``extra``, if kept."""
        found = self._entries.get((tuple(map(id, objects)), extra))
        if found is None:
            self.misses += 1
            return None
        self.hits += 1
        return found.value

    def put(
        self,
        objects: tuple[object, ...],
        extra: Hashable,
        value: _V,
        *,
        skip: tuple[type, ...] = (),
    ) -> _V:
        """Keep ``value`` as the answer for ``objects`` and ``extra``; returns ``value``.

        The entry is charged what it holds: ``value`` and the objects that take no weak
        reference (less instances of ``skip``, see `footprint`)."""
        key = (tuple(map(id, objects)), extra)
        self._forget(key)
        forget = _Forgetting(self, key)
        refs = tuple(_hold(each, forget) for each in objects)
        held = [each for each in refs if type(each) is not weakref.ref]
        size = footprint(value, extra, *held, skip=skip)
        if size > self.max_bytes:
            return value
        entries = self._entries
        while entries and (len(entries) >= self.limit or self.bytes + size > self.max_bytes):
            self._forget(next(iter(entries)))
        entries[key] = _Entry(refs, value, size)
        self.bytes += size
        return value

    def _forget(self, key: Hashable) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            self.bytes -= entry.size

    def __len__(self) -> int:
        return len(self._entries)

    def usage(self) -> MemoUsage:
        return MemoUsage(self.name, self.bytes, len(self._entries), self.max_bytes)


class _Forgetting:
    """The weak-reference callback that drops one entry of a `SharedWork`."""

    __slots__ = ("key", "work")

    def __init__(self, work: SharedWork[Any], key: Hashable) -> None:
        self.work: weakref.ref[SharedWork[Any]] = weakref.ref(work)
        self.key = key

    def __call__(self, _: object) -> None:
        work = self.work()
        if work is not None:
            work._forget(self.key)


def _hold(each: object, forget: Callable[[object], None]) -> object:
    """A weak reference to ``each`` that forgets the entry when it goes, or ``each``."""
    try:
        return weakref.ref(each, forget)
    except TypeError:
        return each


@mypyc_attr(allow_interpreted_subclasses=True)
class Budget:
    """Bytes that owners keeping memos of their own (views) take and give back."""

    def __init__(self, name: str, *, max_bytes: int, doc: str) -> None:
        self.name = name
        self.max_bytes = max_bytes
        self.doc = doc
        self.bytes = 0
        self.entries = 0

    def take(self, size: int) -> bool:
        """Take ``size`` bytes for one entry; ``False``, taking nothing, past the bound."""
        if self.bytes + size > self.max_bytes:
            return False
        self.bytes += size
        self.entries += 1
        return True

    def give_back(self, size: int) -> None:
        """An entry of ``size`` bytes went."""
        self.bytes -= size
        self.entries -= 1

    def usage(self) -> MemoUsage:
        return MemoUsage(self.name, self.bytes, self.entries, self.max_bytes)


class Interned(Generic[_K, _V]):
    """The one live object for each key, held weakly: ``get`` or ``put`` it."""

    def __init__(self, name: str, *, doc: str) -> None:
        self.name = name
        self.doc = doc
        self._table: weakref.WeakValueDictionary[_K, _V] = weakref.WeakValueDictionary()

    def get(self, key: _K) -> _V | None:
        return self._table.get(key)

    def put(self, key: _K, value: _V) -> _V:
        self._table[key] = value
        return value

    def usage(self) -> MemoUsage:
        # What the table holds of its own; the objects are their holders'.
        table = self._table.data  # type: ignore[attr-defined]
        return MemoUsage(self.name, sys.getsizeof(table), len(table), 0)


_LEAF: Final = 0
_MEMBERS: Final = 1
_MAPPING: Final = 2
_STATE: Final = 3
_Shape = int | tuple[str, ...]
"""How `footprint` walks an object: a leaf, members, a mapping, its ``__dict__``,
or the fields named."""
_SHAPES: Final[dict[type, _Shape]] = {}
"""The shape of each type `footprint` met (a cache; cleared past _MAX_SHAPES)."""
_MAX_SHAPES: Final = 1024


def footprint(*objects: object, skip: tuple[type, ...] = ()) -> int:
    """The bytes ``objects`` hold, counting each object reached once: strings, bytes and
    numbers, the members of tuples, lists, sets and dicts, and the fields of records
    (``_fields``), attrs classes, classes with ``__slots__`` and objects with a
    ``__dict__``. An instance of a type in ``skip`` (values some other owner keeps, such as
    a cache's resources) counts nothing.
    """
    seen: set[int] = set()
    total = 0
    pending = list(objects)
    while pending:
        each = pending.pop()
        if each is None or id(each) in seen:
            continue
        kind = type(each)
        if kind is bool or (skip and isinstance(each, skip)):
            continue
        seen.add(id(each))
        total += sys.getsizeof(each)
        shape = _SHAPES.get(kind)
        if shape is None:
            shape = _shape(kind)
        if isinstance(shape, tuple):
            for name in shape:
                pending.append(getattr(each, name, None))
        elif shape == _MEMBERS:
            pending.extend(cast(Iterable[object], each))
        elif shape == _MAPPING:
            mapping = cast(Mapping[object, object], each)
            pending.extend(mapping.keys())
            pending.extend(mapping.values())
        elif shape == _STATE:
            pending.append(getattr(each, "__dict__", None))
    return total


def _shape(kind: type) -> _Shape:
    """How `footprint` walks an instance of ``kind`` (found once per type)."""
    shape: _Shape
    if issubclass(kind, str | bytes | int | float):
        shape = _LEAF
    elif issubclass(kind, tuple | list | set | frozenset):
        shape = _MEMBERS
    elif issubclass(kind, dict | MappingProxyType):
        shape = _MAPPING
    else:
        shape = _field_names(kind)
    if len(_SHAPES) >= _MAX_SHAPES:
        _SHAPES.clear()
    _SHAPES[kind] = shape
    return shape


def _field_names(kind: type) -> _Shape:
    names: Iterable[str] | None = getattr(kind, "_fields", None)
    if names is None:
        attributes = getattr(kind, "__attrs_attrs__", None)
        if attributes is not None:
            names = [attribute.name for attribute in attributes]
    if names is None:
        slots = [name for cls in kind.__mro__ for name in getattr(cls, "__slots__", ())]
        names = [name for name in slots if name != "__weakref__"] or None
    return tuple(names) if names is not None else _STATE


def encoded_size(resources: Iterable[object]) -> int:
    """The bytes of the encodings ``resources`` (cache resources) hold: what a memo that
    holds resources keeps alive once the cache has let them go."""
    return sum(
        len(getattr(r, "sotw_entry", b"")) + len(getattr(r, "delta_entry", b"")) for r in resources
    )


# -- the memos --------------------------------------------------------------------------

NODES: Final[Memo[bytes, object]] = Memo(
    "nodes",
    max_bytes=16 * MIB,
    max_entry_bytes=1 * MIB,
    doc="Decoded Node records by the bytes a client sent them as (wire._node). A fleet's "
    "proxies of one build reconnect with the same node: it is decoded once. Holds the "
    "record and its bytes; a node whose record holds more than 1 MiB is never kept (the "
    "streams that present it hold it while they live). Relies on records being immutable.",
)
SOTW_REQUESTS: Final[Memo[bytes, object]] = Memo(
    "requests.sotw",
    max_bytes=8 * MIB,
    max_entry_bytes=128 * KIB,
    doc="Decoded SotW requests by their bytes less the node and the nonce (wire._codec): "
    "every proxy of one configuration asks for the same names and ACKs each version with "
    "them, parsed once. Holds the key bytes and the record; requests of more than 32 KiB "
    "are never kept. Relies on records being immutable (each stream gets a copy carrying "
    "its node and nonce).",
)
DELTA_REQUESTS: Final[Memo[bytes, object]] = Memo(
    "requests.delta",
    max_bytes=8 * MIB,
    max_entry_bytes=128 * KIB,
    doc="The same for Delta requests.",
)
SUBSCRIPTION_LISTS: Final[Memo[tuple[str, ...], object]] = Memo(
    "subscription_lists",
    max_bytes=4 * MIB,
    max_entry_bytes=256 * KIB,
    doc="The subscription a request's name list asks for, by the list's content "
    "(protocol._subscription): a fleet's requests list the same names, and each list is "
    "read into a set once. Holds the list and the subscription. Relies on the lists "
    "being tuples.",
)
DELTA_ANSWERS: Final[SharedWork[object]] = SharedWork(
    "delta.answers",
    limit=16,
    max_bytes=32 * MIB,
    doc="What Delta streams in the same state are due (protocol._delta_server), by the "
    "identity of the view's mapping, the stream's holdings and its subscription, held "
    "weakly. Holds the answer's tuples and mappings (the resources are the cache's). Relies "
    "on holdings never being changed in place (the machines replace them).",
)
DELTA_ACCEPTED: Final[SharedWork[object]] = SharedWork(
    "delta.accepted",
    limit=16,
    max_bytes=32 * MIB,
    doc="What Delta streams in the same state hold after the same ACK, by the identity of "
    "their holdings and the response, held weakly. Holds weak references to the new "
    "holdings only. Relies on holdings never being changed in place.",
)
DELTA_ENTRIES: Final[Memo[tuple[int, bool, bool], tuple[object, bytes]]] = Memo(
    "delta.entries",
    max_bytes=32 * MIB,
    max_entry_bytes=16 * MIB,
    doc="The joined entries of recent large Delta responses (16 resources or more), by the "
    "identity of their resources tuple, which streams in the same state share "
    "(DELTA_ANSWERS) (wire._codec). Holds the tuple and the joined bytes, counted with the "
    "resources' own encodings. Relies on the tuple being immutable.",
)
HEADER_BLOCKS: Final[Memo[tuple[int, bytes], object]] = Memo(
    "header_blocks",
    max_bytes=1 * MIB,
    max_entry_bytes=16 * KIB,
    doc="The decoded fields of a connection's first HPACK header block, by the block "
    "(Http2Transport): every connection's decoder starts from the same state, and a fleet "
    "of one build sends the same first block. Holds the block and its fields; blocks over "
    "4 KiB are never kept. Relies on HPACK decoding being a function of the block.",
)
CANONICAL_NAMES: Final[Memo[str, str]] = Memo(
    "canonical_names",
    max_bytes=4 * MIB,
    max_entry_bytes=2 * KIB,
    doc="xdstp:// names in canonical form (context parameters sorted), by the name as "
    "sent (wire._names). Holds both strings; longer names are worked out each time.",
)
COLLECTIONS: Final[Memo[str, str]] = Memo(
    "collections",
    max_bytes=4 * MIB,
    max_entry_bytes=2 * KIB,
    doc="The glob collection a resource name is in, by the name (wire._names). Holds both "
    "strings; longer names are worked out each time.",
)
CLIENT_LISTINGS: Final[Memo[object, tuple[str, ...]]] = Memo(
    "client.listings",
    max_bytes=4 * MIB,
    max_entry_bytes=256 * KIB,
    doc="Client side (the load generator, the CLI, tests): the resource_names list that asks "
    "for a subscription, by the subscription (protocol._sotw_client). Holds both.",
)
CLIENT_NAME_FIELDS: Final[Memo[tuple[int, tuple[str, ...]], bytes]] = Memo(
    "client.name_fields",
    max_bytes=4 * MIB,
    max_entry_bytes=256 * KIB,
    doc="Client side: a name list encoded as a repeated field, by the field's number and "
    "the list (wire._client_codec). Holds both.",
)
CLIENT_SOTW_RESPONSES: Final[Memo[tuple[int, str], object]] = Memo(
    "client.sotw_responses",
    max_bytes=32 * MIB,
    max_entry_bytes=16 * MIB,
    doc="Client side: a decoded SotW response's resources indexed by name, and what is "
    "wrong with them, by the identity of the resources tuple (protocol._sotw_client): a "
    "load generator hands one decoded tuple to every client. Holds the tuple (so its "
    "identity is not reused while kept) and the index, counted with the resources' "
    "encodings. Relies on the index never being changed in place.",
)
CLIENT_DELTA_RESPONSES: Final[Memo[tuple[int, str], object]] = Memo(
    "client.delta_responses",
    max_bytes=32 * MIB,
    max_entry_bytes=16 * MIB,
    doc="The same for Delta responses (protocol._delta_client).",
)
SELECTIONS: Final = Budget(
    "selections",
    max_bytes=64 * MIB,
    doc="Each view's memoised selections (cache): streams with the same subscription share "
    "one selection and one encoded body. A view keeps an entry while a stream holds its "
    "subscription (the key is held weakly) and while the view lives; each entry is charged "
    "its resources mapping and encoded bodies. Past the bound a selection is computed for "
    "its caller and not kept. Relies on subscriptions and views being immutable.",
)
SUBSCRIPTIONS: Final[Interned[Hashable, Any]] = Interned(
    "subscriptions",
    doc="Every subscription some stream holds, by value (protocol._subscription): streams "
    "that ask the same share one object, its names held once however many streams hold it, "
    "and equal subscriptions compare by identity first. Relies on subscriptions being "
    "immutable.",
)
NAME_LISTS: Final[Interned[Hashable, Any]] = Interned(
    "name_lists",
    doc="A request's names as listed (order and repeats kept), by value "
    "(protocol._subscription.RequestedNames): held once for every stream whose last "
    "request listed the same.",
)

_registry: Final[tuple[Memo[Any, Any] | SharedWork[Any] | Budget | Interned[Any, Any], ...]] = (
    NODES,
    SOTW_REQUESTS,
    DELTA_REQUESTS,
    SUBSCRIPTION_LISTS,
    DELTA_ANSWERS,
    DELTA_ACCEPTED,
    DELTA_ENTRIES,
    HEADER_BLOCKS,
    CANONICAL_NAMES,
    COLLECTIONS,
    SELECTIONS,
    SUBSCRIPTIONS,
    NAME_LISTS,
    CLIENT_LISTINGS,
    CLIENT_NAME_FIELDS,
    CLIENT_SOTW_RESPONSES,
    CLIENT_DELTA_RESPONSES,
)


def usage() -> list[MemoUsage]:
    """Every memo's usage now, in the order they are declared."""
    return [memo.usage() for memo in _registry]
