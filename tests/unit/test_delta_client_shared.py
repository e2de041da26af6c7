"""DeltaClient: what a response's resources say is worked out once for every client that
receives the same tuple; what depends on each client's holdings is still its own."""

from __future__ import annotations

from xdscore import ENDPOINT
from xdscore._memos import CLIENT_DELTA_RESPONSES
from xdscore.protocol import DeltaClient
from xdscore.wire import DeltaDiscoveryResponse, Resource, make_node

NODE = make_node(id="shared")


def resource(name: str, body: bytes) -> Resource:
    return Resource(type_url=ENDPOINT, name=name, body=body)


def client(*names: str) -> DeltaClient:
    machine = DeltaClient(node=NODE)
    machine.subscribe(ENDPOINT, names)
    return machine


def response(
    resources: tuple[Resource, ...], nonce: str, **fields: object
) -> DeltaDiscoveryResponse:
    return DeltaDiscoveryResponse(type_url=ENDPOINT, nonce=nonce, resources=resources, **fields)  # type: ignore[arg-type]


def test_clients_sharing_one_tuple_each_hold_it_and_ack() -> None:
    shared = (resource("a", b"1"), resource("b", b"2"))
    first, second = client("a", "b"), client("a", "b", "c")
    for n, machine in enumerate((first, second)):
        answer = machine.receive(response(shared, f"n{n}"))
        assert answer.error_detail is None
        assert answer.response_nonce == f"n{n}"
        assert {name: r.version for name, r in machine.holds(ENDPOINT).items()} == {
            "a": shared[0].version,
            "b": shared[1].version,
        }
    assert CLIENT_DELTA_RESPONSES.get((id(shared), ENDPOINT))[0] is shared  # type: ignore[index]
    state = second.type_state(ENDPOINT)
    assert state is not None
    assert state.requested["c"] is None


def test_a_repeated_name_is_rejected_for_every_client_of_the_tuple() -> None:
    shared = (resource("a", b"1"), resource("a", b"2"))
    for machine in (client("a"), client("a")):
        answer = machine.receive(response(shared, "x"))
        assert answer.error_detail is not None
        assert "duplicate resource name 'a'" in answer.error_detail.message
        assert machine.holds(ENDPOINT) == {}


def test_a_body_less_entry_is_a_heartbeat_only_for_the_client_that_holds_it() -> None:
    held = resource("a", b"1")
    holder, other = client("a"), client("a")
    holder.receive(response((held, resource("b", b"0")), "h0"))
    beat = Resource(type_url=ENDPOINT, name="a", body=b"", version=held.version, name_only=True)
    shared = (beat, resource("z", b"9"))
    assert holder.receive(response(shared, "h1")).error_detail is None
    assert holder.holds(ENDPOINT)["a"].version == held.version
    refused = other.receive(response(shared, "o1"))
    assert refused.error_detail is not None
    assert "no body for 'a'" in refused.error_detail.message


def test_a_removal_of_a_name_also_updated_is_rejected() -> None:
    shared = (resource("a", b"1"), resource("b", b"2"))
    answer = client("a", "b").receive(response(shared, "r", removed_resources=("b",)))
    assert answer.error_detail is not None
    assert "'b' is both updated and removed" in answer.error_detail.message


def test_names_not_asked_for_take_the_general_path() -> None:
    machine = DeltaClient(node=NODE)
    machine.subscribe(ENDPOINT, ["*"])
    shared = (resource("a", b"1"), resource("b", b"2"))
    assert machine.receive(response(shared, "w")).error_detail is None
    state = machine.type_state(ENDPOINT)
    assert state is not None
    assert set(state.wildcard_received) == {"a", "b"}
    assert state.requested == {}
