"""Writes the code of each :class:`~xdscore.protocol._record.Record` class from its fields.

A development tool (``make records``), kept out of the package: it must run when the
package cannot be imported (a new field used before its code is generated), and it does
not ship. A record class declares its fields once, in a comment block right under its
docstring, and the code between the markers that follow is generated::

        # record fields, with evolve:
        #     node: Node
        #     *
        #     acks: int = 0
        # --- generated from the fields above by `make records`; do not edit ---
        ...
        # --- end generated ---

The block lists the fields in order, ``name: type`` or ``name: type = default``, as the
parameters of ``__init__``; a line ``*`` makes the fields after it keyword-only. A default
of ``{}`` gives each record a new empty dict (``__init__`` takes ``None`` for it). The
generated code is ``_fields`` and ``__slots__`` (the same names), an ``__init__`` that sets
each field ``Final``, and, for ``record fields, with evolve``, an ``evolve`` that takes each
field by keyword, :data:`~xdscore.protocol._record.KEEP` by default; ``ruff format``
formats it with the project's settings. The module imports what the code names
(``Final``, ``KEEP``, ``Keep``) itself.

``python -m tests.recordgen [--check] [FILE ...]`` rewrites the generated code of the
files named (by default every module of the package) or, with ``--check``, changes nothing
and exits 1 naming each class whose code is not what its fields give. A class that sets
``_fields`` outside generated code, or a malformed block, is an error (exit 2).
"""

from __future__ import annotations

import argparse
import ast
import re
import subprocess
import sys
import tomllib
from collections.abc import Sequence
from pathlib import Path

import attrs

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "xdscore"
SETTINGS = ROOT / "pyproject.toml"
"""The project's settings, which ``ruff format`` formats the generated code with."""
INDENT = "    "
"""Records are top-level classes: their bodies are indented once."""
HEADER = re.compile(r"^    # record fields(?P<evolve>, with evolve)?:$")
FIELD = re.compile(r"^    #     (?P<field>\S.*)$")
BEGIN = "    # --- generated from the fields above by `make records`; do not edit ---"
END = "    # --- end generated ---"
HAND_WRITTEN = re.compile(r"^    _fields = ")
CLASS = re.compile(r"^class (?P<name>\w+)\b")
_MUTABLE = (ast.List, ast.Set, ast.Dict, ast.ListComp, ast.SetComp, ast.DictComp)


class DeclarationError(Exception):
    """A record's declaration or generated code that cannot be read, with where it is."""

    def __init__(self, path: Path, line: int, message: str) -> None:
        super().__init__(f"{path}:{line}: {message}")


@attrs.frozen
class Field:
    """One declared field."""

    name: str
    type: str
    default: str | None
    keyword_only: bool
    fresh: bool
    """Its default is ``{}``: a new dict for each record, ``None`` standing for it."""
    evolve_type: str


@attrs.frozen
class Declaration:
    """One record class's fields, and where its generated code lies (line indices)."""

    name: str
    fields: tuple[Field, ...]
    evolve: bool
    begin: int
    end: int


def _field(text: str, keyword_only: bool, path: Path, line: int) -> Field:
    try:
        statement = ast.parse(text).body
    except SyntaxError:
        statement = []
    if (
        len(statement) != 1
        or not isinstance(node := statement[0], ast.AnnAssign)
        or not isinstance(node.target, ast.Name)
    ):
        raise DeclarationError(path, line, f"expected `name: type [= default]`, not {text!r}")
    type_ = ast.get_source_segment(text, node.annotation)
    assert type_ is not None
    default = None if node.value is None else ast.get_source_segment(text, node.value)
    fresh = isinstance(node.value, ast.Dict) and not node.value.keys
    if isinstance(node.value, _MUTABLE) and not fresh:
        raise DeclarationError(
            path, line, f"{text!r}: a mutable default is shared by every record ({{}} is not)"
        )
    annotation = node.annotation
    if (
        isinstance(annotation, ast.BinOp)
        and isinstance(annotation.op, ast.BitOr)
        and isinstance(annotation.right, ast.Constant)
        and annotation.right.value is None
    ):
        if fresh:
            raise DeclarationError(path, line, f"{text!r}: a {{}} default takes no `| None`")
        evolve_type = f"{ast.get_source_segment(text, annotation.left)} | Keep | None"
    else:
        evolve_type = f"{type_} | Keep"
    return Field(node.target.id, type_, default, keyword_only, fresh, evolve_type)


