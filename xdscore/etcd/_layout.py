"""Where resources live in etcd, and what changes between two states.

One key per resource::

    {prefix}/{protobuf full message name}/{resource name}

for instance ``/xdscore/envoy.config.cluster.v3.Cluster/web``. The value is the resource's
encoded protobuf message, the bytes `xdscore.Resource.body` holds (deterministic
serialisation), so the content version every replica computes from them is the same. A
name may contain ``/`` (``xdstp://`` names do): the name is everything after the type
segment. A type segment starting with ``.`` is reserved for xdscore's own keys (the apply
marker, `MARKER`), which hold no resource. Everything here is pure: no I/O, no etcd
client.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Mapping

import attrs

from ..wire._messages import make_resource, message_class
from ..wire._resource import Resource
from ..wire._typeurls import TYPE_URL_PREFIX, type_info

__all__ = [
    "DEFAULT_PREFIX",
    "MARKER",
    "Change",
    "Diff",
    "LayoutError",
    "decode_entry",
    "diff",
    "encode_state",
    "marker_key",
    "normalize_prefix",
    "parse_key",
    "reserved",
    "range_end",
    "range_start",
    "resource_key",
    "state_digest",
]

DEFAULT_PREFIX = "/xdscore"
"""The prefix used when none is given."""
MARKER = ".applied"
"""The reserved segment of the apply marker, ``{prefix}/.applied``: every apply writes it,
so two applies that read the same revision cannot both commit (see
[`apply_state`][xdscore.etcd.apply_state])."""


def normalize_prefix(prefix: str) -> str:
    """``prefix`` without trailing slashes; refuses one that holds nothing else."""
    stripped = prefix.rstrip("/")
    if not stripped:
        raise ValueError(f"an etcd prefix needs at least one character besides '/': {prefix!r}")
    return stripped


def range_start(prefix: str) -> bytes:
    """The first key of the range a prefix owns: ``{prefix}/``."""
    return (normalize_prefix(prefix) + "/").encode()


def range_end(prefix: str) -> bytes:
    """The first key after the range a prefix owns (``{prefix}0``, as ``/`` + 1 is ``0``)."""
    return (normalize_prefix(prefix) + "0").encode()


def marker_key(prefix: str) -> bytes:
    """The key of the apply marker under ``prefix``."""
    return f"{normalize_prefix(prefix)}/{MARKER}".encode()


def resource_key(prefix: str, type_url: str, name: str) -> bytes:
    """The key of the resource ``name`` of ``type_url`` under ``prefix``."""
    if not name:
        raise ValueError("a resource stored in etcd needs a name")
    message_name = type_url.removeprefix(TYPE_URL_PREFIX)
    if message_name == type_url or "/" in message_name or not message_name:
        raise ValueError(f"not a protobuf type URL: {type_url!r}")
    return f"{normalize_prefix(prefix)}/{message_name}/{name}".encode()


class LayoutError(ValueError):
    """A key under the prefix that does not follow the layout."""


def parse_key(prefix: str, key: bytes) -> tuple[str, str] | None:
    """``(type_url, name)`` of a resource key; ``None`` for a reserved key (a segment
    starting with ``.``). Raises [`LayoutError`][xdscore.etcd.LayoutError] for a key that is not in
    the layout or names a type protobuf does not know."""
    start = range_start(prefix)
    if not key.startswith(start):
        raise LayoutError(f"the key is not under {start.decode()!r}")
    try:
        rest = key[len(start) :].decode()
    except UnicodeDecodeError:
        raise LayoutError("the key is not UTF-8") from None
    segment, slash, name = rest.partition("/")
    if segment.startswith("."):
        return None
    if not segment or not slash or not name:
        raise LayoutError(
            "the key does not follow the layout {prefix}/{protobuf message name}/{resource name}"
        )
    type_url = TYPE_URL_PREFIX + segment
    try:
        message_class(type_url)
    except KeyError:
        raise LayoutError(
            f"unknown type {segment!r}: no protobuf message of that name is known"
        ) from None
    return type_url, name


def decode_entry(prefix: str, key: bytes, value: bytes) -> Resource | None:
    """The resource a key holds (``None`` for a reserved key). The bytes are taken as they
    are: whether they parse, and whether the name inside matches, is the analysis's to say."""
    parsed = parse_key(prefix, key)
    if parsed is None:
        return None
    type_url, name = parsed
    return make_resource(value, type_url=type_url, name=name)


