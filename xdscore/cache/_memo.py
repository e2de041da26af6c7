"""One budget for every memoised selection, across all views.

Views memoise ``select(type_url, subscription)`` so that streams with the same subscription
share one selection and one encoded body. Each distinct subscription costs memory in
proportion to its names, and a hostile or unlucky fleet can present many large distinct
ones. The budget bounds what all views together keep (about 96 bytes a name); past it, a
selection is computed for the caller and not kept. A view gives its share back when it is
collected.
"""

from __future__ import annotations

import weakref

__all__ = ["MEMO_BYTES", "BYTES_PER_NAME", "MemoBudget", "budget"]

MEMO_BYTES = 64 * 1024 * 1024
"""What all memoised selections may take together."""
BYTES_PER_NAME = 96
"""The estimated cost of one name in a memoised subscription or selection."""


class MemoBudget:
    """Bytes of memoised selections, taken by views and given back when they go."""

    def __init__(self, limit: int = MEMO_BYTES) -> None:
        self.limit = limit
        self.used = 0

    def take(self, owner: object, ledger: list[int], names: int) -> bool:
        """Take the cost of ``names`` for ``owner`` (whose ``ledger`` records its share);
        False, taking nothing, when the budget is spent."""
        cost = (names + 1) * BYTES_PER_NAME
        if self.used + cost > self.limit:
            return False
        if not ledger:
            ledger.append(0)
            weakref.finalize(owner, self._give_back, ledger)
        ledger[0] += cost
        self.used += cost
        return True

    def _give_back(self, ledger: list[int]) -> None:
        self.used -= ledger[0]


budget = MemoBudget()
"""The process's budget."""
