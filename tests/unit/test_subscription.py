"""The wildcard rules of Subscription for SotW and Delta requests (invariants 15-17, 29-32)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xdscore.protocol import WILDCARD, Subscription

LEGACY = Subscription(frozenset(), wildcard=True, legacy=True)
NOTHING = Subscription(frozenset(), wildcard=False, legacy=False)


def names(*items: str) -> frozenset[str]:
    return frozenset(items)


# --- the record itself --------------------------------------------------------------------


def test_wants_and_empty() -> None:
    assert NOTHING.empty
    assert not NOTHING.wants("a")
    assert not LEGACY.empty
    assert LEGACY.wants("anything")
    named = Subscription(names("a"))
    assert not named.empty
    assert named.wants("a")
    assert not named.wants("b")
    both = Subscription(names("a"), wildcard=True)
    assert both.wants("a")
    assert both.wants("b")


_GLOB = "xdstp://auth/envoy.config.endpoint.v3.ClusterLoadAssignment/pool/*"
_MEMBER = "xdstp://auth/envoy.config.endpoint.v3.ClusterLoadAssignment/pool/a"


@settings(max_examples=200, deadline=None)
@given(
    subscribed=st.frozensets(st.sampled_from(["a", "b", "c", _GLOB])),
    wildcard=st.booleans(),
    implied=st.frozensets(st.sampled_from([_GLOB.removesuffix("/*") + "/x/*"])),
    asked=st.lists(st.sampled_from(["a", "b", "d", _GLOB, _MEMBER, ""]), max_size=6),
)
def test_wanted_is_wants_over_a_collection(
    subscribed: frozenset[str], wildcard: bool, implied: frozenset[str], asked: list[str]
) -> None:
    """``wanted`` (one set operation where it can) picks exactly the names ``wants`` does,
    globs and implied collections included."""
    subscription = Subscription(subscribed, wildcard=wildcard, implied=implied)
    assert subscription.wanted(asked) == frozenset(n for n in asked if subscription.wants(n))


def test_legacy_and_explicit_wildcard_are_different_subscriptions() -> None:
    explicit = Subscription(frozenset(), wildcard=True)
    assert explicit != LEGACY
    assert explicit.wildcard
    assert not explicit.legacy


# --- SotW ---------------------------------------------------------------------------------


def test_sotw_empty_first_request_is_legacy_wildcard_for_wildcard_capable_types() -> None:
    subscription = Subscription.sotw(None, [], wildcard_capable=True)
    assert subscription == LEGACY
    assert subscription.wildcard
    assert subscription.legacy
    assert subscription.names == frozenset()


def test_sotw_empty_first_request_is_nothing_for_other_types() -> None:
    subscription = Subscription.sotw(None, [], wildcard_capable=False)
    assert subscription == NOTHING
    assert subscription.empty


def test_sotw_legacy_wildcard_lasts_while_every_request_is_empty() -> None:
    subscription = Subscription.sotw(None, [], wildcard_capable=True)
    for _ in range(3):
        subscription = Subscription.sotw(subscription, [], wildcard_capable=True)
        assert subscription == LEGACY


def test_sotw_naming_a_resource_ends_legacy_wildcard_for_good() -> None:
    legacy = Subscription.sotw(None, [], wildcard_capable=True)
    named = Subscription.sotw(legacy, ["a"], wildcard_capable=True)
    assert named == Subscription(names("a"))
    assert not named.wildcard
    assert not named.legacy
    cleared = Subscription.sotw(named, [], wildcard_capable=True)
    assert cleared == NOTHING
    # And it stays "nothing": the legacy meaning never comes back on this stream.
    assert Subscription.sotw(cleared, [], wildcard_capable=True) == NOTHING


def test_sotw_explicit_wildcard() -> None:
    subscription = Subscription.sotw(None, [WILDCARD], wildcard_capable=True)
    assert subscription.wildcard
    assert not subscription.legacy
    assert subscription.names == frozenset()
    assert WILDCARD not in subscription.names


def test_sotw_explicit_wildcard_then_empty_list_is_nothing() -> None:
    explicit = Subscription.sotw(None, [WILDCARD], wildcard_capable=True)
    assert Subscription.sotw(explicit, [], wildcard_capable=True) == NOTHING


def test_sotw_explicit_wildcard_on_a_type_that_is_not_wildcard_capable() -> None:
    subscription = Subscription.sotw(None, [WILDCARD], wildcard_capable=False)
    assert subscription.wildcard
    assert subscription.wants("any")


def test_sotw_wildcard_plus_names_is_the_union() -> None:
    subscription = Subscription.sotw(None, [WILDCARD, "a", "b"], wildcard_capable=True)
    assert subscription.wildcard
    assert not subscription.legacy
    assert subscription.names == names("a", "b")
    assert subscription.wants("c")


def test_sotw_dropping_the_wildcard_keeps_the_names() -> None:
    both = Subscription.sotw(None, [WILDCARD, "a"], wildcard_capable=True)
    narrowed = Subscription.sotw(both, ["a"], wildcard_capable=True)
    assert narrowed == Subscription(names("a"))
    assert not narrowed.wants("b")


def test_sotw_names_are_the_full_desired_set() -> None:
    first = Subscription.sotw(None, ["a", "b"], wildcard_capable=False)
    second = Subscription.sotw(first, ["b", "c"], wildcard_capable=False)
    assert second == Subscription(names("b", "c"))
    assert not second.wants("a")


def test_sotw_duplicate_names_collapse() -> None:
    subscription = Subscription.sotw(None, ["a", "a", "b"], wildcard_capable=False)
    assert subscription == Subscription(names("a", "b"))


# --- Delta: the first request -------------------------------------------------------------


def test_delta_initial_empty_is_legacy_wildcard_for_wildcard_capable_types() -> None:
    assert Subscription.delta_initial([], [], wildcard_capable=True) == LEGACY


def test_delta_initial_empty_is_nothing_for_other_types() -> None:
    assert Subscription.delta_initial([], [], wildcard_capable=False) == NOTHING


def test_delta_initial_names() -> None:
    subscription = Subscription.delta_initial(["a", "b"], [], wildcard_capable=True)
    assert subscription == Subscription(names("a", "b"))
    assert not subscription.legacy


def test_delta_initial_explicit_wildcard() -> None:
    subscription = Subscription.delta_initial([WILDCARD], [], wildcard_capable=True)
    assert subscription == Subscription(frozenset(), wildcard=True)


def test_delta_initial_wildcard_plus_names() -> None:
    subscription = Subscription.delta_initial([WILDCARD, "a"], [], wildcard_capable=False)
    assert subscription == Subscription(names("a"), wildcard=True)


def test_delta_initial_unsubscribe_applies_after_subscribe() -> None:
    subscription = Subscription.delta_initial(["a", "b"], ["b", "zzz"], wildcard_capable=False)
    assert subscription == Subscription(names("a"))


def test_delta_initial_unsubscribing_wildcard_is_not_legacy_wildcard() -> None:
    subscription = Subscription.delta_initial([], [WILDCARD], wildcard_capable=True)
    # Consistent with what the same unsubscribe does to a legacy wildcard later on.
    assert subscription == LEGACY.delta_update([], [WILDCARD])
    assert subscription == NOTHING


# --- Delta: later requests ------------------------------------------------------------------


def test_delta_update_nothing_asked_returns_the_same_subscription() -> None:
    named = Subscription(names("a"))
    assert named.delta_update([], []) is named
    assert LEGACY.delta_update([], []) is LEGACY


def test_delta_update_adds_and_removes_names() -> None:
    subscription = Subscription(names("a", "b")).delta_update(["c"], ["a"])
    assert subscription == Subscription(names("b", "c"))


def test_delta_update_naming_a_resource_ends_legacy_wildcard() -> None:
    subscription = LEGACY.delta_update(["a"], [])
    assert subscription == Subscription(names("a"))
    assert not subscription.wildcard
    assert not subscription.legacy


def test_delta_update_explicit_wildcard_ends_legacy_but_keeps_wildcard() -> None:
    subscription = LEGACY.delta_update([WILDCARD], [])
    assert subscription == Subscription(frozenset(), wildcard=True, legacy=False)


def test_delta_update_wildcard_plus_name_from_legacy() -> None:
    subscription = LEGACY.delta_update([WILDCARD, "a"], [])
    assert subscription == Subscription(names("a"), wildcard=True)


def test_delta_update_unsubscribing_every_name_means_nothing_not_legacy() -> None:
    named = Subscription.delta_initial(["a"], [], wildcard_capable=True)
    cleared = named.delta_update([], ["a"])
    assert cleared == NOTHING
    assert not cleared.legacy
    assert cleared.empty


def test_delta_update_unsubscribing_wildcard() -> None:
    explicit = Subscription.delta_initial([WILDCARD], [], wildcard_capable=True)
    assert explicit.delta_update([], [WILDCARD]) == NOTHING
    both = Subscription(names("a"), wildcard=True)
    assert both.delta_update([], [WILDCARD]) == Subscription(names("a"))


def test_delta_update_unsubscribing_wildcard_ends_legacy_wildcard() -> None:
    assert LEGACY.delta_update([], [WILDCARD]) == NOTHING


@pytest.mark.parametrize(
    "subscription",
    [
        LEGACY,
        NOTHING,
        Subscription(names("a")),
        Subscription(names("a"), wildcard=True),
        Subscription(frozenset(), wildcard=True),
    ],
    ids=["legacy", "nothing", "named", "wildcard+named", "wildcard"],
)
def test_delta_update_superfluous_unsubscribe_is_a_no_op(subscription: Subscription) -> None:
    assert subscription.delta_update([], ["never-subscribed"]) == subscription


def test_delta_update_unsubscribing_a_name_under_wildcard_keeps_it_wanted() -> None:
    # The client holds "*" and drops an explicit name: the name is still in the wildcard.
    both = Subscription(names("a"), wildcard=True)
    after = both.delta_update([], ["a"])
    assert after == Subscription(frozenset(), wildcard=True)
    assert after.wants("a")


def test_delta_update_resubscribing_a_name_is_idempotent() -> None:
    named = Subscription(names("a"))
    assert named.delta_update(["a"], []) == named


_NAMES = st.lists(st.sampled_from(["a", "b", "c", WILDCARD]), max_size=4)


@settings(max_examples=200)
@given(
    names=_NAMES,
    earlier=st.none() | _NAMES,
    implied=st.frozensets(st.sampled_from(["ns/*"]), max_size=1),
    capable=st.booleans(),
)
def test_a_list_seen_before_gives_what_a_fresh_one_does(
    names: list[str], earlier: list[str] | None, implied: frozenset[str], capable: bool
) -> None:
    """The subscriptions remembered by a list's content are those the same names given as a
    list (never remembered) give, whatever the stream's previous subscription, what it
    implies included."""
    shared = tuple(names)
    previous = None
    if earlier is not None:
        previous = Subscription.sotw(None, tuple(earlier), wildcard_capable=capable)
        previous = Subscription(
            previous.names, wildcard=previous.wildcard, legacy=previous.legacy, implied=implied
        )
    for _ in range(2):  # the second time, from memory
        assert Subscription.sotw(previous, shared, wildcard_capable=capable) == Subscription.sotw(
            previous, list(names), wildcard_capable=capable
        )
        assert Subscription.delta_initial(
            shared, (), wildcard_capable=capable
        ) == Subscription.delta_initial(list(names), (), wildcard_capable=capable)


def test_a_list_each_reconnecting_client_brings_anew_is_remembered_once() -> None:
    """A reconnecting client's first request is decoded on its own, so its name list is a
    new tuple each time: remembered by content, 50 such lists are one entry (by identity,
    each kept one more until the memo's bound)."""
    from xdscore._memos import SUBSCRIPTION_LISTS

    names = [f"cluster-{index}" for index in range(100)]
    first = Subscription.sotw(None, tuple(names), wildcard_capable=False)
    entries = len(SUBSCRIPTION_LISTS)
    for _ in range(50):
        fresh = tuple(name.encode().decode() for name in names)  # new strings, as decoded
        assert Subscription.sotw(None, fresh, wildcard_capable=False) is first
        assert Subscription.delta_initial(fresh, (), wildcard_capable=False) is first
    assert len(SUBSCRIPTION_LISTS) == entries
