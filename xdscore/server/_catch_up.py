"""Not undoing what a client got from a replica that is ahead of this one.

Replicas that share a store (etcd, say) apply its revisions each at its own pace. A client
that moves from a replica that has applied revision 8 to one still at revision 7 presents
versions this replica cannot produce yet; answered at once, it would be told to delete
what revision 8 added and to go back to revision 7's versions. A [`CatchUp`][xdscore.server.CatchUp]
source lets the driver wait, bounded, until the replica holds what the store held when the client
arrived; only then is that first request answered.

Which requests wait (`presents_unknown`): the first request of a type on a stream
that presents versions the view does not hold:

* Delta: any ``initial_resource_versions`` entry whose name the view lacks or holds at
  another version;
* SotW: a ``version_info`` on a request without a nonce (a new stream) that differs from
  the version of what the view would send for that subscription.

A client whose versions are older than the view's also waits, one store round trip: the
replica cannot tell older from newer, the store can.
"""

from __future__ import annotations

from typing import Protocol

from ..protocol._subscription import Subscription
from ..protocol._view import ResourceView
from ..wire._records import DeltaDiscoveryRequest, DiscoveryRequest
from ..wire._typeurls import type_info

__all__ = ["DEFAULT_CATCH_UP_TIMEOUT", "CatchUp", "presents_unknown"]

DEFAULT_CATCH_UP_TIMEOUT = 5.0
"""Seconds a first request waits at most for the replica to catch up with its store."""


class CatchUp(Protocol):
    """A source that can say whether it holds everything its store has committed."""

    async def caught_up(self, timeout: float) -> bool:
        """Wait until this source has applied what the store held when called.

        True once it has; False when ``timeout`` seconds passed or the store could not be
        asked (the caller then answers from what it has).
        """
        ...


def presents_unknown(
    request: DiscoveryRequest | DeltaDiscoveryRequest, view: ResourceView | None
) -> bool:
    """Whether ``request`` presents versions ``view`` does not hold (see the module)."""
    if isinstance(request, DeltaDiscoveryRequest):
        held = request.initial_resource_versions
        if not held:
            return False
        resources = view.resources(request.type_url) if view is not None else None
        if resources is None:
            return True
        for name, version in held.items():
            resource = resources.get(name)
            if resource is None or resource.version != version:
                return True
        return False
    if not request.version_info or request.response_nonce:
        return False
    if view is None:
        return True
    subscription = Subscription.sotw(
        None,
        request.resource_names,
        wildcard_capable=type_info(request.type_url).wildcard_capable,
    )
    selection = view.select(request.type_url, subscription)
    return selection is None or selection.version != request.version_info
