"""Turning user-supplied resources (protobuf, betterproto2 or bytes) into :class:`Resource`.

Everything here runs once per resource version when a snapshot is built, never per stream.
betterproto2 messages (``envoy-data-plane``, the ``xdscore[betterproto]`` extra) are
accepted for convenience: they are serialised once with their own encoder and then decoded
by the protobuf runtime, which gives deterministic bytes and a fast typed message for
reference analysis.
"""

from __future__ import annotations

import importlib
from typing import Any

from google.protobuf import json_format, symbol_database
from google.protobuf.message import DecodeError, Message

from ._resource import Resource
from ._typeurls import ENDPOINT, SECRET, TYPE_URL_PREFIX, type_info

__all__ = [
    "decode_resource",
    "import_all_protos",
    "make_resource",
    "message_class",
    "REDACTED",
    "redacted",
    "resource_json",
    "resource_name",
]

_NAME_FIELDS = {ENDPOINT: "cluster_name"}


def message_class(type_url: str) -> type[Message]:
    """The protobuf class for ``type_url``, importing its ``xds-protos`` module on demand."""
    full_name = type_url.removeprefix(TYPE_URL_PREFIX)
    database = symbol_database.Default()
    try:
        return database.GetSymbol(full_name)  # type: ignore[no-any-return]
    except KeyError:
        pass
    import_all_protos()
    try:
        return database.GetSymbol(full_name)  # type: ignore[no-any-return]
    except KeyError:
        raise KeyError(f"no protobuf message is known for type URL {type_url!r}") from None


_all_imported = False


def import_all_protos() -> None:
    """Register every Envoy, xDS and UDPA message (about 0.7 s, once per process)."""
    global _all_imported
    if _all_imported:
        return
    import pkgutil

    for package_name in ("envoy", "xds", "udpa", "validate"):
        try:
            package = importlib.import_module(package_name)
        except ImportError:
            continue
        for module in pkgutil.walk_packages(package.__path__, package_name + "."):
            if module.name.endswith("_pb2"):
                try:
                    importlib.import_module(module.name)
                except Exception:
                    continue
    _all_imported = True


def resource_name(type_url: str, message: Message) -> str:
    """The name a resource of ``type_url`` is known by (``cluster_name`` for endpoints)."""
    field = _NAME_FIELDS.get(type_url, "name")
    try:
        name = getattr(message, field)
    except AttributeError:
        raise ValueError(
            f"{type_info(type_url).short_name} resources have no {field!r} field; pass name="
        ) from None
    if not isinstance(name, str) or not name:
        raise ValueError(f"{type_url} resource has an empty {field!r}")
    return name


def has_own_name(type_url: str) -> bool:
    """Whether resources of ``type_url`` carry their name in a field of their own (an
    ``LbEndpoint`` does not: LEDS names it only in the Delta ``Resource`` wrapper)."""
    field = _NAME_FIELDS.get(type_url, "name")
    return field in message_class(type_url).DESCRIPTOR.fields_by_name


def decode_resource(type_url: str, body: bytes) -> Message:
    """Parse ``body`` as the protobuf message for ``type_url``."""
    cls = message_class(type_url)
    try:
        return cls.FromString(body)
    except DecodeError as exc:
        raise ValueError(f"bytes are not a valid {type_url}: {exc}") from None


REDACTED = "[redacted]"
"""What stands in for a private key, password or shared secret in dumps (as in Envoy's)."""
_SECRET_FIELDS = frozenset({"private_key", "password", "secret", "pkcs12", "keys"})


def resource_json(resource: Resource) -> dict[str, Any]:
    """``resource`` in the proto3 JSON mapping, with proto field names (as Envoy dumps it).

    The private parts of secrets (keys, passwords, shared secrets) read ``[redacted]``.
    """
    import_all_protos()
    message = decode_resource(resource.type_url, resource.body)
    document = dict(json_format.MessageToDict(message, preserving_proto_field_name=True))
    return _redact(document) if resource.type_url == SECRET else document