def encode_state(prefix: str, resources: Iterable[Resource]) -> dict[bytes, bytes]:
    """The keys and values that store ``resources`` under ``prefix``.

    Raises ``ValueError`` for two resources of one type and name, and for a resource with
    aliases (the layout has no place for them).
    """
    state: dict[bytes, bytes] = {}
    for resource in resources:
        if resource.aliases:
            raise ValueError(
                f"{type_info(resource.type_url).short_name} {resource.name!r} has aliases, "
                "which the etcd layout cannot store"
            )
        key = resource_key(prefix, resource.type_url, resource.name)
        if key in state:
            raise ValueError(
                f"duplicate {type_info(resource.type_url).short_name} resource {resource.name!r}"
            )
        state[key] = resource.body
    return state


def state_digest(state: Mapping[bytes, bytes]) -> str:
    """A hash of a whole state (every key and value), the apply marker's value."""
    digest = hashlib.sha256()
    for key in sorted(state):
        value = state[key]
        digest.update(len(key).to_bytes(8, "big") + key + len(value).to_bytes(8, "big") + value)
    return digest.hexdigest()


@attrs.frozen(order=True)
class Change:
    """One resource an apply adds, changes or removes."""

    type_url: str
    name: str

    def __str__(self) -> str:
        return f"{type_info(self.type_url).short_name} {self.name}"


@attrs.frozen
class Diff:
    """What writing a desired state changes: each list sorted by type URL, then name."""

    added: tuple[Change, ...] = ()
    changed: tuple[Change, ...] = ()
    removed: tuple[Change, ...] = ()
    unchanged: int = 0

    def __bool__(self) -> bool:
        return bool(self.added or self.changed or self.removed)

    def __len__(self) -> int:
        return len(self.added) + len(self.changed) + len(self.removed)

    def lines(self) -> Iterator[str]:
        """One line per change: ``+`` added, ``~`` changed, ``-`` removed."""
        for mark, changes in (("+", self.added), ("~", self.changed), ("-", self.removed)):
            for change in changes:
                yield f"{mark} {change}"

    def summary(self) -> str:
        """``3 change(s): 1 added, 1 changed, 1 removed, 4 unchanged``."""
        return (
            f"{len(self)} change(s): {len(self.added)} added, {len(self.changed)} changed, "
            f"{len(self.removed)} removed, {self.unchanged} unchanged"
        )


def diff(prefix: str, current: Mapping[bytes, bytes], desired: Mapping[bytes, bytes]) -> Diff:
    """What turns ``current`` into ``desired`` (both keyed as
    [`encode_state`][xdscore.etcd.encode_state] keys them). Reserved keys are ignored; a key of
    ``current`` outside the layout counts as removed under its raw text, so an apply clears it."""
    added: list[Change] = []
    changed: list[Change] = []
    removed: list[Change] = []
    unchanged = 0
    for key, value in desired.items():
        if key not in current:
            added.append(_change(prefix, key))
        elif current[key] != value:
            changed.append(_change(prefix, key))
        else:
            unchanged += 1
    for key in current:
        if key not in desired and not reserved(prefix, key):
            removed.append(_change(prefix, key))
    return Diff(tuple(sorted(added)), tuple(sorted(changed)), tuple(sorted(removed)), unchanged)


def reserved(prefix: str, key: bytes) -> bool:
    """Whether ``key`` (under ``prefix``) is reserved: its first segment starts with ``.``
    (the apply marker, replicas' registrations); no state holds it."""
    return key[len(range_start(prefix)) :].startswith(b".")


def _change(prefix: str, key: bytes) -> Change:
    rest = key[len(range_start(prefix)) :].decode(errors="replace")
    segment, _, name = rest.partition("/")
    return Change(TYPE_URL_PREFIX + segment, name)
