"""Resource builders, request builders and small helpers shared by the test modules.

``xdscore.builders`` builds the resources most tests need (EDS clusters, load assignments,
HTTP listeners, route configurations); this module adds what only tests need (TLS clusters,
SDS secrets, packed ``Any`` messages), the fixtures the state-machine tests share (a node,
an error, a handful of resources), request records for both protocols, and
:func:`wait_until`, the one polled wait under a deadline for state that has no event.

Helpers that mean something different on each protocol (what an ACK repeats, what settling
a machine means) stay with the tests of that protocol (``tests/unit/_sotw.py``,
``tests/unit/_delta.py``).
"""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Protocol, TypeVar

import anyio
from envoy.config.cluster.v3 import cluster_pb2
from envoy.extensions.transport_sockets.tls.v3 import secret_pb2, tls_pb2
from google.protobuf import any_pb2
from google.protobuf.message import Message

from xdscore import make_resource
from xdscore.builders import eds_cluster, http_listener, load_assignment, route_configuration
from xdscore.protocol import (
    DeltaDiscoveryRequest,
    DeltaResponse,
    DiscoveryRequest,
    ErrorDetail,
    SotwResponse,
)
from xdscore.wire import Node, type_info

__all__ = [
    "CL_A",
    "CL_A2",
    "CL_B",
    "CL_C",
    "EP_A",
    "EP_A2",
    "EP_A3",
    "EP_B",
    "EP_B2",
    "EP_C",
    "ERROR",
    "LS_1",
    "LS_2",
    "NODE",
    "OTHER_NODE",
    "RC_1",
    "RC_2",
    "delta_ack",
    "delta_nack",
    "delta_request",
    "nonce_source",
    "of_type",
    "only",
    "pack",
    "secret",
    "short",
    "sotw_ack",
    "sotw_nack",
    "sotw_request",
    "tls_cluster",
    "version",
    "wait_until",
]

T = TypeVar("T")

# -- fixtures ------------------------------------------------------------------------------

NODE = Node(id="node-1", raw=b"\n\x06node-1")
"""The node of the state-machine tests (``raw`` is its encoding: ``id`` only)."""
OTHER_NODE = Node(id="node-2", raw=b"\n\x06node-2")
ERROR = ErrorDetail(code=13, message="rejected by the test")
"""The ``error_detail`` of the tests' NACKs."""

CL_A = eds_cluster("a")
CL_A2 = eds_cluster("a", connect_timeout=5.0)
"""Cluster ``a`` changed (another connect timeout)."""
CL_B = eds_cluster("b")
CL_C = eds_cluster("c")
EP_A = load_assignment("a", [("10.0.0.1", 80)])
EP_A2 = load_assignment("a", [("10.0.0.2", 80)])
EP_A3 = load_assignment("a", [("10.0.0.3", 80)])
EP_B = load_assignment("b", [("10.0.1.1", 80)])
EP_B2 = load_assignment("b", [("10.0.1.2", 80)])
EP_C = load_assignment("c", [("10.0.2.1", 80)])
LS_1 = http_listener("l1", 10001, "r1")
LS_2 = http_listener("l2", 10002, "r2")
RC_1 = route_configuration("r1", [("/", "a")])
"""Route configuration ``r1``: everything to cluster ``a``."""
RC_2 = route_configuration("r2", [("/", "b")])


def nonce_source(prefix: str = "n") -> Callable[[], str]:
    """A server machine's ``nonce_source``: ``n1``, ``n2``, ... (with ``prefix``)."""
    counter = itertools.count(1)
    return lambda: f"{prefix}{next(counter)}"


def version(message: Message) -> str:
    """The version xdscore gives ``message`` (a hash of its deterministic encoding)."""
    return make_resource(message).version


def short(type_url: str) -> str:
    """The type's short name, for assertion messages."""
    return type_info(type_url).short_name


# -- resources xdscore.builders does not build ---------------------------------------------


def pack(message: Message) -> any_pb2.Any:
    """``message`` in a ``google.protobuf.Any``."""
    packed = any_pb2.Any()
    packed.Pack(message)
    return packed


def tls_cluster(
    name: str,
    *,
    certificates: Iterable[str] = (),
    validation: str | None = None,
    sni: str = "",
) -> cluster_pb2.Cluster:
    """An EDS cluster whose upstream TLS context takes its certificates (and its validation
    context, if ``validation``) from the SDS secrets of those names."""
    context = tls_pb2.UpstreamTlsContext(sni=sni)
    common = context.common_tls_context
    for certificate in certificates:
        common.tls_certificate_sds_secret_configs.add(name=certificate)
    if validation is not None:
        common.validation_context_sds_secret_config.name = validation
    cluster = eds_cluster(name)
    cluster.transport_socket.name = "envoy.transport_sockets.tls"
    cluster.transport_socket.typed_config.CopyFrom(pack(context))
    return cluster


