"""How a case ends other than by passing: a failure with its evidence, or a skip with why."""

from __future__ import annotations

__all__ = ["CaseFailed", "CaseSkipped"]


class CaseFailed(AssertionError):
    """The server did something the case's clause forbids (or failed to do what it requires);
    the message is the exact evidence."""


class CaseSkipped(Exception):
    """The case cannot be run against this server or driver; the message says why."""
