"""Certificates for the TLS tests, made with ``cryptography`` (no ``openssl`` command).

A :class:`CertificateAuthority` issues what the tests need: a server certificate for an IP
address (``serverAuth``) and client certificates carrying a SPIFFE ID as their URI SAN
(``clientAuth``), valid now or already expired. A certificate "from another CA" is one a
second, unrelated authority issued. Keys are ECDSA P-256 (quick to make, and accepted by
Envoy, gRPC and Python's ``ssl``). :meth:`Issued.write` and
:meth:`CertificateAuthority.write` put PEM files in a directory.

The certificates follow what strict verifiers ask for: the CA has critical basic
constraints and key usage, every leaf names its issuer's key (authority key identifier)
and its own, and has a common name.
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Sequence
from pathlib import Path

import attrs
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["CertificateAuthority", "Issued", "PemFiles", "serial_of"]

_LIFETIME = datetime.timedelta(days=1)
_SKEW = datetime.timedelta(minutes=5)
"""Certificates start a little in the past, so that clock steps do not make them future."""


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _key_usage(*, ca: bool) -> x509.KeyUsage:
    """Signatures; for a CA, signing certificates and CRLs too."""
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=ca,
        crl_sign=ca,
        encipher_only=False,
        decipher_only=False,
    )


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def serial_of(pem_or_der: bytes) -> int:
    """The serial number of a certificate given as PEM or DER bytes."""
    if pem_or_der.lstrip().startswith(b"-----BEGIN"):
        return x509.load_pem_x509_certificate(pem_or_der).serial_number
    return x509.load_der_x509_certificate(pem_or_der).serial_number


@attrs.frozen
class PemFiles:
    """Where :meth:`Issued.write` put a certificate and its key."""

    cert: Path
    key: Path


@attrs.frozen
class Issued:
    """A certificate and its private key."""

    certificate: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    @property
    def serial(self) -> int:
        return self.certificate.serial_number

    @property
    def cert_pem(self) -> bytes:
        return self.certificate.public_bytes(serialization.Encoding.PEM)

    @property
    def key_pem(self) -> bytes:
        return _key_pem(self.key)

    def write(self, directory: Path, name: str) -> PemFiles:
        """Write ``NAME.crt`` and ``NAME.key`` (PEM) into ``directory``."""
        files = PemFiles(cert=directory / f"{name}.crt", key=directory / f"{name}.key")
        files.cert.write_bytes(self.cert_pem)
        files.key.write_bytes(self.key_pem)
        return files


class CertificateAuthority:
    """A self-signed CA that issues server and client certificates."""

    def __init__(self, name: str = "xdscore test CA") -> None:
        self.name = name
        self.key = _new_key()
        now = datetime.datetime.now(datetime.UTC)
        public = self.key.public_key()
        self.certificate = (
            x509.CertificateBuilder()
            .subject_name(_name(name))
            .issuer_name(_name(name))
            .public_key(public)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _SKEW)
            .not_valid_after(now + _LIFETIME)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(_key_usage(ca=True), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
            .sign(self.key, hashes.SHA256())
        )

    @property
    def pem(self) -> bytes:
        """The CA certificate, PEM: what clients and servers trust."""
        return self.certificate.public_bytes(serialization.Encoding.PEM)

    def write(self, directory: Path, name: str = "ca") -> Path:
        """Write the CA certificate as ``NAME.crt`` into ``directory``; its path."""
        path = directory / f"{name}.crt"
        path.write_bytes(self.pem)
        return path

    def issue(
        self,
        common_name: str,
        *,
        sans: Sequence[x509.GeneralName],
        usage: x509.ObjectIdentifier,
        expired: bool = False,
    ) -> Issued:
        """A leaf certificate for a new key. ``expired``: it ended an hour ago."""
        key = _new_key()
        now = datetime.datetime.now(datetime.UTC)
        if expired:
            not_before, not_after = now - _LIFETIME, now - datetime.timedelta(hours=1)
        else:
            not_before, not_after = now - _SKEW, now + _LIFETIME
        public = key.public_key()
        certificate = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name))
            .issuer_name(self.certificate.subject)
            .public_key(public)
            .serial_number(x509.random_serial_number())
            .not_valid_before(not_before)
            .not_valid_after(not_after)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(_key_usage(ca=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(x509.SubjectAlternativeName(list(sans)), critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()),
                critical=False,
            )
            .sign(self.key, hashes.SHA256())
        )
        return Issued(certificate=certificate, key=key)

    def server(self, ip: str = "127.0.0.1", *, expired: bool = False) -> Issued:
        """A server certificate (``serverAuth``) for the IP address ``ip``."""
        return self.issue(
            f"xdscore test server {ip}",
            sans=[x509.IPAddress(ipaddress.ip_address(ip))],
            usage=ExtendedKeyUsageOID.SERVER_AUTH,
            expired=expired,
        )

    def client(self, spiffe_id: str, *, expired: bool = False) -> Issued:
        """A client certificate (``clientAuth``) whose one URI SAN is ``spiffe_id``."""
        return self.issue(
            spiffe_id.rsplit("/", 1)[-1] or "client",
            sans=[x509.UniformResourceIdentifier(spiffe_id)],
            usage=ExtendedKeyUsageOID.CLIENT_AUTH,
            expired=expired,
        )
