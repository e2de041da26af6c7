"""TLS for the xDS port: a server context with safe defaults, reloaded when its files change.

[`server_ssl_context`][xdscore.transport.server_ssl_context] builds the ``ssl.SSLContext`` a
transport listens with: TLS 1.2 at least, ALPN ``h2`` (gRPC runs on HTTP/2), and, given a client CA,
mutual TLS required. [`CertificateFiles`][xdscore.transport.CertificateFiles] keeps such a context
in step with its certificate and key files: when they change, the new pair is loaded into the same
context, so new connections get the new certificate while established streams go on; a pair that
does not load is refused (logged) and the old one stays. A changed client CA bundle is added to the
trusted set: removing a CA from the trusted set needs a restart.

`peer_identity` reads the verified identity of a TLS peer from its certificate.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio
import watchfiles

from ..server._authorization import PeerIdentity

__all__ = ["CertificateFiles", "PeerIdentity", "peer_identity", "server_ssl_context"]

log = logging.getLogger("xdscore.transport")

_SHORT_NAMES = {
    "commonName": "CN",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "countryName": "C",
    "stateOrProvinceName": "ST",
    "localityName": "L",
}


def peer_identity(certificate: Mapping[str, Any] | None) -> PeerIdentity | None:
    """The identity in ``ssl``'s decoded peer certificate (``getpeercert()``), if any."""
    if not certificate:
        return None
    sans = certificate.get("subjectAltName", ())
    subject = ",".join(
        f"{_SHORT_NAMES.get(key, key)}={value}"
        for rdn in certificate.get("subject", ())
        for key, value in rdn
    )
    return PeerIdentity(
        uri_sans=tuple(value for kind, value in sans if kind == "URI"),
        dns_sans=tuple(value for kind, value in sans if kind == "DNS"),
        subject=subject,
    )


def server_ssl_context(
    cert_file: str | Path, key_file: str | Path, *, client_ca: str | Path | None = None
) -> ssl.SSLContext:
    """A server context: TLS 1.2 or later, ALPN h2, client certificates required with a CA.

    Raises ``ssl.SSLError`` or ``OSError`` when the files do not load.
    """
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.set_alpn_protocols(["h2"])
    context.load_cert_chain(cert_file, key_file)
    if client_ca is not None:
        context.load_verify_locations(client_ca)
        context.verify_mode = ssl.CERT_REQUIRED
    return context


class CertificateFiles:
    """A server context kept in step with its files;
    [`watch`][xdscore.transport.CertificateFiles.watch] reloads on change."""

    def __init__(
        self, cert_file: str | Path, key_file: str | Path, *, client_ca: str | Path | None = None
    ) -> None:
        self.cert_file = Path(cert_file)
        self.key_file = Path(key_file)
        self.client_ca = Path(client_ca) if client_ca is not None else None
        self.context = server_ssl_context(cert_file, key_file, client_ca=client_ca)
        """The context to listen with; reloading changes it in place."""
        self.reloads = 0
        """How many times new files were loaded."""

    def reload(self) -> bool:
        """Load the files again into [`context`][xdscore.transport.CertificateFiles.context]; False
        (and logged) if they do not load."""
        try:
            server_ssl_context(self.cert_file, self.key_file, client_ca=self.client_ca)
            self.context.load_cert_chain(self.cert_file, self.key_file)
            if self.client_ca is not None:
                self.context.load_verify_locations(self.client_ca)
        except (ssl.SSLError, OSError) as exc:
            log.error("refused new TLS files (%s); still using the previous ones", exc)
            return False
        self.reloads += 1
        log.info("loaded new TLS certificate from %s", self.cert_file)
        return True

    async def watch(self, *, quiet_ms: int = 200, stop: anyio.Event | None = None) -> None:
        """Reload whenever one of the files changes (after ``quiet_ms`` of quiet); runs until
        cancelled. The directories holding the files are watched, so that an atomic rename
        (how certificate managers replace files) is seen. ``stop`` ends it at once."""
        files = {self.cert_file, self.key_file}
        if self.client_ca is not None:
            files.add(self.client_ca)
        # The directories the paths name, not only those their symlinks lead to now: a
        # Kubernetes secret volume swaps its ``..data`` link to a new directory and deletes
        # the old one, so a watch on the old target would see one rotation, then nothing.
        targets = {path.absolute() for path in files} | {path.resolve() for path in files}
        directories = sorted({path.parent for path in targets})

        def relevant(change: watchfiles.Change, path: str) -> bool:
            changed = Path(path)
            return (
                changed in targets or changed.resolve() in targets or changed.name.startswith("..")
            )

        async for _changes in watchfiles.awatch(
            *directories,
            watch_filter=relevant,
            step=quiet_ms,
            debounce=quiet_ms * 5,
            stop_event=stop,
        ):
            # On the event loop's thread: the context must not change under a handshake.
            self.reload()
