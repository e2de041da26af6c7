"""docs/api.md is generated from the docstrings by docs/gen_api.py and must not go stale."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GENERATOR = ROOT / "docs" / "gen_api.py"
COMMITTED = ROOT / "docs" / "api.md"


def test_api_page_matches_the_docstrings(tmp_path: Path) -> None:
    fresh = tmp_path / "api.md"
    subprocess.run(
        [sys.executable, str(GENERATOR), str(fresh)], check=True, capture_output=True, cwd=tmp_path
    )
    assert fresh.read_text(encoding="utf-8") == COMMITTED.read_text(encoding="utf-8"), (
        "docs/api.md is out of date: run `.venv/bin/python docs/gen_api.py` and commit the result"
    )
