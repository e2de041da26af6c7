"""The field constraints Envoy checks on every message it accepts, read from the descriptors.

Envoy's API annotates its fields with protoc-gen-validate rules (``validate.rules``,
``validate.required`` on oneofs, ``validate.disabled`` on messages) and calls the generated
``Validate()`` on each resource and on each typed config it unpacks: a violation is a NACK.
This module evaluates the same rules from the descriptors at run time, so that a control
plane refuses what Envoy would reject before pushing it.

The rules of a message type are compiled once into a table of checks (cached per
descriptor); a message type none of whose fields, nested or not, carries a rule (or an
``Any``) is not walked. Covered: numeric ``const``/``lt``/``lte``/``gt``/``gte``/``in``/
``not_in`` (scalars and wrappers), ``bool.const``, string and bytes lengths (characters and
bytes), ``const``, ``prefix``/``suffix``/``contains``/``not_contains``, ``in``/``not_in``,
``pattern``, the well-known formats (``hostname``, ``ip``, ``ipv4``, ``ipv6``, ``address``,
``uri``, ``uuid``, ``email``, ``HTTP_HEADER_NAME``/``HTTP_HEADER_VALUE``), enum
``defined_only``/``const``/``in``/``not_in``, ``message.required`` and ``skip``, repeated
``min_items``/``max_items``/``unique``/``items``, map ``min_pairs``/``max_pairs``/
``no_sparse``/``keys``/``values``, ``any.required``/``in``/``not_in``, duration and timestamp
``required``/``const``/``lt``/``lte``/``gt``/``gte``/``in``/``not_in``, ``ignore_empty``, and
required oneofs. The contents of an ``Any`` are checked when its type is known, as Envoy
checks a typed config when it loads the extension.
"""

from __future__ import annotations

import ipaddress
import re
import uuid
from collections.abc import Callable, Iterator, Mapping
from functools import cache
from typing import Any
from urllib.parse import urlsplit

import attrs
from google.protobuf import descriptor_pool
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import DecodeError, Message
from validate import validate_pb2

__all__ = ["Violation", "violations"]


@attrs.frozen
class Violation:
    """One broken constraint: the field path (snake_case), what is wrong, and the rule."""

    field: str
    message: str
    rule: str

    def __str__(self) -> str:
        return f"{self.field or '(message)'}: {self.message} ({self.rule})"


_Check = Callable[[Message, str, list[Violation]], None]

_WRAPPER_NAMES = frozenset(
    f"google.protobuf.{name}Value"
    for name in ("Double", "Float", "Int64", "UInt64", "Int32", "UInt32", "Bool", "String", "Bytes")
)
_HEADER_NAME = re.compile(r"^:?[0-9a-zA-Z!#$%&'*+\-.^_|~`]+\Z")
_HEADER_VALUE = re.compile(r"^[^\x00-\x08\x0a-\x1f\x7f]*\Z")
_LOOSE_HEADER = re.compile(r"^[^\x00\n\r]*\Z")
_HOSTNAME_LABEL = re.compile(r"(?!-)[a-zA-Z0-9-]{1,63}(?<!-)\Z")
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\Z")


def _hostname(value: str) -> bool:
    name = value[:-1] if value.endswith(".") else value
    return 0 < len(name) <= 253 and all(_HOSTNAME_LABEL.match(p) for p in name.split("."))


def _ip(value: str, version: int | None = None) -> bool:
    try:
        address = ipaddress.ip_address(value)
    except ValueError:
        return False
    return version is None or address.version == version


def _uri(value: str, absolute: bool) -> bool:
    try:
        parts = urlsplit(value)
    except ValueError:
        return False
    return bool(parts.scheme) if absolute else True


def _uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return len(value) == 36


def _duration_text(seconds: int, nanos: int) -> str:
    total = seconds + nanos / 1e9
    return f"{total:g}s"


def _show(value: Any) -> str:
    if isinstance(value, str | bytes):
        text = repr(value)
        return text if len(text) <= 60 else text[:57] + "..."
    return str(value)


