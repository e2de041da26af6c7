"""Reading a resource the way Envoy reads its own YAML and JSON, and no more loosely.

Envoy turns a YAML file into JSON first (``ValueUtil::loadFromYaml``) and hands the JSON to
protobuf's C++ parser with ``case_insensitive_enum_parsing`` on, through the public
``JsonStringToMessage``, which also turns on the parser's legacy syntax. What that accepts
beyond the proto3 JSON mapping, and this module accepts too:

* YAML plain scalars are typed as yaml-cpp types them: ``y``/``n``/``yes``/``no``/``true``/
  ``false``/``on``/``off`` (lower case, upper case or capitalised) are booleans, an integer
  (decimal, ``0x`` hex, leading-zero octal) is a number within the int32 range and a string
  beyond it, ``~``/``null``/empty is null, and everything else, floats and dates included,
  is a string (protobuf converts it by the field's type). Quoted and block scalars are
  strings. Mapping keys are their text, and a key tagged ``!ignore`` is dropped with its value
  (Envoy's way to hold YAML anchors).
* An enum value in any case (``strict_dns``, ``Auto``), as well as its number.
* A single value where a repeated field is expected (``filters: {name: ...}``); inside a
  list, a nested list is flattened into it and a null is a default element.
* A boolean field given as a string (``"true"``, ``"yes"``, ``"1"``, ``"f"``...).
* A well-known type given as its plain message (``{seconds: 5}`` for a Duration,
  ``{value: 3}`` for a wrapper) and an ``Any`` given as an empty mapping.

Every other departure is an error naming the field path in snake_case, the YAML line, and,
for a misspelt field or enum value, the nearest known one. Unknown fields are errors here,
as they are in Envoy's static configuration (Envoy only warns about them in dynamic
configuration by default): an unknown field is almost always a typo whose setting would be
silently lost.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from functools import cache
from typing import Any

import yaml
from google.protobuf import descriptor_pool, json_format, message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

__all__ = [
    "FieldProblem",
    "FieldProblems",
    "Located",
    "LocatedList",
    "classify_plain",
    "normalize",
    "parse_message",
]

# -- YAML scalars as yaml-cpp (and so Envoy) types them --------------------------------------

_YAML_BOOLS = {
    "y": True, "yes": True, "true": True, "on": True,
    "n": False, "no": False, "false": False, "off": False,
}  # fmt: skip
_YAML_NULLS = frozenset({"", "~", "null", "Null", "NULL"})
# What an iostream reads as an int64 with the base detected from the prefix (as strtol's
# base 0): 0x hex, a leading 0 octal, decimal.
_YAML_INT = re.compile(r"[-+]?(?:0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)\Z")
_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)

NULL_TAG = "tag:yaml.org,2002:null"
STR_TAG = "tag:yaml.org,2002:str"
BOOL_TAG = "tag:xdscore:envoy-bool"
INT_TAG = "tag:xdscore:envoy-int"


def _flexible_case(text: str) -> bool:
    return text.islower() or text.isupper() or (text[:1].isupper() and text[1:].islower())


def classify_plain(text: str) -> str:
    """The tag Envoy's YAML conversion gives a plain (unquoted) scalar."""
    if text in _YAML_NULLS:
        return NULL_TAG
    if len(text) <= 5 and text.lower() in _YAML_BOOLS and _flexible_case(text):
        return BOOL_TAG
    if _YAML_INT.match(text) and _INT64[0] <= _yaml_int(text) <= _INT64[1]:
        return INT_TAG
    return STR_TAG


def _yaml_int(text: str) -> int:
    sign = -1 if text[:1] == "-" else 1
    digits = text.lstrip("+-")
    if digits[:2] in ("0x", "0X"):
        return sign * int(digits[2:], 16)
    if len(digits) > 1 and digits[0] == "0":
        return sign * int(digits[1:], 8)
    return sign * int(digits)


def construct_bool(loader: Any, node: yaml.ScalarNode) -> bool:
    return _YAML_BOOLS[node.value.lower()]


