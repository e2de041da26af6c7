"""SotwPair and DeltaPair check that what arrives over their in-memory wire is what was sent."""

from __future__ import annotations

import attrs
import pytest

from xdscore import CLUSTER, ENDPOINT, Snapshot
from xdscore.protocol import (
    DeltaDiscoveryRequest,
    DeltaResponse,
    DiscoveryRequest,
    SotwResponse,
)
from xdscore.testing import DeltaPair, SotwPair
from xdscore.wire import make_node
from xdscore.wire._records import DeltaDiscoveryResponse, DiscoveryResponse

from ..factories import CL_A, CL_B, EP_A, EP_B

NODE = make_node(id="pair-test")
VIEW = Snapshot([CL_A, CL_B, EP_A, EP_B])


class LossySotwPair(SotwPair):
    """A SotW pair whose wire loses the last name of every request."""

    def _through_wire(self, request: DiscoveryRequest) -> DiscoveryRequest:
        arrived = super()._through_wire(request)
        return attrs.evolve(arrived, resource_names=arrived.resource_names[:-1])


class StaleSotwPair(SotwPair):
    """A SotW pair whose wire delivers the body of the first resource in place of every other."""

    def _to_client(self, response: SotwResponse | DeltaResponse) -> DiscoveryResponse:
        arrived = super()._to_client(response)
        first, *rest = arrived.resources
        return attrs.evolve(
            arrived, resources=(first, *(attrs.evolve(r, body=first.body) for r in rest))
        )


class ForgetfulDeltaPair(DeltaPair):
    """A Delta pair whose wire drops every removal."""

    def _to_client(self, response: SotwResponse | DeltaResponse) -> DeltaDiscoveryResponse:
        return attrs.evolve(super()._to_client(response), removed_resources=())


def test_pairs_pass_what_the_machines_send() -> None:
    sotw = SotwPair(lambda: VIEW, node=NODE)
    sotw.send(sotw.client.watch(CLUSTER, None))
    sotw.send(sotw.client.watch(ENDPOINT, ["a", "b"]))
    sotw.settle()
    assert set(sotw.client.holds(ENDPOINT)) == {"a", "b"}
    delta = DeltaPair(lambda: VIEW, node=NODE)
    delta.send(delta.client.subscribe(ENDPOINT, ["a", "b", "gone"]))
    delta.settle()
    assert set(delta.client.holds(ENDPOINT)) == {"a", "b"}


def test_a_request_that_arrives_changed_fails_the_test() -> None:
    pair = LossySotwPair(lambda: VIEW, node=NODE)
    with pytest.raises(AssertionError, match=r"request arrived other than it was sent") as caught:
        pair.send(pair.client.watch(ENDPOINT, ["a", "b"]))
    assert "resource_names: sent ('a', 'b'), arrived ('a',)" in str(caught.value)
    assert not pair.requests


def test_a_response_whose_resources_arrive_changed_fails_the_test() -> None:
    pair = StaleSotwPair(lambda: VIEW, node=NODE)
    pair.send(pair.client.watch(CLUSTER, None))
    pair.deliver_request()
    with pytest.raises(AssertionError, match=r"StaleSotwPair: a response arrived") as caught:
        pair.poll()
    assert "resources: sent" in str(caught.value)


def test_a_delta_response_that_loses_its_removals_fails_the_test() -> None:
    pair = ForgetfulDeltaPair(lambda: VIEW, node=NODE)
    request = pair.client.subscribe(ENDPOINT, ["a", "gone"])
    assert isinstance(request, DeltaDiscoveryRequest)
    pair.send(request)
    pair.deliver_request()
    with pytest.raises(AssertionError, match=r"removed_resources: sent \('gone',\), arrived \(\)"):
        pair.poll()