class _Compiler:
    """Builds the checks of one field from its ``FieldRules``."""

    def __init__(self, field: FieldDescriptor, rules: validate_pb2.FieldRules) -> None:
        self.field = field
        self.rules = rules

    def checks(self) -> list[_Check]:
        field, rules = self.field, self.rules
        kind = rules.WhichOneof("type")
        name = field.name
        is_map = field.message_type is not None and field.message_type.GetOptions().map_entry
        if is_map and kind == "map":
            return [self._map(rules.map)]
        if field.is_repeated and kind == "repeated":
            return [self._repeated(rules.repeated)]
        checks: list[_Check] = []
        if rules.HasField("message") and rules.message.required:

            def required(msg: Message, path: str, out: list[Violation]) -> None:
                if not msg.HasField(name):
                    out.append(Violation(path, "is required", "message.required"))

            checks.append(required)
        if kind in ("duration", "timestamp", "any") and getattr(rules, kind).required:

            def present(msg: Message, path: str, out: list[Violation]) -> None:
                if not msg.HasField(name):
                    out.append(Violation(path, "is required", f"{kind}.required"))

            checks.append(present)
        if kind is None or kind == "message":
            return checks
        value_check = self.value_check(kind, getattr(rules, kind))
        if value_check is None:
            return checks
        if field.is_repeated:
            return checks
        wrapped = field.message_type is not None and (
            field.message_type.full_name in _WRAPPER_NAMES
        )
        message_valued = field.message_type is not None

        def check(msg: Message, path: str, out: list[Violation]) -> None:
            if message_valued:
                if not msg.HasField(name):
                    return
                value = getattr(msg, name)
                if wrapped:
                    value = value.value
            else:
                value = getattr(msg, name)
            value_check(value, path, out)

        checks.append(check)
        return checks

    def value_check(
        self, kind: str, rules: Any
    ) -> Callable[[Any, str, list[Violation]], None] | None:
        """A check of one value (a field's, an element's, a map key's or value's)."""
        if kind in ("string", "bytes"):
            return _string_check(kind, rules)
        if kind == "enum":
            return _enum_check(self.field, rules)
        if kind == "bool":
            if not rules.HasField("const"):
                return None
            wanted = rules.const

            def const(value: Any, path: str, out: list[Violation]) -> None:
                if value != wanted:
                    out.append(Violation(path, f"must be {str(wanted).lower()}", "bool.const"))

            return const
        if kind in ("duration", "timestamp"):
            return _time_check(kind, rules)
        if kind == "any":
            return _any_check(rules)
        if kind in _NUMERIC_KINDS:
            return _numeric_check(kind, rules)
        return None

    def _repeated(self, rules: validate_pb2.RepeatedRules) -> _Check:
        name = self.field.name
        item_kind = rules.items.WhichOneof("type") if rules.HasField("items") else None
        item_check = (
            self.value_check(item_kind, getattr(rules.items, item_kind))
            if item_kind not in (None, "message", "repeated", "map")
            else None
        )
        wrapped = self.field.message_type is not None and (
            self.field.message_type.full_name in _WRAPPER_NAMES
        )

        def check(msg: Message, path: str, out: list[Violation]) -> None:
            items = getattr(msg, name)
            count = len(items)
            if rules.ignore_empty and count == 0:
                return
            _count(rules, count, path, out, "repeated", ("min_items", "max_items"), "item(s)")
            if rules.unique:
                seen: set[Any] = set()
                for index, item in enumerate(items):
                    key = (
                        item.SerializeToString(deterministic=True)
                        if isinstance(item, Message)
                        else item
                    )
                    if key in seen:
                        out.append(
                            Violation(
                                f"{path}[{index}]", "repeats an earlier item", "repeated.unique"
                            )
                        )
                    seen.add(key)
            if item_check is not None:
                for index, item in enumerate(items):
                    item_check(item.value if wrapped else item, f"{path}[{index}]", out)

        return check

    def _map(self, rules: validate_pb2.MapRules) -> _Check:
        name = self.field.name
        entry = self.field.message_type
        key_field, value_field = entry.fields_by_name["key"], entry.fields_by_name["value"]

        def part(sub: validate_pb2.FieldRules, field: FieldDescriptor) -> Any:
            kind = sub.WhichOneof("type")
            if kind in (None, "message", "repeated", "map"):
                return None
            return _Compiler(field, sub).value_check(kind, getattr(sub, kind))

        keys = part(rules.keys, key_field) if rules.HasField("keys") else None
        values = part(rules.values, value_field) if rules.HasField("values") else None

        def check(msg: Message, path: str, out: list[Violation]) -> None:
            pairs = getattr(msg, name)
            count = len(pairs)
            if rules.ignore_empty and count == 0:
                return
            _count(rules, count, path, out, "map", ("min_pairs", "max_pairs"), "entries")
            for key in pairs:
                if keys is not None:
                    keys(key, f"{path}[{key}]", out)
                if values is not None:
                    values(pairs[key], f"{path}[{key}]", out)

        return check