def construct_int(loader: Any, node: yaml.ScalarNode) -> int | str:
    value = _yaml_int(node.value)
    # Beyond int32, Envoy writes the integer as a string (proto3 JSON allows it).
    return value if _INT32[0] <= value <= _INT32[1] else str(value)


class Located(dict[str, Any]):
    """A mapping as read from YAML or JSON, with the line (1-based) of each key."""

    __slots__ = ("line", "lines")

    def __init__(self, line: int | None = None) -> None:
        super().__init__()
        self.line = line
        self.lines: dict[str, int] = {}

    @staticmethod
    def without(value: Mapping[str, Any], key: str) -> dict[str, Any]:
        """``value`` less ``key``, keeping its lines if it has them."""
        if not isinstance(value, Located):
            return {k: item for k, item in value.items() if k != key}
        result = Located(value.line)
        result.update((k, item) for k, item in value.items() if k != key)
        result.lines = value.lines
        return result


class LocatedList(list[Any]):
    """A sequence as read, with the line of each item."""

    __slots__ = ("line", "lines")

    def __init__(self, line: int | None = None) -> None:
        super().__init__()
        self.line = line
        self.lines: list[int] = []


# -- the checks and relaxations, field by field ----------------------------------------------


class FieldProblem(Exception):
    """A value that does not fit its field: the field path (snake_case), the line if known."""

    def __init__(self, path: str, message: str, line: int | None) -> None:
        super().__init__(message)
        self.path = path
        self.message = message
        self.line = line

    def __str__(self) -> str:
        at = f"line {self.line}: " if self.line is not None else ""
        return f"{at}{self.path or '(resource)'}: {self.message}"


_WRAPPERS = frozenset(
    f"google.protobuf.{name}Value"
    for name in ("Double", "Float", "Int64", "UInt64", "Int32", "UInt32", "Bool", "String", "Bytes")
)
_PASSED_THROUGH = frozenset(
    {"google.protobuf.Struct", "google.protobuf.Value", "google.protobuf.ListValue"}
)
_PLAIN_WKT = _WRAPPERS | {
    "google.protobuf.Duration",
    "google.protobuf.Timestamp",
    "google.protobuf.FieldMask",
}
# What protobuf's C++ parser (absl's SimpleAtoi, SimpleAtod, its duration parser) takes in
# a string: json_format would also take underscores, spaces and more.
_INTEGER = re.compile(r"[-+]?[0-9]+\Z")
_FLOAT = re.compile(r"[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?\Z")
_FLOAT_WORDS = {"nan": "NaN", "inf": "Infinity", "infinity": "Infinity"}
_DURATION = re.compile(r"-?[0-9]+(?:\.[0-9]{1,9})?s\Z")
_TRUE_STRINGS = frozenset({"true", "t", "yes", "y", "1"})
_FALSE_STRINGS = frozenset({"false", "f", "no", "n", "0"})
_NUMERIC = (FieldDescriptor.CPPTYPE_INT32, FieldDescriptor.CPPTYPE_INT64,
            FieldDescriptor.CPPTYPE_UINT32, FieldDescriptor.CPPTYPE_UINT64)  # fmt: skip
_FLOATS = (FieldDescriptor.CPPTYPE_FLOAT, FieldDescriptor.CPPTYPE_DOUBLE)


_SCALAR, _LIST, _MAP = 0, 1, 2


class _Field:
    """What the walk needs of a field, read once from its descriptor (attribute reads on
    descriptors are slow)."""

    __slots__ = ("cpp", "entry", "enum", "kind", "message", "name", "oneof")

    def __init__(self, field: FieldDescriptor) -> None:
        self.name: str = field.name
        self.message: Descriptor | None = field.message_type
        self.enum: Any = field.enum_type
        self.cpp: int = field.cpp_type
        oneof = field.containing_oneof
        self.oneof: str | None = oneof.name if oneof is not None else None
        self.entry: _Field | None = None
        if self.message is not None and self.message.GetOptions().map_entry:
            self.kind = _MAP
            self.entry = _Field(self.message.fields_by_name["value"])
        else:
            self.kind = _LIST if field.is_repeated else _SCALAR


