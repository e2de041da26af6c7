"""Resource sets written for this project, one directory each, that exercise what Envoy's own
example configurations exercise (see ``docs/testing.md``).

Each set's YAML files hold placeholders, ``${NAME}``, filled in by :func:`render`: a name
ending in ``_PORT`` is a port (``BACKEND_X_PORT`` is an HTTP backend answering ``X``,
``UDP_ECHO_PORT`` a UDP echo server, any other a listener), and ``CERTS`` is the directory
holding the certificates the test generated (``ca.crt``, ``server.crt``/``.key``,
``client.crt``/``.key``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

__all__ = ["CORPUS", "SETS", "placeholders", "render"]

CORPUS = Path(__file__).resolve().parent
SETS = tuple(
    sorted(
        path.name
        for path in CORPUS.iterdir()
        if path.is_dir() and not path.name.startswith(("_", "."))
    )
)
"""The name of every set (its directory)."""

_PLACEHOLDER = re.compile(r"\$\{([A-Z0-9_]+)\}")


def _files(name: str) -> list[Path]:
    return sorted(
        path for path in (CORPUS / name).iterdir() if path.suffix in (".yaml", ".yml", ".json")
    )


def placeholders(name: str) -> set[str]:
    """Every placeholder the set's files use."""
    return {match for path in _files(name) for match in _PLACEHOLDER.findall(path.read_text())}


def render(name: str, target: Path, values: Mapping[str, object]) -> Path:
    """Write the set ``name`` into ``target`` with its placeholders replaced by ``values``
    (a missing one is a ``KeyError``); returns ``target``. Only ``${NAME}`` is replaced: a
    ``$`` elsewhere (a regex anchor) is left alone."""
    target.mkdir(parents=True, exist_ok=True)
    for path in _files(name):
        text = _PLACEHOLDER.sub(lambda match: str(values[match.group(1)]), path.read_text())
        (target / path.name).write_text(text)
    return target