def _count(
    rules: Any,
    count: int,
    path: str,
    out: list[Violation],
    family: str,
    names: tuple[str, str],
    noun: str,
) -> None:
    """The least and most items (or entries) rules of a repeated field or a map."""
    least, most = names
    if rules.HasField(least) and count < getattr(rules, least):
        wanted = getattr(rules, least)
        out.append(
            Violation(path, f"must have at least {wanted} {noun}, has {count}", f"{family}.{least}")
        )
    if rules.HasField(most) and count > getattr(rules, most):
        wanted = getattr(rules, most)
        out.append(
            Violation(path, f"must have at most {wanted} {noun}, has {count}", f"{family}.{most}")
        )


_NUMERIC_KINDS = frozenset(
    {
        "float",
        "double",
        "int32",
        "int64",
        "uint32",
        "uint64",
        "sint32",
        "sint64",
        "fixed32",
        "fixed64",
        "sfixed32",
        "sfixed64",
    }
)


def _range_check(
    kind: str, rules: Any, show: Callable[[Any], str], path_value: Callable[[Any], Any]
) -> Callable[[Any, str, list[Violation]], None]:
    """const/lt/lte/gt/gte/in/not_in over values made comparable by ``path_value``."""
    has = {name: rules.HasField(name) for name in ("const", "lt", "lte", "gt", "gte")}
    bound = {name: path_value(getattr(rules, name)) for name, present in has.items() if present}
    listed_in = [path_value(v) for v in getattr(rules, "in")]
    listed_out = [path_value(v) for v in rules.not_in]
    ignore_empty = getattr(rules, "ignore_empty", False)
    low = (
        ("gt", bound["gt"]) if "gt" in bound else ("gte", bound["gte"]) if "gte" in bound else None
    )
    high = (
        ("lt", bound["lt"]) if "lt" in bound else ("lte", bound["lte"]) if "lte" in bound else None
    )

    def above(value: Any, rule: tuple[str, Any]) -> bool:
        return bool(value > rule[1] if rule[0] == "gt" else value >= rule[1])

    def below(value: Any, rule: tuple[str, Any]) -> bool:
        return bool(value < rule[1] if rule[0] == "lt" else value <= rule[1])

    words = {"gt": "greater than", "gte": "at least", "lt": "less than", "lte": "at most"}

    def check(raw: Any, path: str, out: list[Violation]) -> None:
        value = path_value(raw)
        if ignore_empty and not value:
            return
        if "const" in bound and value != bound["const"]:
            out.append(
                Violation(
                    path, f"must be {show(bound['const'])}, is {show(value)}", f"{kind}.const"
                )
            )
        if low is not None and high is not None and high[1] < low[1]:
            # An inverted range: outside [high, low].
            if not (above(value, low) or below(value, high)):
                out.append(
                    Violation(
                        path,
                        f"must be {words[low[0]]} {show(low[1])} or {words[high[0]]} "
                        f"{show(high[1])}, is {show(value)}",
                        f"{kind}.{low[0]}/{high[0]}",
                    )
                )
        else:
            for rule, ok in ((low, above), (high, below)):
                if rule is not None and not ok(value, rule):
                    out.append(
                        Violation(
                            path,
                            f"must be {words[rule[0]]} {show(rule[1])}, is {show(value)}",
                            f"{kind}.{rule[0]}",
                        )
                    )
        if listed_in and value not in listed_in:
            out.append(
                Violation(
                    path,
                    f"must be one of {', '.join(map(show, listed_in))}, is {show(value)}",
                    f"{kind}.in",
                )
            )
        if value in listed_out:
            out.append(Violation(path, f"must not be {show(value)}", f"{kind}.not_in"))

    return check


def _numeric_check(kind: str, rules: Any) -> Callable[[Any, str, list[Violation]], None]:
    return _range_check(kind, rules, str, lambda value: value)