@cache
def _fields(descriptor: Descriptor) -> dict[str, _Field]:
    """Each field by its proto name and by its JSON name."""
    table: dict[str, _Field] = {}
    for field in descriptor.fields:
        table[field.json_name] = _Field(field)
    for field in descriptor.fields:
        table[field.name] = _Field(field)
    return table


@cache
def _enum_names(enum: Any) -> dict[str, str]:
    """Each value name of an enum, upper-cased, to its name."""
    return {value.name.upper(): value.name for value in enum.values}


def _line_of(container: Any, key: Any, default: int | None) -> int | None:
    if isinstance(container, Located):
        return container.lines.get(key, default)
    if isinstance(container, LocatedList) and isinstance(key, int) and key < len(container.lines):
        return container.lines[key]
    return default


def _suggest(word: str, choices: list[str]) -> str:
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, int | float):
        return f"the number {value}"
    if isinstance(value, str):
        return f"the string {value!r}"
    if isinstance(value, Mapping):
        return "a mapping"
    return "a list" if isinstance(value, list) else type(value).__name__


class Normalizer:
    """Turns a resource as read into the strict proto3 JSON form ``json_format`` parses,
    applying Envoy's relaxations; collects a `FieldProblem` for each departure."""

    def __init__(self, pool: Any = None, limit: int = 20) -> None:
        self.pool = pool or descriptor_pool.Default()
        self.problems: list[FieldProblem] = []
        self.limit = limit

    def fail(self, path: str, message: str, line: int | None) -> None:
        if len(self.problems) < self.limit:
            self.problems.append(FieldProblem(path, message, line))

    def message(self, descriptor: Descriptor, value: Any, path: str, line: int | None) -> Any:
        name = descriptor.full_name
        if name == "google.protobuf.Any":
            return self.any(value, path, line)
        if name in _PASSED_THROUGH:
            return value
        if name in _PLAIN_WKT and not isinstance(value, Mapping):
            return self.wkt_scalar(descriptor, value, path, line)
        if not isinstance(value, Mapping):
            self.fail(path, f"expected a mapping for {name}, got {_kind(value)}", line)
            return {}
        fields = _fields(descriptor)
        result: dict[str, Any] = {}
        oneofs: dict[str, str] = {}
        lines = value.lines if isinstance(value, Located) else {}
        for key, item in value.items():
            key_line = lines.get(key, line)
            field = fields.get(key) if isinstance(key, str) else None
            if field is None:
                # Matched against both spellings; the suggestion is in snake_case.
                spellings = {f.json_name: f.name for f in descriptor.fields}
                spellings.update((f.name, f.name) for f in descriptor.fields)
                close = difflib.get_close_matches(str(key), list(spellings), n=1, cutoff=0.6)
                hint = f"; did you mean {spellings[close[0]]!r}?" if close else ""
                self.fail(
                    f"{path}.{key}" if path else str(key),
                    f"no field {key!r} in {name}{hint}",
                    key_line,
                )
                continue
            where = f"{path}.{field.name}" if path else field.name
            if field.name in result:
                self.fail(where, "given twice (by its snake_case and its camelCase name)", key_line)
                continue
            oneof = field.oneof
            if oneof is not None and item is not None:
                if oneof in oneofs:
                    self.fail(
                        where,
                        f"{oneofs[oneof]!r} and {field.name!r} are both set, but only "
                        f"one field of the oneof {oneof!r} may be",
                        key_line,
                    )
                    continue
                oneofs[oneof] = field.name
            result[field.name] = self.field(field, item, where, key_line)
        if name in _PLAIN_WKT:
            # The plain message form of a well-known type: its JSON form instead.
            return self.plain_wkt(descriptor, result, path, line)
        return result

    def wkt_scalar(self, descriptor: Descriptor, value: Any, path: str, line: int | None) -> Any:
        """A well-known type in its JSON form, checked as protobuf's C++ parser checks it
        (json_format is laxer: it takes "5 s", "+5s" or "1_0s" for a duration)."""
        name = descriptor.full_name
        if name in _WRAPPERS:
            return self.singular(_fields(descriptor)["value"], value, path, line)
        if name == "google.protobuf.Duration" and not (
            isinstance(value, str) and _DURATION.match(value)
        ):
            self.fail(path, f"expected a duration such as 1s or 0.25s, got {_kind(value)}", line)
        return value

    def plain_wkt(
        self, descriptor: Descriptor, fields: dict[str, Any], path: str, line: int | None
    ) -> Any:
        cls = message_factory.GetMessageClass(descriptor)
        message = cls()
        try:
            for key, item in fields.items():
                if isinstance(item, list):
                    getattr(message, key).extend(item)
                else:
                    setattr(message, key, item)
            return json_format.MessageToDict(message)
        except (TypeError, ValueError, json_format.SerializeToJsonError) as exc:
            self.fail(path, f"not a valid {descriptor.full_name}: {exc}", line)
            return None

    def any(self, value: Any, path: str, line: int | None) -> Any:
        if not isinstance(value, Mapping):
            self.fail(path, f"expected a mapping with '@type' (an Any), got {_kind(value)}", line)
            return {}
        if not value:
            return {}
        type_url = value.get("@type")
        if not isinstance(type_url, str) or not type_url:
            self.fail(path, "an Any needs its '@type' (only an empty {} may go without)", line)
            return {}
        full_name = type_url.rsplit("/", 1)[-1]
        try:
            inner = self.pool.FindMessageTypeByName(full_name)
        except KeyError:
            self.fail(
                path,
                f"no descriptor is known for {type_url!r}: a typo, or an extension xds-protos "
                "does not have (bring its descriptors with --descriptors FILE)",
                _line_of(value, "@type", line),
            )
            return {}
        body = Located.without(value, "@type")
        if inner.full_name in _PLAIN_WKT or inner.full_name in _PASSED_THROUGH:
            if set(body) != {"value"}:
                self.fail(path, f"an Any holding a {inner.full_name} takes only 'value'", line)
                return {}
            converted = self.message(inner, body["value"], f"{path}.value", line)
            return {"@type": type_url, "value": converted}
        result = self.message(inner, body, path, line)
        if isinstance(result, dict):
            result = {"@type": type_url, **result}
        return result

    def field(self, field: _Field, value: Any, path: str, line: int | None) -> Any:
        if value is None:
            return None
        if field.kind == _SCALAR:
            return self.singular(field, value, path, line)
        if field.entry is not None:
            if not isinstance(value, Mapping):
                self.fail(path, f"expected a mapping, got {_kind(value)}", line)
                return None
            entry = field.entry
            return {
                key: self.singular(entry, item, f"{path}[{key}]", _line_of(value, key, line))
                for key, item in value.items()
            }
        items = value if isinstance(value, list) else [value]
        return [
            self.singular(field, item, f"{path}[{index}]", item_line)
            for index, (item, item_line) in enumerate(self.flatten(field, items, value, line))
        ]

    def flatten(
        self, field: _Field, items: list[Any], value: Any, line: int | None
    ) -> list[tuple[Any, int | None]]:
        """The elements of a repeated field, nested lists flattened into it (not for the
        elements of a ``Value`` or ``ListValue``)."""
        flat: list[tuple[Any, int | None]] = []
        kind = field.message.full_name if field.message is not None else ""
        for index, item in enumerate(items):
            item_line = _line_of(value, index, line) if value is items else line
            if isinstance(item, list) and kind not in _PASSED_THROUGH:
                flat.extend(self.flatten(field, item, item, item_line))
            else:
                flat.append((item, item_line))
        return flat

    def singular(self, field: _Field, value: Any, path: str, line: int | None) -> Any:
        if field.message is not None:
            if value is None:
                if field.message.full_name in ("google.protobuf.Value",):
                    return None
                return {}  # a null element of a repeated field is a default element
            return self.message(field.message, value, path, line)
        if field.enum is not None:
            return self.enum(field, value, path, line)
        cpp = field.cpp
        if value is None:
            return _zero(field)  # a null element of a repeated scalar field
        if cpp == FieldDescriptor.CPPTYPE_STRING:
            if not isinstance(value, str):
                self.fail(path, f"expected a string, got {_kind(value)} (quote it)", line)
            return value
        if cpp == FieldDescriptor.CPPTYPE_BOOL:
            if isinstance(value, bool):
                return value
            if isinstance(value, str) and value.lower() in _TRUE_STRINGS | _FALSE_STRINGS:
                return value.lower() in _TRUE_STRINGS
            self.fail(path, f"expected true or false, got {_kind(value)}", line)
            return value
        if cpp in _NUMERIC:
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float | str)
                or (isinstance(value, str) and not _INTEGER.match(value))
            ):
                self.fail(path, f"expected an integer, got {_kind(value)}", line)
        elif cpp in _FLOATS:
            if isinstance(value, str):
                special = _FLOAT_WORDS.get(value.lower().lstrip("+"))
                if value.startswith("-") and value.lower().lstrip("-") in ("inf", "infinity"):
                    return "-Infinity"
                if special is not None:
                    return special
                if not _FLOAT.match(value):
                    self.fail(path, f"expected a number, got {_kind(value)}", line)
            elif isinstance(value, bool) or not isinstance(value, int | float):
                self.fail(path, f"expected a number, got {_kind(value)}", line)
        return value

    def enum(self, field: _Field, value: Any, path: str, line: int | None) -> Any:
        if isinstance(value, bool) or not isinstance(value, int | str):
            if value is None:
                return field.enum.values[0].name
            self.fail(path, f"expected a value of {field.enum.full_name}, got {_kind(value)}", line)
            return value
        if isinstance(value, int):
            return value
        names = _enum_names(field.enum)
        canonical = names.get(value.upper())
        if canonical is not None:
            return canonical
        if re.fullmatch(r"[-+]?[0-9]+", value):
            return int(value)
        choices = list(names.values())
        self.fail(
            path,
            f"{value!r} is not a value of {field.enum.full_name}"
            + (
                _suggest(value.upper(), list(names))
                or f" (one of {', '.join(choices[:8])}"
                + (", ..." if len(choices) > 8 else "")
                + ")"
            ),
            line,
        )
        return value


