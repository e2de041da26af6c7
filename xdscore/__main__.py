"""``python -m xdscore``: the same as the ``xdscore`` command."""

from .cli import console

console()
