"""footprint: the bytes an entry holds, each object reached counted once, whatever its kind."""

from __future__ import annotations

import enum
import sys
from types import MappingProxyType
from typing import NamedTuple

import attrs

from xdscore._memos import footprint
from xdscore.wire._node import make_node


class Pair(NamedTuple):
    left: object
    right: object


@attrs.define(slots=True)
class Record:
    name: str
    items: list[object]


class Slotted:
    __slots__ = ("a", "b")

    def __init__(self, a: object, b: object) -> None:
        self.a, self.b = a, b


class SlottedChild(Slotted):
    __slots__ = ("__weakref__", "c")

    def __init__(self, a: object, b: object, c: object) -> None:
        super().__init__(a, b)
        self.c = c


class Plain:
    def __init__(self, value: object) -> None:
        self.value = value


class Colour(enum.StrEnum):
    RED = "red"


class Kept:
    """A value some other owner keeps (``skip``)."""


def size(*objects: object) -> int:
    return sum(sys.getsizeof(each) for each in objects)


def test_leaves_and_containers_count_each_object_once() -> None:
    text, data, number, real = "text-x", b"bytes-x", 10**30, 2.5
    members = [text, data, number, real, text]
    assert footprint(text) == size(text)
    assert footprint(members) == size(members, text, data, number, real)
    shared = (members, members)
    assert footprint(shared) == size(shared, members, text, data, number, real)
    assert footprint(frozenset({text}), {data}) == size(frozenset({text}), {data}, text, data)


def test_mappings_count_keys_and_values() -> None:
    key, value = "key-1", b"value-1"
    table = {key: value}
    assert footprint(table) == size(table, key, value)
    view = MappingProxyType(table)
    assert footprint(view) == size(view, table, key, value) - size(table)


def test_none_and_booleans_count_nothing_and_subclasses_keep_their_kind() -> None:
    assert footprint(None, True, False) == 0
    pair = Pair("left-1", "right-1")  # a tuple: its members, not its fields twice
    assert footprint(pair) == size(pair, "left-1", "right-1")
    assert footprint(Colour.RED) == size(Colour.RED)  # a str: a leaf


def test_records_count_their_fields() -> None:
    items: list[object] = ["one-1", "two-2"]
    record = Record("name-1", items)
    assert footprint(record) == size(record, "name-1", items, "one-1", "two-2")
    child = SlottedChild("a-1", "b-1", "c-1")
    assert footprint(child) == size(child, "a-1", "b-1", "c-1")
    slotted = Slotted("a-2", None)
    assert footprint(slotted) == size(slotted, "a-2")
    plain = Plain("value-1")
    assert footprint(plain) == size(plain, plain.__dict__, "value", "value-1")


def test_cycles_end_and_skipped_types_count_nothing() -> None:
    loop: list[object] = ["member-1"]
    loop.append(loop)
    assert footprint(loop) == size(loop, "member-1")
    kept = Kept()
    holder = [kept]
    assert footprint(holder, skip=(Kept,)) == size(holder)


def test_a_node_counts_its_bytes_and_fields() -> None:
    node = make_node(id="node-footprint", cluster="c", metadata={"k": "v"})
    expected = size(
        node,
        node.raw,
        node.id,
        node.cluster,
        node.user_agent_name,
        node.client_features,
        node.metadata,
        "k",
        "v",
    )
    assert footprint(node.raw, node) == expected


def test_many_types_met_still_counted_each_by_its_own_fields() -> None:
    """The per-type cache is bounded and cleared: types past the bound are still right."""
    for number in range(1500):
        kind = type(f"Made{number}", (), {"__slots__": (f"f{number}",)})
        each = kind()
        setattr(each, f"f{number}", f"value-{number}")
        assert footprint(each) == size(each, f"value-{number}")