def _zero(field: _Field) -> Any:
    if field.cpp == FieldDescriptor.CPPTYPE_STRING:
        return ""
    if field.cpp == FieldDescriptor.CPPTYPE_BOOL:
        return False
    return 0


def normalize(
    descriptor: Descriptor, body: Mapping[str, Any], line: int | None = None
) -> tuple[dict[str, Any], list[FieldProblem]]:
    """The strict proto3 JSON form of ``body`` (a resource without its ``@type``) and the
    problems found on the way."""
    normalizer = Normalizer()
    result = normalizer.message(descriptor, body, "", line)
    return (result if isinstance(result, dict) else {}), normalizer.problems


class FieldProblems(Exception):
    """Every `FieldProblem` of one resource."""

    def __init__(self, problems: list[FieldProblem]) -> None:
        super().__init__("; ".join(str(problem) for problem in problems))
        self.problems = problems


def parse_message(cls: type[Message], body: Mapping[str, Any], line: int | None = None) -> Message:
    """``body`` (a resource without its ``@type``) as a ``cls`` message, read as Envoy reads
    it; raises `FieldProblems`."""
    strict, problems = normalize(cls.DESCRIPTOR, body, line)
    if problems:
        raise FieldProblems(problems)
    try:
        return json_format.ParseDict(strict, cls())
    except json_format.ParseError as exc:
        raise FieldProblems([FieldProblem("", str(exc), line)]) from None
