"""Immutable records that the compiled build makes native classes.

An attrs class stays a Python class under mypyc and its generated ``__init__`` runs
interpreted: the state machines' copy of a type's state on every request and response cost
about 2.5 us that way on the benchmark machine, a twentieth of a stream's initial sync. A
:class:`Record` declares its fields ``Final`` in ``__init__`` (the compiled build refuses to
set them afterwards) and names them in ``_fields``; it gets equality, hashing and a repr
from them. Its ``evolve`` takes each field as a keyword, :data:`KEEP` by default (a copy
costs 0.1 us).

A record class writes each field once, in a block of comments under its docstring; ``make
records`` (``tests/recordgen.py``) writes ``_fields``, ``__slots__``, ``__init__`` and, for
``record fields, with evolve``, ``evolve`` from it between the markers that follow::

    class Holding(Record):
        '''What one client wants and holds of one type, at one moment.'''

        # record fields:
        #     subscription: Subscription
        #     *
        #     arriving: Collection[Resource] = ()
        # --- generated from the fields above by `make records`; do not edit ---
        ...
        # --- end generated ---

        def surely(self, name: str) -> Resource | None: ...

To add a field, add its line ``name: type`` or ``name: type = default`` to the block, in
``__init__``'s order (after the line ``*``, keyword-only; a default of ``{}`` gives each
record a new empty dict), say what it means in the class docstring, and run ``make
records``. Code between the markers is never edited by hand: ``tests/unit/test_recordgen.py``
fails when it is not what the fields give.
"""

from __future__ import annotations

from typing import ClassVar, Final, final

__all__ = ["KEEP", "Keep", "Record"]


@final
class Keep:
    """The type of :data:`KEEP`."""

    def __repr__(self) -> str:
        return "KEEP"


KEEP: Final = Keep()
"""An ``evolve`` argument left out: the field keeps its value."""


class Record:
    """Equality, hashing and a repr by the fields ``_fields`` names (less ``_unshown`` in
    the repr), in that order."""

    __slots__ = ()
    _fields: ClassVar[tuple[str, ...]] = ()
    _unshown: ClassVar[frozenset[str]] = frozenset()

    def _values(self) -> tuple[object, ...]:
        return tuple([getattr(self, name) for name in self._fields])

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        assert isinstance(other, Record)
        return self._values() == other._values()

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        shown = ", ".join(
            f"{name}={getattr(self, name)!r}" for name in self._fields if name not in self._unshown
        )
        return f"{type(self).__name__}({shown})"
