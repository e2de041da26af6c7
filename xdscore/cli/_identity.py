"""``xdscore serve``'s TLS and identity flags: the certificate files, the node binding to
SPIFFE IDs, the operator identities of CSDS, and the check that the binding covers every node
field ``scopes.yaml`` selects on (docs/security.md)."""

from __future__ import annotations

import argparse
import logging
import ssl
from collections.abc import Callable
from pathlib import Path

import attrs

from ..cache._scoped import node_field
from ..config import SCOPES_FILE, ScopesFile
from ..server import SpiffeNodePolicy, SpiffeOperators
from ..transport import CertificateFiles
from ..wire import Node
from ._common import readable, ssl_problem

__all__ = ["Security", "add_arguments", "binding_check", "log_scopes", "security"]

log = logging.getLogger("xdscore")


def add_arguments(serve: argparse.ArgumentParser) -> None:
    """Register the TLS and identity flags of ``serve``."""
    tls = serve.add_argument_group(
        "TLS and identity",
        "Without --tls-cert the server listens in plaintext and any client that can connect "
        "reads every resource, private keys in secrets included.",
    )
    tls.add_argument("--tls-cert", type=Path, metavar="FILE", help="server certificate (PEM)")
    tls.add_argument("--tls-key", type=Path, metavar="FILE", help="its private key (PEM)")
    tls.add_argument(
        "--client-ca",
        type=Path,
        metavar="FILE",
        help="CA bundle for client certificates: mutual TLS, a client certificate required",
    )
    tls.add_argument(
        "--node-from-spiffe",
        nargs=2,
        metavar=("SPIFFE_TEMPLATE", "NODE_TEMPLATE"),
        help="bind each node to its certificate: the node id must be NODE_TEMPLATE filled "
        "from the SPIFFE ID matched by SPIFFE_TEMPLATE, e.g. "
        "'spiffe://{trust_domain}/ns/{namespace}/sa/{account}' '{account}.{namespace}' "
        "(needs --client-ca); others are denied with PERMISSION_DENIED",
    )
    tls.add_argument(
        "--node-field",
        choices=("id", "cluster"),
        default="id",
        help="which node field --node-from-spiffe checks (default id)",
    )
    tls.add_argument(
        "--bind-field",
        action="append",
        default=[],
        type=_binding,
        metavar="FIELD=TEMPLATE",
        help="with --node-from-spiffe, bind another node field too: it must be TEMPLATE "
        "filled from the same SPIFFE ID, e.g. 'cluster={namespace}' or "
        "'metadata.tier={account}'; repeatable. Every field scopes.yaml selects nodes by "
        "must be bound, or serve refuses to start",
    )
    tls.add_argument(
        "--operator-id",
        action="append",
        default=[],
        metavar="SPIFFE_ID",
        help="a client certificate with this SPIFFE ID ('*' matches within one path "
        "segment: 'spiffe://example.org/ns/ops/sa/*') may read every node's status over "
        "CSDS; every other client is told about its own node only (needs --client-ca); "
        "repeatable",
    )


def binding_check(authorize: SpiffeNodePolicy | None) -> Callable[[ScopesFile], str | None]:
    """What refuses scopes that select nodes by a field the node binding leaves free: a
    client free to claim it could choose its scope, and read what another tenant's scope
    sees. Without a binding there is nothing to check (any client claims any node)."""

    def check(scopes: ScopesFile) -> str | None:
        if authorize is None:
            return None
        unbound = scopes.unbound(authorize.bound_fields)
        if not unbound:
            return None
        selecting = "; ".join(
            f"scope {name!r} selects nodes by {_words(fields)}" for name, fields in unbound
        )
        free = sorted({field for _, fields in unbound for field in fields})
        example = "cluster={namespace}" if "cluster" in free else f"{free[0]}=TEMPLATE"
        return (
            f"{selecting}, but --node-from-spiffe binds only the "
            f"{_words(sorted(authorize.bound_fields))}: any client with a valid certificate "
            f"could claim any {_words(free)} and be served another tenant's scope. Bind "
            f"{'it' if len(free) == 1 else 'them'} too (--bind-field {example}), or select "
            "nodes by the bound fields only"
        )

    return check


