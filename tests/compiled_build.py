"""The compiled build in a clone (``make compiled``): which modules it holds, and whether it is
stale."""

from __future__ import annotations

import importlib
import os
import tomllib
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

from xdscore._build import module_name

ROOT = Path(__file__).resolve().parent.parent


def _settings() -> dict[str, list[str]]:
    with (ROOT / "pyproject.toml").open("rb") as file:
        settings: dict[str, list[str]] = tomllib.load(file)["tool"]["xdscore"]
    return settings


def listed() -> list[str]:
    """The modules pyproject.toml says to compile, as dotted names."""
    return [module_name(path) for path in _settings()["compiled"]]


def tools() -> list[Path]:
    """The tools pyproject.toml says to compile (each beside its source), as paths."""
    return [ROOT / path for path in _settings()["compiled-tools"]]


def built() -> list[Path]:
    """Every compiled module in the package and beside the tools."""
    beside = {tool.parent for tool in tools()}
    return [
        *(ROOT / "xdscore").rglob("*.so"),
        *(path for where in sorted(beside) for path in where.glob("*.so")),
    ]


def compiled(module: str) -> bool:
    """Whether Python loads ``module`` from its compiled build."""
    origin = importlib.import_module(module).__file__ or ""
    return origin.endswith(tuple(EXTENSION_SUFFIXES))


def stale_sources() -> list[Path]:
    """The sources newer than the oldest compiled module that would be loaded (none without
    a compiled build). Under ``XDSCORE_PURE=1`` xdscore's modules come from their sources, so
    only the tools count."""
    package = ROOT / "xdscore"
    pure = os.environ.get("XDSCORE_PURE") == "1"
    times = [
        path.stat().st_mtime for path in built() if not (pure and path.is_relative_to(package))
    ]
    if not times:
        return []
    oldest = min(times)
    sources = [*([] if pure else package.rglob("*.py")), *tools()]
    return sorted(p for p in sources if p.stat().st_mtime > oldest)
