"""The documentation names no path of the machine it was written on.

A page says how to reproduce what it states from a clone (``make bench``, ``.venv/bin/...``,
``build/site``), never where one machine kept its files: such a path means nothing to a
reader, and it leaks how a machine is laid out.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MACHINE_PATH = re.compile(r"(?<![\w.])/(?:home|Users|root|work|mnt|srv|opt|var/folders)/\S+")
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_machine_path(page: Path) -> None:
    found = [
        f"{page.relative_to(ROOT)}:{number}: {match.group(0)}"
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1)
        for match in MACHINE_PATH.finditer(line)
    ]
    assert not found, "\n".join(found)


def test_the_pattern_finds_machine_paths_only() -> None:
    assert MACHINE_PATH.search("ran /work/main/.venv/bin/python bench.py")
    assert MACHINE_PATH.search("see /home/alice/xds.log")
    assert not MACHINE_PATH.search("run .venv/bin/python, open build/site/index.html")
    assert not MACHINE_PATH.search("http://127.0.0.1:9901/config_dump")
    assert not MACHINE_PATH.search("the path /envoy.service.discovery.v3.Aggregated")
