"""Small readings of responses the cases share."""

from __future__ import annotations

from collections.abc import Iterable

from ...wire._records import DeltaDiscoveryResponse, DiscoveryResponse
from ._trace import short_type
from ._verdicts import CaseFailed

__all__ = ["check", "missing_name", "names", "one_line"]

Response = DiscoveryResponse | DeltaDiscoveryResponse


def names(response: Response) -> list[str]:
    """The names of the resources of the response's type it carries with a body, in order,
    each once (a resource of another type, or a name twice, is for the cases that check
    for them)."""
    kind = response.type_url
    return list(
        dict.fromkeys(r.name for r in response.resources if r.type_url == kind and not r.name_only)
    )


def one_line(response: Response) -> str:
    """A response, short: its type, nonce and names."""
    kind = short_type(response.type_url)
    text = f"{kind} response (nonce {response.nonce!r}) with {names(response)}"
    if isinstance(response, DeltaDiscoveryResponse) and response.removed_resources:
        text += f" removing {list(response.removed_resources)}"
    return text


def check(condition: bool, message: str) -> None:
    """Fail with ``message`` unless ``condition``."""
    if not condition:
        raise CaseFailed(message)


def missing_name(taken: Iterable[str], stem: str = "xdscore-conformance-missing") -> str:
    """A name no served resource has."""
    known = set(taken)
    index = 0
    while f"{stem}-{index}" in known:
        index += 1
    return f"{stem}-{index}"
