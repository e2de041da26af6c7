"""The record classes' generated code (``make records``, :mod:`tests.recordgen`): what the
source holds is what each class's declared fields give, drift is caught either way (a field
declared and not generated, generated code edited by hand), and the code behaves as
declared and is what ``ruff`` leaves as it is."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.recordgen import ROOT, SETTINGS, main

DECLARED = ROOT / "xdscore" / "protocol"

SAMPLE = '''\
"""A record of every kind of field."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from xdscore.protocol._record import KEEP, Keep


class Sample:
    """A record."""

    # record fields, with evolve:
    #     name: str
    #     size: int = 0
    #     *
    #     labels: Mapping[str, str] = {}
    #     parent: Sample | None = None
    #     refused_versions: Mapping[str, str] | None = None
    # --- generated from the fields above by `make records`; do not edit ---
    # --- end generated ---

    @property
    def labelled(self) -> bool:
        """Whether it has a label."""
        return bool(self.labels)
'''


def _copy(tmp_path: Path, name: str) -> tuple[Path, str]:
    text = (DECLARED / name).read_text(encoding="utf-8")
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path, text


def test_every_record_in_the_source_is_what_its_fields_give() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tests.recordgen", "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_generated_code_edited_by_hand_is_caught_and_rewritten(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, original = _copy(tmp_path, "_delta_server.py")
    line = "        self.acks: Final = acks\n"
    assert original.count(line) == 1
    path.write_text(original.replace(line, "        self.acks: Final = acks + 1\n"))
    assert main(["--check", str(path)]) == 1
    assert "DeltaTypeState: the generated code is not what its fields give" in (
        capsys.readouterr().out
    )
    assert main([str(path)]) == 0
    assert path.read_text() == original


def test_a_field_declared_and_not_generated_is_caught_then_generated(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, original = _copy(tmp_path, "_sotw_client.py")
    last = "    #     nacks: int = 0\n"
    assert original.count(last) == 1
    path.write_text(original.replace(last, last + '    #     colour: str = ""\n'))
    assert main(["--check", str(path)]) == 1
    assert "SotwClientTypeState" in capsys.readouterr().out
    assert main([str(path)]) == 0
    text = path.read_text()
    assert '"acks",\n        "nacks",\n        "colour",\n    )' in text
    assert '        colour: str = "",\n    ) -> None:' in text
    assert "        self.colour: Final = colour\n" in text
    assert "        colour: str | Keep = KEEP,\n    ) -> SotwClientTypeState:" in text
    assert "colour=self.colour if isinstance(colour, Keep) else colour," in text
    assert main(["--check", str(path)]) == 0


def _sample(tmp_path: Path) -> tuple[Path, Any]:
    path = tmp_path / "sample_record.py"
    path.write_text(SAMPLE, encoding="utf-8")
    assert main([str(path)]) == 0
    spec = importlib.util.spec_from_file_location("sample_record", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return path, module.Sample


def test_the_generated_code_behaves_as_declared(tmp_path: Path) -> None:
    _, sample = _sample(tmp_path)
    assert sample._fields == ("name", "size", "labels", "parent", "refused_versions")
    first = sample("a")
    assert (first.name, first.size, first.labels, first.parent) == ("a", 0, {}, None)
    assert not hasattr(first, "__dict__")
    assert sample("b").labels is not first.labels  # ({}: a dict of its own)
    assert sample("b", labels=None).labels == {}
    with pytest.raises(TypeError):
        sample("c", 1, {"k": "v"})  # (labels and after: keyword-only)
    second = sample("c", 2, labels={"k": "v"}, parent=first)
    assert second.labelled
    changed = second.evolve(size=3, parent=None)
    assert (changed.name, changed.size, changed.parent) == ("c", 3, None)
    assert changed.labels == {"k": "v"}
    assert second.evolve(refused_versions={"x": "1"}).refused_versions == {"x": "1"}
    assert second.evolve().parent is first


def test_the_generated_code_is_what_ruff_leaves_as_it_is(tmp_path: Path) -> None:
    path, _ = _sample(tmp_path)
    text = path.read_text()
    assert "            refused_versions=(\n                self.refused_versions" in text
    for command in (["format", "--check"], ["check"]):
        done = subprocess.run(
            [sys.executable, "-m", "ruff", *command, "--config", str(SETTINGS), str(path)],
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (("    #     size: int = 0\n", "    #     size: int = []\n"), "a mutable default"),
        (("    #     size: int = 0\n", "    #     size int\n"), "expected `name: type"),
        (("    #     *\n", "    #     count: int\n    #     *\n"), "'count' needs a default"),
        (("    #     *\n", "    #     name: str\n"), "'name' declared twice"),
        (("    # --- end generated ---\n", ""), "no '# --- end generated ---'"),
        (
            ('    """A record."""\n', '    """A record."""\n\n    _fields = ("name",)\n'),
            "Sample's fields are written by hand: declare them",
        ),
    ],
)
def test_a_malformed_declaration_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], edit: tuple[str, str], message: str
) -> None:
    path = tmp_path / "sample_record.py"
    old, new = edit
    assert SAMPLE.count(old) == 1
    path.write_text(SAMPLE.replace(old, new, 1))
    assert main(["--check", str(path)]) == 2
    assert message in capsys.readouterr().err
