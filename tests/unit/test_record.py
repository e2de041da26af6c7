"""The server machines' state records: ``evolve`` changes what it is given and keeps the rest,
and equality, hashing and repr follow the fields, as the attrs classes they replaced did."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.compiled_build import compiled
from xdscore.protocol import (
    DeltaClientTypeState,
    DeltaTypeState,
    SotwClientTypeState,
    SotwTypeState,
)
from xdscore.protocol._delta_server import DeltaResponse
from xdscore.protocol._record import KEEP
from xdscore.protocol._sotw_server import SotwResponse
from xdscore.protocol._state import Phase
from xdscore.protocol._subscription import NOTHING, Subscription
from xdscore.wire import ErrorDetail

SOTW = SotwTypeState(subscription=NOTHING, phase=Phase.IDLE)
DELTA = DeltaTypeState(subscription=NOTHING, phase=Phase.IDLE)

COMMON: dict[str, st.SearchStrategy[Any]] = {
    "subscription": st.sampled_from([NOTHING, Subscription(frozenset({"a", "b"}))]),
    "phase": st.sampled_from(list(Phase)),
    "last_error": st.none() | st.builds(ErrorDetail, code=st.integers(1, 16), message=st.text()),
    "latest_nonce": st.text(max_size=6),
    "acks": st.integers(0, 9),
    "nacks": st.integers(0, 9),
}
SOTW_ONLY: dict[str, st.SearchStrategy[Any]] = {
    "held_version": st.none() | st.text(max_size=6),
    "rejected_version": st.none() | st.text(max_size=6),
    "owed": st.booleans(),
}
DELTA_ONLY: dict[str, st.SearchStrategy[Any]] = {
    "held_versions": st.dictionaries(st.text(max_size=3), st.text(max_size=3), max_size=3),
    "owed": st.frozensets(st.text(max_size=3), max_size=3),
    "answered": st.booleans(),
}


def changes(fields: dict[str, st.SearchStrategy[Any]]) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({}, optional=fields)


def fields_of(record: Any) -> dict[str, Any]:
    return {name: getattr(record, name) for name in record._fields}


@given(st.sampled_from([SOTW, DELTA]).flatmap(lambda s: st.tuples(st.just(s), changes_for(s))))
def test_evolve_changes_what_it_is_given_and_keeps_the_rest(
    case: tuple[Any, dict[str, Any]],
) -> None:
    state, given_changes = case
    evolved = state.evolve(**given_changes)
    assert type(evolved) is type(state)
    assert fields_of(evolved) == {**fields_of(state), **given_changes}
    assert evolved == type(state)(**{**fields_of(state), **given_changes})
    if isinstance(state, SotwTypeState):  # (a Delta state holds mappings: no hash)
        assert hash(evolved) == hash(type(state)(**fields_of(evolved)))
    assert state.evolve() == state


def changes_for(state: Any) -> st.SearchStrategy[dict[str, Any]]:
    return changes({**COMMON, **(SOTW_ONLY if isinstance(state, SotwTypeState) else DELTA_ONLY)})


@given(
    state=st.sampled_from(
        [SotwClientTypeState(subscription=NOTHING), DeltaClientTypeState(wildcard=True)]
    ),
    nonce=st.text(max_size=6),
    acks=st.integers(0, 9),
    error=st.none() | st.builds(ErrorDetail, code=st.integers(1, 16), message=st.text()),
)
def test_a_client_state_evolves_the_same_way(
    state: Any, nonce: str, acks: int, error: ErrorDetail | None
) -> None:
    evolved = state.evolve(nonce=nonce, acks=acks, last_error=error)
    assert fields_of(evolved) == {
        **fields_of(state),
        "nonce": nonce,
        "acks": acks,
        "last_error": error,
    }


def test_a_client_state_left_without_a_mapping_gets_an_empty_one_of_its_own() -> None:
    first, second = SotwClientTypeState(subscription=NOTHING), DeltaClientTypeState()
    assert first.resources == {}
    assert first.errors == {}
    assert second.requested == {}
    assert first.resources is not SotwClientTypeState(subscription=NOTHING).resources


def test_an_unknown_field_is_refused() -> None:
    with pytest.raises(TypeError, match="colour"):
        SOTW.evolve(colour="red")  # type: ignore[call-arg]


def test_records_differ_by_any_field_and_by_class() -> None:
    assert SOTW.evolve(acks=1) != SOTW
    assert SOTW.evolve(phase=Phase.REQUESTED) != SOTW
    assert SOTW != DELTA
    assert len({SOTW, SOTW.evolve(), SOTW.evolve(acks=1)}) == 2


def test_the_repr_names_the_fields_it_shows() -> None:
    text = repr(SOTW.evolve(latest_nonce="n-1"))
    assert text.startswith("SotwTypeState(subscription=")
    assert "latest_nonce='n-1'" in text
    assert "listed=" not in text  # (a name list shared by streams: left out)
    assert repr(KEEP) == "KEEP"


def test_responses_compare_by_their_fields() -> None:
    sotw = SotwResponse(type_url="t", version_info="1", nonce="n", selection=None)  # type: ignore[arg-type]
    assert sotw == SotwResponse(type_url="t", version_info="1", nonce="n", selection=None)  # type: ignore[arg-type]
    delta = DeltaResponse(type_url="t", nonce="n", system_version_info="", resources=(), removed=())
    assert delta != DeltaResponse(
        type_url="t", nonce="n", system_version_info="", resources=(), removed=("x",)
    )


@pytest.mark.skipif(
    not compiled("xdscore.protocol._sotw_server"),
    reason="the pure build does not enforce Final at run time (mypy does)",
)
def test_a_compiled_record_cannot_be_changed_in_place() -> None:
    with pytest.raises(AttributeError):
        SOTW.acks = 3  # type: ignore[misc]
    with pytest.raises(AttributeError):
        DELTA.owed = frozenset({"a"})  # type: ignore[misc]
