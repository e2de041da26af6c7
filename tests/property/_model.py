"""Pieces shared by the stateful SotW and Delta properties: the spec's subscription rules,
written again from XDS_INVARIANTS.md (15-17, 32) independently of ``xdscore._subscription``,
and small helpers over responses and configurations."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import attrs
from hypothesis import Phase, settings
from hypothesis import strategies as st

from xdscore import CLUSTER, ENDPOINT, LISTENER, ROUTE, Resource, Snapshot
from xdscore.protocol import WILDCARD, Subscription
from xdscore.testing.strategies import CONFIG_TYPES, EnvoyConfig, resource_names
from xdscore.wire import make_node, type_info

NODE = make_node(id="property-node", cluster="property")


@attrs.frozen
class Want:
    """What the client asked for, as the model understands the requests it sent."""

    names: frozenset[str] = frozenset()
    wildcard: bool = False
    legacy: bool = False

    def wants(self, name: str) -> bool:
        return self.wildcard or name in self.names

    @classmethod
    def of(cls, subscription: Subscription) -> Want:
        return cls(subscription.names, subscription.wildcard, subscription.legacy)

    def __str__(self) -> str:
        shown = sorted(self.names)
        if self.wildcard:
            shown.insert(0, "<legacy *>" if self.legacy else "*")
        return "{" + ", ".join(shown) + "}"


def sotw_want(previous: Want | None, resource_names: Iterable[str], type_url: str) -> Want:
    """Inv. 15-17: the list is the full desired set; empty is legacy wildcard only while the
    client never named anything of a wildcard-capable type on this stream, else nothing."""
    listed = frozenset(resource_names)
    if not listed:
        legacy = type_info(type_url).wildcard_capable and (previous is None or previous.legacy)
        return Want(wildcard=legacy, legacy=legacy)
    return Want(listed - {WILDCARD}, wildcard=WILDCARD in listed)


def delta_want(
    previous: Want | None, subscribe: Iterable[str], unsubscribe: Iterable[str], type_url: str
) -> Want:
    """Inv. 17 and 32: a first request with both lists empty is legacy wildcard (for
    wildcard-capable types); naming anything ends it; ``*`` is explicit; unsubscribing ``*``
    leaves the wildcard and names are added and removed one by one."""
    added = frozenset(subscribe)
    removed = frozenset(unsubscribe)
    if previous is None:
        if not added and not removed:
            legacy = type_info(type_url).wildcard_capable
            return Want(wildcard=legacy, legacy=legacy)
        previous = Want()
    wildcard, legacy = previous.wildcard, previous.legacy
    if added:
        if legacy:
            wildcard = legacy = False
        wildcard = wildcard or WILDCARD in added
    if WILDCARD in removed:
        wildcard = legacy = False
    names = (previous.names | added) - removed - {WILDCARD}
    return Want(frozenset(names), wildcard, legacy)


def versions(resources: Iterable[Resource]) -> dict[str, str]:
    return {resource.name: resource.version for resource in resources}


def wanted(want: Want, resources: Mapping[str, Resource]) -> dict[str, str]:
    """The (name, version) pairs of ``resources`` that ``want`` selects."""
    return {name: r.version for name, r in resources.items() if want.wants(name)}


def name_pool(config: EnvoyConfig, names: Iterable[str]) -> list[str]:
    """Names a client may ask for: the pool, every EDS service name, and one that never exists."""
    pool = set(names)
    pool.update(spec.eds_name(name) for name, spec in config.clusters.items())
    pool.update(f"{name}-svc" for name in names)
    pool.add("ghost")
    return sorted(pool)


def eds_closure(config: EnvoyConfig) -> set[str]:
    """Every ClusterLoadAssignment a cluster of ``config`` refers to (what Envoy subscribes to
    for the EDS clusters it holds)."""
    return {spec.eds_name(name) for name, spec in config.clusters.items()}


NAMES = st.lists(resource_names(max_size=12), min_size=2, max_size=4, unique=True)
"""Resource name pools: plain, unicode, xdstp-like or long names (all through the codec)."""

TYPES_IN_PLAY = st.one_of(
    st.just(CONFIG_TYPES),
    st.just((CLUSTER, ENDPOINT, ROUTE)),
    st.lists(st.sampled_from(CONFIG_TYPES), min_size=1, max_size=3, unique=True).map(tuple),
)
"""The types a run's client asks for: all, the make-before-break chain, or a few (so that
requests and responses of one type cross often)."""


STATEFUL = settings(phases=[phase for phase in Phase if phase is not Phase.explain])
"""The loaded profile without the explain phase, which traces every line (very slow before
Python 3.12) and adds little to a state machine's printed steps."""


def resumable(type_url: str, want: Want) -> bool:
    """Inv. 8: a version presented on a new stream is trusted only for a full-state type
    watched with the legacy wildcard: that client never narrowed what it watches, so an
    accepted version is everything it holds."""
    return type_info(type_url).sotw_full_state and want.legacy


TTL_TYPES = frozenset({CLUSTER, ENDPOINT, LISTENER})
"""The types whose resources the TTL property machines give a TTL (two full-state types, one
per-resource type; routes and the unregistered type keep none)."""


def with_ttls(snapshot: Snapshot, ttl: float = 1.0) -> Snapshot:
    """``snapshot`` with a TTL on every resource of :data:`TTL_TYPES` (a new version each)."""
    return Snapshot(
        [
            Resource(
                type_url=r.type_url,
                name=r.name,
                body=r.body,
                aliases=r.aliases,
                message=r.message,
                ttl=ttl,
            )
            if r.type_url in TTL_TYPES
            else r
            for r in snapshot
        ],
        types=snapshot.type_urls,
    )