def _class_name(lines: Sequence[str], index: int, path: Path) -> str:
    for line in reversed(lines[:index]):
        if match := CLASS.match(line):
            return match["name"]
        if line and not line.startswith((" ", "#")):
            break
    raise DeclarationError(path, index + 1, "record fields declared outside a class")


def _fields(lines: Sequence[str], index: int, path: Path) -> tuple[tuple[Field, ...], int]:
    fields: list[Field] = []
    keyword_only = False
    while index < len(lines) and (match := FIELD.match(lines[index])):
        text = match["field"]
        if text == "*":
            if keyword_only:
                raise DeclarationError(path, index + 1, "a second `*`")
            keyword_only = True
        else:
            field = _field(text, keyword_only, path, index + 1)
            if any(f.name == field.name for f in fields):
                raise DeclarationError(path, index + 1, f"{field.name!r} declared twice")
            if (
                not keyword_only
                and field.default is None
                and any(f.default is not None for f in fields)
            ):
                raise DeclarationError(path, index + 1, f"{field.name!r} needs a default")
            fields.append(field)
        index += 1
    if not fields:
        raise DeclarationError(path, index + 1, "a record declares no field")
    return tuple(fields), index


def declarations(text: str, path: Path) -> list[Declaration]:
    """The record declarations of a module's source, in order."""
    lines = text.split("\n")
    found: list[Declaration] = []
    index = 0
    while index < len(lines):
        line = lines[index]
        header = HEADER.match(line)
        if header is None:
            if line in (BEGIN, END):
                raise DeclarationError(path, index + 1, "generated code without record fields")
            if HAND_WRITTEN.match(line):
                name = _class_name(lines, index, path)
                raise DeclarationError(
                    path, index + 1, f"{name}'s fields are written by hand: declare them"
                )
            index += 1
            continue
        name = _class_name(lines, index, path)
        fields, begin = _fields(lines, index + 1, path)
        if begin == len(lines) or lines[begin] != BEGIN:
            raise DeclarationError(path, begin + 1, f"expected {BEGIN.strip()!r}")
        end = begin + 1
        while end < len(lines) and lines[end] != END:
            if HEADER.match(lines[end]) or lines[end] == BEGIN:
                break
            end += 1
        if end == len(lines) or lines[end] != END:
            raise DeclarationError(path, begin + 1, f"{name}: no {END.strip()!r}")
        found.append(Declaration(name, fields, header["evolve"] is not None, begin, end))
        index = end + 1
    return found


def _line_length() -> int:
    with SETTINGS.open("rb") as file:
        length = tomllib.load(file).get("tool", {}).get("ruff", {}).get("line-length", 88)
    assert isinstance(length, int)
    return length


def _quoted(names: Sequence[str]) -> str:
    inner = ", ".join(f'"{name}"' for name in names)
    return f"({inner},)" if len(names) == 1 else f"({inner})"


def _parameters(fields: Sequence[Field]) -> str:
    parameters = ["self"]
    for field in fields:
        if field.keyword_only and "*" not in parameters:
            parameters.append("*")
        if field.fresh:
            parameters.append(f"{field.name}: {field.type} | None = None")
        elif field.default is None:
            parameters.append(f"{field.name}: {field.type}")
        else:
            parameters.append(f"{field.name}: {field.type} = {field.default}")
    return ", ".join(parameters)