def redacted(resource: Resource) -> Resource:
    """``resource`` with the private parts of a secret replaced (other types unchanged)."""
    if resource.type_url != SECRET:
        return resource
    message = message_class(SECRET)()
    json_format.ParseDict(resource_json(resource), message)
    return Resource(
        type_url=SECRET,
        name=resource.name,
        body=message.SerializeToString(deterministic=True),
        version=resource.version,
    )


def holds_private_parts(resource: Resource) -> bool:
    """Whether ``resource`` is a secret with private parts: a private key, a password, a
    shared secret (what :func:`resource_json` redacts)."""
    if resource.type_url != SECRET:
        return False
    import_all_protos()
    message = decode_resource(SECRET, resource.body)
    return _private(json_format.MessageToDict(message, preserving_proto_field_name=True))


def _private(document: Any) -> bool:
    if isinstance(document, dict):
        return any(
            (key in _SECRET_FIELDS and bool(value)) or _private(value)
            for key, value in document.items()
        )
    if isinstance(document, list):
        return any(_private(item) for item in document)
    return False


def _redact(document: Any) -> Any:
    if isinstance(document, dict):
        return {
            key: _blank(value) if key in _SECRET_FIELDS else _redact(value)
            for key, value in document.items()
        }
    if isinstance(document, list):
        return [_redact(item) for item in document]
    return document


def _blank(value: Any) -> Any:
    """A data source (``inline_bytes``, ``filename``, ...) with every value redacted."""
    if isinstance(value, dict):
        return {key: _blank(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_blank(item) for item in value]
    return REDACTED if isinstance(value, str) else value


def _betterproto_type_url(message: Any) -> str:
    try:
        from envoy_data_plane.message_pool import default_message_pool
    except ImportError:
        raise ImportError(
            f"{type(message).__qualname__} is a betterproto2 message: resources given as "
            "betterproto2 messages need envoy-data-plane, which xdscore's betterproto extra "
            "installs: pip install 'xdscore[betterproto]'"
        ) from None

    try:
        return str(default_message_pool.type_to_url[type(message)])
    except KeyError:
        raise TypeError(f"{type(message).__qualname__} is not a registered message") from None


def make_resource(
    message: Message | bytes | Any,
    *,
    type_url: str | None = None,
    name: str | None = None,
    aliases: tuple[str, ...] = (),
    ttl: float | None = None,
) -> Resource:
    """Build a :class:`Resource` from a protobuf message, a betterproto2 message or bytes.

    ``type_url`` is required for bytes; ``name`` defaults to the message's own name field.
    Only the encoded bytes are kept, not the message (at 100,000 endpoint assignments the
    decoded messages took 560 MB); :func:`decode_resource` gives it back.
    ``ttl`` (seconds) lets clients that support TTLs drop the resource when it lapses without
    a heartbeat (see :attr:`Resource.ttl`).
    """
    if isinstance(message, bytes | bytearray | memoryview):
        if type_url is None:
            raise TypeError("type_url= is required when the resource is given as bytes")
        body = bytes(message)
        if name is None:
            name = resource_name(type_url, decode_resource(type_url, body))
        return Resource(type_url=type_url, name=name, body=body, aliases=aliases, ttl=ttl)
    if hasattr(message, "_betterproto"):
        url = _betterproto_type_url(message)
        if type_url is not None and type_url != url:
            raise TypeError(f"message is a {url}, not a {type_url}")
        typed = decode_resource(url, bytes(message))
        return make_resource(typed, type_url=url, name=name, aliases=aliases, ttl=ttl)
    if isinstance(message, Message):
        url = TYPE_URL_PREFIX + message.DESCRIPTOR.full_name
        if type_url is not None and type_url != url:
            raise TypeError(f"message is a {url}, not a {type_url}")
        body = message.SerializeToString(deterministic=True)
        return Resource(
            type_url=url,
            name=name if name is not None else resource_name(url, message),
            body=body,
            aliases=aliases,
            ttl=ttl,
        )
    raise TypeError(
        f"cannot make a resource from {type(message).__qualname__}: "
        "pass a protobuf message, a betterproto2 message or bytes"
    )