def _time_check(kind: str, rules: Any) -> Callable[[Any, str, list[Violation]], None] | None:
    def nanos(value: Any) -> int:
        return int(value.seconds) * 1_000_000_000 + int(value.nanos)

    def show(total: int) -> str:
        return _duration_text(total // 1_000_000_000, total % 1_000_000_000)

    return _range_check(kind, rules, show, nanos)


def _any_check(rules: validate_pb2.AnyRules) -> Callable[[Any, str, list[Violation]], None] | None:
    allowed, refused = list(getattr(rules, "in")), list(rules.not_in)
    if not allowed and not refused:
        return None

    def check(value: Any, path: str, out: list[Violation]) -> None:
        if allowed and value.type_url not in allowed:
            out.append(Violation(path, f"type {value.type_url!r} is not allowed here", "any.in"))
        if value.type_url in refused:
            out.append(Violation(path, f"type {value.type_url!r} is not allowed", "any.not_in"))

    return check


def _enum_check(
    field: FieldDescriptor, rules: validate_pb2.EnumRules
) -> Callable[[Any, str, list[Violation]], None]:
    enum = field.enum_type if field.enum_type is not None else None
    if enum is None and field.message_type is not None:  # a map entry's value
        enum = field.message_type.fields_by_name["value"].enum_type
    defined = frozenset(v.number for v in enum.values) if enum is not None else frozenset()
    ranged = _range_check("enum", _EnumBounds(rules), str, lambda value: value)

    def check(value: Any, path: str, out: list[Violation]) -> None:
        if rules.defined_only and value not in defined:
            out.append(
                Violation(
                    path,
                    f"{value} is not a defined value of {enum.full_name if enum else 'the enum'}",
                    "enum.defined_only",
                )
            )
        ranged(value, path, out)

    return check


class _EnumBounds:
    """EnumRules seen as numeric rules (const, in, not_in; no bounds)."""

    def __init__(self, rules: validate_pb2.EnumRules) -> None:
        self.rules = rules
        self.not_in = rules.not_in
        setattr(self, "in", getattr(rules, "in"))

    def HasField(self, name: str) -> bool:
        return name == "const" and self.rules.HasField("const")

    @property
    def const(self) -> int:
        return int(self.rules.const)


def _lengths(
    add: Callable[[Callable[[Any], bool], str, str], None],
    rules: Any,
    names: tuple[str, str, str],
    measure: Callable[[Any], int],
    unit: str,
) -> None:
    """The exact, least and most length rules ``names`` name, measured by ``measure``."""
    exact, least, most = names
    if rules.HasField(exact):
        n = getattr(rules, exact)
        add(lambda v: measure(v) == n, f"must be exactly {n} {unit} long", exact)
    if rules.HasField(least):
        low = getattr(rules, least)
        wording = f"must be at least {low} {unit} long" if low != 1 else "must not be empty"
        add(lambda v: measure(v) >= low, wording, least)
    if rules.HasField(most):
        high = getattr(rules, most)
        add(lambda v: measure(v) <= high, f"must be at most {high} {unit} long", most)


def _string_check(kind: str, rules: Any) -> Callable[[Any, str, list[Violation]], None]:
    tests: list[tuple[Callable[[Any], bool], str, str]] = []

    def add(test: Callable[[Any], bool], message: str, rule: str) -> None:
        tests.append((test, message, f"{kind}.{rule}"))

    def length(value: Any) -> int:
        return len(value)

    def size(value: Any) -> int:
        return len(value.encode("utf-8")) if isinstance(value, str) else len(value)

    if rules.HasField("const"):
        wanted = rules.const
        add(lambda v: v == wanted, f"must be {_show(wanted)}", "const")
    unit = "character(s)" if kind == "string" else "byte(s)"
    _lengths(add, rules, ("len", "min_len", "max_len"), length, unit)
    if kind == "string":
        _lengths(add, rules, ("len_bytes", "min_bytes", "max_bytes"), size, "byte(s)")
    if rules.HasField("pattern"):
        try:
            pattern = re.compile(rules.pattern if kind == "string" else rules.pattern.encode())
        except re.error:
            pattern = None
        if pattern is not None:
            compiled = pattern
            add(
                lambda v: compiled.search(v) is not None,
                f"must match the pattern {rules.pattern!r}",
                "pattern",
            )
    if rules.HasField("prefix"):
        prefix = rules.prefix
        add(lambda v: v.startswith(prefix), f"must start with {_show(prefix)}", "prefix")
    if rules.HasField("suffix"):
        suffix = rules.suffix
        add(lambda v: v.endswith(suffix), f"must end with {_show(suffix)}", "suffix")
    if rules.HasField("contains"):
        part = rules.contains
        add(lambda v: part in v, f"must contain {_show(part)}", "contains")
    if kind == "string" and rules.HasField("not_contains"):
        absent = rules.not_contains
        add(lambda v: absent not in v, f"must not contain {_show(absent)}", "not_contains")
    listed_in, listed_out = list(getattr(rules, "in")), list(rules.not_in)
    if listed_in:
        add(lambda v: v in listed_in, f"must be one of {', '.join(map(_show, listed_in))}", "in")
    if listed_out:
        add(lambda v: v not in listed_out, "is a value that is not allowed", "not_in")
    well_known = rules.WhichOneof("well_known")
    if well_known is not None:
        add(*_well_known(kind, rules, well_known))
    ignore_empty = rules.ignore_empty

    def check(value: Any, path: str, out: list[Violation]) -> None:
        if ignore_empty and not value:
            return
        for test, message, rule in tests:
            if not test(value):
                out.append(Violation(path, f"{message}, is {_show(value)}", rule))

    return check


def _well_known(kind: str, rules: Any, which: str) -> tuple[Callable[[Any], bool], str, str]:
    def text(value: Any) -> str:
        return value if isinstance(value, str) else value.decode("latin-1")

    if which == "well_known_regex":
        strict = not rules.HasField("strict") or rules.strict
        if rules.well_known_regex == validate_pb2.HTTP_HEADER_NAME:
            regex = _HEADER_NAME if strict else _LOOSE_HEADER
            return (
                lambda v: regex.match(v) is not None,
                "must be a valid HTTP header name",
                "well_known_regex",
            )
        if rules.well_known_regex == validate_pb2.HTTP_HEADER_VALUE:
            regex = _HEADER_VALUE if strict else _LOOSE_HEADER
            return (
                lambda v: regex.match(v) is not None,
                "must be a valid HTTP header value",
                "well_known_regex",
            )
        return (lambda v: True, "", which)
    if kind == "bytes":
        size = {"ip": (4, 16), "ipv4": (4,), "ipv6": (16,)}[which]
        return (lambda v: len(v) in size, f"must be an {which} address in bytes", which)
    tests: dict[str, tuple[Callable[[str], bool], str]] = {
        "email": (lambda v: _EMAIL.match(v) is not None, "an email address"),
        "hostname": (_hostname, "a hostname"),
        "ip": (_ip, "an IP address"),
        "ipv4": (lambda v: _ip(v, 4), "an IPv4 address"),
        "ipv6": (lambda v: _ip(v, 6), "an IPv6 address"),
        "uri": (lambda v: _uri(v, True), "an absolute URI"),
        "uri_ref": (lambda v: _uri(v, False), "a URI reference"),
        "address": (lambda v: _ip(v) or _hostname(v), "an IP address or a hostname"),
        "uuid": (_uuid, "a UUID"),
    }
    test, noun = tests[which]
    if not getattr(rules, which):
        return (lambda v: True, "", which)
    return (lambda v: test(text(v)), f"must be {noun}", which)


# -- per message type: the compiled checks, and which fields to descend into ------------------


_SINGLE, _REPEATED, _MAP = 0, 1, 2


@attrs.frozen
class _Plan:
    checks: tuple[tuple[str, _Check], ...]
    children: Mapping[str, int]
    """The message fields to descend into, by name: single, repeated or map."""


def _field_rules(field: FieldDescriptor) -> validate_pb2.FieldRules | None:
    options = field.GetOptions()
    if not options.HasExtension(validate_pb2.rules):
        return None
    return options.Extensions[validate_pb2.rules]


def _message_off(descriptor: Descriptor) -> bool:
    options = descriptor.GetOptions()
    return bool(
        (options.HasExtension(validate_pb2.disabled) and options.Extensions[validate_pb2.disabled])
        or (options.HasExtension(validate_pb2.ignored) and options.Extensions[validate_pb2.ignored])
    )


@cache
def _plan(descriptor: Descriptor) -> _Plan:
    if _message_off(descriptor):
        return _Plan((), {})
    checks: list[tuple[str, _Check]] = []
    children: dict[str, int] = {}
    for oneof in descriptor.oneofs:
        options = oneof.GetOptions()
        if (
            options.HasExtension(validate_pb2.required)
            and options.Extensions[validate_pb2.required]
        ):
            checks.append((oneof.name, _oneof_check(oneof.name, [f.name for f in oneof.fields])))
    for field in descriptor.fields:
        rules = _field_rules(field)
        skip = rules is not None and rules.HasField("message") and rules.message.skip
        if rules is not None:
            compiled = _Compiler(field, rules).checks()
            oneof = field.containing_oneof
            if oneof is not None and not _synthetic(oneof):
                # A member of a oneof is checked only when it is the one set.
                compiled = [_when_chosen(oneof.name, field.name, check) for check in compiled]
            checks.extend((field.name, check) for check in compiled)
        if skip or field.message_type is None:
            continue
        target, kind = field.message_type, _REPEATED if field.is_repeated else _SINGLE
        if target.GetOptions().map_entry:
            target, kind = target.fields_by_name["value"].message_type, _MAP
            if target is None:
                continue
        if _may_hold_rules(target):
            children[field.name] = kind
    return _Plan(tuple(checks), children)


def _synthetic(oneof: Any) -> bool:
    """A proto3 ``optional`` field's own oneof, not one written in the .proto."""
    fields = oneof.fields
    return len(fields) == 1 and oneof.name == "_" + fields[0].name


def _when_chosen(oneof: str, member: str, check: _Check) -> _Check:
    def guarded(msg: Message, path: str, out: list[Violation]) -> None:
        if msg.WhichOneof(oneof) == member:
            check(msg, path, out)

    return guarded


def _oneof_check(name: str, members: list[str]) -> _Check:
    def check(msg: Message, path: str, out: list[Violation]) -> None:
        if msg.WhichOneof(name) is None:
            out.append(
                Violation(path, f"one of {', '.join(members)} is required", "oneof required")
            )

    return check


@cache
def _may_hold_rules(descriptor: Descriptor) -> bool:
    """Whether a message of this type, or anything inside it, carries a rule or an Any."""
    seen: set[str] = set()
    stack = [descriptor]
    while stack:
        current = stack.pop()
        if current.full_name in seen:
            continue
        seen.add(current.full_name)
        if current.full_name == "google.protobuf.Any":
            return True
        if _message_off(current):
            continue
        if any(o.GetOptions().HasExtension(validate_pb2.required) for o in current.oneofs):
            return True
        for field in current.fields:
            if _field_rules(field) is not None:
                return True
            if field.message_type is not None:
                stack.append(field.message_type)
    return False


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _walk(message: Message, path: str, out: list[Violation], pool: Any, depth: int) -> None:
    descriptor = message.DESCRIPTOR
    if descriptor.full_name == "google.protobuf.Any":
        inner = _unpack(message, pool)
        if inner is not None and depth < 64:
            _walk(inner, path, out, pool, depth + 1)
        return
    plan = _plan(descriptor)
    for name, check in plan.checks:
        check(message, _join(path, name), out)
    children = plan.children
    if not children:
        return
    for field, value in message.ListFields():  # the fields set, only
        kind = children.get(field.name)
        if kind is None:
            continue
        where = _join(path, field.name)
        if kind == _SINGLE:
            _walk(value, where, out, pool, depth + 1)
        elif kind == _REPEATED:
            for index, item in enumerate(value):
                _walk(item, f"{where}[{index}]", out, pool, depth + 1)
        else:
            for key in value:
                _walk(value[key], f"{where}[{key}]", out, pool, depth + 1)


def _unpack(message: Any, pool: Any) -> Message | None:
    from ._messages import message_class

    if not message.type_url:
        return None
    try:
        cls = message_class(message.type_url)
    except KeyError:
        return None
    try:
        return cls.FromString(message.value)
    except DecodeError:
        return None


def violations(message: Message) -> Iterator[Violation]:
    """Every constraint ``message`` breaks, recursively (inside known ``Any`` types too)."""
    found: list[Violation] = []
    _walk(message, "", found, descriptor_pool.Default(), 0)
    return iter(found)
