"""Which build of xdscore is loaded: compiled by mypyc, pure Python, or partly compiled.

The modules on every stream's path are listed once, under ``[tool.xdscore] compiled`` in
pyproject.toml. A compiled wheel (``hatch_build.py``) holds an extension module beside the
source of each, and ``_build.json`` naming them and the compiler; in a clone, ``make
compiled`` puts that wheel's extension modules beside the sources and the list is read from
pyproject.toml.
Python loads an extension module in place of the source beside it, so what is loaded is
decided module by module: :func:`loaded_build` imports each listed module and says which.

``XDSCORE_PURE=1`` in the environment makes ``import xdscore`` call
:func:`load_sources_only`: the sources are loaded even where compiled modules sit beside
them (the pure test leg, and a way to compare the two builds on one install).
"""

from __future__ import annotations

import importlib
import importlib.abc
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from importlib.machinery import (
    EXTENSION_SUFFIXES,
    SOURCE_SUFFIXES,
    FileFinder,
    ModuleSpec,
    SourceFileLoader,
)
from pathlib import Path
from types import ModuleType
from typing import Literal

__all__ = [
    "PURE_VARIABLE",
    "RECORD",
    "Build",
    "describe",
    "load_sources_only",
    "loaded_build",
    "module_name",
    "pure_requested",
]

PURE_VARIABLE = "XDSCORE_PURE"
"""Set to ``1``: build no compiled module (``hatch_build.py``) and load none."""

RECORD = "_build.json"
"""The compiled wheel's record of its build, beside this module: ``{"compiled": [dotted
module names], "compiler": "mypyc (mypy X.Y)"}``."""

_PACKAGE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Build:
    """The build loaded: the modules meant to be compiled, and which of them are."""

    listed: tuple[str, ...]
    compiled: tuple[str, ...]
    failed: tuple[tuple[str, str], ...] = ()
    """(module, error) for each listed module that does not import."""
    compiler: str = "mypyc"
    sources_only: bool = False
    """``XDSCORE_PURE=1``: compiled modules, if any are present, are passed over."""

    @property
    def kind(self) -> Literal["compiled", "pure", "partial"]:
        if not self.compiled:
            return "pure"
        if len(self.compiled) == len(self.listed):
            return "compiled"
        return "partial"


def describe(build: Build) -> str:
    """One line for ``xdscore --version``: the build, and what is amiss with it."""
    if build.kind == "compiled":
        line = f"compiled: {len(build.compiled)} modules by {build.compiler}"
    elif build.kind == "pure":
        line = "pure Python" + (f": {PURE_VARIABLE}=1" if build.sources_only else "")
    else:
        sources = [name for name in build.listed if name not in build.compiled]
        line = (
            f"partially compiled: {len(build.compiled)} of {len(build.listed)} modules; "
            f"from source: {', '.join(sources)}"
        )
    for module, error in build.failed:
        line += f"; {module} does not import: {error}"
    return line


def loaded_build() -> Build:
    """Import every module the build lists and say which are loaded compiled."""
    listed, compiler = _listed()
    compiled: list[str] = []
    failed: list[tuple[str, str]] = []
    for name in listed:
        try:
            module = importlib.import_module(name)
        except ImportError as exc:
            failed.append((name, str(exc)))
            continue
        if _is_compiled(module):
            compiled.append(name)
    return Build(
        listed=tuple(listed),
        compiled=tuple(compiled),
        failed=tuple(failed),
        compiler=compiler,
        sources_only=any(isinstance(f, _SourcesOnly) for f in sys.meta_path),
    )


def _is_compiled(module: ModuleType) -> bool:
    spec = module.__spec__
    origin = (spec.origin if spec is not None else None) or ""
    return origin.endswith(tuple(EXTENSION_SUFFIXES))


def _listed() -> tuple[list[str], str]:
    """The modules this build is meant to have compiled, and by what: from the wheel's
    record, else from the clone's pyproject.toml (none for a wheel of sources)."""
    import json
    import tomllib

    record = _PACKAGE / RECORD
    if record.is_file():
        built = json.loads(record.read_text(encoding="utf-8"))
        return list(built["compiled"]), str(built["compiler"])
    project = _PACKAGE.parent / "pyproject.toml"
    if project.is_file():
        with project.open("rb") as file:
            paths = tomllib.load(file).get("tool", {}).get("xdscore", {}).get("compiled", [])
        return [module_name(path) for path in paths], "mypyc"
    return [], "mypyc"


def module_name(path: str) -> str:
    """``xdscore/wire/_codec.py`` -> ``xdscore.wire._codec``."""
    return path.removesuffix(".py").replace("/", ".")


class _SourcesOnly(importlib.abc.MetaPathFinder):
    """Finds xdscore's submodules among their sources, passing over compiled ones."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if path is None or not fullname.startswith(f"{__package__}."):
            return None
        for entry in path:
            spec = FileFinder(entry, (SourceFileLoader, SOURCE_SUFFIXES)).find_spec(fullname)
            if spec is not None:
                return spec
        return None  # no source: the ordinary finders decide


def load_sources_only() -> None:
    """Load xdscore's modules imported from now on from their sources (once per process)."""
    if not any(isinstance(finder, _SourcesOnly) for finder in sys.meta_path):
        sys.meta_path.insert(0, _SourcesOnly())


def pure_requested() -> bool:
    """Whether ``XDSCORE_PURE=1`` is set."""
    return os.environ.get(PURE_VARIABLE) == "1"
