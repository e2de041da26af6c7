"""What a client asked for, per type: the wildcard rules of the xDS spec as pure functions.

Rules (xds_protocol "How the client specifies what resources to return"):

* ``*`` is an explicit wildcard, for any type, and may be combined with names.
* Legacy wildcard: for a wildcard-capable type (LDS, CDS, SRDS), a client that has never
  sent a non-empty subscription for the type on this stream is subscribed to everything.
  SotW: every request so far had an empty ``resource_names``. Delta: the first request
  had an empty ``resource_names_subscribe`` and no later one added a name.
* Once any name (``*`` included) was subscribed, the legacy meaning is gone for good on the
  stream: an empty SotW list, or unsubscribing every name in Delta, means "nothing".
* For types that are not wildcard-capable an empty subscription always means "nothing".

Collections (xRFC TP1 "Glob"): a subscribed ``xdstp://`` name whose id ends in ``/*`` (or is
``*``) is a glob: it wants every resource whose canonical name is in that collection (same
authority, type, id prefix and context parameters; `collection_of`),
now and later, next to any names of the same collection subscribed to one by one. A glob
stays in ``names`` (so it is unsubscribed like a name) and is listed in ``collections``.
``implied`` holds collections the server watches for the client without the client naming
them: the namespaces (``route_0/*``) of the route configurations with VHDS sent on an ADS
stream, which Envoy's VHDS watch matches although its request names nothing.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable

import attrs

from .._memos import NAME_LISTS, SUBSCRIPTION_LISTS, SUBSCRIPTIONS, footprint
from ..wire._names import collection_of, is_glob

__all__ = ["EVERYTHING", "NOTHING", "NO_NAMES", "WILDCARD", "RequestedNames", "Subscription"]

WILDCARD = "*"


@attrs.frozen(cache_hash=True)
class Subscription:
    """The resources one client wants of one type on one stream.

    ``wildcard`` is true for an explicit ``*`` and for legacy wildcard; ``legacy`` marks the
    latter, which ends as soon as the client names anything.
    """

    names: frozenset[str] = frozenset()
    wildcard: bool = False
    legacy: bool = False
    implied: frozenset[str] = frozenset()
    collections: frozenset[str] = attrs.field(init=False, eq=False, repr=False)
    """The glob collections subscribed to: the globs among ``names``, and ``implied``."""

    @collections.default
    def _collections(self) -> frozenset[str]:
        globs = frozenset(name for name in self.names if is_glob(name))
        return globs | self.implied if self.implied else globs

    def wants(self, name: str) -> bool:
        """Whether a resource called ``name`` belongs to this subscription."""
        return (
            self.wildcard
            or name in self.names
            or (bool(self.collections) and collection_of(name) in self.collections)
        )

    def wanted(self, names: Iterable[str]) -> frozenset[str]:
        """The members of ``names`` that belong to this subscription (see
        [`wants`][xdscore.protocol.Subscription.wants])."""
        if self.wildcard:
            return frozenset(names)
        if not self.collections:
            return self.names.intersection(names)
        return frozenset(name for name in names if self.wants(name))

    @property
    def empty(self) -> bool:
        """True when the client wants nothing of this type."""
        return not self.wildcard and not self.names and not self.implied

    @classmethod
    def sotw(
        cls,
        previous: Subscription | None,
        resource_names: Iterable[str],
        *,
        wildcard_capable: bool,
    ) -> Subscription:
        """The subscription a SotW request with ``resource_names`` leaves in place."""
        listed = _LISTS.get(resource_names)
        if listed is None:
            names = frozenset(resource_names)
            if not names:
                legacy = wildcard_capable and (previous is None or previous.legacy)
                return _LEGACY_WILDCARD if legacy else NOTHING
            listed = _shared(names - {WILDCARD}, wildcard=WILDCARD in names, legacy=False)
            _LISTS.put(resource_names, listed)
        if (
            previous is not None
            and not previous.wildcard
            and not listed.wildcard
            and (listed is previous or listed.names == previous.names)
        ):
            return previous  # (with what it implies)
        return listed

    @classmethod
    def delta_initial(
        cls,
        subscribe: Iterable[str],
        unsubscribe: Iterable[str],
        *,
        wildcard_capable: bool,
    ) -> Subscription:
        """The subscription of the first Delta request of a type on a stream."""
        if not unsubscribe:
            found = _LISTS.get(subscribe)
            if found is not None:
                return found
        added = frozenset(subscribe)
        removed = frozenset(unsubscribe)
        if not added and not removed:
            return _LEGACY_WILDCARD if wildcard_capable else NOTHING
        subscription = NOTHING.delta_update(added, removed)
        if not removed:
            _LISTS.put(subscribe, subscription)
        return subscription

    def delta_update(self, subscribe: Iterable[str], unsubscribe: Iterable[str]) -> Subscription:
        """The subscription after a later Delta request (unsubscribing unknown names is a no-op)."""
        added = frozenset(subscribe)
        removed = frozenset(unsubscribe)
        if not added and not removed:
            return self
        wildcard = self.wildcard
        legacy = self.legacy
        if added:
            if legacy:
                # Naming anything ends legacy wildcard; an explicit "*" keeps wildcard on.
                wildcard = False
                legacy = False
            if WILDCARD in added:
                wildcard = True
        if WILDCARD in removed:
            wildcard = False
            legacy = False
        names = (self.names | added) - removed - {WILDCARD}
        return _shared(frozenset(names), wildcard=wildcard, legacy=legacy, implied=self.implied)


class _ListMemo:
    """The subscription a list of names asks for (not empty: that one depends on the
    stream's past), by the list's content (`xdscore._memos.SUBSCRIPTION_LISTS`): a fleet's
    requests list the same names, and each list is read into a set once, not once a
    stream. (A shared request's list hashes from its names' cached hashes; a list from a
    request of its own, such as a reconnecting client's first, is hashed once more.)"""

    @staticmethod
    def get(names: Iterable[str]) -> Subscription | None:
        if not isinstance(names, tuple):  # (only an immutable list stays what it was)
            return None
        found = SUBSCRIPTION_LISTS.get(names)
        if found is None:
            return None
        assert isinstance(found, Subscription)
        return found

    @staticmethod
    def put(names: Iterable[str], subscription: Subscription) -> None:
        if isinstance(names, tuple):
            size = footprint(names, subscription.names) + sys.getsizeof(subscription)
            SUBSCRIPTION_LISTS.put(names, subscription, size)


_LISTS = _ListMemo()


def _shared(
    names: frozenset[str], *, wildcard: bool, legacy: bool, implied: frozenset[str] = frozenset()
) -> Subscription:
    key = (names, wildcard, legacy, implied)
    found = SUBSCRIPTIONS.get(key)
    if found is None:
        found = SUBSCRIPTIONS.put(
            key, Subscription(names, wildcard=wildcard, legacy=legacy, implied=implied)
        )
    assert isinstance(found, Subscription)
    return found


EVERYTHING = Subscription(frozenset(), wildcard=True)
"""An explicit wildcard: every resource of the type."""
NOTHING = Subscription(frozenset(), wildcard=False, legacy=False)
"""No resource of the type."""
_LEGACY_WILDCARD = Subscription(frozenset(), wildcard=True, legacy=True)


class RequestedNames:
    """A request's names, as listed (order and repeats kept), held once for every stream
    whose last request listed the same: at large subscriptions a copy per stream adds up."""

    __slots__ = ("__weakref__", "names")

    def __init__(self, names: tuple[str, ...]) -> None:
        self.names = names

    @classmethod
    def of(cls, names: tuple[str, ...]) -> RequestedNames:
        """The one object for ``names``."""
        found = NAME_LISTS.get(names)
        if found is None:
            found = NAME_LISTS.put(names, cls(names))
        assert isinstance(found, RequestedNames)
        return found


NO_NAMES = RequestedNames.of(())
"""An empty list of names."""
