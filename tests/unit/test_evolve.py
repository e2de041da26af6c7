"""The client machines' ``evolve`` gives what ``attrs.evolve`` gives."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from xdscore.protocol._delta_client import DeltaClientTypeState
from xdscore.protocol._evolve import evolve
from xdscore.protocol._sotw_client import SotwClientTypeState
from xdscore.protocol._subscription import NOTHING


@attrs.frozen
class Record:
    name: str
    count: int = 0
    _hidden: str = "h"


@attrs.frozen
class Checked:
    count: int = attrs.field(validator=attrs.validators.ge(0))


STATES = [SotwClientTypeState(subscription=NOTHING), DeltaClientTypeState(), Record("a")]


@given(
    state=st.sampled_from(STATES),
    acks=st.integers(0, 5),
    nonce=st.text(max_size=8),
)
def test_evolve_is_attrs_evolve(state: Any, acks: int, nonce: str) -> None:
    if isinstance(state, Record):
        changes: dict[str, Any] = {"count": len(nonce), "hidden": nonce}
    else:
        changes = {"acks": acks, "nonce": nonce}
    copied = evolve(state, **changes)
    assert copied == attrs.evolve(state, **changes)
    assert type(copied) is type(state)
    assert copied is not state
    assert evolve(state) == state


def test_an_unknown_field_is_refused() -> None:
    with pytest.raises(TypeError, match="no field 'colour'"):
        evolve(Record("a"), colour="red")


def test_a_validated_record_goes_through_attrs() -> None:
    assert evolve(Checked(1), count=2) == Checked(2)
    with pytest.raises(ValueError):
        evolve(Checked(1), count=-1)
