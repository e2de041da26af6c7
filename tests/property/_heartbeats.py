"""The rules by which the TTL property machines ask the server for heartbeats.

The runtime asks for heartbeats whenever one is due, so the rules ask at any step: alone,
right after a poll (as the runtime's write task does), and once everything has settled,
maybe just after a configuration change (a changed resource must be sent, not heartbeated).
A machine mixing these in provides ``_holds_a_ttl``, ``_beat``, ``_settle``, ``_fresh_step``,
``poll``, ``change_config``, ``new_heartbeats`` and ``label`` (``"sotw"`` or ``"delta"``).
"""

from __future__ import annotations

from typing import Any

from hypothesis import event
from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule


class HeartbeatRules:
    label = ""
    converged = False
    """Set in ``teardown``: the pair has settled."""

    @precondition(lambda self: self._holds_a_ttl())
    @rule()
    def heartbeat(self: Any) -> None:
        self._fresh_step()
        self._beat()
        self._tell()

    @rule()
    def poll_then_heartbeat(self: Any) -> None:
        """What the runtime does when a heartbeat is due: poll, then heartbeat the rest."""
        self.poll()
        self._beat()
        self._tell()

    @rule(data=st.data())
    def settle_then_heartbeat(self: Any, data: st.DataObject) -> None:
        """Everything delivered and answered, maybe a configuration change, then heartbeats:
        the steady state in which heartbeats matter, reached often enough for later rules (a
        change, an unsubscribe, a disconnect) to cross them."""
        self._settle()
        changed = data.draw(st.booleans(), label="change before the heartbeat")
        if changed:
            self.change_config(data)
        self._fresh_step()
        self._beat()
        self._tell()
        if changed and self.new_heartbeats:
            event(f"{self.label}: heartbeat after a change")

    def _tell(self: Any) -> None:
        if self.new_heartbeats:
            when = "after convergence" if self.converged else "during the run"
            event(f"{self.label}: heartbeat {when}")
