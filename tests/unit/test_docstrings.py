"""The docstrings are written in the one style the API reference renders (mkdocstrings).

mkdocstrings shows a Sphinx role (``:class:`Cache` ``) as raw text, so none is left in the
sources, comments included; a name is linked as ``[`Cache`][xdscore.cache.Cache]``, or
written in backticks where it is not in the reference. ``make docs`` fails on a link the
reference cannot resolve in the docstrings it renders; here every link, in private modules'
docstrings too, must at least name an object that exists.
"""

from __future__ import annotations

import ast
import importlib
import io
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "xdscore"
SPHINX_ROLE = re.compile(r":(?:py:)?(?:class|func|meth|attr|mod|data|exc|obj|const):`")
CROSS_REFERENCE = re.compile(r"\]\[(xdscore(?:\.\w+)*)\]")


def _sources() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _docstrings_and_comments(path: Path) -> Iterator[tuple[int, str]]:
    """(line, text) of every string statement (docstrings, attribute docstrings) and comment."""
    text = path.read_text(encoding="utf-8")
    for node in ast.walk(ast.parse(text)):
        if (
            isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            yield node.lineno, node.value.value
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string


def _resolves(target: str) -> bool:
    parts = target.split(".")
    for split in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        for name in parts[split:]:
            annotations = getattr(found, "__annotations__", {}) if isinstance(found, type) else {}
            if hasattr(found, name) or name in annotations:
                found = getattr(found, name, None)
            elif isinstance(found, type) and _assigned_in_init(found, name):
                found = None
            else:
                return False
        return True
    return False


def _assigned_in_init(cls: type, name: str) -> bool:
    """Whether some class in ``cls``'s MRO sets ``self.name`` in its ``__init__``."""
    for base in cls.__mro__:
        init = vars(base).get("__init__")
        code = getattr(init, "__code__", None)
        if code is not None and name in code.co_names:
            return True
    return False


@pytest.mark.parametrize("path", _sources(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_sphinx_role_is_left(path: Path) -> None:
    found = [
        f"{path.name}:{line}: {match.group(0)}"
        for line, text in _docstrings_and_comments(path)
        for match in SPHINX_ROLE.finditer(text)
    ]
    assert not found, "Sphinx roles (write [`Name`][xdscore.path.Name] or `Name`):\n" + "\n".join(
        found
    )


def test_every_cross_reference_names_an_object_that_exists() -> None:
    stale = [
        f"{path.relative_to(PACKAGE)}:{line}: {target}"
        for path in _sources()
        for line, text in _docstrings_and_comments(path)
        for target in CROSS_REFERENCE.findall(text)
        if not _resolves(target)
    ]
    assert not stale, "\n".join(stale)


def test_the_checks_see_a_role_and_a_stale_link() -> None:
    assert SPHINX_ROLE.search("a :class:`~xdscore.Cache` here")
    assert SPHINX_ROLE.search("see :meth:`Call.synced`")
    assert not SPHINX_ROLE.search("see [`Cache`][xdscore.cache.Cache]")
    assert _resolves("xdscore.cache.Cache.watch")
    assert _resolves("xdscore.server.StreamClosed")
    assert not _resolves("xdscore.cache.Cache.no_such_method")
    assert not _resolves("xdscore.no_such_module")