def _words(fields: list[str]) -> str:
    """Node fields as a phrase: ``node id and cluster``."""
    words = ["node id" if field == "id" else field for field in fields]
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"


def log_scopes(scopes: ScopesFile, authorize: SpiffeNodePolicy | None) -> None:
    if not scopes.scopes:
        return
    default = scopes.default
    unselected = f"is in scope {default!r}" if isinstance(default, str) else f"gets {default.value}"
    log.info(
        "serving %d scope(s) from %s; a node no scope selects %s",
        len(scopes.scopes),
        SCOPES_FILE,
        unselected,
    )
    if authorize is None:
        log.warning(
            "%s selects nodes by what they claim, and nothing binds a node to a client "
            "certificate: any client that can connect can choose its scope "
            "(see --node-from-spiffe)",
            SCOPES_FILE,
        )


def _binding(text: str) -> tuple[str, str]:
    """An argparse type: ``FIELD=TEMPLATE`` as a pair."""
    field, sep, template = text.partition("=")
    if not sep or not template:
        raise argparse.ArgumentTypeError(f"expected FIELD=TEMPLATE, got {text!r}")
    try:
        node_field(Node(), field)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return field, template


@attrs.frozen
class Security:
    """What the TLS and identity flags ask for."""

    certificates: CertificateFiles | None = None
    authorize: SpiffeNodePolicy | None = None
    operators: SpiffeOperators | None = None


def security(args: argparse.Namespace) -> Security:
    """The TLS files to serve with, the node policy and the operator identities the flags
    ask for; :class:`ValueError` names the flag at fault."""
    if (args.tls_cert is None) != (args.tls_key is None):
        raise ValueError("give both --tls-cert and --tls-key")
    if args.client_ca is not None and args.tls_cert is None:
        raise ValueError("--client-ca needs --tls-cert and --tls-key")
    authorize: SpiffeNodePolicy | None = None
    if args.node_from_spiffe is not None:
        if args.client_ca is None:
            raise ValueError("--node-from-spiffe needs --client-ca (mutual TLS)")
        spiffe_id, node = args.node_from_spiffe
        authorize = SpiffeNodePolicy(spiffe_id, node, args.node_field, also=dict(args.bind_field))
    elif args.bind_field:
        raise ValueError("--bind-field needs --node-from-spiffe")
    operators: SpiffeOperators | None = None
    if args.operator_id:
        if args.client_ca is None:
            raise ValueError("--operator-id needs --client-ca (mutual TLS)")
        operators = SpiffeOperators(args.operator_id)
    if args.tls_cert is None:
        return Security()
    flags = {"--tls-cert": args.tls_cert, "--tls-key": args.tls_key}
    if args.client_ca is not None:
        flags["--client-ca"] = args.client_ca
    for flag, path in flags.items():
        readable(flag, path)
    probe = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        probe.load_cert_chain(args.tls_cert, args.tls_key)
    except ssl.SSLError as exc:
        raise ValueError(
            f"--tls-cert {args.tls_cert} and --tls-key {args.tls_key} are not a PEM "
            f"certificate and its key: {ssl_problem(exc)}"
        ) from None
    if args.client_ca is not None:
        try:
            probe.load_verify_locations(args.client_ca)
        except ssl.SSLError as exc:
            raise ValueError(
                f"--client-ca {args.client_ca} holds no PEM CA certificate: {ssl_problem(exc)}"
            ) from None
    files = CertificateFiles(args.tls_cert, args.tls_key, client_ca=args.client_ca)
    return Security(files, authorize, operators)