def secret(name: str, chain: str = "cert") -> secret_pb2.Secret:
    """An SDS secret holding a TLS certificate whose chain is ``chain`` (a new ``chain`` is a
    new version)."""
    value = secret_pb2.Secret(name=name)
    value.tls_certificate.certificate_chain.inline_string = chain
    return value


# -- requests, as the state machines receive them ------------------------------------------


def sotw_request(
    type_url: str,
    names: Iterable[str] = (),
    *,
    version: str = "",
    nonce: str = "",
    error: ErrorDetail | None = None,
    node: Node | None = None,
) -> DiscoveryRequest:
    """A SotW request record."""
    return DiscoveryRequest(
        type_url=type_url,
        version_info=version,
        resource_names=tuple(names),
        response_nonce=nonce,
        error_detail=error,
        node=node,
    )


def sotw_ack(response: SotwResponse, names: Iterable[str] = ()) -> DiscoveryRequest:
    """The ACK of ``response``: its nonce and version, repeating the subscription ``names``."""
    return sotw_request(
        response.type_url, names, version=response.version_info, nonce=response.nonce
    )


def sotw_nack(
    response: SotwResponse,
    names: Iterable[str] = (),
    *,
    held: str = "",
    error: ErrorDetail = ERROR,
) -> DiscoveryRequest:
    """The NACK of ``response``: its nonce, ``error``, and the version still ``held``."""
    return sotw_request(response.type_url, names, version=held, nonce=response.nonce, error=error)


def delta_request(
    type_url: str,
    subscribe: Iterable[str] = (),
    unsubscribe: Iterable[str] = (),
    *,
    initial: Mapping[str, str] | None = None,
    nonce: str = "",
    error: ErrorDetail | None = None,
    node: Node | None = None,
) -> DeltaDiscoveryRequest:
    """A Delta request record."""
    return DeltaDiscoveryRequest(
        type_url=type_url,
        resource_names_subscribe=tuple(subscribe),
        resource_names_unsubscribe=tuple(unsubscribe),
        initial_resource_versions=dict(initial or {}),
        response_nonce=nonce,
        error_detail=error,
        node=node,
    )


def delta_ack(
    response: DeltaResponse, subscribe: Iterable[str] = (), unsubscribe: Iterable[str] = ()
) -> DeltaDiscoveryRequest:
    """The ACK of ``response`` (its nonce), changing the subscription by the lists given."""
    return delta_request(response.type_url, subscribe, unsubscribe, nonce=response.nonce)


def delta_nack(
    response: DeltaResponse,
    subscribe: Iterable[str] = (),
    unsubscribe: Iterable[str] = (),
    *,
    error: ErrorDetail = ERROR,
) -> DeltaDiscoveryRequest:
    """The NACK of ``response``: its nonce and ``error``."""
    return delta_request(
        response.type_url, subscribe, unsubscribe, nonce=response.nonce, error=error
    )


# -- reading what the machines said --------------------------------------------------------


class _Typed(Protocol):
    @property
    def type_url(self) -> str: ...


_R = TypeVar("_R", bound=_Typed)


def only(responses: Sequence[_R], type_url: str | None = None) -> _R:
    """The one response of a poll (of ``type_url``, if given)."""
    assert len(responses) == 1, responses
    if type_url is not None:
        assert responses[0].type_url == type_url, responses[0]
    return responses[0]


def of_type(events: Iterable[object], cls: type[T]) -> list[T]:
    """The events that are instances of ``cls``, in order."""
    return [event for event in events if isinstance(event, cls)]


# -- waiting -------------------------------------------------------------------------------


async def wait_until(
    condition: Callable[[], bool | Awaitable[bool]],
    *,
    timeout: float = 5.0,
    interval: float = 0.01,
    what: str = "the condition",
) -> None:
    """Wait until ``condition()`` (sync or async) holds, checking every ``interval`` seconds;
    ``TimeoutError`` naming ``what`` after ``timeout``. For state that has no event to wait
    on (a server's stream table, another process's answers)."""
    try:
        with anyio.fail_after(timeout):
            while True:
                result = condition()
                if inspect.isawaitable(result):
                    result = await result
                if result:
                    return
                await anyio.sleep(interval)
    except TimeoutError:
        raise TimeoutError(f"timed out after {timeout} s waiting for {what}") from None