def _code(declaration: Declaration, line_length: int) -> list[str]:
    """The class body's generated statements, unformatted, indented once."""
    fields = declaration.fields
    names = [field.name for field in fields]
    code = [
        f"_fields = {_quoted(names)}",
        "__slots__ = _fields",
        "",
        f"def __init__({_parameters(fields)}) -> None:",
    ]
    for field in fields:
        if field.fresh:
            value = f"{{}} if {field.name} is None else {field.name}"
            code.append(f"    self.{field.name}: Final[{field.type}] = {value}")
        else:
            code.append(f"    self.{field.name}: Final = {field.name}")
    if declaration.evolve:
        keywords = ", ".join(f"{f.name}: {f.evolve_type} = KEEP" for f in fields)
        code += [
            "",
            f"def evolve(self, *, {keywords}) -> {declaration.name}:",
            '    """A copy with the fields given changed."""',
            f"    return {declaration.name}(",
        ]
        for name in names:
            argument = f"{name}=self.{name} if isinstance({name}, Keep) else {name}"
            if len(INDENT * 3) + len(argument) + 1 > line_length:
                argument = f"{name}=({argument.removeprefix(f'{name}=')})"
            code.append(f"        {argument},")
        code.append("    )")
    return [INDENT + line if line else line for line in code]


def _formatted(bodies: Sequence[list[str]]) -> list[list[str]]:
    """The bodies as ``ruff format`` writes them with the project's settings."""
    source = "".join(
        f"class _Record{k}:\n" + "\n".join(body) + "\n\n\n" for k, body in enumerate(bodies)
    )
    done = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--config", str(SETTINGS), "-"],
        input=source,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"ruff format failed (is ruff installed?): {done.stderr.strip()}")
    formatted: list[list[str]] = []
    for line in done.stdout.split("\n"):
        if re.fullmatch(r"class _Record\d+:", line):
            formatted.append([])
        else:
            formatted[-1].append(line)
    return [body[: max(i + 1 for i, line in enumerate(body) if line)] for body in formatted]


def regenerate(text: str, path: Path) -> tuple[str, list[str]]:
    """A module's source with each record's generated code written from its fields, and
    the names of the classes whose code that changed."""
    found = declarations(text, path)
    if not found:
        return text, []
    lines = text.split("\n")
    length = _line_length()
    bodies = _formatted([_code(declaration, length) for declaration in found])
    changed: list[str] = []
    for declaration, body in reversed(list(zip(found, bodies, strict=True))):
        generated = [*body, ""]
        if lines[declaration.begin + 1 : declaration.end] != generated:
            lines[declaration.begin + 1 : declaration.end] = generated
            changed.append(declaration.name)
    return "\n".join(lines), changed[::-1]


def main(argv: Sequence[str] | None = None) -> int:
    """Rewrite (or, with ``--check``, check) the generated code of records; the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m tests.recordgen",
        description="Write each record class's code from the fields it declares.",
    )
    parser.add_argument(
        "--check", action="store_true", help="change nothing; exit 1 if any code differs"
    )
    parser.add_argument("files", nargs="*", type=Path, help="default: every module of xdscore")
    options = parser.parse_args(argv)
    files: list[Path] = options.files or sorted(PACKAGE.rglob("*.py"))
    stale = 0
    try:
        for path in files:
            text = path.read_text(encoding="utf-8")
            new, changed = regenerate(text, path)
            if not changed:
                continue
            stale += len(changed)
            if options.check:
                for name in changed:
                    print(f"{path}: {name}: the generated code is not what its fields give")
            else:
                path.write_text(new, encoding="utf-8")
                print(f"{path}: rewrote {', '.join(changed)}")
    except DeclarationError as error:
        print(error, file=sys.stderr)
        return 2
    if options.check and stale:
        print("run `make records` (python -m tests.recordgen)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
